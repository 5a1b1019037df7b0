//! Shutdown (rule 14): stop consuming, let in-flight handlers finish within the grace period,
//! publish delayed copies that fall due within it, flush, drain; report what was left.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::FusedFuture;

use crate::mount_context::Losses;
use crate::running::Running;
use crate::runtime::{Reactor, Runtime};
use crate::supervisor::Recovery;

/// How long the final flush and drain of a shutdown may take.
pub(crate) const FINAL_FLUSH: Duration = Duration::from_secs(5);

/// Whether a mount loop's `shutdown` channel says the app is stopping: a shutdown was asked
/// for, or every handle to the app is gone (the channel closed), as opposed to a loop that
/// ends while the app runs (its subscription or inbox ended, rule 20).
pub(crate) fn asked_to_stop(shutdown: &tokio::sync::watch::Receiver<bool>) -> bool {
    *shutdown.borrow() || shutdown.has_changed().is_err()
}

/// How long a graceful shutdown lets in-flight handlers finish, by default: 10 seconds.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(10);

/// What a graceful shutdown left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Handlers still running at the end of the grace period, per mount: their JetStream
    /// deliveries come back after `ack_wait`; their Core deliveries are gone.
    pub abandoned: Vec<(String, usize)>,
    /// Delayed Core copies still waiting at the end of the grace period, per mount: lost, as
    /// SETTLEMENT.md says (rule 14).
    pub lost_copies: Vec<(String, usize)>,
    /// Core messages lost over the app's life, per mount, for the mounts that lost any (rule
    /// 21); delayed copies still waiting at the end are in [`lost_copies`](Self::lost_copies).
    pub core_losses: Vec<CoreLosses>,
    /// The recoveries the app made while it ran (rule 20), the last
    /// [`RECOVERIES_KEPT`](crate::RECOVERIES_KEPT): lost connections and ended
    /// subscriptions it noticed and got over.
    pub recoveries: Vec<Recovery>,
    /// Why the app stopped on its own, if it did: the runtime the NATS connection ran on
    /// ended under it (the app's NATS thread, [`NatsThread`](crate::NatsThread)), or its
    /// mounts could not be subscribed again (rule 20).
    pub failure: Option<String>,
}

/// One Core mount's losses over the app's life (rule 21): Core NATS cannot redeliver, so
/// these messages are gone, and each was logged when it was lost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoreLosses {
    /// The mount's name.
    pub mount: String,
    /// Messages dropped because the mount's subscription buffer was full
    /// ([`Mount::subscription_buffer`](crate::Mount::subscription_buffer)).
    pub slow_consumer: u64,
    /// Copies (rule 4) whose publish failed, at once or when their delay was over.
    pub unpublished_copies: u64,
    /// Dead letters whose publish failed.
    pub unpublished_dead_letters: u64,
    /// Messages received and not yet handed to a handler when shutdown began.
    pub unhandled_at_shutdown: u64,
}

impl CoreLosses {
    /// The counts of the mount `mount` so far.
    pub(crate) fn read(mount: &str, losses: &Losses) -> Self {
        let read = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
        Self {
            mount: mount.to_owned(),
            slow_consumer: read(&losses.slow_consumer),
            unpublished_copies: read(&losses.copies),
            unpublished_dead_letters: read(&losses.dead_letters),
            unhandled_at_shutdown: read(&losses.unhandled_at_shutdown),
        }
    }

    /// The sum of every kind of loss.
    pub fn total(&self) -> u64 {
        self.slow_consumer
            + self.unpublished_copies
            + self.unpublished_dead_letters
            + self.unhandled_at_shutdown
    }
}

/// A mount name in the report line: as it is when it holds only ASCII letters, digits, `-`,
/// `_` and `.`; quoted (`{:?}`) otherwise.
struct Name<'n>(&'n str);

impl std::fmt::Display for Name<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plain = !self.0.is_empty()
            && self
                .0
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        match plain {
            true => f.write_str(self.0),
            false => write!(f, "{:?}", self.0),
        }
    }
}

