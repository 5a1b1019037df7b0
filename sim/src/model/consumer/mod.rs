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

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, pull::Config};
use ruststream_core::Wildcard;

use crate::model::error::SimError;
use crate::model::ids::ConnectionId;
use crate::model::stream::Stream;
use crate::model::wire::{AckKind, PullRequest};

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
    /// A consumer on `stream`, checked as nats-server checks it, its defaults filled in.
    pub(crate) fn new(stream: &Stream, mut config: Config, v2_9: bool) -> Result<Self, SimError> {
        let name = config
            .durable_name
            .clone()
            .or_else(|| config.name.clone())
            .unwrap_or_default();
        let what = format!("consumer `{name}` on stream `{}`", stream.name());
        let invalid = |problem: String| SimError::InvalidConfig {
            what: what.clone(),
            problem,
        };
        let not_modelled = |setting: String| SimError::NotModelled {
            what: what.clone(),
            setting,
        };
        if name.is_empty() {
            return Err(invalid(
                "the simulator needs a durable_name or name for every consumer".to_owned(),
            ));
        }
        if name.contains(|c: char| c == '.' || c == '*' || c == '>' || c.is_whitespace()) {
            return Err(invalid(format!(
                "consumer name `{name}` may not contain `.`, `*`, `>` or whitespace"
            )));
        }
        if config.headers_only {
            return Err(not_modelled("headers_only".to_owned()));
        }
        if config.rate_limit > 0 {
            return Err(not_modelled(format!("rate_limit {}", config.rate_limit)));
        }
        if config.replay_policy != async_nats::jetstream::consumer::ReplayPolicy::Instant {
            return Err(not_modelled(format!(
                "replay_policy {:?}",
                config.replay_policy
            )));
        }
        if !matches!(
            config.ack_policy,
            AckPolicy::Explicit | AckPolicy::None | AckPolicy::All
        ) {
            return Err(not_modelled(format!("ack_policy {:?}", config.ack_policy)));
        }
        let next_sequence = match config.deliver_policy {
            DeliverPolicy::All => 1,
            DeliverPolicy::New => stream.last_sequence() + 1,
            DeliverPolicy::ByStartSequence { start_sequence } => start_sequence.max(1),
            other => return Err(not_modelled(format!("deliver_policy {other:?}"))),
        };
        let mut filters = Vec::new();
        for subject in filter_subjects(&config) {
            let filter = Wildcard::new(&subject).map_err(|e| SimError::Subject {
                subject: subject.clone(),
                reason: e.to_string(),
            })?;
            if !stream
                .subjects()
                .iter()
                .any(|s| crate::model::stream::overlap(s, &filter))
            {
                return Err(invalid(format!(
                    "filter subject `{subject}` does not match any of the stream's subjects"
                )));
            }
            filters.push(filter);
        }
        if config.max_deliver == 0 || config.max_deliver < -1 {
            config.max_deliver = -1;
        }
        if config.ack_wait.is_zero() {
            config.ack_wait = SERVER_DEFAULT_ACK_WAIT;
        }
        if let Some(first) = config.backoff.first() {
            // nats-server 2.9 wants `max_deliver` set and above the length; current servers
            // (2.10.14 on) also take no limit, or one equal to the length.
            let length = config.backoff.len() as i64;
            let refused = match v2_9 {
                true => config.max_deliver == -1 || length >= config.max_deliver,
                false => config.max_deliver != -1 && length > config.max_deliver,
            };
            if refused {
                return Err(invalid(
                    "max deliver is required to be > length of backoff values".to_owned(),
                ));
            }
            config.ack_wait = *first;
        }
        if config.max_ack_pending == 0 {
            config.max_ack_pending = DEFAULT_MAX_ACK_PENDING;
        }
        if config.max_waiting <= 0 {
            config.max_waiting = DEFAULT_MAX_WAITING;
        }
        Ok(Self {
            config,
            name,
            filters,
            next_sequence,
            last_consumer_sequence: 0,
            last_delivered_sequence: next_sequence - 1,
            pending: BTreeMap::new(),
            redelivered: BTreeMap::new(),
            redeliver: BTreeSet::new(),
            ack_floor: Sequences {
                consumer_sequence: 0,
                stream_sequence: next_sequence - 1,
            },
            waiting: VecDeque::new(),
            exceeded: Vec::new(),
            v2_9,
        })
    }

    /// Whether an existing consumer's configuration is the one asked for again (what
    /// nats-server calls an idempotent create).
    pub(crate) fn same_config(&self, stream: &Stream, config: &Config) -> bool {
        Self::new(stream, config.clone(), self.v2_9).is_ok_and(|other| other.config == self.config)
    }

    /// Takes `config` (checked and filled in by [`new`](Self::new) as `updated`) where it
    /// changes only what nats-server lets an update change and the model follows: `ack_wait`,
    /// `BackOff`, `max_deliver`, `max_ack_pending`, `max_waiting`, the description,
    /// `inactive_threshold`. Pending deliveries keep their delivery time and take
    /// the new wait, as the server's next redelivery check reads them.
    ///
    /// # Errors
    /// [`SimError::NotModelled`] naming the other settings when any other changes.
    pub(crate) fn update(&mut self, updated: Consumer) -> Result<(), SimError> {
        let new = updated.config;
        let mut unchanged = self.config.clone();
        unchanged.ack_wait = new.ack_wait;
        unchanged.backoff = new.backoff.clone();
        unchanged.max_deliver = new.max_deliver;
        unchanged.max_ack_pending = new.max_ack_pending;
        unchanged.max_waiting = new.max_waiting;
        unchanged.description = new.description.clone();
        unchanged.inactive_threshold = new.inactive_threshold;
        if unchanged != new {
            return Err(SimError::NotModelled {
                what: format!("consumer `{}`", self.name),
                setting: "an update of a setting other than ack_wait, backoff, max_deliver, \
                    max_ack_pending, max_waiting, description or inactive_threshold"
                    .to_owned(),
            });
        }
        let before: Vec<(u64, Duration)> = self
            .pending
            .keys()
            .map(|s| (*s, self.wait(self.deliveries(*s) - 1)))
            .collect();
        self.config = new;
        for (sequence, old_wait) in before {
            let wait = self.wait(self.deliveries(sequence) - 1);
            if let Some(p) = self.pending.get_mut(&sequence) {
                let delivered_at = p.deadline.checked_sub(old_wait).unwrap_or(p.deadline);
                p.deadline = delivered_at + wait;
            }
        }
        Ok(())
    }

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

    /// Takes a pull request (`CONSUMER.MSG.NEXT`), or answers it at once.
    pub(crate) fn handle_request(
        &mut self,
        stream: &Stream,
        connection: ConnectionId,
        inbox: String,
        request: &PullRequest,
        now: Instant,
        out: &mut Vec<Send>,
    ) {
        let status = |code: u16, description: String| Send::Status {
            connection,
            inbox: inbox.clone(),
            code,
            description,
            pending_messages: None,
        };
        let max_batch = self.config.max_batch;
        if max_batch > 0 && request.batch as i64 > max_batch {
            out.push(status(
                409,
                format!("Exceeded MaxRequestBatch of {max_batch}"),
            ));
            return;
        }
        if !self.config.max_expires.is_zero()
            && request.expires.is_some_and(|e| e > self.config.max_expires)
        {
            out.push(status(
                409,
                format!(
                    "Exceeded MaxRequestExpires of {:?}",
                    self.config.max_expires
                ),
            ));
            return;
        }
        if request.no_wait && request.expires.is_none() && !self.has_message(stream) {
            out.push(status(404, "No Messages".to_owned()));
            return;
        }
        if self.waiting.len() as i64 >= self.config.max_waiting {
            out.push(status(409, "Exceeded MaxWaiting".to_owned()));
            return;
        }
        self.waiting.push_back(Waiting {
            no_wait: request.no_wait,
            given: 0,
            connection,
            inbox,
            remaining: request.batch.max(1),
            expires_at: request.expires.map(|e| now + e),
            heartbeat: request.idle_heartbeat,
            next_heartbeat: request.idle_heartbeat.map(|h| now + h),
        });
        // A `no_wait` request is filled with what is there now, then ended by `deliver`.
        self.deliver(stream, now, &mut |_, _| true, out);
    }

    fn has_message(&self, stream: &Stream) -> bool {
        !self.redeliver.is_empty()
            || ((self.pending.len() as i64) < self.config.max_ack_pending
                && stream
                    .next_matching(self.next_sequence, &self.filters)
                    .is_some())
    }

    /// Delivers what it can to the waiting requests whose inbox `interested` says someone
    /// listens to (the others are dropped, as the server drops a request without interest).
    pub(crate) fn deliver(
        &mut self,
        stream: &Stream,
        now: Instant,
        interested: &mut dyn FnMut(ConnectionId, &str) -> bool,
        out: &mut Vec<Send>,
    ) {
        loop {
            let Some(request) = self.waiting.front() else {
                return;
            };
            if !interested(request.connection, &request.inbox) {
                self.waiting.pop_front();
                continue;
            }
            let Some((sequence, delivered)) = self.next_message(stream) else {
                break;
            };
            let Some(mut request) = self.waiting.pop_front() else {
                return;
            };
            // Every delivery takes a new consumer sequence on the wire; a redelivery keeps
            // that of its first delivery in the pending set, for the ack floor.
            self.last_consumer_sequence += 1;
            let consumer_sequence = self.last_consumer_sequence;
            let deadline = now + self.wait(delivered - 1);
            self.pending
                .entry(sequence)
                .and_modify(|p| {
                    p.deadline = deadline;
                    p.queued = false;
                })
                .or_insert(Pending {
                    consumer_sequence,
                    deadline,
                    queued: false,
                });
            self.last_delivered_sequence = self.last_delivered_sequence.max(sequence);
            let pending = stream.count_matching(self.next_sequence, &self.filters);
            out.push(Send::Message {
                connection: request.connection,
                inbox: request.inbox.clone(),
                sequence,
                delivered,
                consumer_sequence,
                pending,
            });
            if self.config.ack_policy == AckPolicy::None {
                // Nothing to wait for: delivered is done.
                self.forget(sequence);
            }
            request.remaining -= 1;
            request.given += 1;
            request.next_heartbeat = request.heartbeat.map(|h| now + h);
            if request.remaining > 0 {
                self.waiting.push_back(request);
            }
        }
        // Nothing more to deliver: `no_wait` requests end, as current servers end them, with
        // `404 No Messages`, unless one got nothing and has an expiry, which it then waits
        // out (`408`). 2.9 ends a partly filled one with `408` and the unfilled count.
        let v2_9 = self.v2_9;
        self.end_requests(out, |r| match (r.no_wait, r.given > 0) {
            (true, true) if v2_9 => Some(End::Timeout),
            (true, given) if given || r.expires_at.is_none() => Some(End::NoMessages),
            _ => None,
        });
    }

    /// The next message to deliver and its delivery count: a redelivery first, then a new
    /// message while fewer than `max_ack_pending` are pending.
    fn next_message(&mut self, stream: &Stream) -> Option<(u64, u64)> {
        while let Some(sequence) = self.redeliver.pop_first() {
            if stream.get(sequence).is_none() {
                // Gone from the stream meanwhile: no longer pending.
                self.forget(sequence);
                continue;
            }
            let delivered = self.deliveries(sequence) + 1;
            if self.max_deliver().is_some_and(|max| delivered > max) {
                self.exhaust(sequence, delivered - 1);
                continue;
            }
            self.redelivered.insert(sequence, delivered - 1);
            return Some((sequence, delivered));
        }
        if self.pending.len() as i64 >= self.config.max_ack_pending
            && self.config.max_ack_pending > 0
        {
            return None;
        }
        let sequence = stream
            .next_matching(self.next_sequence, &self.filters)?
            .sequence;
        self.next_sequence = sequence + 1;
        Some((sequence, 1))
    }

    /// An acknowledgement of the delivery of `sequence`. Whether it removes the message
    /// from a work-queue stream (`+ACK`, `+TERM` of a pending delivery).
    pub(crate) fn handle_ack(&mut self, sequence: u64, kind: AckKind, now: Instant) -> bool {
        if sequence >= self.next_sequence {
            return false;
        }
        if !self.pending.contains_key(&sequence) {
            // Late (past `max_deliver`, or acknowledged already): an `+ACK` or `+TERM` still
            // ends its redelivered count, as the server's `processAckMsg` does.
            if matches!(kind, AckKind::Ack | AckKind::Term | AckKind::Next) {
                self.redelivered.remove(&sequence);
                // 2.9 also moves the floor to the last delivery when nothing is pending.
                if self.v2_9 && self.pending.is_empty() {
                    self.ack_floor = self.last_delivery();
                }
            }
            return false;
        }
        match kind {
            AckKind::Ack | AckKind::Next if self.config.ack_policy == AckPolicy::All => {
                // An `+ACK` with ack policy all acknowledges every delivery up to it.
                let below: Vec<u64> = self.pending.range(..=sequence).map(|(s, _)| *s).collect();
                for s in below {
                    self.forget(s);
                }
                true
            }
            AckKind::Ack | AckKind::Term | AckKind::Next => {
                self.forget(sequence);
                true
            }
            AckKind::Progress => {
                let deadline = now + self.wait(self.deliveries(sequence) - 1);
                if let Some(p) = self.pending.get_mut(&sequence)
                    && !p.queued
                {
                    p.deadline = deadline;
                }
                false
            }
            AckKind::Nak(None) => {
                if let Some(p) = self.pending.get_mut(&sequence) {
                    p.queued = true;
                }
                self.redeliver.insert(sequence);
                false
            }
            AckKind::Nak(Some(delay)) => {
                self.redeliver.remove(&sequence);
                let wait = self.wait(self.deliveries(sequence) - 1);
                let ack_wait = self.config.ack_wait;
                let base = now + delay;
                let deadline = if wait >= ack_wait {
                    base + (wait - ack_wait)
                } else {
                    base.checked_sub(ack_wait - wait).unwrap_or(now)
                };
                if let Some(p) = self.pending.get_mut(&sequence) {
                    p.deadline = deadline;
                    p.queued = false;
                }
                false
            }
            AckKind::Unknown => false,
        }
    }

    /// The message is no longer pending (acknowledged, terminated, or gone from the stream).
    /// The ack floor moves as nats-server's `moveAckFloor` moves it: to the last delivery when
    /// nothing is pending any more; else only when this was the delivery right above the
    /// floor, and then up to just below the next pending message.
    fn forget(&mut self, sequence: u64) {
        let removed = self.pending.remove(&sequence);
        self.redelivered.remove(&sequence);
        self.redeliver.remove(&sequence);
        let Some(removed) = removed else {
            return;
        };
        if self.pending.is_empty() {
            self.ack_floor = self.last_delivery();
        } else if removed.consumer_sequence == self.ack_floor.consumer_sequence + 1 {
            self.ack_floor = Sequences {
                consumer_sequence: removed.consumer_sequence,
                stream_sequence: sequence,
            };
            if let Some((next, p)) = self.pending.range(sequence + 1..self.next_sequence).next() {
                self.ack_floor = Sequences {
                    consumer_sequence: p.consumer_sequence - 1,
                    stream_sequence: next - 1,
                };
            }
        }
    }

    /// A message delivered `max_deliver` times that came up for redelivery: it leaves the
    /// pending set and is never delivered again, but the ack floor does not move past it
    /// (what nats-server 2.9.10 and 2.15.1 both report), and it still counts as redelivered
    /// until it leaves the stream.
    fn exhaust(&mut self, sequence: u64, delivered: u64) {
        self.pending.remove(&sequence);
        self.redeliver.remove(&sequence);
        self.exceeded.push((sequence, delivered));
    }

    /// The messages [`exhaust`](Self::exhaust)ed since the last call, with their delivery
    /// counts, for the journal.
    pub(crate) fn take_exceeded(&mut self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.exceeded)
    }

    /// The last delivery's consumer sequence, and the stream sequence below the next to
    /// deliver: where the ack floor goes once nothing is pending.
    fn last_delivery(&self) -> Sequences {
        Sequences {
            consumer_sequence: self.last_consumer_sequence,
            stream_sequence: self.next_sequence - 1,
        }
    }

    /// Messages removed from the stream (limits, work-queue acks by another consumer).
    pub(crate) fn handle_removed(&mut self, sequences: &[u64]) {
        for sequence in sequences {
            if self.pending.contains_key(sequence) {
                self.forget(*sequence);
            }
            self.redelivered.remove(sequence);
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

    /// Ends the waiting requests `ends` says end, with the status it says, in order.
    fn end_requests(&mut self, out: &mut Vec<Send>, ends: impl Fn(&Waiting) -> Option<End>) {
        let mut kept = VecDeque::with_capacity(self.waiting.len());
        for request in self.waiting.drain(..) {
            let Some(end) = ends(&request) else {
                kept.push_back(request);
                continue;
            };
            let (code, description, pending_messages) = match end {
                End::Timeout => (408, "Request Timeout", Some(request.remaining)),
                End::NoMessages => (404, "No Messages", None),
            };
            out.push(Send::Status {
                connection: request.connection,
                inbox: request.inbox,
                code,
                description: description.to_owned(),
                pending_messages,
            });
        }
        self.waiting = kept;
    }

    /// Forgets the pull requests of a connection that closed.
    pub(crate) fn handle_disconnect(&mut self, connection: ConnectionId) {
        self.waiting.retain(|w| w.connection != connection);
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

/// The consumer's filter subjects: `filter_subject`, and `filter_subjects` where async-nats
/// has the field (its `server_2_10` feature, which this crate does not choose: read through
/// the configuration's JSON form, which has it whenever the field exists).
fn filter_subjects(config: &Config) -> Vec<String> {
    let mut subjects: Vec<String> = std::iter::once(config.filter_subject.clone())
        .filter(|s| !s.is_empty())
        .collect();
    if let Ok(json) = serde_json::to_value(config)
        && let Some(more) = json.get("filter_subjects").and_then(|v| v.as_array())
    {
        subjects.extend(more.iter().filter_map(|v| v.as_str().map(str::to_owned)));
    }
    subjects
}
