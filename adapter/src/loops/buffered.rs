//! A Core mount's own buffer (rule 21): what arrives while every handler slot is busy, up to
//! the mount's `subscription_buffer`; what does not fit is dropped and counted.

use std::collections::VecDeque;
use std::num::NonZeroUsize;
use std::task::Poll;

use futures_util::{FutureExt, StreamExt};

use crate::state::mount_context::MountContext;
use crate::support::deliberate::{self, Bug};
use crate::support::incoming::Incoming;
use crate::support::metrics::Loss;

/// A Core mount's messages: its subscription, and the mount's own buffer, which holds what
/// arrives while every handler slot is busy (rule 21). Messages come from the buffer first,
/// in the order they arrived.
pub(super) struct Buffered<S> {
    subscription: S,
    /// Held as [`Incoming`]: 104 bytes a message where async-nats' message is 184, moved
    /// in and out once each.
    held: VecDeque<Incoming>,
    capacity: usize,
    /// The subscription has ended; what is held is still given out.
    ended: bool,
}

impl<S> Buffered<S>
where
    S: futures_util::Stream<Item = async_nats::Message> + Unpin,
{
    pub(super) fn new(subscription: S, capacity: NonZeroUsize) -> Self {
        Self {
            subscription,
            held: VecDeque::new(),
            capacity: capacity.get(),
            ended: false,
        }
    }

    /// Moves every message async-nats has received into the buffer, dropping those that do
    /// not fit, each counted in the mount's losses (the supervisor logs them). Never ends:
    /// meant to run beside something that does.
    pub(super) async fn hold(&mut self, ctx: &MountContext) {
        std::future::poll_fn(|cx| {
            loop {
                if self.ended {
                    return Poll::Pending;
                }
                match self.subscription.poll_next_unpin(cx) {
                    Poll::Ready(Some(msg)) if self.held.len() < self.capacity => {
                        self.held.push_back(Incoming::from(msg));
                    }
                    Poll::Ready(Some(_dropped)) => {
                        if !deliberate::active(Bug::ForgetCoreDrop) {
                            ctx.losses.add(Loss::SlowConsumer, 1);
                        }
                    }
                    Poll::Ready(None) => self.ended = true,
                    Poll::Pending => return Poll::Pending,
                }
            }
        })
        .await
    }
}

impl<S: Subscriptions> Buffered<S> {
    /// Asks the server to stop sending to the mount's subscriptions (see
    /// [`Subscriptions::drain`]); what is held and what arrives until they end is still given
    /// out.
    pub(super) async fn drain(&mut self) {
        self.subscription.drain().await;
    }
}

/// A Core mount's subscriptions, which a shutdown ends.
pub(super) trait Subscriptions:
    futures_util::Stream<Item = async_nats::Message> + Unpin + Send
{
    /// Unsubscribes each (`UNSUB`, then a `PING`): async-nats still hands over what the
    /// server sent before it read the `UNSUB`, and ends the stream once the server has answered
    /// (async-nats' `Subscriber::drain`).
    fn drain(&mut self) -> impl std::future::Future<Output = ()> + Send;
}

impl Subscriptions for async_nats::Subscriber {
    async fn drain(&mut self) {
        if let Err(e) = async_nats::Subscriber::drain(self).await {
            // The client is gone: its subscriptions end with it.
            tracing::debug!(error = %e, "could not unsubscribe a Core subscription at shutdown");
        }
    }
}

impl Subscriptions for futures_util::stream::SelectAll<async_nats::Subscriber> {
    async fn drain(&mut self) {
        for subscriber in self.iter_mut() {
            Subscriptions::drain(subscriber).await;
        }
    }
}

impl<S> futures_util::Stream for Buffered<S>
where
    S: futures_util::Stream<Item = async_nats::Message> + Unpin,
{
    type Item = Incoming;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(msg) = this.held.pop_front() {
            return Poll::Ready(Some(msg));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        this.subscription
            .poll_next_unpin(cx)
            .map(|msg| msg.map(Incoming::from))
    }
}

/// How many messages a Core subscription holds, received and not yet handed to a handler,
/// taking them out. At most one yield is spent waiting for the runtime's cooperative budget
/// each time it runs out.
pub(super) async fn count_buffered<S>(messages: &mut S) -> usize
where
    S: futures_util::Stream + Unpin,
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
