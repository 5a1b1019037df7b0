//! A dead letter (rules 8, 9 and 19): the delivery as it arrived, with provenance headers when
//! the mount asks for them, published and confirmed before anything else of its plan.

use async_nats::Subject;
use ruststream_settlement::{DeadLetterReason, Delivery as CoreDelivery, Publication};

use super::publish::{PublishFailed, Unpublished, core_message, header_map};
use crate::state::mount_context::{DeadLetterSink, MountContext};
use crate::support::incoming::Incoming;

/// Publishes the dead letter of `msg` to `subject` and waits for it to be confirmed (rule 8),
/// then logs it at warn level. `error` is the handler's error text, for the provenance
/// headers of a mount that asks for them (rule 19).
///
/// # Errors
/// [`Unpublished::DeadLetter`] when it was not published or not confirmed.
pub(crate) async fn dead_letter(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    subject: &ruststream_settlement::Subject,
    reason: DeadLetterReason,
    error: Option<&str>,
) -> Result<(), PublishFailed> {
    let letter = letter(ctx, msg, delivery, subject, reason, error);
    Box::pin(publish(ctx, letter)).await?;
    // One vocabulary (rule 19): the reason its provenance header gives, in the log line and
    // the metric, whether or not the mount asks for provenance.
    let reason = reason.with_error(error.is_some());
    ctx.metrics.dead_lettered(reason);
    match ctx.dead_letters {
        DeadLetterSink::JetStream(_) => tracing::warn!(
            mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
            dead_letter = %subject, reason = %reason, "dead letter published and confirmed by its stream"
        ),
        // Nothing stores it: the flush says only that the server received it.
        DeadLetterSink::Plain => tracing::warn!(
            mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
            dead_letter = %subject, reason = %reason, "dead letter published on Core NATS and flushed to the server (no stream stores its subject: only a subscriber listening now receives it)"
        ),
    }
    Ok(())
}

/// The dead letter of `msg` to `subject`: the delivery as it arrived (rule 9), with the
/// provenance headers when the mount asks for them (rule 19), unless they would make it
/// larger than the server's `max_payload`: it then goes without them, and, for a JetStream
/// delivery that close to the limit, without the runtime's own `Nats-Msg-Id` too, as the
/// delivery arrived, which fits since it was delivered. A warning says what was left out.
fn letter(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    subject: &ruststream_settlement::Subject,
    reason: DeadLetterReason,
    error: Option<&str>,
) -> Publication {
    let message = core_message(msg);
    let max = ctx.client.max_payload();
    if ctx.policy.provenance() {
        let provenance = ruststream_settlement::Provenance::new(ctx.name, reason, error);
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
async fn publish(ctx: &MountContext, p: Publication) -> Result<(), PublishFailed> {
    let subject = Subject::from(p.subject.as_str());
    let own_id = p
        .headers
        .iter()
        .find(|(name, _)| *name == ruststream_settlement::MSG_ID_HEADER.as_bytes())
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
