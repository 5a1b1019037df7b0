//! A modelled pull consumer with explicit acknowledgement: what it delivers, what it waits
//! for, and what an acknowledgement does, after nats-server's `consumer.go`.
//!
//! - A delivery is pending until it is acknowledged (`+ACK`, `+TERM`) or its deadline
//!   passes. The deadline is `ack_wait` after the delivery, or, with a `BackOff`, the step for
//!   the message's redeliveries so far (the last step repeating); `+WPI` starts it again.
//! - A pending message whose deadline passed is queued for redelivery. One that has been
//!   delivered `max_deliver` times leaves the pending set when it comes up for redelivery (a
//!   pull request waiting) and is not delivered again; the ack floor stays below it.
//! - `-NAK` queues it for redelivery at once; `-NAK {"delay": ns}` sets its deadline to
//!   `now - ack_wait + delay` (plus the `BackOff` step's excess over `ack_wait`), as the server
//!   computes it.
//! - Redeliveries go before new messages; new messages stop while `max_ack_pending`
//!   deliveries are pending.
//! - Pull requests wait in order; each delivery goes to the first and moves a request with
//!   more to fill to the back. A request ends when its batch is filled (nothing is sent), or at
//!   its expiry with `408 Request Timeout` and `Nats-Pending-Messages`; a `no_wait` request
//!   that finds nothing gets `404 No Messages`. One that asks for more than `max_batch` or
//!   expires later than `max_expires` gets `409`.
//! - Paused (`pause_until`, nats-server 2.11+), it delivers nothing until then: requests wait,
//!   get their idle heartbeats, end at their expiry, and a `no_wait` one ends at once.
//! - Priority groups (2.11+): a request names its group. With `overflow`, one with
//!   `min_pending`/`min_ack_pending` is served only while the consumer has that many
//!   pending; with `pinned_client`, the first request served is pinned (its deliveries carry
//!   `Nats-Pin-Id`), others wait on standby, a request with another id gets `423`, and the
//!   pin is released after `priority_timeout` without a request carrying it, or by
//!   `CONSUMER.UNPIN`.
//!
//! The consumer is one state machine in four files, each an `impl Consumer` of one concern:
//! here its state, its clock (`poll_timeout`, `handle_timeout`) and its info; its
//! configuration, checked at creation and changed by an update, in `config.rs`; pull requests
//! and the deliveries that fill them in `pull.rs`; acknowledgements, the pending set and the
//! ack floor in `ack.rs`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::pull::Config;
use ruststream_settlement::Wildcard;

use crate::model::ids::ConnectionId;
use crate::model::stream::Stream;

mod ack;
mod config;
mod pull;

/// nats-server's `ack_wait` when a consumer sets none.
pub const SERVER_DEFAULT_ACK_WAIT: Duration = Duration::from_secs(30);
/// nats-server's `max_ack_pending` when a consumer sets none.
pub const DEFAULT_MAX_ACK_PENDING: i64 = 1000;
/// nats-server's `max_waiting` (pull requests waiting at once) when a consumer sets none.
pub const DEFAULT_MAX_WAITING: i64 = 512;

/// A pair of sequences, as consumer info gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sequences {
    /// The consumer's delivery sequence.
    pub consumer_sequence: u64,
    /// The stream's sequence.
    pub stream_sequence: u64,
}

/// A consumer's state, as `CONSUMER.INFO` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerState {
    /// The stream.
    pub stream: String,
    /// The consumer's name.
    pub name: String,
    /// Its configuration, with nats-server's defaults filled in (`ack_wait` 30 s, or the
    /// first `BackOff` step; `max_ack_pending` 1000; `max_deliver` -1 for no limit).
    pub config: Config,
    /// The last delivery: its consumer sequence, and the highest stream sequence delivered.
    pub delivered: Sequences,
    /// Everything at or below these sequences is acknowledged.
    pub ack_floor: Sequences,
    /// Deliveries waiting for an acknowledgement.
    pub num_ack_pending: usize,
    /// Messages delivered more than once and not acknowledged (one past `max_deliver` counts
    /// until it leaves the stream, as on nats-server).
    pub num_redelivered: usize,
    /// Pull requests waiting.
    pub num_waiting: usize,
    /// Stored messages on its filter not yet delivered.
    pub num_pending: u64,
    /// Paused (`pause_until` still ahead; nats-server 2.11+).
    pub paused: bool,
    /// How long it stays paused, while it is.
    pub pause_remaining: Option<Duration>,
    /// Its priority group's state, for a consumer with priority groups (as nats-server gives
    /// it: the first group only).
    pub priority_groups: Vec<PriorityGroupState>,
}

