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
//!   --on-error retry|reject what a handler error (the "error" payload) stands for (default
//!                           retry)
//!   --backoff-ms BASE[:CAP] pace retries: a fixed BASE ms, or exponential from BASE ms up to
//!                           CAP ms (factor 2, jitter 0.2); `retry` then waits that long
//!   --provenance            add Ruststream-* provenance headers to dead letters (subject,
//!                           mount, stream, consumer, stream sequence, attempt, reason, and
//!                           the handler's error text for the "error" payload)
//!   --queue-group GROUP     Core queue group
//!   --ack-wait-ms MS        ack_wait of a consumer the service creates (default 10000; 30000
//!                           with --no-leases)
//!   --no-leases             do not renew a running JetStream handler's lease with +WPI
//!   --handler-time-limit-ms MS   cancel a handler that runs longer (default 300000)
//!   --subscription-buffer N Core messages held while every handler slot is busy; more are
//!                           dropped and counted (default 65536)
//!   --concurrency N         handlers run at once (default 64); with --batch, batches run
//!                           at once
//!   --batch MAX[:WAIT_MS]   a batch mount: the handler is given up to MAX deliveries at once,
//!                           as soon as MAX have arrived or WAIT_MS ms (default 100) have
//!                           passed since the first (see Batches below)
//!   --key-token N           order per key: the subject's token N (from 0) is the key;
//!                           deliveries of one key run one at a time, in arrival order (see
//!                           Order per key below)
//!   --strict-order          with --key-token and --max-attempts: a retry below the limit
//!                           runs again in place after its delay, its key's later deliveries
//!                           waiting
//!   --priority-group GROUP  pull the consumer through this priority group (nats-server 2.11+;
//!                           with --stream)
//!   --priority-policy pinned|overflow[:MIN_PENDING]
//!                           with --priority-group (default pinned): one instance at a time
//!                           (pinned), or only while MIN_PENDING messages or more are pending
//!   --priority-timeout-ms MS  a pinned consumer's priority_timeout, when the service creates
//!                           it (default 10000): how long before a silent pinned instance is
//!                           replaced
//!   --runtime tokio|smol    which adapter runs the mount (default tokio)
//!   --service NAME:VERSION  declare the app a NATS service (`App::service`): it answers
//!                           `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS` (`nats micro ls`,
//!                           `nats micro info NAME`, `nats micro stats NAME`); a Core mount is
//!                           its endpoint, in queue group "q" unless --queue-group says
//!                           otherwise (a JetStream mount answers no requests: none)
//! CONNECTION (see below):
//!   --url URL               one server URL, or several separated by commas
//!   --creds FILE            a credentials file (JWT and NKey seed)
//!   --user USER --password PASSWORD
//!   --token TOKEN
//!   --tls-ca FILE           trust this CA (PEM) for the server's certificate
//!   --tls-cert FILE --tls-key FILE   a client certificate and its key (PEM)
//!   --help                  this usage
//! ```
//!
//! With `--stream`, the stream must exist; a durable that does not exist is created with
//! explicit ack and no `max_deliver`, and like any new consumer it delivers the whole stream
//! from the start. Conflicting or repeated flags are refused.
//!
//! The URL is `--url`, else `NATS_URL`, else `nats://127.0.0.1:4222`. It may carry credentials
//! (`nats://user:password@host:4222`, `nats://token@host:4222`), which is the way to keep
//! them out of the process list: put the URL in `NATS_URL`. `--password` and `--token` are
//! visible to anyone who can list processes. Credentials are never printed.
//!
//! Payloads: `{"outcome":"ack"}`, `{"outcome":"retry"}`,
//! `{"outcome":"retry_after","delay_ms":200}`, `{"outcome":"drop"}`, `{"outcome":"reject"}`,
//! `{"outcome":"error"}` (the handler returns `Err`; `--on-error` says what it stands for), `"none"` (or
//! `{"outcome":"none"}`: no outcome) and `"panic"` (or `{"outcome":"panic"}`: the handler
//! panics). Anything else is `unreadable` and dropped. An object may add `"publish": "SUBJECT"`:
//! the handler first publishes the payload to the stream that stores SUBJECT through its
//! context (`jetstream_publish`, with the runtime's publish id) and prints
//! `mount=<name> published=<subject> stream_sequence=<n> duplicate=<bool>`. It may add
//! `"sleep_ms": N`: the
//! handler sleeps that long before it returns its outcome (to watch a lease: with
//! `--ack-wait-ms 2000`, `{"outcome":"ack","sleep_ms":5000}` runs once, and `+WPI` goes out on
//! its ack reply subject every second until the `+ACK`).
//!
//! Batches: with `--batch MAX[:WAIT_MS]` the mount is declared with
//! `Mount::batch(MAX, WAIT_MS)` and mounted with `App::mount_batch`. A batch closes when MAX
//! deliveries have joined it, or WAIT_MS ms after its first joined (default 100; with 0 it
//! does not wait, and takes the deliveries that arrived together with its first), or when
//! shutdown begins. Each member's outcome comes from its own payload, exactly as for a single
//! delivery, and each member is settled by itself (its own attempt, `--max-attempts`,
//! backoff, dead letter, Core copy): the handler returns one `Result<Outcome, _>` per member,
//! so an `"error"` member is that member's `Err`, which `--on-error` decides for it alone.
//! Within a batch:
//! - `sleep_ms`: the batch sleeps once, for the largest `sleep_ms` of its members, before it
//!   returns every member's outcome (members without one wait with it);
//! - `panic`: a `"panic"` member panics the whole batch (after the sleep), and rule 13 treats
//!   the panic as no outcome for every member of the batch (on JetStream all are delivered
//!   again after `ack_wait`; on Core all are gone);
//! - `--concurrency` counts batches, and `--handler-time-limit-ms` bounds each batch's run
//!   (a member's wait for its batch does not count).
//!
//! A MAX of 0, or a MAX or WAIT_MS that is not a number, is refused (exit 2); a MAX above the
//! library's `MAX_BATCH` (100,000) is refused at start-up (exit 1).
//!
//! Order per key: with `--key-token N` the mount is declared with
//! `Mount::key(Key::subject_token(N))` (rule 24): for `--wildcard 'pay.*.created'`,
//! `--key-token 1` orders by the second token. Deliveries of one key run one at a time,
//! started in the order they arrived; different keys run concurrently (up to
//! `--concurrency`). A delivery whose subject has no token N has no key and is not ordered.
//! The key is read from the subject the delivery came on: a Core copy (`--wildcard`) comes on
//! `--copy-subject`, so its key is that subject's token N (all copies share one key, or have
//! none), not the original's. By default a retry goes back to NATS (`-NAK`, or a Core copy)
//! and its key goes on. With `--strict-order` (`Mount::strict_order(true)`) a `retry` or
//! `retry_after` below `--max-attempts` runs again in place after its delay (the backoff's for
//! `retry`, none without `--backoff-ms`): no `-NAK` and no Core copy, a JetStream delivery's
//! lease renewed with `+WPI` meanwhile, each run an attempt, the key's later deliveries
//! waiting; at the limit it takes the at-limit path (dead letter, `+TERM`) and the key goes
//! on. With `--batch`, a batch never holds two deliveries of one key, and a run in place joins
//! a later batch. A `--key-token` that is not a number, and `--strict-order` without
//! `--key-token`, are refused (exit 2); `--strict-order` without `--max-attempts` is refused
//! by the library at start-up (exit 1).
//!
//! Output: one line on stdout per handler run, in this fixed format (space-separated
//! `key=value`, values without spaces):
//!
//! ```text
//! mount=<name> subject=<subject> attempt=<n> outcome=<ack|retry|retry_after:<ms>ms|drop|reject|error|none|panic|unreadable>
//! ```
//!
//! With `--key-token N`, each line adds the delivery's key, the subject's token N (empty when
//! the subject has no token N: that delivery is not ordered), before the batch fields:
//!
//! ```text
//! mount=<name> subject=<subject> attempt=<n> outcome=<...> key=<token>
//! ```
//!
//! With `--batch`, one line per member, and the lines of one batch together, in the batch's
//! order, each with two more fields: the batch's number (the batches this process ran,
//! counted from 1) and how many members it has:
//!
//! ```text
//! mount=<name> subject=<subject> attempt=<n> outcome=<...> [key=<token>] batch=<n> size=<members>
//! ```
//!
//! It runs until SIGINT or SIGTERM, then shuts down gracefully (a second signal ends the grace
//! period at once). Logs go to stderr
//! (`RUST_LOG=ruststream=debug` shows every settlement).
//!
//! At exit it prints the shutdown report on one line on stderr:
//!
//! ```text
//! scripted: shutdown report: abandoned=[MOUNT:N ...] lost_copies=[MOUNT:N ...] core_losses=[MOUNT:slow_consumer=N,unpublished_copies=N,unpublished_dead_letters=N,unhandled_at_shutdown=N ...] recoveries=N failure=none|"WHY"
//! ```
//!
//! (the `Display` form of `ShutdownReport`: empty lists are `[]`, and a mount is listed only
//! where it left or lost something).
//!
//! Refusals go to stderr as `scripted: mount `NAME`: what is wrong`, like the library's
//! start-up errors, and the exit code says which: 2 for flags the example refuses itself, 1
//! for what the library or the server refuses, and 1 when the app stopped on its own (its
//! connection or subscriptions lost for good, rule 20), after the report line. A clean
//! shutdown exits 0.

