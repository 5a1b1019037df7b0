//! Where a JetStream mount's deliveries that wait go on ([`Placement`]): beside the mount's
//! loop, on the NATS thread, or on the application's runtime.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::task::Waker;
use std::time::Duration;

/// The longest poll of a delivery's handler that may run beside the loop, on the NATS
/// thread: a handler whose poll takes longer holds up the connection (its reads, every
/// other mount's acks) for that long, so it goes on on the application's runtime; after
/// [`HEAVY_STRIKES`] such deliveries in a row, so do the mount's next [`APART_AFTER_HEAVY`]
/// deliveries that wait.
///
/// 1 ms is ten to twenty times a poll that decodes a message, builds a request or a publish,
/// and awaits it; it is CPU work (a transformation, a hash, a large encode) that takes
/// longer, and that runs better in parallel on the application's threads. It is measured on
/// the wall clock, so a thread the system took the CPU from in the middle of a poll makes
/// a light poll look heavy now and then: hence the strikes.
pub(crate) const HEAVY_POLL: Duration = Duration::from_millis(1);

/// How many of a mount's deliveries in a row must have had a heavy poll ([`HEAVY_POLL`])
/// before its next ones go on apart at once.
pub(crate) const HEAVY_STRIKES: u32 = 3;

/// How many of a mount's next deliveries that wait go on on the application's runtime after
/// [`HEAVY_STRIKES`]; after them, the mount tries beside its loop again (a handler's cost may
/// change with its input, or may have been a passing load).
pub(crate) const APART_AFTER_HEAVY: u32 = 1024;

/// Where a JetStream mount's single deliveries that wait (their handler did not finish at
/// its first poll) go on.
///
/// Beside the mount's loop, on the NATS thread where the connection is, while their
/// handlers' polls stay short: a handler that awaits the server (a publish's
/// acknowledgement, a request), as pipelines do, is woken on that thread by the
/// connection's task, and its delivery's settlement is handed to the connection without a
/// wake-up across threads. On the application's runtime each such delivery cost two or three
/// wake-ups of another thread (issue 39's pipeline bench: 0.70 of raw async-nats' rate, 0.98
/// beside the loop; js-io, a handler awaiting a 1 ms timer, 0.86 and 0.96).
///
/// On the application's runtime when they are heavy ([`HEAVY_POLL`]) and when the mount
/// stops: its loop calls [`leave`](Self::leave) as soon as a shutdown is asked for (or every
/// handle to the app is gone), and every delivery beside the loop moves, unfinished, so that
/// the grace period, and a handler the shutdown gives up on, run there as before, not on the
/// NATS thread, whose runtime ends with the app (where a handler would be cancelled at an
/// await).
#[derive(Default)]
pub(crate) struct Placement {
    /// Set by [`leave`](Self::leave): no delivery goes on beside the loop any more.
    leaving: AtomicBool,
    /// The deliveries beside the loop that wait, woken by [`leave`](Self::leave): each
    /// registers its task's waker once, when it first waits, and takes it out when it ends.
    beside: Mutex<slab::Slab<Waker>>,
    /// How many more deliveries that wait go on apart (see [`APART_AFTER_HEAVY`]).
    apart: AtomicU32,
    /// How many of its last deliveries beside the loop, in a row, had a heavy poll.
    strikes: AtomicU32,
}

impl Placement {
    /// Whether the mount is stopping: a delivery beside the loop moves apart.
    pub(crate) fn leaving(&self) -> bool {
        self.leaving.load(Ordering::Acquire)
    }

    /// The mount stops: every delivery beside its loop moves apart, and the next ones go
    /// apart at once. Idempotent.
    pub(crate) fn leave(&self) {
        if self.leaving.swap(true, Ordering::AcqRel) {
            return;
        }
        let beside =
            std::mem::take(&mut *self.beside.lock().unwrap_or_else(PoisonError::into_inner));
        for waker in beside.into_iter().map(|(_, w)| w) {
            waker.wake();
        }
    }

    /// Registers the waker of a delivery beside the loop that waits; its key, to
    /// [`forget`](Self::forget) it with, and `None` when the mount is already leaving (the
    /// delivery moves apart instead).
    pub(crate) fn register(&self, waker: &Waker) -> Option<usize> {
        let mut beside = self.beside.lock().unwrap_or_else(PoisonError::into_inner);
        // Checked under the lock: `leave` takes the wakers under it after setting the flag.
        (!self.leaving()).then(|| beside.insert(waker.clone()))
    }

    /// Takes out the waker registered under `key`.
    pub(crate) fn forget(&self, key: usize) {
        self.beside
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .try_remove(key);
    }

    /// Whether the next delivery that waits goes on apart, on the application's runtime
    /// (counting it against [`APART_AFTER_HEAVY`]).
    pub(crate) fn apart(&self) -> bool {
        self.apart
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    /// A delivery beside the loop had a poll longer than [`HEAVY_POLL`] (and goes on apart):
    /// at the [`HEAVY_STRIKES`]th in a row, the mount's next [`APART_AFTER_HEAVY`] deliveries
    /// that wait go on apart.
    pub(crate) fn heavy(&self) {
        if self.strikes.fetch_add(1, Ordering::Relaxed) + 1 >= HEAVY_STRIKES {
            self.strikes.store(0, Ordering::Relaxed);
            self.apart.store(APART_AFTER_HEAVY, Ordering::Relaxed);
        }
    }

    /// A delivery beside the loop ended with no heavy poll: the strikes start again.
    pub(crate) fn light(&self) {
        if self.strikes.load(Ordering::Relaxed) != 0 {
            self.strikes.store(0, Ordering::Relaxed);
        }
    }
}
