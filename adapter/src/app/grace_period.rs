//! A shutdown's grace period.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use futures_util::future::FusedFuture;

use crate::runtime::Runtime;

/// A shutdown's grace period: it ends at `deadline`, or earlier when `cut` ends (a second
/// signal).
pub(super) struct GracePeriod<'c, F> {
    pub(super) deadline: Instant,
    pub(super) cut: Pin<&'c mut F>,
}

impl<F: FusedFuture<Output = ()>> GracePeriod<'_, F> {
    /// `wait`'s output if it ends within the grace period; `None` once the period is over,
    /// when it is cut short (from then on the deadline is now).
    pub(super) async fn within<R: Runtime, T>(
        &mut self,
        wait: impl Future<Output = T> + Send,
    ) -> Option<T> {
        let left = self.deadline.saturating_duration_since(R::now());
        let cut = &mut self.cut;
        tokio::select! {
            biased;
            result = R::timeout(left, wait) => result,
            () = cut, if !cut.is_terminated() => {
                self.deadline = R::now();
                None
            }
        }
    }
}
