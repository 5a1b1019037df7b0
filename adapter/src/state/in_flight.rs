//! A mount's deliveries in flight: what a shutdown waits for.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::metrics::MountMetrics;

/// How many of a mount's deliveries had to wait (a handler still running after its first
/// poll, a dead letter waiting for its confirmation) and have not finished: what a shutdown
/// waits for, and reports as abandoned when its grace period ends. A delivery that finishes
/// at once never counts.
pub(crate) struct InFlight {
    count: AtomicUsize,
    /// Woken when the count falls to zero.
    idle: tokio::sync::Notify,
    /// Its gauge, `ruststream_handlers_waiting`.
    metrics: Arc<MountMetrics>,
}

/// One delivery counted in [`InFlight`] until it is dropped.
pub(crate) struct InFlightGuard(Arc<InFlight>);

impl InFlight {
    /// None in flight, counted in `metrics` too.
    pub(crate) fn new(metrics: Arc<MountMetrics>) -> Self {
        Self {
            count: AtomicUsize::new(0),
            idle: tokio::sync::Notify::new(),
            metrics,
        }
    }

    /// Counts one more delivery in flight, until the guard is dropped: one atomic add (and the
    /// gauge's).
    pub(crate) fn enter(self: &Arc<Self>) -> InFlightGuard {
        self.count.fetch_add(1, Ordering::AcqRel);
        self.metrics.waiting(1.0);
        InFlightGuard(self.clone())
    }

    /// How many are in flight.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Waits until none is in flight.
    pub(crate) async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the count is read, so a fall to zero in between wakes it.
            notified.as_mut().enable();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.metrics.waiting(-1.0);
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
