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

    /// The consumer's next deadline: a pending delivery's, or a request's expiry.
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
        deliveries.chain(requests).min()
    }

    /// What falls due at `now`: deliveries past their deadline are queued for redelivery
    /// (one that has had `max_deliver` deliveries leaves the pending set when it comes up,
    /// as nats-server's `getNextMsg` does it: see [`exhaust`](Self::exhaust)), requests past
    /// their expiry end with `408`, and a waiting request with `idle_heartbeat` idle for its
    /// interval gets `100 Idle Heartbeat`.
    pub(crate) fn handle_timeout(&mut self, now: Instant, out: &mut Vec<Send>) {
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

    pub(crate) fn state(&self, stream: &Stream) -> ConsumerState {
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
        }
    }
}
