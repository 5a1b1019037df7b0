//! The JetStream pull loop of a mount: a thin driver of the core's [`PullAccounting`].

use std::collections::VecDeque;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use ruststream_settlement::{PENDING_MESSAGES_HEADER, PriorityPolicy, PullAccounting, Receipt};
use tokio::sync::{Semaphore, watch};

use super::prefetch::{Held, Prefetched, prefetch_deadline, start_waiting, wait};
use crate::api::health::Refusal;
use crate::handling::flow::{Starts, start_delivery};
use crate::handling::read::read_jetstream;
use crate::runtime::Runtime;
use crate::state::mount_context::MountContext;
use crate::support::backoff::Backoff;
use crate::support::incoming::Incoming;
use crate::support::js_api::api_request;
use crate::support::liveness::{Liveness, liveness};
use crate::support::stop::asked_to_stop;

/// How long a flush may take to tell a dead client after a failed pull request.
const DEAD_CLIENT_CHECK: Duration = Duration::from_millis(200);

/// A JetStream mount's pull loop: a thin driver of [`PullAccounting`], which decides when to
/// request and how many messages, and what each message, the end of a request and a lost request do
/// to the handler slots. This loop sends the requests (`$JS.API.CONSUMER.MSG.NEXT`, through
/// async-nats' `request_batch`) to one inbox that lives as long as the mount, moves the slots as
/// the accounting says, and starts each delivery in its slot. A prefetched message that finds no
/// free slot waits, in order, renewed with `+WPI`
/// ([`WaitLease`](crate::handling::lease::WaitLease)).
///
/// When the supervisor sees that async-nats reconnected (`reconnected` changes), the outstanding
/// requests count as lost at once: the server forgot them.
///
/// A mount in a priority group ([`Mount::priority_group`](crate::Mount::priority_group)) names
/// it in every request, with its overflow threshold or, pinned, the pin id the server gave it
/// (the `Nats-Pin-Id` header of the messages it delivers; see [`Pin`]).
///
/// At shutdown no new request goes out; outstanding ones are received to their end (at most
/// [`PULL_EXPIRES`](ruststream_settlement::PULL_EXPIRES), or a grace period later for lost ones) and
/// their messages handled, so none waits for `ack_wait`.
pub(crate) async fn pull_loop<R: Runtime>(
    ctx: Arc<MountContext>,
    consumer: async_nats::jetstream::consumer::PullConsumer,
    slots: Arc<Semaphore>,
    concurrency: NonZeroUsize,
    mut reconnected: watch::Receiver<u64>,
    mut shutdown: watch::Receiver<bool>,
    priority: Option<(String, PriorityPolicy)>,
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
    let mut pulls = PullAccounting::new(concurrency);
    // The consumer's MaxRequestBatch, as bound (a change later is taken in when the mount is
    // subscribed again).
    pulls.set_max_batch(usize::try_from(consumer.cached_info().config.max_batch).ok());
    // Handler slots taken by running deliveries: neither free nor held for requests.
    let busy = {
        let slots = slots.clone();
        move |held: usize| {
            concurrency
                .get()
                .saturating_sub(slots.available_permits() + held)
        }
    };
    let mut held = Held::default();
    let mut waiting: VecDeque<Prefetched> = VecDeque::new();
    // Where each delivery's handler runs first (see `Handler::slot`), and where those that
    // wait are gathered (a batch mount's, rule 23): flushed before every wait below.
    let mut starts = Starts::new(&ctx);
    // A request that could not be sent: the pause before the next try.
    let mut backoff = Backoff::new(FIRST_PAUSE);
    // A request answered `503 No Responders` (JetStream off, or no server of the stream's
    // answers) or refused (`400`): the pause before the next one; clear while JetStream
    // serves the requests.
    let mut unanswered = Backoff::new(FIRST_PAUSE);
    // Until when no request goes out after such an answer. The inbox is read meanwhile: a
    // message an earlier request brings must not wait unread (and unrenewed) through a pause
    // (found by the explorer, seed 412).
    let mut paused_until: Option<std::time::Instant> = None;
    let mut watching = true;
    let mut pin = Pin::default();
    // How many requests in a row the server refused (`400`); 0 while it serves them.
    let mut refusals = 0_u32;
    let next_subject = {
        let info = consumer.cached_info();
        format!(
            "$JS.API.CONSUMER.MSG.NEXT.{}.{}",
            info.stream_name, info.name
        )
    };
    'pull: loop {
        if *shutdown.borrow() {
            pulls.handle_shutdown();
            ctx.placement.leave();
        } else if shutdown.has_changed().is_err() && !pulls.is_stopping() {
            // Every handle to the app is gone: it can never be shut down, so the mount stops
            // as at a shutdown (no new request; what is outstanding is handled) instead of
            // waking on the closed channel forever.
            ctx.handles_gone();
            pulls.handle_shutdown();
            ctx.placement.leave();
        }
        // Messages that wait go first, on the slots that are free.
        while !waiting.is_empty()
            && let Ok(permit) = slots.clone().try_acquire_owned()
            && let Some(next) = waiting.pop_front()
        {
            start_waiting::<R>(&ctx, &mut pulls, &busy, next, permit, &mut starts).await;
        }
        // While the supervisor suspects a message of bringing the client down, one at a time,
        // and nothing prefetched.
        let now = R::now();
        // Nothing answered the last request: ask again only after a pause, not at once and
        // without end.
        if paused_until.is_some_and(|until| now >= until || pulls.is_stopping()) {
            paused_until = None;
        }
        // Its consumer no longer fits the mount: no request until it does again (looked at
        // again after a pause).
        if paused_until.is_none()
            && !pulls.is_stopping()
            && ctx.unfit.load(std::sync::atomic::Ordering::Acquire)
        {
            paused_until = Some(now + UNFIT_PAUSE);
        }
        let careful = ctx.careful.at(now);
        let free = |available: usize| if careful { available.min(1) } else { available };
        pulls.set_prefetch_deadline(if careful {
            None
        } else {
            prefetch_deadline(&ctx)
        });
        if paused_until.is_none()
            && let Some(request) =
                pulls.poll_request(free(slots.available_permits()), waiting.len(), now)
            && let Ok(permits) = slots
                .clone()
                .try_acquire_many_owned(u32::try_from(request.held).unwrap_or(u32::MAX))
        {
            let mut batch = BatchConfig {
                batch: request.batch,
                expires: Some(request.expires),
                ..Default::default()
            };
            starts.flush();
            let sent = match &priority {
                None => consumer
                    .request_batch(batch, inbox.clone())
                    .await
                    .map_err(|e| e.to_string()),
                Some((group, policy)) => {
                    batch.group = Some(group.clone());
                    if let PriorityPolicy::Overflow { min_pending } = *policy
                        && min_pending > 0
                    {
                        batch.min_pending =
                            Some(usize::try_from(min_pending).unwrap_or(usize::MAX));
                    }
                    let body = pin.request_body(&batch);
                    ctx.client
                        .publish_with_reply(next_subject.clone(), inbox.clone(), body.into())
                        .await
                        .map_err(|e| e.to_string())
                }
            };
            match sent {
                Ok(()) => {
                    pulls.handle_requested(request, R::now());
                    held.add(permits);
                    backoff.succeeded();
                }
                Err(e) => {
                    drop(permits);
                    // A client whose connection task is gone fails every request at once and
                    // may never end the inbox: the mount ends, and the supervisor makes a new
                    // client (rule 20). A flush that only waits (a server that is down) says
                    // nothing.
                    if liveness::<R>(&ctx.client, DEAD_CLIENT_CHECK).await == Liveness::Dead {
                        tracing::error!(mount = %ctx.name, error = %e,
                            "pull request failed: the client has stopped working; the mount stops once it has handled what it received");
                        // No request goes out any more; what the inbox holds is handled (and
                        // settled through the supervisor's new client), then the inbox ends.
                        pulls.handle_shutdown();
                        continue;
                    }
                    tracing::warn!(mount = %ctx.name, error = %e, "pull request failed; retrying");
                    tokio::select! {
                        _ = R::sleep_until(R::now() + backoff.failed()) => {}
                        _ = shutdown.changed() => {}
                    }
                    continue;
                }
            }
        }
        let lost_at = pulls.poll_timeout();
        if lost_at.is_none() && waiting.is_empty() && pulls.is_done() {
            break;
        }
        // Nothing outstanding (`lost_at` is `None`) means every slot is busy with a running
        // handler, and the loop waits for one to free up, for the first message that waits
        // (shutdown or not) or for the next request. It reads the inbox meanwhile all the
        // same: a request the accounting no longer counts (one it took for lost when the
        // connection was made again, or whose end a stale status stood for) may still bring
        // a message, and a redelivery may come; each must wait renewed like any prefetched
        // one, not unread until its `ack_wait` passes and the server delivers it again (found
        // by the explorer: seed 166, and seed 4843 while a prefetched message waited).
        starts.flush();
        let next = tokio::select! {
            next = replies.next() => next,
            // A free slot, for the first message that waits, or (nothing outstanding, no
            // pause) for the next request.
            permit = slots.clone().acquire_owned(), if !waiting.is_empty() || (lost_at.is_none() && paused_until.is_none()) => {
                match (permit, waiting.pop_front()) {
                    (Ok(permit), Some(next)) => {
                        start_waiting::<R>(&ctx, &mut pulls, &busy, next, permit, &mut starts).await;
                    }
                    (Err(_), _) => break,
                    (Ok(_), None) => {}
                }
                continue;
            }
            _ = shutdown.changed(), if !pulls.is_stopping() => continue,
            () = R::sleep_until(paused_until.unwrap_or_else(R::now)), if paused_until.is_some() => continue,
            changed = reconnected.changed(), if watching => {
                match changed {
                    Ok(()) => {
                        let lost = pulls.handle_connection_lost();
                        held.free(lost);
                        tracing::debug!(mount = %ctx.name, outstanding = lost,
                            "the connection was lost and made again: the outstanding pull requests are forgotten, their slots taken back");
                    }
                    // The supervisor has stopped (shutdown): nothing more to watch.
                    Err(_) => watching = false,
                }
                continue;
            }
            () = R::sleep_until(lost_at.unwrap_or_else(R::now)), if lost_at.is_some() => {
                let lost = pulls.handle_timeout(R::now());
                // While the connection is down this is expected, and the supervisor says so.
                if ctx.clients.borrow().connection_state() == async_nats::connection::State::Connected {
                    tracing::warn!(mount = %ctx.name, outstanding = lost, "pull requests never ended; their slots are taken back");
                } else {
                    tracing::debug!(mount = %ctx.name, outstanding = lost, "pull requests lost with the connection; their slots are taken back");
                }
                held.free(lost);
                continue;
            }
        };
        let Some(mut msg) = next else {
            inbox_closed(&ctx, &shutdown);
            break;
        };
        // This message, then those already buffered, without a `select!` and a timer each,
        // until a new request is due (or none is outstanding, or shutdown begins).
        loop {
            match msg.status {
                None | Some(StatusCode::OK) => {
                    pin.take_from(&ctx, msg.headers.as_ref());
                    if unanswered.succeeded() {
                        answered_again(&ctx, &mut refusals);
                    }
                    let reserved = match pulls.handle_message() {
                        Receipt::Reserved => held.take_one(),
                        // Prefetched, or more than requested (should not happen): a free slot
                        // if there is one and nothing waits before it; never dropped.
                        Receipt::Prefetched | Receipt::Unrequested => None,
                    };
                    if ctx.unfit.load(std::sync::atomic::Ordering::Acquire) {
                        // Brought by a request sent before the consumer was found unfit: not
                        // the mount's to handle (another filter subject, say). Left
                        // unacknowledged, the consumer delivers it again after its ack_wait.
                        drop(reserved);
                        tracing::warn!(mount = %ctx.name, subject = %msg.subject,
                            "a message from a consumer that no longer fits the mount: not handled, not acknowledged (the consumer delivers it again after its ack_wait)");
                    } else {
                        let permit = reserved.or_else(|| {
                            waiting
                                .is_empty()
                                .then(|| slots.clone().try_acquire_owned().ok())
                                .flatten()
                        });
                        let msg = Incoming::from(msg);
                        match permit {
                            // In order: a message that waits goes first, this one waits behind.
                            Some(permit) if !waiting.is_empty() => {
                                waiting.push_back(wait::<R>(&ctx, msg));
                                if let Some(first) = waiting.pop_front() {
                                    start_waiting::<R>(
                                        &ctx,
                                        &mut pulls,
                                        &busy,
                                        first,
                                        permit,
                                        &mut starts,
                                    )
                                    .await;
                                }
                            }
                            Some(permit) => {
                                pulls.handle_started(R::now(), busy(pulls.held()));
                                start_delivery::<R>(
                                    ctx.clone(),
                                    read_jetstream,
                                    msg,
                                    permit,
                                    &mut starts,
                                )
                                .await;
                            }
                            None => waiting.push_back(wait::<R>(&ctx, msg)),
                        }
                    }
                }
                Some(StatusCode::IDLE_HEARTBEAT) => {}
                Some(status) => {
                    if status == StatusCode::NO_RESPONDERS {
                        paused_until = Some(R::now() + no_answer(&ctx, &mut unanswered));
                    } else if status.as_u16() == 400 || refused_as_push(status, &msg) {
                        // Refused as it stands (a priority group the consumer no longer has,
                        // say, or a push consumer made under the mount's name): asking again
                        // at once would be refused again, without end (a breaker saw 2,900
                        // requests a second at a push consumer).
                        refusals += 1;
                        let pause =
                            refused(&ctx, &mut unanswered, refusals, msg.description.as_deref());
                        paused_until = Some(R::now() + pause);
                    } else if status == StatusCode::PIN_ID_MISMATCH {
                        pin.lost(&ctx);
                    } else if unanswered.succeeded() {
                        answered_again(&ctx, &mut refusals);
                    }
                    // The request ended (expired, or terminated by the server): free the
                    // slots of the messages it will not bring.
                    let pending = msg
                        .headers
                        .as_ref()
                        .and_then(|h| h.get(PENDING_MESSAGES_HEADER))
                        .map(|v| v.as_str().as_bytes());
                    let unfilled = pulls.handle_request_end(pending);
                    held.free(unfilled);
                    tracing::trace!(mount = %ctx.name, %status, unfilled, "pull request ended");
                }
            }
            let stop = pulls.request_due(free(slots.available_permits()), waiting.len(), R::now())
                || pulls.outstanding() == 0
                || shutdown.has_changed().unwrap_or(true);
            if stop {
                break;
            }
            match replies.next().now_or_never() {
                Some(Some(next)) => msg = next,
                Some(None) => {
                    inbox_closed(&ctx, &shutdown);
                    break 'pull;
                }
                None => break,
            }
        }
    }
    // Stopping for a shutdown, nothing outstanding: a pin this instance holds goes to a
    // standby now, not after priority_timeout.
    if asked_to_stop(&shutdown)
        && let Some((group, _)) = &priority
    {
        pin.release::<R>(&ctx, &consumer, group).await;
    } else {
        pin.0 = None;
        ctx.health.pinned(ctx.index, false);
    }
    // The loop ends (its inbox closed, or shutdown): messages that still wait for a slot are
    // handled, in order, as slots free up; their settlements go through the app's current
    // client (rule 20).
    while let Some(next) = waiting.pop_front() {
        starts.flush();
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        start_waiting::<R>(&ctx, &mut pulls, &busy, next, permit, &mut starts).await;
    }
    starts.flush();
    // Stopped for a shutdown (not an inbox that closed while the app runs, which the
    // supervisor subscribes again at once, rule 20): what runs is settled first.
    if asked_to_stop(&shutdown) {
        ctx.settle_at_stop::<R>().await;
    }
}

