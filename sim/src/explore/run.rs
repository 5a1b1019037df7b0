//! Running a [`Scenario`] on the simulator: the app, its mounts and handlers (each handler doing
//! what its message's payload says for the attempt), the publishes and faults at their times,
//! restarts of the app, then quiet until everything has settled and a graceful shutdown. What
//! happened is kept in a [`Trace`] for the invariants.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_nats::jetstream::{consumer::pull, stream};
use ruststream_adapter::{
    Backoff, Batch, BatchHandled, Delivery, Handled, Key, Mount, Outcome, Settled, ShutdownReport,
};
use serde::{Deserialize, Serialize};

use super::scenario::{
    Attempt, DeadLetters, End, Fault, KeySpec, MessageSpec, MountSpec, PRIORITY_GROUP,
    PrioritySpec, Scenario, Source,
};
use crate::endpoint::sim::Sim;
use crate::model::consumer::ConsumerState;
use crate::model::journal::Record;
use crate::model::stream::StoredMessage;
use crate::{App, Running};

/// A message's payload, as its handler decodes it: its identity and what to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Payload {
    /// The message's identity in the scenario (its index).
    pub id: u64,
    /// What its handler does at each attempt (the last one again after it).
    pub attempts: Vec<Attempt>,
}

/// One handler run, as the handler recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerRun {
    /// The app (counted from 0, one more at each restart) it ran in.
    pub app: usize,
    /// The mount.
    pub mount: usize,
    /// The message.
    pub id: u64,
    /// Its attempt number, from the runtime (on a mount with strict order, the delivery's
    /// runs in place count: rule 24).
    pub attempt: u64,
    /// Its stream sequence (JetStream).
    pub stream_sequence: Option<u64>,
    /// Its delivery's count (JetStream): `attempt` but for the runs in place before it.
    pub delivered: Option<u64>,
    /// Its key, on a keyed mount, as the handler reads it from the delivery ([`key_of`]);
    /// `None` when the delivery has none.
    pub key: Option<String>,
    /// The batch it ran in, on a batch mount (batches numbered from 0 in the order they ran).
    pub batch: Option<u64>,
    /// When it started (virtual time since the start).
    pub started: Duration,
    /// When it ended; `None` when it never did (cancelled at its time limit, or still running
    /// when the simulation ended).
    pub ended: Option<Duration>,
    /// What it did.
    pub end: End,
}

/// A settlement an app's observer saw.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The app it was in.
    pub app: usize,
    /// When (virtual time since the start).
    pub at: Duration,
    /// What the runtime said of it.
    pub settled: Settled,
}

/// A message the scenario published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// Its identity.
    pub id: u64,
    /// The mount it is for.
    pub mount: usize,
    /// When (virtual time since the start).
    pub at: Duration,
    /// Its payload.
    pub payload: bytes::Bytes,
    /// How many subscriptions received it (Core); 0 when the publish failed or nothing listened.
    pub receivers: usize,
    /// Its stream sequence, when a stream stored it.
    pub stored: Option<u64>,
}

/// Everything a run of a scenario left, for the invariants.
#[derive(Debug, Clone)]
pub struct Trace {
    /// The scenario.
    pub scenario: Scenario,
    /// The model's journal.
    pub journal: Vec<Record>,
    /// The simulation's start (virtual), which the journal's instants count from.
    pub start: Instant,
    /// Every handler run.
    pub runs: Vec<HandlerRun>,
    /// Every settlement an observer saw.
    pub observed: Vec<Observed>,
    /// What each graceful shutdown reported, by app.
    pub reports: Vec<(usize, ShutdownReport)>,
    /// When each graceful shutdown ended (virtual time since the start), by app: a handler
    /// it reported abandoned runs on unrenewed after it.
    pub shutdown_ends: Vec<(usize, Duration)>,
    /// When each graceful shutdown of a restart (or of an app the operator took) began
    /// (virtual time since the start), by app: a Core message sent to it at that very instant
    /// may cross its mounts' `UNSUB` on the wire (rule 21's window).
    pub shutdown_starts: Vec<(usize, Duration)>,
    /// The apps that were dropped without a shutdown.
    pub dropped: Vec<usize>,
    /// The messages published.
    pub sent: Vec<Sent>,
    /// Each poison published ([`Scenario::poisons`]): when (virtual time since the start), and
    /// how many subscriptions received it.
    pub poisons: Vec<(Duration, usize)>,
    /// Each stored poison ([`Scenario::stored_poisons`]) and what the operator did with it.
    pub stored_poisons: Vec<StoredPoison>,
    /// The dead-letter stream's messages at the end.
    pub dead_letters: Vec<StoredMessage>,
    /// Each JetStream mount's consumer at the end, by mount.
    pub consumers: Vec<(usize, ConsumerState)>,
    /// Whether everything settled before the scenario's time ran out.
    pub settled: bool,
    /// Why the run could not go as the scenario says (an app that did not start), if it could
    /// not.
    pub trouble: Vec<String>,
    /// The apps that started while JetStream was off: their Core mounts found no stream for
    /// their dead letters and publish them plain, as start-up warned (rule 8).
    pub started_without_jetstream: Vec<usize>,
}

/// The name of mount `index`.
pub fn mount_name(index: usize) -> String {
    format!("m{index}")
}

/// The subject a message for mount `index` is published to.
pub fn subject(spec: &MountSpec, index: usize) -> String {
    match spec.source {
        Source::CoreSubject => format!("core.{index}"),
        Source::CoreWildcard => format!("wild.{index}.in"),
        Source::JetStream { .. } => format!("js{index}.in"),
    }
}

