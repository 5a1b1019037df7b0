//! A scripted service for watching the settlement contract on the wire.
//!
//! One mount, declared by flags; every handler takes its outcome from the payload. Run it,
//! publish to it (with the `nats` CLI, or any client), and watch the ack reply subjects,
//! copies and dead letters with a second subscriber.
//!
//! ```text
//! cargo run -p ruststream-tokio --example scripted -- [--url URL] MOUNT [OPTIONS]
//!
//! MOUNT, one of:
//!   --subject SUBJECT                        a CoreSubject
//!   --wildcard WILDCARD --copy-subject SUBJ  a CoreWildcard and where its copies go
//!   --stream STREAM --durable NAME           a JetStream pull consumer (created if missing)
//! OPTIONS:
//!   --name NAME             the mount's name (default "scripted")
//!   --max-attempts N        bound the attempts
//!   --dead-letter SUBJECT   where deliveries at the limit go (needs --max-attempts)
//!   --queue-group GROUP     Core queue group
//!   --ack-wait-ms MS        ack_wait of a consumer the service creates (default 30000)
//!   --help                  this usage
//! ```
//!
//! With `--stream`, the stream must exist; a durable that does not exist is created with
//! explicit ack and no `max_deliver`, and like any new consumer it delivers the whole stream
//! from the start. Conflicting or repeated flags are refused.
//!
//! The URL is `--url`, else `NATS_URL`, else `nats://127.0.0.1:4222`.
//!
//! Payloads: `{"outcome":"ack"}`, `{"outcome":"retry"}`,
//! `{"outcome":"retry_after","delay_ms":200}`, `{"outcome":"drop"}`, `"none"` (or
//! `{"outcome":"none"}`: no outcome) and `"panic"` (or `{"outcome":"panic"}`: the handler
//! panics). Anything else is `unreadable` and dropped.
//!
//! Output: one line on stdout per handler run, in this fixed format (space-separated
//! `key=value`, values without spaces):
//!
//! ```text
//! mount=<name> subject=<subject> attempt=<n> outcome=<ack|retry|retry_after:<ms>ms|drop|none|panic|unreadable>
//! ```
//!
//! It runs until SIGINT or SIGTERM, then shuts down gracefully (a second signal ends the grace
//! period at once). Logs go to stderr
//! (`RUST_LOG=ruststream=debug` shows every settlement).

#![allow(clippy::print_stdout, clippy::unwrap_used, missing_docs)]

use std::io::Write;
use std::time::Duration;

use ruststream_tokio::{App, Delivery, Mount, Outcome};

#[derive(Default)]
struct Flags {
    url: Option<String>,
    name: Option<String>,
    subject: Option<String>,
    wildcard: Option<String>,
    copy_subject: Option<String>,
    stream: Option<String>,
    durable: Option<String>,
    max_attempts: Option<u32>,
    dead_letter: Option<String>,
    queue_group: Option<String>,
    ack_wait_ms: Option<u64>,
}

const USAGE: &str = "usage: scripted [--url URL] (--subject S | --wildcard W --copy-subject S | --stream S --durable D)
                [--name NAME] [--max-attempts N] [--dead-letter S] [--queue-group G] [--ack-wait-ms MS]
see the top of adapter-tokio/examples/scripted.rs";

fn set<T>(slot: &mut Option<T>, flag: &str, value: T) -> Result<(), String> {
    match slot.replace(value) {
        Some(_) => Err(format!("{flag} given twice")),
        None => Ok(()),
    }
}

fn parse(args: impl Iterator<Item = String>) -> Result<Flags, String> {
    let mut f = Flags::default();
    let mut args = args.peekable();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--help" | "-h" => return Err(String::new()),
            "--url" => set(&mut f.url, &flag, value()?)?,
            "--name" => set(&mut f.name, &flag, value()?)?,
            "--subject" => set(&mut f.subject, &flag, value()?)?,
            "--wildcard" => set(&mut f.wildcard, &flag, value()?)?,
            "--copy-subject" => set(&mut f.copy_subject, &flag, value()?)?,
            "--stream" => set(&mut f.stream, &flag, value()?)?,
            "--durable" => set(&mut f.durable, &flag, value()?)?,
            "--max-attempts" => {
                let n = value()?
                    .parse::<u32>()
                    .map_err(|e| format!("--max-attempts: {e}"))?;
                set(&mut f.max_attempts, &flag, n)?
            }
            "--dead-letter" => set(&mut f.dead_letter, &flag, value()?)?,
            "--queue-group" => set(&mut f.queue_group, &flag, value()?)?,
            "--ack-wait-ms" => match number(value()?)? {
                0 => return Err("--ack-wait-ms must be at least 1".to_owned()),
                ms => set(&mut f.ack_wait_ms, &flag, ms)?,
            },
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(f)
}

