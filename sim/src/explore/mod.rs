//! The explorer: seeded random scenarios of mounts, messages and faults, run on the simulator
//! and checked against the contract's invariants (FoundationDB's simulation testing and
//! TigerBeetle's VOPR are the models).
//!
//! A seed draws a [`Scenario`] ([`scenario`]): a few mounts (Core subject, Core wildcard,
//! JetStream with its own `ack_wait` and perhaps a `BackOff`; `max_attempts`, dead letters
//! stored by a stream or not, backoff, provenance, leases, concurrency, buffer, time limit;
//! batches, keys and a pinned or overflow priority group, each drawn apart),
//! messages whose handler does something chosen per attempt (ack, retry, `retry_after`, drop,
//! reject, no outcome, `Err`, panic, an undecodable payload, a sleep past `ack_wait` or the
//! time limit), and faults at random times (lost acknowledgements, failing copies and dead
//! letters, dropped connections, the server down, JetStream off, the app restarted gracefully
//! or dropped). [`run()`] plays it on a [`Sim`](crate::Sim) and keeps a [`Trace`];
//! [`invariants::check`] says what broke.
//!
//! A seed is a reproduction: the same seed draws the same scenario, and the simulation plays it
//! the same way ([`fingerprint`] is the same every run; what can vary is said there).
//! [`shrink`] looks for a smaller scenario that still breaks the same invariant.

pub mod invariants;
pub mod run;
pub mod scenario;
pub mod service;

use std::time::Duration;

use proptest::strategy::ValueTree;

pub use invariants::Violation;
pub use run::{Trace, run};
pub use scenario::Scenario;

use crate::model::journal::Record;

/// What one seed came to.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The seed.
    pub seed: u64,
    /// The invariants that broke (none: it passed).
    pub violations: Vec<Violation>,
    /// What the run could not do as the scenario says (an app that did not start), if
    /// anything: reported, not a violation.
    pub trouble: Vec<String>,
    /// Whether every message had settled when the scenario's time ran out.
    pub settled: bool,
    /// How many handler runs and journal records the run made.
    pub size: (usize, usize),
    /// The run's [`fingerprint`].
    pub fingerprint: u64,
    /// What was lost in a window the contract names, one line each (see
    /// [`invariants::check_with_windows`]): not a violation.
    pub windows: Vec<String>,
    /// How many poisons ([`Scenario::poisons`]) reached an app's client and brought it down.
    pub poisoned: usize,
    /// How many stored poisons ([`Scenario::stored_poisons`]) an app's failure named, and the
    /// run's operator removed.
    pub poisons_removed: usize,
}

/// Runs seed `seed` and checks it.
pub fn check_seed(seed: u64) -> Checked {
    check_scenario(seed, &Scenario::of_seed(seed))
}

/// Runs `scenario` (drawn from `seed`, or shrunk from it) and checks it.
pub fn check_scenario(seed: u64, scenario: &Scenario) -> Checked {
    let trace = run(scenario);
    let (violations, windows) = invariants::check_with_windows(&trace);
    Checked {
        seed,
        violations,
        windows,
        trouble: trace.trouble.clone(),
        settled: trace.settled,
        poisoned: trace.poisons.iter().filter(|p| p.1 > 0).count(),
        poisons_removed: trace
            .stored_poisons
            .iter()
            .filter(|p| p.removed.is_some())
            .count(),
        size: (trace.runs.len(), trace.journal.len()),
        fingerprint: fingerprint(&trace),
    }
}

/// A scenario smaller than seed `seed`'s that still breaks `invariant`, found by proptest's
/// shrinking (fewer mounts, messages and faults, simpler attempts), trying at most `budget`
/// runs; `None` when the seed's own scenario does not break it.
pub fn shrink(seed: u64, invariant: &str, budget: usize) -> Option<Scenario> {
    let mut tree = Scenario::tree(seed);
    let breaks = |scenario: &Scenario| {
        invariants::check(&run(scenario))
            .iter()
            .any(|v| v.invariant == invariant)
    };
    if !breaks(&tree.current()) {
        return None;
    }
    let mut smallest = tree.current();
    let mut runs = 0;
    while runs < budget && tree.simplify() {
        runs += 1;
        let candidate = tree.current();
        if breaks(&candidate) {
            smallest = candidate;
        } else {
            while runs < budget && tree.complicate() {
                runs += 1;
                let candidate = tree.current();
                if breaks(&candidate) {
                    smallest = candidate;
                    break;
                }
            }
        }
    }
    Some(smallest)
}

