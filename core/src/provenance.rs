//! Provenance headers on dead letters, for mounts that ask for them (rule 19).
//!
//! By default a dead letter is the delivery as it arrived (Part A). A mount that asks for
//! provenance gets these headers appended to each of its dead letters, after the delivery's
//! own and before the runtime's `Nats-Msg-Id`:
//!
//! | header | value |
//! |---|---|
//! | `Ruststream-Subject` | the subject the delivery came on |
//! | `Ruststream-Mount` | the mount's name |
//! | `Ruststream-Stream` | JetStream only: the stream |
//! | `Ruststream-Consumer` | JetStream only: the consumer |
//! | `Ruststream-Stream-Sequence` | JetStream only: the message's stream sequence |
//! | `Ruststream-Attempt` | the attempt that dead-lettered it, from 1 |
//! | `Ruststream-Reason` | [`DeadLetterReason::as_str`]: `limit`, `rejected`, `undecodable`, `handler-error`, `copy-too-large` |
//! | `Ruststream-Error` | reason `handler-error` only: the handler's error text, on one line, at most [`PROVENANCE_ERROR_MAX`] bytes |
//! | `Ruststream-Msg-Id` | only when the delivery carried a `Nats-Msg-Id`: that id, as it was (rule 9 keeps it off the dead letter itself) |
//!
//! **No collision with the original's headers.** The names are in the runtime's own
//! `Ruststream-` namespace. A delivery that already carries some of them (a dead letter that
//! was replayed, and dead-lettered again) keeps its values, and the new ones are appended
//! after them: each header then holds one value per dead-lettering, oldest first, and the last
//! is this one's. Nothing of the original is changed or removed.
//!
//! **The original's message id.** A dead letter never carries the delivery's own `Nats-Msg-Id`
//! (rule 9: the dead-letter stream would deduplicate on it), so provenance keeps it under
//! `Ruststream-Msg-Id`, for an operator to trace a dead letter back to what was published. A
//! replay keeps `Ruststream-Msg-Id` and carries an id of its own
//! ([`replay_msg_id`](crate::replay_msg_id)), never the original's: the original's stream
//! would drop the replay as a duplicate within its window. A replay dead-lettered again
//! appends the replay's id after the original's, so the first value is always the first
//! publish's id ([`DeadLetterRecord::original_msg_id`](crate::DeadLetterRecord)).

use bytes::Bytes;

use crate::delivery::{Delivery, Model};
use crate::header::Headers;
use crate::plan::DeadLetterReason;

/// `Ruststream-Subject`: the subject the delivery came on.
pub const PROVENANCE_SUBJECT: &str = "Ruststream-Subject";
/// `Ruststream-Mount`: the mount's name.
pub const PROVENANCE_MOUNT: &str = "Ruststream-Mount";
/// `Ruststream-Stream`: the stream (JetStream only).
pub const PROVENANCE_STREAM: &str = "Ruststream-Stream";
/// `Ruststream-Consumer`: the consumer (JetStream only).
pub const PROVENANCE_CONSUMER: &str = "Ruststream-Consumer";
/// `Ruststream-Stream-Sequence`: the message's stream sequence (JetStream only).
pub const PROVENANCE_STREAM_SEQUENCE: &str = "Ruststream-Stream-Sequence";
/// `Ruststream-Attempt`: the attempt that dead-lettered it, from 1.
pub const PROVENANCE_ATTEMPT: &str = "Ruststream-Attempt";
/// `Ruststream-Reason`: [`DeadLetterReason::as_str`].
pub const PROVENANCE_REASON: &str = "Ruststream-Reason";
/// `Ruststream-Error`: the handler's error text (reason `handler-error` only).
pub const PROVENANCE_ERROR: &str = "Ruststream-Error";

/// `Ruststream-Msg-Id`: the delivery's own `Nats-Msg-Id`, when it had one.
pub const PROVENANCE_MSG_ID: &str = "Ruststream-Msg-Id";

/// The most bytes of a handler's error text that `Ruststream-Error` carries: 1,024. A longer
/// text is cut at a character boundary and ends with `…`.
pub const PROVENANCE_ERROR_MAX: usize = 1024;

/// What a mount that asks for provenance says about a dead letter, beside what the delivery
/// itself tells (subject, stream, consumer, stream sequence, attempt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Provenance<'a> {
    /// The mount's name.
    pub mount: &'a str,
    /// Why it is dead-lettered: the plan's ([`Action::PublishDeadLetter`](crate::Action)),
    /// unless the handler returned an error (then [`DeadLetterReason::HandlerError`]).
    pub reason: DeadLetterReason,
    /// The handler's error text, when it returned one.
    pub error: Option<&'a str>,
}