#![allow(clippy::print_stdout, clippy::unwrap_used, missing_docs)]

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ruststream_adapter::async_nats::ConnectOptions;
use ruststream_tokio::{
    Backoff, Batch, Context, Delivery, ErrorPolicy, Key, Mount, Outcome, PriorityPolicy, Service,
};

/// How long a batch waits for more members after its first, when `--batch` gives no WAIT_MS.
const DEFAULT_BATCH_WAIT_MS: u64 = 100;

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
    backoff_ms: Option<(u64, Option<u64>)>,
    on_error: Option<ErrorPolicy>,
    queue_group: Option<String>,
    ack_wait_ms: Option<u64>,
    runtime: Option<String>,
    no_leases: bool,
    provenance: bool,
    handler_time_limit_ms: Option<u64>,
    subscription_buffer: Option<u64>,
    concurrency: Option<u64>,
    /// `--batch MAX[:WAIT_MS]`: MAX and WAIT_MS.
    batch: Option<(usize, u64)>,
    /// `--key-token N`: the subject token that is the key.
    key_token: Option<usize>,
    strict_order: bool,
    priority_group: Option<String>,
    priority_policy: Option<PriorityPolicy>,
    priority_timeout_ms: Option<u64>,
    /// `--service NAME:VERSION`.
    service: Option<(String, String)>,
    creds: Option<PathBuf>,
    user: Option<String>,
    password: Option<String>,
    token: Option<String>,
    tls_ca: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
}

