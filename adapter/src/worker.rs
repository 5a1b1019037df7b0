//! The mount loops and the life of one delivery.

use std::future::Future;
use std::num::NonZeroUsize;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use ruststream_core::{
    AckReply, Delivery as CoreDelivery, Event, Outcome, PendingCopy, Plan, RetryCountReading,
    plan_with_clock,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tracing::Instrument;

use crate::exec::{
    MountContext, PublishFailed, Settled, execute, execute_logs, execute_now, header_pairs,
    publish_plain, waits_for_confirmation,
};
use crate::handler::{Delivery, JetStreamInfo};
use crate::runtime::Runtime;

/// How long one JetStream pull request waits for messages; also the longest a shutdown waits
/// for an outstanding pull to end.
pub(crate) const PULL_EXPIRES: Duration = Duration::from_secs(1);

/// How long after its expiry a pull request may still be reported ended by the server.
const PULL_GRACE: Duration = Duration::from_secs(2);

/// Which NATS model a mount's deliveries come through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Model {
    Core,
    JetStream,
}

fn handler_delivery(
    ctx: &MountContext,
    msg: &async_nats::Message,
    core: &CoreDelivery<'_>,
) -> Delivery {
    let jetstream = match (core.model, ctx.jetstream_names) {
        (ruststream_core::Model::JetStream(r), Some((stream, consumer))) => Some(JetStreamInfo {
            stream,
            consumer,
            delivered: r.delivered,
            stream_sequence: r.stream_sequence,
            consumer_sequence: r.consumer_sequence,
            timestamp: r.timestamp,
            pending: r.pending,
        }),
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

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-string panic payload)")
}

/// A handler that has started and not finished, its panic caught (rule 13).
type HandlerRun = futures_util::future::CatchUnwind<AssertUnwindSafe<crate::OutcomeFuture>>;

/// The rest of a delivery that has to wait for its handler or for a dead letter's
/// confirmation, to be run wherever its caller decides.
pub(crate) type Waiting = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Where a waiting delivery stands.
enum Stage {
    /// Its handler is running.
    Handling(HandlerRun),
    /// Its event is known (`None`: the handler did not run): its plan is made again (the same
    /// for the same event) and executed. The error of [`execute_now`] if that already ran it
    /// and failed.
    Decided(Option<Event>, Option<PublishFailed>),
}

/// What the core needs to know of a delivered message. `None` for a JetStream message whose
/// ack reply subject cannot be read (logged): without it there is no attempt count and nothing
/// to settle with, and running the handler would make the retry limit vanish, so it is
/// neither handled nor settled.
#[inline]
fn read<'m>(
    ctx: &MountContext,
    model: Model,
    msg: &'m async_nats::Message,
) -> Option<CoreDelivery<'m>> {
    match model {
        Model::Core => {
            let reading = match msg.headers {
                None => RetryCountReading::default(),
                Some(_) => RetryCountReading::read(header_pairs(msg)),
            };
            Some(CoreDelivery::core(&msg.subject, reading))
        }
        Model::JetStream => {
            let reply = msg.reply.as_ref().map_or(&b""[..], |r| r.as_bytes());
            match AckReply::parse(reply) {
                Ok(r) => Some(CoreDelivery::jetstream(&msg.subject, r)),
                Err(e) => {
                    tracing::error!(mount = %ctx.name, subject = %msg.subject, error = %e,
                        "JetStream message with an unreadable ack reply subject: not handled, not settled");
                    None
                }
            }
        }
    }
}

/// Starts the handler on the delivery: its run, or at once the event when it could not start
/// (a payload that does not decode, or a panic in the call itself).
fn start_handler(
    ctx: &MountContext,
    msg: &async_nats::Message,
    delivery: &CoreDelivery<'_>,
) -> Result<HandlerRun, Event> {
    let given = handler_delivery(ctx, msg, delivery);
    match std::panic::catch_unwind(AssertUnwindSafe(|| ctx.handler.call(given))) {
        Ok(Ok(future)) => Ok(AssertUnwindSafe(future).catch_unwind()),
        Ok(Err(decode)) => {
            tracing::warn!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
                error = %decode, "payload does not decode: at-limit path");
            Err(Event::Undecodable)
        }
        Err(panic) => Err(panicked(ctx, msg, delivery, &*panic)),
    }
}

