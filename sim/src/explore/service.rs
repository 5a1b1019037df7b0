//! Exploring your own service: its app, mounts and handlers, unchanged, on the simulator, with
//! the messages it draws from a seed and faults the explorer draws (lost acknowledgements,
//! failing dead letters and copies, dropped connections, the server down, JetStream off, the
//! app restarted gracefully or dropped), checked against the contract's invariants that hold
//! whatever a handler decides, and against your own.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//! use ruststream_sim::async_nats::jetstream::stream;
//! use ruststream_sim::explore::service::{Draw, Explorer, Message, Service, ServiceRun};
//! use ruststream_sim::{App, Delivery, Mount, Outcome, Sim};
//!
//! /// Orders: each one charged once, whatever fails around it.
//! #[derive(Default)]
//! struct Orders {
//!     charged: Arc<Mutex<Vec<u64>>>,
//! }
//!
//! impl Service for Orders {
//!     fn app(&self, sim: &Sim) -> App {
//!         let charged = self.charged.clone();
//!         App::new(&sim.url())
//!             .stream(stream::Config {
//!                 name: "ORDERS".into(),
//!                 subjects: vec!["orders.>".into()],
//!                 ..Default::default()
//!             })
//!             .mount(
//!                 Mount::jetstream("orders", "ORDERS", "worker").max_attempts(3),
//!                 move |d: Delivery| {
//!                     let charged = charged.clone();
//!                     async move {
//!                         let id: u64 = std::str::from_utf8(&d.payload)
//!                             .ok()
//!                             .and_then(|s| s.parse().ok())
//!                             .unwrap_or(0);
//!                         // Idempotent: a redelivery of a charged order is acknowledged.
//!                         let mut charged = charged.lock().unwrap();
//!                         if !charged.contains(&id) {
//!                             charged.push(id);
//!                         }
//!                         Outcome::Ack
//!                     }
//!                 },
//!             )
//!     }
//!
//!     fn messages(&self, draw: &mut Draw) -> Vec<Message> {
//!         (0..draw.below(20) + 1)
//!             .map(|id| Message::new("orders.new", id.to_string()))
//!             .collect()
//!     }
//!
//!     fn check(&self, run: &ServiceRun) -> Result<(), String> {
//!         let charged = self.charged.lock().unwrap();
//!         match charged.len() == run.sent.len() {
//!             true => Ok(()),
//!             false => Err(format!("{} orders sent, {} charged", run.sent.len(), charged.len())),
//!         }
//!     }
//! }
//!
//! Explorer::new(Orders::default).seeds(0..5).run().assert_passed();
//! ```
//!
//! # What is checked
//! From the model's journal and every settlement the app reported
//! ([`App::on_settled`](ruststream_adapter::App::on_settled); an observer your app sets is kept):
//! - at most one settlement (`+ACK`, `-NAK`, `+TERM`) reaches the server for each JetStream
//!   delivery;
//! - rule 16: no settlement of a delivery reaches the server after the server delivered the
//!   message again (unless an acknowledgement was lost or the connection broke meanwhile);
//! - rules 2-3: no attempt past a mount's `max_attempts` runs its handler;
//! - Part C: a `+ACK` only after the handler returned `ack`, a `+TERM` only after a drop, a
//!   reject, the limit or an undecodable payload, a `-NAK` only after a retry (or a dead letter
//!   that failed);
//! - rules 8 and 9: a JetStream delivery reported dead-lettered had its dead letter, its
//!   payload as delivered, stored on the mount's dead-letter subject before its `+TERM`;
//! - then your [`Service::check`], on the [`ServiceRun`].
//!
//! A seed also fails when the service cannot be prepared or its first app does not start
//! (every check would pass on nothing). `max_attempts` is read back from the app's own
//! mounts, so a limit the service sets wrongly is not caught. Not checked here (the
//! explorer's own scenarios check them, with handlers whose every decision is known): that every Core message is handled or counted lost (rule 21), that
//! each Core copy follows the attempt it names (rule 4), and that two runs of one delivery
//! never overlap under a lease (rule 16).
//!
//! # Reproducing a failure
//! A seed is a reproduction: it draws the same messages (from [`Service::messages`]) and the
//! same faults, and the simulator plays them the same way. A failing seed is named in the
//! panic of [`Explored::assert_passed`]; with `RUSTSTREAM_EXPLORE_SEED=<seed>` in the
//! environment, [`Explorer::run`] runs that seed alone, so the test reruns it.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use proptest::prelude::Rng;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use ruststream_adapter::{Descriptor, Disposition, Outcome, Settled, ShutdownReport};

