//! The life of one delivery: read, the arrival check (rule 3), its handler, its plan, the
//! plan's execution, and the report of its settlement.
//!
//! A delivery runs in place as far as it can without awaiting ([`begin`]), on the task of the
//! mount loop that received it; only one that has to wait (a handler still pending, a dead
//! letter waiting for its confirmation) becomes a boxed future ([`Waiting`]), run wherever the
//! loop decides.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ruststream_core::{
    AckReply, Delivery as CoreDelivery, Disposition, Event, LeaseEnd, Plan, RetryCountReading,
    plan_with_clock,
};
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use crate::exec::{
    PublishFailed, Unpublished, execute, execute_logs, execute_now, header_pairs,
    waits_for_confirmation,
};
use crate::handler::HandlerSlot;
use crate::handler_run::{HandlerRun, handled, poll_slot, start_handler};
use crate::incoming::Incoming;
use crate::leases::run_leased;
use crate::metrics::Loss;
use crate::mount_context::MountContext;
use crate::report::{report, report_sent};
use crate::runtime::Runtime;

/// The rest of a delivery that has to wait for its handler or for a dead letter's
/// confirmation, to be run wherever its caller decides.
pub(crate) type Waiting = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Where a waiting delivery stands.
pub(crate) enum Stage {
    /// Its handler is running.
    Handling(HandlerRun, std::time::Instant),
    /// Its event is known (`None`: the handler did not run): its plan is made again (the same
    /// for the same event) and executed, unless it already was, with this result (`Some`):
    /// then only the recovery from a failed publish and the report are left.
    Decided(Option<Event>, Option<Result<(), PublishFailed>>),
    /// Its handler returned an error, which the mount's error policy turned into this event,
    /// and the plan publishes a dead letter: the error's text goes into its provenance headers
    /// (rule 19; kept only for a mount that asks for them).
    Failed(Event, Box<str>),
}

/// How a mount loop reads a delivered message into what the core needs to know of it:
/// [`read_core`] on a Core mount, [`read_jetstream`] on a JetStream one. `None` when the
/// message cannot be handled at all (logged).
pub(crate) trait Reader:
    for<'m> Fn(&MountContext, &'m Incoming) -> Option<CoreDelivery<'m>> + Copy + Send + Sync + 'static
{
}

impl<F> Reader for F where
    F: for<'m> Fn(&MountContext, &'m Incoming) -> Option<CoreDelivery<'m>>
        + Copy
        + Send
        + Sync
        + 'static
{
}

/// A Core message: its attempt from the retry-count header (rule 5).
#[inline]
pub(crate) fn read_core<'m>(ctx: &MountContext, msg: &'m Incoming) -> Option<CoreDelivery<'m>> {
    let reading = match msg.headers {
        None => RetryCountReading::default(),
        Some(_) => RetryCountReading::read(header_pairs(msg)),
    };
    // Rule 18's jitter tells Core messages apart by subject and payload; only a mount with a
    // backoff pays for the hash. Built where it is returned: the delivery is as large as a
    // JetStream one, and moving it costs (issue 13).
    Some(match ctx.policy.backoff() {
        None => CoreDelivery::core(&msg.subject, reading),
        Some(_) => CoreDelivery::core(&msg.subject, reading).keyed_by_payload(&msg.payload),
    })
}

/// A JetStream message: its metadata from the ack reply subject (rule 1). `None` for a
/// message whose ack reply subject cannot be read (rule 22, logged with its subject): without
/// it there is no attempt count and nothing to settle with, and running the handler would
/// make the retry limit vanish, so it is neither handled nor settled.
#[inline]
pub(crate) fn read_jetstream<'m>(
    ctx: &MountContext,
    msg: &'m Incoming,
) -> Option<CoreDelivery<'m>> {
    let reply = msg.reply.as_ref().map_or(&b""[..], |r| r.as_bytes());
    match AckReply::parse(reply) {
        Ok(r) => {
            ctx.received.note(r.stream_sequence);
            Some(CoreDelivery::jetstream(&msg.subject, r))
        }
        Err(e) => {
            tracing::error!(mount = %ctx.name, subject = %msg.subject, error = %e,
                "JetStream message with an unreadable ack reply subject: not handled, not settled");
            None
        }
    }
}