/// The subject message `message` is published to: its mount's ([`subject`]), or, on a mount
/// keyed by its subject's last token, `wild.<i>.k<n>` or `js<i>.k<n>` for key `k<n>`.
pub fn message_subject(spec: &MountSpec, index: usize, message: &MessageSpec) -> String {
    match (spec.key, message.key, &spec.source) {
        (Some((KeySpec::SubjectToken, _)), Some(key), Source::CoreWildcard) => {
            format!("wild.{index}.k{key}")
        }
        (Some((KeySpec::SubjectToken, _)), Some(key), Source::JetStream { .. }) => {
            format!("js{index}.k{key}")
        }
        _ => subject(spec, index),
    }
}

/// The header a header-keyed mount's messages carry their key in.
pub const KEY_HEADER: &str = "Order-Key";

/// The headers message `message` is published with: its key, on a header-keyed mount.
pub fn message_headers(spec: &MountSpec, message: &MessageSpec) -> Option<async_nats::HeaderMap> {
    match (spec.key, message.key) {
        (Some((KeySpec::Header, _)), Some(key)) => {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(KEY_HEADER, format!("k{key}").as_str());
            Some(headers)
        }
        _ => None,
    }
}

/// The index of the subject token a mount keyed by its subject orders by.
fn key_token(source: &Source) -> usize {
    match source {
        Source::CoreWildcard => 2,
        _ => 1,
    }
}

/// The key of `delivery` on mount `spec`, read as rule 24 says (the subject's token, or the
/// header's first value, its name in any letter case); `None` on a mount without a key, or for
/// a delivery without one (a Core wildcard's copy, whose subject has no third token; a message
/// without the header).
pub fn key_of(spec: &MountSpec, delivery: &Delivery) -> Option<String> {
    match spec.key?.0 {
        KeySpec::SubjectToken => delivery
            .subject
            .as_str()
            .split('.')
            .nth(key_token(&spec.source))
            .map(str::to_owned),
        KeySpec::Header => delivery.headers.as_deref().and_then(|h| {
            h.iter()
                .find(|(n, _)| AsRef::<str>::as_ref(n).eq_ignore_ascii_case(KEY_HEADER))
                .and_then(|(_, values)| values.first().map(|v| v.as_str().to_owned()))
        }),
    }
}

/// The dead-letter subject of mount `index`, if it has one.
pub fn dead_letter_subject(spec: &MountSpec, index: usize) -> Option<String> {
    spec.dead_letters.map(|d| match d {
        DeadLetters::Stored => format!("dlq.{index}"),
        DeadLetters::Plain => format!("lost.{index}"),
    })
}

/// The stream of JetStream mount `index`.
pub fn stream_name(index: usize) -> String {
    format!("S{index}")
}

/// The payload of message `id` (a JSON [`Payload`], or bytes that do not decode).
pub fn payload_of(id: u64, attempts: &[Attempt], undecodable: bool) -> bytes::Bytes {
    match undecodable {
        true => format!("undecodable {id}").into(),
        #[allow(clippy::expect_used)] // plain data: it always encodes
        false => serde_json::to_vec(&Payload {
            id,
            attempts: attempts.to_vec(),
        })
        .expect("a payload encodes")
        .into(),
    }
}

/// The message a payload is, read back: its identity.
pub fn id_of(payload: &[u8]) -> Option<u64> {
    if let Some(rest) = payload.strip_prefix(b"undecodable ") {
        return std::str::from_utf8(rest).ok()?.parse().ok();
    }
    serde_json::from_slice::<Payload>(payload)
        .ok()
        .map(|p| p.id)
}

#[derive(Default)]
struct Record_ {
    runs: Vec<HandlerRun>,
    observed: Vec<Observed>,
    /// How many batches have run.
    batches: u64,
}

type Shared = Arc<Mutex<Record_>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Record_> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

fn mount_of(spec: &MountSpec, index: usize) -> Mount {
    let name = mount_name(index);
    let mut mount = match &spec.source {
        Source::CoreSubject => Mount::core_subject(&name, &subject(spec, index)),
        Source::CoreWildcard => Mount::core_wildcard(
            &name,
            &format!("wild.{index}.*"),
            &format!("copies.{index}"),
        ),
        Source::JetStream { ack_wait_ms, .. } => {
            Mount::jetstream(&name, &stream_name(index), &format!("c{index}"))
                .ack_wait(Duration::from_millis(u64::from(*ack_wait_ms)))
        }
    };
    if let Some(n) = spec.max_attempts {
        mount = mount.max_attempts(n);
    }
    if let Some(subject) = dead_letter_subject(spec, index) {
        mount = mount.dead_letter(&subject);
    }
    if let Some((base, cap, jitter)) = spec.backoff {
        let backoff = Backoff::exponential(
            Duration::from_millis(u64::from(base)),
            Duration::from_millis(u64::from(cap)),
        );
        mount = mount.backoff(match jitter {
            true => backoff,
            false => backoff.jitter(0.0),
        });
    }
    if spec.provenance {
        mount = mount.provenance();
    }
    mount = mount.leases(spec.leases);
    if let Some(n) = NonZeroUsize::new(usize::from(spec.concurrency)) {
        mount = mount.concurrency(n);
    }
    if let Some(n) = spec.buffer.and_then(|b| NonZeroUsize::new(usize::from(b))) {
        mount = mount.subscription_buffer(n);
    }
    if let Some(ms) = spec.time_limit_ms {
        mount = mount.handler_time_limit(Duration::from_millis(u64::from(ms)));
    }
    if let Some((max, wait_ms)) = spec.batch {
        mount = mount.batch(usize::from(max), Duration::from_millis(u64::from(wait_ms)));
    }
    if let Some((kind, _)) = spec.key {
        mount = mount.key(match kind {
            KeySpec::SubjectToken => Key::subject_token(key_token(&spec.source)),
            KeySpec::Header => Key::header(KEY_HEADER),
        });
        mount = mount.strict_order(spec.strict_order);
    }
    match spec.priority {
        Some(PrioritySpec::Pinned { timeout_ms }) => {
            mount = mount
                .priority_group(PRIORITY_GROUP, ruststream_adapter::PriorityPolicy::Pinned)
                .priority_timeout(Duration::from_millis(u64::from(timeout_ms)));
        }
        Some(PrioritySpec::Overflow { min_pending }) => {
            mount = mount.priority_group(
                PRIORITY_GROUP,
                ruststream_adapter::PriorityPolicy::Overflow {
                    min_pending: u64::from(min_pending),
                },
            );
        }
        None => {}
    }
    mount
}