impl std::fmt::Display for ShutdownReport {
    /// The report on one line, every count named, for logs and scripts to read:
    ///
    /// `abandoned=[MOUNT:N ...] lost_copies=[MOUNT:N ...] core_losses=[MOUNT:slow_consumer=N,unpublished_copies=N,unpublished_dead_letters=N,unhandled_at_shutdown=N ...] recoveries=N failure=none|"WHY"`
    ///
    /// Lists are space-separated inside their brackets and empty (`[]`) when nothing was left
    /// or lost; the failure is quoted as a Rust string literal (`{:?}`). A mount name of
    /// anything but ASCII letters, digits, `-`, `_` and `.` is quoted the same way, so that
    /// the line stays unambiguous.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn counts(f: &mut std::fmt::Formatter<'_>, list: &[(String, usize)]) -> std::fmt::Result {
            let mut sep = "";
            for (mount, n) in list {
                write!(f, "{sep}{}:{n}", Name(mount))?;
                sep = " ";
            }
            Ok(())
        }
        write!(f, "abandoned=[")?;
        counts(f, &self.abandoned)?;
        write!(f, "] lost_copies=[")?;
        counts(f, &self.lost_copies)?;
        write!(f, "] core_losses=[")?;
        let mut sep = "";
        for l in &self.core_losses {
            write!(
                f,
                "{sep}{}:slow_consumer={},unpublished_copies={},unpublished_dead_letters={},unhandled_at_shutdown={}",
                Name(&l.mount),
                l.slow_consumer,
                l.unpublished_copies,
                l.unpublished_dead_letters,
                l.unhandled_at_shutdown
            )?;
            sep = " ";
        }
        write!(f, "] recoveries={} failure=", self.recoveries.len())?;
        match &self.failure {
            Some(why) => write!(f, "{why:?}"),
            None => write!(f, "none"),
        }
    }
}

impl<R: Runtime> Running<R> {
    /// Shuts down gracefully (rule 14): stops consuming (no new pulls; Core subscriptions
    /// end; Core messages already received and not yet given to a handler are lost, as Core
    /// NATS cannot redeliver them, and their count is logged as a warning per mount), lets
    /// in-flight handlers finish and settle within the grace period, publishes
    /// delayed copies that fall due within it, flushes, and drains the connection if the app
    /// opened it. Logs what was left behind, and returns it.
    pub async fn shutdown(self) -> ShutdownReport {
        let reactor = self.reactor.clone();
        reactor
            .enter(self.shutdown_here(None, false, std::future::pending()))
            .await
    }

