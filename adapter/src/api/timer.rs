//! The runtime's clock, sleep and spawn, as the handlers this crate builds keep them
//! ([`Timer`]): a batch handler waits `max_wait` and bounds each batch by the time limit, a
//! keyed handler bounds each run from its key's turn, and a batch's run that awaits goes on on
//! a task of its own. Handlers are built before the app knows anything but its runtime's
//! type, so they keep these functions of it.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use crate::runtime::Runtime;

/// A boxed sleep, as the app's runtime makes it; or a boxed task, to spawn.
type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The clock and sleep of the app's runtime, and its spawn.
#[derive(Clone, Copy)]
pub(crate) struct Timer {
    pub(crate) sleep_until: fn(Instant) -> Sleep,
    pub(crate) now: fn() -> Instant,
    /// Runs a future on a task of its own, detached: [`Runtime::spawn`] (a batch's run, on
    /// the application's runtime).
    pub(crate) spawn: fn(Sleep),
}

impl Timer {
    /// The timer of runtime `R`.
    pub(crate) fn of<R: Runtime>() -> Self {
        Self {
            sleep_until: |at| Box::pin(R::sleep_until(at)),
            now: R::now,
            spawn: |task| drop(R::spawn(task)),
        }
    }

    /// The runtime's clock.
    pub(crate) fn now(self) -> Instant {
        (self.now)()
    }

    /// Resolves at `at`, or never when there is no such instant (`None`).
    pub(crate) async fn sleep_until(self, at: Option<Instant>) {
        match at {
            Some(at) => (self.sleep_until)(at).await,
            None => std::future::pending().await,
        }
    }

    /// `future`'s output, or `None` when `limit` from now passes first (the future is then
    /// dropped). A limit past the clock's last instant never passes.
    pub(crate) async fn within<F: Future>(self, limit: Duration, future: F) -> Option<F::Output> {
        let at = self.now().checked_add(limit);
        tokio::select! {
            out = future => Some(out),
            () = self.sleep_until(at) => None,
        }
    }
}
