//! Running a handler: the delivery it is given, and its panics caught (rule 13).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use ruststream_settlement::{Delivery as CoreDelivery, Event, Outcome};

use crate::api::codec::DecodeError;
use crate::api::context::ContextSource;
use crate::api::delivery::{Delivery, JetStreamInfo};
use crate::api::handled::Handled;
use crate::api::handler::{HandlerSlot, PendingRun};
use crate::api::turns::HeldTurn;
use crate::state::mount_context::MountContext;
use crate::support::incoming::Incoming;
use crate::support::panics::{drop_caught, panic_message};

/// The delivery as its handler is given it: its parts shared with the message (no copy), its
/// mount's names, and its JetStream metadata.
#[inline]
pub(crate) fn handler_delivery(
    ctx: &MountContext,
    msg: &Incoming,
    core: &CoreDelivery<'_>,
) -> Delivery {
    let jetstream = match (core.model, ctx.jetstream_names) {
        (ruststream_settlement::Model::JetStream(r), Some((stream, consumer))) => {
            Some(JetStreamInfo {
                stream,
                consumer,
                delivered: r.delivered,
                stream_sequence: r.stream_sequence,
                consumer_sequence: r.consumer_sequence,
                timestamp: r.timestamp,
                pending: r.pending,
            })
        }
        _ => None,
    };
    Delivery {
        mount: ctx.name,
        subject: ctx.subject(&msg.subject),
        reply: msg.reply.clone(),
        headers: msg.headers.clone(),
        payload: msg.payload.clone(),
        attempt: core.attempt(),
        jetstream,
    }
}

/// A handler run that did not finish at its first poll, taken out of the mount loop's slot
/// ([`HandlerSlot::take_run`]). Its panic is caught (rule 13), in its polls and where it is
/// dropped (finished, or cancelled at the handler time limit): a future that panics when
/// dropped is logged, and unwinds through nothing else (on the task a mount's waiting
/// deliveries share beside its loop, it ended every one of them, issue 39).
pub(crate) struct HandlerRun {
    /// Always `Some` until dropped.
    run: Option<PendingRun>,
    mount: &'static str,
}

impl HandlerRun {
    /// The run `run` of a handler of the mount `ctx`.
    pub(crate) fn new(ctx: &MountContext, run: PendingRun) -> Self {
        Self {
            run: Some(run),
            mount: ctx.name,
        }
    }
}

impl Future for HandlerRun {
    type Output = std::thread::Result<Handled>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().run {
            Some(PendingRun::InSlot(slot)) => caught(|| slot.poll_run(cx)),
            Some(PendingRun::Boxed(run)) => caught(|| run.as_mut().poll(cx)),
            None => Poll::Pending,
        }
    }
}

impl Drop for HandlerRun {
    fn drop(&mut self) {
        if let Some(run) = self.run.take()
            && let Err(panic) = drop_caught(run)
        {
            tracing::error!(mount = %self.mount, panic = panic_message(&*panic),
                "a handler's future panicked while it was dropped");
        }
    }
}

/// One poll of a handler's run, its panic caught.
#[inline]
fn caught(poll: impl FnOnce() -> Poll<Handled>) -> Poll<std::thread::Result<Handled>> {
    match std::panic::catch_unwind(AssertUnwindSafe(poll)) {
        Ok(Poll::Pending) => Poll::Pending,
        Ok(Poll::Ready(handled)) => Poll::Ready(Ok(handled)),
        Err(panic) => Poll::Ready(Err(panic)),
    }
}

/// Polls the run in a mount loop's slot once, its panic caught (rule 13). A run that panicked
/// is dropped with its slot, which is made again (a panic while dropping it is caught and
/// logged too): the next delivery never meets what the panic left.
#[inline]
pub(crate) fn poll_slot(
    ctx: &MountContext,
    slot: &mut HandlerSlot,
    cx: &mut Context<'_>,
) -> Poll<std::thread::Result<Handled>> {
    let polled = caught(|| slot.poll_run(cx));
    if let Poll::Ready(Err(_)) = polled {
        renew_slot(ctx, slot);
    }
    polled
}

/// Gives the mount loop a new slot in place of `slot`, dropping the old one (and what it
/// holds) with its panic caught.
#[cold]
fn renew_slot(ctx: &MountContext, slot: &mut HandlerSlot) {
    let old = std::mem::replace(slot, ctx.handler.clone().slot());
    if let Err(panic) = drop_caught(old) {
        tracing::error!(mount = %ctx.name, panic = panic_message(&*panic),
            "a handler's future panicked while it was dropped");
    }
}

