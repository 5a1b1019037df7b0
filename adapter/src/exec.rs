//! Executing a plan: one exhaustive `match` over the core's actions.
//!
//! Nothing here decides anything about attempts, limits or headers: the plan says what to do,
//! and this module does it over async-nats, in order, stopping at the first publish that
//! fails (the core's adapter obligations).

use std::str::FromStr;
use std::time::Instant;

use async_nats::header::{HeaderName, HeaderValue};
use async_nats::{Client, HeaderMap};
use bytes::Bytes;
use ruststream_core::{
    Action, Delivery as CoreDelivery, Headers, Log, Message, PendingCopy, Plan, Publication,
    RETRY_COUNT_HEADER, RetryCount, is_dropped_directive, is_retry_count, wire_len,
};

use crate::incoming::Incoming;
use crate::mount_context::{DeadLetterSink, MountContext};

/// A publish that failed; the plan stopped there.
#[derive(Debug)]
pub(crate) struct PublishFailed {
    /// What was not published.
    pub(crate) what: Unpublished,
    /// Why, for the log.
    pub(crate) reason: String,
}

/// What a [`PublishFailed`] did not publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unpublished {
    /// A Core copy (at once, or handed to the delay queue).
    Copy,
    /// A Core copy larger than the server's `max_payload`: never sent (rule 21).
    CopyTooLarge,
    /// A dead letter.
    DeadLetter,
    /// A JetStream settlement (`+ACK`, `-NAK`, `+TERM`): the mount's client refused it and no
    /// new client took it in time. Nothing is planned after it: the server redelivers.
    Settlement,
}

impl PublishFailed {
    fn new(what: Unpublished, reason: impl std::fmt::Display) -> Self {
        Self {
            what,
            reason: reason.to_string(),
        }
    }
}

/// Refuses a Core copy that the server would refuse for its size (rule 21): its headers and
/// payload (`size`, as [`ruststream_core::wire_len`] counts them) over the connection's
/// `max_payload`.
fn check_copy_size(client: &Client, size: usize) -> Result<(), PublishFailed> {
    let max = client.max_payload();
    match size > max {
        true => Err(PublishFailed::new(
            Unpublished::CopyTooLarge,
            format_args!("the copy is {size} bytes, over the server's max_payload of {max}"),
        )),
        false => Ok(()),
    }
}