impl<'a> Provenance<'a> {
    /// The provenance of a dead letter the plan gives for `reason`, from mount `mount`, whose
    /// handler returned `error` (if it did): the reason is then
    /// [`DeadLetterReason::HandlerError`] whatever outcome the error policy chose, since the
    /// error is why the delivery did not succeed ([`DeadLetterReason::with_error`]).
    pub fn new(mount: &'a str, reason: DeadLetterReason, error: Option<&'a str>) -> Self {
        let reason = reason.with_error(error.is_some());
        Self {
            mount,
            reason,
            error: error.filter(|_| reason == DeadLetterReason::HandlerError),
        }
    }

    /// Appends the provenance headers of `delivery` to `headers` (see the module docs);
    /// `msg_id` is the delivery's own `Nats-Msg-Id`, when it had one.
    pub fn append_to(&self, headers: &mut Headers, delivery: &Delivery<'_>, msg_id: Option<&[u8]>) {
        let mut put = |name: &'static str, value: Bytes| {
            headers.append(Bytes::from_static(name.as_bytes()), value);
        };
        put(
            PROVENANCE_SUBJECT,
            Bytes::copy_from_slice(delivery.subject.as_bytes()),
        );
        put(
            PROVENANCE_MOUNT,
            Bytes::copy_from_slice(self.mount.as_bytes()),
        );
        if let Model::JetStream(reply) = delivery.model {
            put(
                PROVENANCE_STREAM,
                Bytes::copy_from_slice(reply.stream.as_bytes()),
            );
            put(
                PROVENANCE_CONSUMER,
                Bytes::copy_from_slice(reply.consumer.as_bytes()),
            );
            put(
                PROVENANCE_STREAM_SEQUENCE,
                Bytes::from(reply.stream_sequence.to_string()),
            );
        }
        put(
            PROVENANCE_ATTEMPT,
            Bytes::from(delivery.attempt().get().to_string()),
        );
        put(
            PROVENANCE_REASON,
            Bytes::from_static(self.reason.as_str().as_bytes()),
        );
        if let Some(error) = self.error {
            put(PROVENANCE_ERROR, Bytes::from(one_line(error)));
        }
        if let Some(id) = msg_id {
            put(PROVENANCE_MSG_ID, Bytes::copy_from_slice(id));
        }
    }
}

/// `text` as a header value: control characters (CR and LF among them, which would end the
/// header) become spaces, surrounding whitespace goes, and it is cut to
/// [`PROVENANCE_ERROR_MAX`] bytes at a character boundary, ending with `…` when cut.
pub(crate) fn one_line(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let clean = clean.trim();
    if clean.len() <= PROVENANCE_ERROR_MAX {
        return clean.to_owned();
    }
    const MORE: &str = "…";
    let mut end = PROVENANCE_ERROR_MAX - MORE.len();
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MORE}", &clean[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::RetryCountReading;
    use crate::reply::AckReply;

    fn pairs(h: &Headers) -> Vec<(String, String)> {
        h.iter()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn jetstream_provenance_names_every_part() {
        let reply = AckReply::parse(b"$JS.ACK.ORDERS.worker.3.41.17.1700000000000000000.0")
            .expect("an ack reply subject");
        let delivery = Delivery::jetstream("orders.new", reply);
        let mut h = Headers::new();
        h.append(Bytes::from_static(b"Keep"), Bytes::from_static(b"me"));
        Provenance::new("orders", DeadLetterReason::Limit, None).append_to(&mut h, &delivery, None);
        assert_eq!(
            pairs(&h),
            [
                ("Keep", "me"),
                ("Ruststream-Subject", "orders.new"),
                ("Ruststream-Mount", "orders"),
                ("Ruststream-Stream", "ORDERS"),
                ("Ruststream-Consumer", "worker"),
                ("Ruststream-Stream-Sequence", "41"),
                ("Ruststream-Attempt", "3"),
                ("Ruststream-Reason", "limit"),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn core_provenance_has_no_stream_parts_and_carries_the_error() {
        let delivery = Delivery::core("orders.new", RetryCountReading::read([]));
        let mut h = Headers::new();
        Provenance::new("core", DeadLetterReason::Rejected, Some("bad\r\nvalue"))
            .append_to(&mut h, &delivery, None);
        assert_eq!(
            pairs(&h),
            [
                ("Ruststream-Subject", "orders.new"),
                ("Ruststream-Mount", "core"),
                ("Ruststream-Attempt", "1"),
                ("Ruststream-Reason", "handler-error"),
                ("Ruststream-Error", "bad  value"),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn an_error_does_not_change_undecodable_or_copy_too_large() {
        for reason in [
            DeadLetterReason::Undecodable,
            DeadLetterReason::CopyTooLarge,
        ] {
            let p = Provenance::new("m", reason, Some("e"));
            assert_eq!((p.reason, p.error), (reason, None));
        }
    }

    #[test]
    fn a_long_error_is_cut_at_a_character_boundary() {
        let text = "é".repeat(PROVENANCE_ERROR_MAX);
        let line = one_line(&text);
        assert!(line.len() <= PROVENANCE_ERROR_MAX, "{}", line.len());
        assert!(line.ends_with('…'));
        assert_eq!(one_line("  short\n"), "short");
    }
}
