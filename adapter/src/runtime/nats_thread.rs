//! The thread an app's NATS connection runs on, with its mount loops beside it.

use std::future::Future;
use std::sync::{Arc, Mutex};

use super::core_thread::{CoreThread, OWN_RUNTIME, runtime_thread};
use super::entered::Entered;

/// A thread of the app's own running a Tokio current-thread runtime: async-nats' connection
/// task (opened inside [`enter`](Self::enter)) and the JetStream mount loops (given to
/// [`spawn`](Self::spawn) with [`LoopThread::Connection`]) run on it, so that a JetStream
/// message is read, handled and acknowledged on one thread. The Core mount loops
/// ([`LoopThread::Core`]) run on a second thread of the app's own (its Core thread, started
/// with the first of them), beside the first.
///
/// A runtime crate's [`Reactor`](super::Reactor) is built on it: `ruststream-tokio` and
/// `ruststream-smol` both are. Why a thread of its own: when the connection's task and a
/// mount's loop run on a multi-thread runtime's workers, both move from core to core, and a
/// message's bytes cross between cores' caches at random before its handler decodes them;
/// measured in `BENCHMARKS.md` (issue 13), the same loop decoded the same payloads about 25 %
/// slower that way. Why the Core loops have a second one: a Core mount's work is its own
/// (reading, decoding and handling each message; on a retry, a copy published and read back),
/// and on one thread the connection and the loop took turns, one core busy and the other
/// idle; on two fixed threads the connection reads the next messages while the loop handles
/// the last ones (Core throughput up by 5-10 %, `BENCHMARKS.md`). A JetStream mount's work
/// waits on the server, and each of its acks would wake the connection's thread from the
/// other: with its loop on a thread of its own, JetStream throughput fell by about 9 %.
///
/// Clones share both threads. They run until [`stop`](Self::stop) is called, then drop their
/// runtimes (the Core thread's first), which cancels what still runs on them. When every
/// clone is dropped instead (an app whose handles were all dropped without a shutdown), the
/// NATS thread first lets what was given to [`spawn`](Self::spawn) end on its own, however
/// long that takes (the mount loops, which then stop consuming, settle what they received and
/// flush), so that no settlement is cut off with the connection's task; then, for at most
/// 5 s, the other tasks on its runtime (the connection's task ends once the app's clients are
/// gone). A [`ThreadStopper`] does not count as a clone.
#[derive(Debug, Clone)]
pub struct NatsThread {
    handle: tokio::runtime::Handle,
    alive: tokio::sync::watch::Receiver<bool>,
    stop: Arc<StopSender>,
    /// Woken by a [`ThreadStopper`]: it ends the wait of a thread whose every clone is gone.
    halt: Arc<tokio::sync::Notify>,
    /// Held by every task given to [`spawn`](Self::spawn) until it ends: the thread's
    /// receiver sees the channel close once they all have and every clone is gone.
    spawned: tokio::sync::mpsc::Sender<std::convert::Infallible>,
    /// The Core thread, once the first Core loop is spawned (its start's error, if it could
    /// not start); the NATS thread stops it before it ends itself.
    core: Arc<std::sync::OnceLock<Result<CoreThread, String>>>,
    /// The Core thread's name.
    core_name: Arc<str>,
}

/// Which of an app's threads a mount loop runs on (see [`NatsThread`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopThread {
    /// The NATS thread, beside the connection's task: a JetStream mount's loop.
    Connection,
    /// The app's Core thread: a Core mount's loop.
    Core,
}