use super::invariants::{self, Facts, MountsByConsumer, Violation};
use super::run::{Observed, World, play};
use super::scenario::{TimedFault, fault};
use crate::model::consumer::ConsumerState;
use crate::model::journal::Record;
use crate::model::stream::StoredMessage;
use crate::model::wire::AckKind;
use crate::{App, Sim};

/// A service to explore: how its app is built and what it is sent.
///
/// One value is made for each seed (see [`Explorer::new`]), so what its handlers record
/// (in an `Arc` the value holds) is that seed's alone.
pub trait Service {
    /// What the service needs before its app starts (streams and consumers it does not
    /// declare itself, say).
    ///
    /// # Errors
    /// Why it could not be made: the seed fails, with this as its trouble.
    fn prepare(&self, sim: &Sim) -> Result<(), String> {
        let _ = sim;
        Ok(())
    }

    /// The app, connected to `sim.url()`, as `main` builds it: called once before the start to
    /// read its mounts back (that app is never started), once at the start, and again for each
    /// restart the explorer draws (the new app consumes from the same durable consumers).
    fn app(&self, sim: &Sim) -> App;

    /// The messages a seed publishes, in order: the explorer spreads them over the busy time
    /// ([`Explorer::busy`]) at times it draws.
    fn messages(&self, draw: &mut Draw) -> Vec<Message>;

    /// The service's own invariant, after the run (each order charged at most once, every
    /// order charged or dead-lettered, say).
    ///
    /// # Errors
    /// What does not hold: the seed fails with it.
    fn check(&self, run: &ServiceRun) -> Result<(), String> {
        let _ = run;
        Ok(())
    }
}

/// A message a service is sent: a subject and a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Where it is published.
    pub subject: String,
    /// What it carries.
    pub payload: bytes::Bytes,
}

impl Message {
    /// A message to `subject` carrying `payload`.
    pub fn new(subject: impl Into<String>, payload: impl Into<bytes::Bytes>) -> Self {
        Self {
            subject: subject.into(),
            payload: payload.into(),
        }
    }
}

/// Random draws from a seed, for [`Service::messages`]: the same seed draws the same values.
pub struct Draw {
    rng: TestRng,
}

impl std::fmt::Debug for Draw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Draw").finish_non_exhaustive()
    }
}

impl Draw {
    /// The draws of `seed`.
    pub fn of_seed(seed: u64) -> Self {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        // Apart from the faults' draws of the same seed.
        bytes[8] = 1;
        Self {
            rng: TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
        }
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        match n {
            0 => 0,
            n => self.rng.next_u64() % n,
        }
    }

    /// `true` with probability `p` (0.0 to 1.0; outside that, never or always).
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// One of `items`, or `None` when there are none.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        let n = u64::try_from(items.len()).unwrap_or(u64::MAX);
        items.get(usize::try_from(self.below(n)).unwrap_or(0))
    }
}

/// A message the run published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentMessage {
    /// The message.
    pub message: Message,
    /// When (virtual time since the start).
    pub at: Duration,
    /// How many subscriptions received it (Core); 0 when nothing listened or the server was
    /// down, so it never reached the app.
    pub receivers: usize,
    /// Its stream and stream sequence, when a stream stored it.
    pub stored: Option<(String, u64)>,
}