/// The delivery's stream sequence, on JetStream.
pub(crate) fn stream_sequence(delivery: &CoreDelivery<'_>) -> Option<u64> {
    match delivery.model {
        ruststream_core::Model::JetStream(r) => Some(r.stream_sequence),
        ruststream_core::Model::Core(_) => None,
    }
}

#[inline]
fn delivery_span(ctx: &MountContext, msg: &Incoming, delivery: &CoreDelivery<'_>) -> tracing::Span {
    let stream_sequence = stream_sequence(delivery);
    let attempt = delivery.attempt().get();
    let span = tracing::info_span!("delivery", mount = %ctx.name, subject = %msg.subject, attempt, stream_sequence);
    #[cfg(feature = "otel")]
    crate::trace::set_parent(&span, msg.headers.as_deref());
    span
}

/// What is left of a delivery after [`begin`].
#[expect(
    clippy::large_enum_variant,
    reason = "lives on the stack for one step; boxing it would allocate for every JetStream delivery"
)]
pub(crate) enum Rest<'m> {
    /// It waits for its handler, or for a dead letter's confirmation: the stage it resumes
    /// from, on whichever task its caller decides.
    Waits(Stage),
    /// Its plan publishes or settles (or [`execute_now`] failed, `executed`): executed next,
    /// on the same task, without waiting for a reply ([`carry_on`]).
    Executing {
        delivery: CoreDelivery<'m>,
        event: Option<Event>,
        decided: Plan<'m>,
        executed: Option<Result<(), PublishFailed>>,
    },
}

impl<'m> Rest<'m> {
    /// Whether only the plan's execution is left (a publish or a settlement, no handler and no
    /// dead letter to wait for): its caller may await it in place, as back-pressure.
    pub(crate) fn is_executing(&self) -> bool {
        matches!(self, Rest::Executing { .. })
    }

    /// A rest whose plan is still to be executed in full (none of it ran): its delivery,
    /// event and plan. Any other rest is given back.
    #[expect(
        clippy::result_large_err,
        reason = "given back on the stack for one step, as the rest itself lives"
    )]
    pub(crate) fn unexecuted(self) -> Result<(CoreDelivery<'m>, Option<Event>, Plan<'m>), Self> {
        match self {
            Rest::Executing {
                delivery,
                event,
                decided,
                executed: None,
            } => Ok((delivery, event, decided)),
            rest => Err(rest),
        }
    }

    /// The stage to resume from elsewhere, without what this borrows from the message, so
    /// that the message can move.
    pub(crate) fn into_stage(self) -> Stage {
        match self {
            Rest::Waits(stage) => stage,
            Rest::Executing {
                event, executed, ..
            } => Stage::Decided(event, executed),
        }
    }
}

/// Handles one delivery as far as it goes without awaiting anything, on the calling task,
/// with its waker (`cx`): the arrival check (rule 3), the handler's first poll, the plan, and
/// its execution when that only logs or hands a copy to the delay queue. `None` when that
/// finished the delivery (or it was not readable: see [`read`]); otherwise its span and the
/// rest.
///
/// This is a plain function, not a future, so that the common case (a handler that returns
/// at once and a plan that only logs, as a Core ack does) costs no future to build or move,
/// no allocation and no clock read. The handler runs in the calling loop's `slot`; a run
/// still pending after its first poll is taken out of it ([`HandlerSlot::take_run`]).
pub(crate) fn begin<'m, R: Runtime>(
    ctx: &'m MountContext,
    read: impl Reader,
    msg: &'m Incoming,
    slot: &mut HandlerSlot,
    cx: &mut Context<'_>,
) -> Option<(tracing::Span, Rest<'m>)> {
    // Borrowed where it was built: the delivery is large, and moving it costs.
    let read = read(ctx, msg);
    let delivery = read.as_ref()?;
    ctx.metrics.consumed();
    let span = delivery_span(ctx, msg, delivery);
    let entered = span.enter();
    match decide::<R>(ctx, msg, delivery, slot, cx) {
        None => None,
        Some(rest) => {
            drop(entered);
            Some((span, rest))
        }
    }
}

