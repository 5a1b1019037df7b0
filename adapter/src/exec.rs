//! Executing a plan: one exhaustive `match` over the core's actions.
//!
//! Nothing here decides anything about attempts, limits or headers: the plan says what to do,
//! and this module does it over async-nats, in order, stopping at the first publish that
//! fails (the core's adapter obligations).

use std::collections::BTreeSet;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use async_nats::header::{HeaderName, HeaderValue};
use async_nats::{Client, HeaderMap};
use bytes::Bytes;
use ruststream_core::{
    Action, Delivery as CoreDelivery, Disposition, Headers, Log, Message, MountPolicy, Outcome,
    PendingCopy, Plan, Publication,
};
use tokio::sync::mpsc;

/// Where a mount's dead letters go, decided at start-up (rule 8).
#[derive(Clone)]
pub(crate) enum DeadLetterSink {
    /// A stream stores the subject: a JetStream publish confirmed by the stream's ack.
    JetStream(Box<async_nats::jetstream::Context>),
    /// No stream stores it (Core mounts only): a plain publish, flushed to the server.
    Plain,
}

/// A settled delivery, as [`App::on_settled`](crate::App::on_settled) observers see it.
#[derive(Debug, Clone)]
pub struct Settled {
    /// The mount's name (kept once per process: see [`Delivery::mount`](crate::Delivery::mount)).
    pub mount: &'static str,
    /// The subject the delivery came on.
    pub subject: async_nats::Subject,
    /// Its attempt number, from 1.
    pub attempt: u64,
    /// Its stream sequence, on JetStream.
    pub stream_sequence: Option<u64>,
    /// What the handler returned; `None` when it did not run (past the limit), panicked
    /// (reported as `Some(Outcome::None)`), or the payload did not decode.
    pub outcome: Option<Outcome>,
    /// Whether the handler was given the delivery: `false` past the limit (rule 3); `true`
    /// with `outcome == None` when a typed handler's payload did not decode.
    pub handler_ran: bool,
    /// What the plan amounted to.
    pub disposition: Disposition,
    /// What went on the wire, as [`Plan`]'s `Display` gives it.
    pub wire: String,
}

/// A callback told of every settlement.
pub(crate) type Observer = Arc<dyn Fn(&Settled) + Send + Sync>;

/// Everything a mount's deliveries are executed with.
pub(crate) struct MountContext {
    pub(crate) index: usize,
    pub(crate) name: &'static str,
    pub(crate) policy: MountPolicy,
    pub(crate) handler: Arc<dyn crate::Handler>,
    pub(crate) client: Client,
    pub(crate) dead_letters: DeadLetterSink,
    pub(crate) delayed: mpsc::UnboundedSender<(PendingCopy, Instant)>,
    pub(crate) jetstream_names: Option<(&'static str, &'static str)>,
    /// The mount's literal subject, shared: see [`MountContext::subject`].
    pub(crate) literal_subject: LiteralSubject,
    pub(crate) observer: Option<Observer>,
}

/// A literal subject a mount's deliveries come on, kept once per process (see [`intern`]).
pub(crate) enum LiteralSubject {
    /// A Core subject: every delivery comes on it, as a subscription to a literal subject
    /// receives that subject only.
    Every(async_nats::Subject),
    /// A wildcard's copy subject (rule 10): the copies come on it.
    Some(async_nats::Subject),
    /// A JetStream consumer's deliveries come on the subjects of its stream.
    None,
}

impl MountContext {
    /// `subject` for a handler's delivery. A delivered subject is its own buffer, and its first
    /// clone allocates a shared one; a delivery on the mount's literal subject gets the
    /// mount's copy instead, which costs nothing to clone (no allocation, no reference count).
    pub(crate) fn subject(&self, subject: &async_nats::Subject) -> async_nats::Subject {
        match &self.literal_subject {
            LiteralSubject::Every(literal) => literal.clone(),
            LiteralSubject::Some(literal) if literal == subject => literal.clone(),
            LiteralSubject::Some(_) | LiteralSubject::None => subject.clone(),
        }
    }
}

/// `name` kept for the life of the process, once per distinct name: mount, stream and
/// consumer names and mounts' literal subjects, which every delivery carries, then cost no
/// reference counting. A name is
/// allocated the first time it is seen and never freed, so the memory this holds is bounded by
/// the distinct names a process uses, not by how many apps it starts.
pub(crate) fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(kept) = names.get(name) {
        return kept;
    }
    let kept: &'static str = Box::leak(name.into());
    names.insert(kept);
    kept
}