/// The delivered message's parts, as the core builds copies and dead letters from.
pub(crate) fn core_message(msg: &Incoming) -> Message {
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
pub(crate) fn header_pairs(msg: &Incoming) -> impl Iterator<Item = (&[u8], &[u8])> {
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

/// The headers of a Core copy of `msg` after attempt `retry_count`, as async-nats headers,
/// and the copy's size as the server counts it against `max_payload`: the same pairs as
/// [`Headers::for_copy`] (every delivered pair but the retry-count header and the dropped
/// directives, then `x-ruststream-retry-count`) and the same size as
/// [`Publication::wire_len`], built straight from the delivered headers, without the
/// round trip through the core's header list.
pub(crate) fn copy_headers(msg: &Incoming, retry_count: RetryCount) -> (HeaderMap, usize) {
    let mut map = HeaderMap::new();
    if let Some(delivered) = &msg.headers {
        for (name, values) in delivered.iter() {
            let bytes: &[u8] = name.as_ref();
            if is_retry_count(bytes) || is_dropped_directive(bytes) {
                continue;
            }
            for value in values {
                map.append(name.clone(), value.clone());
            }
        }
    }
    let mut digits = itoa::Buffer::new();
    map.insert(
        HeaderName::from_static(RETRY_COUNT_HEADER),
        digits.format(retry_count.0),
    );
    let pairs = map.iter().flat_map(|(name, values)| {
        let name: &[u8] = name.as_ref();
        values.iter().map(move |v| (name.len(), v.as_str().len()))
    });
    let size = wire_len(msg.payload.len(), pairs);
    (map, size)
}

/// A Core copy built and checked against the server's `max_payload` (rule 21), ready to hand
/// to the client.
pub(crate) struct CopyNow {
    to: async_nats::Subject,
    reply: Option<async_nats::Subject>,
    headers: HeaderMap,
    payload: Bytes,
}

impl CopyNow {
    /// The copy of `msg` after attempt `retry_count`, to `subject`.
    ///
    /// # Errors
    /// [`Unpublished::CopyTooLarge`] when it would be larger than the server's `max_payload`.
    fn new(
        ctx: &MountContext,
        msg: &Incoming,
        subject: &ruststream_core::Subject,
        retry_count: RetryCount,
    ) -> Result<Self, PublishFailed> {
        let (headers, size) = copy_headers(msg, retry_count);
        check_copy_size(&ctx.client, size)?;
        // A copy goes back to the subject it came on (a Core subject mount): no new subject.
        let to = match msg.subject.as_str() == subject.as_str() {
            true => msg.subject.clone(),
            false => async_nats::Subject::from(subject.as_str()),
        };
        Ok(Self {
            to,
            reply: msg.reply.clone(),
            headers,
            payload: msg.payload.clone(),
        })
    }

    /// Hands the copy to `client`. Borrows nothing of the delivered message, so that a mount
    /// loop can keep it pending while the message moves.
    ///
    /// # Errors
    /// [`Unpublished::Copy`] when the client refuses it (closed).
    pub(crate) async fn publish(self, client: &Client) -> Result<(), PublishFailed> {
        let Self {
            to,
            reply,
            headers,
            payload,
        } = self;
        let result = match reply {
            Some(reply) => {
                client
                    .publish_with_reply_and_headers(to, reply, headers, payload)
                    .await
            }
            None => client.publish_with_headers(to, headers, payload).await,
        };
        result.map_err(|e| PublishFailed::new(Unpublished::Copy, e))
    }
}

/// Publishes a Core copy of `msg` to `subject` at once (rule 4): its reply subject and payload
/// unchanged, its headers as [`copy_headers`] gives them; refused, like every copy, when the
/// server would refuse it for its size (rule 21).
async fn publish_copy(
    ctx: &MountContext,
    msg: &Incoming,
    subject: &ruststream_core::Subject,
    retry_count: RetryCount,
) -> Result<(), PublishFailed> {
    CopyNow::new(ctx, msg, subject, retry_count)?
        .publish(&ctx.client)
        .await
}

/// Publishes a Core copy (or any plain publication) with its reply subject and headers; a
/// failure says it is `what`.
pub(crate) async fn publish_plain(
    client: &Client,
    p: Publication,
    what: Unpublished,
) -> Result<(), PublishFailed> {
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
    result.map_err(|e| PublishFailed::new(what, e))
}

/// The dead letter of `msg` to `subject`: the delivery as it arrived (rule 9), with the
/// provenance headers when the mount asks for them (rule 19), unless they would make it
/// larger than the server's `max_payload`: it then goes without them, and, for a JetStream
/// delivery that close to the limit, without the runtime's own `Nats-Msg-Id` too, as the
/// delivery arrived, which fits since it was delivered. A warning says what was left out.
fn dead_letter(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    subject: &ruststream_core::Subject,
    reason: ruststream_core::DeadLetterReason,
    error: Option<&str>,
) -> Publication {
    let message = core_message(msg);
    let max = ctx.client.max_payload();
    if ctx.policy.provenance() {
        let provenance = ruststream_core::Provenance::new(ctx.name, reason, error);
        let letter = message.dead_letter(subject, delivery, Some(&provenance));
        if letter.wire_len() <= max {
            return letter;
        }
        tracing::warn!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
            size = letter.wire_len(), max_payload = max,
            "dead letter sent without its provenance headers: with them it would be larger than the server's max_payload");
    }
    let letter = message.dead_letter(subject, delivery, None);
    if letter.wire_len() <= max {
        return letter;
    }
    tracing::warn!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
        size = letter.wire_len(), max_payload = max,
        "dead letter sent without the runtime's Nats-Msg-Id: with it, it would be larger than the server's max_payload (a publish tried again after a failure may store it twice)");
    letter.without_runtime_msg_id()
}

