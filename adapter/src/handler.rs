//! Handlers and what they are given.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_nats::{HeaderMap, Subject};
use bytes::Bytes;
use futures_util::FutureExt;
use ruststream_core::{Attempt, Outcome};
use serde::de::DeserializeOwned;

/// A boxed future of an outcome: what a handler written as a closure may return when its
/// futures differ in type (an [`Outcome`] is an [`IntoHandled`]).
pub type OutcomeFuture = Pin<Box<dyn Future<Output = Outcome> + Send + 'static>>;

/// A boxed future of what a handler returned: what [`Handler::call`] gives the runtime.
pub type HandledFuture = Pin<Box<dyn Future<Output = Handled> + Send + 'static>>;

/// What a handler returned: an [`Outcome`], or the text of the error of a handler that
/// returned `Err` (which the mount's [`ErrorPolicy`](crate::ErrorPolicy) turns into an
/// outcome).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// The handler's outcome.
    Outcome(Outcome),
    /// The handler returned this error (its `Display` text).
    Error(String),
}

/// What a handler may return: an [`Outcome`], or `Result<Outcome, E>` for any error type
/// that can be displayed, so that `?` works in a handler. An `Err` is logged with its text
/// and turned into an outcome by the mount's [`ErrorPolicy`](crate::ErrorPolicy) (by default
/// [`Outcome::Retry`], so `max_attempts` and the backoff apply).
pub trait IntoHandled {
    /// This return value as [`Handled`].
    fn into_handled(self) -> Handled;
}

impl IntoHandled for Outcome {
    #[inline]
    fn into_handled(self) -> Handled {
        Handled::Outcome(self)
    }
}

impl<E: std::fmt::Display> IntoHandled for Result<Outcome, E> {
    #[inline]
    fn into_handled(self) -> Handled {
        match self {
            Ok(outcome) => Handled::Outcome(outcome),
            Err(e) => Handled::Error(e.to_string()),
        }
    }
}

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

/// What the runtime calls for each delivery: an async function from [`Delivery`] to an
/// [`Outcome`] or a `Result<Outcome, E>` ([`IntoHandled`]).
///
/// Implemented for every `Fn(Delivery) -> impl Future<Output = O>` that is `Send + Sync +
/// 'static`, where `O` is [`Outcome`] or `Result<Outcome, E: Display>`, and by [`Json`] for
/// typed handlers. A handler that panics is caught and counts as [`Outcome::None`] (rule 13).
pub trait Handler: Send + Sync + 'static {
    /// Starts handling one delivery.
    ///
    /// # Errors
    /// [`DecodeError`] when the payload cannot be given to the handler at all; the runtime
    /// then sends the delivery straight to the at-limit path (see [`Json`]).
    fn call(&self, delivery: Delivery) -> Result<HandledFuture, DecodeError>;
}

impl<F, Fut> Handler for F
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    fn call(&self, delivery: Delivery) -> Result<HandledFuture, DecodeError> {
        Ok(Box::pin(self(delivery).map(IntoHandled::into_handled)))
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
    Fut: Future + Send + 'static,
    Fut::Output: IntoHandled,
{
    fn call(&self, delivery: Delivery) -> Result<HandledFuture, DecodeError> {
        let value = serde_json::from_slice::<T>(&delivery.payload)?;
        Ok(Box::pin(
            (self.f)(value, delivery).map(IntoHandled::into_handled),
        ))
    }
}

/// What a mount does with a handler's `Err` (see [`IntoHandled`]): the outcome it stands for.
/// The error is logged at warning level with the mount, subject and attempt first.
#[derive(Clone, Default)]
pub enum ErrorPolicy {
    /// [`Outcome::Retry`]: `max_attempts`, the backoff and the dead-letter subject apply.
    #[default]
    Retry,
    /// [`Outcome::Reject`]: the at-limit path at once (rule 17).
    Reject,
    /// The outcome this function gives for the error's text. It runs on the mount's task: a
    /// panic in it is caught, logged, and counts as [`Outcome::None`].
    Decide(std::sync::Arc<dyn Fn(&str) -> Outcome + Send + Sync>),
}

impl ErrorPolicy {
    /// A policy that asks `decide` for the outcome of each error (given its `Display` text).
    pub fn decide(decide: impl Fn(&str) -> Outcome + Send + Sync + 'static) -> Self {
        Self::Decide(std::sync::Arc::new(decide))
    }

    /// The outcome an error stands for.
    pub fn outcome(&self, error: &str) -> Outcome {
        match self {
            Self::Retry => Outcome::Retry,
            Self::Reject => Outcome::Reject,
            Self::Decide(decide) => decide(error),
        }
    }
}

impl std::fmt::Debug for ErrorPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Retry => f.write_str("Retry"),
            Self::Reject => f.write_str("Reject"),
            Self::Decide(_) => f.write_str("Decide(..)"),
        }
    }
}
