//! A settled delivery reported: the `ruststream::settlement` event, the metrics and the
//! observer (`api::reports` holds what the user is handed; this is the act of telling).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;

use ruststream_settlement::{Delivery as CoreDelivery, Disposition, Event, Outcome, Plan};

use super::read::stream_sequence;
use crate::api::reports::{Observer, Settled};
use crate::state::mount_context::MountContext;
use crate::support::incoming::Incoming;
use crate::support::panics::panic_message;

/// Reports a settled delivery: the `ruststream::settlement` event and the observer.
#[inline]
pub(crate) fn report(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    event: Option<Event>,
    decided: &Plan<'_>,
) {
    report_sent(ctx, msg, delivery, event, decided, true);
}

/// [`report`], saying whether the plan's settlement was sent (`sent`: `false` when the client
/// refused it and no new client took it).
#[inline(always)]
pub(crate) fn report_sent(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    event: Option<Event>,
    decided: &Plan<'_>,
    sent: bool,
) {
    let outcome = handler_outcome(event);
    ctx.metrics.settled(event, decided, sent);
    let disposition = decided.disposition();
    if outcome == Some(Outcome::Retry) && disposition == Disposition::Unsupported {
        warn_retry_unsupported(ctx, msg);
    }
    tracing::event!(
        target: "ruststream::settlement",
        tracing::Level::DEBUG,
        outcome = ?outcome,
        disposition = disposition.as_str(),
        wire = %decided,
        "settled"
    );
    if let Some(observer) = &ctx.observer {
        observe(observer, ctx, msg, delivery, event, decided, sent);
    }
}

/// What the handler returned, when the event is its result.
#[inline]
fn handler_outcome(event: Option<Event>) -> Option<Outcome> {
    match event {
        Some(Event::Handled(o)) => Some(o),
        _ => None,
    }
}

/// Rule 22's warning for a `retry` that does nothing on a Core mount: once per mount; each
/// such delivery is still logged at debug level. Out of [`report_sent`]'s way, which runs for
/// every delivery.
#[cold]
fn warn_retry_unsupported(ctx: &MountContext, msg: &Incoming) {
    if !ctx.warned_retry.swap(true, Ordering::Relaxed) {
        tracing::warn!(mount = %ctx.name, subject = %msg.subject,
            "retry does nothing on this Core mount: it declares neither max_attempts nor a backoff, so no copy is published and the message is gone (warned once per mount)");
    }
}

/// Tells the app's observer of a settled delivery (see [`report_sent`]).
#[inline(never)]
fn observe(
    observer: &Observer,
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    event: Option<Event>,
    decided: &Plan<'_>,
    sent: bool,
) {
    let outcome = handler_outcome(event);
    let settled = Settled {
        mount: ctx.name,
        subject: msg.subject.clone(),
        attempt: delivery.attempt().get(),
        stream_sequence: stream_sequence(delivery),
        outcome,
        handler_ran: outcome.is_some(),
        undecodable: matches!(event, Some(Event::Undecodable)),
        disposition: decided.disposition(),
        wire: match sent {
            true => decided.to_string(),
            false => format!("{decided} (settlement not sent)"),
        },
        settlement_sent: sent,
    };
    // It runs on the mount's task: a panic must not end the mount.
    if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| observer(&settled))) {
        tracing::error!(mount = %ctx.name, subject = %msg.subject, panic = panic_message(&*panic),
            "on_settled observer panicked; the delivery is settled, the mount goes on");
    }
}
