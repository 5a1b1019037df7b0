//! The app's leases (rule 16), shared by its deliveries, which start and end them, and its lease
//! loop, which renews them and fires their time limits: the core's [`Leases`] behind a lock.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_nats::Subject;
use ruststream_core::{Delivery as CoreDelivery, LeaseKey, LeaseTerms, Leases, Model, lease_span};
use tokio::sync::{Notify, oneshot};

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
    /// Wakes the lease loop when a lease starts (its first instant may be the earliest).
    started: Notify,
}

impl LeaseRoom {
    /// The leases, locked: keep the guard short.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Leases<LeaseIo>> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a lease on `terms` at `now`, and wakes the lease loop (its first instant may be
    /// the earliest).
    pub(crate) fn start(&self, terms: LeaseTerms, io: LeaseIo, now: Instant) -> LeaseKey {
        let key = self.lock().handle_start(terms, io, now);
        self.started.notify_one();
        key
    }

    /// Resolves when a lease starts: the lease loop looks at its next instant again.
    pub(crate) async fn started(&self) {
        self.started.notified().await;
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
    /// The terms of `delivery`'s lease: its span from the consumer's `ack_wait` and `BackOff`
    /// (JetStream), whether it is renewed, and the handler time limit.
    pub(crate) fn terms(&self, delivery: &CoreDelivery<'_>) -> LeaseTerms {
        let span = match (delivery.model, self.ack_wait) {
            (Model::JetStream(reply), Some(ack_wait)) => {
                Some(lease_span(ack_wait, &self.backoff, reply.delivered))
            }
            _ => None,
        };
        LeaseTerms {
            span,
            renew: self.renew,
            limit: self.limit,
        }
    }
}
