//! Virtual time passing in a simulation: by a span ([`Sim::advance`]), until a condition holds
//! ([`Sim::run_until`]) or until nothing happens ([`Sim::run_until_idle`]), looking at the
//! journal at intervals that grow while it stays the same ([`STEP`] to [`MAX_STEP`]).

use std::time::Duration;

use crate::endpoint::sim::Sim;
use crate::model::journal::Record;

/// How often [`Sim::run_until`] and [`Sim::run_until_idle`] look again, in virtual time,
/// while the journal grows; each look without a new record waits twice as long, up to
/// [`MAX_STEP`].
pub const STEP: Duration = Duration::from_millis(1);

/// The longest [`Sim::run_until`] and [`Sim::run_until_idle`] wait between looks, in virtual
/// time, while nothing happens.
pub const MAX_STEP: Duration = Duration::from_millis(100);

/// [`Sim::run_until`] reached its limit before its condition held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("still waiting for {what} after {limit:?} of virtual time")]
pub struct TimedOut {
    /// What was waited for.
    pub what: String,
    /// How long, in virtual time.
    pub limit: Duration,
}

impl Sim {
    /// Lets `by` of virtual time pass, everything due in it happening in order: handlers
    /// run, deliveries fall due, acknowledgements settle them. Real time grows with what
    /// happens meanwhile: an idle JetStream mount asks again every second, so a day of
    /// virtual time costs about 40 s of real time.
    pub async fn advance(&self, by: Duration) {
        tokio::time::sleep(by).await;
    }

    /// Lets virtual time pass until `done` holds, for at most `limit`; returns the virtual
    /// time it took. `done` is asked at once, then every [`STEP`] while the journal grows,
    /// and at longer intervals (doubling, up to [`MAX_STEP`]) while nothing happens, so that
    /// a long wait costs little real time: the time returned is within one interval of the
    /// moment `done` first held. (Record what you assert on, such as handler runs, with its
    /// own virtual time: [`elapsed`](Self::elapsed).)
    ///
    /// # Errors
    /// [`TimedOut`] naming `what`, when `limit` passed first.
    pub async fn run_until(
        &self,
        what: &str,
        limit: Duration,
        mut done: impl FnMut(&Sim) -> bool,
    ) -> Result<Duration, TimedOut> {
        let from = self.now();
        let mut pace = Pace::new(self.journal_len());
        loop {
            if done(self) {
                return Ok(self.now().saturating_duration_since(from));
            }
            let waited = self.now().saturating_duration_since(from);
            if waited >= limit {
                return Err(TimedOut {
                    what: what.to_owned(),
                    limit,
                });
            }
            tokio::time::sleep(pace.step().min(limit - waited)).await;
            pace.saw(self.journal_len());
        }
    }

    /// Lets virtual time pass until nothing has happened for `quiet`: no publish, delivery,
    /// acknowledgement or disconnection in the journal, pull requests and their ends aside
    /// (a mount asks again forever), and no JetStream message waits to be delivered or
    /// acknowledged. `quiet` must be longer than the longest retry delay the test expects:
    /// a Core copy waiting for its delay is the app's and leaves no trace here until it is
    /// published. At most `limit`; returns the virtual time it took.
    ///
    /// # Errors
    /// [`TimedOut`] when `limit` passed first.
    pub async fn run_until_idle(
        &self,
        quiet: Duration,
        limit: Duration,
    ) -> Result<Duration, TimedOut> {
        let from = self.now();
        let mut scanned = 0;
        let mut activity = 0;
        let mut since = self.now();
        let mut pace = Pace::new(self.journal_len());
        loop {
            let now = self.now();
            let (seen, more) = self.activity_since(scanned);
            scanned = seen;
            if more > 0 {
                activity += more;
                since = now;
            } else if now.saturating_duration_since(since) >= quiet && self.settled() {
                return Ok(now.saturating_duration_since(from));
            }
            let waited = now.saturating_duration_since(from);
            if waited >= limit {
                return Err(TimedOut {
                    what: format!("{quiet:?} without activity (after {activity} records)"),
                    limit,
                });
            }
            tokio::time::sleep(pace.step().min(limit - waited)).await;
            pace.saw(self.journal_len());
        }
    }

    fn journal_len(&self) -> usize {
        self.shared.lock().server.journal().len()
    }

    /// How far the journal goes, and how many of its records from `from` on are activity
    /// (not a pull request).
    fn activity_since(&self, from: usize) -> (usize, usize) {
        let inner = self.shared.lock();
        let journal = inner.server.journal();
        let count = journal
            .get(from..)
            .unwrap_or_default()
            .iter()
            .filter(|r| match r {
                Record::Published { subject, .. } => {
                    !subject.starts_with(crate::model::server::PULL_PREFIX)
                }
                _ => true,
            })
            .count();
        (journal.len(), count)
    }

    /// Whether no JetStream message waits to be delivered or acknowledged.
    fn settled(&self) -> bool {
        let inner = self.shared.lock();
        let s = &inner.server;
        s.streams.iter().all(|(name, entry)| {
            entry.consumers.keys().all(|c| {
                s.consumer_state(name, c)
                    .is_ok_and(|c| c.num_ack_pending == 0 && c.num_pending == 0)
            })
        })
    }
}

/// How long [`Sim::run_until`] waits between looks: [`STEP`] after the journal grew, twice as
/// long after each look that found nothing new, at most [`MAX_STEP`].
struct Pace {
    seen: usize,
    step: Duration,
}

impl Pace {
    fn new(seen: usize) -> Self {
        Self { seen, step: STEP }
    }

    fn step(&self) -> Duration {
        self.step
    }

    fn saw(&mut self, journal_len: usize) {
        if journal_len == self.seen {
            self.step = (self.step * 2).min(MAX_STEP);
        } else {
            self.seen = journal_len;
            self.step = STEP;
        }
    }
}
