//! One delivery, as a handler sees it.

use std::sync::Arc;

use async_nats::{HeaderMap, Subject};
use bytes::Bytes;
use ruststream_settlement::Attempt;

/// What a JetStream delivery's ack reply subject says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JetStreamInfo {
    /// The stream's name (kept once per process, as [`Delivery::mount`]).
    pub stream: &'static str,
    /// The consumer's name (kept once per process, as [`Delivery::mount`]).
    pub consumer: &'static str,
    /// How many times the message has been delivered to this consumer, this time included.
    pub delivered: u64,
    /// The message's sequence in the stream.
    pub stream_sequence: u64,
    /// The delivery's sequence in the consumer.
    pub consumer_sequence: u64,
    /// When the message was stored, in nanoseconds since the Unix epoch.
    pub timestamp: u64,
    /// How many messages the consumer still had pending.
    pub pending: u64,
}

/// One delivery, as a handler sees it.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The name of the mount it came through.
    ///
    /// Mount, stream and consumer names are kept once per process, for its life, so that every
    /// delivery carries them for free (no allocation, no reference count). Each distinct name
    /// is allocated once, the first time an app starts with it; starting apps again and again
    /// with the same names allocates nothing more.
    pub mount: &'static str,
    /// The subject it was published to.
    pub subject: Subject,
    /// Its reply subject, for a Core request (on JetStream, the ack reply subject, which the
    /// runtime answers itself).
    pub reply: Option<Subject>,
    /// Its headers, if any: shared with the runtime, which builds a Core copy or a dead letter
    /// from the same headers after the handler, so that giving them to the handler copies
    /// nothing. Read them through the [`Arc`] (`d.headers.as_deref().and_then(|h|
    /// h.get("name"))`); [`Arc::unwrap_or_clone`] gives an owned map (a copy only while the
    /// runtime still holds it).
    pub headers: Option<Arc<HeaderMap>>,
    /// Its payload.
    pub payload: Bytes,
    /// Which attempt this is, from 1: `delivered` on JetStream, the retry-count header + 1 on
    /// Core.
    pub attempt: Attempt,
    /// The JetStream metadata; `None` on Core.
    pub jetstream: Option<JetStreamInfo>,
}
