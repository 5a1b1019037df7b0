//! A started app: its handle, and waiting for a signal or a shutdown request.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::Client;
use tokio::sync::{oneshot, watch};

use crate::launch::MountRecord;
use crate::runtime::{Reactor, Runtime};
use crate::shutdown::ShutdownReport;
use crate::supervisor::Recovery;

/// A handle that asks a running app to shut down gracefully. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ShutdownHandle(Arc<watch::Sender<bool>>);

impl ShutdownHandle {
    /// Asks the app to stop: it stops consuming, and [`Running::until_signal`] returns after
    /// the graceful shutdown. If the app's [`Running`] was dropped, no graceful shutdown runs
    /// (no grace period, no report): the mounts stop consuming, settle what they received and
    /// is still running, and end, as when every handle is dropped (see [`Running`]).
    pub fn shutdown(&self) {
        self.0.send_replace(true);
    }
}

/// A started app, on the runtime `R` (named through the runtime crate's alias).
///
/// Keep it until the app is to stop, and stop it with [`shutdown`](Self::shutdown) or
/// [`until_signal`](Self::until_signal). Dropping it, and every [`ShutdownHandle`], without
/// a shutdown leaves an app nothing can shut down: its mounts stop consuming (each logs so, at
/// warn level), and what they received is still handled and settled: what a JetStream
/// mount's outstanding pull requests bring within
/// [`PULL_EXPIRES`](ruststream_core::PULL_EXPIRES), 1 s, and every delivery still running,
/// whose lease is renewed and whose handler time limit holds as before. Each mount then
/// flushes the client and ends, and the app's NATS thread with the last of them. There is no
/// grace period and no report: a delayed Core copy not yet due when the last mount ends is
/// lost, counted (`copy_at_shutdown`) and logged at warn level with its mount.
pub struct Running<R: Runtime> {
    pub(crate) reactor: R::Reactor,
    /// The app's current client: replaced when the supervisor connects a new one (rule 20).
    pub(crate) clients: Arc<watch::Sender<Client>>,
    pub(crate) owns_client: bool,
    pub(crate) shutdown: Arc<watch::Sender<bool>>,
    pub(crate) finish: watch::Sender<Option<Instant>>,
    pub(crate) mounts: Arc<[MountRecord]>,
    /// Each mount's current loop, by mount index; the supervisor replaces an ended one.
    pub(crate) tasks: Arc<Mutex<Vec<Option<R::Task>>>>,
    pub(crate) supervisor: R::Task,
    /// Why the app cannot go on, once the supervisor says so.
    pub(crate) failed: Arc<watch::Sender<Option<String>>>,
    pub(crate) recoveries: Arc<Mutex<Vec<Recovery>>>,
    pub(crate) delay_task: R::Task,
    /// The lease loop; it ends when `finish` holds a deadline.
    pub(crate) lease_task: R::Task,
    pub(crate) lost: oneshot::Receiver<Vec<usize>>,
    pub(crate) grace: Duration,
    /// Where the app's health is told.
    pub(crate) health: crate::health::HealthBoard,
}

/// A running app that stopped on its own because it could not go on: the runtime its NATS
/// connection ran on ended, or its subscriptions could not be made again (rule 20). It shut
/// down as gracefully as it could; the process should exit non-zero.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the app stopped on its own: {}", .report.failure.as_deref().unwrap_or("no reason given"))]
pub struct AppFailed {
    /// The shutdown's report; its [`failure`](ShutdownReport::failure) says why.
    pub report: ShutdownReport,
}

impl ShutdownReport {
    /// `Ok(self)` after a shutdown that was asked for, `Err` after one the app made on its
    /// own ([`failure`](Self::failure) is set).
    ///
    /// # Errors
    /// [`AppFailed`] holding the report when [`failure`](Self::failure) is set.
    pub fn into_result(self) -> Result<Self, AppFailed> {
        match self.failure {
            Some(_) => Err(AppFailed { report: self }),
            None => Ok(self),
        }
    }
}

