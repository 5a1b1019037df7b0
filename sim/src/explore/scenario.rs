//! What a seed draws: a few mounts, messages with an outcome for each attempt, and faults at
//! random times ([`Scenario`]), drawn by proptest's strategies from a seeded generator, so
//! that a seed always gives the same scenario and a failing one can be shrunk.

use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::{NewTree, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde::{Deserialize, Serialize};

/// What a handler does at one attempt of a message: wait, then end so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// How long the handler runs before it ends (virtual milliseconds; past the mount's
    /// `ack_wait` or its time limit for some).
    pub sleep_ms: u32,
    /// How it ends.
    pub end: End,
}

/// How a handler run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum End {
    /// `Outcome::Ack`.
    Ack,
    /// `Outcome::Retry`.
    Retry,
    /// `Outcome::RetryAfter` this many milliseconds.
    RetryAfter(u32),
    /// `Outcome::Drop`.
    Drop,
    /// `Outcome::Reject`.
    Reject,
    /// `Outcome::None`.
    NoOutcome,
    /// The handler returns `Err` (the mount's error policy, retry by default, applies).
    Err,
    /// The handler panics (rule 13: no outcome).
    Panic,
}

/// Where a mount's messages come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Source {
    /// A Core subject: `core<i>`.
    CoreSubject,
    /// A Core wildcard, `wild<i>.*`, with its copy subject `copies.<i>` (rule 10: subscribed
    /// too, as the wildcard does not match it).
    CoreWildcard,
    /// A JetStream consumer `c<i>` of the stream `S<i>` (subjects `js<i>.>`), with its
    /// `ack_wait` and perhaps a `BackOff`.
    JetStream {
        /// The consumer's `ack_wait`, in milliseconds.
        ack_wait_ms: u32,
        /// The consumer's `BackOff`, in milliseconds (none when empty).
        backoff_ms: Vec<u32>,
    },
}

/// Where a mount's dead letters go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeadLetters {
    /// To `dlq.<i>`, which the stream `DLQ` stores.
    Stored,
    /// To `lost.<i>`, which no stream stores (a Core mount only: a JetStream mount's must be
    /// stored, rule 8).
    Plain,
}

/// What a keyed mount's deliveries are ordered by (rule 24).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeySpec {
    /// The subject's last token: a message of key `k<n>` is published to `wild.<i>.k<n>` (a
    /// Core wildcard: token 2) or `js<i>.k<n>` (JetStream: token 1). A Core subject mount has
    /// one subject, so it is keyed by a header instead.
    SubjectToken,
    /// The header [`KEY_HEADER`](super::run::KEY_HEADER): `k<n>`. A message may carry none
    /// (then it is not ordered).
    Header,
}

/// One mount of the scenario.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountSpec {
    /// Its source.
    pub source: Source,
    /// Its `max_attempts`.
    pub max_attempts: Option<u32>,
    /// Its dead letters.
    pub dead_letters: Option<DeadLetters>,
    /// Its backoff (rule 18): base and cap in milliseconds, and whether it has jitter.
    pub backoff: Option<(u32, u32, bool)>,
    /// Whether its dead letters carry provenance headers (rule 19).
    pub provenance: bool,
    /// Whether its leases are on (rule 16).
    pub leases: bool,
    /// How many deliveries it runs at once.
    pub concurrency: u8,
    /// Its subscription buffer (Core), in messages.
    pub buffer: Option<u16>,
    /// Its handler time limit, in milliseconds.
    pub time_limit_ms: Option<u32>,
    /// A batch mount (rule 23): its `max` and `max_wait` (milliseconds). Drawn apart from the
    /// rest ([`batches_and_keys_of`]).
    #[serde(default)]
    pub batch: Option<(u8, u32)>,
    /// Its key (rule 24), and how many distinct keys its messages carry. Drawn apart from the
    /// rest ([`batches_and_keys_of`]).
    #[serde(default)]
    pub key: Option<(KeySpec, u8)>,
    /// Strict order per key (rule 24): only with a key and `max_attempts`.
    #[serde(default)]
    pub strict_order: bool,
    /// Its priority group (JetStream only; nats-server 2.11+), [`PRIORITY_GROUP`]. Drawn apart
    /// from the rest ([`priority_groups_of`]).
    #[serde(default)]
    pub priority: Option<PrioritySpec>,
}