/// What message `payload`'s handler does at `attempt` (its last step again after them).
fn step_of(payload: &Payload, attempt: u64) -> Attempt {
    usize::try_from(attempt.saturating_sub(1))
        .ok()
        .and_then(|n| payload.attempts.get(n).or(payload.attempts.last()))
        .copied()
        .unwrap_or(Attempt {
            sleep_ms: 0,
            end: End::Ack,
        })
}

/// What a handler returns for `end` (a panic aside: the handler panics itself).
fn handled_of(end: End) -> Result<Outcome, String> {
    match end {
        End::Ack => Ok(Outcome::Ack),
        End::Retry => Ok(Outcome::Retry),
        End::RetryAfter(ms) => Ok(Outcome::RetryAfter(Duration::from_millis(u64::from(ms)))),
        End::Drop => Ok(Outcome::Drop),
        End::Reject => Ok(Outcome::Reject),
        End::NoOutcome | End::Panic => Ok(Outcome::None),
        End::Err => Err("explorer: the handler failed".to_owned()),
    }
}

/// Where a handler runs: its app, its mount's index and spec.
#[derive(Clone, Copy)]
struct RunsOn<'a> {
    app: usize,
    index: usize,
    spec: &'a MountSpec,
}

/// A handler run of `delivery` (message `id`, doing `end`) where `on` says, starting at
/// `started`, in `batch` if it is a batch member.
fn run_of(
    on: RunsOn<'_>,
    id: u64,
    delivery: &Delivery,
    end: End,
    started: Duration,
    batch: Option<u64>,
) -> HandlerRun {
    HandlerRun {
        app: on.app,
        mount: on.index,
        id,
        attempt: delivery.attempt.get(),
        stream_sequence: delivery.jetstream.as_ref().map(|j| j.stream_sequence),
        delivered: delivery.jetstream.as_ref().map(|j| j.delivered),
        key: key_of(on.spec, delivery),
        batch,
        started,
        ended: None,
        end,
    }
}

/// The batch handler of mount `index`: each member does what its message's payload says for
/// its attempt, as a single delivery's handler would, in one run as long as the longest
/// member's; its outcome is every member's when they all end alike, else one each (an `Err`
/// for a member that fails). A member that panics panics the batch: every member then ends
/// with no outcome, and is recorded as having panicked.
fn batch_handler(
    app: usize,
    index: usize,
    spec: &MountSpec,
    record: &Shared,
    clock: &Sim,
) -> impl Fn(Batch<Payload>) -> std::pin::Pin<Box<dyn std::future::Future<Output = BatchHandled> + Send>>
+ Send
+ Sync
+ 'static {
    let (record, clock, spec) = (record.clone(), clock.clone(), spec.clone());
    move |batch: Batch<Payload>| {
        let (record, clock, spec) = (record.clone(), clock.clone(), spec.clone());
        Box::pin(async move {
            let steps: Vec<Attempt> = batch
                .iter()
                .map(|m| step_of(&m.value, m.delivery.attempt.get()))
                .collect();
            let panics = steps.iter().any(|s| s.end == End::Panic);
            let sleep_ms = steps.iter().map(|s| s.sleep_ms).max().unwrap_or(0);
            let runs = {
                let mut r = lock(&record);
                let number = r.batches;
                r.batches += 1;
                let started = clock.elapsed();
                let first = r.runs.len();
                for (m, step) in batch.iter().zip(&steps) {
                    let end = if panics { End::Panic } else { step.end };
                    let on = RunsOn {
                        app,
                        index,
                        spec: &spec,
                    };
                    let run = run_of(on, m.value.id, &m.delivery, end, started, Some(number));
                    r.runs.push(run);
                }
                first..r.runs.len()
            };
            if sleep_ms > 0 {
                tokio::time::sleep(Duration::from_millis(u64::from(sleep_ms))).await;
            }
            // Not reached by a batch cancelled at its time limit: it never ends.
            {
                let mut r = lock(&record);
                let now = clock.elapsed();
                for run in runs {
                    r.runs[run].ended = Some(now);
                }
            }
            #[allow(clippy::panic)] // the scenario asks for it (rule 13)
            if panics {
                panic!("explorer: the batch handler panics");
            }
            let handled = |end: End| match handled_of(end) {
                Ok(outcome) => Handled::Outcome(outcome),
                Err(e) => Handled::Error(e),
            };
            match steps.split_first() {
                Some((first, rest)) if rest.iter().all(|s| s.end == first.end) => {
                    BatchHandled::All(handled(first.end))
                }
                _ => BatchHandled::Each(steps.iter().map(|s| handled(s.end)).collect()),
            }
        })
    }
}

