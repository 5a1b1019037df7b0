//! The life of one delivery: read, the arrival check (rule 3), its handler, its plan, the
//! plan's execution (by the executor, [`execute`]), and the report of its settlement.
//!
//! A delivery runs in place as far as it can without awaiting ([`begin`]), on the task of the
//! mount loop that received it; only one that has to wait (a handler still pending, a dead
//! letter waiting for its confirmation) becomes a boxed future ([`Waiting`]), run wherever the
//! loop decides. One whose plan ends with a publish gives it back to the loop ([`Rest::Sending`]),
//! which hands it to the client in place.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ruststream_settlement::{Delivery as CoreDelivery, Event, Plan, plan_with_clock};
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use super::beside::BesideTasks;
use super::executor::{Execution, carry_out, execute, resend, send};
use super::handler_run::{HandlerRun, handled, poll_slot, start_handler};
use super::in_place::{Next, again_after, on_time, run_to_end};
use super::lease::{Lease, run_leased};
use super::publish::{Publish, PublishFailed};
use super::read::{Reader, stream_sequence};
use super::recover::conclude;
use super::settled::report;
use crate::api::handler::HandlerSlot;
use crate::api::turns::HeldTurn;
use crate::runtime::Runtime;
use crate::state::mount_context::{BesideLoop, MountContext};
use crate::state::placement::{HEAVY_POLL, Placement};
use crate::support::incoming::Incoming;
use crate::support::panics::{drop_caught, panic_message};

/// The rest of a delivery that has to wait for its handler or for a dead letter's
/// confirmation, to be run wherever its caller decides.
pub(crate) type Waiting = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Where a delivery that did not finish in place stands: what [`finish`] resumes from,
/// borrowing nothing of its message.
pub(crate) enum Stage {
    /// Its handler is running, under its lease; on a mount with strict order, the delivery
    /// keeps its key's turn in the [`HeldTurn`] (rule 24).
    Handling(HandlerRun, Lease, Option<HeldTurn>),
    /// Its handler's retry runs again in place after this delay, its key's turn kept (rule
    /// 24's strict order).
    Again(Duration, HeldTurn),
    /// Its event is known (`None`: the handler did not run), and its plan waits for the server
    /// ([`Execution::Waits`]): the plan is made again (the same for the same event) and carried
    /// out in full. The handler's error text, when it returned one, goes into a dead letter's
    /// provenance headers (rule 19; kept only for a mount that asks for them). A delivery of
    /// a mount with strict order keeps its key's turn until the plan is carried out (rule 24).
    Decided(Option<Event>, Option<Box<str>>, Option<HeldTurn>),
    /// Its event is known, and its plan was carried out as far as it went, with this result:
    /// the plan is made again for the report, and what is left is the recovery from a publish
    /// that failed, and the report.
    Sent(Option<Event>, Result<(), PublishFailed>),
}

impl Stage {
    /// Whether what is left needs no handler slot: the end of a plan already carried out (a
    /// publish's report, or the recovery from its failure), which its loop finishes in place,
    /// as back-pressure.
    pub(crate) fn in_place(&self) -> bool {
        match self {
            Stage::Sent(..) => true,
            Stage::Handling(..) | Stage::Again(..) | Stage::Decided(..) => false,
        }
    }
}

/// What is left of a delivery after [`begin`].
#[expect(
    clippy::large_enum_variant,
    reason = "lives on the stack for one step; boxing it would allocate for every JetStream delivery"
)]
pub(crate) enum Rest<'m> {
    /// What [`finish`] resumes from, on whichever task the caller decides (see
    /// [`Stage::in_place`]).
    Waits(Stage),
    /// Its plan's last action, a publish: for the caller to hand to the client in place.
    Sending(Sending<'m>),
}

/// A delivery whose plan was carried out up to its last action, a publish
/// ([`Execution::Publish`]): once the client takes the publish, the delivery is reported
/// ([`report`]); if it fails, [`Sending::complete`] (or [`finish`] from [`Stage::Sent`])
/// recovers.
pub(crate) struct Sending<'m> {
    pub(crate) delivery: CoreDelivery<'m>,
    pub(crate) event: Option<Event>,
    pub(crate) plan: Plan<'m>,
    pub(crate) publish: Publish,
}