impl NatsThread {
    /// Starts the thread, named `name`; its Core thread, named `core_name`, starts with the
    /// first Core loop given to [`spawn`](Self::spawn). (Linux shows at most 15 bytes of a
    /// thread's name.)
    ///
    /// # Errors
    /// The reason, when the thread or its runtime cannot be built.
    pub fn start(name: &str, core_name: &str) -> Result<Self, String> {
        let (alive_tx, alive) = tokio::sync::watch::channel(true);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (spawned, mut spawned_rx) = tokio::sync::mpsc::channel(1);
        let halt = Arc::new(tokio::sync::Notify::new());
        let thread_halt = halt.clone();
        let core = Arc::new(std::sync::OnceLock::<Result<CoreThread, String>>::new());
        let thread_core = core.clone();
        let (handle, _thread) = runtime_thread(name, "NATS", move |runtime| {
            // Until asked to stop, or every clone is gone (the sender dropped).
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                runtime.block_on(async {
                    if stop_rx.await.is_err() {
                        // Every clone is gone: the app's handles were dropped
                        // without a shutdown, and what they closed has woken the
                        // mount loops, which stop consuming, say so, and end once
                        // what they received is settled and flushed. The runtime
                        // (and the connection's task on it) stays until they have
                        // ended: dropped a fixed 100 ms later, it cut off the
                        // settlements of handlers still running, and once a
                        // loop's warning.
                        tracing::debug!(
                            "every handle to the app's NATS thread is gone: it ends once its mount loops have"
                        );
                        // A stopper (the application's runtime shutting down,
                        // on tokio) still ends it at once.
                        tokio::select! {
                            biased;
                            () = thread_halt.notified() => {}
                            () = last_tasks(&mut spawned_rx) => {}
                        }
                        tracing::debug!(
                            "the app's NATS thread ends: its mount loops have ended"
                        );
                    }
                })
            }));
            // The Core loops go first, while the connection they settle through
            // is still there (a stopped loop settles nothing more either way).
            // Taken, or closed, in one step: a Core loop spawned from here on
            // cannot start a Core thread that nothing would stop before every
            // handle is gone; it goes beside the connection, which ends with this
            // thread, as any loop does then.
            if let Ok(core) = thread_core.get_or_init(|| {
                Err("the app's NATS thread had ended: no Core thread starts any more".into())
            }) {
                core.stop_and_join();
            }
            // Said before the runtime goes (cancelling what runs on it), so that
            // nothing sees the runtime gone while the thread still counts as
            // alive.
            alive_tx.send_replace(false);
            drop(runtime);
        })?;
        Ok(Self {
            handle,
            alive,
            stop: Arc::new(Mutex::new(Some(stop_tx))),
            halt,
            spawned,
            core,
            core_name: core_name.into(),
        })
    }

    /// Whether the calling thread is an app's NATS thread or Core thread (then its runtime is
    /// running: the caller is on it). A runtime crate whose own timers live on another thread
    /// may use the thread's Tokio timer there instead.
    pub fn is_current() -> bool {
        OWN_RUNTIME.with_borrow(Option::is_some)
    }

    /// The runtime of the NATS thread or Core thread the caller is on, if it is on one: for a
    /// runtime crate that polls the mount loops with another runtime entered, and wants their
    /// own timers on the thread's (created with it entered: a Tokio timer belongs to the
    /// runtime current where it is made).
    pub fn current_runtime() -> Option<tokio::runtime::Handle> {
        OWN_RUNTIME.with_borrow(Clone::clone)
    }

    /// Runs `future` (on the caller's task) with the thread's runtime entered, so that a
    /// connection async-nats opens in it, and its task, belong to the thread.
    pub fn enter<F>(&self, future: F) -> Entered<F>
    where
        F: Future,
    {
        Entered::new(self.handle.clone(), future)
    }

    /// Spawns `future` on the thread `on` names: a JetStream mount's loop beside the
    /// connection, a Core mount's on the Core thread (started by the first). When every clone
    /// of the thread is dropped, the NATS thread waits for `future` to end before it drops its
    /// runtime (see [`NatsThread`]); after [`stop`](Self::stop) it does not.
    ///
    /// A Core loop spawned once the NATS thread has ended, or when the Core thread cannot be
    /// started (the system refuses a thread; logged once, at error level), is spawned beside
    /// the connection instead, where it runs as every loop did before there was a Core
    /// thread (or, the thread having ended, not at all, as any loop then).
    pub fn spawn<F>(&self, on: LoopThread, future: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let spawned = self.spawned.clone();
        // A combinator, not an `async` block awaiting `future`: such a block holds `future`
        // twice over (captured, and again while awaited), a mount loop's 5 to 7 KiB each.
        let future = futures_util::FutureExt::map(future, move |output| {
            drop(spawned);
            output
        });
        match on {
            LoopThread::Core if *self.alive.borrow() => match self.core_thread() {
                Some(core) => core.spawn(future),
                None => self.handle.spawn(future),
            },
            LoopThread::Core | LoopThread::Connection => self.handle.spawn(future),
        }
    }

    /// The Core thread's runtime, started at the first call.
    fn core_thread(&self) -> Option<&tokio::runtime::Handle> {
        let core = self.core.get_or_init(|| {
            CoreThread::start(&self.core_name).inspect_err(|e| {
                tracing::error!(
                    error = %e,
                    "cannot start the app's Core thread: its Core mount loops run beside the connection, on the app's NATS thread"
                );
            })
        });
        core.as_ref().ok().map(|core| &core.handle)
    }

    /// Resolves, with why, once the thread has ended.
    pub fn failed(&self) -> impl Future<Output = String> + Send + use<> {
        let mut alive = self.alive.clone();
        async move {
            let _ = alive.wait_for(|alive| !*alive).await;
            "the app's NATS thread, which runs its connection and mount loops, has ended".to_owned()
        }
    }

    /// Stops the thread: what still runs on it is cancelled.
    pub fn stop(&self) {
        stop(&self.stop);
    }

    /// A handle that stops the thread as [`stop`](Self::stop) does, without counting as a
    /// clone: held somewhere that outlives the app (a runtime crate's watch on the
    /// application's runtime), it does not keep the thread from ending once every clone is
    /// gone.
    pub fn stopper(&self) -> ThreadStopper {
        ThreadStopper {
            stop: Arc::downgrade(&self.stop),
            halt: self.halt.clone(),
        }
    }
}