/// The scenario's app, number `app`, its handlers recording into `shared`.
fn app_of(scenario: &Scenario, sim: &Sim, shared: &Shared, app: usize) -> App {
    let mut built = App::new(&sim.url()).grace_period(Duration::from_secs(5));
    for (index, spec) in scenario.mounts.iter().enumerate() {
        if spec.batch.is_some() {
            let handler = batch_handler(app, index, spec, shared, sim);
            built = built.mount_json_batch(mount_of(spec, index), handler);
            continue;
        }
        let (record, clock, spec_) = (shared.clone(), sim.clone(), spec.clone());
        built = built.mount_json(mount_of(spec, index), move |p: Payload, d: Delivery| {
            let (record, clock, spec) = (record.clone(), clock.clone(), spec_.clone());
            async move {
                let step = step_of(&p, d.attempt.get());
                let run = {
                    let mut r = lock(&record);
                    let on = RunsOn {
                        app,
                        index,
                        spec: &spec,
                    };
                    let run = run_of(on, p.id, &d, step.end, clock.elapsed(), None);
                    r.runs.push(run);
                    r.runs.len() - 1
                };
                if step.sleep_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(u64::from(step.sleep_ms))).await;
                }
                // Not reached by a run cancelled at its time limit: it never ends.
                lock(&record).runs[run].ended = Some(clock.elapsed());
                #[allow(clippy::panic)] // the scenario asks for it (rule 13)
                if step.end == End::Panic {
                    panic!("explorer: the handler panics");
                }
                handled_of(step.end)
            }
        });
    }
    let (observed, clock) = (shared.clone(), sim.clone());
    built.on_settled(move |settled: &Settled| {
        lock(&observed).observed.push(Observed {
            app,
            at: clock.elapsed(),
            settled: settled.clone(),
        });
    })
}

/// What happens at a moment of the run.
#[derive(Debug, Clone, Copy)]
enum Step {
    Publish(usize),
    Poison(usize),
    StoredPoison(usize),
    Operator,
    Fault(Fault),
    ServerUp,
    JetStreamOn,
    StartApp,
}