impl Sending<'_> {
    /// Hands the publish to the client, awaited on the calling task (the mount's
    /// back-pressure), then reports the delivery, or recovers from the publish's failure.
    async fn complete<R: Runtime>(self, ctx: &MountContext, msg: &Incoming) {
        let Sending {
            delivery,
            event,
            plan,
            publish,
        } = self;
        match send(ctx, msg, publish).await {
            Ok(()) => report(ctx, msg, &delivery, event, &plan),
            failed => Box::pin(conclude::<R>(ctx, msg, &delivery, event, plan, failed)).await,
        }
    }
}

#[inline]
fn delivery_span(ctx: &MountContext, msg: &Incoming, delivery: &CoreDelivery<'_>) -> tracing::Span {
    let stream_sequence = stream_sequence(delivery);
    let attempt = delivery.attempt().get();
    let span = tracing::info_span!("delivery", mount = %ctx.name, subject = %msg.subject, attempt, stream_sequence);
    #[cfg(feature = "otel")]
    crate::support::trace::set_parent(&span, msg.headers.as_deref());
    span
}

/// Handles one delivery as far as it goes without awaiting anything, on the calling task,
/// with its waker (`cx`): the arrival check (rule 3), the handler's first poll, the plan, and
/// what of it the executor carries out at once. `None` when that finished the delivery (or it
/// was not readable: see [`Reader`]); otherwise its span and the rest.
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
        // Its logs, before the handler runs: the executor carries out nothing else of it.
        let logged = execute(ctx, msg, delivery, &arrival);
        debug_assert!(matches!(logged, Execution::Done(Ok(()))));
        // Timed only with a recorder or for a service endpoint: an app without either reads
        // no clock here.
        let started = ctx.metrics.timed().then(R::now);
        let held = ctx.strict_order.then(HeldTurn::default);
        Some(
            match start_handler(ctx, slot, msg, delivery, held.as_ref()) {
                Err(event) => event,
                Ok(()) => match poll_slot(ctx, slot, cx) {
                    Poll::Ready(result) => {
                        if let Some(started) = started {
                            ctx.metrics
                                .handled_in(R::now().saturating_duration_since(started));
                        }
                        let (event, failed) = handled(ctx, msg, delivery, result);
                        if let Some(delay) = again_after(ctx, delivery, event, held.as_ref())
                            && let Some(held) = held
                        {
                            return Some(Rest::Waits(Stage::Again(delay, held)));
                        }
                        if held.as_ref().is_some_and(HeldTurn::holds) {
                            // Strict order: the key's next delivery waits until this one is
                            // settled (its dead letter confirmed first), so its whole plan is
                            // carried out with the turn kept.
                            return Some(Rest::Waits(Stage::Decided(Some(event), failed, held)));
                        }
                        error = failed;
                        event
                    }
                    Poll::Pending => {
                        let started = started.unwrap_or_else(R::now);
                        let run = HandlerRun::new(ctx, slot.take_run(&ctx.handler));
                        // Taken here, before the mount reads its next message (rule 16).
                        let lease = Lease::take(ctx, msg, delivery, started);
                        return Some(Rest::Waits(Stage::Handling(run, lease, held)));
                    }
                },
            },
        )
    } else {
        None
    };
    let decided = match event {
        None => arrival,
        Some(event) => plan_with_clock(delivery, event, &ctx.policy, R::now),
    };
    match execute(ctx, msg, delivery, &decided) {
        Execution::Done(Ok(())) => {
            report(ctx, msg, delivery, event, &decided);
            None
        }
        Execution::Done(Err(failed)) => Some(Rest::Waits(Stage::Sent(event, Err(failed)))),
        Execution::Publish(publish) => Some(Rest::Sending(Sending {
            delivery: *delivery,
            event,
            plan: decided,
            publish,
        })),
        Execution::Waits => Some(Rest::Waits(Stage::Decided(event, error, None))),
    }
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