impl<R: Runtime> std::fmt::Debug for Running<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field(
                "mounts",
                &self.mounts.iter().map(|m| m.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> Running<R> {
    /// The NATS client the app runs on now: a clone of it (cheap). After the supervisor
    /// replaced a dead client (rule 20), this is the new one.
    pub fn client(&self) -> Client {
        self.clients.borrow().clone()
    }

    /// A watch on the app's [`Health`](crate::Health) (as [`App::health`](crate::App::health)
    /// gives before the start).
    pub fn health(&self) -> crate::HealthWatch {
        self.health.watch()
    }

    /// The Core losses of every mount so far (rule 21), for the mounts that lost any: what
    /// the shutdown report will hold, read while the app runs.
    pub fn core_losses(&self) -> Vec<crate::CoreLosses> {
        self.mounts
            .iter()
            .map(|m| crate::CoreLosses::read(m.name, &m.losses))
            .filter(|l| l.total() > 0)
            .collect()
    }

    /// The recoveries the app has made so far (rule 20), the last
    /// [`RECOVERIES_KEPT`](crate::RECOVERIES_KEPT): each lost connection or ended
    /// subscription it noticed and got over.
    pub fn recoveries(&self) -> Vec<Recovery> {
        self.recoveries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A handle to ask for shutdown from elsewhere.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.shutdown.clone())
    }

    /// Waits for SIGINT, SIGTERM, or a [`ShutdownHandle::shutdown`], then shuts down
    /// gracefully. A second SIGINT or SIGTERM during the shutdown ends its grace period at
    /// once: handlers still running are abandoned and delayed Core copies not yet due are
    /// lost, both reported as when the grace period runs out.
    ///
    /// Also ends when the app cannot go on, logged as an error and reported in
    /// [`ShutdownReport::failure`]: when the runtime the NATS connection runs on ends under
    /// the app (the app's NATS thread, [`NatsThread`](crate::NatsThread); the app then stops
    /// without waiting on the dead connection), or when the supervisor gives up subscribing the mounts again (rule
    /// 20: see [`RECOVERY_LIMIT`](crate::RECOVERY_LIMIT),
    /// [`MAX_RECOVERIES`](crate::MAX_RECOVERIES) and
    /// [`SAME_SUSPECT_LIMIT`](crate::SAME_SUSPECT_LIMIT)).
    ///
    /// # Errors
    /// [`AppFailed`], holding the shutdown's report, when the app stopped on its own. The
    /// process should then exit non-zero, so that whatever runs it (systemd, Kubernetes)
    /// starts it again and shows the failure: never a process that is up and consumes
    /// nothing.
    pub async fn until_signal(self) -> Result<ShutdownReport, AppFailed> {
        let reactor = self.reactor.clone();
        reactor.enter(self.until_signal_here()).await.into_result()
    }

    async fn until_signal_here(self) -> ShutdownReport {
        let mut asked = self.shutdown.subscribe();
        let mut failed = self.failed.subscribe();
        // Failures first: once the NATS thread is gone, listening for signals fails at once
        // too (its runtime is gone), and must not be taken for a request to shut down.
        let (failure, reactor_dead) = tokio::select! {
            biased;
            why = self.reactor.failed() => {
                tracing::error!(error = %why, "the app cannot go on; stopping");
                (Some(why), true)
            }
            // The supervisor has logged why.
            why = failed.wait_for(Option::is_some) => (why.ok().and_then(|why| (*why).clone()), false),
            _ = asked.wait_for(|stop| *stop) => {
                tracing::info!("shutdown requested");
                (None, false)
            }
            signal = R::termination_signal() => {
                match signal {
                    Ok(name) => tracing::info!(signal = name, "shutting down"),
                    Err(e) => tracing::error!(error = %e, "cannot listen for signals; shutting down"),
                }
                (None, false)
            }
        };
        let again = async {
            match R::termination_signal().await {
                Ok(name) => {
                    tracing::warn!(signal = name, "signalled again: the grace period ends now");
                }
                // Nothing to listen to: the grace period runs its course.
                Err(_) => std::future::pending().await,
            }
        };
        self.shutdown_here(failure, reactor_dead, again).await
    }

    /// Stops the runtime the NATS connection runs on, as if it had died: the app's NATS
    /// thread on tokio and smol; nothing on the simulator. For tests of what follows that
    /// loss.
    #[doc(hidden)]
    pub fn stop_reactor(&self) {
        self.reactor.stop();
    }
}
