//! The contract's invariants, checked on a [`Trace`]: from the model's journal (what reached the
//! server, in order), the handlers' own record (what ran, and what it decided) and the
//! runtime's reports. Each check is named after the rule it keeps; a broken one gives a
//! [`Violation`] saying what happened to which message.
//!
//! The checks are an account of the contract written apart from the planner (what each
//! handler's end must come to on the wire is stated here again, simply), so that the explorer
//! checks the runtime against the rules, not against itself.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::run::{HandlerRun, Trace, dead_letter_subject, id_of, mount_name, stream_name};
use super::scenario::{End, Fault, MountSpec, Source};
use crate::model::journal::Record;
use crate::model::wire::AckKind;

/// One invariant that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The invariant, named after its rule (`rule 8: dead letter before +TERM`).
    pub invariant: &'static str,
    /// What happened, naming the message, mount and attempt.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.invariant, self.detail)
    }
}

/// Every invariant that does not hold in `trace`.
pub fn check(trace: &Trace) -> Vec<Violation> {
    check_with_windows(trace).0
}

/// [`check`], and what was lost in a window the contract names (each said in a line): a Core
/// copy the app handed to its client at the instant a fault closed the connection, lost in
/// the client's write buffer, which the runtime cannot see (async-nats reports a publish done
/// once it has queued it); and a plain (Core, unstored) dead letter published and flushed at
/// that instant (async-nats' flush says the bytes left for the socket, not that the server
/// read them). Not a violation; counted apart so that it stays in sight.
pub fn check_with_windows(trace: &Trace) -> (Vec<Violation>, Vec<String>) {
    let facts = Facts::of(trace);
    let mut found = Vec::new();
    let mut windows = Vec::new();
    attempts_within_the_limit(trace, &mut found);
    one_settlement_per_delivery(&facts, &mut found);
    no_settlement_of_a_superseded_delivery(&facts, &mut found);
    settlements_follow_the_handler(trace, &facts, &mut found);
    dead_letters_before_term(trace, &facts, &mut found, &mut windows);
    dead_letters_as_delivered(trace, &facts, &mut found);
    one_run_at_a_time_under_a_lease(trace, &facts, &mut found);
    core_copies_carry_their_attempt(trace, &facts, &mut found);
    core_messages_handled_or_counted(trace, &mut found, &mut windows);
    poisons_end_no_app(trace, &mut found);
    only_a_stored_poison_ends_an_app(trace, &mut found);
    core_retries_copied_or_counted(trace, &facts, &mut found, &mut windows);
    one_run_of_a_key_at_a_time(trace, &mut found);
    a_keys_first_deliveries_start_in_arrival_order(trace, &facts, &mut found);
    strict_order_runs_in_place(trace, &facts, &mut found);
    batches_within_max_and_one_per_key(trace, &mut found);
    (found, windows)
}

/// The count of the delivery `run` ran (JetStream's `delivered`): its attempt on Core, and on
/// JetStream its attempt but for the runs in place before it (rule 24's strict order).
fn delivery_count(run: &HandlerRun) -> u64 {
    run.delivered.unwrap_or(run.attempt)
}

/// The count of the delivery of mount `mount`'s stream sequence `sequence` whose attempt
/// `attempt` a run ran (the attempt itself when none did: one that arrived past the limit).
fn delivered_of(trace: &Trace, mount: usize, sequence: u64, attempt: u64) -> u64 {
    trace
        .runs
        .iter()
        .rev()
        .find(|r| r.mount == mount && r.stream_sequence == Some(sequence) && r.attempt == attempt)
        .map_or(attempt, delivery_count)
}

/// Whether `run`'s retry (if it ended in one) runs again in place (rule 24): on a mount with
/// strict order, a keyed run below `max_attempts` (strict order needs a limit).
fn in_place(spec: &MountSpec, run: &HandlerRun) -> bool {
    spec.strict_order
        && run.key.is_some()
        && spec
            .max_attempts
            .is_some_and(|max| run.attempt < u64::from(max))
}

/// The runs of each key of each keyed mount, by app (rule 24 orders one process's deliveries:
/// an app started after a restart orders its own), in the order they started.
fn runs_by_key(trace: &Trace) -> BTreeMap<(usize, usize, String), Vec<&HandlerRun>> {
    let mut by_key: BTreeMap<(usize, usize, String), Vec<&HandlerRun>> = BTreeMap::new();
    for run in &trace.runs {
        if trace.scenario.mounts[run.mount].key.is_none() {
            continue;
        }
        if let Some(key) = &run.key {
            by_key
                .entry((run.app, run.mount, key.clone()))
                .or_default()
                .push(run);
        }
    }
    by_key
}

/// Rule 24: no two deliveries of one key run at once. Checked within one app (its key table);
/// a run that never ended (cancelled at its time limit) is left out, and two members of one
/// batch are [`batches_within_max_and_one_per_key`]'s.
fn one_run_of_a_key_at_a_time(trace: &Trace, found: &mut Vec<Violation>) {
    for ((app, mount, key), runs) in runs_by_key(trace) {
        for (i, next) in runs.iter().enumerate() {
            let overlapped = runs[..i].iter().find(|earlier| {
                earlier.ended.is_some_and(|ended| next.started < ended)
                    && !(earlier.batch.is_some() && earlier.batch == next.batch)
            });
            if let Some(earlier) = overlapped {
                found.push(Violation {
                    invariant: "rule 24: no two deliveries of one key run at once",
                    detail: format!(
                        "mount {} key {key} (app {app}): message {} attempt {} started at {:?} while message {} attempt {} (from {:?}) ran until {:?}",
                        mount_name(mount),
                        next.id,
                        next.attempt,
                        next.started,
                        earlier.id,
                        earlier.attempt,
                        earlier.started,
                        earlier.ended.unwrap_or_default()
                    ),
                });
                break;
            }
        }
    }
}

/// Rule 24: the deliveries of one key start in the order they arrived, checked on first
/// deliveries (attempt 1) within one app: on Core in the order they were published, on
/// JetStream in the order the server delivered them (its journal).
fn a_keys_first_deliveries_start_in_arrival_order(
    trace: &Trace,
    facts: &Facts,
    found: &mut Vec<Violation>,
) {
    for ((app, mount, key), runs) in runs_by_key(trace) {
        let arrival = |run: &HandlerRun| -> Option<usize> {
            match run.stream_sequence {
                Some(sequence) => facts
                    .deliveries
                    .get(&(mount, sequence))?
                    .iter()
                    .find(|(_, _, d)| *d == 1)
                    .map(|(index, _, _)| *index),
                // The scenario publishes its messages in the order of their identities.
                None => usize::try_from(run.id).ok(),
            }
        };
        let firsts: Vec<(&HandlerRun, usize)> = runs
            .iter()
            .filter(|r| r.attempt == 1 && delivery_count(r) == 1)
            .filter_map(|r| Some((*r, arrival(r)?)))
            .collect();
        for pair in firsts.windows(2) {
            let ((before, arrived_before), (after, arrived_after)) = (pair[0], pair[1]);
            if arrived_after < arrived_before {
                found.push(Violation {
                    invariant: "rule 24: one key's deliveries start in arrival order",
                    detail: format!(
                        "mount {} key {key} (app {app}): message {} started at {:?} before message {} (at {:?}), which arrived first",
                        mount_name(mount),
                        before.id,
                        before.started,
                        after.id,
                        after.started
                    ),
                });
                break;
            }
        }
    }
}