/// Handles one delivery on the calling task, its handler in the caller's `slot`: [`begin`],
/// then, in place and inside the delivery's span, what needs no slot (a publish the client
/// cannot take at once is awaited here, which is the mount's back-pressure). Returns the rest,
/// boxed, when the handler has not finished at its first poll or the plan publishes a dead
/// letter (confirmed before anything else, rule 8); the caller runs that where it decides.
pub(crate) async fn process<R: Runtime>(
    ctx: &Arc<MountContext>,
    read: impl Reader,
    msg: Incoming,
    slot: &mut HandlerSlot,
) -> Option<Waiting> {
    let (span, stage) = {
        let (span, rest) =
            std::future::poll_fn(|cx| Poll::Ready(begin::<R>(ctx, read, &msg, slot, cx))).await?;
        match rest {
            Rest::Sending(sending) => {
                // Polled in place, inside the span.
                let mut sent = std::pin::pin!(sending.complete::<R>(ctx, &msg));
                std::future::poll_fn(|cx| {
                    let _entered = span.enter();
                    sent.as_mut().poll(cx)
                })
                .await;
                return None;
            }
            Rest::Waits(stage) => (span, stage),
        }
    };
    if stage.in_place() {
        // Boxed, and only here: the plans of a JetStream delivery never fail before their
        // last publish (they schedule no copy), so this stays out of every delivery's future.
        Box::pin(finish::<R>(ctx.clone(), read, msg, stage).instrument(span)).await;
        return None;
    }
    Some(waiting::<R>(ctx, read, msg, span, stage))
}

/// The rest of a delivery that did not finish in place: its handler's end, its plan (made
/// again, the same for the same event), what of it is left to carry out, and the conclusion.
///
/// The common case, a handler that awaits and then settles a JetStream delivery (or logs a
/// Core one) on a mount without strict order, runs without building the larger futures of the
/// rest ([`finish_rest`], boxed only when needed): every delivery that waits is boxed, so
/// the size of this future is paid on each (it was 3.4 KiB, moved and allocated for every
/// member of a batch, issue 38).
pub(crate) async fn finish<R: Runtime>(
    ctx: Arc<MountContext>,
    read: impl Reader,
    msg: Incoming,
    stage: Stage,
) {
    let (run, lease) = match stage {
        Stage::Handling(run, lease, None) => (run, lease),
        stage => return Box::pin(finish_rest::<R>(ctx, read, msg, stage)).await,
    };
    // Read before, so it reads again.
    let Some(delivery) = read(&ctx, &msg) else {
        return;
    };
    let leased = run_leased::<R>(&ctx, &msg, &delivery, run, lease).await;
    if !on_time(&ctx, &msg, &delivery, &leased) {
        return;
    }
    let event = leased.event;
    let decided = plan_with_clock(&delivery, event, &ctx.policy, R::now);
    let executed = carry_out(&ctx, &msg, &delivery, &decided, leased.error.as_deref()).await;
    match executed {
        Ok(()) => report(&ctx, &msg, &delivery, Some(event), &decided),
        executed => {
            Box::pin(conclude::<R>(
                &ctx,
                &msg,
                &delivery,
                Some(event),
                decided,
                executed,
            ))
            .await;
        }
    }
}

/// [`finish`] for every stage: a handler's run to its end with strict order (runs in place,
/// the key's turn kept), a plan that waits for the server, a publish's recovery.
async fn finish_rest<R: Runtime>(
    ctx: Arc<MountContext>,
    read: impl Reader,
    msg: Incoming,
    stage: Stage,
) {
    // Read before, so it reads again.
    let Some(arrived) = read(&ctx, &msg) else {
        return;
    };
    // With strict order, the key's turn, kept until the delivery ends (rule 24).
    let mut _held = None;
    let (delivery, event, error, sent) = match stage {
        Stage::Handling(..) | Stage::Again(..) => {
            let (next, held) = match stage {
                Stage::Handling(run, lease, held) => (Next::Running(run, lease), held),
                Stage::Again(delay, held) => (Next::Again(delay), Some(held)),
                Stage::Decided(..) | Stage::Sent(..) => return,
            };
            let ended = run_to_end::<R>(&ctx, &msg, &arrived, next, held.as_ref()).await;
            _held = held;
            let Some((runs, leased)) = ended else {
                return;
            };
            (
                arrived.after_runs_in_place(runs),
                Some(leased.event),
                leased.error,
                None,
            )
        }
        Stage::Decided(event, error, held) => {
            _held = held;
            (arrived, event, error, None)
        }
        Stage::Sent(event, sent) => (arrived, event, None, Some(sent)),
    };
    let decided = plan_with_clock(
        &delivery,
        event.unwrap_or(Event::Arrived),
        &ctx.policy,
        R::now,
    );
    let executed = match sent {
        None => carry_out(&ctx, &msg, &delivery, &decided, error.as_deref()).await,
        Some(Ok(())) => Ok(()),
        Some(Err(failed)) => resend(&ctx, &msg, failed).await,
    };
    conclude::<R>(&ctx, &msg, &delivery, event, decided, executed).await;
}