/// [`begin`] inside the delivery's span.
#[inline]
fn decide<'m, R: Runtime>(
    ctx: &'m MountContext,
    msg: &'m Incoming,
    delivery: &CoreDelivery<'m>,
    slot: &mut HandlerSlot,
    cx: &mut Context<'_>,
) -> Option<Rest<'m>> {
    let arrival = plan_with_clock(delivery, Event::Arrived, &ctx.policy, R::now);
    let mut error = None;
    let event = if arrival.runs_handler() {
        // An arrival plan that runs the handler holds only logs.
        execute_logs(ctx, msg, delivery, &arrival);
        // Timed only with a recorder: an app without one reads no clock here.
        let started = ctx.metrics.timed().then(R::now);
        Some(match start_handler(ctx, slot, msg, delivery) {
            Err(event) => event,
            Ok(()) => match poll_slot(ctx, slot, cx) {
                Poll::Ready(result) => {
                    if let Some(started) = started {
                        ctx.metrics
                            .handled_in(R::now().saturating_duration_since(started).as_secs_f64());
                    }
                    let (event, failed) = handled(ctx, msg, delivery, result);
                    error = failed;
                    event
                }
                Poll::Pending => {
                    let started = started.unwrap_or_else(R::now);
                    let run = HandlerRun(slot.take_run(&ctx.handler));
                    return Some(Rest::Waits(Stage::Handling(run, started)));
                }
            },
        })
    } else {
        None
    };
    let decided = match event {
        None => arrival,
        Some(event) => plan_with_clock(delivery, event, &ctx.policy, R::now),
    };
    if waits_for_confirmation(&decided) {
        return Some(Rest::Waits(match (event, error) {
            (Some(event), Some(error)) => Stage::Failed(event, error),
            (event, _) => Stage::Decided(event, None),
        }));
    }
    let executed = execute_now(ctx, msg, delivery, &decided);
    if let Some(Ok(())) = executed {
        report(ctx, msg, delivery, event, &decided);
        return None;
    }
    Some(Rest::Executing {
        delivery: *delivery,
        event,
        decided,
        executed,
    })
}

/// The rest of a delivery that has to wait, boxed, to be run wherever its caller decides.
pub(crate) fn waiting<R: Runtime>(
    ctx: &Arc<MountContext>,
    read: impl Reader,
    msg: Incoming,
    span: tracing::Span,
    stage: Stage,
) -> Waiting {
    let in_flight = ctx.in_flight.enter();
    let finishing = finish::<R>(ctx.clone(), read, msg, stage);
    Box::pin(
        async move {
            finishing.await;
            drop(in_flight);
        }
        .instrument(span),
    )
}

/// Executes a [`Rest::Executing`] plan on the calling task (a publish the client cannot take
/// at once is awaited here, which is the mount's back-pressure), inside the delivery's span.
/// Gives back the span and the stage of a rest that waits.
async fn carry_on<R: Runtime>(
    ctx: &MountContext,
    msg: &Incoming,
    span: tracing::Span,
    rest: Rest<'_>,
) -> Option<(tracing::Span, Stage)> {
    let (delivery, event, decided, executed) = match rest {
        Rest::Waits(stage) => return Some((span, stage)),
        Rest::Executing {
            delivery,
            event,
            decided,
            executed,
        } => (delivery, event, decided, executed),
    };
    // Polled in place, inside the span: the future is large, and moving it costs.
    let mut settling = std::pin::pin!(settle::<R>(
        ctx, msg, &delivery, event, decided, executed, None
    ));
    std::future::poll_fn(|cx| {
        let _entered = span.enter();
        settling.as_mut().poll(cx)
    })
    .await;
    None
}

