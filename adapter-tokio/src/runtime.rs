//! The runtime-specific part: spawning, timers, the clock and signals, on tokio.

use std::future::Future;
use std::time::{Duration, Instant};

/// The runtime this crate runs ruststream on: tokio, the application's own.
///
/// It fixes `ruststream-adapter`'s generic [`App`](crate::App) and [`Running`](crate::Running);
/// applications do not name it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Runtime;

impl ruststream_adapter::Runtime for Runtime {
    type Task = tokio::task::JoinHandle<()>;
    type Reactor = Reactor;

    /// Spawns `future` on the current tokio runtime.
    fn spawn<F>(future: F) -> Self::Task
    where
        F: Future<Output = ()> + Send + 'static,
    {
        tokio::spawn(future)
    }

    /// As [`spawn`](ruststream_adapter::Runtime::spawn): the reactor is the application's
    /// runtime, which runs every task.
    fn spawn_next_to<F>(_reactor: &Reactor, future: F) -> Self::Task
    where
        F: Future<Output = ()> + Send + 'static,
    {
        tokio::spawn(future)
    }

    async fn join(task: Self::Task) {
        if let Err(e) = task.await {
            tracing::error!(error = %e, "a ruststream task ended abnormally");
        }
    }

    fn now() -> Instant {
        Instant::now()
    }

    async fn sleep_until(at: Instant) {
        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
    }

    async fn timeout<F>(limit: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send,
    {
        tokio::time::timeout(limit, future).await.ok()
    }

    async fn termination_signal() -> std::io::Result<&'static str> {
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
}

/// The Tokio runtime async-nats runs on. On tokio it is the application's own: nothing to
/// start, watch or stop.
#[derive(Debug, Clone, Copy)]
#[allow(unreachable_pub)] // public only as `Runtime::Reactor`; applications never name it
pub struct Reactor;

impl ruststream_adapter::Reactor for Reactor {
    fn start() -> Result<Self, String> {
        Ok(Self)
    }

    /// Runs `future` as it is: the application's runtime is already there.
    fn enter<F>(&self, future: F) -> impl Future<Output = F::Output> + Send
    where
        F: Future + Send,
    {
        future
    }

    /// Never: the application owns its runtime, and the app runs on it.
    fn failed(&self) -> impl Future<Output = String> + Send {
        std::future::pending()
    }

    fn stop(&self) {}
}