/// Where a mount loop starts its deliveries: the handler slot each runs its first poll in, and
/// the deliveries that wait, gathered to run on one task ([`Starts::flush`]).
///
/// A delivery that waits goes on as a future of its own, so slow handlers run concurrently:
/// on a JetStream mount without batches, beside the loop while its handler's polls are light
/// (on one task with the mount's others that wait, [`BesideTasks`], so that those woken
/// together settle together), on a task of its own on the application's runtime once they
/// are heavy or the mount stops ([`Placement`]; a handler awaiting the server is woken where
/// the connection is, issue 39), and through [`spawn_holding`] on the application's runtime
/// on a Core mount. On a batch mount (rule 23) every member but the last of a batch waits,
/// for its batch to close and run: one task for each would cost a spawn, a wake-up on another
/// thread and a hand-over per member, which made a batch mount slower than single deliveries
/// (issue 38's js-batch bench). So a batch mount's loop gathers up to `max` such deliveries, as many
/// as one batch holds, and runs them on one task beside the loop, on its thread (the NATS
/// thread, where the connection is: a member's settlement is handed to the client without a
/// wake-up across threads), each still its own future (they run concurrently within it),
/// each holding its handler slot until it is settled. The batch's function takes its first
/// poll there and, if it awaits, goes on on the application's runtime (`api::batch`); on
/// the application's runtime, the whole of each member's rest cost js-batch a fifth of its
/// throughput (0.79 of raw async-nats, against 1.05 beside the loop). Gathering
/// never holds a delivery back: a member joins its batch at its first poll, on the loop; the
/// loop flushes what it gathered once `max` have gathered and before it waits for anything
/// ([`Starts::flush`]), so that the batch's wait and run, and every other delivery's, go on.
pub(crate) struct Starts {
    /// The handler slot of each delivery's first poll (see [`HandlerSlot`]).
    pub(crate) slot: HandlerSlot,
    gathered: Vec<(Waiting, OwnedSemaphorePermit)>,
    /// How many deliveries that wait share a task: the mount's batch `max`, or 1.
    gather: usize,
    /// Where the gathered ones run: beside the loop.
    beside_loop: BesideLoop,
    /// Where a single one runs while it is light: beside the loop, on one task with the
    /// others.
    beside: BesideTasks,
    /// Where a single one goes on.
    placement: Arc<Placement>,
}

impl Starts {
    /// The starts of the mount `ctx`, in a new handler slot.
    pub(crate) fn new(ctx: &MountContext) -> Self {
        Self {
            slot: ctx.handler.clone().slot(),
            gathered: Vec::new(),
            gather: ctx.batch_max.max(1),
            beside_loop: ctx.beside_loop.clone(),
            beside: BesideTasks::new(ctx.beside_loop.clone()),
            placement: ctx.placement.clone(),
        }
    }

    /// Runs `rest` on a task, holding its handler slot (`permit`) until it is settled: at once
    /// on a mount without batches, or once [`flush`](Self::flush) runs what was gathered.
    pub(crate) fn hold<R: Runtime>(&mut self, rest: Waiting, permit: OwnedSemaphorePermit) {
        if self.gather <= 1 {
            if self.placement.apart() {
                spawn_holding::<R>(rest, permit);
            } else {
                self.beside.push(Box::pin(Beside::<R> {
                    rest: Some(rest),
                    permit: Some(permit),
                    registered: None,
                    heavy: false,
                    placement: self.placement.clone(),
                    runtime: PhantomData,
                }));
            }
            return;
        }
        self.gathered.push((rest, permit));
        if self.gathered.len() >= self.gather {
            self.flush();
        }
    }