/// What a run of a seed did, for [`Service::check`].
#[derive(Debug, Clone)]
pub struct ServiceRun {
    /// The seed.
    pub seed: u64,
    /// The messages published, in order.
    pub sent: Vec<SentMessage>,
    /// The faults, by time.
    pub faults: Vec<TimedFault>,
    /// Every settlement the apps reported: by app (0 first, one more at each restart).
    pub settled: Vec<(usize, Duration, Settled)>,
    /// What each graceful shutdown reported, by app.
    pub reports: Vec<(usize, ShutdownReport)>,
    /// The apps dropped without a shutdown.
    pub dropped: Vec<usize>,
    /// The model's journal: every publish, delivery and acknowledgement, in order.
    pub journal: Vec<Record>,
    /// The simulation's start, which the journal's instants count from.
    pub start: std::time::Instant,
    /// Every stream's messages at the end (the dead-letter streams among them), by name.
    pub streams: BTreeMap<String, Vec<StoredMessage>>,
    /// Each JetStream mount's consumer at the end, by mount name.
    pub consumers: BTreeMap<String, ConsumerState>,
    /// Whether the app had gone quiet at the end (no message still waiting for a retry); when
    /// not, the run was cut off and a check that every message ended somewhere can fail for
    /// that alone (see [`Explorer::settle_time`]).
    pub quiet: bool,
    /// What could not go as drawn (an app that did not start), if anything.
    pub trouble: Vec<String>,
}

/// What one seed came to.
#[derive(Debug, Clone)]
pub struct Outcomes {
    /// The seed.
    pub seed: u64,
    /// The invariants that broke (none: it passed), yours ([`Service::check`]) named
    /// `the service's check`.
    pub violations: Vec<Violation>,
    /// The run.
    pub run: ServiceRun,
}

/// What a range of seeds came to.
#[derive(Debug, Clone)]
pub struct Explored {
    /// How many seeds ran.
    pub seeds: u64,
    /// The seeds that failed, with what broke.
    pub failures: Vec<Outcomes>,
}

impl Explored {
    /// What failed, as [`assert_passed`](Self::assert_passed) says it: each failing seed (at
    /// most ten) with what broke, the first one's faults and whether it went quiet, and how to
    /// rerun it alone; that no seed ran, when none did; `None` when every seed passed.
    pub fn failure_text(&self) -> Option<String> {
        if self.seeds == 0 {
            return Some(
                "no seed ran: the range of seeds is empty (see Explorer::seeds)".to_owned(),
            );
        }
        let first = self.failures.first()?;
        let mut text = format!(
            "{} of {} seeds broke an invariant:\n",
            self.failures.len(),
            self.seeds
        );
        for failed in self.failures.iter().take(10) {
            for v in &failed.violations {
                text.push_str(&format!("  seed {}: {v}\n", failed.seed));
            }
        }
        let run = &first.run;
        text.push_str(&format!(
            "seed {}: faults {:?}; {} messages sent, {} settlements reported; {}{}\n",
            first.seed,
            run.faults,
            run.sent.len(),
            run.settled.len(),
            match run.quiet {
                true => "quiet at the end",
                false => "NOT quiet at the end: the run was cut off, raise Explorer::settle_time",
            },
            match run.trouble.is_empty() {
                true => String::new(),
                false => format!("; trouble: {:?}", run.trouble),
            }
        ));
        text.push_str(&format!(
            "rerun one alone: RUSTSTREAM_EXPLORE_SEED={} with this test's command",
            first.seed
        ));
        Some(text)
    }

    /// Panics with [`failure_text`](Self::failure_text) when a seed failed, or none ran.
    ///
    /// # Panics
    /// As said: that is its purpose, in a test.
    #[track_caller]
    pub fn assert_passed(&self) {
        if let Some(text) = self.failure_text() {
            #[allow(clippy::panic)] // a test's failure, by design
            {
                panic!("{text}");
            }
        }
    }
}

/// Runs a service on the simulator under random faults, seed by seed.
pub struct Explorer<F> {
    make: F,
    seeds: Range<u64>,
    busy: Duration,
    settle: Duration,
    faults: usize,
}

