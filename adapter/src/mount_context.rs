//! What a mount's deliveries are handled and executed with, shared by its loop and its
//! deliveries' tasks.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use async_nats::Client;
use ruststream_core::{MountPolicy, PendingCopy};
use tokio::sync::mpsc;

use crate::leases::{LeaseRoom, LeaseSettings};
use crate::report::Observer;

/// Where a mount's dead letters go, decided at start-up (rule 8).
#[derive(Clone)]
pub(crate) enum DeadLetterSink {
    /// A stream stores the subject: a JetStream publish confirmed by the stream's ack.
    JetStream(Box<async_nats::jetstream::Context>),
    /// No stream stores it (Core mounts only): a plain publish, flushed to the server.
    Plain,
}

/// Everything a mount's deliveries are executed with.
pub(crate) struct MountContext {
    pub(crate) index: usize,
    pub(crate) name: &'static str,
    pub(crate) policy: MountPolicy,
    pub(crate) handler: Arc<dyn crate::Handler>,
    pub(crate) client: Client,
    /// The app's current client, which the supervisor replaces when `client` dies (rule 20).
    pub(crate) clients: tokio::sync::watch::Receiver<Client>,
    pub(crate) dead_letters: DeadLetterSink,
    pub(crate) delayed: mpsc::UnboundedSender<(PendingCopy, Instant)>,
    pub(crate) jetstream_names: Option<(&'static str, &'static str)>,
    /// The mount's literal subject, shared: see [`MountContext::subject`].
    pub(crate) literal_subject: LiteralSubject,
    pub(crate) observer: Option<Observer>,
    /// The app's leases (rule 16), and how this mount's are kept.
    pub(crate) leases: Arc<LeaseRoom>,
    /// Shared with the mount's record, where the supervisor updates it (rule 16: a consumer's
    /// `ack_wait` or `BackOff` that changes).
    pub(crate) lease_settings: Arc<Mutex<LeaseSettings>>,
    /// The mount's deliveries that had to wait and have not finished, for shutdown.
    pub(crate) in_flight: Arc<InFlight>,
    /// The mount's Core losses so far (rule 21).
    pub(crate) losses: Arc<Losses>,
    /// The stream sequences of the JetStream deliveries it received lately (rule 20).
    pub(crate) received: Arc<Received>,
    /// Until when its pull loop fetches one message at a time (rule 20).
    pub(crate) careful: Arc<Careful>,
    /// Whether it warned of a Core `retry` that does nothing (rule 22: once per mount).
    pub(crate) warned_retry: Arc<std::sync::atomic::AtomicBool>,
    /// What its handlers publish with.
    pub(crate) handler_context: Arc<crate::context::ContextShared>,
    /// What a handler's `Err` stands for.
    pub(crate) on_error: crate::ErrorPolicy,
    /// Its metrics.
    pub(crate) metrics: Arc<crate::metrics::MountMetrics>,
}

/// Until when a JetStream mount pulls one message at a time: set by the supervisor while a
/// stored message seems to bring the client down, so that it comes alone and the messages
/// around it are received, handled and acknowledged, instead of being lost with the client
/// and redelivered until their attempts run out (rule 20).
#[derive(Default)]
pub(crate) struct Careful(Mutex<Option<Instant>>);

impl Careful {
    /// Pull one at a time until `until`.
    pub(crate) fn until(&self, until: Instant) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(until);
    }

    /// Back to whole batches.
    pub(crate) fn clear(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Whether to pull one at a time at `now`.
    pub(crate) fn at(&self, now: Instant) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|until| now < until)
    }
}

/// The stream sequences of the last [`Received::KEPT`] JetStream deliveries a mount received,
/// whatever its loop: what tells a message that never reached the mount (one that brought
/// the client down) from those that did (rule 20). One atomic add and store per delivery. A
/// Core mount keeps none.
pub(crate) struct Received {
    sequences: Box<[AtomicU64]>,
    next: std::sync::atomic::AtomicUsize,
}

impl Received {
    /// How many sequences a JetStream mount keeps: 8,192 (64 KiB).
    pub(crate) const KEPT: usize = 8192;

    /// Keeps the last [`KEPT`](Self::KEPT) sequences when `jetstream`, none otherwise.
    pub(crate) fn new(jetstream: bool) -> Self {
        let kept = if jetstream { Self::KEPT } else { 0 };
        Self {
            sequences: (0..kept).map(|_| AtomicU64::new(0)).collect(),
            next: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Notes that the delivery of `stream_sequence` was received.
    pub(crate) fn note(&self, stream_sequence: u64) {
        let kept = self.sequences.len();
        if kept == 0 {
            return;
        }
        let at = self.next.fetch_add(1, Ordering::Relaxed) % kept;
        self.sequences[at].store(stream_sequence, Ordering::Relaxed);
    }

    /// The sequences kept.
    pub(crate) fn snapshot(&self) -> std::collections::HashSet<u64> {
        self.sequences
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&s| s != 0)
            .collect()
    }
}

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
    metrics: Arc<crate::metrics::MountMetrics>,
}

impl Losses {
    /// No losses yet; they will be counted in `metrics` too.
    pub(crate) fn new(metrics: Arc<crate::metrics::MountMetrics>) -> Self {
        Self {
            slow_consumer: AtomicU64::new(0),
            copies: AtomicU64::new(0),
            dead_letters: AtomicU64::new(0),
            unhandled_at_shutdown: AtomicU64::new(0),
            metrics,
        }
    }