const USAGE: &str = "usage: scripted [--url URL] (--subject S | --wildcard W --copy-subject S | --stream S --durable D)
                [--name NAME] [--max-attempts N] [--dead-letter S] [--backoff-ms BASE[:CAP]]
                [--on-error retry|reject] [--provenance]
                [--queue-group G] [--ack-wait-ms MS]
                [--no-leases] [--handler-time-limit-ms MS] [--subscription-buffer N] [--concurrency N]
                [--batch MAX[:WAIT_MS]]   batches of up to MAX, closed WAIT_MS ms (default 100)
                                          after their first member; each member's outcome from
                                          its own payload
                [--key-token N]           order per key: the subject's token N (from 0) is the
                                          key; one key's deliveries run one at a time, in
                                          arrival order; each line shows key=<token>
                [--strict-order]          (needs --key-token and --max-attempts) a retry below
                                          the limit runs again in place after its delay, its
                                          key waiting: no -NAK, no Core copy
                [--priority-group G [--priority-policy pinned|overflow[:MIN_PENDING]]
                 [--priority-timeout-ms MS]]   share the consumer between instances
                [--service NAME:VERSION]  a NATS service: answers $SRV.PING, INFO and STATS
                [--runtime tokio|smol] [--creds FILE] [--user U --password P] [--token T]
                [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]
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
            "--on-error" => match value()?.as_str() {
                "retry" => set(&mut f.on_error, &flag, ErrorPolicy::Retry)?,
                "reject" => set(&mut f.on_error, &flag, ErrorPolicy::Reject)?,
                other => return Err(format!("--on-error: `{other}` is not retry or reject")),
            },
            "--backoff-ms" => {
                let v = value()?;
                let (base, cap) = match v.split_once(':') {
                    Some((base, cap)) => (number(base.to_owned())?, Some(number(cap.to_owned())?)),
                    None => (number(v)?, None),
                };
                set(&mut f.backoff_ms, &flag, (base, cap))?
            }
            "--queue-group" => set(&mut f.queue_group, &flag, value()?)?,
            "--ack-wait-ms" => match number(value()?)? {
                0 => return Err("--ack-wait-ms must be at least 1".to_owned()),
                ms => set(&mut f.ack_wait_ms, &flag, ms)?,
            },
            "--provenance" => {
                if std::mem::replace(&mut f.provenance, true) {
                    return Err("--provenance given twice".to_owned());
                }
            }
            "--no-leases" => {
                if std::mem::replace(&mut f.no_leases, true) {
                    return Err("--no-leases given twice".to_owned());
                }
            }
            "--handler-time-limit-ms" => {
                set(&mut f.handler_time_limit_ms, &flag, number(value()?)?)?
            }
            "--subscription-buffer" => match number(value()?)? {
                0 => return Err("--subscription-buffer must be at least 1".to_owned()),
                n => set(&mut f.subscription_buffer, &flag, n)?,
            },
            "--concurrency" => match number(value()?)? {
                0 => return Err("--concurrency must be at least 1".to_owned()),
                n => set(&mut f.concurrency, &flag, n)?,
            },
            "--batch" => {
                let v = value()?;
                let (max, wait) = match v.split_once(':') {
                    Some((max, wait)) => (max, Some(wait)),
                    None => (v.as_str(), None),
                };
                let max = match max.parse::<usize>() {
                    Ok(0) => {
                        return Err(
                            "--batch: MAX must be at least 1 (a batch holds at least one delivery)"
                                .to_owned(),
                        );
                    }
                    Ok(max) => max,
                    Err(e) => return Err(format!("--batch: MAX `{max}` is not a number: {e}")),
                };
                let wait = match wait.map(str::parse::<u64>) {
                    None => DEFAULT_BATCH_WAIT_MS,
                    Some(Ok(ms)) => ms,
                    Some(Err(e)) => {
                        let wait = wait.unwrap_or_default();
                        return Err(format!(
                            "--batch: WAIT_MS `{wait}` is not a number of milliseconds: {e}"
                        ));
                    }
                };
                set(&mut f.batch, &flag, (max, wait))?
            }
            "--key-token" => {
                let v = value()?;
                let n = v.parse::<usize>().map_err(|e| {
                    format!("--key-token: N `{v}` is not a number (a subject token's index, from 0): {e}")
                })?;
                set(&mut f.key_token, &flag, n)?
            }
            "--strict-order" => {
                if std::mem::replace(&mut f.strict_order, true) {
                    return Err("--strict-order given twice".to_owned());
                }
            }
            "--priority-group" => set(&mut f.priority_group, &flag, value()?)?,
            "--priority-policy" => {
                let policy = PriorityPolicy::parse(&value()?)
                    .map_err(|e| format!("--priority-policy: {e}"))?;
                set(&mut f.priority_policy, &flag, policy)?
            }
            "--priority-timeout-ms" => match number(value()?)? {
                0 => return Err("--priority-timeout-ms must be at least 1".to_owned()),
                ms => set(&mut f.priority_timeout_ms, &flag, ms)?,
            },
            "--service" => {
                let v = value()?;
                let (name, version) = v.split_once(':').ok_or_else(|| {
                    format!("--service: `{v}` is not NAME:VERSION (`orders:1.2.0`)")
                })?;
                set(&mut f.service, &flag, (name.to_owned(), version.to_owned()))?
            }
            "--runtime" => match value()?.as_str() {
                runtime @ ("tokio" | "smol") => set(&mut f.runtime, &flag, runtime.to_owned())?,
                other => return Err(format!("--runtime is tokio or smol, not `{other}`")),
            },
            "--creds" => set(&mut f.creds, &flag, value()?.into())?,
            "--user" => set(&mut f.user, &flag, value()?)?,
            "--password" => set(&mut f.password, &flag, value()?)?,
            "--token" => set(&mut f.token, &flag, value()?)?,
            "--tls-ca" => set(&mut f.tls_ca, &flag, value()?.into())?,
            "--tls-cert" => set(&mut f.tls_cert, &flag, value()?.into())?,
            "--tls-key" => set(&mut f.tls_key, &flag, value()?.into())?,
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
        (
            f.subscription_buffer.is_some() && f.stream.is_some(),
            "--subscription-buffer is for Core mounts",
        ),
        (
            f.priority_group.is_some() && f.stream.is_none(),
            "--priority-group is for JetStream mounts (--stream)",
        ),
        (
            (f.priority_policy.is_some() || f.priority_timeout_ms.is_some())
                && f.priority_group.is_none(),
            "--priority-policy and --priority-timeout-ms go with --priority-group",
        ),
        (
            f.strict_order && f.key_token.is_none(),
            "--strict-order needs --key-token (strict order is kept per key)",
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
    if let Some(policy) = &f.on_error {
        m = m.on_error(policy.clone());
    }
    if f.provenance {
        m = m.provenance();
    }
    // A bad backoff (a zero base, a base above its cap) is refused at start-up, naming the
    // mount.
    match f.backoff_ms {
        Some((base, None)) => m = m.backoff(Backoff::fixed(Duration::from_millis(base))),
        Some((base, Some(cap))) => {
            m = m.backoff(Backoff::exponential(
                Duration::from_millis(base),
                Duration::from_millis(cap),
            ))
        }
        None => {}
    }
    if let Some(g) = &f.queue_group {
        m = m.queue_group(g);
    }
    if let Some(ms) = f.ack_wait_ms {
        m = m.ack_wait(Duration::from_millis(ms));
    }
    if f.no_leases {
        m = m.leases(false);
    }
    if let Some(ms) = f.handler_time_limit_ms {
        m = m.handler_time_limit(Duration::from_millis(ms));
    }
    let positive = |flag: &str, n: u64| {
        usize::try_from(n)
            .ok()
            .and_then(std::num::NonZeroUsize::new)
            .ok_or_else(|| format!("{flag} {n} is out of range"))
    };
    if let Some(n) = f.subscription_buffer {
        m = m.subscription_buffer(positive("--subscription-buffer", n)?);
    }
    if let Some(n) = f.concurrency {
        m = m.concurrency(positive("--concurrency", n)?);
    }
    // A MAX above the library's `MAX_BATCH` is refused at start-up, naming the mount.
    if let Some((max, wait_ms)) = f.batch {
        m = m.batch(max, Duration::from_millis(wait_ms));
    }
    if let Some(n) = f.key_token {
        m = m.key(Key::subject_token(n));
    }
    if let Some(group) = &f.priority_group {
        m = m.priority_group(group, f.priority_policy.unwrap_or(PriorityPolicy::Pinned));
    }
    // With an overflow policy, a timeout is refused at start-up, naming the mount.
    if let Some(ms) = f.priority_timeout_ms {
        m = m.priority_timeout(Duration::from_millis(ms));
    }
    // Without --max-attempts, strict order is refused at start-up, naming the mount.
    if f.strict_order {
        m = m.strict_order(true);
    }
    Ok(m)
}