impl<F> std::fmt::Debug for Explorer<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Explorer")
            .field("seeds", &self.seeds)
            .field("busy", &self.busy)
            .field("settle", &self.settle)
            .field("faults", &self.faults)
            .finish_non_exhaustive()
    }
}

impl<S: Service, F: Fn() -> S> Explorer<F> {
    /// An explorer of the service `make` makes, one for each seed: seeds 0 to 99, messages
    /// over 6 s, up to 4 faults, 2 minutes of quiet to end a run (see
    /// [`settle_time`](Self::settle_time)).
    pub fn new(make: F) -> Self {
        Self {
            make,
            seeds: 0..100,
            busy: Duration::from_secs(6),
            settle: Duration::from_secs(120),
            faults: 4,
        }
    }

    /// The seeds to run.
    #[must_use]
    pub fn seeds(mut self, seeds: Range<u64>) -> Self {
        self.seeds = seeds;
        self
    }

    /// The virtual time the messages and faults are spread over (at most 1 hour).
    #[must_use]
    pub fn busy(mut self, busy: Duration) -> Self {
        self.busy = busy.min(Duration::from_secs(3_600));
        self
    }

    /// How long the app must stay quiet, after the last message and fault, for the run to
    /// end (it is cut off at four times this, with [`ServiceRun::quiet`] false): longer than
    /// the service's longest retry delay times its attempts, and than its `ack_wait` times its
    /// attempts, since a lost acknowledgement brings a message back only after `ack_wait`
    /// (30 s by default). At most 1 hour; 2 minutes by default.
    #[must_use]
    pub fn settle_time(mut self, settle: Duration) -> Self {
        self.settle = settle.min(Duration::from_secs(3_600));
        self
    }

    /// At most this many faults a seed (0: none, messages alone).
    #[must_use]
    pub fn faults(mut self, faults: usize) -> Self {
        self.faults = faults;
        self
    }

    /// Runs every seed, or the one `RUSTSTREAM_EXPLORE_SEED` names when it is set.
    ///
    /// # Panics
    /// When `RUSTSTREAM_EXPLORE_SEED` is set to something that is not a number.
    pub fn run(&self) -> Explored {
        let seeds: Box<dyn Iterator<Item = u64>> = match std::env::var("RUSTSTREAM_EXPLORE_SEED") {
            Ok(seed) if !seed.trim().is_empty() => {
                #[allow(clippy::panic)] // a test's input, said plainly
                let seed: u64 = seed.trim().parse().unwrap_or_else(|_| {
                    panic!("RUSTSTREAM_EXPLORE_SEED is {seed:?}, not a seed (a whole number)")
                });
                Box::new(std::iter::once(seed))
            }
            _ => Box::new(self.seeds.clone()),
        };
        let mut explored = Explored {
            seeds: 0,
            failures: Vec::new(),
        };
        for seed in seeds {
            explored.seeds += 1;
            let outcomes = self.check_seed(seed);
            if !outcomes.violations.is_empty() {
                explored.failures.push(outcomes);
            }
        }
        explored
    }

    /// Runs seed `seed` and checks it.
    pub fn check_seed(&self, seed: u64) -> Outcomes {
        let service = (self.make)();
        let busy_ms = u32::try_from(self.busy.as_millis())
            .unwrap_or(u32::MAX)
            .max(1);
        let mut draw = Draw::of_seed(seed);
        let messages = service.messages(&mut draw);
        let mut publishes: Vec<Publishes> = messages
            .into_iter()
            .map(|m| {
                let at = u32::try_from(draw.below(u64::from(busy_ms))).unwrap_or(0);
                (at, m.subject, m.payload, None)
            })
            .collect();
        // In time order; messages drawn for one instant keep the order the service gave.
        publishes.sort_by_key(|(at, _, _, _)| *at);
        let faults = faults_of(seed, busy_ms, self.faults);
        let settle = self.settle;
        let run = Sim::run(|sim| async move {
            explore_on(&sim, &service, seed, publishes, faults, settle).await
        });
        let mut violations = contract(&run.0, &run.1);
        // An app that never started, or a service that could not be prepared, handled
        // nothing: every check would pass on nothing.
        for trouble in &run.0.trouble {
            if trouble.starts_with("the service's prepare failed")
                || trouble.starts_with("app 0 did not start")
            {
                violations.push(Violation {
                    invariant: "the service starts",
                    detail: trouble.clone(),
                });
            }
        }
        if let Err(detail) = run.2 {
            violations.push(Violation {
                invariant: "the service's check",
                detail,
            });
        }
        Outcomes {
            seed,
            violations,
            run: run.0,
        }
    }
}