/// A priority group's state, as `CONSUMER.INFO` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityGroupState {
    /// The group.
    pub group: String,
    /// The pinned client's `Nats-Pin-Id`, while one is pinned.
    pub pinned_client_id: Option<String>,
    /// When it was pinned, while one is.
    pub pinned_at: Option<Instant>,
}

/// What a consumer sends: a message to a request's inbox, or a status ending a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Send {
    Message {
        connection: ConnectionId,
        inbox: String,
        sequence: u64,
        delivered: u64,
        consumer_sequence: u64,
        pending: u64,
        /// `Nats-Pin-Id`, for a pinned-client consumer's deliveries.
        pin_id: Option<String>,
    },
    Status {
        connection: ConnectionId,
        inbox: String,
        code: u16,
        description: String,
        pending_messages: Option<usize>,
    },
}

/// A delivery waiting for its acknowledgement, by stream sequence in `Consumer::pending`.
#[derive(Debug, Clone)]
struct Pending {
    consumer_sequence: u64,
    deadline: Instant,
    /// Queued for redelivery (its deadline no longer counts).
    queued: bool,
}

/// The pinned client of a pinned-client consumer.
#[derive(Debug, Clone)]
struct Pin {
    id: String,
    since: Instant,
    /// Released then, unless a request carrying the id comes first.
    expires: Instant,
}

/// How a waiting pull request ends.
#[derive(Debug, Clone, Copy)]
enum End {
    /// `408 Request Timeout`, with the unfilled count.
    Timeout,
    /// `404 No Messages`.
    NoMessages,
}

/// A pull request waiting to be filled, in order in `Consumer::waiting`.
#[derive(Debug, Clone)]
struct Waiting {
    /// Sent with `no_wait`: it ends once what is there has been delivered.
    no_wait: bool,
    /// How many messages it has been given.
    given: usize,
    connection: ConnectionId,
    inbox: String,
    remaining: usize,
    expires_at: Option<Instant>,
    /// `idle_heartbeat`: how often `100 Idle Heartbeat` is sent while it waits idle.
    heartbeat: Option<Duration>,
    next_heartbeat: Option<Instant>,
    /// Its priority-group fields (`None`: not a JSON request).
    priority: Option<crate::model::wire::PullPriority>,
}

/// One consumer of the model.
pub(crate) struct Consumer {
    pub(crate) config: Config,
    pub(crate) name: String,
    filters: Vec<Wildcard>,
    /// The next stream sequence to look at for a first delivery.
    next_sequence: u64,
    last_consumer_sequence: u64,
    last_delivered_sequence: u64,
    pending: BTreeMap<u64, Pending>,
    /// Redeliveries so far, by stream sequence (deliveries less one).
    redelivered: BTreeMap<u64, u64>,
    redeliver: BTreeSet<u64>,
    ack_floor: Sequences,
    waiting: VecDeque<Waiting>,
    /// Messages past `max_deliver` not yet journalled.
    exceeded: Vec<(u64, u64)>,
    /// Paused until then (`pause_until`, on the model's clock); an instant passed: not paused.
    resume_at: Option<Instant>,
    /// The pinned client, for a pinned-client consumer.
    pin: Option<Pin>,
    /// Pin ids given so far.
    pins: u64,
    /// Behave as nats-server 2.9 where it differs from later versions.
    v2_9: bool,
}

impl Consumer {
    /// Its filter subjects (none: every subject of the stream).
    pub(crate) fn filters(&self) -> &[Wildcard] {
        &self.filters
    }

    fn deliveries(&self, sequence: u64) -> u64 {
        self.redelivered.get(&sequence).copied().unwrap_or(0) + 1
    }

    fn max_deliver(&self) -> Option<u64> {
        u64::try_from(self.config.max_deliver).ok()
    }