/// Logs that the mount's pull inbox closed: an error while the app runs (the supervisor
/// subscribes it again, rule 20), expected once a shutdown has drained the connection.
fn inbox_closed(ctx: &MountContext, shutdown: &watch::Receiver<bool>) {
    if *shutdown.borrow() {
        tracing::debug!(mount = %ctx.name, "the pull inbox closed at shutdown; the mount stops");
    } else {
        tracing::error!(mount = %ctx.name, "the pull inbox closed; the mount stops");
    }
}

/// A pull request answered `503 No Responders`: nothing serves the consumer (JetStream is off,
/// the stream has no server that answers, or the consumer is gone: the supervisor's re-read of
/// the consumer then makes the mount refused). The pause before the next request,
/// `unanswered`'s next: [`FIRST_PAUSE`], doubling up to 2 s; the first of a run is logged at
/// warn level.
fn no_answer(ctx: &MountContext, unanswered: &mut Backoff) -> Duration {
    if unanswered.is_clear() {
        tracing::warn!(mount = %ctx.name,
            "no JetStream server answers the mount's pull requests (503 no responders: JetStream is off, the stream has no leader, or the consumer was deleted); asking again after a pause that grows to 2 s");
    }
    unanswered.failed()
}

/// How often a mount whose consumer no longer fits it looks again whether it may pull: 250 ms.
const UNFIT_PAUSE: Duration = Duration::from_millis(250);