/// What a payload asks the handler for.
enum Scripted {
    /// Return this outcome.
    Outcome(Outcome),
    /// Return an `Err` (the mount's error policy decides).
    Error,
    /// Panic.
    Panic,
}

/// What a payload asks for, and its name for the output line.
fn scripted_outcome(payload: &[u8]) -> (Scripted, String) {
    let value: serde_json::Value = match serde_json::from_slice(payload) {
        Ok(v) => v,
        Err(_) => return (Scripted::Outcome(Outcome::Drop), "unreadable".to_owned()),
    };
    let word = value
        .as_str()
        .or_else(|| value.get("outcome").and_then(serde_json::Value::as_str))
        .unwrap_or("");
    match word {
        "ack" => (Scripted::Outcome(Outcome::Ack), "ack".to_owned()),
        "retry" => (Scripted::Outcome(Outcome::Retry), "retry".to_owned()),
        "retry_after" => {
            let ms = value
                .get("delay_ms")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            (
                Scripted::Outcome(Outcome::RetryAfter(Duration::from_millis(ms))),
                format!("retry_after:{ms}ms"),
            )
        }
        "drop" => (Scripted::Outcome(Outcome::Drop), "drop".to_owned()),
        "reject" => (Scripted::Outcome(Outcome::Reject), "reject".to_owned()),
        "none" => (Scripted::Outcome(Outcome::None), "none".to_owned()),
        "error" => (Scripted::Error, "error".to_owned()),
        "panic" => (Scripted::Panic, "panic".to_owned()),
        _ => (Scripted::Outcome(Outcome::Drop), "unreadable".to_owned()),
    }
}

