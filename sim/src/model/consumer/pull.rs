//! A consumer's pull requests: taken, or answered at once (`404`, `409`); waiting in order;
//! filled with deliveries, redeliveries first; ended when filled, at their expiry (`408`), when
//! a `no_wait` request finds nothing more (`404`), or when their connection closes.
//!
//! nats-server 2.11+'s priority groups, after its `processNextMsgRequest` and `nextWaiting`:
//! a request's group fields are checked when it comes (`400` for fields the consumer's policy
//! does not take, a missing or unknown group; `423 Nats-Pin-Id mismatch` for an id other
//! than the pinned one, while one is). At each delivery the requests are looked at in order,
//! one passed over going to the back: with no pin, the first without an id is pinned (and one
//! with an id ends with `423 Nats-Wrong-Pin-Id`); with a pin, only a request carrying it is
//! served, others without an id wait, and one with another id ends with `423`. Overflow's
//! request with `min_pending`/`min_ack_pending` is passed over unless either is reached.

use std::collections::VecDeque;
use std::time::Instant;

use async_nats::jetstream::consumer::{AckPolicy, PriorityPolicy};

use crate::model::consumer::{Consumer, End, Pending, Pin, Send, Waiting};
use crate::model::ids::ConnectionId;
use crate::model::stream::Stream;
use crate::model::wire::PullRequest;

impl Consumer {
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
        if !self.v2_9
            && let Some(p) = &request.priority
            && let Some((code, description)) = self.check_priority(p, now)
        {
            out.push(status(code, description.to_owned()));
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
            priority: request.priority.clone().filter(|_| !self.v2_9),
        });
        // A `no_wait` request is filled with what is there now, then ended by `deliver`.
        self.deliver(stream, now, &mut |_, _| true, out);
    }

    /// A request's priority-group fields checked as they come, in nats-server's order: the
    /// status that refuses it, if one does. A request carrying the pinned id keeps the pin.
    fn check_priority(
        &mut self,
        p: &crate::model::wire::PullPriority,
        now: Instant,
    ) -> Option<(u16, &'static str)> {
        let policy = &self.config.priority_policy;
        if (p.min_pending != 0 || p.min_ack_pending != 0) && *policy != PriorityPolicy::Overflow {
            return Some((400, "Bad Request - Not a Overflow Priority consumer"));
        }
        if !p.id.is_empty() && *policy != PriorityPolicy::PinnedClient {
            return Some((400, "Bad Request - Not a Pinned Client Priority consumer"));
        }
        if !(0..=9).contains(&p.priority) {
            return Some((400, "Bad Request - Priority must be between 0 and 9"));
        }
        if *policy == PriorityPolicy::None {
            return None;
        }
        if p.group.is_empty() {
            return Some((400, "Bad Request - Priority Group missing"));
        }
        if !self.config.priority_groups.contains(&p.group) {
            return Some((400, "Bad Request - Invalid Priority Group"));
        }
        let timeout = self.config.priority_timeout;
        if let Some(pin) = &mut self.pin {
            if p.id == pin.id {
                pin.expires = now + timeout;
            } else if !p.id.is_empty() {
                return Some((423, "Nats-Pin-Id mismatch"));
            }
        }
        None
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
        // Paused: nothing is delivered (the requests still end as below).
        while !self.paused(now) {
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
            let Some(mut request) = self.next_waiting(stream, now, interested, out) else {
                // Nobody to give it to: it waits for the next request.
                self.put_back(sequence, delivered);
                break;
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
                pin_id: (self.config.priority_policy == PriorityPolicy::PinnedClient)
                    .then(|| self.pin.as_ref().map(|p| p.id.clone()).unwrap_or_default()),
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

    /// The request the next delivery goes to, taken from the queue, as nats-server's
    /// `nextWaiting` chooses it: requests without interest are dropped, requests passed over
    /// (standby, overflow below its minimums) go to the back, and a request with a stale pin
    /// id ends with `423`. Pins the request chosen when no client is pinned.
    fn next_waiting(
        &mut self,
        stream: &Stream,
        now: Instant,
        interested: &mut dyn FnMut(ConnectionId, &str) -> bool,
        out: &mut Vec<Send>,
    ) -> Option<Waiting> {
        let pinned = self.config.priority_policy == PriorityPolicy::PinnedClient;
        let overflow = self.config.priority_policy == PriorityPolicy::Overflow;
        let need_new_pin = pinned && self.pin.is_none();
        let mut cycled = 0;
        while let Some(request) = self.waiting.front() {
            let id = request
                .priority
                .as_ref()
                .map_or_else(String::new, |p| p.id.clone());
            let names_group = request
                .priority
                .as_ref()
                .is_some_and(|p| !p.group.is_empty());
            let mut pass_over = false;
            let mut assign = false;
            if need_new_pin {
                if id.is_empty() {
                    // The server pins only a request that names its group.
                    assign = names_group;
                } else {
                    self.wrong_pin(out);
                    continue;
                }
            } else if let Some(pin) = &self.pin {
                if id.is_empty() {
                    pass_over = true;
                } else if id != pin.id {
                    self.wrong_pin(out);
                    continue;
                }
            }
            if let Some(request) = self.waiting.front()
                && !pass_over
                && overflow
                && let Some(p) = &request.priority
                && (p.min_pending > 0 || p.min_ack_pending > 0)
            {
                // The message about to go counts as pending, as the server counts it.
                let num_pending = stream.count_matching(self.next_sequence, &self.filters) + 1;
                let reached = (p.min_pending > 0
                    && u64::try_from(p.min_pending).is_ok_and(|m| m <= num_pending))
                    || (p.min_ack_pending > 0
                        && usize::try_from(p.min_ack_pending)
                            .is_ok_and(|m| m <= self.pending.len()));
                pass_over = !reached;
            }
            if pass_over {
                let request = self.waiting.pop_front()?;
                self.waiting.push_back(request);
                cycled += 1;
                if cycled >= self.waiting.len() {
                    return None;
                }
                continue;
            }
            let request = self.waiting.pop_front()?;
            if !interested(request.connection, &request.inbox) {
                // Nobody listens: dropped without a word, as the server drops it.
                continue;
            }
            if assign {
                self.pins += 1;
                self.pin = Some(Pin {
                    id: format!("SIMPIN{:016}", self.pins),
                    since: now,
                    expires: now + self.config.priority_timeout,
                });
            }
            return Some(request);
        }
        None
    }

    /// Ends the request at the front with `423 Nats-Wrong-Pin-Id`: it carries a pin id that
    /// is no longer the consumer's.
    fn wrong_pin(&mut self, out: &mut Vec<Send>) {
        if let Some(request) = self.waiting.pop_front() {
            out.push(Send::Status {
                connection: request.connection,
                inbox: request.inbox,
                code: 423,
                description: "Nats-Wrong-Pin-Id".to_owned(),
                pending_messages: Some(request.remaining),
            });
        }
    }

    /// Undoes [`next_message`](Self::next_message) for a message no request takes.
    fn put_back(&mut self, sequence: u64, delivered: u64) {
        if delivered == 1 {
            self.next_sequence = self.next_sequence.min(sequence);
        } else {
            self.redeliver.insert(sequence);
            match delivered - 2 {
                0 => self.redelivered.remove(&sequence),
                before => self.redelivered.insert(sequence, before),
            };
        }
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

    /// Ends the waiting requests `ends` says end, with the status it says, in order.
    pub(super) fn end_requests(
        &mut self,
        out: &mut Vec<Send>,
        ends: impl Fn(&Waiting) -> Option<End>,
    ) {
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
}
