//! The delay loop: one per app, one timer, publishing delayed Core copies when due: the driver
//! of the core's `DelayQueue`.

use std::sync::Arc;

use ruststream_settlement::{PendingCopy, Subject};
use tokio::sync::{mpsc, watch};

use crate::handling::publish::{Unpublished, publish_plain};
use crate::runtime::Runtime;
use crate::state::losses::Losses;
use crate::support::deliberate::{self, Bug};
use crate::support::metrics::{Loss, Wire};

/// How often the delay loop looks again at the app's connection while it is down and copies
/// are due.
pub(crate) const WHILE_DOWN: std::time::Duration = std::time::Duration::from_millis(100);

/// The delay queue of Core copies (one per app, one timer): publishes each copy when due.
///
/// `losses`, `copy_subjects` and `names` are by mount index.
///
/// Runs until `finish` holds a deadline, then until no copy left falls due by then, or the
/// deadline has passed (the end of the shutdown grace period, or now when a second signal cut
/// it short). Gives how many copies were still
/// waiting then, per mount index: those are lost (SETTLEMENT.md, rule 14).
///
/// A copy that falls due while the app's connection is down stays in the queue, looked at again
/// every [`WHILE_DOWN`], until the connection is back: handed to async-nats meanwhile, it would
/// wait in the client's buffer, out of the runtime's sight, and be lost uncounted if the app
/// stopped before the connection came back (rule 21; the explorer's seed 360800). Still
/// waiting here at the end of a shutdown, it is counted with the copies lost at shutdown.
///
/// When `finish` closes instead (the app's `Running` dropped without a shutdown, so no grace
/// period will come), it publishes the copies that fall due while the mounts still run (a
/// kept `ShutdownHandle` may keep them consuming; once stopped, they settle what they
/// received), and ends when the last mount's sender closes; the copies still waiting then
/// are lost, counted, and logged here at warn level per mount, as no shutdown report will
/// say so.
pub(crate) async fn delay_loop<R: Runtime>(
    clients: watch::Receiver<async_nats::Client>,
    mut incoming: mpsc::UnboundedReceiver<(PendingCopy, std::time::Instant)>,
    mut finish: watch::Receiver<Option<std::time::Instant>>,
    losses: Vec<Arc<Losses>>,
    copy_subjects: Vec<Option<Subject>>,
    names: Vec<&'static str>,
) -> Vec<usize> {
    let mut queue = ruststream_settlement::DelayQueue::new();
    // The mounts' senders close with their loops, at shutdown, before the deadline is set:
    // copies already queued are still published until then.
    let mut open = true;
    // `finish` closed: the app's handles are gone.
    let mut orphaned = false;
    // Delayed copies that fell due with `Bug::LoseDelayedCopy` on: every third is dropped.
    let mut dropped_on_purpose = 0u64;
    // While the connection is down, when to look at it again (copies due wait until then).
    let mut look_again: Option<std::time::Instant> = None;
    loop {
        if orphaned && !open {
            break;
        }
        let end = *finish.borrow();
        if let Some(end) = end {
            while let Ok((copy, at)) = incoming.try_recv() {
                queued(&losses, &copy);
                queue.handle_copy(copy, at);
            }
            // Nothing left to publish before the end: every mount has stopped (or its
            // handlers were abandoned), so no new copy can fall due in time either.
            let none_due_in_time = queue.poll_timeout().is_none_or(|at| at > end);
            if none_due_in_time || R::now() >= end {
                break;
            }
        }
        let next = queue
            .poll_timeout()
            .map(|at| look_again.map_or(at, |again| at.max(again)));
        tokio::select! {
            biased;
            changed = finish.changed(), if !orphaned => orphaned = changed.is_err(),
            item = incoming.recv(), if open => match item {
                Some((copy, at)) => {
                    queued(&losses, &copy);
                    queue.handle_copy(copy, at);
                }
                None => open = false,
            },
            _ = R::sleep_until(next.unwrap_or_else(R::now)), if next.is_some() => {
                // The app's client now: a new one if the supervisor replaced a dead one.
                let client = clients.borrow().clone();
                if client.connection_state() != async_nats::connection::State::Connected {
                    look_again = Some(R::now() + WHILE_DOWN);
                    continue;
                }
                look_again = None;
                let due: Vec<PendingCopy> = queue.handle_timeout(R::now()).collect();
                for copy in due {
                    let mount = copy.mount();
                    let metrics = losses.get(mount).map(|l| l.metrics());
                    if let Some(metrics) = metrics {
                        metrics.delayed(-1.0);
                    }
                    let Some(subject) = copy_subjects.get(mount).cloned().flatten() else {
                        // Only Core mounts, which all have a copy subject, schedule copies.
                        tracing::error!(mount, "delayed Core copy of a mount without a copy subject: lost");
                        continue;
                    };
                    let publication = copy.into_publication(&subject);
                    if deliberate::active(Bug::LoseDelayedCopy) {
                        dropped_on_purpose += 1;
                        if dropped_on_purpose.is_multiple_of(3) {
                            continue;
                        }
                    }
                    match publish_plain(&client, publication, Unpublished::Copy).await {
                        Ok(()) => {
                            if let Some(metrics) = metrics {
                                metrics.wire(Wire::Copy);
                            }
                        }
                        Err(e) => {
                            if let Some(losses) = losses.get(mount) {
                                losses.add(Loss::Copy, 1);
                            }
                            tracing::error!(%subject, error = %e.reason, "delayed Core copy lost: its publish failed");
                        }
                    }
                }
            }
            _ = R::sleep_until(end.unwrap_or_else(R::now)), if end.is_some() => break,
        }
    }
    while let Ok((copy, at)) = incoming.try_recv() {
        queued(&losses, &copy);
        queue.handle_copy(copy, at);
    }
    let mut lost = vec![0; losses.len()];
    for copy in queue.drain() {
        if let Some(n) = lost.get_mut(copy.mount()) {
            *n += 1;
        }
    }
    for (mount, &n) in lost.iter().enumerate() {
        if let Some(losses) = losses.get(mount).filter(|_| n > 0) {
            losses.metrics().delayed(-(n as f64));
            losses.add(Loss::CopyAtShutdown, n as u64);
            if orphaned {
                let name = names.get(mount).copied().unwrap_or("?");
                tracing::warn!(mount = %name, copies = n,
                    "delayed Core copies lost: the app's Running was dropped without a shutdown, so none publishes them, and its mounts have stopped");
            }
        }
    }
    lost
}

/// Counts a copy into its mount's `ruststream_delayed_copies`.
fn queued(losses: &[Arc<Losses>], copy: &PendingCopy) {
    if let Some(losses) = losses.get(copy.mount()) {
        losses.metrics().delayed(1.0);
    }
}
