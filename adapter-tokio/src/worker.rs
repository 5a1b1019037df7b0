//! The mount loops and the life of one delivery.

use std::num::NonZeroUsize;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use ruststream_core::{
    AckReply, Delivery as CoreDelivery, Event, Outcome, PendingCopy, RetryCountReading, plan,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tracing::Instrument;

use crate::exec::{MountContext, Settled, execute, header_pairs, publish_plain};
use crate::handler::{Delivery, JetStreamInfo};
use crate::runtime;

/// How long one JetStream pull request waits for messages; also the longest a shutdown waits
/// for an outstanding pull to end.
pub(crate) const PULL_EXPIRES: Duration = Duration::from_secs(1);

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
    let jetstream = match (core.model, &ctx.jetstream_names) {
        (ruststream_core::Model::JetStream(r), Some((stream, consumer))) => Some(JetStreamInfo {
            stream: stream.clone(),
            consumer: consumer.clone(),
            delivered: r.delivered,
            stream_sequence: r.stream_sequence,
            consumer_sequence: r.consumer_sequence,
            timestamp: r.timestamp,
            pending: r.pending,
        }),
        _ => None,
    };
    Delivery {
        mount: ctx.name.clone(),
        subject: msg.subject.clone(),
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

/// Runs the handler, catching a panic (rule 13) and a payload that does not decode.
async fn run_handler(ctx: &MountContext, delivery: Delivery) -> Event {
    let (subject, attempt) = (delivery.subject.clone(), delivery.attempt.get());
    let started = std::panic::catch_unwind(AssertUnwindSafe(|| ctx.handler.call(delivery)));
    let result = match started {
        Ok(Ok(future)) => AssertUnwindSafe(future).catch_unwind().await.map(Ok),
        Ok(Err(decode)) => Ok(Err(decode)),
        Err(panic) => Err(panic),
    };
    match result {
        Ok(Ok(outcome)) => Event::Handled(outcome),
        Ok(Err(decode)) => {
            tracing::warn!(mount = %ctx.name, %subject, attempt, error = %decode, "payload does not decode: at-limit path");
            Event::Undecodable
        }
        Err(panic) => {
            tracing::error!(mount = %ctx.name, %subject, attempt, panic = panic_message(&*panic), "handler panicked: treated as no outcome");
            Event::Handled(Outcome::None)
        }
    }
}

/// The life of one delivery: arrival check, handler, plan, execution, and the re-plan after a
/// failed publish.
pub(crate) async fn process(ctx: Arc<MountContext>, model: Model, msg: async_nats::Message) {
    let reply = msg.reply.as_ref().map_or(&b""[..], |r| r.as_bytes());
    let delivery = match model {
        Model::Core => {
            CoreDelivery::core(&msg.subject, RetryCountReading::read(header_pairs(&msg)))
        }
        Model::JetStream => match AckReply::parse(reply) {
            Ok(r) => CoreDelivery::jetstream(&msg.subject, r),
            Err(e) => {
                // Without the reply subject there is no attempt count and nothing to settle
                // with; running the handler would make the retry limit vanish.
                tracing::error!(mount = %ctx.name, subject = %msg.subject, error = %e,
                    "JetStream message with an unreadable ack reply subject: not handled, not settled");
                return;
            }
        },
    };
    let stream_sequence = match delivery.model {
        ruststream_core::Model::JetStream(r) => Some(r.stream_sequence),
        ruststream_core::Model::Core(_) => None,
    };
    let attempt = delivery.attempt().get();
    let span = tracing::info_span!("delivery", mount = %ctx.name, subject = %msg.subject, attempt, stream_sequence);
    async {
        let arrival = plan(&delivery, Event::Arrived, &ctx.policy, runtime::now());
        let (event, decided) = if arrival.runs_handler() {
            // An arrival plan that runs the handler holds only logs.
            let _ = execute(&ctx, &msg, &delivery, &arrival).await;
            let event = run_handler(&ctx, handler_delivery(&ctx, &msg, &delivery)).await;
            (Some(event), plan(&delivery, event, &ctx.policy, runtime::now()))
        } else {
            (None, arrival)
        };
        let decided = match execute(&ctx, &msg, &delivery, &decided).await {
            Ok(()) => decided,
            Err(e) => {
                tracing::error!(error = %e.0, plan = %decided, "publish failed: the settlement is not sent");
                let recovery = plan(&delivery, Event::PublishFailed, &ctx.policy, runtime::now());
                if let Err(e) = execute(&ctx, &msg, &delivery, &recovery).await {
                    tracing::error!(error = %e.0, "recovery plan failed too");
                }
                recovery
            }
        };
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
            observer(&Settled {
                mount: ctx.name.clone(),
                subject: msg.subject.clone(),
                attempt,
                stream_sequence,
                outcome,
                handler_ran: event.is_some(),
                disposition,
                wire: decided.to_string(),
            });
        }
    }
    .instrument(span)
    .await;
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
/// subject), each message handled in a free slot. Ends at shutdown; dropping the subscribers
/// unsubscribes.
pub(crate) async fn core_loop(
    ctx: Arc<MountContext>,
    subscribers: Vec<async_nats::Subscriber>,
    slots: Arc<Semaphore>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut messages = futures_util::stream::select_all(subscribers);
    loop {
        let Some(permit) = slot(&slots, &mut shutdown).await else {
            break;
        };
        let msg = tokio::select! {
            msg = messages.next() => msg,
            _ = shutdown.changed() => None,
        };
        let Some(msg) = msg else { break };
        let ctx = ctx.clone();
        runtime::spawn(async move {
            process(ctx, Model::Core, msg).await;
            drop(permit);
        });
    }
}

/// A JetStream mount: pulls only as many messages as there are free slots, handles each in
/// its slot. At shutdown it stops pulling; a pull already outstanding is received to its end
/// (at most [`PULL_EXPIRES`]) and its messages handled, so none wait for `ack_wait`.
pub(crate) async fn jetstream_loop(
    ctx: Arc<MountContext>,
    consumer: async_nats::jetstream::consumer::PullConsumer,
    slots: Arc<Semaphore>,
    concurrency: NonZeroUsize,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let Some(first) = slot(&slots, &mut shutdown).await else {
            break;
        };
        let mut permits = vec![first];
        while permits.len() < concurrency.get() {
            match slots.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        let batch = consumer
            .batch()
            .max_messages(permits.len())
            .expires(PULL_EXPIRES)
            .messages()
            .await;
        let mut batch = match batch {
            Ok(b) => {
                backoff = Duration::from_millis(50);
                b
            }
            Err(e) => {
                tracing::warn!(mount = %ctx.name, error = %e, "pull request failed; retrying");
                drop(permits);
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.changed() => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        while let Some(next) = batch.next().await {
            match next {
                Ok(msg) => {
                    let Some(permit) = permits.pop() else {
                        tracing::error!(mount = %ctx.name, "server sent more messages than requested");
                        break;
                    };
                    let ctx = ctx.clone();
                    runtime::spawn(async move {
                        process(ctx, Model::JetStream, msg.message).await;
                        drop(permit);
                    });
                }
                Err(e) => {
                    tracing::debug!(mount = %ctx.name, error = %e, "pull ended");
                    break;
                }
            }
        }
    }
}

/// The delay queue of Core copies (one per app, one timer): publishes each copy when due.
///
/// Runs until `finish` holds a deadline and then until the queue is empty or the deadline
/// has passed (the end of the shutdown grace period). Gives how many copies were still
/// waiting then, per mount index: those are lost (SETTLEMENT.md, rule 14).
pub(crate) async fn delay_loop(
    client: async_nats::Client,
    mut incoming: mpsc::UnboundedReceiver<(PendingCopy, std::time::Instant)>,
    mut finish: watch::Receiver<Option<std::time::Instant>>,
    mount_count: usize,
) -> Vec<usize> {
    let mut queue = ruststream_core::DelayQueue::new();
    loop {
        let end = *finish.borrow();
        if let Some(end) = end {
            while let Ok((copy, at)) = incoming.try_recv() {
                queue.handle_copy(copy, at);
            }
            if queue.is_empty() || runtime::now() >= end {
                break;
            }
        }
        let next = queue.poll_timeout();
        tokio::select! {
            biased;
            changed = finish.changed() => if changed.is_err() { break },
            item = incoming.recv() => match item {
                Some((copy, at)) => queue.handle_copy(copy, at),
                None => break,
            },
            _ = runtime::sleep_until(next.unwrap_or_else(runtime::now)), if next.is_some() => {
                let due: Vec<PendingCopy> = queue.handle_timeout(runtime::now()).collect();
                for copy in due {
                    let subject = copy.publication.subject.clone();
                    if let Err(e) = publish_plain(&client, copy.publication).await {
                        tracing::error!(%subject, error = %e.0, "delayed Core copy lost: its publish failed");
                    }
                }
            }
            _ = runtime::sleep_until(end.unwrap_or_else(runtime::now)), if end.is_some() => break,
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