    /// How long a delivery with `redeliveries` before it may go unacknowledged.
    fn wait(&self, redeliveries: u64) -> Duration {
        match self.config.backoff.len() {
            0 => self.config.ack_wait,
            n => {
                let step = usize::try_from(redeliveries)
                    .unwrap_or(usize::MAX)
                    .min(n - 1);
                self.config.backoff[step]
            }
        }
    }

    /// Pauses it until `resume_at` (`None`, or an instant not after `now`: not paused).
    pub(crate) fn set_pause(&mut self, resume_at: Option<Instant>, now: Instant) {
        self.resume_at = resume_at.filter(|at| *at > now);
    }

    /// Whether it is paused at `now`.
    pub(crate) fn paused(&self, now: Instant) -> bool {
        self.resume_at.is_some_and(|at| now < at)
    }

    /// Releases the pinned client (`CONSUMER.UNPIN`): the next request served is pinned anew.
    pub(crate) fn unpin(&mut self) {
        self.pin = None;
    }

    /// The consumer's next deadline: a pending delivery's, a request's expiry, the pin's
    /// release, the end of a pause.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let deliveries = self
            .pending
            .values()
            .filter(|p| !p.queued)
            .map(|p| p.deadline);
        let requests = self
            .waiting
            .iter()
            .flat_map(|w| w.expires_at.into_iter().chain(w.next_heartbeat));
        let pin = self.pin.as_ref().map(|p| p.expires);
        deliveries
            .chain(requests)
            .chain(pin)
            .chain(self.resume_at)
            .min()
    }

    /// What falls due at `now`: deliveries past their deadline are queued for redelivery
    /// (one that has had `max_deliver` deliveries leaves the pending set when it comes up,
    /// as nats-server's `getNextMsg` does it: see [`exhaust`](Self::exhaust)), requests past
    /// their expiry end with `408`, and a waiting request with `idle_heartbeat` idle for its
    /// interval gets `100 Idle Heartbeat`.
    pub(crate) fn handle_timeout(&mut self, now: Instant, out: &mut Vec<Send>) {
        if self.pin.as_ref().is_some_and(|p| p.expires <= now) {
            // No request carried the pin for `priority_timeout`: released.
            self.pin = None;
        }
        if self.resume_at.is_some_and(|at| at <= now) {
            self.resume_at = None;
        }
        let due: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| !p.queued && p.deadline <= now)
            .map(|(seq, _)| *seq)
            .collect();
        for sequence in due {
            if let Some(p) = self.pending.get_mut(&sequence) {
                p.queued = true;
            }
            self.redeliver.insert(sequence);
        }
        self.end_requests(out, |r| {
            r.expires_at
                .is_some_and(|at| at <= now)
                .then_some(End::Timeout)
        });
        for request in &mut self.waiting {
            if let (Some(every), Some(at)) = (request.heartbeat, request.next_heartbeat)
                && at <= now
            {
                out.push(Send::Status {
                    connection: request.connection,
                    inbox: request.inbox.clone(),
                    code: 100,
                    description: "Idle Heartbeat".to_owned(),
                    pending_messages: None,
                });
                request.next_heartbeat = Some(now + every);
            }
        }
    }

    pub(crate) fn state(&self, stream: &Stream, now: Instant) -> ConsumerState {
        ConsumerState {
            stream: stream.name().to_owned(),
            name: self.name.clone(),
            config: self.config.clone(),
            delivered: Sequences {
                consumer_sequence: self.last_consumer_sequence,
                stream_sequence: self.last_delivered_sequence,
            },
            ack_floor: self.ack_floor,
            num_ack_pending: self.pending.len(),
            num_redelivered: self.redelivered.len(),
            num_waiting: self.waiting.len(),
            num_pending: stream.count_matching(self.next_sequence, &self.filters),
            paused: self.paused(now),
            pause_remaining: self.resume_at.filter(|at| now < *at).map(|at| at - now),
            priority_groups: self
                .config
                .priority_groups
                .first()
                .map(|group| PriorityGroupState {
                    group: group.clone(),
                    pinned_client_id: self.pin.as_ref().map(|p| p.id.clone()),
                    pinned_at: self.pin.as_ref().map(|p| p.since),
                })
                .into_iter()
                .collect(),
        }
    }
}
