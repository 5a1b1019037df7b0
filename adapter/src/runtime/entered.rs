//! A future polled with a Tokio runtime entered.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A future polled with a Tokio runtime entered (see
/// [`NatsThread::enter`](crate::NatsThread::enter)): what it spawns with `tokio::spawn`, and the
/// timers and connections it makes, belong to that runtime.
pub struct Entered<F> {
    handle: tokio::runtime::Handle,
    future: Pin<Box<F>>,
}

impl<F> Entered<F> {
    /// `future`, to be polled with `handle`'s runtime entered.
    pub fn new(handle: tokio::runtime::Handle, future: F) -> Self {
        Self {
            handle,
            future: Box::pin(future),
        }
    }
}

impl<F: Future> Future for Entered<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _context = self.handle.enter();
        self.future.as_mut().poll(cx)
    }
}

impl<F> std::fmt::Debug for Entered<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entered").finish_non_exhaustive()
    }
}