/// Where the payload asks the handler to publish it to a stream, before it sleeps:
/// `"publish": "SUBJECT"`.
fn scripted_publish(payload: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    value
        .get("publish")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}

/// How long the payload asks the handler to sleep before it returns: `"sleep_ms": N`.
fn scripted_sleep(payload: &[u8]) -> Option<Duration> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    value
        .get("sleep_ms")
        .and_then(serde_json::Value::as_u64)
        .map(Duration::from_millis)
}

/// Writes `text` (whole lines) to stdout at once, and flushes it.
fn print_lines(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// The ` key=<token>` field of a handler line with `--key-token` (`key_token`): the subject's
/// token at that index, as the library reads the key, or nothing after `=` when the subject
/// has no such token (that delivery has no key); empty without `--key-token`.
fn key_field(d: &Delivery, key_token: Option<usize>) -> String {
    match key_token {
        Some(n) => format!(
            " key={}",
            d.subject.as_str().split('.').nth(n).unwrap_or("")
        ),
        None => String::new(),
    }
}

/// A delivery's handler: its outcome from its payload; `key_token`: `--key-token`'s N.
async fn handle(d: Delivery, cx: Context, key_token: Option<usize>) -> Result<Outcome, String> {
    let (outcome, name) = scripted_outcome(&d.payload);
    let sleep = scripted_sleep(&d.payload);
    let line = format!(
        "mount={} subject={} attempt={} outcome={name}{}\n",
        d.mount,
        d.subject,
        d.attempt,
        key_field(&d, key_token)
    );
    print_lines(&line);
    if let Some(subject) = scripted_publish(&d.payload) {
        // To a stream, through the context: with the runtime's publish id.
        let ack = cx
            .jetstream_publish(subject.clone(), d.payload.clone())
            .await
            .map_err(|e| e.to_string())?;
        print_lines(&format!(
            "mount={} published={subject} stream_sequence={} duplicate={}\n",
            d.mount, ack.sequence, ack.duplicate
        ));
    }
    if let Some(sleep) = sleep {
        // Both adapters run handlers inside a Tokio context.
        tokio::time::sleep(sleep).await;
    }
    match outcome {
        Scripted::Outcome(o) => Ok(o),
        Scripted::Error => Err("the payload asked for an error".to_owned()),
        Scripted::Panic => panic!("the payload asked for a panic"),
    }
}

/// The batches this process ran.
static BATCHES: AtomicU64 = AtomicU64::new(0);

/// A batch's handler (`--batch`): each member's outcome from its own payload, as [`handle`]
/// takes it; one sleep for the batch, the longest its members ask for; and a panic of the
/// whole batch if any member asks for one. `key_token`: `--key-token`'s N.
async fn handle_batch(batch: Batch, key_token: Option<usize>) -> Vec<Result<Outcome, String>> {
    let number = BATCHES.fetch_add(1, Ordering::Relaxed) + 1;
    let size = batch.len();
    let mut lines = String::new();
    let mut sleep: Option<Duration> = None;
    let mut scripted = Vec::with_capacity(size);
    for member in &batch {
        let d = &member.delivery;
        let (outcome, name) = scripted_outcome(&member.value);
        sleep = sleep.max(scripted_sleep(&member.value));
        lines.push_str(&format!(
            "mount={} subject={} attempt={} outcome={name}{} batch={number} size={size}\n",
            d.mount,
            d.subject,
            d.attempt,
            key_field(d, key_token)
        ));
        scripted.push(outcome);
    }
    print_lines(&lines);
    if let Some(sleep) = sleep {
        // Both adapters run handlers inside a Tokio context.
        tokio::time::sleep(sleep).await;
    }
    if scripted.iter().any(|s| matches!(s, Scripted::Panic)) {
        panic!("a member of batch {number} asked for a panic");
    }
    scripted
        .into_iter()
        .map(|s| match s {
            Scripted::Outcome(o) => Ok(o),
            Scripted::Error => Err("the payload asked for an error".to_owned()),
            Scripted::Panic => unreachable!("a panic member panicked the batch above"),
        })
        .collect()
}

/// The connection options the flags ask for. Credentials from the URL are added by the app.
fn connect_options(f: &Flags) -> Result<ConnectOptions, String> {
    let mut options = ConnectOptions::new();
    match (&f.user, &f.password) {
        (Some(user), Some(password)) => {
            options = options.user_and_password(user.clone(), password.clone());
        }
        (None, None) => {}
        _ => return Err("--user and --password go together".to_owned()),
    }
    if let Some(token) = &f.token {
        if f.user.is_some() {
            return Err("give --token or --user/--password, not both".to_owned());
        }
        options = options.token(token.clone());
    }
    if let Some(file) = &f.creds {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("--creds {}: {e}", file.display()))?;
        options = options
            .credentials(&text)
            .map_err(|e| format!("--creds {}: {e}", file.display()))?;
    }
    if let Some(ca) = &f.tls_ca {
        options = options.add_root_certificates(ca.clone()).require_tls(true);
    }
    match (&f.tls_cert, &f.tls_key) {
        (Some(cert), Some(key)) => {
            options = options
                .add_client_certificate(cert.clone(), key.clone())
                .require_tls(true);
        }
        (None, None) => {}
        _ => return Err("--tls-cert and --tls-key go together".to_owned()),
    }
    Ok(options)
}

