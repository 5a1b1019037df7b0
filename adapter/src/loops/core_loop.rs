//! The Core subscription loop of a mount.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::task::Poll;

use futures_util::StreamExt;
use tokio::sync::{Semaphore, watch};
use tracing::Instrument;

use super::buffered::{Buffered, Subscriptions, count_buffered};
use crate::handling::flow::{Rest, Sending, Stage, Waiting, begin, finish, spawn_holding, waiting};
use crate::handling::read::read_core;
use crate::handling::settled::report;
use crate::runtime::Runtime;
use crate::state::mount_context::MountContext;
use crate::support::metrics::Loss;
use crate::support::stop::{FINAL_FLUSH, asked_to_stop};

/// How many handler slots a Core mount's spawned deliveries get: `concurrency - 1`, because
/// the mount's own task runs one delivery besides them (see [`core_loop`]), so that at most
/// `concurrency` run at once.
pub(crate) fn spawned_slots(concurrency: std::num::NonZeroUsize) -> usize {
    concurrency.get() - 1
}

/// A Core mount: its subscriptions (the subject or wildcard, and for rule 10 perhaps the copy
/// subject), each message handled as it comes. Ends at shutdown; dropping the subscribers
/// unsubscribes.
///
/// A delivery runs first on this task, holding no slot: at most one does at a time. One whose
/// plan only publishes (a copy) finishes here too, awaiting a client that cannot take the
/// publish at once. Only a delivery that has to wait for its handler or a dead letter's
/// confirmation takes a slot and moves to a task of its own; with every slot taken, this task
/// waits for a slot or for the delivery itself, so at most `slots + 1` deliveries run at once
/// (the app gives Core mounts [`spawned_slots`]).
///
/// While a delivery waits for a slot, the loop moves what async-nats receives into the mount's
/// own buffer of `buffer` messages, and drops and counts what does not fit (rule 21).
pub(crate) async fn core_loop<R: Runtime>(
    ctx: Arc<MountContext>,
    subscribers: Vec<async_nats::Subscriber>,
    slots: Arc<Semaphore>,
    buffer: NonZeroUsize,
    shutdown: watch::Receiver<bool>,
) {
    let mut subscribers = subscribers.into_iter();
    match (subscribers.next(), subscribers.next()) {
        (Some(one), None) => {
            let messages = Buffered::new(one, buffer);
            consume::<R, _>(&ctx, messages, &slots, shutdown).await;
        }
        (first, second) => {
            let all = futures_util::stream::select_all(
                first.into_iter().chain(second).chain(subscribers),
            );
            consume::<R, _>(&ctx, Buffered::new(all, buffer), &slots, shutdown).await;
        }
    }
}

/// What a run of Core deliveries stopped at.
enum Next {
    /// A delivery to finish off the run, in its span, from this stage.
    Finish(tracing::Span, Stage),
    /// A delivery whose last publish (a copy) the client could not take at once, in its span:
    /// the publish is pending in the loop's slot; the delivery's event, for the report.
    Sending(tracing::Span, Option<ruststream_settlement::Event>),
}

/// At most this many Core deliveries are handled in one poll of a mount's task, so that a
/// busy subscription does not starve the other tasks of a runtime that has no cooperative
/// budget.
const RUN: usize = 128;