/// Starts the handler on the delivery in the mount loop's `slot`, or gives at once the event
/// when it could not start (a payload that does not decode, or a panic in the call itself).
/// `held` keeps the key's turn of a delivery on a mount with strict order (rule 24).
#[inline]
pub(crate) fn start_handler(
    ctx: &MountContext,
    slot: &mut HandlerSlot,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    held: Option<&HeldTurn>,
) -> Result<(), Event> {
    // The delivery is built where the call takes it (it is over 200 bytes: built outside the
    // closure it was moved twice more, measured as 1 % of a Core mount's thread, issue 13).
    match std::panic::catch_unwind(AssertUnwindSafe(|| {
        let source = ContextSource::holding(&ctx.handler_context, held);
        let source = match delivery.model {
            ruststream_settlement::Model::JetStream(r) => {
                source.leased(ruststream_settlement::LeasedDelivery::of(ctx.index, &r))
            }
            ruststream_settlement::Model::Core(_) => source,
        };
        slot.start(handler_delivery(ctx, msg, delivery), source)
    })) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(decode)) => Err(undecodable(ctx, msg, delivery, &decode)),
        // Every slot drops the run it held before it calls the handler: one that panicked in
        // the call holds none, and is used again as it is.
        Err(panic) => Err(panicked(ctx, msg, delivery, &*panic)),
    }
}

/// The event of a payload that does not decode for a typed handler (rule 17), logged.
#[cold]
fn undecodable(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    decode: &DecodeError,
) -> Event {
    tracing::warn!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
        error = %decode, "payload does not decode: at-limit path");
    // Not the codec's text, which may quote the payload: `$SRV.STATS` shows it to the
    // account. The log line above keeps it.
    ctx.metrics.run_failed(&"payload does not decode");
    Event::Undecodable
}

/// The event of a handler run that ended, and the handler's error text when it returned an
/// error (for the dead letter's reason and its provenance headers, rule 19).
#[inline]
pub(crate) fn handled(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    result: std::thread::Result<Handled>,
) -> (Event, Option<Box<str>>) {
    match result {
        Ok(Handled::Outcome(outcome)) => {
            ctx.metrics.run_ended(outcome);
            (Event::Handled(outcome), None)
        }
        result => not_an_outcome(ctx, msg, delivery, result),
    }
}

/// [`handled`] for a run that gave the runtime no outcome: an error, a reply, or a panic.
#[cold]
fn not_an_outcome(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    result: std::thread::Result<Handled>,
) -> (Event, Option<Box<str>>) {
    // Kept whether or not the mount asks for provenance: a dead letter's reason is
    // `handler-error` in its metric and log line too (rule 19's one vocabulary).
    let error = match &result {
        Ok(Handled::Error(error)) => Some(Box::from(error.as_str())),
        _ => None,
    };
    let event = match result {
        Ok(Handled::Outcome(outcome)) => {
            ctx.metrics.run_ended(outcome);
            Event::Handled(outcome)
        }
        Ok(Handled::Reply(_)) => {
            // Only a `Handler` of the application's own gives this: the handlers built from
            // functions send their replies before they finish.
            error_outcome(ctx, msg, delivery, "the handler gave the runtime a reply to send; a `Handler` sends its replies itself through its context".to_owned())
        }
        Ok(Handled::Error(error)) => {
            ctx.metrics.handler_error();
            error_outcome(ctx, msg, delivery, error)
        }
        Err(panic) => panicked(ctx, msg, delivery, &*panic),
    };
    (event, error)
}

/// The event of a handler's error: the mount's error policy's outcome.
fn error_outcome(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    error: String,
) -> Event {
    // An error whatever outcome the policy makes of it (a service endpoint's `num_errors`).
    ctx.metrics.run_failed(&error);
    // The policy may be the application's function: its panic is caught as a handler's is
    // (rule 13), and counts as no outcome.
    let decided = std::panic::catch_unwind(AssertUnwindSafe(|| ctx.on_error.outcome(&error)));
    let outcome = match decided {
        Ok(outcome) => outcome,
        Err(panic) => {
            tracing::error!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
                %error, panic = panic_message(&*panic), "the mount's error policy panicked: treated as no outcome");
            return Event::Handled(Outcome::None);
        }
    };
    tracing::warn!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
        %error, ?outcome, "handler returned an error: settled as the mount's error policy says");
    Event::Handled(outcome)
}

/// A handler that panicked counts as no outcome (rule 13).
#[cold]
fn panicked(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    panic: &(dyn std::any::Any + Send),
) -> Event {
    tracing::error!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
        panic = panic_message(panic), "handler panicked: treated as no outcome");
    ctx.metrics
        .run_failed(&format_args!("panicked: {}", panic_message(panic)));
    Event::Handled(Outcome::None)
}