/// Handles one delivery on the calling task, its handler in the caller's `slot`: [`begin`],
/// then [`carry_on`]. Returns the rest, boxed, when the handler has not finished at its first
/// poll or the plan publishes a dead letter (confirmed before anything else, rule 8); the
/// caller runs that where it decides.
pub(crate) async fn process<R: Runtime>(
    ctx: &Arc<MountContext>,
    read: impl Reader,
    msg: Incoming,
    slot: &mut HandlerSlot,
) -> Option<Waiting> {
    let (span, rest) =
        std::future::poll_fn(|cx| Poll::Ready(begin::<R>(ctx, read, &msg, slot, cx))).await?;
    let (span, stage) = carry_on::<R>(ctx, &msg, span, rest).await?;
    Some(waiting::<R>(ctx, read, msg, span, stage))
}

/// The rest of a delivery that had to wait: its handler's end, its plan (made again, the same
/// for the same event), and the execution.
pub(crate) async fn finish<R: Runtime>(
    ctx: Arc<MountContext>,
    read: impl Reader,
    msg: Incoming,
    stage: Stage,
) {
    // Read before, so it reads again.
    let Some(delivery) = read(&ctx, &msg) else {
        return;
    };
    let (event, executed, error) = match stage {
        Stage::Handling(run, started) => {
            let leased = run_leased::<R>(&ctx, &msg, &delivery, run, started).await;
            if let LeaseEnd::Late { by } = leased.end {
                ctx.metrics.late();
                // Rule 16: the server may have redelivered it already, and would take a late
                // `+ACK` over the newer attempt's answer. Nothing is sent or published.
                let outcome = match leased.event {
                    Event::Handled(outcome) => Some(outcome),
                    _ => None,
                };
                tracing::warn!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
                    ?outcome, late_by = ?by, "late result discarded: the delivery's deadline passed without a renewal");
                return;
            }
            (Some(leased.event), None, leased.error)
        }
        Stage::Decided(event, executed) => (event, executed, None),
        Stage::Failed(event, error) => (Some(event), None, Some(error)),
    };
    let decided = plan_with_clock(
        &delivery,
        event.unwrap_or(Event::Arrived),
        &ctx.policy,
        R::now,
    );
    let executed = executed.or_else(|| execute_now(&ctx, &msg, &delivery, &decided));
    settle::<R>(
        &ctx,
        &msg,
        &delivery,
        event,
        decided,
        executed,
        error.as_deref(),
    )
    .await;
}

/// Executes a delivery's plan (unless [`execute_now`] has, with `executed`), plans and
/// executes the recovery if a publish failed, and reports the settlement. `error` is the
/// handler's error text, for provenance headers.
async fn settle<R: Runtime>(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    event: Option<Event>,
    decided: Plan<'_>,
    executed: Option<Result<(), PublishFailed>>,
    error: Option<&str>,
) {
    let executed = match executed {
        Some(result) => result,
        None => execute(ctx, msg, delivery, &decided, error).await,
    };
    let (decided, sent) = match executed {
        Ok(()) => (decided, true),
        // Nothing can be sent: the server redelivers. Reported as not sent.
        Err(e) if e.what == Unpublished::Settlement => (decided, false),
        Err(e) => recover::<R>(ctx, msg, delivery, &decided, e).await,
    };
    report_sent(ctx, msg, delivery, event, &decided, sent);
}