/// Rule 24's strict order: a keyed `retry` (or `retry_after`, or an error the policy retries)
/// below `max_attempts` runs again in place: no `-NAK` of it reaches the server, and no Core
/// copy of it is published. (Its attempts stay within `max_attempts`:
/// `attempts_within_the_limit` checks every run.)
fn strict_order_runs_in_place(trace: &Trace, facts: &Facts, found: &mut Vec<Violation>) {
    let retries = |run: &HandlerRun| matches!(run.end, End::Retry | End::RetryAfter(_) | End::Err);
    for (mount, spec) in trace.scenario.mounts.iter().enumerate() {
        if !spec.strict_order {
            continue;
        }
        if spec.is_jetstream() {
            for ((m, sequence), settlements) in &facts.settlements {
                if *m != mount {
                    continue;
                }
                for s in settlements
                    .iter()
                    .filter(|s| matches!(s.kind, AckKind::Nak(_)))
                {
                    // The delivery's last run that ended: a retry of it below the limit ran
                    // again in place, and the last one settles it.
                    let last = trace.runs.iter().rev().find(|r| {
                        r.mount == mount
                            && r.stream_sequence == Some(*sequence)
                            && delivery_count(r) == s.delivered
                            && r.ended.is_some()
                    });
                    if let Some(run) = last
                        && retries(run)
                        && in_place(spec, run)
                    {
                        found.push(Violation {
                            invariant: "rule 24: strict order runs a keyed retry again in place",
                            detail: format!(
                                "mount {} message {} (stream sequence {sequence}) delivery {}: attempt {} ended {:?} with key {:?} below max_attempts {:?}, and a -NAK reached the server",
                                mount_name(mount),
                                run.id,
                                s.delivered,
                                run.attempt,
                                run.end,
                                run.key,
                                spec.max_attempts
                            ),
                        });
                    }
                }
            }
            continue;
        }
        let Some(subject) = copy_subject(spec, mount) else {
            continue;
        };
        for copy in facts.publications.iter().filter(|p| p.subject == subject) {
            let (Some(count), Some(id)) = (retry_count(copy), id_of(&copy.payload)) else {
                continue;
            };
            let asked = trace.runs.iter().find(|r| {
                r.mount == mount
                    && r.id == id
                    && r.attempt == count
                    && retries(r)
                    && in_place(spec, r)
            });
            if let Some(run) = asked {
                found.push(Violation {
                    invariant: "rule 24: strict order runs a keyed retry again in place",
                    detail: format!(
                        "mount {} message {id}: attempt {count} ended {:?} with key {:?} below max_attempts {:?}, and a copy of it was published to {subject}",
                        mount_name(mount),
                        run.end,
                        run.key,
                        spec.max_attempts
                    ),
                });
            }
        }
    }
}

/// Rule 23 (and 24): no batch holds more than its mount's `max` members, nor two deliveries
/// of one key on a keyed mount (a member joins its batch at its key's turn), nor one
/// JetStream delivery twice.
fn batches_within_max_and_one_per_key(trace: &Trace, found: &mut Vec<Violation>) {
    let mut batches: BTreeMap<u64, Vec<&HandlerRun>> = BTreeMap::new();
    for run in &trace.runs {
        if let Some(batch) = run.batch {
            batches.entry(batch).or_default().push(run);
        }
    }
    for (batch, members) in batches {
        let mount = members[0].mount;
        let spec = &trace.scenario.mounts[mount];
        let max = spec.batch.map_or(1, |(max, _)| usize::from(max));
        if members.len() > max {
            found.push(Violation {
                invariant: "rule 23: a batch holds at most max members",
                detail: format!(
                    "mount {} batch {batch} held {} members (max {max}): messages {:?}",
                    mount_name(mount),
                    members.len(),
                    members.iter().map(|m| m.id).collect::<Vec<_>>()
                ),
            });
        }
        let mut keys = BTreeSet::new();
        let mut deliveries = BTreeSet::new();
        for member in &members {
            if spec.key.is_some()
                && let Some(key) = &member.key
                && !keys.insert(key.clone())
            {
                found.push(Violation {
                    invariant: "rule 24: a batch never holds two deliveries of one key",
                    detail: format!(
                        "mount {} batch {batch} held two deliveries of key {key}: messages {:?}",
                        mount_name(mount),
                        members
                            .iter()
                            .filter(|m| m.key.as_ref() == Some(key))
                            .map(|m| (m.id, m.attempt))
                            .collect::<Vec<_>>()
                    ),
                });
            }
            if let Some(sequence) = member.stream_sequence
                && !deliveries.insert((sequence, delivery_count(member)))
            {
                found.push(Violation {
                    invariant: "rule 23: a batch holds each delivery once",
                    detail: format!(
                        "mount {} batch {batch} held stream sequence {sequence} delivery {} twice",
                        mount_name(mount),
                        delivery_count(member)
                    ),
                });
            }
        }
    }
}

/// A JetStream settlement in the journal: its place, time and what it said.
#[derive(Debug, Clone, Copy)]
pub(super) struct Settlement {
    pub(super) index: usize,
    pub(super) at: Instant,
    pub(super) delivered: u64,
    pub(super) kind: AckKind,
}

/// A publish in the journal to one of the scenario's subjects.
#[derive(Debug, Clone)]
pub(super) struct Publication {
    pub(super) index: usize,
    pub(super) subject: String,
    pub(super) payload: bytes::Bytes,
    pub(super) headers: Vec<(String, String)>,
    pub(super) failed: bool,
}

/// A message of a JetStream mount: (mount, stream sequence).
pub(super) type Key = (usize, u64);

/// A JetStream delivery in the journal: (journal index, time, delivery count).
pub(super) type Delivery = (usize, Instant, u64);

/// JetStream mounts by stream, then consumer: their index.
pub(super) type MountsByConsumer = BTreeMap<String, BTreeMap<String, usize>>;

/// The mount consuming from `stream` through `consumer`, if one of `mounts` does.
fn mount_of(mounts: &MountsByConsumer, stream: &str, consumer: &str) -> Option<usize> {
    mounts.get(stream)?.get(consumer).copied()
}

