//! The command line: what `ruststream` takes (clap).

use std::path::PathBuf;
use std::time::SystemTime;

use clap::{Args, Parser, Subcommand};
use ruststream_adapter::dead_letters::{DeadLetterFilter, DeadLetterReason, Subject, Wildcard};

/// The operator's tools for services built on ruststream.
#[derive(Debug, Parser)]
#[command(name = "ruststream", version, about, long_about = None)]
pub struct Cli {
    /// How to reach the servers.
    #[command(flatten)]
    pub connection: Connection,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How to connect: as the runtime does (`App::new`'s URLs, credentials as async-nats takes
/// them). No value of these is ever printed.
#[derive(Debug, Args)]
#[command(next_help_heading = "Connection")]
pub struct Connection {
    /// Server URL, or several separated by commas; credentials may stand in it
    /// (`nats://user:password@host:4222`, `nats://token@host:4222`).
    #[arg(
        long,
        env = "NATS_URL",
        default_value = "nats://127.0.0.1:4222",
        hide_env_values = true,
        global = true
    )]
    pub url: String,
    /// A credentials file (JWT and NKey seed).
    #[arg(long, env = "NATS_CREDS", value_name = "FILE", global = true)]
    pub creds: Option<PathBuf>,
    /// User name, with --password.
    #[arg(
        long,
        env = "NATS_USER",
        requires = "password",
        hide_env_values = true,
        global = true
    )]
    pub user: Option<String>,
    /// Password, with --user.
    #[arg(
        long,
        env = "NATS_PASSWORD",
        requires = "user",
        hide_env_values = true,
        global = true
    )]
    pub password: Option<String>,
    /// Token.
    #[arg(long, env = "NATS_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// A CA certificate to trust (PEM); requires TLS.
    #[arg(long, value_name = "FILE", global = true)]
    pub tls_ca: Option<PathBuf>,
    /// A client certificate (PEM), with --tls-key; requires TLS.
    #[arg(long, value_name = "FILE", requires = "tls_key", global = true)]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's key (PEM), with --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert", global = true)]
    pub tls_key: Option<PathBuf>,
    /// Require TLS even without certificates given here.
    #[arg(long, global = true)]
    pub tls: bool,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Dead-letter streams: list, show, replay, purge.
    #[command(subcommand)]
    Dlq(Dlq),
}

/// `ruststream dlq …`
#[derive(Debug, Subcommand)]
pub enum Dlq {
    /// The dead letters of a dead-letter stream, one line each.
    List {
        /// The dead-letter stream.
        stream: String,
        /// Which dead letters.
        #[command(flatten)]
        filter: Filter,
        /// One JSON object per line, for scripts.
        #[arg(long)]
        json: bool,
    },
    /// One dead letter in full: headers and payload.
    Show {
        /// The dead-letter stream.
        stream: String,
        /// Its sequence in the stream.
        sequence: u64,
        /// As one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Publishes dead letters back to where they came from, as they were before they were
    /// dead-lettered.
    Replay {
        /// The dead-letter stream.
        stream: String,
        /// Which dead letters.
        #[command(flatten)]
        filter: Filter,
        /// Send them all here instead of to their original subjects (needed for dead
        /// letters without provenance).
        #[arg(long, value_name = "SUBJECT", value_parser = parse_subject)]
        to: Option<Subject>,
        /// Show what would be sent; send nothing.
        #[arg(long)]
        dry_run: bool,
        /// At most this many a second.
        #[arg(long, value_name = "PER_SECOND")]
        rate: Option<std::num::NonZeroU32>,
        /// Delete each dead letter once a stream has confirmed its replay.
        #[arg(long)]
        delete: bool,
    },
    /// Deletes dead letters (asks first).
    Purge {
        /// The dead-letter stream.
        stream: String,
        /// Which dead letters.
        #[command(flatten)]
        filter: Filter,
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

/// Which dead letters a command takes; every condition given must hold.
#[derive(Debug, Args, Clone, Default)]
pub struct Filter {
    /// Only this reason (repeat for several): limit, rejected, undecodable, handler-error,
    /// copy-too-large.
    #[arg(long, value_parser = parse_reason)]
    pub reason: Vec<DeadLetterReason>,
    /// Only from this mount (repeat for several).
    #[arg(long)]
    pub mount: Vec<String>,
    /// Only those whose original subject matches this subject or wildcard.
    #[arg(long, value_parser = parse_wildcard)]
    pub subject: Option<Wildcard>,
    /// Only those stored at or after TIME: RFC 3339 (2026-12-07T08:00:00Z) or a time ago
    /// (30m, 2h, 1d).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub since: Option<SystemTime>,
    /// Only those stored before TIME (as --since).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub until: Option<SystemTime>,
    /// Only those at or after this sequence of the stream (to resume a replay); from 1.
    #[arg(long, value_name = "SEQ", value_parser = clap::value_parser!(u64).range(1..))]
    pub from_seq: Option<u64>,
    /// Take the stream's messages even if none carries a mark of a ruststream dead letter
    /// (dead letters of Core mounts without provenance carry none).
    #[arg(long)]
    pub unmarked: bool,
}

impl Filter {
    /// The library's filter.
    pub fn to_filter(&self) -> DeadLetterFilter {
        let nanos = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
                .unwrap_or(0)
        };
        DeadLetterFilter {
            reasons: self.reason.clone(),
            mounts: self.mount.clone(),
            subject: self.subject.clone(),
            since: self.since.map(nanos),
            until: self.until.map(nanos),
            from_sequence: self.from_seq,
        }
    }
}

fn parse_reason(s: &str) -> Result<DeadLetterReason, String> {
    DeadLetterReason::from_name(s).ok_or_else(|| {
        let known: Vec<&str> = DeadLetterReason::ALL.iter().map(|r| r.as_str()).collect();
        format!("unknown reason `{s}`: one of {}", known.join(", "))
    })
}

fn parse_wildcard(s: &str) -> Result<Wildcard, String> {
    Wildcard::new(s).map_err(|e| e.to_string())
}

fn parse_subject(s: &str) -> Result<Subject, String> {
    Subject::new(s).map_err(|e| e.to_string())
}

/// RFC 3339, or a duration before now (`humantime`'s: `30m`, `2h 30m`, `1d`).
pub(crate) fn parse_time(s: &str) -> Result<SystemTime, String> {
    if let Ok(t) = humantime::parse_rfc3339_weak(s) {
        return Ok(t);
    }
    match humantime::parse_duration(s) {
        Ok(ago) => SystemTime::now()
            .checked_sub(ago)
            .ok_or_else(|| format!("`{s}` ago is before the Unix epoch")),
        Err(_) => Err(format!(
            "`{s}` is neither an RFC 3339 time in UTC (2026-12-07T08:00:00Z; no other offset) nor a time ago (30m, 2h, 1d)"
        )),
    }
}