/// Streams and consumers the scenario needs before its app starts: a stream per JetStream
/// mount, the dead-letter stream, and the consumers with a `BackOff` (which the runtime never
/// creates: a `BackOff` needs `max_deliver`, set here above the mount's attempts).
fn prepare(sim: &Sim, scenario: &Scenario) -> Result<(), String> {
    let mut streams = vec![stream::Config {
        name: "DLQ".to_owned(),
        subjects: vec!["dlq.>".to_owned()],
        ..Default::default()
    }];
    for (index, spec) in scenario.mounts.iter().enumerate() {
        if spec.is_jetstream() {
            streams.push(stream::Config {
                name: stream_name(index),
                subjects: vec![format!("js{index}.>")],
                ..Default::default()
            });
        }
    }
    for config in streams {
        sim.create_stream(config).map_err(|e| e.to_string())?;
    }
    for (index, spec) in scenario.mounts.iter().enumerate() {
        if let Source::JetStream {
            ack_wait_ms,
            backoff_ms,
        } = &spec.source
            && !backoff_ms.is_empty()
        {
            let attempts = spec.max_attempts.unwrap_or(4) as usize;
            let max_deliver = attempts.max(backoff_ms.len()) + 2;
            let mut config = pull::Config {
                durable_name: Some(format!("c{index}")),
                ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_millis(u64::from(*ack_wait_ms)),
                backoff: backoff_ms
                    .iter()
                    .map(|ms| Duration::from_millis(u64::from(*ms)))
                    .collect(),
                max_deliver: i64::try_from(max_deliver).unwrap_or(i64::MAX),
                ..Default::default()
            };
            // The mount's priority group, as the runtime would make it (an existing consumer
            // is never changed: without it, start-up refuses the mount).
            if let Some(priority) = spec.priority {
                use async_nats::jetstream::consumer::PriorityPolicy as Js;
                config.priority_groups = vec![PRIORITY_GROUP.to_owned()];
                match priority {
                    PrioritySpec::Pinned { timeout_ms } => {
                        config.priority_policy = Js::PinnedClient;
                        config.priority_timeout = Duration::from_millis(u64::from(timeout_ms));
                    }
                    PrioritySpec::Overflow { .. } => config.priority_policy = Js::Overflow,
                }
            }
            sim.with(|server| server.create_consumer(&stream_name(index), config))
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Runs `scenario` on a new simulation and gives what happened.
pub fn run(scenario: &Scenario) -> Trace {
    let scenario = scenario.clone();
    Sim::run(|sim| async move { run_on(&sim, scenario).await })
}

async fn run_on(sim: &Sim, scenario: Scenario) -> Trace {
    let shared: Shared = Arc::default();
    let mut trace = Trace {
        scenario: scenario.clone(),
        journal: Vec::new(),
        start: sim.now(),
        runs: Vec::new(),
        observed: Vec::new(),
        reports: Vec::new(),
        shutdown_ends: Vec::new(),
        shutdown_starts: Vec::new(),
        dropped: Vec::new(),
        sent: Vec::new(),
        poisons: Vec::new(),
        stored_poisons: Vec::new(),
        dead_letters: Vec::new(),
        consumers: Vec::new(),
        settled: false,
        trouble: Vec::new(),
        started_without_jetstream: Vec::new(),
    };
    if let Err(e) = prepare(sim, &scenario) {
        trace
            .trouble
            .push(format!("the streams could not be made: {e}"));
        return trace;
    }
    let world = World {
        publishes: scenario
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let spec = &scenario.mounts[m.mount];
                let payload = payload_of(i as u64, &m.attempts, m.undecodable);
                let subject = message_subject(spec, m.mount, m);
                (m.at_ms, subject, payload, message_headers(spec, m))
            })
            .collect(),
        faults: scenario.faults.clone(),
        copy_patterns: vec!["core.>".to_owned(), "copies.>".to_owned()],
        dead_letter_patterns: vec!["dlq.>".to_owned(), "lost.>".to_owned()],
        settle_time: scenario.settle_time(),
        poisons: poisons_to_first(&scenario, &scenario.poisons, false),
        stored_poisons: poisons_to_first(&scenario, &scenario.stored_poisons, true),
        drained: drained_of(&scenario),
    };
    let played = play(sim, &world, &mut |app| app_of(&scenario, sim, &shared, app)).await;
    for (i, (m, sent)) in scenario.messages.iter().zip(&played.sent).enumerate() {
        trace.sent.push(Sent {
            id: i as u64,
            mount: m.mount,
            at: sent.at,
            payload: world.publishes[i].2.clone(),
            receivers: sent.receivers,
            stored: sent.stored.as_ref().map(|(_, sequence)| *sequence),
        });
    }
    let record = std::mem::take(&mut *lock(&shared));
    trace.runs = record.runs;
    trace.observed = record.observed;
    trace.reports = played.reports;
    trace.shutdown_ends = played.shutdown_ends;
    trace.shutdown_starts = played.shutdown_starts;
    trace.dropped = played.dropped;
    trace.stored_poisons = played.stored_poisoned.clone();
    trace.poisons = played
        .poisoned
        .iter()
        .map(|went| (went.at, went.receivers))
        .collect();
    trace.settled = played.settled;
    trace.trouble.extend(played.trouble);
    trace.started_without_jetstream = played.started_without_jetstream;
    trace.journal = sim.journal();
    trace.dead_letters = sim.stream_messages("DLQ").unwrap_or_default();
    for (index, spec) in scenario.mounts.iter().enumerate() {
        if spec.is_jetstream()
            && let Ok(state) = sim.consumer_state(&stream_name(index), &format!("c{index}"))
        {
            trace.consumers.push((index, state));
        }
    }
    trace
}

/// [`World::drained`] for `scenario`: only when a mount's overflow group can leave messages
/// undelivered ([`Scenario::overflow_threshold`]); its consumer has settled as far as it can
/// by [`Scenario::drained_as_far_as_it_can`], every other one when it holds nothing.
fn drained_of(scenario: &Scenario) -> Option<Drained> {
    let overflowing: Vec<usize> = (0..scenario.mounts.len())
        .filter(|&i| scenario.overflow_threshold(i).is_some())
        .collect();
    if overflowing.is_empty() {
        return None;
    }
    let scenario = scenario.clone();
    Some(Box::new(move |stream, consumer, pending, ack_pending| {
        let mount = overflowing
            .iter()
            .copied()
            .find(|&i| stream == stream_name(i) && consumer == format!("c{i}"));
        match mount {
            Some(i) => scenario.drained_as_far_as_it_can(i, pending, ack_pending),
            None => pending == 0 && ack_pending == 0,
        }
    }))
}

/// Publishes a poison to `subject`: a message with [`POISON_HEADERS`].
fn publish_poison(sim: &Sim, subject: &str) -> Result<crate::Published, crate::SimError> {
    sim.publish_message(crate::Publish::new(subject, "poison").unreadable_headers(POISON_HEADERS))
}

/// Poisons at `times`, each to the subject of the scenario's first mount that is a JetStream
/// one (`jetstream`) or a Core one; none when it has no such mount.
fn poisons_to_first(scenario: &Scenario, times: &[u32], jetstream: bool) -> Vec<(u32, String)> {
    scenario
        .mounts
        .iter()
        .enumerate()
        .find(|(_, m)| m.is_jetstream() == jetstream)
        .map(|(index, spec)| {
            let subject = subject(spec, index);
            times.iter().map(|at| (*at, subject.clone())).collect()
        })
        .unwrap_or_default()
}

/// What a run plays, whatever its app: publishes and faults at their times.
pub(crate) struct World {
    /// The publishes: when (virtual milliseconds from the start), the subject, the payload,
    /// the headers; by time.
    pub(crate) publishes: Vec<(u32, String, bytes::Bytes, Option<async_nats::HeaderMap>)>,
    /// The faults, by time.
    pub(crate) faults: Vec<super::scenario::TimedFault>,
    /// What [`Fault::FailCopies`] makes fail: subject patterns.
    pub(crate) copy_patterns: Vec<String>,
    /// What [`Fault::FailDeadLetters`] makes fail: subject patterns.
    pub(crate) dead_letter_patterns: Vec<String>,
    /// How long the run waits, after its last publish and fault, for everything to settle.
    pub(crate) settle_time: Duration,
    /// Poisons: when, and the subject; a message with a header block async-nats cannot read
    /// ([`POISON_HEADERS`]), which brings down the client it reaches.
    pub(crate) poisons: Vec<(u32, String)>,
    /// Stored poisons: when, and the subject (one a stream stores).
    pub(crate) stored_poisons: Vec<(u32, String)>,
    /// When a consumer may keep messages it cannot deliver (an overflow priority group above
    /// 1, nothing else pulling): whether a consumer (stream, name), with its `num_pending`
    /// and `num_ack_pending`, has settled as far as it can; `None`: every consumer settles
    /// to nothing ([`Sim::run_until_idle`]).
    pub(crate) drained: Option<Drained>,
}

/// Whether a consumer (stream, name), with its `num_pending` and `num_ack_pending`, has
/// settled as far as it can ([`World::drained`]).
pub(crate) type Drained = Box<dyn Fn(&str, &str, u64, u64) -> bool + Send + Sync>;

/// [`Sim::run_until_idle`], but where some consumer may keep what it cannot deliver
/// ([`World::drained`]): lets virtual time pass until nothing has happened for `quiet` (pull
/// requests aside) and every consumer has settled as far as it can, at most `quiet` four
/// times over; whether it came to that.
async fn drained_as_far_as_it_can(sim: &Sim, drained: &Drained, quiet: Duration) -> bool {
    let from = sim.now();
    let limit = quiet * 4;
    let mut scanned = 0;
    let mut since = sim.now();
    let mut step = Duration::from_millis(10);
    loop {
        let now = sim.now();
        let (seen, activity, settled) = sim.with(|s| {
            let journal = s.journal();
            let activity = journal
                .get(scanned..)
                .unwrap_or_default()
                .iter()
                .filter(|r| match r {
                    Record::Published { subject, .. } => {
                        !subject.starts_with(crate::model::server::PULL_PREFIX)
                    }
                    _ => true,
                })
                .count();
            let len = journal.len();
            let consumers: Vec<(String, String)> = s
                .streams
                .iter()
                .flat_map(|(stream, entry)| {
                    entry
                        .consumers
                        .keys()
                        .map(move |c| (stream.clone(), c.clone()))
                })
                .collect();
            let settled = consumers.iter().all(|(stream, c)| {
                s.consumer_state(stream, c).is_ok_and(|state| {
                    drained(stream, c, state.num_pending, state.num_ack_pending as u64)
                })
            });
            (len, activity, settled)
        });
        if seen != scanned {
            step = Duration::from_millis(10);
        }
        scanned = seen;
        if activity > 0 {
            since = now;
        } else if now.saturating_duration_since(since) >= quiet && settled {
            return true;
        }
        let waited = now.saturating_duration_since(from);
        if waited >= limit {
            return false;
        }
        tokio::time::sleep(step.min(limit - waited)).await;
        step = (step * 2).min(Duration::from_millis(500));
    }
}

/// A poison a stream stored, and what the operator did with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPoison {
    /// When it was published (virtual time since the start).
    pub at: Duration,
    /// Its stream and stream sequence (none when the publish failed).
    pub stored: Option<(String, u64)>,
    /// When the operator removed it (`STREAM.MSG.DELETE`), having read an app's failure that
    /// named it, and started the service again.
    pub removed: Option<Duration>,
}