/// Publishes a dead letter and waits for it to be confirmed (rule 8).
///
/// A stream's acknowledgement that says `duplicate` confirms the dead letter only when it
/// carries the runtime's own `Nats-Msg-Id` (rule 9: a JetStream delivery's dead letter, whose
/// id names the delivery, so the duplicate is this very dead letter, stored by an earlier try).
/// Any other duplicate means the stream stored nothing: a failure, never a confirmation.
async fn publish_dead_letter(ctx: &MountContext, p: Publication) -> Result<(), PublishFailed> {
    let subject = async_nats::Subject::from(p.subject.as_str());
    let own_id = p
        .headers
        .iter()
        .find(|(name, _)| *name == ruststream_core::MSG_ID_HEADER.as_bytes())
        .map(|(_, id)| String::from_utf8_lossy(id).into_owned());
    let headers = header_map(&p.headers);
    match &ctx.dead_letters {
        DeadLetterSink::JetStream(js) => {
            let failed = |e: &dyn std::fmt::Display| PublishFailed::new(Unpublished::DeadLetter, e);
            let ack = js
                .publish_with_headers(subject, headers, p.payload)
                .await
                .map_err(|e| failed(&e))?;
            let ack = ack.await.map_err(|e| failed(&e))?;
            match (ack.duplicate, own_id) {
                (false, _) => Ok(()),
                (true, Some(id)) => {
                    tracing::info!(mount = %ctx.name, stream = %ack.stream, sequence = ack.sequence, %id,
                        "dead letter already stored by an earlier try: confirmed");
                    Ok(())
                }
                (true, None) => Err(failed(&format_args!(
                    "stream `{}` reported the dead letter a duplicate and stored nothing",
                    ack.stream
                ))),
            }
        }
        DeadLetterSink::Plain => {
            let failed = |e: &dyn std::fmt::Display| PublishFailed::new(Unpublished::DeadLetter, e);
            ctx.client
                .publish_with_headers(subject, headers, p.payload)
                .await
                .map_err(|e| failed(&e))?;
            ctx.client.flush().await.map_err(|e| failed(&e))
        }
    }
}

#[inline]
fn log(ctx: &MountContext, msg: &Incoming, delivery: &CoreDelivery<'_>, log: Log) {
    match log {
        // One per Core ack: debug, so that a healthy Core service does not flood its logs.
        Log::Unsupported(e) => {
            tracing::debug!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(), error = %e, "AckError::Unsupported")
        }
        log => log_otherwise(ctx, msg, delivery, log),
    }
}