/// The faults seed `seed` draws: up to `most`, in the first `busy_ms` milliseconds, by time.
fn faults_of(seed: u64, busy_ms: u32, most: usize) -> Vec<TimedFault> {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let strategy = proptest::collection::vec(
        (0..busy_ms, fault()).prop_map(|(at_ms, fault)| TimedFault { at_ms, fault }),
        0..=most,
    );
    let mut faults = match strategy.new_tree(&mut runner) {
        Ok(tree) => tree.current(),
        Err(_) => Vec::new(),
    };
    faults.sort_by_key(|f| f.at_ms);
    faults
}

/// What a mount settles as, from its policy: its name, its source, `max_attempts`,
/// dead-letter subject, the subject its Core copies go to.
#[derive(Debug, Clone)]
struct MountFacts {
    name: String,
    descriptor: Descriptor,
    max_attempts: Option<u32>,
    dead_letter: Option<String>,
    copy_subject: Option<String>,
}

/// The mounts of `app`, as [`MountFacts`] (one whose settings do not validate is left out: the
/// app does not start, which its trouble says).
fn mounts_of(app: &App) -> Vec<MountFacts> {
    app.mounts()
        .filter_map(|m| m.policy().ok())
        .map(|p| MountFacts {
            name: p.name().to_owned(),
            descriptor: p.descriptor().clone(),
            max_attempts: p.max_attempts().map(std::num::NonZeroU32::get),
            dead_letter: p.dead_letter().map(|s| s.as_str().to_owned()),
            copy_subject: p.copy_subject().map(|s| s.as_str().to_owned()),
        })
        .collect()
}

type Shared = Arc<Mutex<Vec<Observed>>>;

/// A publish of the world: when, the subject, the payload, the headers (none here).
type Publishes = (u32, String, bytes::Bytes, Option<async_nats::HeaderMap>);