/// A JetStream mount's priority group (`Mount::priority_group`, [`PRIORITY_GROUP`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PrioritySpec {
    /// `PriorityPolicy::Pinned`, with `Mount::priority_timeout` this many milliseconds: one
    /// instance at a time is pinned; after a restart the new app stands by until the old pin
    /// is given up (a graceful shutdown's `CONSUMER.UNPIN`) or has expired.
    Pinned {
        /// The consumer's `priority_timeout`, in milliseconds.
        timeout_ms: u32,
    },
    /// `PriorityPolicy::Overflow { min_pending }`: a request is served only while the
    /// consumer has at least `min_pending` messages not yet delivered (counting the one about
    /// to go); with nothing else pulling, a backlog below it is never delivered
    /// ([`Scenario::drained_as_far_as_it_can`]).
    Overflow {
        /// The threshold.
        min_pending: u8,
    },
}

/// The priority group a mount with a [`PrioritySpec`] declares.
pub const PRIORITY_GROUP: &str = "workers";

impl MountSpec {
    /// Whether it consumes from JetStream.
    pub fn is_jetstream(&self) -> bool {
        matches!(self.source, Source::JetStream { .. })
    }
}

/// One message of the scenario: published to a mount's subject at a time, its handler doing
/// `attempts[n - 1]` at attempt `n` (the last one again for every attempt after it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageSpec {
    /// The mount it is for (its index).
    pub mount: usize,
    /// When it is published, in virtual milliseconds from the start.
    pub at_ms: u32,
    /// What its handler does, attempt by attempt.
    pub attempts: Vec<Attempt>,
    /// Whether its payload does not decode (rule 17: it never reaches the handler).
    pub undecodable: bool,
    /// Its key, on a keyed mount: `k<n>` ([`KeySpec`] says where it goes); `None` for no key
    /// (a header-keyed mount's message without the header). Drawn apart from the rest
    /// ([`batches_and_keys_of`]).
    #[serde(default)]
    pub key: Option<u8>,
}

/// Something that goes wrong at a moment of the scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fault {
    /// The next `n` acknowledgements are lost on their way to the server.
    LoseAcks(u8),
    /// The next `n` publishes of Core copies (to any mount's copy subject) fail.
    FailCopies(u8),
    /// The next `n` publishes of dead letters (stored or not) fail.
    FailDeadLetters(u8),
    /// Every connection is dropped; clients reconnect.
    DropConnections,
    /// The server goes down for this many milliseconds.
    ServerDown(u32),
    /// JetStream is off for this many milliseconds.
    JetStreamOff(u32),
    /// The app stops (gracefully, or dropped without a shutdown) and a new one starts on the
    /// same durables after this many milliseconds.
    Restart {
        /// Whether it stops with a graceful shutdown.
        graceful: bool,
        /// How long until the new app starts, in milliseconds.
        after_ms: u32,
    },
}

/// A fault at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimedFault {
    /// When, in virtual milliseconds from the start.
    pub at_ms: u32,
    /// What.
    pub fault: Fault,
}

/// Everything a seed draws.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scenario {
    /// The mounts, of one app (started again on a restart).
    pub mounts: Vec<MountSpec>,
    /// The messages, by the time they are published.
    pub messages: Vec<MessageSpec>,
    /// The faults, by time.
    pub faults: Vec<TimedFault>,
    /// When (virtual milliseconds from the start) a poison is published to the first Core
    /// mount's subject: a message whose header block async-nats cannot read, which brings
    /// down the app's client and every mount on it (rule 20: the mounts come back on a new
    /// client). Drawn apart from the rest ([`poisons_of`]), so that adding it left every
    /// other draw of every seed as it was.
    #[serde(default)]
    pub poisons: Vec<u32>,
    /// When a poison is published to the first JetStream mount's subject, stored by its
    /// stream: each delivery brings the app's client down, and after
    /// `SAME_SUSPECT_LIMIT` losses the app ends with an error naming its stream sequence
    /// (rule 20); the run plays the operator, who removes it as the error says and starts the
    /// service again. Drawn apart from the rest ([`stored_poisons_of`]).
    #[serde(default)]
    pub stored_poisons: Vec<u32>,
}

