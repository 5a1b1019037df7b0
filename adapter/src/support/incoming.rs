//! A delivered message as the adapter keeps it.

use std::sync::Arc;

use async_nats::{HeaderMap, Subject};
use bytes::Bytes;

/// A delivered message: async-nats' [`async_nats::Message`] with its headers shared, so that
/// the handler's [`Delivery`](crate::Delivery) and what the runtime builds after the handler
/// (a Core copy, a dead letter) read the same headers, with no copy of them: a deep copy of a
/// [`HeaderMap`] allocates once per name and value, which measured as a tenth of a Core
/// retry's cost (issue 13).
///
/// The fields are the message's, by the same names; a server status (a pull request's end)
/// never becomes one: the pull loop reads it from async-nats' message.
#[derive(Debug)]
pub(crate) struct Incoming {
    /// The subject it was published to.
    pub(crate) subject: Subject,
    /// Its reply subject: a Core request's, or a JetStream delivery's ack reply subject.
    pub(crate) reply: Option<Subject>,
    /// Its headers, if any, shared with the handler.
    pub(crate) headers: Option<Arc<HeaderMap>>,
    /// Its payload.
    pub(crate) payload: Bytes,
}

impl From<async_nats::Message> for Incoming {
    /// Moves the message's parts; its headers move into their [`Arc`] (one allocation for a
    /// message that has headers, none for one without).
    fn from(msg: async_nats::Message) -> Self {
        Self {
            subject: msg.subject,
            reply: msg.reply,
            headers: msg.headers.map(Arc::new),
            payload: msg.payload,
        }
    }
}