/// How often the run's operator reads the running app's health for a failure that names a
/// stored poison: every 500 ms of virtual time.
const OPERATOR_EVERY_MS: u32 = 500;

/// The header block of a poison: a value with a lone carriage return, which nats-server
/// forwards and async-nats 0.51 cannot read (its connection task panics).
pub const POISON_HEADERS: &[u8] = b"NATS/1.0\r\nX-Poison: a\rb\r\n\r\n";

/// One publish of a [`World`], as it went.
pub(crate) struct Went {
    /// When (virtual time since the start).
    pub(crate) at: Duration,
    /// How many subscriptions received it (0 when the publish failed or nothing listened).
    pub(crate) receivers: usize,
    /// Its stream and stream sequence, when a stream stored it.
    pub(crate) stored: Option<(String, u64)>,
}

/// What playing a [`World`] left, whatever its app.
pub(crate) struct Played {
    /// Each publish, in the world's order.
    pub(crate) sent: Vec<Went>,
    /// Each poison, in the world's order.
    pub(crate) poisoned: Vec<Went>,
    /// Each stored poison, in the world's order.
    pub(crate) stored_poisoned: Vec<StoredPoison>,
    /// What each graceful shutdown reported, by app.
    pub(crate) reports: Vec<(usize, ShutdownReport)>,
    /// When each graceful shutdown ended, by app.
    pub(crate) shutdown_ends: Vec<(usize, Duration)>,
    /// When each graceful shutdown beside the world began, by app.
    pub(crate) shutdown_starts: Vec<(usize, Duration)>,
    /// The apps dropped without a shutdown.
    pub(crate) dropped: Vec<usize>,
    /// Whether everything settled before the time ran out.
    pub(crate) settled: bool,
    /// What could not go as the world says.
    pub(crate) trouble: Vec<String>,
    /// The apps that started while JetStream was off.
    pub(crate) started_without_jetstream: Vec<usize>,
}