fn mount(f: &Flags) -> Result<Mount, String> {
    let name = f.name.as_deref().unwrap_or("scripted");
    let conflicts = [
        (
            f.copy_subject.is_some() && f.wildcard.is_none(),
            "--copy-subject goes with --wildcard",
        ),
        (
            f.durable.is_some() && f.stream.is_none(),
            "--durable goes with --stream",
        ),
        (
            f.ack_wait_ms.is_some() && f.stream.is_none(),
            "--ack-wait-ms goes with --stream",
        ),
        (
            f.queue_group.is_some() && f.stream.is_some(),
            "--queue-group is for Core mounts",
        ),
    ];
    if let Some((_, why)) = conflicts.iter().find(|(bad, _)| *bad) {
        return Err((*why).to_owned());
    }
    let mut m = match (&f.subject, &f.wildcard, &f.stream) {
        (Some(s), None, None) => Mount::core_subject(name, s),
        (None, Some(w), None) => {
            let copy = f
                .copy_subject
                .as_deref()
                .ok_or("--wildcard needs --copy-subject")?;
            Mount::core_wildcard(name, w, copy)
        }
        (None, None, Some(stream)) => {
            let durable = f.durable.as_deref().ok_or("--stream needs --durable")?;
            Mount::jetstream(name, stream, durable)
        }
        _ => return Err("give exactly one of --subject, --wildcard, --stream".to_owned()),
    };
    if let Some(n) = f.max_attempts {
        m = m.max_attempts(n);
    }
    if let Some(s) = &f.dead_letter {
        m = m.dead_letter(s);
    }
    if let Some(g) = &f.queue_group {
        m = m.queue_group(g);
    }
    if let Some(ms) = f.ack_wait_ms {
        m = m.ack_wait(Duration::from_millis(ms));
    }
    Ok(m)
}

/// The outcome a payload asks for, and its name for the output line.
fn scripted_outcome(payload: &[u8]) -> (Option<Outcome>, String) {
    let value: serde_json::Value = match serde_json::from_slice(payload) {
        Ok(v) => v,
        Err(_) => return (Some(Outcome::Drop), "unreadable".to_owned()),
    };
    let word = value
        .as_str()
        .or_else(|| value.get("outcome").and_then(serde_json::Value::as_str))
        .unwrap_or("");
    match word {
        "ack" => (Some(Outcome::Ack), "ack".to_owned()),
        "retry" => (Some(Outcome::Retry), "retry".to_owned()),
        "retry_after" => {
            let ms = value
                .get("delay_ms")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            (
                Some(Outcome::RetryAfter(Duration::from_millis(ms))),
                format!("retry_after:{ms}ms"),
            )
        }
        "drop" => (Some(Outcome::Drop), "drop".to_owned()),
        "none" => (Some(Outcome::None), "none".to_owned()),
        "panic" => (None, "panic".to_owned()),
        _ => (Some(Outcome::Drop), "unreadable".to_owned()),
    }
}

async fn handle(d: Delivery) -> Outcome {
    let (outcome, name) = scripted_outcome(&d.payload);
    let line = format!(
        "mount={} subject={} attempt={} outcome={name}\n",
        d.mount, d.subject, d.attempt
    );
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
    drop(out);
    match outcome {
        Some(o) => o,
        None => panic!("the payload asked for a panic"),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let flags = match parse(std::env::args().skip(1)) {
        Ok(f) => f,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("scripted: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    let mount = match mount(&flags) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("scripted: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    let url = flags
        .url
        .clone()
        .or_else(|| std::env::var("NATS_URL").ok())
        .unwrap_or_else(|| "nats://127.0.0.1:4222".to_owned());
    match App::new(&url).mount(mount, handle).run().await {
        Ok(report) => {
            eprintln!("scripted: stopped ({report:?})");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("scripted: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
