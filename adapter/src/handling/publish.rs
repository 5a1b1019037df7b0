//! Publishing what a plan says, over async-nats: a [`Publish`] (a Core copy or a JetStream
//! settlement, built and owned, so that a loop can keep it pending while its message moves),
//! the plain publishes of delayed copies ([`publish_plain`]), the headers they carry, and a
//! settlement sent again through the client that replaced a dead one (rule 20). Nothing here
//! decides anything: the executor (`handling::executor`) says what to publish.

use std::str::FromStr;

use async_nats::header::{HeaderName, HeaderValue};
use async_nats::{Client, HeaderMap, Subject};
use bytes::Bytes;
use ruststream_settlement::{
    Headers, Message, Publication, RETRY_COUNT_HEADER, RetryCount, is_dropped_directive,
    is_retry_count, wire_len,
};

use crate::state::mount_context::MountContext;
use crate::support::incoming::Incoming;

/// A publish that failed; the plan stopped there.
#[derive(Debug)]
pub(crate) struct PublishFailed {
    /// What was not published.
    pub(crate) what: Unpublished,
    /// Why, for the log.
    pub(crate) reason: String,
    /// A JetStream settlement the mount's client refused: its ack reply subject and payload,
    /// to be sent again through the client the supervisor connects in its place
    /// ([`settle_through_new_client`]); `None` once that was tried, and for anything else.
    pub(crate) settlement: Option<(Subject, Bytes)>,
}

/// What a [`PublishFailed`] did not publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unpublished {
    /// A Core copy (at once, or handed to the delay queue).
    Copy,
    /// A Core copy larger than the server's `max_payload`: never sent (rule 21).
    CopyTooLarge,
    /// A dead letter.
    DeadLetter,
    /// A JetStream settlement (`+ACK`, `-NAK`, `+TERM`): the mount's client refused it and no
    /// new client took it in time. Nothing is planned after it: the server redelivers.
    Settlement,
}

impl PublishFailed {
    pub(crate) fn new(what: Unpublished, reason: impl std::fmt::Display) -> Self {
        Self {
            what,
            reason: reason.to_string(),
            settlement: None,
        }
    }
}

/// Refuses a Core copy that the server would refuse for its size (rule 21): its headers and
/// payload (`size`, as [`ruststream_settlement::wire_len`] counts them) over the connection's
/// `max_payload`.
pub(super) fn check_copy_size(client: &Client, size: usize) -> Result<(), PublishFailed> {
    let max = client.max_payload();
    match size > max {
        true => Err(PublishFailed::new(
            Unpublished::CopyTooLarge,
            format_args!("the copy is {size} bytes, over the server's max_payload of {max}"),
        )),
        false => Ok(()),
    }
}

/// The delivered message's parts, as the core builds copies and dead letters from.
pub(crate) fn core_message(msg: &Incoming) -> Message {
    let mut headers = Headers::new();
    if let Some(map) = &msg.headers {
        for (name, values) in map.iter() {
            let name = Bytes::copy_from_slice(name.as_ref());
            for value in values {
                headers.append(name.clone(), Bytes::copy_from_slice(value.as_ref()));
            }
        }
    }
    Message {
        reply: msg
            .reply
            .as_ref()
            .map(|r| Bytes::copy_from_slice(r.as_bytes())),
        headers,
        payload: msg.payload.clone(),
    }
}

/// The delivered headers as `(name, value)` byte pairs, one per value.
pub(crate) fn header_pairs(msg: &Incoming) -> impl Iterator<Item = (&[u8], &[u8])> {
    msg.headers.iter().flat_map(|map| {
        map.iter().flat_map(|(name, values)| {
            values
                .iter()
                .map(move |v| (AsRef::<[u8]>::as_ref(name), AsRef::<[u8]>::as_ref(v)))
        })
    })
}

/// The core's header list as async-nats headers. Every pair came from async-nats or from the
/// core's ASCII retry-count header, so none fails to convert; one that did would be dropped
/// with an error log rather than panic.
pub(super) fn header_map(headers: &Headers) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in headers.iter() {
        let converted = std::str::from_utf8(name)
            .ok()
            .and_then(|n| HeaderName::from_str(n).ok())
            .zip(
                std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| HeaderValue::from_str(v).ok()),
            );
        match converted {
            Some((n, v)) => map.append(n, v),
            None => tracing::error!(
                header = %String::from_utf8_lossy(name),
                "header cannot be represented by async-nats; left out of the publication"
            ),
        }
    }
    map
}

