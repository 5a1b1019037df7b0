//! The runtime-specific part: spawning, timers, the clock and signals, on tokio.

use std::future::Future;
use std::time::{Duration, Instant};

/// A spawned task that can be awaited.
pub(crate) type Task = tokio::task::JoinHandle<()>;

/// Spawns `future` on the current tokio runtime.
pub(crate) fn spawn<F>(future: F) -> Task
where
    F: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(future)
}

/// Waits for a spawned task to end; a task that panicked is logged.
pub(crate) async fn join(task: Task) {
    if let Err(e) = task.await {
        tracing::error!(error = %e, "a ruststream task ended abnormally");
    }
}

/// The clock: the one read an adapter makes per plan.
pub(crate) fn now() -> Instant {
    Instant::now()
}

/// Sleeps until `at`.
pub(crate) async fn sleep_until(at: Instant) {
    tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
}

/// The Tokio runtime async-nats runs on. On tokio it is the application's own: nothing to
/// start, watch or stop.
#[derive(Debug, Clone)]
pub(crate) struct Reactor;

impl Reactor {
    /// The application's runtime.
    pub(crate) fn start() -> Result<Self, String> {
        Ok(Self)
    }

    /// Runs `future` where async-nats can work: on tokio, as it is.
    pub(crate) async fn enter<F: Future>(&self, future: F) -> F::Output {
        future.await
    }

    /// Resolves, with why, if the runtime stops under the app: never, on tokio (the
    /// application owns its runtime, and the app runs on it).
    pub(crate) async fn failed(&self) -> String {
        std::future::pending().await
    }

    /// Stops the runtime at the end of a shutdown: nothing to do on tokio.
    pub(crate) fn stop(&self) {}
}

/// Runs `future` for at most `limit`; `None` when time ran out.
pub(crate) async fn timeout<F: Future>(limit: Duration, future: F) -> Option<F::Output> {
    tokio::time::timeout(limit, future).await.ok()
}

/// Resolves at the first SIGINT or SIGTERM (Ctrl-C only, off Unix).
///
/// # Errors
/// The I/O error of installing a signal handler.
pub(crate) async fn termination_signal() -> std::io::Result<&'static str> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::select! {
            _ = term.recv() => Ok("SIGTERM"),
            _ = int.recv() => Ok("SIGINT"),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await?;
        Ok("Ctrl-C")
    }
}