/// What the journal says, sorted for the checks.
pub(super) struct Facts {
    /// JetStream settlements that reached the server, by (mount, stream sequence).
    pub(super) settlements: BTreeMap<(usize, u64), Vec<Settlement>>,
    /// JetStream deliveries: (journal index, time, delivery count), by (mount, stream sequence).
    pub(super) deliveries: BTreeMap<Key, Vec<Delivery>>,
    /// Every publish but the JetStream API's and inboxes' (the scenario's own messages, copies,
    /// dead letters).
    pub(super) publications: Vec<Publication>,
    /// When each fault that breaks the connection or the app began and ended (virtual time
    /// since the start; a moment for a drop or a restart).
    pub(super) breaks: Vec<(Duration, Duration)>,
    /// Acknowledgements (renewals included) lost on their way to the server: (time, delivery
    /// count), by (mount, stream sequence). The runtime cannot know of them.
    pub(super) lost: BTreeMap<(usize, u64), Vec<(Instant, u64)>>,
    /// The simulation's start.
    pub(super) start: Instant,
    /// The mounts' names, by index.
    pub(super) names: Vec<String>,
}

impl Facts {
    fn of(trace: &Trace) -> Self {
        let mut mount_of_stream: MountsByConsumer = BTreeMap::new();
        for (i, m) in trace.scenario.mounts.iter().enumerate() {
            if m.is_jetstream() {
                mount_of_stream
                    .entry(stream_name(i))
                    .or_default()
                    .insert(format!("c{i}"), i);
            }
        }
        let names = (0..trace.scenario.mounts.len()).map(mount_name).collect();
        Self::from_journal(
            &trace.journal,
            &mount_of_stream,
            names,
            breaks_of(&trace.scenario.faults)
                .into_iter()
                // A poison that reached the app's client broke it, as a dropped connection.
                .chain(poison_deaths(trace).into_iter().map(|at| (at, at)))
                .collect(),
            trace.start,
        )
    }

    /// What `journal` says of the JetStream mounts `mount_of_stream` finds by (stream,
    /// consumer) (by index: the mount's name is at that index of `names`), with the faults'
    /// `breaks`.
    pub(super) fn from_journal(
        journal: &[Record],
        mount_of_stream: &MountsByConsumer,
        names: Vec<String>,
        breaks: Vec<(Duration, Duration)>,
        start: Instant,
    ) -> Self {
        let mut settlements: BTreeMap<(usize, u64), Vec<Settlement>> = BTreeMap::new();
        let mut deliveries: BTreeMap<Key, Vec<Delivery>> = BTreeMap::new();
        let mut publications = Vec::new();
        let mut lost: BTreeMap<(usize, u64), Vec<(Instant, u64)>> = BTreeMap::new();
        for (index, record) in journal.iter().enumerate() {
            match record {
                Record::Acknowledged {
                    at,
                    stream,
                    consumer,
                    stream_sequence,
                    delivered,
                    lost: true,
                    ..
                } => {
                    if let Some(mount) = mount_of(mount_of_stream, stream, consumer) {
                        lost.entry((mount, *stream_sequence))
                            .or_default()
                            .push((*at, *delivered));
                    }
                }
                Record::Acknowledged {
                    at,
                    stream,
                    consumer,
                    stream_sequence,
                    delivered,
                    kind,
                    lost: false,
                    ..
                } if !matches!(kind, AckKind::Progress | AckKind::Unknown) => {
                    if let Some(mount) = mount_of(mount_of_stream, stream, consumer) {
                        settlements
                            .entry((mount, *stream_sequence))
                            .or_default()
                            .push(Settlement {
                                index,
                                at: *at,
                                delivered: *delivered,
                                kind: *kind,
                            });
                    }
                }
                Record::Delivered {
                    at,
                    stream,
                    consumer,
                    stream_sequence,
                    delivered,
                    ..
                } => {
                    if let Some(mount) = mount_of(mount_of_stream, stream, consumer) {
                        deliveries
                            .entry((mount, *stream_sequence))
                            .or_default()
                            .push((index, *at, *delivered));
                    }
                }
                Record::Published {
                    subject,
                    headers,
                    payload,
                    failed,
                    ..
                } if !subject.starts_with("$JS.") && !subject.starts_with("_INBOX.") => {
                    let mut pairs: Vec<(String, String)> = headers
                        .iter()
                        .flat_map(|h| {
                            h.iter().flat_map(|(name, values)| {
                                values
                                    .iter()
                                    .map(move |v| (name.to_string(), v.as_str().to_owned()))
                            })
                        })
                        .collect();
                    pairs.sort();
                    publications.push(Publication {
                        index,
                        subject: subject.clone(),
                        payload: payload.clone(),
                        headers: pairs,
                        failed: *failed,
                    });
                }
                _ => {}
            }
        }
        Self {
            settlements,
            deliveries,
            publications,
            breaks,
            lost,
            start,
            names,
        }
    }

    /// The name of mount `mount`.
    pub(super) fn name(&self, mount: usize) -> &str {
        self.names.get(mount).map_or("?", String::as_str)
    }

    /// Whether a fault that breaks the connection or the app came between `from` and `to`, or
    /// lasted into that time (the server down, JetStream off: renewals reach no one
    /// meanwhile). Virtual time since the start; a restart's new app and a server's return
    /// come after it.
    pub(super) fn broken_between(&self, from: Duration, to: Duration) -> bool {
        self.breaks
            .iter()
            .any(|&(at, until)| at <= to && until >= from)
    }

    /// `at` as virtual time since the start.
    pub(super) fn since(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.start)
    }

    /// Whether an acknowledgement of delivery `delivered` of message `key` (a renewal, say)
    /// was lost before `before`.
    fn lost_before(&self, key: (usize, u64), delivered: u64, before: Instant) -> bool {
        self.lost
            .get(&key)
            .is_some_and(|lost| lost.iter().any(|(at, d)| *d == delivered && *at <= before))
    }
}

/// When each fault that breaks the connection or the app began and ended (virtual time since
/// the start; a moment for a drop or a restart).
pub(super) fn breaks_of(faults: &[super::scenario::TimedFault]) -> Vec<(Duration, Duration)> {
    faults
        .iter()
        .filter(|f| {
            matches!(
                f.fault,
                Fault::DropConnections
                    | Fault::ServerDown(_)
                    | Fault::JetStreamOff(_)
                    | Fault::Restart { .. }
            )
        })
        .map(|f| {
            let at = Duration::from_millis(u64::from(f.at_ms));
            let lasts = match f.fault {
                Fault::ServerDown(ms) | Fault::JetStreamOff(ms) => {
                    Duration::from_millis(u64::from(ms))
                }
                _ => Duration::ZERO,
            };
            (at, at + lasts)
        })
        .collect()
}

/// The payload of message `id`, as sent.
fn sent_payload(trace: &Trace, id: u64) -> Option<&bytes::Bytes> {
    trace.sent.iter().find(|s| s.id == id).map(|s| &s.payload)
}

