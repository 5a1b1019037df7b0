//! What clients and the server exchange, and the journal of what the server did.

use std::time::Instant;

use async_nats::HeaderMap;
use bytes::Bytes;

use crate::model::ids::{ConnectionId, SubscriptionId};
use crate::model::stream::PubAck;
use crate::model::wire::AckKind;

/// A message for the server: what a client publishes.
#[derive(Debug, Clone, PartialEq)]
pub struct Publish {
    /// The subject: literal, as NATS requires of a publish.
    pub subject: String,
    /// The reply subject, if any (a request's inbox, or an ack reply subject).
    pub reply: Option<String>,
    /// The headers, if any.
    pub headers: Option<HeaderMap>,
    /// A header block no client can read, byte for byte (`NATS/1.0\r\n…\r\n\r\n`, say with
    /// a value holding a lone carriage return): nats-server stores and forwards a header block
    /// without reading it, and async-nats drops its connection on one. Sent in place of
    /// `headers`, which the model then reads as none. See [`Publish::unreadable_headers`].
    pub unreadable_headers: Option<Bytes>,
    /// The payload.
    pub payload: Bytes,
}

impl Publish {
    /// A message of `payload` to `subject`, with no reply subject and no headers.
    pub fn new(subject: impl Into<String>, payload: impl Into<Bytes>) -> Self {
        Self {
            subject: subject.into(),
            reply: None,
            headers: None,
            unreadable_headers: None,
            payload: payload.into(),
        }
    }

    /// With this reply subject.
    #[must_use]
    pub fn reply(mut self, reply: impl Into<String>) -> Self {
        self.reply = Some(reply.into());
        self
    }

    /// With these headers.
    #[must_use]
    pub fn headers(mut self, headers: HeaderMap) -> Self {
        self.headers = Some(headers);
        self
    }

    /// With this header block instead of headers: one a client cannot read, which brings
    /// down the connection of every client it reaches (async-nats 0.51 panics in its
    /// connection task on a header value with a lone carriage return, as on a real server).
    /// The model reads such a message as having no headers (no `Nats-Msg-Id`, no
    /// expectations); its size counts the block.
    ///
    /// ```
    /// use ruststream_sim::Publish;
    /// let poison = Publish::new("orders.new", "x")
    ///     .unreadable_headers(&b"NATS/1.0\r\nX-Poison: a\rb\r\n\r\n"[..]);
    /// assert!(poison.headers.is_none());
    /// ```
    #[must_use]
    pub fn unreadable_headers(mut self, block: impl Into<Bytes>) -> Self {
        self.headers = None;
        self.unreadable_headers = Some(block.into());
        self
    }

    /// The size the server counts: payload and headers (or the unreadable block).
    pub(crate) fn size(&self) -> usize {
        self.payload.len()
            + self.unreadable_headers.as_ref().map_or(
                self.headers
                    .as_ref()
                    .map_or(0, crate::model::wire::headers_len),
                Bytes::len,
            )
    }
}

/// What became of a publish.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Published {
    /// How many subscriptions received it.
    pub receivers: usize,
    /// The stream's answer, when a stream stores the subject.
    pub stored: Option<PubAck>,
}

/// A message the server sends a subscription.
#[derive(Debug, Clone)]
pub struct Delivered {
    /// The connection of the subscription.
    pub connection: ConnectionId,
    /// The subscription.
    pub subscription: SubscriptionId,
    /// The message, as async-nats gives it to a subscriber (a pull request's end is a
    /// message with a `status`, as on the wire).
    pub message: async_nats::Message,
    /// The header block it is sent with instead of `message.headers`, when it was published
    /// with one no client can read ([`Publish::unreadable_headers`]).
    pub unreadable_headers: Option<Bytes>,
}

/// One thing the server did, in the order it did them.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Record {
    /// A client published (`stored`: what a stream answered; `failed`: a fault refused it).
    Published {
        /// When (virtual time).
        at: Instant,
        /// The publishing connection.
        connection: ConnectionId,
        /// Its subject.
        subject: String,
        /// Its headers.
        headers: Option<HeaderMap>,
        /// Its payload.
        payload: Bytes,
        /// What a stream answered.
        stored: Option<PubAck>,
        /// Whether a fault made it fail.
        failed: bool,
    },
    /// A consumer delivered a message.
    Delivered {
        /// When.
        at: Instant,
        /// The stream.
        stream: String,
        /// The consumer.
        consumer: String,
        /// The message's stream sequence.
        stream_sequence: u64,
        /// Its delivery count, from 1.
        delivered: u64,
    },
    /// An acknowledgement reached the server (or was lost on its way, `lost`).
    Acknowledged {
        /// When.
        at: Instant,
        /// The stream.
        stream: String,
        /// The consumer.
        consumer: String,
        /// The acknowledged message's stream sequence.
        stream_sequence: u64,
        /// The delivery count its ack reply subject carries.
        delivered: u64,
        /// What it says.
        kind: AckKind,
        /// Whether [`Faults::lose_acks`](crate::model::faults::Faults::lose_acks) made it vanish.
        lost: bool,
    },
    /// A message delivered `max_deliver` times came up for redelivery (its last deadline
    /// passed, or it was `-NAK`ed) while a pull request waited: it leaves the pending set and
    /// is not delivered again; the ack floor does not move past it.
    MaxDeliveries {
        /// When.
        at: Instant,
        /// The stream.
        stream: String,
        /// The consumer.
        consumer: String,
        /// The message's stream sequence.
        stream_sequence: u64,
        /// How many times it was delivered.
        delivered: u64,
    },
    /// A connection closed.
    Disconnected {
        /// When.
        at: Instant,
        /// The connection.
        connection: ConnectionId,
    },
}
