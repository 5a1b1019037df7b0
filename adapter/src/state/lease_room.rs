//! The app's leases (rule 16), shared by its deliveries, which start and end them, and its lease
//! loop, which renews them and fires their time limits: the core's [`Leases`] behind a lock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_nats::Subject;
use ruststream_settlement::{
    Delivery as CoreDelivery, LeaseEnd, LeaseKey, LeaseTerms, LeasedDelivery, Leases, Model,
    lease_span,
};
use tokio::sync::{Notify, oneshot};

use crate::api::context::Stands;
use crate::support::metrics::MountMetrics;

/// What the lease loop needs of a lease: where to renew it, and how to cancel its handler.
pub(crate) struct LeaseIo {
    /// The delivery's ack reply subject (JetStream); `None` on Core.
    pub(crate) reply: Option<Subject>,
    /// Fired at the time limit.
    pub(crate) cancel: Option<oneshot::Sender<()>>,
    /// Its mount's metrics, which count its renewals.
    pub(crate) metrics: Arc<MountMetrics>,
}

/// The leases of an app's running handlers, shared by its deliveries and its lease loop.
#[derive(Default)]
pub(crate) struct LeaseRoom {
    leases: Mutex<Leases<LeaseIo>>,
    /// How many JetStream messages have a delivery under a lease, as of the last change: zero
    /// spares every arrival the lock ([`delivered`](Self::delivered)).
    messages: AtomicUsize,
    /// Wakes the lease loop when a lease starts whose first instant is the earliest.
    started: Notify,
}

impl LeaseRoom {
    /// The leases, locked: keep the guard short.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Leases<LeaseIo>> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a lease on `terms` at `now`, and wakes the lease loop when the lease's first
    /// instant is the earliest (a lease that runs at once in a stream of them, falling due
    /// after those before it, wakes nothing: the loop looks at the schedule again at its
    /// next instant anyway).
    pub(crate) fn start(&self, terms: LeaseTerms, io: LeaseIo, now: Instant) -> LeaseKey {
        let (key, earliest) = {
            let mut leases = self.lock();
            let before = leases.poll_timeout();
            let key = leases.handle_start(terms, io, now);
            self.messages.store(leases.messages(), Ordering::Release);
            let earliest = match (before, leases.poll_timeout()) {
                (Some(before), Some(after)) => after < before,
                _ => true,
            };
            (key, earliest)
        };
        if earliest {
            self.started.notify_one();
        }
        key
    }

    /// Ends the lease `key` at `now`: whether its result may be sent (see
    /// [`Leases::handle_end`]).
    pub(crate) fn end(&self, key: LeaseKey, now: Instant) -> LeaseEnd {
        let mut leases = self.lock();
        let (end, _) = leases.handle_end(key, now);
        self.messages.store(leases.messages(), Ordering::Release);
        end
    }

    /// A mount received `delivery`: the leases of earlier deliveries of its message are
    /// superseded (rule 16, [`Leases::handle_delivered`]). One atomic load while no JetStream
    /// delivery is under a lease (handlers that finish at their first poll take none).
    pub(crate) fn delivered(&self, delivery: LeasedDelivery) {
        if self.messages.load(Ordering::Acquire) == 0 {
            return;
        }
        self.lock().handle_delivered(delivery);
    }

    /// How many of mount `mount`'s messages are held under a lease no later delivery
    /// superseded ([`Leases::current_messages`]): none, at one atomic load, while no JetStream
    /// delivery is under a lease.
    pub(crate) fn current_messages(&self, mount: usize) -> usize {
        if self.messages.load(Ordering::Acquire) == 0 {
            return 0;
        }
        self.lock().current_messages(mount)
    }

    /// Resolves when a lease starts whose first instant is the earliest: the lease loop looks
    /// at its next instant again.
    pub(crate) async fn started(&self) {
        self.started.notified().await;
    }
}

impl Stands for LeaseRoom {
    /// [`Leases::is_current`]: one atomic load while no JetStream delivery is under a lease.
    fn is_current(&self, delivery: LeasedDelivery, now: Instant) -> bool {
        if self.messages.load(Ordering::Acquire) == 0 {
            return true;
        }
        self.lock().is_current(delivery, now)
    }
}

/// A mount's lease settings, from its declaration and (JetStream) its consumer's info.
#[derive(Debug, Clone)]
pub(crate) struct LeaseSettings {
    /// The consumer's `ack_wait`; `None` on Core.
    pub(crate) ack_wait: Option<Duration>,
    /// The consumer's `BackOff` list.
    pub(crate) backoff: Vec<Duration>,
    /// Whether to renew with `+WPI`.
    pub(crate) renew: bool,
    /// The handler time limit.
    pub(crate) limit: Duration,
}

impl LeaseSettings {
    /// The terms of `delivery`'s lease on mount `mount` (its index): its span from the
    /// consumer's `ack_wait` and `BackOff` (JetStream), whether it is renewed, the handler time
    /// limit, and (JetStream) the delivery it keeps.
    pub(crate) fn terms(&self, mount: usize, delivery: &CoreDelivery<'_>) -> LeaseTerms {
        let (span, delivery) = match delivery.model {
            Model::JetStream(reply) => (
                self.ack_wait
                    .map(|ack_wait| lease_span(ack_wait, &self.backoff, reply.delivered)),
                Some(LeasedDelivery::of(mount, &reply)),
            ),
            Model::Core(_) => (None, None),
        };
        LeaseTerms {
            span,
            renew: self.renew,
            limit: self.limit,
            delivery,
        }
    }
}