/// Rules 2 and 3: a handler never runs an attempt past `max_attempts` (a delivery that arrives
/// past it takes the at-limit path without running).
fn attempts_within_the_limit(trace: &Trace, found: &mut Vec<Violation>) {
    for run in &trace.runs {
        let spec = &trace.scenario.mounts[run.mount];
        if let Some(max) = spec.max_attempts
            && run.attempt > u64::from(max)
        {
            found.push(Violation {
                invariant: "rules 2-3: no attempt past max_attempts runs the handler",
                detail: format!(
                    "message {} on mount {} ran attempt {} (max_attempts {max}, app {})",
                    run.id,
                    mount_name(run.mount),
                    run.attempt,
                    run.app
                ),
            });
        }
    }
}

/// At most one settlement (`+ACK`, `-NAK`, `+TERM`) reaches the server for each delivery.
pub(super) fn one_settlement_per_delivery(facts: &Facts, found: &mut Vec<Violation>) {
    for ((mount, sequence), settlements) in &facts.settlements {
        let mut seen: BTreeMap<u64, Vec<AckKind>> = BTreeMap::new();
        for s in settlements {
            seen.entry(s.delivered).or_default().push(s.kind);
        }
        for (delivered, kinds) in seen {
            if kinds.len() > 1 {
                found.push(Violation {
                    invariant: "at most one settlement a delivery",
                    detail: format!(
                        "mount {} stream sequence {sequence} delivery {delivered} settled {} times: {kinds:?}",
                        facts.name(*mount),
                        kinds.len()
                    ),
                });
            }
        }
    }
}

/// Rule 16: a result that comes after its delivery's deadline passed without a renewal is
/// discarded: no settlement of a delivery reaches the server after the server delivered the
/// message again (a settlement at the very instant of the redelivery is not told apart).
pub(super) fn no_settlement_of_a_superseded_delivery(facts: &Facts, found: &mut Vec<Violation>) {
    for (key, settlements) in &facts.settlements {
        let Some(deliveries) = facts.deliveries.get(key) else {
            continue;
        };
        for s in settlements {
            let newer = deliveries.iter().find(|(index, at, delivered)| {
                *delivered > s.delivered && *index < s.index && *at < s.at
            });
            // Excused: a renewal lost on its way (the runtime sent it, and could not know), or
            // the connection broken while the delivery waited for its result.
            let first = deliveries
                .iter()
                .find(|(_, _, d)| *d == s.delivered)
                .map(|(_, at, _)| *at);
            if let Some((_, at, delivered)) = newer
                && !facts.lost_before(*key, s.delivered, *at)
                && !first
                    .is_some_and(|from| facts.broken_between(facts.since(from), facts.since(*at)))
            {
                found.push(Violation {
                    invariant: "rule 16: a late result is discarded",
                    detail: format!(
                        "mount {} stream sequence {} delivery {} settled with {:?} after the server had delivered it again (delivery {delivered})",
                        facts.name(key.0),
                        key.1,
                        s.delivered,
                        s.kind
                    ),
                });
            }
        }
    }
}

/// What a handler's end at `attempt` must come to on JetStream, as Part C says: `Some(kind)`
/// of the settlement (a `-NAK` with or without its delay), or `None` for nothing.
fn expected_jetstream(spec: &MountSpec, attempt: u64, end: End) -> Option<AckKind> {
    let at_limit = spec
        .max_attempts
        .is_some_and(|max| attempt >= u64::from(max));
    match end {
        End::Ack => Some(AckKind::Ack),
        End::Drop | End::Reject => Some(AckKind::Term),
        End::Retry | End::Err | End::RetryAfter(_) if at_limit => Some(AckKind::Term),
        End::Retry | End::Err | End::RetryAfter(_) => Some(AckKind::Nak(None)),
        End::NoOutcome | End::Panic => None,
    }
}

fn same_kind(a: AckKind, b: AckKind) -> bool {
    std::mem::discriminant(&a) == std::mem::discriminant(&b)
}

/// Each JetStream settlement is what the handler's end at that attempt comes to: `+ACK` only
/// after a run that said ack, `+TERM` only after drop, reject, an undecodable payload or the
/// limit, `-NAK` only after a retry (or a failed dead letter, rule 8, which comes back past the
/// limit).
fn settlements_follow_the_handler(trace: &Trace, facts: &Facts, found: &mut Vec<Violation>) {
    for ((mount, sequence), settlements) in &facts.settlements {
        let spec = &trace.scenario.mounts[*mount];
        let sent = trace
            .sent
            .iter()
            .find(|s| s.mount == *mount && s.stored == Some(*sequence));
        let Some(sent) = sent else { continue };
        let undecodable = trace.scenario.messages[sent.id as usize].undecodable;
        for s in settlements {
            // The delivery's last run that ended (with strict order, a retry runs again in
            // place: the last run in place settles it, at its own attempt).
            let run = trace.runs.iter().rev().find(|r| {
                r.mount == *mount
                    && r.stream_sequence == Some(*sequence)
                    && delivery_count(r) == s.delivered
                    && r.ended.is_some()
            });
            let past_limit = spec
                .max_attempts
                .is_some_and(|max| s.delivered > u64::from(max));
            let expected = match (undecodable || past_limit, run) {
                (true, _) => Some(AckKind::Term),
                (false, Some(run)) => expected_jetstream(spec, run.attempt, run.end),
                // No run ended at that attempt: only the at-limit path or a recovery can settle.
                (false, None) => None,
            };
            // A dead letter that failed is answered with a delayed -NAK (rule 8).
            let dead_letter_failed = matches!(s.kind, AckKind::Nak(_))
                && matches!(expected, Some(AckKind::Term))
                && spec.dead_letters.is_some();
            let fits = match expected {
                Some(kind) => same_kind(kind, s.kind) || dead_letter_failed,
                None => false,
            };
            if !fits {
                found.push(Violation {
                    invariant: "Part C: each settlement is what the handler's end comes to",
                    detail: format!(
                        "mount {} message {} (stream sequence {sequence}) delivery {} settled {:?}; the handler's end there: {}",
                        mount_name(*mount),
                        sent.id,
                        s.delivered,
                        s.kind,
                        match run {
                            Some(run) => format!("{:?}", run.end),
                            None if undecodable => "undecodable".to_owned(),
                            None => "no run ended".to_owned(),
                        }
                    ),
                });
            }
        }
    }
}