/// The headers of a Core copy of `msg` after attempt `retry_count`, as async-nats headers,
/// and the copy's size as the server counts it against `max_payload`: the same pairs as
/// [`Headers::for_copy`] (every delivered pair but the retry-count header and the dropped
/// directives, then `x-ruststream-retry-count`) and the same size as
/// [`Publication::wire_len`], built straight from the delivered headers, without the
/// round trip through the core's header list.
pub(crate) fn copy_headers(msg: &Incoming, retry_count: RetryCount) -> (HeaderMap, usize) {
    let mut map = HeaderMap::new();
    if let Some(delivered) = &msg.headers {
        for (name, values) in delivered.iter() {
            let bytes: &[u8] = name.as_ref();
            if is_retry_count(bytes) || is_dropped_directive(bytes) {
                continue;
            }
            for value in values {
                map.append(name.clone(), value.clone());
            }
        }
    }
    let mut digits = itoa::Buffer::new();
    map.insert(
        HeaderName::from_static(RETRY_COUNT_HEADER),
        digits.format(retry_count.0),
    );
    let pairs = map.iter().flat_map(|(name, values)| {
        let name: &[u8] = name.as_ref();
        values.iter().map(move |v| (name.len(), v.as_str().len()))
    });
    let size = wire_len(msg.payload.len(), pairs);
    (map, size)
}

/// A publish a plan hands to the client: a Core copy, or a JetStream settlement. Built and
/// owned: it borrows nothing of the delivered message, so that a mount loop can keep it
/// pending while the message moves.
pub(crate) enum Publish {
    /// A Core copy (rule 4).
    Copy {
        to: Subject,
        reply: Option<Subject>,
        headers: HeaderMap,
        payload: Bytes,
    },
    /// A JetStream settlement: `payload` (`+ACK`, `-NAK`, `+TERM`) to the delivery's ack reply
    /// subject `reply`.
    Settlement { reply: Subject, payload: Bytes },
}

impl Publish {
    /// A Core copy of `msg` after attempt `retry_count`, to `subject` (rule 4): its reply
    /// subject and payload unchanged, its headers as [`copy_headers`] gives them.
    ///
    /// # Errors
    /// [`Unpublished::CopyTooLarge`] when the server would refuse it for its size, over its
    /// `max_payload` (rule 21).
    pub(crate) fn copy(
        ctx: &MountContext,
        msg: &Incoming,
        subject: &ruststream_settlement::Subject,
        retry_count: RetryCount,
    ) -> Result<Self, PublishFailed> {
        let (headers, size) = copy_headers(msg, retry_count);
        check_copy_size(&ctx.client, size)?;
        // A copy goes back to the subject it came on (a Core subject mount): no new subject.
        let to = match msg.subject.as_str() == subject.as_str() {
            true => msg.subject.clone(),
            false => Subject::from(subject.as_str()),
        };
        Ok(Self::Copy {
            to,
            reply: msg.reply.clone(),
            headers,
            payload: msg.payload.clone(),
        })
    }

    /// Hands a JetStream settlement to `client` if the client takes it at once (its command
    /// queue has room), without building [`send`](Self::send)'s future, which is about 1 KiB:
    /// what [`send`](Self::send) would have given; `None` when it has to wait, or is a Core
    /// copy (always sent by [`send`](Self::send)).
    pub(crate) fn send_now(&self, client: &Client) -> Option<Result<(), PublishFailed>> {
        let Self::Settlement { reply, payload } = self else {
            return None;
        };
        // Not taken: the command that was not queued is dropped with the future.
        let sent =
            futures_util::FutureExt::now_or_never(client.publish(reply.clone(), payload.clone()))?;
        Some(sent.map_err(|e| PublishFailed {
            settlement: Some((reply.clone(), payload.clone())),
            ..PublishFailed::new(Unpublished::Settlement, e)
        }))
    }

    /// Hands it to `client`, without waiting for the server.
    ///
    /// # Errors
    /// [`Unpublished::Copy`] or [`Unpublished::Settlement`] when the client refuses it
    /// (closed); a refused settlement keeps its ack reply subject and payload in
    /// [`PublishFailed::settlement`], to be sent through a new client.
    pub(crate) async fn send(self, client: &Client) -> Result<(), PublishFailed> {
        match self {
            Self::Copy {
                to,
                reply: Some(reply),
                headers,
                payload,
            } => client
                .publish_with_reply_and_headers(to, reply, headers, payload)
                .await
                .map_err(|e| PublishFailed::new(Unpublished::Copy, e)),
            Self::Copy {
                to,
                reply: None,
                headers,
                payload,
            } => client
                .publish_with_headers(to, headers, payload)
                .await
                .map_err(|e| PublishFailed::new(Unpublished::Copy, e)),
            Self::Settlement { reply, payload } => {
                // Its subject and payload kept, to be sent again through a new client.
                let kept = (reply.clone(), payload.clone());
                client
                    .publish(reply, payload)
                    .await
                    .map_err(|e| PublishFailed {
                        settlement: Some(kept),
                        ..PublishFailed::new(Unpublished::Settlement, e)
                    })
            }
        }
    }
}