/// Plans and executes the recovery from a publish of `failed_plan` that failed (`failed`): the
/// at-limit path for a Core copy over `max_payload` (rule 21), otherwise the core's plan for a
/// failed publish (a `-NAK` on JetStream; on Core the delivery is lost, and counted for the
/// mount). A recovery whose own publish fails is recovered once more the same way, at most
/// twice in all. Returns the plan that was executed last, and whether its settlement (if it
/// has one) was sent.
async fn recover<'p, R: Runtime>(
    ctx: &'p MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    failed_plan: &Plan<'p>,
    mut failed: PublishFailed,
) -> (Plan<'p>, bool) {
    match failed.what {
        Unpublished::CopyTooLarge => {
            tracing::warn!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
                reason = %failed.reason, "Core copy not published: it would be larger than the server's max_payload; the delivery takes the at-limit path (rule 21)")
        }
        Unpublished::Copy | Unpublished::DeadLetter | Unpublished::Settlement => {
            tracing::error!(mount = %ctx.name, subject = %msg.subject, error = %failed.reason, plan = %failed_plan,
                "publish failed: the plan stopped before its settlement; planning the recovery")
        }
    }
    let mut tries = 0;
    loop {
        tries += 1;
        let event = match failed.what {
            Unpublished::CopyTooLarge => Event::CopyTooLarge,
            Unpublished::Copy | Unpublished::DeadLetter | Unpublished::Settlement => {
                Event::PublishFailed
            }
        };
        let recovery = plan_with_clock(delivery, event, &ctx.policy, R::now);
        if event == Event::CopyTooLarge && recovery.disposition() == Disposition::LetGo {
            // No dead-letter subject to take it: lost, and said so in this case's words (the
            // plan's own warning speaks of a limit reached).
            ctx.losses.add(Loss::Copy, 1);
            tracing::error!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
                size = msg.payload.len(),
                "Core delivery lost: its copy would be larger than the server's max_payload and the mount has no dead-letter subject");
            return (recovery, true);
        }
        if recovery.disposition() == Disposition::Lost {
            let loss = match failed.what {
                Unpublished::DeadLetter => Loss::DeadLetter,
                Unpublished::Copy | Unpublished::CopyTooLarge | Unpublished::Settlement => {
                    Loss::Copy
                }
            };
            ctx.losses.add(loss, 1);
        }
        match execute(ctx, msg, delivery, &recovery, None).await {
            Ok(()) => {
                tracing::warn!(mount = %ctx.name, plan = %recovery, "recovery sent");
                return (recovery, true);
            }
            // Nothing more can be sent on this delivery: the server redelivers it.
            Err(again) if again.what == Unpublished::Settlement => return (recovery, false),
            Err(again) if tries < 2 => {
                tracing::error!(mount = %ctx.name, error = %again.reason, plan = %recovery, "recovery plan failed too; planning its recovery");
                failed = again;
            }
            Err(again) => {
                tracing::error!(mount = %ctx.name, error = %again.reason, plan = %recovery, "recovery plan failed too");
                return (recovery, true);
            }
        }
    }
}

/// Starts handling one JetStream delivery in its handler slot (`permit`): on the mount's own
/// task first, the handler in the loop's `slot`, and if it has to wait ([`process`]), the rest
/// on a task of its own, so slow handlers run concurrently and in parallel. The handler slot
/// is freed when the delivery is settled.
pub(crate) async fn start_delivery<R: Runtime>(
    ctx: Arc<MountContext>,
    read: impl Reader,
    msg: Incoming,
    permit: OwnedSemaphorePermit,
    slot: &mut HandlerSlot,
) {
    if let Some(rest) = process::<R>(&ctx, read, msg, slot).await {
        spawn_holding::<R>(rest, permit);
    }
}

/// Runs a delivery that waits on a task of its own, holding its handler slot until it is
/// settled.
pub(crate) fn spawn_holding<R: Runtime>(rest: Waiting, permit: OwnedSemaphorePermit) {
    R::spawn(async move {
        rest.await;
        drop(permit);
    });
}
