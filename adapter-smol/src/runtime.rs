//! The runtime-specific part: spawning, timers, the clock and signals, on smol, and the Tokio
//! reactor async-nats needs: a small current-thread Tokio runtime on a thread each app owns.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use async_compat::Compat;
use futures_util::FutureExt;

/// The runtime this crate runs ruststream on: smol's global executor and async-io, and a
/// thread per app that runs the Tokio reactor async-nats needs and, beside it on a smol
/// executor of its own, the app's mount loops.
///
/// It fixes `ruststream-adapter`'s generic [`App`](crate::App) and [`Running`](crate::Running);
/// applications do not name it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Runtime;

/// A spawned task. Dropping it detaches it (as a tokio `JoinHandle` does); `join` waits.
#[allow(unreachable_pub)] // public only as `Runtime::Task`; applications never name it
pub struct Task(Option<smol::Task<bool>>);

impl Drop for Task {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
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
            Ok(handle) => smol::spawn(
                Entered {
                    handle,
                    future: Box::pin(guarded),
                }
                .boxed(),
            ),
            Err(_) => smol::spawn(Compat::new(guarded).boxed()),
        };
        Task(Some(task))
    }

    /// On the smol executor the reactor thread runs beside the Tokio runtime: the connection
    /// and the mount loop share one thread, and a delivery that settles at once (handler,
    /// plan, ack) never crosses to another.
    fn spawn_next_to<F>(reactor: &Reactor, future: F) -> Task
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let guarded = caught(future);
        Task(Some(reactor.executor.spawn(guarded)))
    }

    /// Awaited in place, inside the task handle, whose drop detaches: a join given up (a
    /// shutdown's grace period that ended) leaves the task where it is, as on tokio, instead
    /// of cancelling it and dropping the delivery it holds.
    async fn join(mut task: Task) {
        if let Some(inner) = task.0.as_mut()
            && !inner.await
        {
            tracing::error!("a ruststream task ended abnormally");
        }
    }

    fn now() -> Instant {
        Instant::now()
    }

    /// On async-io's timer.
    async fn sleep_until(at: Instant) {
        smol::Timer::at(at).await;
    }

    async fn timeout<F>(limit: Duration, future: F) -> Option<F::Output>
    where
        F: Future + Send,
    {
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

/// A future polled inside a Tokio runtime's context.
struct Entered<F> {
    handle: tokio::runtime::Handle,
    future: std::pin::Pin<Box<F>>,
}

impl<F: Future> Future for Entered<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let _context = self.handle.enter();
        self.future.as_mut().poll(cx)
    }
}

/// The Tokio runtime an app's async-nats connection runs on: a current-thread runtime on a
/// thread of its own (`ruststream-tokio-reactor`), started with the app and stopped at the
/// end of its shutdown. The thread also runs a smol executor for the app's mount loops, so
/// that the connection and the loops share it. If the thread ends before that, its `failed` future says so, and the
/// app reports it instead of hanging.
#[derive(Debug, Clone)]
#[allow(unreachable_pub)] // public only as `Runtime::Reactor`; applications never name it
pub struct Reactor {
    handle: tokio::runtime::Handle,
    /// The smol executor the reactor thread runs beside the Tokio runtime, for the mount loops.
    executor: std::sync::Arc<smol::Executor<'static>>,
    alive: tokio::sync::watch::Receiver<bool>,
    stop: std::sync::Arc<std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>>,
}

impl ruststream_adapter::Reactor for Reactor {
    /// Starts the runtime's thread.
    fn start() -> Result<Self, String> {
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (alive_tx, alive) = tokio::sync::watch::channel(true);
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let executor = std::sync::Arc::new(smol::Executor::new());
        let loops = executor.clone();
        std::thread::Builder::new()
            .name("ruststream-tokio-reactor".to_owned())
            .spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => {
                        let _ = handle_tx.send(Ok(runtime.handle().clone()));
                        // Drive the runtime, and the mount loops' executor inside it, until
                        // asked to stop (or the app is gone).
                        let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
                            runtime.block_on(loops.run(async {
                                let _ = smol::unblock(move || stop_rx.recv()).await;
                            }))
                        }));
                    }
                    Err(e) => {
                        let _ = handle_tx.send(Err(e.to_string()));
                    }
                }
                alive_tx.send_replace(false);
            })
            .map_err(|e| format!("cannot start the Tokio reactor thread: {e}"))?;
        let handle = handle_rx
            .recv()
            .map_err(|_| "the Tokio reactor thread ended at start".to_owned())?
            .map_err(|e| format!("cannot build the Tokio reactor: {e}"))?;
        Ok(Self {
            handle,
            executor,
            alive,
            stop: std::sync::Arc::new(std::sync::Mutex::new(Some(stop_tx))),
        })
    }

    /// Runs `future` inside this runtime's context.
    fn enter<F>(&self, future: F) -> impl Future<Output = F::Output> + Send
    where
        F: Future + Send,
    {
        Entered {
            handle: self.handle.clone(),
            future: Box::pin(future),
        }
    }

    /// Resolves, with why, once the reactor thread has ended.
    fn failed(&self) -> impl Future<Output = String> + Send {
        let mut alive = self.alive.clone();
        async move {
            let _ = alive.wait_for(|alive| !*alive).await;
            "the Tokio reactor thread that runs the NATS connection has ended".to_owned()
        }
    }

    /// Stops the runtime's thread (the end of a shutdown, or a test of what follows its loss).
    fn stop(&self) {
        if let Ok(mut stop) = self.stop.lock() {
            stop.take();
        }
    }
}
