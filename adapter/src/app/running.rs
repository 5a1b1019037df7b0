//! A started app ([`Running`]): its handle, waiting for a signal or a shutdown request, and the
//! graceful shutdown (rule 14): stop consuming, let in-flight handlers finish within the grace
//! period, publish delayed copies that fall due within it, flush, drain; report what was left.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_nats::Client;
use futures_util::FutureExt;
use tokio::sync::{oneshot, watch};

use super::grace_period::GracePeriod;
use crate::api::health::{HealthBoard, HealthWatch, MountState};
use crate::api::reports::{AppFailed, CoreLosses, Recovery, ShutdownReport};
use crate::runtime::{Reactor, Runtime};
use crate::state::record::MountRecord;
use crate::support::stop::FINAL_FLUSH;

/// How long a graceful shutdown lets in-flight handlers finish, by default: 10 seconds.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(10);

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
/// [`PULL_EXPIRES`](ruststream_settlement::PULL_EXPIRES), 1 s, and every delivery still running,
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
    pub(crate) health: HealthBoard,
    /// The ops endpoint, serving until this is dropped (feature `ops`).
    #[cfg(feature = "ops")]
    pub(crate) ops: Option<super::ops::OpsServer>,
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

    /// The address the ops endpoint listens on ([`App::ops`](crate::App::ops), feature
    /// `ops`): the one given, with the port the system chose for port 0; `None` without an
    /// endpoint.
    #[cfg(feature = "ops")]
    pub fn ops_addr(&self) -> Option<std::net::SocketAddr> {
        self.ops.as_ref().map(super::ops::OpsServer::addr)
    }

    /// A watch on the app's [`Health`](crate::Health) (as [`App::health`](crate::App::health)
    /// gives before the start).
    pub fn health(&self) -> HealthWatch {
        self.health.watch()
    }

    /// The Core losses of every mount so far (rule 21), for the mounts that lost any: what
    /// the shutdown report will hold, read while the app runs.
    pub fn core_losses(&self) -> Vec<CoreLosses> {
        self.mounts
            .iter()
            .map(|m| m.losses.read(m.name))
            .filter(|l| l.total() > 0)
            .collect()
    }

    /// The recoveries the app has made so far (rule 20), the last
    /// [`RECOVERIES_KEPT`](crate::RECOVERIES_KEPT): each lost connection or ended
    /// subscription it noticed and got over.
    pub fn recoveries(&self) -> Vec<Recovery> {
        self.recoveries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A handle to ask for shutdown from elsewhere.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.shutdown.clone())
    }

    /// Waits for SIGINT, SIGTERM, or a [`ShutdownHandle::shutdown`], then shuts down gracefully. A
    /// second SIGINT or SIGTERM during the shutdown ends its grace period at once: handlers still
    /// running are abandoned and delayed Core copies not yet due are lost, both reported as when
    /// the grace period runs out.
    ///
    /// Also ends when the app cannot go on, logged as an error and reported in
    /// [`ShutdownReport::failure`]: when the runtime the NATS connection runs on ends under the app
    /// (the app's NATS thread, [`NatsThread`](crate::NatsThread); the app then stops without
    /// waiting on the dead connection), or when the supervisor gives up subscribing the mounts
    /// again (rule 20: see [`RECOVERY_LIMIT`](crate::RECOVERY_LIMIT),
    /// [`MAX_RECOVERIES`](crate::MAX_RECOVERIES) and
    /// [`SAME_SUSPECT_LIMIT`](crate::SAME_SUSPECT_LIMIT)).
    ///
    /// # Errors
    /// [`AppFailed`], holding the shutdown's report, when the app stopped on its own. The process
    /// should then exit non-zero, so that whatever runs it (systemd, Kubernetes) starts it again
    /// and shows the failure: never a process that is up and consumes nothing.
    pub async fn until_signal(self) -> Result<ShutdownReport, AppFailed> {
        let reactor = self.reactor.clone();
        reactor.enter(self.until_signal_here()).await.into_result()
    }

    /// Why the app stops once its supervisor is gone: the NATS thread's end, which `failed`
    /// says within 5 s, or the supervisor's.
    async fn ended_with_the_thread(
        failed: impl std::future::Future<Output = String> + Send,
    ) -> (Option<String>, bool) {
        match R::timeout(std::time::Duration::from_secs(5), failed).await {
            Some(why) => {
                tracing::error!(error = %why, "the app cannot go on; stopping");
                (Some(why), true)
            }
            None => (
                Some("the app's supervisor ended while the app ran".to_owned()),
                false,
            ),
        }
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
            // Its sender gone with the supervisor (`None` here): the NATS thread is ending,
            // and says so a moment later, below (a CI run under load once took this for a
            // clean stop).
            why = failed.wait_for(Option::is_some) => match why.ok().map(|why| (*why).clone()) {
                Some(why) => (why, false),
                None => (None, true),
            },
            _ = asked.wait_for(|stop| *stop) => {
                tracing::info!("shutdown requested");
                (None, false)
            }
            signal = R::termination_signal() => match signal {
                Ok(name) => {
                    tracing::info!(signal = name, "shutting down");
                    (None, false)
                }
                // Taken up below: the NATS thread may be gone.
                Err(e) => (Some(format!("{SIGNALS_FAILED}{e}")), false),
            }
        };
        // With the NATS thread gone, signals cannot be listened to either, and that can come
        // first under load (a CI run took it for a clean stop): the thread's failure, said a
        // moment later, is then the reason.
        let (failure, reactor_dead) = match failure {
            Some(e) if e.starts_with(SIGNALS_FAILED) => {
                match R::timeout(std::time::Duration::from_secs(1), self.reactor.failed()).await {
                    Some(why) => {
                        tracing::error!(error = %why, "the app cannot go on; stopping");
                        (Some(why), true)
                    }
                    None => {
                        tracing::error!(error = %e, "shutting down");
                        (None, false)
                    }
                }
            }
            failure => (failure, reactor_dead),
        };
        let supervisor_gone = reactor_dead && failure.is_none();
        let (failure, reactor_dead) = if supervisor_gone {
            Self::ended_with_the_thread(self.reactor.failed()).await
        } else {
            (failure, reactor_dead)
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

/// The start of the text that says listening for signals failed, in
/// [`Running::until_signal`]'s own bookkeeping.
const SIGNALS_FAILED: &str = "cannot listen for signals: ";

impl<R: Runtime> Running<R> {
    /// Shuts down gracefully (rule 14): stops consuming (no new pulls; Core subscriptions
    /// end; Core messages already received and not yet given to a handler are lost, as Core
    /// NATS cannot redeliver them, and their count is logged as a warning per mount), lets
    /// in-flight handlers finish and settle within the grace period, publishes
    /// delayed copies that fall due within it, flushes, and drains the connection if the app
    /// opened it. Logs what was left behind, and returns it.
    pub async fn shutdown(self) -> ShutdownReport {
        let reactor = self.reactor.clone();
        reactor
            .enter(self.shutdown_here(None, false, std::future::pending()))
            .await
    }

    /// The shutdown: `cut`, when it ends first, ends the grace period there. `reactor_dead`:
    /// the runtime the connection ran on has ended (`failure` says so).
    pub(crate) async fn shutdown_here(
        self,
        failure: Option<String>,
        reactor_dead: bool,
        cut: impl Future<Output = ()> + Send,
    ) -> ShutdownReport {
        // With the reactor gone, nothing that runs next to it can end: no grace period.
        let grace = if reactor_dead {
            Duration::ZERO
        } else {
            self.grace
        };
        let mut grace_period = GracePeriod {
            deadline: ruststream_settlement::deadline(R::now(), grace),
            cut: std::pin::pin!(cut.fuse()),
        };
        self.shutdown.send_replace(true);
        // Every JetStream handler going on beside its mount's loop, of this run of the loop or
        // of an earlier one (a mount launched again after its client died, rule 20), moves to
        // the application's runtime, where the grace period lets it finish and a handler it
        // gives up on runs to its end (not cut off at an await when the NATS thread stops).
        for mount in self.mounts.iter() {
            mount.placement.leave();
        }
        let health = self.health.clone();
        health.mounts(None, MountState::Stopping);
        // Once shutdown has begun the supervisor starts nothing new; what it was starting is
        // in `tasks` when it ends.
        let _ = grace_period.within::<R, _>(R::join(self.supervisor)).await;
        let failure = failure.or_else(|| self.failed.borrow().clone());
        let mut report = ShutdownReport {
            failure,
            recoveries: std::mem::take(
                &mut *self
                    .recoveries
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            ),
            ..ShutdownReport::default()
        };
        // A mount loop ends once its current delivery does: a Core delivery that waits with
        // every slot taken runs on the loop itself. Past the grace period it is abandoned, as
        // are handlers still holding a slot.
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner));
        for (mount, task) in self.mounts.iter().zip(tasks) {
            let Some(task) = task else { continue };
            let stuck = grace_period.within::<R, _>(R::join(task)).await.is_none();
            if stuck {
                tracing::debug!(mount = %mount.name, "mount loop still busy at the end of the grace period");
            }
        }
        let mounts: Vec<_> = self
            .mounts
            .iter()
            .map(|m| (m.name, m.in_flight.clone(), m.losses.clone()))
            .collect();
        for (name, in_flight, _) in &mounts {
            // Every delivery still running had to wait, and counts in `in_flight` (a Core
            // delivery waiting on its mount's loop too); slots held for pull requests do not.
            let running = match grace_period.within::<R, _>(in_flight.idle()).await {
                Some(()) => 0,
                None => in_flight.count(),
            };
            if running > 0 {
                tracing::warn!(mount = %name, handlers = running, "grace period over with handlers still running");
                report.abandoned.push((name.to_string(), running));
            }
        }
        // Delayed copies that fall due within the grace period are still published, unless it
        // is cut short: then those not yet due are lost at once.
        self.finish.send_replace(Some(grace_period.deadline));
        let mut delay_task = std::pin::pin!(R::join(self.delay_task));
        if grace_period.within::<R, _>(&mut delay_task).await.is_none() {
            self.finish.send_replace(Some(R::now()));
            delay_task.await;
        }
        R::join(self.lease_task).await;
        if let Ok(lost) = self.lost.await {
            for ((name, _, _), n) in mounts.iter().zip(lost) {
                if n > 0 {
                    tracing::warn!(mount = %name, copies = n, "delayed Core copies lost at shutdown");
                    report.lost_copies.push((name.to_string(), n));
                }
            }
        }
        for (name, _, losses) in &mounts {
            let counted = losses.read(name);
            if counted.total() > 0 {
                tracing::warn!(mount = %name, slow_consumer = counted.slow_consumer,
                    unpublished_copies = counted.unpublished_copies,
                    unpublished_dead_letters = counted.unpublished_dead_letters,
                    unhandled_at_shutdown = counted.unhandled_at_shutdown,
                    "Core messages lost over the app's life");
                report.core_losses.push(counted);
            }
        }
        // Nothing can reach the server once its connection's runtime is gone.
        let client = self.clients.borrow().clone();
        // An app that ends because its connection stayed down does not wait for it again.
        let down = report.failure.is_some()
            && client.connection_state() != async_nats::connection::State::Connected;
        if down {
            tracing::warn!(
                "the connection to NATS is down: nothing flushed or drained at shutdown"
            );
        }
        if !reactor_dead && !down {
            match R::timeout(FINAL_FLUSH, client.flush()).await {
                Some(Ok(())) => {}
                Some(Err(e)) => tracing::warn!(error = %e, "flush at shutdown failed"),
                None => tracing::warn!("flush at shutdown timed out"),
            }
            if self.owns_client {
                match R::timeout(FINAL_FLUSH, client.drain()).await {
                    Some(Ok(())) => {}
                    Some(Err(e)) => tracing::warn!(error = %e, "drain at shutdown failed"),
                    None => tracing::warn!("drain at shutdown timed out"),
                }
            }
        }
        self.reactor.stop();
        health.stopped(report.failure.clone());
        // The ops endpoint stops with the app: once this returns, nothing listens there.
        #[cfg(feature = "ops")]
        drop(self.ops);
        tracing::info!("ruststream stopped");
        report
    }
}