/// [`core_loop`] on its subscription, or on its subscriptions merged.
///
/// Deliveries that finish at once (a Core ack) are handled inside one poll of this task, one
/// after another, each message handled where it was received: no future is built and no
/// message moved for them. A run of them ends after [`RUN`] deliveries, or when none is
/// buffered; the task then yields. Tokio's cooperative budget does not end it (the run is
/// `unconstrained`): [`RUN`] bounds it instead.
async fn consume<R: Runtime, S: Subscriptions>(
    ctx: &Arc<MountContext>,
    mut messages: Buffered<S>,
    slots: &Arc<Semaphore>,
    mut shutdown: watch::Receiver<bool>,
) {
    if *shutdown.borrow_and_update() {
        return;
    }
    // Checked before each delivery starts (an atomic load): once shutdown has begun, none
    // does. The receiver below wakes the task for it when it is idle.
    let stopping = shutdown.clone();
    // The copy a Core `retry` publishes at once, handed to the client inside the run: kept
    // here, borrowing nothing of its message, when the client cannot take it at once.
    let mut copying = std::pin::pin!(None);
    // Where each delivery's handler runs (see `Handler::slot`).
    let mut slot = ctx.handler.clone().slot();
    // What is buffered was counted already (a shutdown while a delivery held this loop).
    let mut reported = false;
    loop {
        let mut run = 0;
        // Out of Tokio's cooperative budget (a no-op elsewhere): a run of deliveries that
        // publish (copies) would otherwise exhaust it within 64 and send the next delivery,
        // whose publish then reports itself pending, down the waiting path (a box, a count,
        // a slot). The run still yields after [`RUN`] deliveries.
        let handled = tokio::task::coop::unconstrained(std::future::poll_fn(|cx| {
            'run: loop {
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
                // Ends every borrow of the message before it moves.
                let next = 'delivery: {
                    let Some((span, rest)) = begin::<R>(ctx, read_core, &msg, &mut slot, cx) else {
                        continue 'run;
                    };
                    let Sending {
                        delivery,
                        event,
                        plan,
                        publish,
                    } = match rest {
                        Rest::Sending(sending) => sending,
                        Rest::Waits(stage) => break 'delivery Next::Finish(span, stage),
                    };
                    // The plan's last publish (a Core `retry`'s copy): handed to the client
                    // here, in the run, with nothing boxed and nothing planned again.
                    let _entered = span.enter();
                    copying.set(Some(publish.send(&ctx.client)));
                    let published = match copying.as_mut().as_pin_mut() {
                        Some(publishing) => publishing.poll(cx),
                        None => unreachable!("set just above"),
                    };
                    match published {
                        Poll::Ready(Ok(())) => {
                            copying.set(None);
                            report(ctx, &msg, &delivery, event, &plan);
                            continue 'run;
                        }
                        Poll::Ready(Err(failed)) => {
                            copying.set(None);
                            let stage = Stage::Sent(event, Err(failed));
                            break 'delivery Next::Finish(span.clone(), stage);
                        }
                        Poll::Pending => break 'delivery Next::Sending(span.clone(), event),
                    }
                };
                return Poll::Ready(Ok((msg, next)));
            }
        }));
        // Shutdown first, so that it wins over a subscription that always has a message.
        let next = tokio::select! {
            biased;
            changed = shutdown.changed() => {
                if changed.is_err() {
                    ctx.handles_gone();
                }
                break;
            }
            next = handled => next,
        };
        // Shutdown has begun, or the subscription ended.
        let Ok(next) = next else {
            // Every handle gone between the select's two polls (the shutdown channel seen
            // pending, then closed by the run): said all the same. (Seen once in CI, on a
            // loaded machine: the mount stopped without a word.)
            if shutdown.has_changed().is_err() {
                ctx.handles_gone();
            }
            break;
        };
        let (msg, next) = next;
        let (span, stage, _counted) = match next {
            Next::Finish(span, stage) => (span, stage, None),
            Next::Sending(span, event) => {
                // The client could not take the publish at once: awaited here, as the mount's
                // back-pressure; the delivery is then reported (or recovered, if it failed).
                // Counted in flight meanwhile: a shutdown waits for it, and reports it
                // abandoned if its grace period ends first (a server that stopped reading).
                let counted = ctx.in_flight.enter();
                let published = {
                    let mut publishing = std::pin::pin!(
                        std::future::poll_fn(|cx| match copying.as_mut().as_pin_mut() {
                            Some(publishing) => publishing.poll(cx),
                            None => unreachable!("Next::Sending leaves its publish pending"),
                        })
                        .instrument(span.clone())
                    );
                    tokio::select! {
                        biased;
                        published = &mut publishing => published,
                        changed = shutdown.changed(), if !reported => {
                            // Shutdown began while the publish waits: what is buffered will
                            // never be handled, so it is counted now (rule 14).
                            if changed.is_err() {
                                ctx.handles_gone();
                            }
                            reported = true;
                            let ((), published) = Box::pin(futures_util::future::join(
                                unsubscribe_and_count::<R, S>(ctx, &mut messages),
                                publishing,
                            ))
                            .await;
                            published
                        }
                    }
                };
                copying.set(None);
                (span, Stage::Sent(event, published), Some(counted))
            }
        };
        if stage.in_place() {
            // Only the end of the plan's execution is left (a publish's report or its
            // recovery): awaited here, in place, as the mount's back-pressure, with no slot
            // taken, as the pull loop does; boxed, as the loop's other rare waits, so that
            // its future does not stay in the loop's (which every mount holds while it runs).
            Box::pin(finish::<R>(ctx.clone(), read_core, msg, stage).instrument(span)).await;
            continue;
        }
        let rest = waiting::<R>(ctx, read_core, msg, span, stage);
        let mut holding = std::pin::pin!(wait_for_slot_or_end::<R>(slots, rest));
        tokio::select! {
            biased;
            () = &mut holding => {}
            // Never ends: takes in what arrives meanwhile, up to the mount's buffer.
            () = messages.hold(ctx) => {}
            changed = shutdown.changed() => {
                // Shutdown began while a delivery holds this loop (every slot taken): what is
                // buffered will never be handled, so it is counted now, not when (or if) that
                // delivery ends within the grace period.
                if changed.is_err() {
                    ctx.handles_gone();
                }
                reported = true;
                Box::pin(futures_util::future::join(
                    unsubscribe_and_count::<R, S>(ctx, &mut messages),
                    holding,
                ))
                .await;
                break;
            }
        }
    }
    // Stopped for a shutdown (not a subscription that ended while the app runs, which the
    // supervisor subscribes again at once, rule 20): what runs is settled, while the
    // subscriptions end and what they still hold is counted.
    if asked_to_stop(&shutdown) {
        if reported {
            drop(messages);
            Box::pin(ctx.settle_at_stop::<R>()).await;
        } else {
            Box::pin(futures_util::future::join(
                async {
                    unsubscribe_and_count::<R, S>(ctx, &mut messages).await;
                    drop(messages);
                },
                ctx.settle_at_stop::<R>(),
            ))
            .await;
        }
    } else if !reported {
        let unhandled = Box::pin(count_buffered(&mut messages)).await as u64;
        report_unhandled(ctx, unhandled);
    }
}