/// A publish that failed; the plan stopped there.
#[derive(Debug)]
pub(crate) struct PublishFailed(pub(crate) String);

/// The delivered message's parts, as the core builds copies and dead letters from.
pub(crate) fn core_message(msg: &async_nats::Message) -> Message {
    let mut headers = Headers::new();
    if let Some(map) = &msg.headers {
        for (name, values) in map.iter() {
            let name = Bytes::copy_from_slice(name.as_ref());
            for value in values {
                headers.append(name.clone(), Bytes::copy_from_slice(value.as_ref()));
            }
        }
    }
    Message {
        reply: msg
            .reply
            .as_ref()
            .map(|r| Bytes::copy_from_slice(r.as_bytes())),
        headers,
        payload: msg.payload.clone(),
    }
}

/// The delivered headers as `(name, value)` byte pairs, one per value.
pub(crate) fn header_pairs(msg: &async_nats::Message) -> impl Iterator<Item = (&[u8], &[u8])> {
    msg.headers.iter().flat_map(|map| {
        map.iter().flat_map(|(name, values)| {
            values
                .iter()
                .map(move |v| (AsRef::<[u8]>::as_ref(name), AsRef::<[u8]>::as_ref(v)))
        })
    })
}

/// The core's header list as async-nats headers. Every pair came from async-nats or from the
/// core's ASCII retry-count header, so none fails to convert; one that did would be dropped
/// with an error log rather than panic.
fn header_map(headers: &Headers) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in headers.iter() {
        let converted = std::str::from_utf8(name)
            .ok()
            .and_then(|n| HeaderName::from_str(n).ok())
            .zip(
                std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| HeaderValue::from_str(v).ok()),
            );
        match converted {
            Some((n, v)) => map.append(n, v),
            None => tracing::error!(
                header = %String::from_utf8_lossy(name),
                "header cannot be represented by async-nats; left out of the publication"
            ),
        }
    }
    map
}

/// Publishes a Core copy (or any plain publication) with its reply subject and headers.
pub(crate) async fn publish_plain(client: &Client, p: Publication) -> Result<(), PublishFailed> {
    let subject = async_nats::Subject::from(p.subject.as_str());
    let headers = header_map(&p.headers);
    let result = match p.reply {
        Some(reply) => {
            let reply = String::from_utf8_lossy(&reply).into_owned();
            client
                .publish_with_reply_and_headers(subject, reply, headers, p.payload)
                .await
        }
        None => {
            client
                .publish_with_headers(subject, headers, p.payload)
                .await
        }
    };
    result.map_err(|e| PublishFailed(e.to_string()))
}

/// Publishes a dead letter and waits for it to be confirmed (rule 8).
async fn publish_dead_letter(ctx: &MountContext, p: Publication) -> Result<(), PublishFailed> {
    let subject = async_nats::Subject::from(p.subject.as_str());
    let headers = header_map(&p.headers);
    match &ctx.dead_letters {
        DeadLetterSink::JetStream(js) => {
            let ack = js
                .publish_with_headers(subject, headers, p.payload)
                .await
                .map_err(|e| PublishFailed(e.to_string()))?;
            ack.await.map_err(|e| PublishFailed(e.to_string()))?;
            Ok(())
        }
        DeadLetterSink::Plain => {
            ctx.client
                .publish_with_headers(subject, headers, p.payload)
                .await
                .map_err(|e| PublishFailed(e.to_string()))?;
            ctx.client
                .flush()
                .await
                .map_err(|e| PublishFailed(e.to_string()))
        }
    }
}

fn log(ctx: &MountContext, msg: &async_nats::Message, delivery: &CoreDelivery<'_>, log: Log) {
    let attempt = delivery.attempt().get();
    match log {
        // One per Core ack: debug, so that a healthy Core service does not flood its logs.
        Log::Unsupported(e) => {
            tracing::debug!(mount = %ctx.name, subject = %msg.subject, attempt, error = %e, "AckError::Unsupported")
        }
        Log::RetryCountIgnored { values } => {
            // Every value of the header as it came, so the bad ones can be seen.
            let header: Vec<String> = header_pairs(msg)
                .filter(|(name, _)| ruststream_core::is_retry_count(name))
                .map(|(_, value)| String::from_utf8_lossy(value).into_owned())
                .collect();
            tracing::warn!(
                mount = %ctx.name, subject = %msg.subject, values, ?header,
                "x-ruststream-retry-count values that are not digits were ignored"
            )
        }
        Log::LetGo => tracing::warn!(
            mount = %ctx.name, subject = %msg.subject, attempt,
            "max_attempts reached and no dead-letter subject is declared: the Core delivery is let go"
        ),
        Log::Lost => tracing::error!(
            mount = %ctx.name, subject = %msg.subject, attempt, size = msg.payload.len(),
            "Core delivery lost: its publish failed"
        ),
    }
}