    /// The shutdown: `cut`, when it ends first, ends the grace period there. `reactor_dead`:
    /// the runtime the connection ran on has ended (`failure` says so).
    pub(crate) async fn shutdown_here(
        self,
        failure: Option<String>,
        reactor_dead: bool,
        cut: impl Future<Output = ()> + Send,
    ) -> ShutdownReport {
        // With the reactor gone, nothing that runs next to it can end: no grace period.
        let grace = if reactor_dead {
            Duration::ZERO
        } else {
            self.grace
        };
        let mut grace_period = GracePeriod {
            deadline: R::now() + grace,
            cut: std::pin::pin!(cut.fuse()),
        };
        self.shutdown.send_replace(true);
        let health = self.health.clone();
        health.mounts(None, crate::MountState::Stopping);
        // Once shutdown has begun the supervisor starts nothing new; what it was starting is
        // in `tasks` when it ends.
        let _ = grace_period.within::<R, _>(R::join(self.supervisor)).await;
        let failure = failure.or_else(|| self.failed.borrow().clone());
        let mut report = ShutdownReport {
            failure,
            recoveries: std::mem::take(
                &mut *self
                    .recoveries
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            ),
            ..ShutdownReport::default()
        };
        // A mount loop ends once its current delivery does: a Core delivery that waits with
        // every slot taken runs on the loop itself. Past the grace period it is abandoned, as
        // are handlers still holding a slot.
        let tasks = std::mem::take(
            &mut *self
                .tasks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for (mount, task) in self.mounts.iter().zip(tasks) {
            let Some(task) = task else { continue };
            let stuck = grace_period.within::<R, _>(R::join(task)).await.is_none();
            if stuck {
                tracing::debug!(mount = %mount.name, "mount loop still busy at the end of the grace period");
            }
        }
        let mounts: Vec<_> = self
            .mounts
            .iter()
            .map(|m| (m.name, m.in_flight.clone(), m.losses.clone()))
            .collect();
        for (name, in_flight, _) in &mounts {
            // Every delivery still running had to wait, and counts in `in_flight` (a Core
            // delivery waiting on its mount's loop too); slots held for pull requests do not.
            let running = match grace_period.within::<R, _>(in_flight.idle()).await {
                Some(()) => 0,
                None => in_flight.count(),
            };
            if running > 0 {
                tracing::warn!(mount = %name, handlers = running, "grace period over with handlers still running");
                report.abandoned.push((name.to_string(), running));
            }
        }
        // Delayed copies that fall due within the grace period are still published, unless it
        // is cut short: then those not yet due are lost at once.
        self.finish.send_replace(Some(grace_period.deadline));
        let mut delay_task = std::pin::pin!(R::join(self.delay_task));
        if grace_period.within::<R, _>(&mut delay_task).await.is_none() {
            self.finish.send_replace(Some(R::now()));
            delay_task.await;
        }
        R::join(self.lease_task).await;
        if let Ok(lost) = self.lost.await {
            for ((name, _, _), n) in mounts.iter().zip(lost) {
                if n > 0 {
                    tracing::warn!(mount = %name, copies = n, "delayed Core copies lost at shutdown");
                    report.lost_copies.push((name.to_string(), n));
                }
            }
        }
        for (name, _, losses) in &mounts {
            let counted = CoreLosses::read(name, losses);
            if counted.total() > 0 {
                tracing::warn!(mount = %name, slow_consumer = counted.slow_consumer,
                    unpublished_copies = counted.unpublished_copies,
                    unpublished_dead_letters = counted.unpublished_dead_letters,
                    unhandled_at_shutdown = counted.unhandled_at_shutdown,
                    "Core messages lost over the app's life");
                report.core_losses.push(counted);
            }
        }
        // Nothing can reach the server once its connection's runtime is gone.
        let client = self.clients.borrow().clone();
        // An app that ends because its connection stayed down does not wait for it again.
        let down = report.failure.is_some()
            && client.connection_state() != async_nats::connection::State::Connected;
        if down {
            tracing::warn!(
                "the connection to NATS is down: nothing flushed or drained at shutdown"
            );
        }
        if !reactor_dead && !down {
            match R::timeout(FINAL_FLUSH, client.flush()).await {
                Some(Ok(())) => {}
                Some(Err(e)) => tracing::warn!(error = %e, "flush at shutdown failed"),
                None => tracing::warn!("flush at shutdown timed out"),
            }
            if self.owns_client {
                match R::timeout(FINAL_FLUSH, client.drain()).await {
                    Some(Ok(())) => {}
                    Some(Err(e)) => tracing::warn!(error = %e, "drain at shutdown failed"),
                    None => tracing::warn!("drain at shutdown timed out"),
                }
            }
        }
        self.reactor.stop();
        health.stopped(report.failure.clone());
        tracing::info!("ruststream stopped");
        report
    }
}

/// A shutdown's grace period: it ends at `deadline`, or earlier when `cut` ends (a second
/// signal).
struct GracePeriod<'c, F> {
    deadline: Instant,
    cut: Pin<&'c mut F>,
}

impl<F: FusedFuture<Output = ()>> GracePeriod<'_, F> {
    /// `wait`'s output if it ends within the grace period; `None` once the period is over,
    /// when it is cut short (from then on the deadline is now).
    async fn within<R: Runtime, T>(&mut self, wait: impl Future<Output = T> + Send) -> Option<T> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_line_names_every_count_and_quotes_odd_mount_names() {
        let report = ShutdownReport {
            abandoned: vec![("orders".to_owned(), 2)],
            lost_copies: vec![("a]b:c=1,d".to_owned(), 1)],
            core_losses: vec![CoreLosses {
                mount: "greet.v2".to_owned(),
                slow_consumer: 3,
                unpublished_copies: 4,
                unpublished_dead_letters: 5,
                unhandled_at_shutdown: 6,
            }],
            recoveries: vec![],
            failure: Some("down \"for good\"".to_owned()),
        };
        assert_eq!(
            report.to_string(),
            r#"abandoned=[orders:2] lost_copies=["a]b:c=1,d":1] core_losses=[greet.v2:slow_consumer=3,unpublished_copies=4,unpublished_dead_letters=5,unhandled_at_shutdown=6] recoveries=0 failure="down \"for good\"""#
        );
        assert_eq!(
            ShutdownReport::default().to_string(),
            "abandoned=[] lost_copies=[] core_losses=[] recoveries=0 failure=none"
        );
    }
}
