//! What a handler returns: an [`Outcome`], a [`Reply`] (or [`ReplyAs`]), or a `Result` of
//! either, as the runtime takes it ([`Handled`]).

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use ruststream_settlement::Outcome;

use super::codec::{Codec, JsonCodec};

/// A boxed future of an outcome: what a handler written as a closure may return when its
/// futures differ in type (an [`Outcome`] is an [`IntoHandled`]).
pub type OutcomeFuture = Pin<Box<dyn Future<Output = Outcome> + Send + 'static>>;

/// What a handler returned: an [`Outcome`], the text of the error of a handler that returned
/// `Err` (which the mount's [`ErrorPolicy`](crate::ErrorPolicy) turns into an outcome), or a
/// reply to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// The handler's outcome.
    Outcome(Outcome),
    /// The handler returned this error (its `Display` text).
    Error(String),
    /// The handler returned a [`Reply`]: this payload is for the delivery's reply subject, and the
    /// outcome is [`Outcome::Ack`] once it is sent. The handlers this crate builds from functions
    /// send it themselves, and give the runtime the outcome; a [`Handler`](crate::Handler) of your
    /// own that gives this to the runtime gets it logged as an error (the reply is not sent) and
    /// settled by the mount's [`ErrorPolicy`](crate::ErrorPolicy).
    Reply(Bytes),
}

/// What a handler may return: an [`Outcome`], a [`Reply`], or `Result<O, E>` of either for any
/// error type that can be displayed, so that `?` works in a handler. An `Err` is logged with its
/// text and turned into an outcome by the mount's [`ErrorPolicy`](crate::ErrorPolicy) (by default
/// [`Outcome::Retry`], so `max_attempts` and the backoff apply).
pub trait IntoHandled: Send + 'static {
    /// Whether a value of this type may be a reply, which needs the delivery's
    /// [`Context`](crate::Context) to be sent. A mount whose handler returns replies cannot be a
    /// JetStream mount (refused at start-up: a JetStream delivery's reply subject is its ack reply
    /// subject).
    const REPLIES: bool = false;

    /// This return value as [`Handled`].
    fn into_handled(self) -> Handled;
}

impl IntoHandled for Outcome {
    #[inline]
    fn into_handled(self) -> Handled {
        Handled::Outcome(self)
    }
}

impl<O: IntoHandled, E: std::fmt::Display + Send + 'static> IntoHandled for Result<O, E> {
    const REPLIES: bool = O::REPLIES;

    #[inline]
    fn into_handled(self) -> Handled {
        match self {
            Ok(o) => o.into_handled(),
            Err(e) => Handled::Error(e.to_string()),
        }
    }
}

/// A handler's answer to a Core request, FastStream-style: `T` is encoded as JSON and published to
/// the delivery's reply subject, then the delivery is settled as [`Outcome::Ack`]. JSON whatever
/// the mount's codec: [`ReplyAs`] answers with another.
///
/// - A value that does not encode is a handler error (the mount's
///   [`ErrorPolicy`](crate::ErrorPolicy)), its text `the reply does not encode as JSON: …`, and so
///   is a reply the client could not take.
/// - A delivery without a reply subject (published, not requested) is acked, and the reply dropped
///   with a debug log line: there is no one to answer.
/// - A mount whose handler returns `Reply` cannot be a JetStream mount: refused at start-up, naming
///   the mount.
///
/// To answer with raw bytes, or to settle otherwise after answering, use
/// [`Context::respond`](crate::Context::respond).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply<T>(pub T);

impl<T: serde::Serialize + Send + 'static> IntoHandled for Reply<T> {
    const REPLIES: bool = true;

    fn into_handled(self) -> Handled {
        ReplyAs(JsonCodec, self.0).into_handled()
    }
}

/// A handler's answer to a Core request encoded with the codec `C`: as [`Reply`], with `T`
/// encoded by `C` (`ReplyAs(MessagePack, value)`, with the cargo feature `msgpack`) rather than
/// as JSON. `Reply(value)` is `ReplyAs(JsonCodec, value)`.
///
/// A value that does not encode is a handler error (the mount's
/// [`ErrorPolicy`](crate::ErrorPolicy)), its text `the reply does not encode as <codec>: …`
/// ([`EncodeError`](crate::EncodeError)); the rest is as [`Reply`]: acked once the client took
/// it, dropped (and acked) without a reply subject, refused at start-up on a JetStream mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyAs<C, T>(pub C, pub T);

impl<C: Codec, T: serde::Serialize + Send + 'static> IntoHandled for ReplyAs<C, T> {
    const REPLIES: bool = true;

    fn into_handled(self) -> Handled {
        match self.0.encode(&self.1) {
            Ok(payload) => Handled::Reply(payload.into()),
            // "the reply does not encode as <codec>: …"
            Err(e) => Handled::Error(format!("the reply {e}")),
        }
    }
}