/// Stops a [`NatsThread`] without keeping it alive (see [`NatsThread::stopper`]): also once
/// every clone is gone, while the thread waits for its mount loops, so that the thread lives
/// no longer than the runtime the stopper was kept for.
#[derive(Debug, Clone)]
pub struct ThreadStopper {
    stop: std::sync::Weak<StopSender>,
    halt: Arc<tokio::sync::Notify>,
}

impl ThreadStopper {
    /// Stops the thread, if it still runs: what still runs on it is cancelled.
    pub fn stop(&self) {
        if let Some(sender) = self.stop.upgrade() {
            stop(&sender);
        }
        self.halt.notify_one();
    }
}

/// Where a [`NatsThread`]'s stop request is sent from, once.
type StopSender = Mutex<Option<tokio::sync::oneshot::Sender<()>>>;

/// Sends the stop request, if it was not sent.
fn stop(sender: &StopSender) {
    if let Ok(mut stop) = sender.lock()
        && let Some(stop) = stop.take()
    {
        let _ = stop.send(());
    }
}

/// What a NATS thread whose every clone is gone waits for before it drops its runtime: the
/// tasks given to [`NatsThread::spawn`] (the mount loops, on both threads), then, for at most
/// [`LAST_TASKS_LIMIT`], every other task on its runtime: what the app spawned there (its
/// lease and delay loops, on tokio) and the connection's task, which end once the mounts
/// have, so that their last work (a lost copy's count and warning) is not cut off either.
async fn last_tasks(spawned: &mut tokio::sync::mpsc::Receiver<std::convert::Infallible>) {
    let _ = spawned.recv().await;
    let handle = tokio::runtime::Handle::current();
    let until = tokio::time::Instant::now() + LAST_TASKS_LIMIT;
    let mut left = handle.metrics().num_alive_tasks();
    while left > 0 && tokio::time::Instant::now() < until {
        tokio::time::sleep(LAST_TASKS_CHECK).await;
        left = handle.metrics().num_alive_tasks();
    }
    if left > 0 {
        tracing::warn!(
            tasks = left,
            "the app's NATS thread ends with tasks still running on it, which are cancelled: what they had not yet sent is not sent, and a client of the app's still held elsewhere stops working"
        );
    }
}

/// How long a NATS thread whose every clone is gone, once its mount loops have ended, waits
/// for the other tasks on its runtime (the app's lease and delay loops, the connection's
/// task) to end before it drops the runtime, and how often it looks.
const LAST_TASKS_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);
const LAST_TASKS_CHECK: std::time::Duration = std::time::Duration::from_millis(10);

#[cfg(test)]
mod tests {
    use super::*;

    /// How many of this process's live threads are named `name` (Linux's `/proc`).
    fn threads_named(name: &str) -> usize {
        std::fs::read_dir("/proc/self/task")
            .map(|tasks| {
                tasks
                    .filter_map(Result::ok)
                    .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
                    .filter(|comm| comm.trim_end() == name)
                    .count()
            })
            .unwrap_or(0)
    }

    #[test]
    fn no_core_thread_starts_once_the_nats_thread_has_stopped_its_core_loops() -> Result<(), String>
    {
        let nats = NatsThread::start("rs-test-nats", "rs-test-core1")?;
        nats.stop();
        let mut alive = nats.alive.clone();
        while *alive.borrow_and_update() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // What a Core loop spawned in the moment between the NATS thread's last look at its
        // Core thread and its end would reach: no Core thread may start any more, since
        // nothing would stop it before every handle is gone.
        assert!(
            nats.core_thread().is_none(),
            "a Core thread started after its NATS thread had stopped its Core loops"
        );
        assert_eq!(threads_named("rs-test-core1"), 0);
        Ok(())
    }

    #[test]
    fn the_nats_thread_stops_and_joins_its_core_thread() -> Result<(), String> {
        let nats = NatsThread::start("rs-test-nats", "rs-test-core2")?;
        let task = nats.spawn(LoopThread::Core, std::future::pending::<()>());
        assert_eq!(threads_named("rs-test-core2"), 1);
        nats.stop();
        let mut alive = nats.alive.clone();
        while *alive.borrow_and_update() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(
            threads_named("rs-test-core2"),
            0,
            "the Core thread outlived its NATS thread"
        );
        drop(task);
        Ok(())
    }
}