    /// The mount's metrics.
    pub(crate) fn metrics(&self) -> &crate::metrics::MountMetrics {
        &self.metrics
    }

    /// Counts `n` messages lost for `loss`.
    pub(crate) fn add(&self, loss: crate::metrics::Loss, n: u64) {
        use crate::metrics::Loss;
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

/// How many of a mount's deliveries had to wait (a handler still running after its first
/// poll, a dead letter waiting for its confirmation) and have not finished: what a shutdown
/// waits for, and reports as abandoned when its grace period ends. A delivery that finishes
/// at once never counts.
pub(crate) struct InFlight {
    count: std::sync::atomic::AtomicUsize,
    /// Woken when the count falls to zero.
    idle: tokio::sync::Notify,
    /// Its gauge, `ruststream_handlers_waiting`.
    metrics: Arc<crate::metrics::MountMetrics>,
}

/// One delivery counted in [`InFlight`] until it is dropped.
pub(crate) struct InFlightGuard(Arc<InFlight>);

impl InFlight {
    /// None in flight, counted in `metrics` too.
    pub(crate) fn new(metrics: Arc<crate::metrics::MountMetrics>) -> Self {
        Self {
            count: std::sync::atomic::AtomicUsize::new(0),
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

/// A literal subject a mount's deliveries come on, kept once per process (see [`intern`]).
pub(crate) enum LiteralSubject {
    /// A Core subject: every delivery comes on it, as a subscription to a literal subject
    /// receives that subject only.
    EveryDelivery(async_nats::Subject),
    /// A wildcard's copy subject (rule 10): the copies come on it.
    Copies(async_nats::Subject),
    /// A JetStream consumer's deliveries come on the subjects of its stream: none is known.
    Unknown,
}

impl MountContext {
    /// Logs that the mount stops because every handle to its app (its `Running` and every
    /// `ShutdownHandle`) was dropped without a shutdown: said by both mount loops.
    pub(crate) fn handles_gone(&self) {
        tracing::warn!(mount = %self.name,
            "the app's Running (and every ShutdownHandle) was dropped without a shutdown: the mount stops consuming; keep the Running and call shutdown() or until_signal() to stop gracefully");
    }

    /// The end of a mount loop that stops for a shutdown, asked for or because every handle
    /// to its app is gone (see [`handles_gone`](Self::handles_gone)): waits for the mount's
    /// deliveries still running to settle (each bounded by its handler's time limit, rule
    /// 16), then, while the connection is up, flushes the app's current client for at most
    /// [`FINAL_FLUSH`](crate::shutdown::FINAL_FLUSH), 5 s, so that their settlements and copies reach the server before the loop
    /// ends. When nothing runs the app's graceful shutdown (its `Running` was dropped, before
    /// or after a `ShutdownHandle` asked for it), the app's NATS thread, and its connection,
    /// end only once every mount loop has; when a graceful shutdown runs, its grace period
    /// bounds this wait and the thread's stop cancels what is left of it. A flush that fails
    /// or times out is logged at warn level: what it held may not have arrived.
    pub(crate) async fn settle_at_stop<R: crate::runtime::Runtime>(&self) {
        let running = self.in_flight.count();
        if running > 0 {
            tracing::info!(mount = %self.name, running,
                "waiting for the mount's running deliveries to settle before it stops");
        }
        self.in_flight.idle().await;
        let client = self.clients.borrow().clone();
        if client.connection_state() != async_nats::connection::State::Connected {
            if running > 0 {
                tracing::warn!(mount = %self.name,
                    "the connection is down as the mount stops: its last settlements wait in the client");
            }
            return;
        }
        match R::timeout(crate::shutdown::FINAL_FLUSH, client.flush()).await {
            Some(Ok(())) => {}
            Some(Err(e)) => tracing::warn!(mount = %self.name, error = %e,
                "flush failed as the mount stopped: its last settlements may not have reached the server"),
            None => tracing::warn!(mount = %self.name,
                "flush timed out as the mount stopped: its last settlements may not have reached the server"),
        }
    }

    /// The mount's lease settings now, locked: keep the guard short.
    pub(crate) fn lease_settings(&self) -> std::sync::MutexGuard<'_, LeaseSettings> {
        self.lease_settings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `subject` for a handler's delivery. A delivered subject is its own buffer, and its first
    /// clone allocates a shared one; a delivery on the mount's literal subject gets the
    /// mount's copy instead, which costs nothing to clone (no allocation, no reference count).
    pub(crate) fn subject(&self, subject: &async_nats::Subject) -> async_nats::Subject {
        match &self.literal_subject {
            LiteralSubject::EveryDelivery(literal) => literal.clone(),
            LiteralSubject::Copies(literal) if literal == subject => literal.clone(),
            LiteralSubject::Copies(_) | LiteralSubject::Unknown => subject.clone(),
        }
    }
}

/// `name` kept for the life of the process, once per distinct name: mount, stream and
/// consumer names and mounts' literal subjects, which every delivery carries, then cost no
/// reference counting. A name is
/// allocated the first time it is seen and never freed, so the memory this holds is bounded by
/// the distinct names a process uses, not by how many apps it starts.
pub(crate) fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(kept) = names.get(name) {
        return kept;
    }
    let kept: &'static str = Box::leak(name.into());
    names.insert(kept);
    kept
}
