//! What copies and dead letters are made of: the delivered message, re-addressed.
//!
//! The core never copies a payload. A [`Message`] holds the delivered message's reply subject,
//! headers and payload as [`Bytes`] (reference-counted); [`Message::copy`] and
//! [`Message::dead_letter`] build the [`Publication`] an adapter sends, sharing the payload.

use bytes::Bytes;

use crate::delivery::{Delivery, Model};
use crate::header::{Headers, MSG_ID_HEADER, RetryCount, dead_letter_msg_id};
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
    /// a Core one none.
    pub fn dead_letter(&self, subject: &Subject, delivery: &Delivery<'_>) -> Publication {
        let mut headers = self.headers.for_dead_letter();
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