/// Rule 8: a message the runtime dead-letters is settled (`+TERM`) only after its dead letter
/// reached the server; and a delivery counts as dead-lettered (in what its observer is told)
/// only with its dead letter on the wire.
///
/// A plain dead letter of a Core mount reported at the instant a fault closed the app's
/// connection (a drop or the server going down) that is not on the wire is put in `windows`
/// instead: async-nats wrote it for the socket and its flush said so, and the connection
/// closed before the server read it (seeds 360027, 415880, 475681).
fn dead_letters_before_term(
    trace: &Trace,
    facts: &Facts,
    found: &mut Vec<Violation>,
    windows: &mut Vec<String>,
) {
    for (mount, spec) in trace.scenario.mounts.iter().enumerate() {
        let Some(subject) = dead_letter_subject(spec, mount) else {
            continue;
        };
        let name = mount_name(mount);
        // A plain (Core, unstored) dead letter that the server refused is gone on the way,
        // which Core cannot tell (it reached the server): it counts as on the wire. A stored
        // one that failed was refused to the runtime, which must not count it confirmed.
        // So are a Core mount's dead letters where an app started while JetStream was off:
        // start-up found no stream for them, warned, and publishes them plain (rule 8).
        // So are they after a poison made the app connect a new client while JetStream was
        // off: the new client's mount checks decide the sink again (seed 7523).
        let jetstream_off = |at: Duration| {
            trace.scenario.faults.iter().any(|f| match f.fault {
                Fault::JetStreamOff(ms) => {
                    let from = Duration::from_millis(u64::from(f.at_ms));
                    at >= from && at <= from + Duration::from_millis(u64::from(ms))
                }
                _ => false,
            })
        };
        let replaced_while_off = poison_deaths(trace).into_iter().any(jetstream_off);
        let plain = spec.dead_letters == Some(super::scenario::DeadLetters::Plain)
            || (!spec.is_jetstream()
                && (!trace.started_without_jetstream.is_empty() || replaced_while_off));
        let letters: Vec<&Publication> = facts
            .publications
            .iter()
            .filter(|p| p.subject == subject && (plain || !p.failed))
            .collect();
        let reported = trace
            .observed
            .iter()
            .filter(|o| o.settled.mount == name)
            .filter(|o| o.settled.disposition == ruststream_settlement::Disposition::DeadLettered);
        if !spec.is_jetstream() {
            let reported: Vec<_> = reported.collect();
            let at_a_close = reported
                .iter()
                .filter(|o| plain && closed_at(trace, o.at))
                .count();
            let reported = reported.len();
            if reported > letters.len() + at_a_close {
                found.push(Violation {
                    invariant: "rule 8: a dead letter before the delivery is settled",
                    detail: format!(
                        "Core mount {name}: {reported} deliveries reported dead-lettered, {} dead letters reached {subject}",
                        letters.len()
                    ),
                });
            } else if reported > letters.len() {
                windows.push(format!(
                    "rule 21's window: mount {name}: {} plain dead letters flushed as a fault closed the connection are not on {subject}",
                    reported - letters.len()
                ));
            }
            continue;
        }
        for observed in reported {
            let Some(sequence) = observed.settled.stream_sequence else {
                continue;
            };
            let Some(sent) = trace
                .sent
                .iter()
                .find(|s| s.mount == mount && s.stored == Some(sequence))
            else {
                continue;
            };
            let Some(letter) = letters.iter().find(|p| p.payload == sent.payload) else {
                found.push(Violation {
                    invariant: "rule 8: a dead letter before +TERM",
                    detail: format!(
                        "mount {name} message {} (stream sequence {sequence}) attempt {} reported dead-lettered, and no dead letter of it reached {subject}",
                        sent.id, observed.settled.attempt
                    ),
                });
                continue;
            };
            let term = facts
                .settlements
                .get(&(mount, sequence))
                .into_iter()
                .flatten()
                // The dead-lettered delivery's own `+TERM`: an older delivery's (a `drop`
                // decided while the connection was down, sent once it was back) may reach the
                // server first (seed 16544).
                .find(|s| {
                    matches!(s.kind, AckKind::Term)
                        && s.delivered
                            == delivered_of(trace, mount, sequence, observed.settled.attempt)
                });
            if let Some(term) = term
                && term.index < letter.index
            {
                found.push(Violation {
                    invariant: "rule 8: a dead letter before +TERM",
                    detail: format!(
                        "mount {name} message {} (stream sequence {sequence}): +TERM (journal record {}) before its dead letter (journal record {})",
                        sent.id, term.index, letter.index
                    ),
                });
            }
        }
    }
}

/// Whether a fault closed the app's connection (a drop, or the server going down) at `at`
/// (virtual time since the start).
fn closed_at(trace: &Trace, at: Duration) -> bool {
    trace.scenario.faults.iter().any(|f| {
        matches!(f.fault, Fault::DropConnections | Fault::ServerDown(_))
            && Duration::from_millis(u64::from(f.at_ms)) == at
    })
}

/// Rules 9 and 19: a dead letter is the delivery as it arrived (its payload), with provenance
/// headers exactly when its mount asks for them.
fn dead_letters_as_delivered(trace: &Trace, facts: &Facts, found: &mut Vec<Violation>) {
    for (mount, spec) in trace.scenario.mounts.iter().enumerate() {
        let Some(subject) = dead_letter_subject(spec, mount) else {
            continue;
        };
        for letter in facts.publications.iter().filter(|p| p.subject == subject) {
            let Some(id) = id_of(&letter.payload) else {
                found.push(Violation {
                    invariant: "rule 9: a dead letter is the delivery as it arrived",
                    detail: format!(
                        "a dead letter on {subject} carries a payload no message had ({} bytes)",
                        letter.payload.len()
                    ),
                });
                continue;
            };
            if sent_payload(trace, id) != Some(&letter.payload) {
                found.push(Violation {
                    invariant: "rule 9: a dead letter is the delivery as it arrived",
                    detail: format!(
                        "the dead letter of message {id} on {subject} is not its payload"
                    ),
                });
            }
            let has = |name: &str| {
                letter
                    .headers
                    .iter()
                    .any(|(n, _)| n.eq_ignore_ascii_case(name))
            };
            let provenance = has(ruststream_settlement::PROVENANCE_MOUNT)
                && has(ruststream_settlement::PROVENANCE_REASON)
                && has(ruststream_settlement::PROVENANCE_ATTEMPT);
            if provenance != spec.provenance {
                found.push(Violation {
                    invariant: "rule 19: provenance headers on request",
                    detail: format!(
                        "the dead letter of message {id} on {subject} has{} provenance headers; mount {} asks{} for them",
                        if provenance { "" } else { " no" },
                        mount_name(mount),
                        if spec.provenance { "" } else { " not" }
                    ),
                });
            }
        }
    }
}