/// The first pause before a pull request after one that failed or was not served: 50 ms.
const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The `refusals`th pull request in a row answered `400 Bad Request`, or `409 Consumer is push
/// based` (`description`, the server's reason): the pause before the next request, as [`no_answer`]'s. The mount's
/// health says [`MountState::Refused`](crate::MountState::Refused) from the first; the
/// first, and one in 15 after it (every 30 s at the longest pause), is logged at error level.
fn refused(
    ctx: &MountContext,
    unanswered: &mut Backoff,
    refusals: u32,
    description: Option<&str>,
) -> Duration {
    if refusals % 15 == 1 {
        tracing::error!(mount = %ctx.name, reason = description.unwrap_or(""), refusals,
            "the server refuses the mount's pull requests (400 bad request: its consumer was changed under it, or the mount's priority group is not the consumer's); nothing is delivered to it; asking again after a pause that grows to 2 s");
    }
    ctx.health.refused(ctx.index, Refusal::Requests, true);
    unanswered.failed()
}

/// A pinned mount's pin id ([`PriorityPolicy::Pinned`]): the one the server gave with the
/// last message it delivered (`Nats-Pin-Id`), sent with every request until the server says
/// it is no longer the pin (`423`). Without one, requests wait on standby until the server
/// pins this instance. It lives as long as the loop: a mount subscribed again after its
/// client died starts on standby, and is pinned again (or another instance is) once the
/// old pin's `priority_timeout` has passed.
#[derive(Default)]
struct Pin(Option<String>);

impl Pin {
    /// The body of a `CONSUMER.MSG.NEXT` request: `batch`, and the pin id if there is one.
    fn request_body(&self, batch: &async_nats::jetstream::consumer::pull::BatchConfig) -> Vec<u8> {
        #[derive(serde::Serialize)]
        struct Next<'a> {
            #[serde(flatten)]
            batch: &'a async_nats::jetstream::consumer::pull::BatchConfig,
            #[serde(skip_serializing_if = "Option::is_none")]
            id: Option<&'a str>,
        }
        serde_json::to_vec(&Next {
            batch,
            id: self.0.as_deref(),
        })
        .unwrap_or_default()
    }

    /// Takes the pin id a delivered message carries, if any and new.
    fn take_from(&mut self, ctx: &MountContext, headers: Option<&async_nats::HeaderMap>) {
        let Some(id) = headers.and_then(|h| h.get(PIN_ID_HEADER)) else {
            return;
        };
        if self.0.as_deref() != Some(id.as_str()) {
            tracing::info!(mount = %ctx.name, pin = id.as_str(),
                "this instance is pinned: it receives the priority group's messages");
            self.0 = Some(id.as_str().to_owned());
            ctx.health.pinned(ctx.index, true);
        }
    }

    /// The server answered `423 Nats-Pin-Id mismatch`: another instance holds the pin.
    fn lost(&mut self, ctx: &MountContext) {
        if self.0.take().is_some() {
            tracing::info!(mount = %ctx.name,
                "the server pinned another instance: this one stands by (what it received is handled and settled)");
            ctx.health.pinned(ctx.index, false);
        }
    }

    /// The mount stops for a shutdown, with no request outstanding: if this instance still
    /// holds the pin, it gives it up (`$JS.API.CONSUMER.UNPIN`), so that a standby is pinned
    /// at its next request instead of after the consumer's `priority_timeout` (a rolling
    /// restart would stall that long). Whether it holds the pin is read from the consumer's
    /// info first: an instance that lost it must not unpin the one that took it over. Each
    /// request waits at most [`UNPIN_PATIENCE`]; a failure is logged, and the pin then
    /// expires as it would have.
    async fn release<R: Runtime>(
        &mut self,
        ctx: &MountContext,
        consumer: &async_nats::jetstream::consumer::PullConsumer,
        group: &str,
    ) {
        let Some(pin) = self.0.take() else {
            return;
        };
        ctx.health.pinned(ctx.index, false);
        let holds = match R::timeout(UNPIN_PATIENCE, consumer.get_info()).await {
            Some(Ok(info)) => info
                .priority_groups
                .iter()
                .any(|g| g.group == group && g.pinned_client_id.as_deref() == Some(pin.as_str())),
            Some(Err(e)) => {
                tracing::debug!(mount = %ctx.name, error = %e, "cannot read the consumer at shutdown: its pin expires after priority_timeout");
                return;
            }
            None => return,
        };
        if !holds {
            return;
        }
        let info = consumer.cached_info();
        let subject = format!("CONSUMER.UNPIN.{}.{}", info.stream_name, info.name);
        let body = serde_json::json!({ "group": group });
        match api_request::<R, serde_json::Value>(ctx.client.clone(), subject, body, UNPIN_PATIENCE)
            .await
        {
            Ok(_) => {
                tracing::info!(mount = %ctx.name, "shutdown: the pin is given up, a standby takes over at its next request");
            }
            Err(e) => {
                tracing::warn!(mount = %ctx.name, error = %e, "shutdown: the pin could not be given up; a standby takes over after priority_timeout");
            }
        }
    }
}

/// How long each request of [`Pin::release`] waits for an answer.
const UNPIN_PATIENCE: Duration = Duration::from_secs(1);

/// The header with which the server gives a pinned client its pin id.
const PIN_ID_HEADER: &str = "Nats-Pin-Id";

/// JetStream answers the mount's pull requests again, after [`no_answer`] or [`refused`].
fn answered_again(ctx: &MountContext, refusals: &mut u32) {
    tracing::info!(mount = %ctx.name, "JetStream answers the mount's pull requests again");
    if std::mem::take(refusals) > 0 {
        ctx.health.refused(ctx.index, Refusal::Requests, false);
    }
}

/// Whether a status that ends a request is the server refusing it because the consumer is a
/// push consumer (`409 Consumer is push based`: one made again under the mount's name), which
/// it says at once to every request.
fn refused_as_push(status: async_nats::StatusCode, msg: &async_nats::Message) -> bool {
    status.as_u16() == 409
        && msg
            .description
            .as_deref()
            .is_some_and(|d| d.to_ascii_lowercase().contains("push based"))
}
