//! The deliveries of a mount that go on beside its loop, polled together on one task.
//!
//! A JetStream handler that awaits goes on beside its mount's loop, on the NATS thread, while
//! its polls stay light ([`Placement`](crate::state::placement::Placement)). One task for
//! each made the NATS thread take them one at a time when they woke together: a handler
//! whose timer or socket belongs to the application's runtime is woken from there, its task
//! queued on the NATS thread behind the connection's, and Tokio's current-thread scheduler
//! runs the connection's task (woken by the handler's ack) before the next woken handler, so
//! each ack went out in a `writev` of its own (js-io: 79,941 for 80,000 messages, against
//! raw async-nats' 4,087, `BENCHMARKS.md`). Here the mount's waiting deliveries share one
//! task: the handlers woken together are polled together, their acks queued together, and
//! the connection's task writes them in one go. Each is still its own future, polled only
//! when its own waker fired (a [`FuturesUnordered`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use futures_util::Stream;
use futures_util::stream::FuturesUnordered;

use crate::state::mount_context::BesideLoop;

/// A delivery that waits, as the loop gives it (the rest of a delivery, `flow::Waiting`).
type Waiting = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The deliveries of one mount loop that go on beside it, and the task that polls them.
///
/// The task ends once it has nothing left to poll; the next delivery starts another.
pub(crate) struct BesideTasks {
    shared: Arc<Shared>,
    spawn: BesideLoop,
}

struct Shared {
    state: Mutex<State>,
}

impl Shared {
    /// The state, locked (a panic while it was held leaves nothing half-done in it).
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
struct State {
    /// Given since the task last took them.
    incoming: Vec<Waiting>,
    /// Whether a task polls them (it takes `incoming` at its next poll).
    running: bool,
    /// The running task's waker, once it waited.
    waker: Option<Waker>,
}

impl BesideTasks {
    /// Deliveries run by tasks `spawn` starts beside a mount's loop.
    pub(crate) fn new(spawn: BesideLoop) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
            }),
            spawn,
        }
    }

    /// Runs `rest` on the task beside the loop, starting it when none runs.
    pub(crate) fn push(&self, rest: Waiting) {
        let mut state = self.shared.state();
        state.incoming.push(rest);
        if state.running {
            let waker = state.waker.take();
            drop(state);
            if let Some(waker) = waker {
                waker.wake();
            }
            return;
        }
        state.running = true;
        drop(state);
        (self.spawn)(Box::pin(Polled {
            shared: self.shared.clone(),
            all: FuturesUnordered::new(),
        }));
    }
}

/// The task beside the loop: polls every delivery given to it until none is left.
struct Polled {
    shared: Arc<Shared>,
    all: FuturesUnordered<Waiting>,
}

impl Future for Polled {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        loop {
            {
                let mut state = this.shared.state();
                this.all.extend(state.incoming.drain(..));
                if this.all.is_empty() {
                    // Nothing left: the next push starts another task.
                    state.running = false;
                    state.waker = None;
                    return Poll::Ready(());
                }
                // Before the deliveries are polled: a push while they are is seen.
                match &mut state.waker {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    slot => *slot = Some(cx.waker().clone()),
                }
            }
            loop {
                match Pin::new(&mut this.all).poll_next(cx) {
                    Poll::Ready(Some(())) => {}
                    // Every one has ended: take what came meanwhile, or end.
                    Poll::Ready(None) => break,
                    Poll::Pending => return Poll::Pending,
                }
            }
        }
    }
}

impl Drop for Polled {
    fn drop(&mut self) {
        // Dropped unfinished (its runtime went, cancelling what it polled): a later push
        // starts a task again, which takes what was pushed meanwhile.
        let mut state = self.shared.state();
        state.running = false;
        state.waker = None;
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Context;

    use futures_util::stream::FuturesUnordered;

    use super::{BesideTasks, Polled, Waiting};

    /// Deliveries run by tasks on the current Tokio runtime, counting the tasks started.
    fn counted() -> (BesideTasks, Arc<AtomicUsize>) {
        let spawned = Arc::new(AtomicUsize::new(0));
        let count = spawned.clone();
        let tasks = BesideTasks::new(Arc::new(move |task| {
            count.fetch_add(1, Ordering::SeqCst);
            drop(tokio::spawn(task));
        }));
        (tasks, spawned)
    }

    /// A delivery that ends once `go` fires, counting itself in `done`.
    fn waiting(go: tokio::sync::oneshot::Receiver<()>, done: &Arc<AtomicUsize>) -> Waiting {
        let done = done.clone();
        Box::pin(async move {
            let _ = go.await;
            done.fetch_add(1, Ordering::SeqCst);
        })
    }

    #[tokio::test(flavor = "current_thread")]
    async fn deliveries_share_one_task_which_ends_when_none_is_left() {
        let (tasks, spawned) = counted();
        let done = Arc::new(AtomicUsize::new(0));
        let mut go = Vec::new();
        for _ in 0..3 {
            let (tx, rx) = tokio::sync::oneshot::channel();
            tasks.push(waiting(rx, &done));
            go.push(tx);
        }
        tokio::task::yield_now().await;
        assert_eq!(spawned.load(Ordering::SeqCst), 1, "one task for all three");
        assert_eq!(done.load(Ordering::SeqCst), 0);
        // One given while the task waits on the others joins it.
        let (tx, rx) = tokio::sync::oneshot::channel();
        tasks.push(waiting(rx, &done));
        go.push(tx);
        tokio::task::yield_now().await;
        assert_eq!(spawned.load(Ordering::SeqCst), 1);
        // Woken together, each ends; then the task ends.
        for tx in go.drain(..) {
            let _ = tx.send(());
        }
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(done.load(Ordering::SeqCst), 4);
        assert!(!tasks.shared.state().running);
        // The next delivery starts a task again, which runs it.
        let (tx, rx) = tokio::sync::oneshot::channel();
        tasks.push(waiting(rx, &done));
        let _ = tx.send(());
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(spawned.load(Ordering::SeqCst), 2);
        assert_eq!(done.load(Ordering::SeqCst), 5);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_task_dropped_unfinished_lets_the_next_push_start_another() {
        let (tasks, spawned) = counted();
        let done = Arc::new(AtomicUsize::new(0));
        let (_kept, rx) = tokio::sync::oneshot::channel::<()>();
        // Polled by hand and dropped, as a runtime going away drops it.
        let mut polled = Polled {
            shared: tasks.shared.clone(),
            all: FuturesUnordered::new(),
        };
        tasks.shared.state().running = true;
        tasks.push(waiting(rx, &done));
        let waker = futures_util::task::noop_waker();
        assert!(
            Pin::new(&mut polled)
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        drop(polled);
        let (tx, rx) = tokio::sync::oneshot::channel();
        tasks.push(waiting(rx, &done));
        let _ = tx.send(());
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(spawned.load(Ordering::SeqCst), 1);
        assert_eq!(done.load(Ordering::SeqCst), 1);
    }
}