/// Plays the service's world on `sim`: the run, the mounts as the first app declared them, and
/// the service's own check.
async fn explore_on<S: Service>(
    sim: &Sim,
    service: &S,
    seed: u64,
    publishes: Vec<Publishes>,
    faults: Vec<TimedFault>,
    settle: Duration,
) -> (ServiceRun, Vec<MountFacts>, Result<(), String>) {
    let mut run = ServiceRun {
        seed,
        sent: Vec::new(),
        faults: faults.clone(),
        settled: Vec::new(),
        reports: Vec::new(),
        dropped: Vec::new(),
        journal: Vec::new(),
        start: sim.now(),
        streams: BTreeMap::new(),
        consumers: BTreeMap::new(),
        quiet: false,
        trouble: Vec::new(),
    };
    if let Err(e) = service.prepare(sim) {
        run.trouble
            .push(format!("the service's prepare failed: {e}"));
        return (run, Vec::new(), Ok(()));
    }
    let mounts = mounts_of(&service.app(sim));
    let world = World {
        publishes,
        faults,
        copy_patterns: mounts
            .iter()
            .filter_map(|m| m.copy_subject.clone())
            .collect(),
        dead_letter_patterns: mounts
            .iter()
            .filter_map(|m| m.dead_letter.clone())
            .collect(),
        settle_time: settle,
        poisons: Vec::new(),
        stored_poisons: Vec::new(),
        drained: None,
    };
    let shared: Shared = Arc::default();
    let played = play(sim, &world, &mut |app| {
        let (record, clock) = (shared.clone(), sim.clone());
        service.app(sim).on_settled(move |settled: &Settled| {
            record
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Observed {
                    app,
                    at: clock.elapsed(),
                    settled: settled.clone(),
                });
        })
    })
    .await;
    run.journal = sim.journal();
    for ((_, subject, payload, _), went) in world.publishes.iter().zip(&played.sent) {
        run.sent.push(SentMessage {
            message: Message {
                subject: subject.clone(),
                payload: payload.clone(),
            },
            at: went.at,
            receivers: went.receivers,
            stored: went.stored.clone(),
        });
    }
    run.settled = std::mem::take(&mut *shared.lock().unwrap_or_else(PoisonError::into_inner))
        .into_iter()
        .map(|o| (o.app, o.at, o.settled))
        .collect();
    run.reports = played.reports;
    run.dropped = played.dropped;
    run.quiet = played.settled;
    run.trouble = played.trouble;
    let mut streams: BTreeSet<String> = run
        .journal
        .iter()
        .filter_map(|r| match r {
            Record::Published {
                stored: Some(ack), ..
            } => Some(ack.stream.clone()),
            _ => None,
        })
        .collect();
    for m in &mounts {
        if let Descriptor::JetStream { stream, consumer } = &m.descriptor {
            streams.insert(stream.clone());
            if let Ok(state) = sim.consumer_state(stream, consumer) {
                run.consumers.insert(m.name.clone(), state);
            }
        }
    }
    for stream in streams {
        if let Ok(messages) = sim.stream_messages(&stream) {
            run.streams.insert(stream, messages);
        }
    }
    let checked = service.check(&run);
    (run, mounts, checked)
}

/// The contract's invariants that hold whatever the handlers decide (see the module's docs).
fn contract(run: &ServiceRun, mounts: &[MountFacts]) -> Vec<Violation> {
    let mut by_consumer: MountsByConsumer = BTreeMap::new();
    for (i, m) in mounts.iter().enumerate() {
        if let Descriptor::JetStream { stream, consumer } = &m.descriptor {
            by_consumer
                .entry(stream.clone())
                .or_default()
                .insert(consumer.clone(), i);
        }
    }
    let facts = Facts::from_journal(
        &run.journal,
        &by_consumer,
        mounts.iter().map(|m| m.name.clone()).collect(),
        invariants::breaks_of(&run.faults),
        run.start,
    );
    let mut found = Vec::new();
    invariants::one_settlement_per_delivery(&facts, &mut found);
    invariants::no_settlement_of_a_superseded_delivery(&facts, &mut found);
    for (_, _, s) in &run.settled {
        if let Some(max) = mounts
            .iter()
            .find(|m| m.name == s.mount)
            .and_then(|m| m.max_attempts)
            && s.handler_ran
            && s.attempt > u64::from(max)
        {
            found.push(Violation {
                invariant: "rules 2-3: no attempt past max_attempts runs the handler",
                detail: format!(
                    "mount {} ran attempt {} of the message on {} (max_attempts {max})",
                    s.mount, s.attempt, s.subject
                ),
            });
        }
    }
    settlements_follow_the_runtime(run, mounts, &facts, &mut found);
    found
}

/// Whether a settlement of kind `kind` is what `settled` comes to (Part C).
fn comes_to(kind: AckKind, settled: &Settled) -> bool {
    match kind {
        AckKind::Ack => settled.outcome == Some(Outcome::Ack),
        AckKind::Term => matches!(
            settled.disposition,
            Disposition::Dropped | Disposition::DeadLettered | Disposition::Terminated
        ),
        AckKind::Nak(_) => matches!(
            settled.disposition,
            Disposition::Retried | Disposition::Delayed | Disposition::DeadLetterRetry
        ),
        _ => true,
    }
}

