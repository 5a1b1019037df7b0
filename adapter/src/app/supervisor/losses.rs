//! The supervisor's log of each mount's Core losses (rule 21).

use std::time::Duration;

use super::{Supervisor, Watch};
use crate::runtime::Runtime;
/// How often, at most, a mount's Core losses are logged.
const LOSSES_LOG_EVERY: Duration = Duration::from_secs(5);

impl<R: Runtime> Supervisor<R> {
    /// Logs each mount's Core losses since the last log (rule 21), with what was lost since
    /// and in all: the first at once, then at most one warning per mount every
    /// [`LOSSES_LOG_EVERY`] (`finally`: now, whenever the last was).
    pub(super) fn log_losses(&self, watch: &mut Watch, finally: bool) {
        let at = R::now();
        for (record, (logged, logged_at)) in self.records.iter().zip(&mut watch.losses_logged) {
            let now = record.losses.read(record.name);
            let due = finally
                || logged_at.is_none_or(|t| at.saturating_duration_since(t) >= LOSSES_LOG_EVERY);
            if now.total() == logged.total() || !due {
                continue;
            }
            let dropped = now.slow_consumer - logged.slow_consumer;
            let copies = now.unpublished_copies - logged.unpublished_copies;
            let dead_letters = now.unpublished_dead_letters - logged.unpublished_dead_letters;
            if dropped > 0 {
                tracing::warn!(mount = %record.name, dropped, total = now.slow_consumer,
                    "Core messages dropped: every handler slot was busy and the mount's subscription buffer was full (Core NATS cannot redeliver them)");
            }
            if copies + dead_letters > 0 {
                tracing::warn!(mount = %record.name, copies, dead_letters,
                    total_copies = now.unpublished_copies, total_dead_letters = now.unpublished_dead_letters,
                    "Core copies and dead letters lost: not published (a failed publish, or a copy over max_payload without a dead-letter subject)");
            }
            *logged = now;
            *logged_at = Some(at);
        }
    }
}