/// Rule 16: while its lease is renewed, a JetStream delivery is not delivered again, so two
/// runs of one message never overlap, unless the connection broke, an acknowledgement was
/// lost or the app restarted meanwhile (a renewal that cannot be sent), or the `-NAK` of an
/// older delivery whose renewal was lost crossed the newer delivery on the wire.
fn one_run_at_a_time_under_a_lease(trace: &Trace, facts: &Facts, found: &mut Vec<Violation>) {
    let mut by_message: BTreeMap<(usize, u64), Vec<&HandlerRun>> = BTreeMap::new();
    for run in &trace.runs {
        let spec = &trace.scenario.mounts[run.mount];
        if spec.is_jetstream() && spec.leases {
            by_message.entry((run.mount, run.id)).or_default().push(run);
        }
    }
    for ((mount, id), runs) in by_message {
        for pair in runs.windows(2) {
            let (first, next) = (pair[0], pair[1]);
            let Some(ended) = first.ended else { continue };
            // Its renewals lost on their way; or those of an older delivery of the message that
            // another app (a process of the shared durable, a dropped app still settling) ran:
            // that app cannot see the newer delivery, and its settlement takes the message
            // from it (rule 16 says so; seed 165972).
            let first_delivered = delivery_count(first);
            let elsewhere = |d: u64| {
                runs.iter()
                    .any(|r| delivery_count(r) == d && r.app != first.app && d < first_delivered)
            };
            let renewal_lost = first.stream_sequence.is_some_and(|sequence| {
                facts.lost.get(&(mount, sequence)).is_some_and(|lost| {
                    lost.iter().any(|(at, d)| {
                        (*d == first_delivered || elsewhere(*d)) && facts.since(*at) <= next.started
                    })
                })
            });
            // A `-NAK` of an older delivery whose renewal was lost on its way, sent as its run
            // ended at the very instant the server delivered the message again (`first`'s
            // delivery), which the runtime could not yet see, and taken by the server after
            // it: nats-server settles by stream sequence, and delivers the message once more
            // while `first` runs under its lease (seed 374484). The two checks of rule 16 do
            // not tell apart what comes at one instant.
            let crossed = first.stream_sequence.is_some_and(|sequence| {
                let key = (mount, sequence);
                let Some((delivered_index, delivered_at)) =
                    facts.deliveries.get(&key).and_then(|deliveries| {
                        deliveries
                            .iter()
                            .find(|(_, _, d)| *d == first_delivered)
                            .map(|(index, at, _)| (*index, *at))
                    })
                else {
                    return false;
                };
                facts.settlements.get(&key).is_some_and(|settlements| {
                    settlements.iter().any(|s| {
                        s.delivered < first_delivered
                            && matches!(s.kind, AckKind::Nak(_))
                            && s.index > delivered_index
                            && s.at == delivered_at
                            && facts.lost_before(key, s.delivered, delivered_at)
                    })
                })
            });
            // A run its app's graceful shutdown abandoned (reported) is renewed no more once
            // that shutdown ended.
            let abandoned = first.app != next.app
                && trace
                    .shutdown_ends
                    .iter()
                    .any(|(app, end)| *app == first.app && *end <= next.started && ended > *end)
                && trace.reports.iter().any(|(app, report)| {
                    *app == first.app
                        && report
                            .abandoned
                            .iter()
                            .any(|(m, _)| *m == mount_name(mount))
                });
            // The connection broken while `first`'s delivery was held: from its arrival, as a
            // delivery that waits to run (for a slot, its key's turn, its batch: rules 23-24)
            // is held under its lease before its run starts (seed 503: a batch member's
            // renewal fell due while a poison had brought the client down).
            let held_from = first
                .stream_sequence
                .and_then(|sequence| {
                    facts
                        .deliveries
                        .get(&(mount, sequence))?
                        .iter()
                        .find(|(_, _, d)| *d == first_delivered)
                        .map(|(_, at, _)| facts.since(*at))
                })
                .map_or(first.started, |arrived| arrived.min(first.started));
            let broken = renewal_lost
                || crossed
                || abandoned
                || facts.broken_between(held_from, next.started);
            if next.started < ended && !broken {
                found.push(Violation {
                    invariant: "rule 16: one run at a time while the lease is renewed",
                    detail: format!(
                        "mount {} message {id}: attempt {} started at {:?} while attempt {} (from {:?}) ran until {:?}",
                        mount_name(mount),
                        next.attempt,
                        next.started,
                        first.attempt,
                        first.started,
                        ended
                    ),
                });
            }
        }
    }
}

/// The subject a Core mount's copies go to.
fn copy_subject(spec: &MountSpec, mount: usize) -> Option<String> {
    match spec.source {
        Source::CoreSubject => Some(format!("core.{mount}")),
        Source::CoreWildcard => Some(format!("copies.{mount}")),
        Source::JetStream { .. } => None,
    }
}

/// The retry count a copy carries.
fn retry_count(publication: &Publication) -> Option<u64> {
    publication
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(ruststream_settlement::RETRY_COUNT_HEADER))
        .and_then(|(_, v)| v.parse().ok())
}

/// Rules 4 and 5: a Core copy is the message after the attempt it names: its payload, and a
/// handler run of that attempt ended asking for it.
fn core_copies_carry_their_attempt(trace: &Trace, facts: &Facts, found: &mut Vec<Violation>) {
    for (mount, spec) in trace.scenario.mounts.iter().enumerate() {
        let Some(subject) = copy_subject(spec, mount) else {
            continue;
        };
        for copy in facts.publications.iter().filter(|p| p.subject == subject) {
            let Some(count) = retry_count(copy) else {
                continue;
            };
            let Some(id) = id_of(&copy.payload) else {
                continue;
            };
            let asked = trace.runs.iter().any(|r| {
                r.mount == mount
                    && r.id == id
                    && r.attempt == count
                    && matches!(r.end, End::Retry | End::RetryAfter(_) | End::Err)
            });
            if !asked {
                found.push(Violation {
                    invariant: "rule 4: a copy follows the attempt it names",
                    detail: format!(
                        "a copy of message {id} on {subject} names attempt {count}, which no run of mount {} ended asking for",
                        mount_name(mount)
                    ),
                });
            }
        }
    }
}

/// The scenario's apps that ran without being dropped (their losses are in their reports).
fn accounted(trace: &Trace) -> bool {
    trace.dropped.is_empty() && trace.trouble.is_empty()
}