/// Part C and rules 8-9: each JetStream settlement that reached the server is what an attempt
/// the app reported came to, and a `+TERM` of a delivery reported dead-lettered follows its
/// dead letter (its payload as stored) on the mount's dead-letter subject. A settlement at the
/// instant of a fault that broke the connection or the app is excused from having been
/// reported: a dropped app's task ends before its observer is called.
fn settlements_follow_the_runtime(
    run: &ServiceRun,
    mounts: &[MountFacts],
    facts: &Facts,
    found: &mut Vec<Violation>,
) {
    for (&(mount, sequence), settlements) in &facts.settlements {
        let Some(m) = mounts.get(mount) else { continue };
        for s in settlements {
            let reported = run.settled.iter().find(|(_, _, o)| {
                o.mount == m.name
                    && o.stream_sequence == Some(sequence)
                    && o.attempt == s.delivered
                    && comes_to(s.kind, o)
            });
            let at = facts.since(s.at);
            let excused = facts
                .breaks
                .iter()
                .any(|&(from, _)| from.abs_diff(at) <= Duration::from_millis(1));
            match reported {
                None if !excused => found.push(Violation {
                    invariant: "Part C: each settlement is what the handler's end comes to",
                    detail: format!(
                        "mount {} stream sequence {sequence} delivery {}: {:?} reached the server, and no attempt the app reported comes to it",
                        m.name, s.delivered, s.kind
                    ),
                }),
                Some((_, _, o))
                    if s.kind == AckKind::Term && o.disposition == Disposition::DeadLettered =>
                {
                    dead_letter_before(run, m, sequence, s.index, facts, found);
                }
                _ => {}
            }
        }
    }
}

