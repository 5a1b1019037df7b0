//! The runtime-specific part: spawning, timers, the clock and signals, on tokio.

use std::future::Future;
use std::time::{Duration, Instant};

use ruststream_adapter::{Entered, LoopThread, NatsThread, ThreadStopper};

/// Makes a Tokio timer future (`make`) on the runtime of the app's NATS or Core thread when
/// called on one, so that a mount loop's timer is armed and fired on its own thread; elsewhere on the
/// current runtime. (A Tokio timer belongs to the runtime current where it is made, and the
/// mount loops are polled with the application's runtime entered.)
fn on_own_timer<T>(make: impl FnOnce() -> T) -> T {
    match NatsThread::current_runtime() {
        Some(own) => {
            let _own = own.enter();
            make()
        }
        None => make(),
    }
}

/// The runtime this crate runs ruststream on: tokio, the application's own, with the app's
/// connection and mount loops on threads of their own (a [`NatsThread`] and its Core thread).
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

    /// Spawns `future` on the app's thread `on` names (its [`NatsThread`], or its Core
    /// thread), polled with the application's runtime entered.
    fn spawn_next_to<F>(reactor: &Reactor, on: LoopThread, future: F) -> Self::Task
    where
        F: Future<Output = ()> + Send + 'static,
    {
        reactor
            .thread
            .spawn(on, Entered::new(reactor.application.clone(), future))
    }

    async fn join(task: Self::Task) {
        if let Err(e) = task.await {
            tracing::error!(error = %e, "a ruststream task ended abnormally");
        }
    }

    fn now() -> Instant {
        Instant::now()
    }

    /// On one of the app's threads (the mount loops' own timers, such as a pull request's
    /// deadline), on that thread's runtime's timer, so that it is armed and fired on the
    /// thread; elsewhere on the current runtime's.
    async fn sleep_until(at: Instant) {
        on_own_timer(|| tokio::time::sleep_until(tokio::time::Instant::from_std(at))).await;
    }

    /// On the same timers as [`sleep_until`](ruststream_adapter::Runtime::sleep_until).
    async fn timeout<F>(limit: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send,
    {
        on_own_timer(|| tokio::time::timeout(limit, future))
            .await
            .ok()
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

/// The thread async-nats' connection runs on, and the app's JetStream mount loops beside it: a
/// [`NatsThread`] of the app's own, started by [`App::start`](crate::App::start), so that a
/// JetStream message is read and handled on one thread; its Core mount loops run on the
/// app's Core thread (`ruststream-core`) beside it (see [`NatsThread`] for why).
///
/// The application's runtime (the one `App::start` is awaited on) keeps everything else: a
/// mount loop is polled with it entered, so a delivery whose handler has to wait moves to a
/// task on it (where slow handlers run in parallel), and what a handler spawns, and the
/// timers it arms, belong to it too. A handler that finishes at its first poll runs in place
/// on its loop's thread, which all of the app's mounts of that kind share: its code up to its first
/// `.await` that waits (one that is ready at once, such as an uncontended lock, does not
/// count) runs there, one handler at a time, and [`tokio::task::block_in_place`] is not
/// available there (it panics, which the runtime reports as a panicked handler, rule 13):
/// blocking or CPU-heavy work belongs in [`tokio::task::spawn_blocking`].
///
/// The threads end at the end of the app's shutdown, when the application's runtime shuts
/// down, or once every handle to the app is dropped and its mounts have settled what they
/// received and stopped; if it ends before a shutdown, the app reports it
/// ([`AppFailed`](crate::AppFailed)) instead of hanging.
#[derive(Debug, Clone)]
#[allow(unreachable_pub)] // public only as `Runtime::Reactor`; applications never name it
pub struct Reactor {
    thread: NatsThread,
    /// The application's runtime, entered while a mount loop is polled.
    application: tokio::runtime::Handle,
}

impl ruststream_adapter::Reactor for Reactor {
    /// Starts the app's thread.
    ///
    /// # Errors
    /// When called outside a Tokio runtime (`App::start` is awaited on one), or when the
    /// thread or its runtime cannot be built.
    fn start() -> Result<Self, String> {
        let application = tokio::runtime::Handle::try_current().map_err(|_| {
            "App::start must be awaited inside a Tokio runtime (for example under #[tokio::main])"
                .to_owned()
        })?;
        let thread = NatsThread::start("ruststream-nats", "ruststream-core")?;
        // The app lives no longer than the application's runtime: when that runtime shuts
        // down, it drops this task, which stops the thread (and with it the app's connection
        // and loops, as if they had run on that runtime). The task ends with the thread. It
        // holds no clone of the thread, so that the thread still ends once every handle to
        // the app is dropped and its mount loops have stopped (a clone here kept it, and the
        // app's connection, until the application's runtime shut down).
        let watched = StopOnDrop(thread.stopper());
        let failed = thread.failed();
        application.spawn(async move {
            let _watched = watched;
            failed.await;
        });
        Ok(Self {
            thread,
            application,
        })
    }

    /// Runs `future` with the app's thread's runtime entered: the connection async-nats
    /// opens in it runs on that thread.
    fn enter<F>(&self, future: F) -> impl Future<Output = F::Output> + Send
    where
        F: Future + Send,
    {
        self.thread.enter(future)
    }

    /// Resolves, with why, once the app's thread has ended.
    fn failed(&self) -> impl Future<Output = String> + Send {
        self.thread.failed()
    }

    /// Stops the app's thread (the end of a shutdown, or a test of what follows its loss).
    fn stop(&self) {
        self.thread.stop();
    }
}

/// Stops the app's thread when dropped.
struct StopOnDrop(ThreadStopper);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}