/// [`log`] of anything but a Core ack's `AckError::Unsupported`, which [`log`] writes itself
/// (it runs for every Core ack; the others are rare).
#[cold]
fn log_otherwise(ctx: &MountContext, msg: &Incoming, delivery: &CoreDelivery<'_>, log: Log) {
    let attempt = delivery.attempt().get();
    match log {
        Log::Unsupported(_) => unreachable!("written by `log`"),
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
            "the Core delivery took the at-limit path (max_attempts reached, or its handler rejected it) and no dead-letter subject is declared: it is let go"
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
    msg: &Incoming,
    subject: &ruststream_core::Subject,
    retry_count: ruststream_core::RetryCount,
    at: Instant,
) -> Result<(), PublishFailed> {
    let message = core_message(msg);
    // The copy as it will be published to `subject` (the mount's copy subject, which the
    // delay loop gives back when it falls due), built once here for its size.
    check_copy_size(&ctx.client, message.copy(subject, retry_count).wire_len())?;
    let copy = PendingCopy::new(ctx.index, &message, retry_count);
    ctx.delayed
        .send((copy, at))
        .map_err(|_| PublishFailed::new(Unpublished::Copy, "the delay queue has stopped"))
}

/// How long a settlement that the mount's client could not send waits for the supervisor's
/// new client (rule 20), at most; never more than half the consumer's `ack_wait`.
const NEW_CLIENT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// Sends a settlement that the mount's client refused (`error`: its connection task is gone)
/// through the client the supervisor connects in its place: an ack reply subject is good on
/// any connection, so the delivery is settled once, not redelivered and run again. Waits for
/// that client at most [`NEW_CLIENT_PATIENCE`] or half `ack_wait`; logs the settlement as not
/// sent when none comes, or when it fails too. Whether it was sent.
async fn settle_through_new_client(
    ctx: &MountContext,
    msg: &Incoming,
    reply: async_nats::Subject,
    payload: Bytes,
    error: &async_nats::PublishError,
) -> bool {
    let patience = ctx
        .lease_settings()
        .ack_wait
        .map_or(NEW_CLIENT_PATIENCE, |ack_wait| {
            NEW_CLIENT_PATIENCE.min(ack_wait / 2)
        });
    let mut clients = ctx.clients.clone();
    let newer = async {
        loop {
            if clients.changed().await.is_err() {
                return None;
            }
            let client = clients.borrow_and_update().clone();
            if client.publish(reply.clone(), payload.clone()).await.is_ok() {
                return Some(());
            }
        }
    };
    match tokio::time::timeout(patience, newer).await {
        Ok(Some(())) => {
            tracing::info!(mount = %ctx.name, subject = %msg.subject, first_error = %error,
                "settlement sent through the new client");
            true
        }
        Ok(None) | Err(_) => {
            tracing::error!(mount = %ctx.name, subject = %msg.subject, error = %error,
                "settlement not sent: the server delivers the message again after ack_wait");
            false
        }
    }
}

/// Whether `action` is executed without the client: a log, or a copy handed to the delay
/// queue.
fn without_client(action: &Action<'_>) -> bool {
    match action {
        Action::Log(_) | Action::ScheduleCopy { .. } => true,
        Action::Settle(_) | Action::PublishCopy { .. } | Action::PublishDeadLetter { .. } => false,
    }
}

/// Executes `plan` at once when nothing in it goes to the client (logs, and copies handed to
/// the delay queue), as [`execute`] would: `Some` with the result. `None`, having done
/// nothing, when the plan publishes or settles: then [`execute`] it.
#[inline]
pub(crate) fn execute_now(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    plan: &Plan<'_>,
) -> Option<Result<(), PublishFailed>> {
    execute_without_client(ctx, msg, delivery, plan.actions())
}

/// Executes `actions` in order when none goes to the client (logs, and copies handed to the
/// delay queue): `Some` with the result, stopping at the first that fails. `None`, having
/// done nothing, when one publishes or settles.
#[inline]
fn execute_without_client(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    actions: &[Action<'_>],
) -> Option<Result<(), PublishFailed>> {
    if !actions.iter().all(without_client) {
        return None;
    }
    for action in actions {
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
            Action::Settle(_) | Action::PublishCopy { .. } | Action::PublishDeadLetter { .. } => {
                unreachable!("checked above: only logs and scheduled copies")
            }
        }
    }
    Some(Ok(()))
}

/// Executes a plan that ends with a Core copy published at once, everything before it going
/// without the client (the plan of a Core `retry`), as [`execute`] would, up to that copy, and
/// builds the copy: `Some` with what is left, a [`CopyNow::publish`], which a mount loop can
/// keep pending without holding the message. `None`, having done nothing, for a plan of
/// another shape.
///
/// The error is that of the first action that failed (a copy that could not be handed to the
/// delay queue, or one too large to publish); the plan stopped there.
pub(crate) fn start_copy(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    plan: &Plan<'_>,
) -> Option<Result<CopyNow, PublishFailed>> {
    let (
        Action::PublishCopy {
            subject,
            retry_count,
        },
        before,
    ) = plan.actions().split_last()?
    else {
        return None;
    };
    Some(
        execute_without_client(ctx, msg, delivery, before)?
            .and_then(|()| CopyNow::new(ctx, msg, subject, *retry_count)),
    )
}

/// Executes the logs of an arrival plan that runs the handler: the core plans only logs
/// there (rule 3 lets the handler run, so nothing is settled or published yet). Anything else
/// in it would be a planner bug; it is logged as an error, never silently skipped.
#[inline(always)]
pub(crate) fn execute_logs(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    plan: &Plan<'_>,
) {
    // Most arrival plans hold nothing: checked where it is called, with no call.
    if !plan.actions().is_empty() {
        execute_arrival_logs(ctx, msg, delivery, plan);
    }
}

/// [`execute_logs`] of a plan that holds actions.
#[inline(never)]
fn execute_arrival_logs(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    plan: &Plan<'_>,
) {
    for action in plan {
        match *action {
            Action::Log(l) => log(ctx, msg, delivery, l),
            Action::Settle(_)
            | Action::PublishCopy { .. }
            | Action::ScheduleCopy { .. }
            | Action::PublishDeadLetter { .. } => tracing::error!(
                mount = %ctx.name, subject = %msg.subject, ?action,
                "an arrival plan that runs the handler holds more than logs: not executed"
            ),
        }
    }
}

/// Whether executing `plan` waits for the server: a dead letter is confirmed (rule 8) before
/// anything else happens. Every other action goes out without waiting for a reply.
#[inline]
pub(crate) fn waits_for_confirmation(plan: &Plan<'_>) -> bool {
    plan.actions().iter().any(|action| match action {
        Action::PublishDeadLetter { .. } => true,
        Action::Settle(_)
        | Action::PublishCopy { .. }
        | Action::ScheduleCopy { .. }
        | Action::Log(_) => false,
    })
}

/// Executes `plan` in order. Stops at the first publish that fails and returns its error; the
/// caller then plans `Event::PublishFailed`. `error` is the handler's error text, for the
/// provenance headers of a mount that asks for them (rule 19).
pub(crate) async fn execute(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    plan: &Plan<'_>,
    error: Option<&str>,
) -> Result<(), PublishFailed> {
    for action in plan {
        match *action {
            Action::Settle(settlement) => {
                let Some(reply) = msg.reply.clone() else {
                    tracing::error!(mount = %ctx.name, subject = %msg.subject, "JetStream delivery without an ack reply subject");
                    continue;
                };
                let payload = settlement.payload().to_bytes();
                if let Err(e) = ctx.client.publish(reply.clone(), payload.clone()).await
                    && !Box::pin(settle_through_new_client(ctx, msg, reply, payload, &e)).await
                {
                    return Err(PublishFailed::new(Unpublished::Settlement, e));
                }
            }
            Action::PublishCopy {
                subject,
                retry_count,
            } => {
                publish_copy(ctx, msg, subject, retry_count).await?;
            }
            Action::ScheduleCopy {
                subject,
                retry_count,
                at,
            } => {
                schedule_copy(ctx, msg, subject, retry_count, at)?;
            }
            Action::PublishDeadLetter { subject, reason } => {
                let letter = dead_letter(ctx, msg, delivery, subject, reason, error);
                Box::pin(publish_dead_letter(ctx, letter)).await?;
                match ctx.dead_letters {
                    DeadLetterSink::JetStream(_) => tracing::warn!(
                        mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
                        dead_letter = %subject, "dead letter published and confirmed by its stream"
                    ),
                    // Nothing stores it: the flush says only that the server received it.
                    DeadLetterSink::Plain => tracing::warn!(
                        mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
                        dead_letter = %subject, "dead letter published on Core NATS and flushed to the server (no stream stores its subject: only a subscriber listening now receives it)"
                    ),
                }
            }
            Action::Log(l) => log(ctx, msg, delivery, l),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(headers: Option<HeaderMap>) -> Incoming {
        Incoming::from(async_nats::Message {
            subject: "orders.new".into(),
            reply: None,
            payload: Bytes::from_static(b"{\"id\":1}"),
            headers,
            status: None,
            description: None,
            length: 0,
        })
    }

    /// `(name, value)` pairs, sorted: async-nats' header map keeps no order.
    fn pairs<'a>(it: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut v: Vec<_> = it.map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
        v.sort();
        v
    }

    /// The copy built straight on async-nats' headers is the core's copy: the same pairs and
    /// the same size against `max_payload`.
    #[test]
    fn copy_headers_are_the_cores_copy() {
        let mut many = HeaderMap::new();
        many.append("Trace", "a");
        many.append("Trace", "b");
        many.insert("X-RustStream-Retry-Count", "7");
        many.insert("Nats-Msg-Id", "dup-1");
        many.insert("Nats-Schedule-Next", "x");
        many.insert("Keep-Me", "yes");
        for headers in [None, Some(HeaderMap::new()), Some(many)] {
            let msg = message(headers);
            for count in [1, 9, 1_000_000] {
                let retry_count = RetryCount(count);
                let subject = ruststream_core::Subject::new("orders.new").expect("a subject");
                let core = core_message(&msg).copy(&subject, retry_count);
                let (map, size) = copy_headers(&msg, retry_count);
                let ours: Vec<(&[u8], &[u8])> = map
                    .iter()
                    .flat_map(|(n, vs)| vs.iter().map(move |v| (n.as_ref(), v.as_str().as_bytes())))
                    .collect();
                assert_eq!(pairs(ours.into_iter()), pairs(core.headers.iter()));
                assert_eq!(size, core.wire_len());
            }
        }
    }
}
