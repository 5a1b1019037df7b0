//! The runtime-specific part: spawning, timers, the clock and signals, on smol, with the Tokio
//! reactor async-nats needs provided by async-compat.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use async_compat::Compat;
use futures_util::FutureExt;

/// A spawned task. Dropping it detaches it (as a tokio `JoinHandle` does); [`join`] waits.
pub(crate) struct Task(Option<smol::Task<bool>>);

impl Drop for Task {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.detach();
        }
    }
}

/// Spawns `future` on smol's global executor, polled inside async-compat's Tokio context so
/// that async-nats (and a handler using Tokio types) always finds a reactor and a timer. A
/// panic is caught and reported by [`join`].
pub(crate) fn spawn<F>(future: F) -> Task
where
    F: Future<Output = ()> + Send + 'static,
{
    let guarded = AssertUnwindSafe(future).catch_unwind().map(|r| r.is_ok());
    Task(Some(smol::spawn(Compat::new(guarded))))
}

/// Waits for a spawned task to end; a task that panicked is logged.
pub(crate) async fn join(mut task: Task) {
    if let Some(task) = task.0.take()
        && !task.await
    {
        tracing::error!("a ruststream task ended abnormally");
    }
}

/// The clock: the one read an adapter makes per plan.
pub(crate) fn now() -> Instant {
    Instant::now()
}

/// Sleeps until `at`, on async-io's timer.
pub(crate) async fn sleep_until(at: Instant) {
    smol::Timer::at(at).await;
}

/// Runs `future` where async-nats can work: inside async-compat's Tokio context.
pub(crate) async fn enter<F: Future>(future: F) -> F::Output {
    Compat::new(future).await
}

/// Runs `future` for at most `limit`; `None` when time ran out.
pub(crate) async fn timeout<F: Future>(limit: Duration, future: F) -> Option<F::Output> {
    smol::future::or(async { Some(future.await) }, async {
        smol::Timer::after(limit).await;
        None
    })
    .await
}

/// Resolves at the first SIGINT or SIGTERM (Ctrl-C only, off Unix).
///
/// # Errors
/// The I/O error of installing a signal handler.
pub(crate) async fn termination_signal() -> std::io::Result<&'static str> {
    #[cfg(unix)]
    {
        use async_signal::{Signal, Signals};
        use futures_util::StreamExt;
        let mut signals = Signals::new([Signal::Term, Signal::Int])?;
        match signals.next().await {
            Some(Ok(Signal::Term)) => Ok("SIGTERM"),
            Some(Ok(_)) => Ok("SIGINT"),
            Some(Err(e)) => Err(e),
            None => Err(std::io::Error::other("the signal stream ended")),
        }
    }
    #[cfg(not(unix))]
    {
        std::future::pending::<()>().await;
        Ok("never")
    }
}
