//! The runtime-specific part: spawning, timers, the clock and signals, on smol, and the Tokio
//! reactor async-nats needs: a small current-thread Tokio runtime on a thread each app owns.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use async_compat::Compat;
use futures_util::FutureExt;
use ruststream_adapter::{Entered, LoopThread, NatsThread};

/// The runtime this crate runs ruststream on: smol's global executor and async-io, and a
/// thread per app (its NATS thread) that runs the Tokio reactor async-nats needs and, beside
/// it as tasks of that runtime, the app's mount loops.
///
/// It fixes `ruststream-adapter`'s generic [`App`](crate::App) and [`Running`](crate::Running);
/// applications do not name it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Runtime;

/// A spawned task. Dropping it detaches it (as a tokio `JoinHandle` does); `join` waits.
#[allow(unreachable_pub)] // public only as `Runtime::Task`; applications never name it
pub struct Task(Spawned);

/// Where a [`Task`] runs: `true` from either when it ended normally.
enum Spawned {
    /// On smol's global executor ([`spawn`](ruststream_adapter::Runtime::spawn)).
    Smol(Option<smol::Task<bool>>),
    /// On one of the app's threads, its NATS thread or its Core thread
    /// ([`spawn_next_to`](ruststream_adapter::Runtime::spawn_next_to)), whose handle detaches on
    /// drop.
    Thread(tokio::task::JoinHandle<bool>),
}

impl Drop for Task {
    fn drop(&mut self) {
        if let Spawned::Smol(task) = &mut self.0
            && let Some(task) = task.take()
        {
            task.detach();
        }
    }
}

impl ruststream_adapter::Runtime for Runtime {
    type Task = Task;
    type Reactor = Reactor;

    /// Spawns `future` on smol's global executor. It is polled inside the Tokio context it is
    /// spawned from (the app's reactor), or async-compat's when there is none, so that
    /// async-nats (and a handler using Tokio types) always finds a reactor and a timer. A
    /// panic is caught and reported by `join`.
    fn spawn<F>(future: F) -> Task
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let guarded = caught(future);
        let task = match tokio::runtime::Handle::try_current() {
            Ok(handle) => smol::spawn(Entered::new(handle, guarded).boxed()),
            Err(_) => smol::spawn(Compat::new(guarded).boxed()),
        };
        Task(Spawned::Smol(Some(task)))
    }

    /// On the app's thread `on` names: a JetStream loop on the NATS thread, beside the
    /// connection, so that a message is read and, when it settles at once (handler, plan,
    /// ack), handled on one thread; a Core loop on the app's Core thread. What the loop
    /// spawns goes to smol's global executor ([`spawn`](ruststream_adapter::Runtime::spawn)).
    fn spawn_next_to<F>(reactor: &Reactor, on: LoopThread, future: F) -> Task
    where
        F: Future<Output = ()> + Send + 'static,
    {
        Task(Spawned::Thread(reactor.thread.spawn(on, caught(future))))
    }

    /// Awaited in place, inside the task handle, whose drop detaches: a join given up (a
    /// shutdown's grace period that ended) leaves the task where it is, as on tokio, instead
    /// of cancelling it and dropping the delivery it holds.
    async fn join(mut task: Task) {
        let normal = match &mut task.0 {
            Spawned::Smol(Some(inner)) => inner.await,
            Spawned::Smol(None) => true,
            // Cancelled: its thread was stopped under it.
            Spawned::Thread(inner) => inner.await.unwrap_or(false),
        };
        if !normal {
            tracing::error!("a ruststream task ended abnormally");
        }
    }

    fn now() -> Instant {
        Instant::now()
    }

    /// On one of the app's threads (where the mount loops run), on that thread's Tokio timer, so
    /// that a mount loop's timers stay on its own thread (async-io's are registered with
    /// async-io's thread and woken from it); everywhere else on async-io's timer.
    async fn sleep_until(at: Instant) {
        if NatsThread::is_current() {
            tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
        } else {
            smol::Timer::at(at).await;
        }
    }

    /// On the same timers as [`sleep_until`](ruststream_adapter::Runtime::sleep_until).
    async fn timeout<F>(limit: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send,
    {
        if NatsThread::is_current() {
            return tokio::time::timeout(limit, future).await.ok();
        }
        smol::future::or(async { Some(future.await) }, async {
            smol::Timer::after(limit).await;
            None
        })
        .await
    }

    /// With async-signal, off the Tokio reactor.
    async fn termination_signal() -> std::io::Result<&'static str> {
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
}

/// `future` with its panic caught: `true` when it ended normally, which is what `join` reads.
fn caught<F>(future: F) -> impl Future<Output = bool> + Send + 'static
where
    F: Future<Output = ()> + Send + 'static,
{
    AssertUnwindSafe(future).catch_unwind().map(|r| r.is_ok())
}

/// The Tokio runtime an app's async-nats connection runs on: a [`NatsThread`] of the app's
/// own (`ruststream-nats`), a current-thread runtime started with the app and stopped at the
/// end of its shutdown. The app's JetStream mount loops run on it too, beside the connection,
/// so that a message is read and handled on one thread, and its Core mount loops on its Core
/// thread (`ruststream-core`) beside it (see [`NatsThread`] for why). If the thread ends
/// before the shutdown does, the app reports it instead of hanging.
#[derive(Debug, Clone)]
#[allow(unreachable_pub)] // public only as `Runtime::Reactor`; applications never name it
pub struct Reactor {
    thread: NatsThread,
}

impl ruststream_adapter::Reactor for Reactor {
    /// Starts the app's thread.
    fn start() -> Result<Self, String> {
        Ok(Self {
            thread: NatsThread::start("ruststream-nats", "ruststream-core")?,
        })
    }

    /// Runs `future` inside the thread's Tokio context: the connection async-nats opens in it
    /// runs on the thread.
    fn enter<F>(&self, future: F) -> impl Future<Output = F::Output> + Send
    where
        F: Future + Send,
    {
        self.thread.enter(future)
    }

    /// Resolves, with why, once the thread has ended.
    fn failed(&self) -> impl Future<Output = String> + Send {
        self.thread.failed()
    }

    /// Stops the thread (the end of a shutdown, or a test of what follows its loss).
    fn stop(&self) {
        self.thread.stop();
    }
}