    /// Runs what was gathered on one task beside the loop. Called by the loop before it waits
    /// for anything (a message, a slot, a request's publish, the end of its deliveries at a
    /// stop).
    pub(crate) fn flush(&mut self) {
        match self.gathered.len() {
            0 => {}
            1 => {
                if let Some((rest, permit)) = self.gathered.pop() {
                    (self.beside_loop)(Box::pin(async move {
                        rest.await;
                        drop(permit);
                    }));
                }
            }
            _ => {
                let gathered = std::mem::take(&mut self.gathered);
                (self.beside_loop)(Box::pin(async move {
                    let mut all: futures_util::stream::FuturesUnordered<_> = gathered
                        .into_iter()
                        .map(|(rest, permit)| async move {
                            rest.await;
                            drop(permit);
                        })
                        .collect();
                    while futures_util::StreamExt::next(&mut all).await.is_some() {}
                }));
            }
        }
    }
}

/// Starts handling one JetStream delivery in its handler slot (`permit`): on the mount's own
/// task first, the handler in the loop's slot, and if it has to wait ([`process`]), the rest
/// on a task ([`Starts::hold`]), so slow handlers run concurrently and in parallel. The handler
/// slot is freed when the delivery is settled.
pub(crate) async fn start_delivery<R: Runtime>(
    ctx: Arc<MountContext>,
    read: impl Reader,
    msg: Incoming,
    permit: OwnedSemaphorePermit,
    starts: &mut Starts,
) {
    if let Some(rest) = process::<R>(&ctx, read, msg, &mut starts.slot).await {
        starts.hold::<R>(rest, permit);
    }
}

/// A single delivery that waits, going on beside its mount's loop (see [`Placement`]) and
/// holding its handler slot until it is settled; moved, unfinished, to a task on the
/// application's runtime when one of its polls takes longer than [`HEAVY_POLL`] (scored,
/// [`Placement::heavy`]) or when the mount stops ([`Placement::leave`]).
struct Beside<R> {
    rest: Option<Waiting>,
    permit: Option<OwnedSemaphorePermit>,
    /// Its waker's key in the placement's registry, once it waited.
    registered: Option<usize>,
    /// Whether one of its polls was heavy.
    heavy: bool,
    placement: Arc<Placement>,
    runtime: PhantomData<fn() -> R>,
}

impl<R: Runtime> Beside<R> {
    /// Moves the rest, unfinished, to the application's runtime.
    fn apart(&mut self) -> Poll<()> {
        if let (Some(rest), Some(permit)) = (self.rest.take(), self.permit.take()) {
            spawn_holding::<R>(rest, permit);
        }
        Poll::Ready(())
    }
}

impl<R: Runtime> Future for Beside<R> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.placement.apart() {
            return this.apart();
        }
        let Some(rest) = this.rest.as_mut() else {
            return Poll::Ready(());
        };
        // Every poll is timed, the last included: a handler that computes after it awaits
        // is heavy in the poll that ends it.
        let started = R::now();
        // Caught: the mount's other deliveries that wait share this task ([`BesideTasks`]),
        // and a panic here would end them all. (A handler's own panics are caught where it
        // runs, rule 13; this is for whatever else a delivery's rest runs.)
        let ended = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rest.as_mut().poll(cx).is_ready()
        })) {
            Ok(ended) => ended,
            Err(panic) => {
                // What a panicking `Drop` of its rest would add is left unsaid: the delivery's
                // loss is said here.
                let _ = drop_caught(this.rest.take());
                this.permit = None;
                tracing::error!(
                    panic = panic_message(&*panic),
                    "a JetStream delivery waiting beside its mount's loop panicked: dropped unsettled (the server delivers it again once its ack_wait passes)"
                );
                return Poll::Ready(());
            }
        };
        let took = R::now().saturating_duration_since(started);
        let heavy = took > HEAVY_POLL;
        if heavy {
            this.heavy = true;
            this.placement.heavy(took);
        }
        if ended {
            this.rest = None;
            this.permit = None;
            if !this.heavy {
                this.placement.light();
            }
            return Poll::Ready(());
        }
        if heavy {
            return this.apart();
        }
        // The task's waker is the same at every poll: registered once.
        if this.registered.is_none() {
            match this.placement.register(cx.waker()) {
                Some(key) => this.registered = Some(key),
                None => return this.apart(),
            }
        }
        Poll::Pending
    }
}

impl<R> Drop for Beside<R> {
    fn drop(&mut self) {
        if let Some(key) = self.registered {
            self.placement.forget(key);
        }
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