/// The longest time a scenario publishes or injects a fault at: 6 s.
pub const BUSY_MS: u32 = 6_000;

impl Scenario {
    /// The scenario seed `seed` draws.
    pub fn of_seed(seed: u64) -> Self {
        Self::tree(seed).current()
    }

    /// The scenario seed `seed` draws, as a tree proptest can shrink.
    pub fn tree(seed: u64) -> impl ValueTree<Value = Scenario> {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
        let mut runner = TestRunner::new_with_rng(Config::default(), rng);
        let with_poisons = scenario()
            .prop_map(move |mut s| {
                s.poisons = poisons_of(seed, &s);
                s.stored_poisons = stored_poisons_of(seed, &s);
                batches_and_keys_of(seed, &mut s);
                priority_groups_of(seed, &mut s);
                s
            })
            .boxed();
        let tree: NewTree<BoxedStrategy<Scenario>> = with_poisons.new_tree(&mut runner);
        #[allow(clippy::expect_used)] // the strategies below never reject
        tree.expect("the scenario strategy draws a scenario from any seed")
    }

    /// How long the scenario needs after its last publish and fault for every message to
    /// settle: each mount's longest retry delay times its attempts, its `ack_wait`, and a
    /// margin.
    pub fn settle_time(&self) -> Duration {
        let longest_delay = self
            .messages
            .iter()
            .flat_map(|m| m.attempts.iter())
            .map(|a| match a.end {
                End::RetryAfter(ms) => ms + a.sleep_ms,
                _ => a.sleep_ms,
            })
            .max()
            .unwrap_or(0);
        let mount_wait = self
            .mounts
            .iter()
            .map(|m| {
                let ack_wait = match &m.source {
                    Source::JetStream {
                        ack_wait_ms,
                        backoff_ms,
                    } => (*ack_wait_ms).max(backoff_ms.iter().copied().max().unwrap_or(0)),
                    _ => 0,
                };
                let backoff = m.backoff.map_or(0, |(_, cap, _)| cap);
                ack_wait.max(backoff) + m.time_limit_ms.unwrap_or(0)
            })
            .max()
            .unwrap_or(0);
        let attempts = self
            .mounts
            .iter()
            .map(|m| m.max_attempts.unwrap_or(4))
            .max()
            .unwrap_or(1);
        let settle =
            Duration::from_millis(u64::from((longest_delay + mount_wait) * attempts + 2_000));
        settle + self.keyed_wait() + self.pin_wait()
    }

