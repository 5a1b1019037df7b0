//! Handlers and what they are given.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_nats::{HeaderMap, Subject};
use bytes::Bytes;
use ruststream_core::{Attempt, Outcome};
use serde::de::DeserializeOwned;

/// A boxed future of a handler's outcome.
pub type OutcomeFuture = Pin<Box<dyn Future<Output = Outcome> + Send + 'static>>;

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

/// Why a typed handler could not be given a delivery.
#[derive(Debug, thiserror::Error)]
#[error("payload does not decode: {0}")]
pub struct DecodeError(#[from] pub serde_json::Error);

/// What the runtime calls for each delivery: an async function from [`Delivery`] to
/// [`Outcome`].
///
/// Implemented for every `Fn(Delivery) -> impl Future<Output = Outcome>` that is `Send + Sync +
/// 'static`, and by [`Json`] for typed handlers. A handler that panics is caught and counts as
/// [`Outcome::None`] (rule 13).
pub trait Handler: Send + Sync + 'static {
    /// Starts handling one delivery.
    ///
    /// # Errors
    /// [`DecodeError`] when the payload cannot be given to the handler at all; the runtime
    /// then sends the delivery straight to the at-limit path (see [`Json`]).
    fn call(&self, delivery: Delivery) -> Result<OutcomeFuture, DecodeError>;
}

impl<F, Fut> Handler for F
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    fn call(&self, delivery: Delivery) -> Result<OutcomeFuture, DecodeError> {
        Ok(Box::pin(self(delivery)))
    }
}

/// A typed handler: decodes the payload as JSON into `T` with serde_json, then calls `f` with
/// the value and the delivery.
///
/// A payload that does not decode never reaches `f`: it goes straight to the at-limit path,
/// so it is dead-lettered if the mount declares a dead-letter subject, and otherwise
/// terminated (`+TERM`) on JetStream and let go on Core, whatever the attempt. Retrying
/// cannot make bad JSON good.
pub struct Json<T, F> {
    f: F,
    _type: std::marker::PhantomData<fn() -> T>,
}

impl<T, F> Json<T, F> {
    /// Wraps `f`.
    pub fn new(f: F) -> Self {
        Self {
            f,
            _type: std::marker::PhantomData,
        }
    }
}

impl<T, F, Fut> Handler for Json<T, F>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(T, Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    fn call(&self, delivery: Delivery) -> Result<OutcomeFuture, DecodeError> {
        let value = serde_json::from_slice::<T>(&delivery.payload)?;
        Ok(Box::pin((self.f)(value, delivery)))
    }
}
