//! A Core mount's losses (rule 21).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::api::reports::CoreLosses;
use crate::support::metrics::{Loss, MountMetrics};

/// A Core mount's losses (rule 21), counted as they happen and read into the shutdown report
/// (and counted in its metrics).
pub(crate) struct Losses {
    /// Messages dropped because the mount's subscription buffer was full.
    pub(crate) slow_consumer: AtomicU64,
    /// Copies whose publish failed (at once or when due).
    pub(crate) copies: AtomicU64,
    /// Dead letters whose publish failed.
    pub(crate) dead_letters: AtomicU64,
    /// Messages received and not handed to a handler when shutdown began.
    pub(crate) unhandled_at_shutdown: AtomicU64,
    metrics: Arc<MountMetrics>,
}

impl Losses {
    /// No losses yet; they will be counted in `metrics` too.
    pub(crate) fn new(metrics: Arc<MountMetrics>) -> Self {
        Self {
            slow_consumer: AtomicU64::new(0),
            copies: AtomicU64::new(0),
            dead_letters: AtomicU64::new(0),
            unhandled_at_shutdown: AtomicU64::new(0),
            metrics,
        }
    }

    /// The mount's metrics.
    pub(crate) fn metrics(&self) -> &MountMetrics {
        &self.metrics
    }

    /// The counts so far, for the report of the mount named `mount`.
    pub(crate) fn read(&self, mount: &str) -> CoreLosses {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        CoreLosses {
            mount: mount.to_owned(),
            slow_consumer: read(&self.slow_consumer),
            unpublished_copies: read(&self.copies),
            unpublished_dead_letters: read(&self.dead_letters),
            unhandled_at_shutdown: read(&self.unhandled_at_shutdown),
        }
    }

    /// Counts `n` messages lost for `loss`.
    pub(crate) fn add(&self, loss: Loss, n: u64) {
        let counter = match loss {
            Loss::SlowConsumer => &self.slow_consumer,
            Loss::Copy => &self.copies,
            Loss::DeadLetter => &self.dead_letters,
            Loss::UnhandledAtShutdown => &self.unhandled_at_shutdown,
            // Counted by the delay loop, which reports them itself.
            Loss::CopyAtShutdown => {
                self.metrics.lost(loss, n);
                return;
            }
        };
        counter.fetch_add(n, Ordering::Relaxed);
        self.metrics.lost(loss, n);
    }
}

impl std::fmt::Debug for Losses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Losses")
            .field("slow_consumer", &self.slow_consumer)
            .field("copies", &self.copies)
            .field("dead_letters", &self.dead_letters)
            .field("unhandled_at_shutdown", &self.unhandled_at_shutdown)
            .finish_non_exhaustive()
    }
}
