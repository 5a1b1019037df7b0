//! # ruststream-tools
//!
//! The `ruststream` command: an operator's tools for services built on ruststream.
//!
//! ```text
//! ruststream dlq list    <STREAM> [filters] [--json]
//! ruststream dlq show    <STREAM> <SEQ> [--json]
//! ruststream dlq replay  <STREAM> [filters] [--to SUBJECT] [--dry-run] [--rate N] [--delete]
//! ruststream dlq purge   <STREAM> [filters] [--yes]
//! ```
//!
//! Filters: `--reason`, `--mount`, `--subject`, `--since`, `--until`, `--from-seq`,
//! `--unmarked`. It connects as the runtime does: `--url`/`NATS_URL` (one or several
//! servers, credentials in the URL taken out and handed to async-nats), `--creds`,
//! `--user`/`--password`, `--token`, `--tls-ca`, `--tls-cert`/`--tls-key`; it never prints
//! a URL, a credential or an option's value.
//!
//! The work is done by `ruststream_adapter::dead_letters` (which a service can call itself);
//! this crate parses the command line and prints. [`run`] is the whole command, with its
//! input and outputs given, so that tests run it in the process.
//!
//! Exit status: 0 done; 1 refused or failed (bad input, no such stream, a filter that matches
//! nothing, a replay stopped half-way: the message says how to resume); 2 a command line
//! that does not parse.

mod args;
mod connect;
mod dlq;
mod render;

use std::ffi::OsString;
use std::io::{BufRead, Write};

use clap::Parser;

pub use args::{Cli, Command, Connection, Dlq, Filter};

/// Why a command failed: printed as `error: <message>`, exit status 1.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// No connection to the servers.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// What the dead-letter library refused or could not do.
    #[error(transparent)]
    DeadLetters(#[from] ruststream_adapter::dead_letters::DeadLetterError),
    /// The command was refused before anything was done (a purge not confirmed).
    #[error("{0}")]
    Refused(String),
    /// A replay stopped at a dead letter; the summary was printed.
    #[error("{0}")]
    Stopped(String),
    /// Writing the output failed (a closed pipe).
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

/// Where a command reads and writes: its output (`out`), messages and progress (`err`), the
/// answer to a confirmation (`input`), and whether `err` is a terminal (a progress bar then,
/// plain progress lines otherwise).
pub struct Io<'a> {
    /// What the command prints: the dead letters, the summary.
    pub out: &'a mut dyn Write,
    /// Messages, progress and errors.
    pub err: &'a mut dyn Write,
    /// Where a confirmation is read.
    pub input: &'a mut dyn BufRead,
    /// Whether `err` is a terminal.
    pub terminal: bool,
}

/// Runs the command line `args` (the program's name first), and returns its exit status (see
/// the crate docs).
pub async fn run(
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    out: &mut dyn Write,
    err: &mut dyn Write,
    input: &mut dyn BufRead,
    terminal: bool,
) -> u8 {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let text = e.render().to_string();
            match e.use_stderr() {
                true => {
                    let _ = write!(err, "{text}");
                    return 2;
                }
                // --help, --version
                false => {
                    let _ = write!(out, "{text}");
                    return 0;
                }
            }
        }
    };
    let mut io = Io {
        out,
        err,
        input,
        terminal,
    };
    match execute(cli, &mut io).await {
        Ok(()) => 0,
        // The reader went away (`| head`): what it wanted it has; nothing more to say.
        Err(CliError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            let _ = writeln!(io.err, "error: {e}");
            1
        }
    }
}

/// Runs a parsed command.
///
/// # Errors
/// [`CliError`]: the message to print.
pub async fn execute(cli: Cli, io: &mut Io<'_>) -> Result<(), CliError> {
    let client = connect::connect(&cli.connection).await?;
    let result = match cli.command {
        Command::Dlq(command) => dlq::execute(client.clone(), command, io).await,
    };
    // What was published is flushed before the process ends.
    let _ = client.flush().await;
    result
}