/// Whether any entry of a server URL list has user-info (`user:password@` or `token@`).
fn url_has_credentials(url: &str) -> bool {
    url.split(',').any(|entry| {
        let rest = entry.split_once("://").map_or(entry, |(_, rest)| rest);
        rest.split(['/', '?', '#'])
            .next()
            .is_some_and(|authority| authority.contains('@'))
    })
}

/// The mount's name as the flags give it, even when they do not parse: every refusal names it.
fn mount_name(args: &[String]) -> String {
    args.windows(2)
        .find(|pair| pair[0] == "--name")
        .map_or_else(|| "scripted".to_owned(), |pair| pair[1].clone())
}

/// How the handler is mounted: `batched` with `mount_batch` (`--batch`); `key_token`, the
/// subject token its lines show as the key (`--key-token`).
#[derive(Clone, Copy)]
struct Shape {
    batched: bool,
    key_token: Option<usize>,
}

/// Starts the app on the runtime `R` and runs it until a signal.
async fn serve<R: ruststream_adapter::Runtime>(
    url: &str,
    options: ConnectOptions,
    mount: Mount,
    shape: Shape,
    service: Option<Service>,
) -> std::process::ExitCode {
    let name = mount.name().to_owned();
    let app = ruststream_adapter::App::<R>::with_options(url, options);
    // A name or version the micro protocol refuses is refused at start-up (exit 1).
    let app = match service {
        Some(service) => app.service(service),
        None => app,
    };
    let key_token = shape.key_token;
    let app = match shape.batched {
        true => app.mount_batch(mount, move |batch: Batch| handle_batch(batch, key_token)),
        false => app.mount(mount, move |d: Delivery, cx: Context| {
            handle(d, cx, key_token)
        }),
    };
    match app.run().await {
        Ok(report) => {
            eprintln!("scripted: shutdown report: {report}");
            std::process::ExitCode::SUCCESS
        }
        Err(ruststream_adapter::RunError::Failed(failed)) => {
            eprintln!("scripted: shutdown report: {}", failed.report);
            let text = failed.to_string();
            match text.contains(&format!("mount `{name}`")) {
                true => eprintln!("scripted: {text}"),
                false => eprintln!("scripted: mount `{name}`: {text}"),
            }
            std::process::ExitCode::from(1)
        }
        Err(e) => {
            // The library names the mount in what is about it; the rest (the URL, the
            // connection) is named here, so that every refusal says which mount it stopped.
            let text = e.to_string();
            match text.starts_with("mount `") {
                true => eprintln!("scripted: {text}"),
                false => eprintln!("scripted: mount `{name}`: {text}"),
            }
            std::process::ExitCode::from(1)
        }
    }
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = mount_name(&args);
    let refused = |e: String| {
        eprintln!("scripted: mount `{name}`: {e}\n{USAGE}");
        std::process::ExitCode::from(2)
    };
    let flags = match parse(args.iter().cloned()) {
        Ok(f) => f,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => return refused(e),
    };
    let (mount, options) = match mount(&flags).and_then(|m| Ok((m, connect_options(&flags)?))) {
        Ok(both) => both,
        Err(e) => return refused(e),
    };
    let url = flags
        .url
        .clone()
        .or_else(|| std::env::var("NATS_URL").ok())
        .unwrap_or_else(|| "nats://127.0.0.1:4222".to_owned());
    let credential_flags = flags.user.is_some() || flags.token.is_some() || flags.creds.is_some();
    if credential_flags && url_has_credentials(&url) {
        return refused(
            "credentials given twice: in the URL and by --creds, --user or --token".to_owned(),
        );
    }
    let shape = Shape {
        batched: flags.batch.is_some(),
        key_token: flags.key_token,
    };
    let service = flags
        .service
        .as_ref()
        .map(|(name, version)| Service::new(name, version));
    match flags.runtime.as_deref() {
        Some("smol") => smol::block_on(serve::<ruststream_smol::Runtime>(
            &url, options, mount, shape, service,
        )),
        _ => match tokio::runtime::Runtime::new() {
            Ok(runtime) => runtime.block_on(serve::<ruststream_tokio::Runtime>(
                &url, options, mount, shape, service,
            )),
            Err(e) => {
                eprintln!("scripted: cannot start tokio: {e}");
                std::process::ExitCode::from(1)
            }
        },
    }
}
