//! Shutdown (rule 14): stop consuming, let in-flight handlers finish within the grace period,
//! publish delayed copies that fall due within it, flush, drain; report what was left.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::FusedFuture;

use crate::running::Running;
use crate::runtime::{Reactor, Runtime};

/// How long the final flush and drain of a shutdown may take.
const FINAL_FLUSH: Duration = Duration::from_secs(5);

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
    /// Why the app stopped on its own, if it did: the runtime the NATS connection ran on
    /// ended under it (only possible on smol, whose app owns a Tokio reactor thread).
    pub failure: Option<String>,
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
            .enter(self.shutdown_here(None, std::future::pending()))
            .await
    }

    /// The shutdown: `cut`, when it ends first, ends the grace period there.
    pub(crate) async fn shutdown_here(
        self,
        failure: Option<String>,
        cut: impl Future<Output = ()> + Send,
    ) -> ShutdownReport {
        // With the reactor gone, nothing that runs next to it can end: no grace period.
        let grace = if failure.is_some() {
            Duration::ZERO
        } else {
            self.grace
        };
        let mut grace_period = GracePeriod {
            deadline: R::now() + grace,
            cut: std::pin::pin!(cut.fuse()),
        };
        self.shutdown.send_replace(true);
        let mut report = ShutdownReport {
            failure,
            ..ShutdownReport::default()
        };
        // A mount loop ends once its current delivery does: a Core delivery that waits with
        // every slot taken runs on the loop itself. Past the grace period it is abandoned, as
        // are handlers still holding a slot.
        let mut mounts = Vec::with_capacity(self.mounts.len());
        for mount in self.mounts {
            let stuck = grace_period
                .within::<R, _>(R::join(mount.task))
                .await
                .is_none();
            if stuck {
                tracing::debug!(mount = %mount.name, "mount loop still busy at the end of the grace period");
            }
            mounts.push((mount.name, mount.in_flight));
        }
        for (name, in_flight) in &mounts {
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
            for ((name, _), n) in mounts.iter().zip(lost) {
                if n > 0 {
                    tracing::warn!(mount = %name, copies = n, "delayed Core copies lost at shutdown");
                    report.lost_copies.push((name.to_string(), n));
                }
            }
        }
        // Nothing can reach the server once its connection's runtime is gone.
        if report.failure.is_none() {
            match R::timeout(FINAL_FLUSH, self.client.flush()).await {
                Some(Ok(())) => {}
                Some(Err(e)) => tracing::warn!(error = %e, "flush at shutdown failed"),
                None => tracing::warn!("flush at shutdown timed out"),
            }
            if self.owns_client {
                match R::timeout(FINAL_FLUSH, self.client.drain()).await {
                    Some(Ok(())) => {}
                    Some(Err(e)) => tracing::warn!(error = %e, "drain at shutdown failed"),
                    None => tracing::warn!("drain at shutdown timed out"),
                }
            }
        }
        self.reactor.stop();
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
