//! Where a JetStream mount's deliveries that wait go on ([`Placement`]): beside the mount's
//! loop, on the NATS thread, or on the application's runtime.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::task::Waker;
use std::time::Duration;

/// The longest poll of a delivery's handler that may run beside the loop, on the NATS
/// thread: a handler whose poll takes longer holds up the connection (its reads, every
/// other mount's acks and lease renewals) for that long, so it goes on on the application's
/// runtime, and the mount is scored ([`Placement::heavy`]).
///
/// 1 ms is ten to twenty times a poll that decodes a message, builds a request or a publish,
/// and awaits it; it is CPU work (a transformation, a hash, a large encode) that takes
/// longer, and that runs better in parallel on the application's threads. It is measured on
/// the wall clock, so a thread the system took the CPU from in the middle of a poll makes
/// a light poll look heavy now and then: hence a score, not a verdict at the first.
pub(crate) const HEAVY_POLL: Duration = Duration::from_millis(1);

/// A poll this long moves the mount's deliveries that wait to the application's runtime at
/// once: no preemption stops a thread that long on a machine that still serves its
/// messages, and every further such poll beside the loop would stop the connection as long.
pub(crate) const BLOCKING_POLL: Duration = Duration::from_millis(10);

/// What a heavy poll adds to the mount's score; each delivery beside the loop that ends with
/// no heavy poll takes one off. At [`APART_SCORE`] the mount's deliveries that wait go on
/// apart, for the rest of the app's life: three heavy polls close together (a handler that is
/// heavy for one input in ten gets there within about forty deliveries), while a stray one
/// in thousands of light deliveries (a preempted thread) is forgotten.
pub(crate) const HEAVY_SCORE: u32 = 32;

/// The score at which a mount's deliveries that wait go on apart for good.
pub(crate) const APART_SCORE: u32 = 3 * HEAVY_SCORE;

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
/// On the application's runtime when they are heavy ([`HEAVY_POLL`], [`APART_SCORE`]: a
/// handler that computes after it awaits is heavy in its last poll, which is timed too; the
/// first heavy polls do run beside the loop, as every handler's first poll does, until the
/// mount is found heavy), and when the mount stops: the app's shutdown (and the mount's loop,
/// when every handle to the app is gone) calls [`leave`](Self::leave), and every delivery
/// beside the loop moves, unfinished, so that the grace period, and a handler the shutdown
/// gives up on, run there as before, not on the NATS thread, whose runtime ends with the app
/// (where a handler would be cancelled at an await). One placement serves every run of the
/// mount's loop (it is the mount's record's), so that deliveries of an earlier run, before
/// its client died (rule 20), move too.
pub(crate) struct Placement {
    /// The mount's name, for the log.
    mount: &'static str,
    /// The deliveries beside the loop that wait, woken when the mount goes apart: each
    /// registers its task's waker once, when it first waits, and takes it out when it ends.
    beside: Mutex<slab::Slab<Waker>>,
    /// Whether its deliveries that wait go on apart, for good: found heavy
    /// ([`APART_SCORE`]), or the mount stops ([`leave`](Self::leave)).
    apart: AtomicBool,
    /// Its heaviness so far (see [`HEAVY_SCORE`]).
    score: AtomicU32,
}

impl Placement {
    /// The placement of the mount `mount`: beside its loop until found heavy.
    pub(crate) fn new(mount: &'static str) -> Self {
        Self {
            mount,
            beside: Mutex::default(),
            apart: AtomicBool::new(false),
            score: AtomicU32::new(0),
        }
    }

    /// The mount stops: every delivery beside its loop moves apart, and the next ones go
    /// apart at once. Idempotent.
    pub(crate) fn leave(&self) {
        if !self.apart.swap(true, Ordering::AcqRel) {
            self.wake_all();
        }
    }

    /// Wakes every delivery beside the loop that waits, so that it moves apart before its next
    /// poll; none registers after this (see [`register`](Self::register)).
    fn wake_all(&self) {
        let beside =
            std::mem::take(&mut *self.beside.lock().unwrap_or_else(PoisonError::into_inner));
        for waker in beside.into_iter().map(|(_, w)| w) {
            waker.wake();
        }
    }

    /// Registers the waker of a delivery beside the loop that waits; its key, to
    /// [`forget`](Self::forget) it with, and `None` when the mount has gone apart (the
    /// delivery moves apart instead).
    pub(crate) fn register(&self, waker: &Waker) -> Option<usize> {
        let mut beside = self.beside.lock().unwrap_or_else(PoisonError::into_inner);
        // Checked under the lock: `wake_all` takes the wakers under it after the flag is set,
        // and nothing registers after it, so that a key forgotten later is never another
        // delivery's.
        (!self.apart()).then(|| beside.insert(waker.clone()))
    }

    /// Takes out the waker registered under `key`.
    pub(crate) fn forget(&self, key: usize) {
        self.beside
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .try_remove(key);
    }

    /// Whether the next delivery that waits goes on apart, on the application's runtime: the
    /// mount was found heavy, or stops.
    pub(crate) fn apart(&self) -> bool {
        self.apart.load(Ordering::Acquire)
    }

    /// A delivery beside the loop had a poll that `took` longer than [`HEAVY_POLL`] (and goes
    /// on apart, if it has not ended): the mount's score grows, and at [`APART_SCORE`], or
    /// at once for a poll of [`BLOCKING_POLL`] or more, its deliveries that wait go on apart.
    pub(crate) fn heavy(&self, took: Duration) {
        let add = if took >= BLOCKING_POLL {
            APART_SCORE
        } else {
            HEAVY_SCORE
        };
        let score = self
            .score
            .fetch_add(add, Ordering::Relaxed)
            .saturating_add(add);
        if score >= APART_SCORE && !self.apart.swap(true, Ordering::AcqRel) {
            tracing::info!(mount = %self.mount, took_us = took.as_micros(),
                "a JetStream mount's handlers run long between their awaits: their deliveries that wait go on on the application's runtime from now on, not beside the mount's loop");
            // Those beside the loop now move before their next poll, which may be as heavy.
            self.wake_all();
        }
    }

    /// A delivery beside the loop ended with no heavy poll: the score falls by one.
    pub(crate) fn light(&self) {
        if self.score.load(Ordering::Relaxed) != 0 {
            let _ = self
                .score
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }
}