/// Plays `world` on `sim` with the apps `make_app` builds (number 0 first, one more at each
/// restart): the publishes and faults at their times, then quiet until everything has
/// settled, and a graceful shutdown of the last app.
pub(crate) async fn play(
    sim: &Sim,
    world: &World,
    make_app: &mut dyn FnMut(usize) -> App,
) -> Played {
    let start = sim.now();
    let mut played = Played {
        sent: Vec::new(),
        poisoned: Vec::new(),
        stored_poisoned: Vec::new(),
        reports: Vec::new(),
        shutdown_ends: Vec::new(),
        shutdown_starts: Vec::new(),
        dropped: Vec::new(),
        settled: false,
        trouble: Vec::new(),
        started_without_jetstream: Vec::new(),
    };
    // The timeline: publishes and faults at their times (a publish first at the same
    // instant), and what a fault schedules (the server back up, JetStream back on, the new app
    // after a restart).
    let mut timeline: Vec<(u32, u8, usize, Step)> = Vec::new();
    for (i, (at_ms, _, _, _)) in world.publishes.iter().enumerate() {
        timeline.push((*at_ms, 0, i, Step::Publish(i)));
    }
    for (i, f) in world.faults.iter().enumerate() {
        timeline.push((f.at_ms, 1, i, Step::Fault(f.fault)));
    }
    for (i, (at_ms, _)) in world.poisons.iter().enumerate() {
        timeline.push((*at_ms, 2, i, Step::Poison(i)));
    }
    for (i, (at_ms, _)) in world.stored_poisons.iter().enumerate() {
        timeline.push((*at_ms, 3, i, Step::StoredPoison(i)));
    }
    timeline.sort_by_key(|(at, order, i, _)| (*at, *order, *i));
    let mut app = 0;
    let mut running: Option<Running> = start_app(make_app(app), app, &mut played).await;
    // A graceful restart's shutdown runs beside the timeline, as a process stopping does
    // while the world goes on (it may take its whole grace period when the server is down);
    // the next app starts once it has ended.
    let mut stopping_shutdown: Option<(usize, Stopping)> = None;
    let mut next = 0;
    let mut later: Vec<(u32, Step)> = Vec::new();
    let mut down = false;
    let mut jetstream_on = true;
    loop {
        // The next thing to happen: from the timeline or from what faults scheduled.
        later.sort_by_key(|(at, _)| *at);
        let from_timeline = timeline.get(next).map(|(at, _, _, step)| (*at, *step));
        let from_later = later.first().copied();
        let (at, step) = match (from_timeline, from_later) {
            (None, None) => break,
            (Some(t), None) => {
                next += 1;
                t
            }
            (None, Some(l)) => {
                later.remove(0);
                l
            }
            (Some(t), Some(l)) if l.0 < t.0 => {
                later.remove(0);
                l
            }
            (Some(t), Some(_)) => {
                next += 1;
                t
            }
        };
        let target = Duration::from_millis(u64::from(at));
        let now = sim.elapsed();
        if target > now {
            sim.advance(target - now).await;
        }
        match step {
            Step::Publish(i) => {
                let (_, subject, payload, headers) = &world.publishes[i];
                let published = match headers {
                    None => sim.publish(subject, payload.clone()),
                    Some(headers) => sim.publish_message(
                        crate::Publish::new(subject.as_str(), payload.clone())
                            .headers(headers.clone()),
                    ),
                };
                played.sent.push(Went {
                    at: sim.elapsed(),
                    receivers: published.as_ref().map_or(0, |p| p.receivers),
                    stored: published
                        .ok()
                        .and_then(|p| p.stored)
                        .map(|ack| (ack.stream, ack.sequence)),
                });
            }
            Step::Poison(i) => {
                let published = publish_poison(sim, &world.poisons[i].1);
                played.poisoned.push(Went {
                    at: sim.elapsed(),
                    receivers: published.as_ref().map_or(0, |p| p.receivers),
                    stored: None,
                });
            }
            Step::StoredPoison(i) => {
                let stored = publish_poison(sim, &world.stored_poisons[i].1)
                    .ok()
                    .and_then(|p| p.stored)
                    .map(|ack| (ack.stream, ack.sequence));
                played.stored_poisoned.push(StoredPoison {
                    at: sim.elapsed(),
                    stored,
                    removed: None,
                });
                later.push((at + OPERATOR_EVERY_MS, Step::Operator));
            }
            Step::Operator => {
                if operate(
                    sim,
                    start,
                    &mut running,
                    app,
                    &mut stopping_shutdown,
                    &mut played,
                ) {
                    later.push((at, Step::StartApp));
                }
                // While the world goes on; after it, the operator's wait below takes over.
                let world_goes_on = next < timeline.len()
                    || later.iter().any(|(_, s)| !matches!(s, Step::Operator));
                if poison_left(&played) && world_goes_on {
                    later.push((at + OPERATOR_EVERY_MS, Step::Operator));
                }
            }
            Step::Fault(Fault::LoseAcks(n)) => sim.lose_acks(usize::from(n)),
            Step::Fault(Fault::FailCopies(n)) => {
                for pattern in &world.copy_patterns {
                    let _ = sim.fail_publishes(pattern, usize::from(n));
                }
            }
            Step::Fault(Fault::FailDeadLetters(n)) => {
                for pattern in &world.dead_letter_patterns {
                    let _ = sim.fail_publishes(pattern, usize::from(n));
                }
            }
            Step::Fault(Fault::DropConnections) => {
                sim.drop_connections();
            }
            Step::Fault(Fault::ServerDown(ms)) => {
                if !down {
                    down = true;
                    sim.go_down();
                    later.push((at + ms, Step::ServerUp));
                }
            }
            Step::Fault(Fault::JetStreamOff(ms)) => {
                sim.jetstream(false);
                jetstream_on = false;
                later.push((at + ms, Step::JetStreamOn));
            }
            Step::Fault(Fault::Restart { graceful, after_ms }) => {
                if let Some(stopping) = running.take() {
                    match graceful {
                        true => {
                            played.shutdown_starts.push((app, sim.elapsed()));
                            stopping_shutdown = Some((
                                app,
                                tokio::spawn(async move {
                                    let report = stopping.shutdown().await;
                                    (report, tokio::time::Instant::now().into_std())
                                }),
                            ));
                        }
                        false => {
                            drop(stopping);
                            played.dropped.push(app);
                        }
                    }
                    later.push((at + after_ms, Step::StartApp));
                }
            }
            Step::ServerUp => {
                down = false;
                sim.come_up();
            }
            Step::JetStreamOn => {
                sim.jetstream(true);
                jetstream_on = true;
            }
            Step::StartApp => {
                if stopping_shutdown
                    .as_ref()
                    .is_some_and(|(_, shutdown)| !shutdown.is_finished())
                {
                    // Started once the app before it has stopped.
                    later.push((at + 100, Step::StartApp));
                } else if down {
                    // Started once the server is back.
                    later.push((at + 100, Step::StartApp));
                } else if running.is_none() {
                    finish_shutdown(&mut stopping_shutdown, start, &mut played).await;
                    app += 1;
                    if !jetstream_on {
                        played.started_without_jetstream.push(app);
                    }
                    running = start_app(make_app(app), app, &mut played).await;
                }
            }
        }
    }
    finish_shutdown(&mut stopping_shutdown, start, &mut played).await;
    if running.is_none() {
        app += 1;
        if !jetstream_on {
            played.started_without_jetstream.push(app);
        }
        running = start_app(make_app(app), app, &mut played).await;
    }
    // The operator stays until every stored poison is removed, or a minute has passed.
    let mut waited = 0;
    while poison_left(&played) && waited < 60_000 {
        sim.advance(Duration::from_millis(u64::from(OPERATOR_EVERY_MS)))
            .await;
        waited += OPERATOR_EVERY_MS;
        if operate(
            sim,
            start,
            &mut running,
            app,
            &mut stopping_shutdown,
            &mut played,
        ) {
            finish_shutdown(&mut stopping_shutdown, start, &mut played).await;
            app += 1;
            running = start_app(make_app(app), app, &mut played).await;
        }
    }
    let quiet = world.settle_time;
    played.settled = match &world.drained {
        None => sim.run_until_idle(quiet, quiet * 4).await.is_ok(),
        Some(drained) => drained_as_far_as_it_can(sim, drained, quiet).await,
    };
    if let Some(last) = running.take() {
        let report = last.shutdown().await;
        // What the app wrote as its shutdown ended (a copy async-nats held until its
        // connection came back, sent as the flush at shutdown waited for it) is on the
        // loopback socket, not yet read by the model: the journal is read once the model has
        // read the app's connections to their end (seed 454458). A dropped app's connection
        // may stay open: a second at most.
        let _ = sim
            .run_until(
                "the app's connections read to their end",
                Duration::from_secs(1),
                |s| s.connections().is_empty(),
            )
            .await;
        played.reports.push((app, report));
        let ended = sim.now().saturating_duration_since(start);
        played.shutdown_ends.push((app, ended));
    }
    played
}

