//! The lowest floor: what the adapter needs from an async runtime ([`Runtime`], [`Reactor`]),
//! in the style of quinn's `Runtime` trait (a few static functions, implemented once per
//! runtime crate: `ruststream-tokio`, `ruststream-smol`, `ruststream-sim`), and the threads an
//! app runs its connection and mount loops on ([`NatsThread`], its Core thread), which a
//! runtime crate builds its [`Reactor`] on. Imports nothing of the crate.

mod core_thread;
mod entered;
mod nats_thread;

pub use entered::Entered;
pub use nats_thread::{LoopThread, NatsThread, ThreadStopper};

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

/// An async runtime the adapter runs on: spawning, timers, the clock and signals.
///
/// Implemented by a zero-sized type in each runtime crate (`ruststream_tokio::Runtime`,
/// `ruststream_smol::Runtime`), which names it in its `App` and `Running` aliases.
/// Applications do not use it directly. Every function is static: a runtime is a type, not a
/// value, so that the generic code compiles to direct calls.
///
/// Everything async-nats needs (its connection, its timers) is the [`Reactor`]'s business:
/// every future the adapter polls runs inside [`Reactor::enter`].
pub trait Runtime: Send + Sync + 'static {
    /// A spawned task. Dropping it detaches the task (it runs on); [`join`](Self::join) waits
    /// for it.
    type Task: Send + 'static;

    /// The Tokio reactor async-nats runs on, for this runtime.
    type Reactor: Reactor;

    /// Spawns `future` as a task of its own. A panic in it must not take the process down:
    /// [`join`](Self::join) reports it.
    fn spawn<F>(future: F) -> Self::Task
    where
        F: Future<Output = ()> + Send + 'static;

    /// Spawns one of the app's mount loops on `reactor`'s thread `on` names
    /// ([`LoopThread::Connection`] for a JetStream mount,
    /// beside the NATS connection; [`LoopThread::Core`] for a Core
    /// mount, on the app's Core thread). A delivery that settles at once runs on its mount
    /// loop; one that waits moves to [`spawn`](Self::spawn). Implemented as
    /// [`spawn`](Self::spawn) where the reactor is the application's own runtime.
    fn spawn_next_to<F>(reactor: &Self::Reactor, on: LoopThread, future: F) -> Self::Task
    where
        F: Future<Output = ()> + Send + 'static;

    /// Waits for a spawned task to end; one that panicked is logged at error level.
    fn join(task: Self::Task) -> impl Future<Output = ()> + Send;

    /// The clock. The adapter reads it only when a plan needs it (a Core copy armed for
    /// later), for deadlines, and at shutdown.
    fn now() -> Instant;

    /// Resolves at `at` (at once when `at` has passed).
    fn sleep_until(at: Instant) -> impl Future<Output = ()> + Send;

    /// Runs `future` for at most `limit`: its output, or `None` when time ran out (the future
    /// is then dropped).
    fn timeout<F>(limit: Duration, future: F) -> impl Future<Output = Option<F::Output>> + Send
    where
        F: Future + Send;

    /// Resolves at the first SIGINT or SIGTERM after it is first polled, with the signal's
    /// name (`"SIGINT"`, `"SIGTERM"`; Ctrl-C only, off Unix).
    ///
    /// # Errors
    /// The I/O error of installing a signal handler.
    fn termination_signal() -> impl Future<Output = std::io::Result<&'static str>> + Send;
}

/// The Tokio runtime async-nats runs its connection and timers on, as a runtime provides it.
///
/// On tokio it is the application's own runtime: nothing to start, watch or stop. On another
/// runtime, the app owns one (see `ruststream-smol`): [`start`](Self::start) creates it with
/// the app, [`stop`](Self::stop) ends it with the app's shutdown, and
/// [`failed`](Self::failed) tells the app if it ends before that.
pub trait Reactor: Clone + Debug + Send + Sync + 'static {
    /// Provides the reactor for one app.
    ///
    /// # Errors
    /// Why it could not be started; the app then does not start
    /// (`StartError::Runtime`).
    fn start() -> Result<Self, String>;

    /// Runs `future` where async-nats can work (inside this reactor's Tokio context).
    fn enter<F>(&self, future: F) -> impl Future<Output = F::Output> + Send
    where
        F: Future + Send;

    /// Resolves, with why, if the reactor stops under the app; never, if it cannot.
    fn failed(&self) -> impl Future<Output = String> + Send;

    /// Stops the reactor at the end of the app's shutdown (or, in a test, to see what follows
    /// its loss).
    fn stop(&self);
}