/// The event of a handler run that ended.
fn handled(
    ctx: &MountContext,
    msg: &async_nats::Message,
    delivery: &CoreDelivery<'_>,
    result: std::thread::Result<Outcome>,
) -> Event {
    match result {
        Ok(outcome) => Event::Handled(outcome),
        Err(panic) => panicked(ctx, msg, delivery, &*panic),
    }
}

/// A handler that panicked counts as no outcome (rule 13).
fn panicked(
    ctx: &MountContext,
    msg: &async_nats::Message,
    delivery: &CoreDelivery<'_>,
    panic: &(dyn std::any::Any + Send),
) -> Event {
    tracing::error!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
        panic = panic_message(panic), "handler panicked: treated as no outcome");
    Event::Handled(Outcome::None)
}

/// The delivery's stream sequence, on JetStream.
fn stream_sequence(delivery: &CoreDelivery<'_>) -> Option<u64> {
    match delivery.model {
        ruststream_core::Model::JetStream(r) => Some(r.stream_sequence),
        ruststream_core::Model::Core(_) => None,
    }
}

fn delivery_span(
    ctx: &MountContext,
    msg: &async_nats::Message,
    delivery: &CoreDelivery<'_>,
) -> tracing::Span {
    let stream_sequence = stream_sequence(delivery);
    let attempt = delivery.attempt().get();
    tracing::info_span!("delivery", mount = %ctx.name, subject = %msg.subject, attempt, stream_sequence)
}

/// What is left of a delivery after [`begin`].
#[expect(
    clippy::large_enum_variant,
    reason = "lives on the stack for one step; boxing it would allocate for every JetStream delivery"
)]
enum Rest<'m> {
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

