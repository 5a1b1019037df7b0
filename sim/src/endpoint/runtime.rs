//! The virtual-time runtime: ruststream's adapter on a current-thread tokio runtime whose clock
//! is paused, so that every sleep, timeout and deadline of the app, of async-nats and of the
//! model is virtual.
//!
//! The lowest floor of the endpoint's folder: it imports nothing from it. [`now`] reads the
//! virtual clock for the endpoint and the test API, as [`Runtime`]'s `now` does for the app.

use std::future::Future;
use std::time::{Duration, Instant};

/// The virtual instant: the runtime's clock, which a paused tokio runtime moves only when
/// every task waits for a timer.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The runtime the simulator runs ruststream on: tokio's tasks and timers on the virtual clock
/// [`Sim::run`](crate::Sim::run) starts paused. [`now`](ruststream_adapter::Runtime::now) is
/// that clock (where `ruststream-tokio`'s is the system's), so the adapter's deadlines, its
/// leases and its retry delays all count virtual time.
///
/// It fixes the adapter's generic [`App`](crate::App) and [`Running`](crate::Running); tests
/// do not name it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Runtime;

impl ruststream_adapter::Runtime for Runtime {
    type Task = tokio::task::JoinHandle<()>;
    type Reactor = Reactor;

    /// Spawns `future` on the simulation's tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime, as `tokio::spawn` does.
    fn spawn<F>(future: F) -> Self::Task
    where
        F: Future<Output = ()> + Send + 'static,
    {
        tokio::spawn(future)
    }

    /// As [`spawn`](ruststream_adapter::Runtime::spawn), whichever thread `_on` names: one
    /// runtime runs every task.
    fn spawn_next_to<F>(
        _reactor: &Reactor,
        _on: ruststream_adapter::LoopThread,
        future: F,
    ) -> Self::Task
    where
        F: Future<Output = ()> + Send + 'static,
    {
        tokio::spawn(future)
    }

    /// Waits for `task`; a panic in it is logged.
    async fn join(task: Self::Task) {
        if let Err(e) = task.await {
            tracing::error!(error = %e, "a ruststream task ended abnormally");
        }
    }

    /// The virtual clock (tokio's, paused in a simulation).
    fn now() -> Instant {
        self::now()
    }

    /// Sleeps on the virtual clock.
    async fn sleep_until(at: Instant) {
        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
    }

    /// `future`, or `None` once `limit` of virtual time has passed.
    async fn timeout<F>(limit: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send,
    {
        tokio::time::timeout(limit, future).await.ok()
    }

    /// Never: a simulated app stops when the test shuts it down.
    async fn termination_signal() -> std::io::Result<&'static str> {
        std::future::pending().await
    }
}

/// The reactor of [`Runtime`]: the simulation's own runtime, which never fails apart from it.
#[derive(Debug, Clone, Copy)]
#[allow(unreachable_pub)] // public only as `Runtime::Reactor`; tests never name it
pub struct Reactor;

impl ruststream_adapter::Reactor for Reactor {
    /// Always succeeds: there is nothing to start.
    fn start() -> Result<Self, String> {
        Ok(Self)
    }

    /// `future` as it is: it already runs on the simulation's runtime.
    fn enter<F>(&self, future: F) -> impl Future<Output = F::Output> + Send
    where
        F: Future + Send,
    {
        future
    }

    /// Never.
    fn failed(&self) -> impl Future<Output = String> + Send {
        std::future::pending()
    }

    /// Nothing to stop.
    fn stop(&self) {}
}