/// A hash of what a run did, to compare two runs of one seed: every journal record (its
/// virtual time, what it says) and every handler run (mount, message, attempt, times, end).
///
/// Made the same way every run from what varies between runs of one scenario and is not
/// behaviour: async-nats names inboxes at random (each is replaced by `_INBOX.*`), it keeps
/// headers in a map whose order is random per process (the pairs are sorted), connections are
/// numbered as they come (kept: they come in the same order), and what happens at one virtual
/// instant is taken as a set (sorted): tasks that wake at the same instant through the
/// loopback sockets between async-nats and the model (two pull loops whose timers fall due
/// together, say) run in an order the kernel's scheduling decides, so two requests of one
/// instant reach the model in either order. What still varies after that is behaviour, and
/// `--twice` reports it.
pub fn fingerprint(trace: &Trace) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut lines = timed(trace);
    for (_, line) in &mut lines {
        *line = any_inbox(line);
    }
    lines.sort();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for line in lines {
        line.hash(&mut hasher);
    }
    hasher.finish()
}

/// `line` with every canonical inbox name (`_INBOX.` and its number) made `_INBOX.*`.
fn any_inbox(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("_INBOX.") {
        out.push_str(&rest[..at + "_INBOX.".len()]);
        out.push('*');
        rest = rest[at + "_INBOX.".len()..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
}

/// [`canonical`]'s lines, each with its virtual time (a handler run's: its start).
fn timed(trace: &Trace) -> Vec<(std::time::Duration, String)> {
    let since = |at: std::time::Instant| at.saturating_duration_since(trace.start);
    let times = trace
        .journal
        .iter()
        .map(|record| match record {
            Record::Published { at, .. }
            | Record::Delivered { at, .. }
            | Record::Acknowledged { at, .. }
            | Record::MaxDeliveries { at, .. }
            | Record::Disconnected { at, .. } => since(*at),
        })
        .chain(trace.runs.iter().map(|r| r.started));
    times.zip(canonical(trace)).collect()
}

/// The lines [`fingerprint`] hashes, for a diff of two runs that differ.
pub fn canonical(trace: &Trace) -> Vec<String> {
    let mut inboxes: Vec<String> = Vec::new();
    let mut name = |s: &str| -> String {
        let mut out = String::new();
        let mut rest = s;
        while let Some(at) = rest.find("_INBOX.") {
            out.push_str(&rest[..at + "_INBOX.".len()]);
            rest = &rest[at + "_INBOX.".len()..];
            let end = rest
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
            let token = &rest[..end];
            let n = inboxes.iter().position(|i| i == token).unwrap_or_else(|| {
                inboxes.push(token.to_owned());
                inboxes.len() - 1
            });
            out.push_str(&format!("{n}"));
            rest = &rest[end..];
        }
        out.push_str(rest);
        out
    };
    let since = |at: std::time::Instant| at.saturating_duration_since(trace.start);
    let mut lines: Vec<String> = trace
        .journal
        .iter()
        .map(|record| match record {
            Record::Published {
                at,
                connection,
                subject,
                headers,
                payload,
                stored,
                failed,
            } => {
                let mut pairs: Vec<String> = headers
                    .iter()
                    .flat_map(|h| {
                        h.iter().flat_map(|(n, vs)| {
                            vs.iter().map(move |v| format!("{n}={}", v.as_str()))
                        })
                    })
                    .collect();
                pairs.sort();
                format!(
                    "{:?} pub {connection:?} {} [{}] {} {stored:?} {failed}",
                    since(*at),
                    name(subject),
                    name(&pairs.join(",")),
                    name(&String::from_utf8_lossy(payload))
                )
            }
            Record::Delivered { at, .. }
            | Record::Acknowledged { at, .. }
            | Record::MaxDeliveries { at, .. }
            | Record::Disconnected { at, .. } => {
                let text = format!("{record:?}");
                // The instant's own text is process-specific: the time from the start instead,
                // and the record's kind before the rest.
                let kind = text.split_once(" {").map_or("", |(kind, _)| kind);
                let text = text
                    .split_once(" }, ")
                    .map_or(text.clone(), |(_, rest)| rest.to_owned());
                format!("{:?} {kind} {}", since(*at), name(&text))
            }
        })
        .collect();
    lines.extend(trace.runs.iter().map(|r| {
        // A run in place (rule 24), a key, a batch (rule 23): said only where there is one.
        let mut extra = String::new();
        if let Some(delivered) = r.delivered.filter(|d| *d != r.attempt) {
            extra.push_str(&format!(" delivery {delivered}"));
        }
        if let Some(key) = &r.key {
            extra.push_str(&format!(" key {key}"));
        }
        if let Some(batch) = r.batch {
            extra.push_str(&format!(" batch {batch}"));
        }
        format!(
            "run app {} mount {} message {} attempt {} from {:?} to {:?} {:?}{extra}",
            r.app, r.mount, r.id, r.attempt, r.started, r.ended, r.end
        )
    }));
    lines
}

/// How long a seed's scenario lasts in virtual time at most: its busy time, and its settle
/// time four times over (see [`Scenario::settle_time`]).
pub fn longest(scenario: &Scenario) -> Duration {
    Duration::from_millis(u64::from(scenario::BUSY_MS)) + scenario.settle_time() * 4
}