/// Rules 8-9: the dead letter of message `sequence` of mount `m` reached the server, with the
/// payload the stream stored, before the journal's record `term` (its `+TERM`).
fn dead_letter_before(
    run: &ServiceRun,
    m: &MountFacts,
    sequence: u64,
    term: usize,
    facts: &Facts,
    found: &mut Vec<Violation>,
) {
    let Descriptor::JetStream { stream, .. } = &m.descriptor else {
        return;
    };
    let Some(subject) = &m.dead_letter else {
        return;
    };
    let payload = run
        .sent
        .iter()
        .find(|s| s.stored.as_ref() == Some(&(stream.clone(), sequence)))
        .map(|s| &s.message.payload);
    let Some(payload) = payload else { return };
    let before = facts
        .publications
        .iter()
        .any(|p| p.index < term && !p.failed && &p.subject == subject && p.payload == *payload);
    if !before {
        found.push(Violation {
            invariant: "rule 8: a dead letter before +TERM",
            detail: format!(
                "mount {} stream sequence {sequence}: +TERM (journal record {term}) with no dead letter of its payload on {subject} before it",
                m.name
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Delivery, Mount};
    use async_nats::jetstream::stream;

    /// JetStream orders: an order whose payload starts with `x` is retried to its limit (2) and
    /// dead-lettered; the others are acknowledged.
    struct Letters;

    impl Service for Letters {
        fn app(&self, sim: &Sim) -> App {
            let stream = |name: &str, subject: &str| stream::Config {
                name: name.into(),
                subjects: vec![subject.into()],
                ..Default::default()
            };
            App::new(&sim.url())
                .stream(stream("ORDERS", "orders.>"))
                .stream(stream("DLQ", "dlq.orders"))
                .mount(
                    Mount::jetstream("orders", "ORDERS", "worker")
                        .max_attempts(2)
                        .dead_letter("dlq.orders"),
                    |d: Delivery| async move {
                        match d.payload.starts_with(b"x") {
                            true => Outcome::Retry,
                            false => Outcome::Ack,
                        }
                    },
                )
        }

        fn messages(&self, _: &mut Draw) -> Vec<Message> {
            vec![
                Message::new("orders.a", "ok"),
                Message::new("orders.b", "x"),
            ]
        }
    }

    /// The run of `Letters` without faults, and its mounts.
    fn letters() -> (ServiceRun, Vec<MountFacts>) {
        let publishes = vec![
            (10, "orders.a".to_owned(), bytes::Bytes::from("ok"), None),
            (20, "orders.b".to_owned(), bytes::Bytes::from("x"), None),
        ];
        let (run, mounts, checked) = Sim::run(|sim| async move {
            explore_on(
                &sim,
                &Letters,
                0,
                publishes,
                Vec::new(),
                Duration::from_secs(5),
            )
            .await
        });
        assert_eq!(checked, Ok(()));
        (run, mounts)
    }

    #[test]
    fn the_contract_holds_on_a_clean_run_and_its_checks_can_fail() {
        let (run, mounts) = letters();
        assert_eq!(contract(&run, &mounts), Vec::new());
        assert_eq!(run.streams["DLQ"].len(), 1, "{:?}", run.streams);

        // Settlements the app did not report.
        let mut unreported = run.clone();
        unreported.settled.clear();
        let found = contract(&unreported, &mounts);
        assert_eq!(
            found
                .iter()
                .filter(|v| v.invariant.starts_with("Part C"))
                .count(),
            3,
            "{found:?}"
        );

        // A +TERM reported dead-lettered with no dead letter before it.
        let mut no_letter = run.clone();
        no_letter.journal.retain(
            |r| !matches!(r, Record::Published { subject, .. } if subject.as_str() == "dlq.orders"),
        );
        let found = contract(&no_letter, &mounts);
        assert!(
            found
                .iter()
                .any(|v| v.invariant == "rule 8: a dead letter before +TERM"),
            "{found:?}"
        );

        // An attempt past the limit.
        let mut past = run.clone();
        if let Some((_, _, s)) = past.settled.iter_mut().find(|(_, _, s)| s.handler_ran) {
            s.attempt = 3;
        }
        let found = contract(&past, &mounts);
        assert!(
            found.iter().any(|v| v.invariant.starts_with("rules 2-3")),
            "{found:?}"
        );
    }

    /// A service that cannot start: `prepare` fails, or its mount is refused.
    struct Broken {
        prepare_fails: bool,
    }

    impl Service for Broken {
        fn prepare(&self, _: &Sim) -> Result<(), String> {
            match self.prepare_fails {
                true => Err("no streams today".to_owned()),
                false => Ok(()),
            }
        }

        fn app(&self, sim: &Sim) -> App {
            App::new(&sim.url()).mount(
                Mount::core_subject("jobs", "jobs").max_attempts(0),
                |_: Delivery| async { Outcome::Ack },
            )
        }

        fn messages(&self, _: &mut Draw) -> Vec<Message> {
            vec![Message::new("jobs", "1")]
        }
    }

    #[test]
    fn a_service_that_cannot_start_and_an_empty_range_fail() {
        for prepare_fails in [true, false] {
            let explored = Explorer::new(|| Broken { prepare_fails })
                .seeds(0..2)
                .faults(0)
                .run();
            assert_eq!(explored.failures.len(), 2, "{explored:?}");
            let text = explored.failure_text().unwrap_or_default();
            assert!(text.contains("the service starts"), "{text}");
            let cause = match prepare_fails {
                true => "no streams today",
                false => "max_attempts",
            };
            assert!(text.contains(cause), "{text}");
        }
        let none = Explorer::new(|| Letters).seeds(5..5).run();
        assert_eq!(none.seeds, 0);
        assert!(
            none.failure_text()
                .is_some_and(|t| t.starts_with("no seed ran"))
        );
    }

    #[test]
    fn a_seed_draws_the_same_messages_and_faults() {
        let (mut a, mut b) = (Draw::of_seed(9), Draw::of_seed(9));
        assert_eq!(
            (0..10).map(|_| a.below(1000)).collect::<Vec<_>>(),
            (0..10).map(|_| b.below(1000)).collect::<Vec<_>>()
        );
        assert_eq!(faults_of(9, 6_000, 4), faults_of(9, 6_000, 4));
        assert_ne!(faults_of(9, 6_000, 4), faults_of(10, 6_000, 4));
        assert!(faults_of(9, 6_000, 0).is_empty());
    }
}