    /// How much longer messages may wait with a pinned priority group: after an app dropped
    /// without a shutdown, its pin holds for the consumer's `priority_timeout` before the next
    /// app is pinned. Zero without one (the settle time of a scenario drawn before priority
    /// groups existed is unchanged).
    fn pin_wait(&self) -> Duration {
        let ms = self
            .mounts
            .iter()
            .filter_map(|m| match m.priority {
                Some(PrioritySpec::Pinned { timeout_ms }) => Some(timeout_ms),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        Duration::from_millis(u64::from(ms))
    }

    /// The overflow threshold of mount `index`'s priority group, when it has one above 1 (the
    /// only ones that can leave a message undelivered: the message about to go counts).
    pub fn overflow_threshold(&self, index: usize) -> Option<u64> {
        match self.mounts.get(index)?.priority {
            Some(PrioritySpec::Overflow { min_pending }) if min_pending > 1 => {
                Some(u64::from(min_pending))
            }
            _ => None,
        }
    }

    /// Whether mount `index`'s consumer, with `num_pending` messages not yet delivered and
    /// `num_ack_pending` delivered and not yet acknowledged, has nothing left that it can
    /// deliver or settle: nothing at all, or, on an overflow group above 1 with nothing else
    /// pulling, a backlog too small to be served (nats-server counts the message about to go:
    /// a new one goes while `num_pending >= min_pending`, a redelivery while
    /// `num_pending + 1 >= min_pending`), the run's last app having gone quiet.
    pub fn drained_as_far_as_it_can(
        &self,
        index: usize,
        num_pending: u64,
        num_ack_pending: u64,
    ) -> bool {
        if num_pending == 0 && num_ack_pending == 0 {
            return true;
        }
        match self.overflow_threshold(index) {
            Some(min) => num_pending < min && (num_ack_pending == 0 || num_pending + 1 < min),
            None => false,
        }
    }

    /// How much longer a keyed mount's messages may take to settle than alone (rule 24): one
    /// key's deliveries run one after another, so the longest sum, over one mount's messages,
    /// of what each may take (its longest run and delay, times its attempts under strict
    /// order, in place). Zero without keys (the settle time of a scenario drawn before keys
    /// existed is unchanged).
    fn keyed_wait(&self) -> Duration {
        let ms: u64 = (0..self.mounts.len())
            .filter(|&i| self.mounts[i].key.is_some())
            .map(|i| {
                let spec = &self.mounts[i];
                let runs = match spec.strict_order {
                    true => u64::from(spec.max_attempts.unwrap_or(1)),
                    false => 1,
                };
                let limit = spec.time_limit_ms.unwrap_or(u32::MAX);
                self.messages
                    .iter()
                    .filter(|m| m.mount == i)
                    .map(|m| {
                        let longest = m
                            .attempts
                            .iter()
                            .map(|a| {
                                let delay = match a.end {
                                    End::RetryAfter(ms) => ms,
                                    _ => spec.backoff.map_or(0, |(_, cap, _)| cap),
                                };
                                u64::from(a.sleep_ms.min(limit)) + u64::from(delay)
                            })
                            .max()
                            .unwrap_or(0);
                        longest * runs
                    })
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        Duration::from_millis(ms)
    }

    /// The scenario without what [`batches_and_keys_of`] drew: no batch, no key, no strict
    /// order; what the seed drew before batches and keys existed (with its poisons), so
    /// without the priority groups drawn since either ([`Scenario::without_priority_groups`]).
    pub fn without_batches_and_keys(&self) -> Scenario {
        let mut plain = self.without_priority_groups();
        for mount in &mut plain.mounts {
            mount.batch = None;
            mount.key = None;
            mount.strict_order = false;
        }
        for message in &mut plain.messages {
            message.key = None;
        }
        plain
    }

    /// The scenario without what [`priority_groups_of`] drew: no mount in a priority group.
    pub fn without_priority_groups(&self) -> Scenario {
        let mut plain = self.clone();
        for mount in &mut plain.mounts {
            mount.priority = None;
        }
        plain
    }
}

fn end() -> impl Strategy<Value = End> {
    prop_oneof![
        6 => Just(End::Ack),
        3 => Just(End::Retry),
        2 => (10u32..800).prop_map(End::RetryAfter),
        1 => Just(End::Drop),
        1 => Just(End::Reject),
        1 => Just(End::NoOutcome),
        1 => Just(End::Err),
        1 => Just(End::Panic),
    ]
}

fn attempt() -> impl Strategy<Value = Attempt> {
    (
        prop_oneof![6 => Just(0u32), 3 => 1u32..200, 1 => 200u32..3_000],
        end(),
    )
        .prop_map(|(sleep_ms, end)| Attempt { sleep_ms, end })
}

fn source() -> impl Strategy<Value = Source> {
    prop_oneof![
        2 => Just(Source::CoreSubject),
        1 => Just(Source::CoreWildcard),
        3 => (
            prop_oneof![Just(300u32), Just(1_000), Just(2_000)],
            prop_oneof![
                3 => Just(Vec::new()),
                1 => proptest::collection::vec(200u32..1_500, 1..=3),
            ],
        )
            .prop_map(|(ack_wait_ms, backoff_ms)| Source::JetStream {
                ack_wait_ms,
                backoff_ms,
            }),
    ]
}

fn mount() -> impl Strategy<Value = MountSpec> {
    (
        source(),
        proptest::option::weighted(0.8, 1u32..=4),
        proptest::option::weighted(
            0.7,
            prop_oneof![3 => Just(DeadLetters::Stored), 1 => Just(DeadLetters::Plain)],
        ),
        proptest::option::weighted(0.4, (10u32..200, 200u32..1_000, any::<bool>())),
        any::<bool>(),
        proptest::bool::weighted(0.8),
        1u8..=4,
        proptest::option::weighted(0.3, 1u16..=8),
        proptest::option::weighted(0.3, 500u32..4_000),
    )
        .prop_map(
            |(
                source,
                max_attempts,
                dead_letters,
                backoff,
                provenance,
                leases,
                concurrency,
                buffer,
                time_limit_ms,
            )| {
                let jetstream = matches!(source, Source::JetStream { .. });
                // A JetStream mount's dead letters are stored by a stream (rule 8); a consumer
                // BackOff needs `max_deliver` set, which the runtime never does: the
                // runtime's own backoff there instead.
                // A dead-letter subject needs a limit (rule 7).
                let dead_letters =
                    dead_letters
                        .filter(|_| max_attempts.is_some())
                        .map(|d| match jetstream {
                            true => DeadLetters::Stored,
                            false => d,
                        });
                // A JetStream retry with neither a limit nor a backoff is a `-NAK` without a
                // delay, redelivered at once, for ever: a loop in no time at all, which the
                // contract allows and virtual time cannot get past. Such a mount gets a backoff.
                let backoff = match (jetstream, max_attempts, backoff) {
                    (true, None, None) => Some((50, 500, true)),
                    (_, _, backoff) => backoff,
                };
                MountSpec {
                    source,
                    max_attempts,
                    dead_letters,
                    backoff,
                    provenance,
                    leases,
                    concurrency,
                    buffer: buffer.filter(|_| !jetstream),
                    time_limit_ms,
                    batch: None,
                    key: None,
                    strict_order: false,
                    priority: None,
                }
            },
        )
}

fn message(mounts: usize) -> impl Strategy<Value = MessageSpec> {
    (
        0..mounts,
        0u32..BUSY_MS,
        proptest::collection::vec(attempt(), 1..=4),
        proptest::bool::weighted(0.05),
    )
        .prop_map(|(mount, at_ms, attempts, undecodable)| MessageSpec {
            mount,
            at_ms,
            attempts,
            undecodable,
            key: None,
        })
}

/// The strategy of one fault (its time apart).
pub(crate) fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        3 => (1u8..=3).prop_map(Fault::LoseAcks),
        2 => (1u8..=3).prop_map(Fault::FailCopies),
        2 => (1u8..=2).prop_map(Fault::FailDeadLetters),
        2 => Just(Fault::DropConnections),
        1 => (100u32..3_000).prop_map(Fault::ServerDown),
        1 => (100u32..3_000).prop_map(Fault::JetStreamOff),
        1 => (any::<bool>(), 0u32..1_500)
            .prop_map(|(graceful, after_ms)| Fault::Restart { graceful, after_ms }),
    ]
}

/// The poisons seed `seed` publishes in `scenario` ([`Scenario::poisons`]): in one seed of
/// eight whose scenario has a Core mount, one poison at a time before [`BUSY_MS`]. Drawn from
/// a generator of its own, seeded by `seed` and a tag, not from the scenario's: the scenario a
/// seed drew before poisons existed is unchanged, save the poison.
pub fn poisons_of(seed: u64, scenario: &Scenario) -> Vec<u32> {
    let core = scenario.mounts.iter().any(|m| !m.is_jetstream());
    one_in_eight(seed, b"poison", core)
}

/// The stored poisons seed `seed` publishes in `scenario` ([`Scenario::stored_poisons`]): in
/// one seed of eight whose scenario has a JetStream mount, one before [`BUSY_MS`]; drawn as
/// [`poisons_of`] draws, from a generator of its own.
pub fn stored_poisons_of(seed: u64, scenario: &Scenario) -> Vec<u32> {
    let jetstream = scenario.mounts.iter().any(MountSpec::is_jetstream);
    one_in_eight(seed, b"stored", jetstream)
}

/// Batches and keys (rules 23 and 24) for seed `seed`'s `scenario`, drawn from a generator of
/// their own (seeded by `seed` and a tag, as [`poisons_of`] draws), so that every other draw
/// of every seed is as it was before they existed. In one seed of two: each mount is a batch
/// mount with one chance in three (`max` 1 to 5, `max_wait` a few to a few hundred
/// milliseconds), and keyed with one in two (by its subject's last token where the mount has
/// one that varies, else by a header; 1 to 4 distinct keys; strict order in one of two when
/// it has `max_attempts`), as far as start-up allows (on JetStream, only with leases; a Core
/// wildcard keyed by token, only when it makes no copies); each message of a keyed mount carries one of its keys (one in
/// eight of a header-keyed mount's, none).
pub fn batches_and_keys_of(seed: u64, scenario: &mut Scenario) {
    let mut rng = rng_of(seed, b"orders");
    if !rng.next_u32().is_multiple_of(2) {
        return;
    }
    for mount in &mut scenario.mounts {
        // Every value drawn whatever the mount, so that one mount's settings do not move the
        // next one's draws.
        let (batch, max, span, wait) = (
            rng.next_u32(),
            rng.next_u32(),
            rng.next_u32(),
            rng.next_u32(),
        );
        let (keyed, by_token, keys, strict) = (
            rng.next_u32(),
            rng.next_u32(),
            rng.next_u32(),
            rng.next_u32(),
        );
        // What start-up refuses is not drawn: on JetStream a batch or a key needs leases
        // (a delivery waiting for its batch or its turn past ack_wait would be delivered
        // again); strict order needs `max_attempts`; a Core wildcard keyed by its subject's
        // token makes no copies (strict order, or no retries: a copy's subject has not its
        // key).
        let waits = mount.leases || !mount.is_jetstream();
        if waits && batch.is_multiple_of(3) {
            let max = 1 + (max % 5) as u8;
            let max_wait_ms = match span % 3 {
                0 => 2 + wait % 18,
                1 => 20 + wait % 80,
                _ => 100 + wait % 300,
            };
            mount.batch = Some((max, max_wait_ms));
        }
        if waits && keyed.is_multiple_of(2) {
            mount.strict_order = mount.max_attempts.is_some() && strict.is_multiple_of(2);
            let copies = mount.max_attempts.is_some() || mount.backoff.is_some();
            let token = match mount.source {
                Source::CoreSubject => false,
                Source::CoreWildcard => !copies || mount.strict_order,
                Source::JetStream { .. } => true,
            };
            let kind = match token && by_token.is_multiple_of(2) {
                true => KeySpec::SubjectToken,
                false => KeySpec::Header,
            };
            mount.key = Some((kind, 1 + (keys % 4) as u8));
        }
    }
    for message in &mut scenario.messages {
        let Some((kind, keys)) = scenario.mounts[message.mount].key else {
            continue;
        };
        let without = kind == KeySpec::Header && rng.next_u32().is_multiple_of(8);
        let key = (rng.next_u32() % u32::from(keys)) as u8;
        message.key = (!without).then_some(key);
    }
}

/// Priority groups (nats-server 2.11+) for seed `seed`'s `scenario`, drawn from a generator of
/// their own (seeded by `seed` and a tag, as [`poisons_of`] draws), so that every other draw
/// of every seed is as it was before they existed. In one seed of four whose scenario has a
/// JetStream mount, one of its JetStream mounts (drawn) is in the group [`PRIORITY_GROUP`]:
/// pinned in one of two, with a `priority_timeout` of 1.5 s to 5 s, else overflow with a
/// `min_pending` of 0 to 3 (0 and 1: always served; 2 and 3: a backlog below it waits, see
/// [`Scenario::drained_as_far_as_it_can`]).
pub fn priority_groups_of(seed: u64, scenario: &mut Scenario) {
    let jetstream: Vec<usize> = (0..scenario.mounts.len())
        .filter(|&i| scenario.mounts[i].is_jetstream())
        .collect();
    if jetstream.is_empty() {
        return;
    }
    let mut rng = rng_of(seed, b"groups");
    let (drawn, which, pinned, value) = (
        rng.next_u32(),
        rng.next_u32(),
        rng.next_u32(),
        rng.next_u32(),
    );
    if !drawn.is_multiple_of(4) {
        return;
    }
    let index = jetstream[which as usize % jetstream.len()];
    scenario.mounts[index].priority = Some(match pinned.is_multiple_of(2) {
        true => PrioritySpec::Pinned {
            timeout_ms: 1_500 + value % 3_501,
        },
        false => PrioritySpec::Overflow {
            min_pending: (value % 4) as u8,
        },
    });
}

/// A generator seeded by `seed` and `tag`, apart from the scenario's.
fn rng_of(seed: u64, tag: &[u8; 6]) -> TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..14].copy_from_slice(tag);
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// One time before [`BUSY_MS`] in one seed of eight (when `possible`), from a generator seeded
/// by `seed` and `tag`.
fn one_in_eight(seed: u64, tag: &[u8; 6], possible: bool) -> Vec<u32> {
    if !possible {
        return Vec::new();
    }
    let mut rng = rng_of(seed, tag);
    if !rng.next_u32().is_multiple_of(8) {
        return Vec::new();
    }
    vec![rng.next_u32() % BUSY_MS]
}

/// The strategy of a whole scenario: 1 to 3 mounts, up to 30 messages, up to 4 faults (and no
/// poison: [`poisons_of`] draws those).
pub fn scenario() -> BoxedStrategy<Scenario> {
    proptest::collection::vec(mount(), 1..=3)
        .prop_flat_map(|mounts| {
            let n = mounts.len();
            (
                Just(mounts),
                proptest::collection::vec(message(n), 1..=30),
                proptest::collection::vec(
                    (0u32..BUSY_MS, fault()).prop_map(|(at_ms, fault)| TimedFault { at_ms, fault }),
                    0..=4,
                ),
            )
        })
        .prop_map(|(mounts, mut messages, mut faults)| {
            messages.sort_by_key(|m| m.at_ms);
            faults.sort_by_key(|f| f.at_ms);
            Scenario {
                mounts,
                messages,
                faults,
                poisons: Vec::new(),
                stored_poisons: Vec::new(),
            }
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Poisons are drawn apart: a seed's scenario without its poisons is what the scenario
    /// strategy alone draws from it, as before poisons existed (the seeds named in
    /// regression tests and BENCHMARKS.md still play what they found).
    #[test]
    fn poisons_leave_every_other_draw_of_a_seed_as_it_was() {
        for seed in 0..200u64 {
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&seed.to_le_bytes());
            let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
            let mut runner = TestRunner::new_with_rng(Config::default(), rng);
            #[allow(clippy::unwrap_used)]
            let alone = scenario().new_tree(&mut runner).unwrap().current();
            let drawn = Scenario::of_seed(seed);
            assert_eq!(drawn.poisons, poisons_of(seed, &alone), "seed {seed}");
            assert_eq!(drawn.stored_poisons, stored_poisons_of(seed, &alone));
            let mut plain = drawn.without_batches_and_keys();
            plain.poisons.clear();
            plain.stored_poisons.clear();
            assert_eq!(plain, alone, "seed {seed}");
        }
    }

    /// Batches and keys are drawn apart too: the seed's scenario without them is the one it
    /// drew before they existed; and they are drawn often enough to be tried (about half the
    /// seeds), within their bounds.
    #[test]
    fn batches_and_keys_leave_every_other_draw_of_a_seed_as_it_was() {
        let (mut batched, mut keyed, mut strict) = (0, 0, 0);
        for seed in 0..200u64 {
            let drawn = Scenario::of_seed(seed);
            let mut again = drawn.without_batches_and_keys();
            batches_and_keys_of(seed, &mut again);
            assert_eq!(
                again,
                drawn.without_priority_groups(),
                "seed {seed}: drawn from the seed alone"
            );
            batched += usize::from(drawn.mounts.iter().any(|m| m.batch.is_some()));
            keyed += usize::from(drawn.mounts.iter().any(|m| m.key.is_some()));
            strict += usize::from(drawn.mounts.iter().any(|m| m.strict_order));
            for m in &drawn.mounts {
                if let Some((max, wait)) = m.batch {
                    assert!((1..=5).contains(&max) && (2..400).contains(&wait));
                }
                assert!(!m.strict_order || (m.key.is_some() && m.max_attempts.is_some()));
                let waits = m.batch.is_some() || m.key.is_some();
                assert!(!waits || m.leases || !m.is_jetstream());
                if m.key.is_some_and(|(kind, _)| kind == KeySpec::SubjectToken)
                    && matches!(m.source, Source::CoreWildcard)
                {
                    let copies = m.max_attempts.is_some() || m.backoff.is_some();
                    assert!(!copies || m.strict_order);
                }
                if m.key.is_some_and(|(kind, _)| kind == KeySpec::SubjectToken) {
                    assert!(!matches!(m.source, Source::CoreSubject));
                }
            }
            for message in &drawn.messages {
                let mount = &drawn.mounts[message.mount];
                match (mount.key, message.key) {
                    (None, key) => assert_eq!(key, None),
                    (Some((_, keys)), Some(key)) => assert!(key < keys),
                    (Some((kind, _)), None) => assert_eq!(kind, KeySpec::Header),
                }
            }
        }
        assert!(
            batched > 30 && keyed > 40 && strict > 10,
            "{batched} {keyed} {strict}"
        );
    }

    /// Priority groups are drawn apart too: the seed's scenario without them is the one it
    /// drew before they existed; about one seed in four with a JetStream mount draws one, on
    /// a JetStream mount, within its bounds, pinned and overflow both.
    #[test]
    fn priority_groups_leave_every_other_draw_of_a_seed_as_it_was() {
        let (mut with_jetstream, mut pinned, mut overflow) = (0, 0, 0);
        for seed in 0..400u64 {
            let drawn = Scenario::of_seed(seed);
            let mut again = drawn.without_priority_groups();
            priority_groups_of(seed, &mut again);
            assert_eq!(again, drawn, "seed {seed}: drawn from the seed alone");
            with_jetstream += usize::from(drawn.mounts.iter().any(MountSpec::is_jetstream));
            let grouped: Vec<&MountSpec> = drawn
                .mounts
                .iter()
                .filter(|m| m.priority.is_some())
                .collect();
            assert!(grouped.len() <= 1, "seed {seed}");
            for m in grouped {
                assert!(m.is_jetstream(), "seed {seed}");
                match m.priority {
                    Some(PrioritySpec::Pinned { timeout_ms }) => {
                        assert!((1_500..=5_000).contains(&timeout_ms));
                        pinned += 1;
                    }
                    Some(PrioritySpec::Overflow { min_pending }) => {
                        assert!(min_pending <= 3);
                        overflow += 1;
                    }
                    None => {}
                }
            }
        }
        let grouped = pinned + overflow;
        assert!(
            grouped * 6 > with_jetstream
                && grouped * 3 < with_jetstream
                && pinned > 10
                && overflow > 10,
            "{grouped} of {with_jetstream}: {pinned} pinned, {overflow} overflow"
        );
    }

    #[test]
    fn a_seed_always_draws_the_same_scenario_and_seeds_differ() {
        assert_eq!(Scenario::of_seed(7), Scenario::of_seed(7));
        assert_ne!(Scenario::of_seed(7), Scenario::of_seed(8));
    }
}