/// Rule 21: every Core message published while its mount listened is handled, or counted as
/// lost (dropped for a full buffer, or received and not handled at shutdown).
///
/// A message sent to the app's client between a poison reaching it and its connection
/// closing is put in `windows`: async-nats had it and lost it with the connection. So is one
/// sent at the instant its app's shutdown began ([`crossed_unsubscribe`]).
fn core_messages_handled_or_counted(
    trace: &Trace,
    found: &mut Vec<Violation>,
    windows: &mut Vec<String>,
) {
    if !accounted(trace) {
        return;
    }
    for (mount, spec) in trace.scenario.mounts.iter().enumerate() {
        if spec.is_jetstream() {
            continue;
        }
        let (in_window, unhandled): (Vec<u64>, Vec<u64>) = trace
            .sent
            .iter()
            .filter(|s| s.mount == mount && s.receivers > 0)
            .filter(|s| !trace.scenario.messages[s.id as usize].undecodable)
            .filter(|s| {
                !trace
                    .runs
                    .iter()
                    .any(|r| r.mount == mount && r.id == s.id && r.attempt == 1)
            })
            .map(|s| s.id)
            .partition(|id| {
                let at = trace.sent[*id as usize].at;
                poisoned_in_flight(trace, at) || crossed_unsubscribe(trace, at)
            });
        for id in in_window {
            let at = trace.sent[id as usize].at;
            let why = if poisoned_in_flight(trace, at) {
                "sent to the client as a poison brought it down, lost in it"
            } else {
                "sent at the instant its app's shutdown began, crossing the mount's UNSUB on the wire (async-nats ends a drained subscription before the server confirms the UNSUB, and drops what arrives for it after)"
            };
            windows.push(format!(
                "rule 21's window: mount {} message {id}: {why}",
                mount_name(mount)
            ));
        }
        let counted: u64 = trace
            .reports
            .iter()
            .flat_map(|(_, r)| r.core_losses.iter())
            .filter(|l| l.mount == mount_name(mount))
            .map(|l| l.slow_consumer + l.unhandled_at_shutdown)
            .sum();
        if unhandled.len() as u64 > counted {
            found.push(Violation {
                invariant: "rule 21: a Core message is handled or counted lost",
                detail: format!(
                    "mount {}: messages {unhandled:?} never ran, and the reports count {counted} lost",
                    mount_name(mount)
                ),
            });
        }
    }
}

/// Whether a Core message sent at `at` went out at the very instant a graceful shutdown
/// began (a restart's, or the operator's of a failed app): the server may route it to the
/// stopping app after the app's client has sent the mount's `UNSUB` (the timeline publishes
/// first, but the app's client may not have read it yet). async-nats removes a drained
/// subscription at its connection task's next turn, not when the server confirms the `UNSUB`
/// with its `PONG`, and drops, unseen, a message that arrives for it after: the runtime never
/// receives it and cannot count it (rule 21's window, as for a client being replaced). Only
/// that instant: a message sent to the stopping app later in its grace period must be counted
/// (the explorer's seed 686).
fn crossed_unsubscribe(trace: &Trace, at: Duration) -> bool {
    trace.shutdown_starts.iter().any(|(_, began)| *began == at)
}

/// Whether a Core message sent at `at` reached the app's client between a poison and the
/// close of the connection it brought down.
fn poisoned_in_flight(trace: &Trace, at: Duration) -> bool {
    poison_deaths(trace).iter().any(|poisoned| {
        let closed = trace.journal.iter().find_map(|r| match r {
            Record::Disconnected { at: closed, .. } => {
                let closed = closed.saturating_duration_since(trace.start);
                (closed >= *poisoned).then_some(closed)
            }
            _ => None,
        });
        at >= *poisoned && closed.is_none_or(|closed| at <= closed)
    })
}

/// When a poison reached an app's client and brought it down (virtual time since the start):
/// each Core poison some subscription received, and each delivery of a stored poison.
pub(super) fn poison_deaths(trace: &Trace) -> Vec<Duration> {
    let stored: Vec<&(String, u64)> = trace
        .stored_poisons
        .iter()
        .filter_map(|p| p.stored.as_ref())
        .collect();
    let delivered = trace.journal.iter().filter_map(|r| match r {
        Record::Delivered {
            at,
            stream,
            stream_sequence,
            ..
        } if stored
            .iter()
            .any(|(s, sequence)| s == stream && sequence == stream_sequence) =>
        {
            Some(at.saturating_duration_since(trace.start))
        }
        _ => None,
    });
    trace
        .poisons
        .iter()
        .filter(|p| p.1 > 0)
        .map(|p| p.0)
        .chain(delivered)
        .collect()
}

/// Rule 20: a poison on Core (a message async-nats cannot read) brings down the app's
/// client, and the app connects a new one and subscribes its mounts again: it does not end.
/// Checked on what the graceful shutdowns reported: none ended with a failure, and, when a
/// poison reached the last app (no restart after it: that app runs until the scenario has
/// settled, ample time to connect again), its report names a recovery on a new client. An
/// app restarted soon after a poison may stop before its new client is made.
fn poisons_end_no_app(trace: &Trace, found: &mut Vec<Violation>) {
    let reached = trace.poisons.iter().filter(|p| p.1 > 0).count();
    if reached == 0 {
        return;
    }
    let last_poison = trace
        .poisons
        .iter()
        .filter(|p| p.1 > 0)
        .map(|p| p.0)
        .max()
        .unwrap_or_default();
    let restarted_after = restarted_since(trace, last_poison);
    // The recovery limit (MAX_RECOVERIES losses within 300 s) may end an app that more
    // poisons (stored ones included) and faults than that brought down: it says so.
    let losses = poison_deaths(trace).len()
        + trace
            .scenario
            .faults
            .iter()
            .filter(|f| matches!(f.fault, Fault::DropConnections | Fault::ServerDown(_)))
            .count();
    for (app, report) in &trace.reports {
        let at_the_limit = |failure: &str| {
            failure.contains("times within") && losses > ruststream_adapter::MAX_RECOVERIES
        };
        if let Some(failure) = &report.failure
            && blamed(failure).is_none()
            && !at_the_limit(failure)
        {
            found.push(Violation {
                invariant: "rule 20: a poison on Core ends no app",
                detail: format!("app {app} ended with a failure: {failure}"),
            });
        }
    }
    let recovered = trace
        .reports
        .iter()
        .flat_map(|(_, r)| r.recoveries.iter())
        .any(|r| r.reason.contains("new client"));
    if !restarted_after && trace.dropped.is_empty() && trace.trouble.is_empty() && !recovered {
        found.push(Violation {
            invariant: "rule 20: a client a poison brought down is replaced",
            detail: format!(
                "{reached} poison(s) reached the app, and no report names a recovery on a new client: {:?}",
                trace
                    .reports
                    .iter()
                    .map(|(app, r)| (app, &r.recoveries))
                    .collect::<Vec<_>>()
            ),
        });
    }
}

/// Whether the scenario restarts its app at or after `at` (virtual time since the start).
fn restarted_since(trace: &Trace, at: Duration) -> bool {
    trace.scenario.faults.iter().any(|f| {
        matches!(f.fault, Fault::Restart { .. }) && Duration::from_millis(u64::from(f.at_ms)) >= at
    })
}

