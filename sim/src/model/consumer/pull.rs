//! A consumer's pull requests: taken, or answered at once (`404`, `409`); waiting in order;
//! filled with deliveries, redeliveries first; ended when filled, at their expiry (`408`), when
//! a `no_wait` request finds nothing more (`404`), or when their connection closes.

use std::collections::VecDeque;
use std::time::Instant;

use async_nats::jetstream::consumer::AckPolicy;

use crate::model::consumer::{Consumer, End, Pending, Send, Waiting};
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