/// Publishes a Core copy (or any plain publication) with its reply subject and headers; a
/// failure says it is `what`.
pub(crate) async fn publish_plain(
    client: &Client,
    p: Publication,
    what: Unpublished,
) -> Result<(), PublishFailed> {
    let subject = async_nats::Subject::from(p.subject.as_str());
    let headers = header_map(&p.headers);
    let result = match p.reply {
        Some(reply) => {
            let reply = String::from_utf8_lossy(&reply).into_owned();
            client
                .publish_with_reply_and_headers(subject, reply, headers, p.payload)
                .await
        }
        None => {
            client
                .publish_with_headers(subject, headers, p.payload)
                .await
        }
    };
    result.map_err(|e| PublishFailed::new(what, e))
}

/// How long a settlement that the mount's client could not send waits for the supervisor's
/// new client (rule 20), at most; never more than half the consumer's `ack_wait`.
pub(crate) const NEW_CLIENT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// Sends a settlement that the mount's client refused (`error`: why, as the refusal said it; its
/// connection task is gone) through the client the supervisor connects in its place: an ack reply
/// subject is good on any connection, so the delivery is settled once, not redelivered and run
/// again. Waits for that client at most [`NEW_CLIENT_PATIENCE`] or half `ack_wait`; logs the
/// settlement as not sent when none comes, or when it fails too. Whether it was sent.
pub(crate) async fn settle_through_new_client(
    ctx: &MountContext,
    msg: &Incoming,
    reply: Subject,
    payload: Bytes,
    error: &str,
) -> bool {
    let patience = ctx
        .lease_settings()
        .ack_wait
        .map_or(NEW_CLIENT_PATIENCE, |ack_wait| {
            NEW_CLIENT_PATIENCE.min(ack_wait / 2)
        });
    let mut clients = ctx.clients.clone();
    let newer = async {
        loop {
            if clients.changed().await.is_err() {
                return None;
            }
            let client = clients.borrow_and_update().clone();
            if client.publish(reply.clone(), payload.clone()).await.is_ok() {
                return Some(());
            }
        }
    };
    match tokio::time::timeout(patience, newer).await {
        Ok(Some(())) => {
            tracing::info!(mount = %ctx.name, subject = %msg.subject, first_error = %error,
                "settlement sent through the new client");
            true
        }
        Ok(None) | Err(_) => {
            tracing::error!(mount = %ctx.name, subject = %msg.subject, error = %error,
                "settlement not sent: the server delivers the message again after ack_wait");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(headers: Option<HeaderMap>) -> Incoming {
        Incoming::from(async_nats::Message {
            subject: "orders.new".into(),
            reply: None,
            payload: Bytes::from_static(b"{\"id\":1}"),
            headers,
            status: None,
            description: None,
            length: 0,
        })
    }

    /// `(name, value)` pairs, sorted: async-nats' header map keeps no order.
    fn pairs<'a>(it: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut v: Vec<_> = it.map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
        v.sort();
        v
    }

    /// The copy built straight on async-nats' headers is the core's copy: the same pairs and
    /// the same size against `max_payload`.
    #[test]
    fn copy_headers_are_the_cores_copy() {
        let mut many = HeaderMap::new();
        many.append("Trace", "a");
        many.append("Trace", "b");
        many.insert("X-RustStream-Retry-Count", "7");
        many.insert("Nats-Msg-Id", "dup-1");
        many.insert("Nats-Schedule-Next", "x");
        many.insert("Keep-Me", "yes");
        for headers in [None, Some(HeaderMap::new()), Some(many)] {
            let msg = message(headers);
            for count in [1, 9, 1_000_000] {
                let retry_count = RetryCount(count);
                let subject = ruststream_settlement::Subject::new("orders.new").expect("a subject");
                let core = core_message(&msg).copy(&subject, retry_count);
                let (map, size) = copy_headers(&msg, retry_count);
                let ours: Vec<(&[u8], &[u8])> = map
                    .iter()
                    .flat_map(|(n, vs)| vs.iter().map(move |v| (n.as_ref(), v.as_str().as_bytes())))
                    .collect();
                assert_eq!(pairs(ours.into_iter()), pairs(core.headers.iter()));
                assert_eq!(size, core.wire_len());
            }
        }
    }
}