/// At shutdown: unsubscribes the mount's subscriptions and counts, as each comes, the Core
/// messages received but never to be handed to a handler (held in the mount's buffer, or sent
/// by the server before it read the `UNSUB`): lost, as Core NATS cannot redeliver them
/// (rule 14). Until the subscriptions end, for at most [`FINAL_FLUSH`]; on a connection that
/// is down, what the client holds already.
///
/// The subscriptions end when shutdown begins, not when the delivery holding the mount's loop
/// does: what the server sent meanwhile was neither handled nor counted (the explorer's seed
/// 686).
///
/// Not counted, as it is never seen: a message the server sends while the `UNSUB` is on its
/// way, which arrives after async-nats has removed the drained subscription (at its connection
/// task's next turn, before the server's `PONG`) and is dropped there. The contract's rule 21
/// names this window (the explorer's seeds 6993712 and 501526).
async fn unsubscribe_and_count<R: Runtime, S: Subscriptions>(
    ctx: &MountContext,
    messages: &mut Buffered<S>,
) {
    // What the client holds already, counted at once: the rest may never come (a server that
    // stopped reading takes no `UNSUB`, and the grace period may end first).
    let mut unhandled = count_buffered(messages).await as u64;
    ctx.losses.add(Loss::UnhandledAtShutdown, unhandled);
    if ctx.client.connection_state() == async_nats::connection::State::Connected {
        let counting = async {
            messages.drain().await;
            while futures_util::StreamExt::next(messages).await.is_some() {
                ctx.losses.add(Loss::UnhandledAtShutdown, 1);
                unhandled += 1;
            }
        };
        if R::timeout(FINAL_FLUSH, counting).await.is_none() {
            tracing::debug!(mount = %ctx.name,
                "the server did not confirm the end of the Core subscriptions at shutdown in time");
        }
    } else {
        // The connection is down: the `UNSUB` waits in the client, which sends it as the
        // connection comes back (async-nats subscribes its subscriptions again first), so that
        // a delivery still holding the loop does not keep the subscription open behind it
        // (the explorer's seed 221029). Not awaited: a client whose command queue is full
        // would hold the shutdown until the server returns.
        let _ = futures_util::FutureExt::now_or_never(messages.drain());
    }
    if unhandled > 0 {
        tracing::warn!(mount = %ctx.name, messages = unhandled,
            "Core messages received but not handled when shutdown began: lost (Core NATS cannot redeliver them)");
    }
}

/// Counts `unhandled` Core messages as lost at shutdown (rule 14), and logs them.
fn report_unhandled(ctx: &MountContext, unhandled: u64) {
    ctx.losses.add(Loss::UnhandledAtShutdown, unhandled);
    if unhandled > 0 {
        tracing::warn!(mount = %ctx.name, messages = unhandled,
            "Core messages received but not handled when shutdown began: lost (Core NATS cannot redeliver them)");
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