impl Rest<'_> {
    /// The stage to resume from elsewhere, without what this borrows from the message, so
    /// that the message can move.
    fn into_stage(self) -> Stage {
        match self {
            Rest::Waits(stage) => stage,
            Rest::Executing {
                event, executed, ..
            } => Stage::Decided(event, executed.and_then(Result::err)),
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
/// no allocation and no clock read.
fn begin<'m, R: Runtime>(
    ctx: &'m MountContext,
    model: Model,
    msg: &'m async_nats::Message,
    cx: &mut Context<'_>,
) -> Option<(tracing::Span, Rest<'m>)> {
    // Borrowed where it was built: the delivery is large, and moving it costs.
    let read = read(ctx, model, msg);
    let delivery = read.as_ref()?;
    let span = delivery_span(ctx, msg, delivery);
    let entered = span.enter();
    match decide::<R>(ctx, msg, delivery, cx) {
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
    msg: &'m async_nats::Message,
    delivery: &CoreDelivery<'m>,
    cx: &mut Context<'_>,
) -> Option<Rest<'m>> {
    let arrival = plan_with_clock(delivery, Event::Arrived, &ctx.policy, R::now);
    let event = if arrival.runs_handler() {
        // An arrival plan that runs the handler holds only logs.
        execute_logs(ctx, msg, delivery, &arrival);
        Some(match start_handler(ctx, msg, delivery) {
            Err(event) => event,
            Ok(mut run) => match Pin::new(&mut run).poll(cx) {
                Poll::Ready(result) => handled(ctx, msg, delivery, result),
                Poll::Pending => return Some(Rest::Waits(Stage::Handling(run))),
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
        return Some(Rest::Waits(Stage::Decided(event, None)));
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
fn waiting<R: Runtime>(
    ctx: &Arc<MountContext>,
    model: Model,
    msg: async_nats::Message,
    span: tracing::Span,
    stage: Stage,
) -> Waiting {
    Box::pin(finish::<R>(ctx.clone(), model, msg, stage).instrument(span))
}

/// Executes a [`Rest::Executing`] plan on the calling task (a publish the client cannot take
/// at once is awaited here, which is the mount's back-pressure), inside the delivery's span.
/// Gives back the span and the stage of a rest that waits.
async fn carry_on<R: Runtime>(
    ctx: &MountContext,
    msg: &async_nats::Message,
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
    let mut settling = std::pin::pin!(settle::<R>(ctx, msg, &delivery, event, decided, executed));
    std::future::poll_fn(|cx| {
        let _entered = span.enter();
        settling.as_mut().poll(cx)
    })
    .await;
    None
}

/// Handles one delivery on the calling task: [`begin`], then [`carry_on`]. Returns the rest,
/// boxed, when the handler has not finished at its first poll or the plan publishes a dead
/// letter (confirmed before anything else, rule 8); the caller runs that where it decides.
pub(crate) async fn process<R: Runtime>(
    ctx: &Arc<MountContext>,
    model: Model,
    msg: async_nats::Message,
) -> Option<Waiting> {
    let (span, rest) =
        std::future::poll_fn(|cx| Poll::Ready(begin::<R>(ctx, model, &msg, cx))).await?;
    let (span, stage) = carry_on::<R>(ctx, &msg, span, rest).await?;
    Some(waiting::<R>(ctx, model, msg, span, stage))
}

/// The rest of a delivery that had to wait: its handler's end, its plan (made again, the same
/// for the same event), and the execution.
async fn finish<R: Runtime>(
    ctx: Arc<MountContext>,
    model: Model,
    msg: async_nats::Message,
    stage: Stage,
) {
    // Read before, so it reads again.
    let Some(delivery) = read(&ctx, model, &msg) else {
        return;
    };
    let (event, failed) = match stage {
        Stage::Handling(run) => (Some(handled(&ctx, &msg, &delivery, run.await)), None),
        Stage::Decided(event, failed) => (event, failed),
    };
    let decided = plan_with_clock(
        &delivery,
        event.unwrap_or(Event::Arrived),
        &ctx.policy,
        R::now,
    );
    let executed = match failed {
        Some(e) => Some(Err(e)),
        None => execute_now(&ctx, &msg, &delivery, &decided),
    };
    settle::<R>(&ctx, &msg, &delivery, event, decided, executed).await;
}

/// Executes a delivery's plan (unless [`execute_now`] has, with `executed`), plans and
/// executes the recovery if a publish failed, and reports the settlement.
async fn settle<R: Runtime>(
    ctx: &MountContext,
    msg: &async_nats::Message,
    delivery: &CoreDelivery<'_>,
    event: Option<Event>,
    decided: Plan<'_>,
    executed: Option<Result<(), PublishFailed>>,
) {
    let executed = match executed {
        Some(result) => result,
        None => execute(ctx, msg, delivery, &decided).await,
    };
    let decided = match executed {
        Ok(()) => decided,
        Err(e) => {
            tracing::error!(error = %e.0, plan = %decided, "publish failed: the plan stopped before its settlement; planning the recovery");
            let recovery = plan_with_clock(delivery, Event::PublishFailed, &ctx.policy, R::now);
            match execute(ctx, msg, delivery, &recovery).await {
                Ok(()) => tracing::warn!(plan = %recovery, "recovery sent"),
                Err(e) => {
                    tracing::error!(error = %e.0, plan = %recovery, "recovery plan failed too")
                }
            }
            recovery
        }
    };
    report(ctx, msg, delivery, event, &decided);
}

/// Reports a settled delivery: the `ruststream::settlement` event and the observer.
fn report(
    ctx: &MountContext,
    msg: &async_nats::Message,
    delivery: &CoreDelivery<'_>,
    event: Option<Event>,
    decided: &Plan<'_>,
) {
    let outcome = match event {
        Some(Event::Handled(o)) => Some(o),
        _ => None,
    };
    let disposition = decided.disposition();
    tracing::event!(
        target: "ruststream::settlement",
        tracing::Level::DEBUG,
        outcome = ?outcome,
        disposition = disposition.as_str(),
        wire = %decided,
        "settled"
    );
    if let Some(observer) = &ctx.observer {
        let settled = Settled {
            mount: ctx.name,
            subject: msg.subject.clone(),
            attempt: delivery.attempt().get(),
            stream_sequence: stream_sequence(delivery),
            outcome,
            handler_ran: event.is_some(),
            disposition,
            wire: decided.to_string(),
        };
        // It runs on the mount's task: a panic must not end the mount.
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| observer(&settled))) {
            tracing::error!(mount = %ctx.name, subject = %msg.subject, panic = panic_message(&*panic),
                "on_settled observer panicked; the delivery is settled, the mount goes on");
        }
    }
}

/// Starts handling one JetStream delivery in its slot: on the mount's own task first, and if
/// it has to wait ([`process`]), the rest on a task of its own, so slow handlers run
/// concurrently and in parallel. The slot is freed when the delivery is settled.
async fn start_delivery<R: Runtime>(
    ctx: Arc<MountContext>,
    model: Model,
    msg: async_nats::Message,
    permit: OwnedSemaphorePermit,
) {
    if let Some(rest) = process::<R>(&ctx, model, msg).await {
        spawn_holding::<R>(rest, permit);
    }
}

/// Runs a delivery that waits on a task of its own, holding its handler slot until it is
/// settled.
fn spawn_holding<R: Runtime>(rest: Waiting, permit: OwnedSemaphorePermit) {
    R::spawn(async move {
        rest.await;
        drop(permit);
    });
}

/// Takes a free handler slot, or `None` once shutdown has begun.
async fn slot(
    slots: &Arc<Semaphore>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<OwnedSemaphorePermit> {
    if *shutdown.borrow() {
        return None;
    }
    tokio::select! {
        permit = slots.clone().acquire_owned() => permit.ok(),
        _ = shutdown.changed() => None,
    }
}

/// A Core mount: its subscriptions (the subject or wildcard, and for rule 10 perhaps the copy
/// subject), each message handled as it comes. Ends at shutdown; dropping the subscribers
/// unsubscribes.
///
/// A delivery runs first on this task, holding no slot: at most one does at a time. Only a
/// delivery that has to wait takes a slot and moves to a task of its own; with every slot
/// taken, this task waits for a slot or for the delivery itself, so at most `slots + 1`
/// deliveries run at once (the app gives Core mounts `concurrency - 1` slots).
pub(crate) async fn core_loop<R: Runtime>(
    ctx: Arc<MountContext>,
    subscribers: Vec<async_nats::Subscriber>,
    slots: Arc<Semaphore>,
    shutdown: watch::Receiver<bool>,
) {
    let mut subscribers = subscribers.into_iter();
    match (subscribers.next(), subscribers.next()) {
        (Some(one), None) => consume::<R, _>(&ctx, one, &slots, shutdown).await,
        (first, second) => {
            let all = futures_util::stream::select_all(
                first.into_iter().chain(second).chain(subscribers),
            );
            consume::<R, _>(&ctx, all, &slots, shutdown).await;
        }
    }
}

/// At most this many Core deliveries are handled in one poll of a mount's task, so that a
/// busy subscription does not starve the other tasks of a runtime that has no cooperative
/// budget.
const RUN: usize = 128;

/// [`core_loop`] on its subscription, or on its subscriptions merged.
///
/// Deliveries that finish at once (a Core ack) are handled inside one poll of this task, one
/// after another, each message handled where it was received: no future is built and no
/// message moved for them. A run of them ends after [`RUN`] deliveries, when the runtime's
/// cooperative budget runs out, or when none is buffered; the task then yields.
async fn consume<R: Runtime, S>(
    ctx: &Arc<MountContext>,
    mut messages: S,
    slots: &Arc<Semaphore>,
    mut shutdown: watch::Receiver<bool>,
) where
    S: futures_util::Stream<Item = async_nats::Message> + Unpin,
{
    if *shutdown.borrow_and_update() {
        return;
    }
    // Checked before each delivery starts (an atomic load): once shutdown has begun, none
    // does. The receiver below wakes the task for it when it is idle.
    let stopping = shutdown.clone();
    loop {
        let mut run = 0;
        let handled = std::future::poll_fn(|cx| {
            loop {
                if stopping.has_changed().unwrap_or(true) {
                    return Poll::Ready(Err(()));
                }
                if run == RUN {
                    run = 0;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                run += 1;
                let Some(msg) = std::task::ready!(messages.poll_next_unpin(cx)) else {
                    return Poll::Ready(Err(()));
                };
                let waits = begin::<R>(ctx, Model::Core, &msg, cx)
                    .map(|(span, rest)| (span, rest.into_stage()));
                if let Some((span, stage)) = waits {
                    return Poll::Ready(Ok((msg, span, stage)));
                }
            }
        });
        // Shutdown first, so that it wins over a subscription that always has a message.
        let waits = tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            waits = handled => waits,
        };
        // Shutdown has begun, or the subscription ended.
        let Ok((msg, span, stage)) = waits else { break };
        let rest = waiting::<R>(ctx, Model::Core, msg, span, stage);
        wait_for_slot_or_end::<R>(slots, rest).await;
    }
    let unhandled = count_buffered(&mut messages).await;
    if unhandled > 0 {
        tracing::warn!(mount = %ctx.name, messages = unhandled,
            "Core messages received but not handled when shutdown began: lost (Core NATS cannot redeliver them)");
    }
}

/// How many messages a Core subscription holds, received and not yet handed to a handler,
/// taking them out. At most one yield is spent waiting for the runtime's cooperative budget
/// each time it runs out.
async fn count_buffered<S>(messages: &mut S) -> usize
where
    S: futures_util::Stream<Item = async_nats::Message> + Unpin,
{
    let mut count = 0;
    let mut yielded = false;
    loop {
        match messages.next().now_or_never() {
            Some(Some(_)) => {
                count += 1;
                yielded = false;
            }
            Some(None) => return count,
            None if yielded => return count,
            None => {
                // Nothing buffered, or the budget ran out: look once more after a yield.
                yielded = true;
                let mut once = false;
                std::future::poll_fn(|cx| {
                    if std::mem::replace(&mut once, true) {
                        Poll::Ready(())
                    } else {
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                })
                .await;
            }
        }
    }
}

/// Moves a Core delivery that has to wait to a task of its own holding a slot, or, with no
/// slot free, finishes it here (whichever comes first).
async fn wait_for_slot_or_end<R: Runtime>(slots: &Arc<Semaphore>, mut rest: Waiting) {
    tokio::select! {
        biased;
        () = &mut rest => {}
        permit = slots.clone().acquire_owned() => match permit {
            Ok(permit) => spawn_holding::<R>(rest, permit),
            Err(_) => rest.await,
        },
    }
}

/// A JetStream mount's pull loop.
///
/// One inbox subscription lives as long as the mount; pull requests
/// (`$JS.API.CONSUMER.MSG.NEXT`, through async-nats' `request_batch`) ask for exactly as many
/// messages as there are free handler slots, and each requested message holds its slot from
/// the request on. A new request goes out when half the slots are free again (or all, when
/// none is outstanding), so pulls overlap with handling. A request ends when it is filled or
/// when the server reports it expired (status 408, with `Nats-Pending-Messages` telling how
/// many it did not fill, whose slots are then freed).
///
/// Requests that the server never reports ended (a restarted server forgets its waiting
/// requests) are given up [`PULL_GRACE`] after they expired, and their slots taken back.
///
/// At shutdown no new request goes out; outstanding ones are received to their end (at most
/// [`PULL_EXPIRES`], or [`PULL_GRACE`] later for lost ones) and their messages handled, so
/// none waits for `ack_wait`.
pub(crate) async fn jetstream_loop<R: Runtime>(
    ctx: Arc<MountContext>,
    consumer: async_nats::jetstream::consumer::PullConsumer,
    slots: Arc<Semaphore>,
    concurrency: NonZeroUsize,
    mut shutdown: watch::Receiver<bool>,
) {
    use async_nats::StatusCode;
    use async_nats::jetstream::consumer::pull::BatchConfig;

    let inbox = async_nats::Subject::from(ctx.client.new_inbox());
    let mut replies = match ctx.client.subscribe(inbox.clone()).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(mount = %ctx.name, error = %e, "cannot subscribe the pull inbox; the mount stops");
            return;
        }
    };
    let threshold = (concurrency.get() / 2).max(1);
    // Slots held for messages requested and not yet received.
    let mut reserved: Option<OwnedSemaphorePermit> = None;
    let mut outstanding = 0usize;
    let mut stopping = false;
    let mut backoff = Duration::from_millis(50);
    // Every request expires on the server by then; one not ended by then was lost (a server
    // restart forgets its waiting requests), and its slots are taken back.
    let mut requests_end = R::now();
    'pull: loop {
        stopping |= *shutdown.borrow();
        let free = slots.available_permits();
        let wanted = !stopping && free > 0 && (outstanding == 0 || free >= threshold);
        if wanted
            && let Ok(permits) = slots
                .clone()
                .try_acquire_many_owned(u32::try_from(free).unwrap_or(u32::MAX))
        {
            let request = BatchConfig {
                batch: free,
                expires: Some(PULL_EXPIRES),
                ..Default::default()
            };
            match consumer.request_batch(request, inbox.clone()).await {
                Ok(()) => {
                    outstanding += free;
                    requests_end = R::now() + PULL_EXPIRES + PULL_GRACE;
                    backoff = Duration::from_millis(50);
                    match reserved.as_mut() {
                        Some(r) => r.merge(permits),
                        None => reserved = Some(permits),
                    }
                }
                Err(e) => {
                    drop(permits);
                    tracing::warn!(mount = %ctx.name, error = %e, "pull request failed; retrying");
                    tokio::select! {
                        _ = R::sleep_until(R::now() + backoff) => {}
                        _ = shutdown.changed() => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            }
        }
        if outstanding == 0 {
            if stopping {
                break;
            }
            // Every slot is busy with a spawned handler: wait for one to free up.
            let Some(permit) = slot(&slots, &mut shutdown).await else {
                continue;
            };
            drop(permit);
            continue;
        }
        let next = tokio::select! {
            next = replies.next() => next,
            _ = shutdown.changed(), if !stopping => continue,
            () = R::sleep_until(requests_end) => {
                tracing::warn!(mount = %ctx.name, outstanding, "pull requests never ended; their slots are taken back");
                outstanding = 0;
                reserved = None;
                continue;
            }
        };
        let Some(mut msg) = next else {
            tracing::error!(mount = %ctx.name, "the pull inbox closed; the mount stops");
            break;
        };
        // This message, then those already buffered, without a `select!` and a timer each,
        // until a new request is due (or none is outstanding, or shutdown begins).
        loop {
            match msg.status {
                None | Some(StatusCode::OK) => {
                    outstanding = outstanding.saturating_sub(1);
                    let permit = match reserved.as_mut().and_then(|r| r.split(1)) {
                        Some(p) => p,
                        // More than requested (should not happen): wait for a slot, never
                        // drop it.
                        None => match slots.clone().acquire_owned().await {
                            Ok(p) => p,
                            Err(_) => break 'pull,
                        },
                    };
                    start_delivery::<R>(ctx.clone(), Model::JetStream, msg, permit).await;
                }
                Some(StatusCode::IDLE_HEARTBEAT) => {}
                Some(status) => {
                    // The request ended (expired, or terminated by the server): free the
                    // slots of the messages it will not bring.
                    let unfilled = msg
                        .headers
                        .as_ref()
                        .and_then(|h| h.get("Nats-Pending-Messages"))
                        .and_then(|v| v.as_str().trim().parse::<usize>().ok())
                        .unwrap_or(outstanding)
                        .min(outstanding);
                    outstanding -= unfilled;
                    if let Some(r) = reserved.as_mut() {
                        drop(r.split(unfilled));
                    }
                    tracing::trace!(mount = %ctx.name, %status, unfilled, "pull request ended");
                }
            }
            let request_due = !stopping && slots.available_permits() >= threshold;
            if request_due || outstanding == 0 || shutdown.has_changed().unwrap_or(true) {
                break;
            }
            match replies.next().now_or_never() {
                Some(Some(next)) => msg = next,
                Some(None) => {
                    tracing::error!(mount = %ctx.name, "the pull inbox closed; the mount stops");
                    break 'pull;
                }
                None => break,
            }
        }
    }
}

/// The delay queue of Core copies (one per app, one timer): publishes each copy when due.
///
/// Runs until `finish` holds a deadline and then until the queue is empty or the deadline
/// has passed (the end of the shutdown grace period). Gives how many copies were still
/// waiting then, per mount index: those are lost (SETTLEMENT.md, rule 14).
pub(crate) async fn delay_loop<R: Runtime>(
    client: async_nats::Client,
    mut incoming: mpsc::UnboundedReceiver<(PendingCopy, std::time::Instant)>,
    mut finish: watch::Receiver<Option<std::time::Instant>>,
    mount_count: usize,
) -> Vec<usize> {
    let mut queue = ruststream_core::DelayQueue::new();
    // The mounts' senders close with their loops, at shutdown, before the deadline is set:
    // copies already queued are still published until then.
    let mut open = true;
    loop {
        let end = *finish.borrow();
        if let Some(end) = end {
            while let Ok((copy, at)) = incoming.try_recv() {
                queue.handle_copy(copy, at);
            }
            if queue.is_empty() || R::now() >= end {
                break;
            }
        }
        let next = queue.poll_timeout();
        tokio::select! {
            biased;
            changed = finish.changed() => if changed.is_err() { break },
            item = incoming.recv(), if open => match item {
                Some((copy, at)) => queue.handle_copy(copy, at),
                None => open = false,
            },
            _ = R::sleep_until(next.unwrap_or_else(R::now)), if next.is_some() => {
                let due: Vec<PendingCopy> = queue.handle_timeout(R::now()).collect();
                for copy in due {
                    let subject = copy.publication.subject.clone();
                    if let Err(e) = publish_plain(&client, copy.publication).await {
                        tracing::error!(%subject, error = %e.0, "delayed Core copy lost: its publish failed");
                    }
                }
            }
            _ = R::sleep_until(end.unwrap_or_else(R::now)), if end.is_some() => break,
        }
    }
    while let Ok((copy, at)) = incoming.try_recv() {
        queue.handle_copy(copy, at);
    }
    let mut lost = vec![0; mount_count];
    for copy in queue.drain() {
        if let Some(n) = lost.get_mut(copy.mount) {
            *n += 1;
        }
    }
    lost
}
