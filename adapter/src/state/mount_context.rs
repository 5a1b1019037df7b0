//! What a mount's deliveries are handled and executed with ([`MountContext`]), shared by its
//! loop and its deliveries' tasks.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use async_nats::Client;
use ruststream_settlement::{Descriptor, MountPolicy, PendingCopy};
use tokio::sync::mpsc;

use super::careful::Careful;
use super::in_flight::InFlight;
use super::lease_room::{LeaseRoom, LeaseSettings};
use super::losses::Losses;
use super::placement::Placement;
use super::received::Received;
use crate::api::context::ContextShared;
use crate::api::error_policy::ErrorPolicy;
use crate::api::handler::Handler;
use crate::api::reports::Observer;
use crate::runtime::Runtime;
use crate::support::metrics::MountMetrics;
use crate::support::names::intern;
use crate::support::stop::FINAL_FLUSH;

/// Where a mount's dead letters go, decided at start-up (rule 8).
#[derive(Clone)]
pub(crate) enum DeadLetterSink {
    /// A stream stores the subject: a JetStream publish confirmed by the stream's ack.
    JetStream(Box<async_nats::jetstream::Context>),
    /// No stream stores it (Core mounts only): a plain publish, flushed to the server.
    Plain,
}

/// Spawns a task beside a mount's loop (see [`MountContext::beside_loop`]).
pub(crate) type BesideLoop = std::sync::Arc<
    dyn Fn(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>) + Send + Sync,
>;

/// Everything a mount's deliveries are executed with.
pub(crate) struct MountContext {
    pub(crate) index: usize,
    pub(crate) name: &'static str,
    pub(crate) policy: MountPolicy,
    pub(crate) handler: Arc<dyn Handler>,
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
    /// Whether its consumer no longer fits it (changed or made again under it, as the
    /// supervisor's re-read finds): its pull loop sends no request meanwhile, so that it
    /// handles nothing its declaration does not (another filter subject, say).
    pub(crate) unfit: Arc<std::sync::atomic::AtomicBool>,
    /// Whether it warned of a Core `retry` that does nothing (rule 22: once per mount).
    pub(crate) warned_retry: Arc<AtomicBool>,
    /// What its handlers publish with.
    pub(crate) handler_context: Arc<ContextShared>,
    /// What a handler's `Err` stands for.
    pub(crate) on_error: ErrorPolicy,
    /// Whether a keyed delivery's retry runs again in place, its key's turn kept (rule 24's
    /// strict order).
    pub(crate) strict_order: bool,
    /// Its batch `max` (rule 23), 0 without batches: how many of its deliveries that wait
    /// share a task (`Starts` in `handling::flow`).
    pub(crate) batch_max: usize,
    /// Spawns a task beside the mount's loop, on its thread: where a batch mount's members
    /// wait for their batch and are settled (`Starts` in `handling::flow`).
    pub(crate) beside_loop: BesideLoop,
    /// Where its single deliveries that wait go on: beside the loop, or on the application's
    /// runtime (JetStream mounts without batches; see [`Placement`]).
    pub(crate) placement: Arc<Placement>,
    /// Its metrics.
    pub(crate) metrics: Arc<MountMetrics>,
    /// Where the app's health is told.
    pub(crate) health: crate::api::health::HealthBoard,
}

/// A literal subject a mount's deliveries come on, kept once per process (see
/// [`LiteralSubject::of`]).
pub(crate) enum LiteralSubject {
    /// A Core subject: every delivery comes on it, as a subscription to a literal subject
    /// receives that subject only.
    EveryDelivery(async_nats::Subject),
    /// A wildcard's copy subject (rule 10): the copies come on it.
    Copies(async_nats::Subject),
    /// A JetStream consumer's deliveries come on the subjects of its stream: none is known.
    Unknown,
}

impl LiteralSubject {
    /// The literal subject the deliveries of the mount `policy` declares come on (a Core
    /// subject, or a wildcard's copy subject), kept once per process like the names, so that
    /// every delivery on it shares it for free.
    pub(crate) fn of(policy: &MountPolicy) -> Self {
        let kept = |s: &ruststream_settlement::Subject| {
            async_nats::Subject::from_static(intern(s.as_str()))
        };
        match policy.descriptor() {
            Descriptor::CoreSubject(s) => Self::EveryDelivery(kept(s)),
            Descriptor::CoreWildcard { copy_subject, .. } => Self::Copies(kept(copy_subject)),
            Descriptor::JetStream { .. } => Self::Unknown,
        }
    }
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
    /// [`FINAL_FLUSH`], 5 s, so that their settlements and copies reach the server before the loop
    /// ends. When nothing runs the app's graceful shutdown (its `Running` was dropped, before
    /// or after a `ShutdownHandle` asked for it), the app's NATS thread, and its connection,
    /// end only once every mount loop has; when a graceful shutdown runs, its grace period
    /// bounds this wait and the thread's stop cancels what is left of it. A flush that fails
    /// or times out is logged at warn level: what it held may not have arrived.
    pub(crate) async fn settle_at_stop<R: Runtime>(&self) {
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
        match R::timeout(FINAL_FLUSH, client.flush()).await {
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
