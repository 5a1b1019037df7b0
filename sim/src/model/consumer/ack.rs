//! A consumer's acknowledgements (`+ACK`, `-NAK`, `+WPI`, `+TERM`), and what they move: the
//! pending set, the redelivery queue and the ack floor; messages that leave the pending set
//! past `max_deliver`, or because they left the stream.

use std::time::Instant;

use async_nats::jetstream::consumer::AckPolicy;

use crate::model::consumer::{Consumer, Sequences};
use crate::model::wire::AckKind;

impl Consumer {
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
    pub(super) fn forget(&mut self, sequence: u64) {
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
    pub(super) fn exhaust(&mut self, sequence: u64, delivered: u64) {
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
}
