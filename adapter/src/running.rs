//! A started app: its handle, and waiting for a signal or a shutdown request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::Client;
use tokio::sync::{oneshot, watch};

use crate::mount_context::{InFlight, Losses};
use crate::runtime::{Reactor, Runtime};
use crate::shutdown::ShutdownReport;

/// A handle that asks a running app to shut down gracefully. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ShutdownHandle(Arc<watch::Sender<bool>>);

impl ShutdownHandle {
    /// Asks the app to stop: it stops consuming, and [`Running::until_signal`] returns after
    /// the graceful shutdown.
    pub fn shutdown(&self) {
        self.0.send_replace(true);
    }
}

/// A started mount's loop and its handler slots, for shutdown.
pub(crate) struct MountTask<T> {
    pub(crate) name: &'static str,
    /// Its deliveries still running.
    pub(crate) in_flight: Arc<InFlight>,
    /// Its Core losses (rule 21).
    pub(crate) losses: Arc<Losses>,
    /// Its loop.
    pub(crate) task: T,
}

/// A started app, on the runtime `R` (named through the runtime crate's alias).
pub struct Running<R: Runtime> {
    pub(crate) reactor: R::Reactor,
    pub(crate) client: Client,
    pub(crate) owns_client: bool,
    pub(crate) shutdown: Arc<watch::Sender<bool>>,
    pub(crate) finish: watch::Sender<Option<Instant>>,
    pub(crate) mounts: Vec<MountTask<R::Task>>,
    pub(crate) delay_task: R::Task,
    /// The lease loop; it ends when `finish` holds a deadline.
    pub(crate) lease_task: R::Task,
    pub(crate) lost: oneshot::Receiver<Vec<usize>>,
    pub(crate) grace: Duration,
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
    /// The NATS client the app runs on.
    pub fn client(&self) -> &Client {
        &self.client
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
    /// Also returns if the runtime the NATS connection runs on ends under the app (on smol,
    /// its Tokio reactor thread): that is logged as an error and reported in
    /// [`ShutdownReport::failure`], and the app stops without waiting on the dead connection.
    pub async fn until_signal(self) -> ShutdownReport {
        let reactor = self.reactor.clone();
        reactor.enter(self.until_signal_here()).await
    }

    async fn until_signal_here(self) -> ShutdownReport {
        let mut asked = self.shutdown.subscribe();
        let failure = tokio::select! {
            signal = R::termination_signal() => {
                match signal {
                    Ok(name) => tracing::info!(signal = name, "shutting down"),
                    Err(e) => tracing::error!(error = %e, "cannot listen for signals; shutting down"),
                }
                None
            }
            _ = asked.wait_for(|stop| *stop) => {
                tracing::info!("shutdown requested");
                None
            }
            why = self.reactor.failed() => {
                tracing::error!(error = %why, "the app cannot go on; stopping");
                Some(why)
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
        self.shutdown_here(failure, again).await
    }

    /// Stops the runtime the NATS connection runs on, as if it had died: on smol, the app's
    /// Tokio reactor thread; nothing on tokio. For tests of what follows that loss.
    #[doc(hidden)]
    pub fn stop_reactor(&self) {
        self.reactor.stop();
    }
}