/// Hands a Core copy to the app's delay queue.
fn schedule_copy(
    ctx: &MountContext,
    msg: &async_nats::Message,
    subject: &ruststream_core::Subject,
    retry_count: ruststream_core::RetryCount,
    at: Instant,
) -> Result<(), PublishFailed> {
    let copy = PendingCopy {
        mount: ctx.index,
        publication: core_message(msg).copy(subject, retry_count),
    };
    ctx.delayed
        .send((copy, at))
        .map_err(|_| PublishFailed("the delay queue has stopped".to_owned()))
}

/// Executes `plan` at once when nothing in it goes to the client (logs, and copies handed to
/// the delay queue), as [`execute`] would: `Some` with the result. `None`, having done
/// nothing, when the plan publishes or settles: then [`execute`] it.
pub(crate) fn execute_now(
    ctx: &MountContext,
    msg: &async_nats::Message,
    delivery: &CoreDelivery<'_>,
    plan: &Plan<'_>,
) -> Option<Result<(), PublishFailed>> {
    let now = |a: &Action<'_>| matches!(a, Action::Log(_) | Action::ScheduleCopy { .. });
    if !plan.actions().iter().all(now) {
        return None;
    }
    for action in plan {
        match *action {
            Action::Log(l) => log(ctx, msg, delivery, l),
            Action::ScheduleCopy {
                subject,
                retry_count,
                at,
            } => {
                if let Err(e) = schedule_copy(ctx, msg, subject, retry_count, at) {
                    return Some(Err(e));
                }
            }
            _ => unreachable!("checked above: only logs and scheduled copies"),
        }
    }
    Some(Ok(()))
}

/// Executes the logs of a plan that holds nothing else (an arrival that runs the handler).
pub(crate) fn execute_logs(
    ctx: &MountContext,
    msg: &async_nats::Message,
    delivery: &CoreDelivery<'_>,
    plan: &Plan<'_>,
) {
    for action in plan {
        if let Action::Log(l) = *action {
            log(ctx, msg, delivery, l);
        }
    }
}

/// Whether executing `plan` waits for the server: a dead letter is confirmed (rule 8) before
/// anything else happens. Every other action goes out without waiting for a reply.
pub(crate) fn waits_for_confirmation(plan: &Plan<'_>) -> bool {
    plan.actions()
        .iter()
        .any(|a| matches!(a, Action::PublishDeadLetter { .. }))
}

/// Executes `plan` in order. Stops at the first publish that fails and returns its error; the
/// caller then plans `Event::PublishFailed`.
pub(crate) async fn execute(
    ctx: &MountContext,
    msg: &async_nats::Message,
    delivery: &CoreDelivery<'_>,
    plan: &Plan<'_>,
) -> Result<(), PublishFailed> {
    for action in plan {
        match *action {
            Action::Settle(settlement) => {
                let Some(reply) = msg.reply.clone() else {
                    tracing::error!(mount = %ctx.name, subject = %msg.subject, "JetStream delivery without an ack reply subject");
                    continue;
                };
                if let Err(e) = ctx
                    .client
                    .publish(reply, settlement.payload().to_bytes())
                    .await
                {
                    tracing::error!(mount = %ctx.name, subject = %msg.subject, error = %e, "settlement not sent");
                }
            }
            Action::PublishCopy {
                subject,
                retry_count,
            } => {
                // Boxed: rare next to settlements, and large; it should not grow every
                // delivery's future.
                Box::pin(publish_plain(
                    &ctx.client,
                    core_message(msg).copy(subject, retry_count),
                ))
                .await?;
            }
            Action::ScheduleCopy {
                subject,
                retry_count,
                at,
            } => {
                schedule_copy(ctx, msg, subject, retry_count, at)?;
            }
            Action::PublishDeadLetter { subject } => {
                Box::pin(publish_dead_letter(
                    ctx,
                    core_message(msg).dead_letter(subject),
                ))
                .await?;
                tracing::warn!(
                    mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
                    dead_letter = %subject, "dead letter published and confirmed"
                );
            }
            Action::Log(l) => log(ctx, msg, delivery, l),
        }
    }
    Ok(())
}