/// The stream sequence an app's failure blames for bringing its client down, if it blames one
/// (rule 20: "… waited for the message at stream sequence N, …").
fn blamed(failure: &str) -> Option<u64> {
    let (_, rest) = failure.split_once("waited for the message at stream sequence ")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Rule 20: an app ends blaming a stored message only when that message is a poison (one
/// that brings the client down each time it is delivered); and a stored poison delivered
/// `SAME_SUSPECT_LIMIT + 2` times or more, with no restart after it and the consumer's
/// `max_deliver` not reached, ended an app with an error that named it, so that the operator
/// could remove it (the run plays the operator).
fn only_a_stored_poison_ends_an_app(trace: &Trace, found: &mut Vec<Violation>) {
    let poisons: Vec<u64> = trace
        .stored_poisons
        .iter()
        .filter_map(|p| p.stored.as_ref().map(|(_, sequence)| *sequence))
        .collect();
    for (app, report) in &trace.reports {
        let Some(failure) = &report.failure else {
            continue;
        };
        if let Some(sequence) = blamed(failure)
            && !poisons.contains(&sequence)
        {
            found.push(Violation {
                invariant: "rule 20: only a poison is blamed",
                detail: format!(
                    "app {app} ended blaming stream sequence {sequence}, no poison (the poisons: {poisons:?}): {failure}"
                ),
            });
        }
    }
    for poison in &trace.stored_poisons {
        let restarted_after = restarted_since(trace, poison.at);
        // The consumer's max_deliver reached: the server delivers it no more, and nothing
        // brings the client down again.
        let exhausted = poison.stored.as_ref().is_some_and(|(s, sequence)| {
            trace.journal.iter().any(|r| {
                matches!(r, Record::MaxDeliveries { stream, stream_sequence, .. }
                    if stream == s && stream_sequence == sequence)
            })
        });
        // Delivered often enough: SAME_SUSPECT_LIMIT losses in a row name it, and two losses of
        // other causes (a fault, the first delivery to a client whose mount then came back
        // to another suspect) may break a run.
        let deliveries = poison.stored.as_ref().map_or(0, |(s, sequence)| {
            trace
                .journal
                .iter()
                .filter(|r| {
                    matches!(r, Record::Delivered { stream, stream_sequence, .. }
                        if stream == s && stream_sequence == sequence)
                })
                .count()
        });
        let often = deliveries >= ruststream_adapter::SAME_SUSPECT_LIMIT as usize + 2;
        if poison.stored.is_some()
            && poison.removed.is_none()
            && often
            && !restarted_after
            && !exhausted
            && trace.dropped.is_empty()
            && trace.trouble.is_empty()
        {
            found.push(Violation {
                invariant: "rule 20: a stored poison ends the app, naming it",
                detail: format!(
                    "the poison at {:?} ({:?}) was never named by an app's failure; the failures: {:?}",
                    poison.at,
                    poison.stored,
                    trace
                        .reports
                        .iter()
                        .filter_map(|(app, r)| r.failure.as_ref().map(|f| (app, f)))
                        .collect::<Vec<_>>()
                ),
            });
        }
    }
}

/// Rules 4, 14 and 21: every Core retry below the limit is copied (the copy reached the server,
/// or the server refused it), or counted lost (a copy whose publish failed, or still waiting
/// at the end of a shutdown).
///
/// A missing copy whose publish fell due at the instant a fault closed the app's connection
/// (a drop or the server going down, between the run's end and its longest delay) is put in
/// `windows` instead: async-nats had taken it, and lost it with the connection.
fn core_retries_copied_or_counted(
    trace: &Trace,
    facts: &Facts,
    found: &mut Vec<Violation>,
    windows: &mut Vec<String>,
) {
    if !accounted(trace) {
        return;
    }
    for (mount, spec) in trace.scenario.mounts.iter().enumerate() {
        let Some(subject) = copy_subject(spec, mount) else {
            continue;
        };
        let copies: BTreeSet<(u64, u64)> = facts
            .publications
            .iter()
            .filter(|p| p.subject == subject)
            .filter_map(|p| Some((id_of(&p.payload)?, retry_count(p)?)))
            .collect();
        let copies_asked = |run: &HandlerRun| {
            let below = spec
                .max_attempts
                .is_none_or(|max| run.attempt < u64::from(max));
            // With strict order a keyed retry below the limit runs again in place: no copy
            // (rule 24; `strict_order_runs_in_place` checks that none is made).
            if in_place(spec, run) {
                return false;
            }
            let retries = spec.max_attempts.is_some() || spec.backoff.is_some();
            below
                && match run.end {
                    End::Retry | End::Err => retries,
                    End::RetryAfter(_) => true,
                    _ => false,
                }
        };
        // When a copy falls due after its run's end: exactly (`retry_after`, or at once), or
        // somewhere up to the backoff's cap.
        let due = |run: &HandlerRun| match (run.end, spec.backoff) {
            (End::RetryAfter(ms), _) => {
                let ms = Duration::from_millis(u64::from(ms));
                (ms, ms)
            }
            (_, Some((base, cap, _))) => (
                Duration::ZERO,
                Duration::from_millis(u64::from(base.max(cap))),
            ),
            (_, None) => (Duration::ZERO, Duration::ZERO),
        };
        let closed = |run: &HandlerRun| {
            run.ended.is_some_and(|ended| {
                let (first, last) = due(run);
                let closing = trace
                    .scenario
                    .faults
                    .iter()
                    .filter(|f| matches!(f.fault, Fault::DropConnections | Fault::ServerDown(_)))
                    .map(|f| Duration::from_millis(u64::from(f.at_ms)))
                    .chain(poison_deaths(trace));
                closing
                    .into_iter()
                    .any(|at| at >= ended + first && at <= ended + last)
            })
        };
        let (in_window, missing): (Vec<&HandlerRun>, Vec<&HandlerRun>) = trace
            .runs
            .iter()
            .filter(|r| r.mount == mount && r.ended.is_some() && copies_asked(r))
            .filter(|r| !copies.contains(&(r.id, r.attempt)))
            .partition(|r| closed(r));
        let missing: Vec<(u64, u64)> = missing.iter().map(|r| (r.id, r.attempt)).collect();
        for run in in_window {
            windows.push(format!(
                "rule 21's window: mount {} message {} attempt {}: its copy fell due as a fault closed the connection, and is not on the wire",
                mount_name(mount),
                run.id,
                run.attempt
            ));
        }
        let counted: u64 = trace
            .reports
            .iter()
            .map(|(_, r)| {
                let name = mount_name(mount);
                let losses: u64 = r
                    .core_losses
                    .iter()
                    .filter(|l| l.mount == name)
                    .map(|l| l.unpublished_copies)
                    .sum();
                let at_shutdown: u64 = r
                    .lost_copies
                    .iter()
                    .filter(|(m, _)| *m == name)
                    .map(|(_, n)| *n as u64)
                    .sum();
                losses + at_shutdown
            })
            .sum();
        if missing.len() as u64 > counted {
            found.push(Violation {
                invariant: "rule 21: a Core retry is copied or counted lost",
                detail: format!(
                    "mount {}: retries (message, attempt) {missing:?} have no copy on the wire, and the reports count {counted} copies lost",
                    mount_name(mount)
                ),
            });
        }
    }
}
