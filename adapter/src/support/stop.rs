//! The stop signal a mount loop reads, a leaf everything may use (as mini-redis' `shutdown.rs`):
//! the orchestration of a stop is the app's (`app::running`).

use std::time::Duration;

use tokio::sync::watch;

/// How long the final flush (and drain) of a stopping mount loop or of a shutdown may take.
pub(crate) const FINAL_FLUSH: Duration = Duration::from_secs(5);

/// Whether a mount loop's `shutdown` channel says the app is stopping: a shutdown was asked
/// for, or every handle to the app is gone (the channel closed), as opposed to a loop that
/// ends while the app runs (its subscription or inbox ended, rule 20).
pub(crate) fn asked_to_stop(shutdown: &watch::Receiver<bool>) -> bool {
    *shutdown.borrow() || shutdown.has_changed().is_err()
}
