//! What copies and dead letters are made of: the delivered message, re-addressed.
//!
//! The core never copies a payload. A [`Message`] holds the delivered message's reply subject,
//! headers and payload as [`Bytes`] (reference-counted); [`Message::copy`] and
//! [`Message::dead_letter`] build the [`Publication`] an adapter sends, sharing the payload.

use bytes::Bytes;

use crate::delivery::{Delivery, Model};
use crate::header::{Headers, MSG_ID_HEADER, RetryCount, dead_letter_msg_id};
use crate::provenance::Provenance;
use crate::subject::Subject;

/// The parts of a delivered message that copies and dead letters carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Message {
    /// The reply subject it was delivered with, if any.
    pub reply: Option<Bytes>,
    /// Its headers, in order, as delivered.
    pub headers: Headers,
    /// Its payload.
    pub payload: Bytes,
}

/// A message ready to publish: subject, optional reply subject, headers, payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    /// Where to publish.
    pub subject: Subject,
    /// The reply subject to publish with, if any.
    pub reply: Option<Bytes>,
    /// The headers to publish with.
    pub headers: Headers,
    /// The payload, shared with the delivered message.
    pub payload: Bytes,
}

impl Publication {
    /// This dead letter without the runtime's own `Nats-Msg-Id` (rule 9; the delivery's own
    /// was dropped as a directive): for a JetStream delivery so close to the server's
    /// `max_payload` that the id would push its dead letter over it. It then fits, since the
    /// delivery did; the price is that a publish tried again after a failure may store it
    /// twice.
    #[must_use]
    pub fn without_runtime_msg_id(mut self) -> Self {
        self.headers.remove(MSG_ID_HEADER.as_bytes());
        self
    }

    /// Its size as the server counts it against `max_payload`: the payload, plus, when there
    /// are headers, the header block of an `HPUB` (`NATS/1.0\r\n`, a `name: value\r\n` line
    /// per pair, and a closing `\r\n`). Subjects and the reply subject do not count.
    pub fn wire_len(&self) -> usize {
        wire_len(
            self.payload.len(),
            self.headers
                .iter()
                .map(|(name, value)| (name.len(), value.len())),
        )
    }
}

/// The size of a publication as the server counts it against `max_payload`, from its
/// payload's length and its header pairs' (name, value) lengths: the payload, plus, when there
/// are headers, the header block of an `HPUB` (`NATS/1.0\r\n`, a `name: value\r\n` line per
/// pair, and a closing `\r\n`). [`Publication::wire_len`] is this over its own parts.
pub fn wire_len(payload: usize, pairs: impl IntoIterator<Item = (usize, usize)>) -> usize {
    /// `NATS/1.0\r\n` and the closing `\r\n`.
    const FRAME: usize = b"NATS/1.0\r\n".len() + b"\r\n".len();
    /// `: ` and `\r\n` around and after a value.
    const PER_PAIR: usize = b": ".len() + b"\r\n".len();
    let mut pairs = pairs.into_iter().peekable();
    let headers = match pairs.peek() {
        None => 0,
        Some(_) => {
            FRAME
                + pairs
                    .map(|(name, value)| name + value + PER_PAIR)
                    .sum::<usize>()
        }
    };
    headers + payload
}

impl Message {
    /// The Core copy to publish to `subject` after attempt `retry_count` (rule 4): the payload
    /// and reply subject unchanged, the headers rewritten by [`Headers::for_copy`].
    pub fn copy(&self, subject: &Subject, retry_count: RetryCount) -> Publication {
        Publication {
            subject: subject.clone(),
            reply: self.reply.clone(),
            headers: self.headers.for_copy(retry_count),
            payload: self.payload.clone(),
        }
    }

    /// The dead letter of `delivery` to publish to `subject`: the payload unchanged, the
    /// headers filtered by [`Headers::for_dead_letter`] (rule 9), and no reply subject: a dead
    /// letter is published for a stream to store, not for its original requester to answer,
    /// and a JetStream publish uses the reply subject for the stream's acknowledgement. A
    /// JetStream delivery's dead letter also carries the runtime's own `Nats-Msg-Id`
    /// ([`dead_letter_msg_id`]: stream, consumer, stream sequence, when it was stored), last;
    /// a Core one none. With `provenance` (a mount that asks for it, rule 19), the provenance
    /// headers come after the delivery's own and before the `Nats-Msg-Id`
    /// ([`Provenance::append_to`]), the delivery's own `Nats-Msg-Id` among them as
    /// `Ruststream-Msg-Id`.
    pub fn dead_letter(
        &self,
        subject: &Subject,
        delivery: &Delivery<'_>,
        provenance: Option<&Provenance<'_>>,
    ) -> Publication {
        let mut headers = self.headers.for_dead_letter();
        if let Some(provenance) = provenance {
            // The delivery's own id, kept off the dead letter by rule 9, goes with its
            // provenance (`Ruststream-Msg-Id`). Its first value, should it carry several: the
            // one nats-server deduplicates on.
            let msg_id = self
                .headers
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(MSG_ID_HEADER.as_bytes()))
                .map(|(_, id)| id);
            provenance.append_to(&mut headers, delivery, msg_id);
        }
        if let Model::JetStream(reply) = delivery.model {
            let id = dead_letter_msg_id(
                reply.stream,
                reply.consumer,
                reply.stream_sequence,
                reply.timestamp,
            );
            headers.append(
                Bytes::from_static(MSG_ID_HEADER.as_bytes()),
                Bytes::from(id),
            );
        }
        Publication {
            subject: subject.clone(),
            reply: None,
            headers,
            payload: self.payload.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publication(
        headers: &[(&'static str, &'static str)],
        payload: &'static [u8],
    ) -> Publication {
        let mut h = Headers::new();
        for (n, v) in headers {
            h.append(
                Bytes::from_static(n.as_bytes()),
                Bytes::from_static(v.as_bytes()),
            );
        }
        Publication {
            subject: Subject::new("a.b").expect("a literal subject"),
            reply: Some(Bytes::from_static(b"_INBOX.x")),
            headers: h,
            payload: Bytes::from_static(payload),
        }
    }

    #[test]
    fn wire_len_without_headers_is_the_payload() {
        assert_eq!(publication(&[], b"hello").wire_len(), 5);
        assert_eq!(publication(&[], b"").wire_len(), 0);
    }

    #[test]
    fn wire_len_counts_the_hpub_header_block() {
        // "NATS/1.0\r\n" "a: 1\r\n" "x-ruststream-retry-count: 12\r\n" "\r\n" + payload.
        let p = publication(&[("a", "1"), ("x-ruststream-retry-count", "12")], b"hello");
        let block = "NATS/1.0\r\na: 1\r\nx-ruststream-retry-count: 12\r\n\r\n";
        assert_eq!(p.wire_len(), block.len() + 5);
    }
}