/// Whether a stored poison is still there for the operator to look for.
fn poison_left(played: &Played) -> bool {
    played
        .stored_poisoned
        .iter()
        .any(|p| p.stored.is_some() && p.removed.is_none())
}

/// The operator of a service with a stored poison: when the running app has failed naming one
/// (`nats stream rmm <stream> <sequence>`, rule 20), removes it as the error says; a failed
/// app, whatever its failure, is shut down beside the world (its report kept, for the
/// invariants), as a graceful restart's is, and the service is to start again once it has
/// stopped. Whether it took a failed app (not while another app's shutdown is under way).
fn operate(
    sim: &Sim,
    start: Instant,
    running: &mut Option<Running>,
    app: usize,
    stopping: &mut Option<(usize, Stopping)>,
    played: &mut Played,
) -> bool {
    if stopping.is_some() {
        return false;
    }
    let Some(failure) = running.as_ref().and_then(|r| r.health().get().failure) else {
        return false;
    };
    let named = played.stored_poisoned.iter().position(|p| {
        p.removed.is_none()
            && p.stored.as_ref().is_some_and(|(stream, sequence)| {
                failure.contains(&format!("nats stream rmm {stream} {sequence}`"))
            })
    });
    if let Some(index) = named {
        if let Some((stream, sequence)) = played.stored_poisoned[index].stored.clone() {
            let _ = sim.with(|s| s.delete_message(&stream, sequence));
        }
        played.stored_poisoned[index].removed = Some(sim.now().saturating_duration_since(start));
    }
    let Some(failed) = running.take() else {
        return false;
    };
    played.shutdown_starts.push((app, sim.elapsed()));
    *stopping = Some((
        app,
        tokio::spawn(async move {
            let report = failed.shutdown().await;
            (report, tokio::time::Instant::now().into_std())
        }),
    ));
    true
}

/// A graceful restart's shutdown under way: its report, and when it ended.
type Stopping = tokio::task::JoinHandle<(ShutdownReport, Instant)>;

/// Waits for a graceful restart's shutdown, if one is under way, and keeps its report.
async fn finish_shutdown(
    stopping: &mut Option<(usize, Stopping)>,
    start: Instant,
    played: &mut Played,
) {
    if let Some((app, shutdown)) = stopping.take() {
        match shutdown.await {
            Ok((report, ended)) => {
                played.reports.push((app, report));
                played
                    .shutdown_ends
                    .push((app, ended.saturating_duration_since(start)));
            }
            Err(e) => played
                .trouble
                .push(format!("app {app}'s shutdown did not end: {e}")),
        }
    }
}

/// Starts app number `app`; one that does not start is noted in the trouble.
async fn start_app(built: App, app: usize, played: &mut Played) -> Option<Running> {
    match built.start().await {
        Ok(running) => Some(running),
        Err(e) => {
            played.trouble.push(format!("app {app} did not start: {e}"));
            None
        }
    }
}
