//! Redrive: what a dead letter says of itself, and the message it was before it was
//! dead-lettered, to be sent back (issue 40's `ruststream dlq`).
//!
//! A dead letter is the delivery as it arrived (rule 9: minus the JetStream publish
//! directives), then, on a mount that asks for it, the provenance headers (rule 19,
//! [`Provenance`](crate::Provenance)), then, on JetStream, the runtime's own `Nats-Msg-Id`
//! ([`dead_letter_msg_id`]). This module reads that back:
//!
//! - [`DeadLetterRecord::read`]: the provenance of the **latest** dead-lettering. A dead letter
//!   that was replayed by another tool, which left its `Ruststream-` headers, and dead-lettered
//!   again holds one value per dead-lettering under each name, oldest first (rule 22); the
//!   last one is this dead letter's. Headers are read as pairs in any order across names and
//!   in order within a name, which is what a client's header map keeps (async-nats' does not
//!   keep the order across names).
//! - [`restored_headers`]: the headers the replay carries: the dead letter's, without the
//!   values its latest dead-lettering appended, without any `Nats-Msg-Id` (the runtime's, and
//!   the original's was never there: rule 9 drops it) and without publish directives (which a
//!   dead letter never carries; one stored there by hand would make the stream refuse or
//!   rewrite the replay). Every other header keeps its values in order, byte for byte,
//!   `Ruststream-Msg-Id` among them: the original's id travels with the replay, so that the
//!   replay too traces back to the first publish.
//! - [`replay_msg_id`]: the `Nats-Msg-Id` a replay into a stream carries, made from the dead
//!   letter, so that the same dead letter replayed twice within the target stream's duplicate
//!   window is stored once.
//! - [`DeadLetterFilter`]: which dead letters a command takes.
//!
//! Which dead-lettering was on JetStream: one whose dead letter carries the runtime's
//! `Nats-Msg-Id` (its stream, consumer and sequence are read from it), or, without it (a
//! dead letter that the id would have pushed past `max_payload`), one where every
//! dead-lettering left a `Ruststream-Stream`.

use std::borrow::Cow;

use crate::header::{MSG_ID_HEADER, is_dropped_directive};
use crate::plan::DeadLetterReason;
use crate::provenance::{
    PROVENANCE_ATTEMPT, PROVENANCE_CONSUMER, PROVENANCE_ERROR, PROVENANCE_MOUNT, PROVENANCE_MSG_ID,
    PROVENANCE_REASON, PROVENANCE_STREAM, PROVENANCE_STREAM_SEQUENCE, PROVENANCE_SUBJECT,
};
use crate::subject::{Subject, Wildcard};

/// The prefix of the `Nats-Msg-Id` the runtime gives a JetStream dead letter
/// ([`dead_letter_msg_id`](crate::dead_letter_msg_id)).
pub const DEAD_LETTER_MSG_ID_PREFIX: &str = "ruststream.dead-letter.";

/// The prefix of the `Nats-Msg-Id` a replay into a stream carries ([`replay_msg_id`]).
pub const REPLAY_MSG_ID_PREFIX: &str = "ruststream.replay.";

/// The `Nats-Msg-Id` of the replay of the dead letter stored in stream `dead_letter_stream`
/// at `sequence`, at `stored` (nanoseconds since the Unix epoch):
/// `ruststream.replay.<stream>.<sequence>.<stored>`.
///
/// The same dead letter always gets the same id: a replay run again (after an interruption,
/// or by mistake) within the target stream's duplicate window is stored once, the stream
/// answering `duplicate`. Outside the window it is stored again. The stored time tells apart
/// dead letters of a dead-letter stream deleted and created again, whose sequences start over.
/// It is never the original's own id: the stream that stored the original would take the
/// replay for a duplicate within its window and drop it.
pub fn replay_msg_id(dead_letter_stream: &str, sequence: u64, stored: u64) -> String {
    format!("{REPLAY_MSG_ID_PREFIX}{dead_letter_stream}.{sequence}.{stored}")
}

/// What a dead letter says of where it came from and why: its latest dead-lettering's
/// provenance (rule 19). Every field is `None` for a dead letter without provenance (a mount
/// that did not ask for it), except the JetStream origin that the runtime's `Nats-Msg-Id`
/// gives on its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadLetterRecord {
    /// `Ruststream-Subject`: the subject the delivery came on.
    pub subject: Option<String>,
    /// `Ruststream-Mount`: the mount that dead-lettered it.
    pub mount: Option<String>,
    /// The stream it was delivered from (JetStream).
    pub stream: Option<String>,
    /// The consumer it was delivered by (JetStream).
    pub consumer: Option<String>,
    /// Its sequence in that stream (JetStream).
    pub stream_sequence: Option<u64>,
    /// `Ruststream-Attempt`: the attempt that dead-lettered it, from 1.
    pub attempt: Option<u64>,
    /// `Ruststream-Reason`, as written (one of [`DeadLetterReason::as_str`]'s values when
    /// the runtime wrote it).
    pub reason: Option<String>,
    /// `Ruststream-Error`: the handler's error text (reason `handler-error`).
    pub error: Option<String>,
    /// The runtime's own `Nats-Msg-Id` (JetStream dead letters).
    pub msg_id: Option<String>,
    /// `Ruststream-Msg-Id`'s first value: the `Nats-Msg-Id` the message carried when it was
    /// first dead-lettered with provenance, which traces it back to its publish (later
    /// values are the ids of its replays, dead-lettered again).
    pub original_msg_id: Option<String>,
    /// How many times it was dead-lettered with provenance: how many values
    /// `Ruststream-Subject` holds (more than 1 for a dead letter replayed with its
    /// provenance left on, and dead-lettered again).
    pub dead_letterings: usize,
}

/// The values under each provenance name (indexed as [`NAMES`]), and the runtime's id,
/// gathered from headers.
#[derive(Default)]
struct Gathered<'h> {
    values: [Vec<&'h [u8]>; 8],
    msg_id: Option<&'h [u8]>,
    /// `Ruststream-Msg-Id`'s first value.
    original_msg_id: Option<&'h [u8]>,
}

/// The indices of [`NAMES`].
const SUBJECT: usize = 0;
const MOUNT: usize = 1;
const STREAM: usize = 2;
const CONSUMER: usize = 3;
const STREAM_SEQUENCE: usize = 4;
const ATTEMPT: usize = 5;
const REASON: usize = 6;
const ERROR: usize = 7;

/// Which provenance name `name` is (ASCII case ignored), as an index into [`NAMES`].
fn provenance_index(name: &[u8]) -> Option<usize> {
    NAMES
        .iter()
        .position(|n| n.as_bytes().eq_ignore_ascii_case(name))
}

/// The provenance names, in the order of [`Gathered`]'s values ([`SUBJECT`] …).
const NAMES: [&str; 8] = [
    PROVENANCE_SUBJECT,
    PROVENANCE_MOUNT,
    PROVENANCE_STREAM,
    PROVENANCE_CONSUMER,
    PROVENANCE_STREAM_SEQUENCE,
    PROVENANCE_ATTEMPT,
    PROVENANCE_REASON,
    PROVENANCE_ERROR,
];

fn is_msg_id(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(MSG_ID_HEADER.as_bytes())
}

fn is_runtime_msg_id(value: &[u8]) -> bool {
    value.starts_with(DEAD_LETTER_MSG_ID_PREFIX.as_bytes())
}

impl<'h> Gathered<'h> {
    fn of<I>(headers: I) -> Self
    where
        I: IntoIterator<Item = (&'h [u8], &'h [u8])>,
    {
        let mut g = Self::default();
        for (name, value) in headers {
            if let Some(i) = provenance_index(name) {
                g.values[i].push(value);
            } else if is_msg_id(name) && is_runtime_msg_id(value) {
                g.msg_id = Some(value);
            } else if name.eq_ignore_ascii_case(PROVENANCE_MSG_ID.as_bytes()) {
                g.original_msg_id = g.original_msg_id.or(Some(value));
            }
        }
        g
    }

    /// The runtime's id split into (stream, consumer, stream sequence), when it reads.
    fn msg_id_origin(&self) -> Option<(&'h [u8], &'h [u8], u64)> {
        let rest = self
            .msg_id?
            .strip_prefix(DEAD_LETTER_MSG_ID_PREFIX.as_bytes())?;
        // stream.consumer.sequence.stored: names hold no `.`.
        let mut parts = rest.split(|&b| b == b'.');
        let stream = parts.next()?;
        let consumer = parts.next()?;
        let sequence = parse_u64(parts.next()?)?;
        let _stored = parse_u64(parts.next()?)?;
        (parts.next().is_none() && !stream.is_empty() && !consumer.is_empty())
            .then_some((stream, consumer, sequence))
    }

    /// Whether the latest dead-lettering was on JetStream (see the module docs).
    fn latest_on_jetstream(&self) -> bool {
        self.msg_id_origin().is_some()
            || (!self.values[STREAM].is_empty()
                && self.values[STREAM].len() >= self.values[SUBJECT].len())
    }

    /// Whether the latest dead-lettering wrote `Ruststream-Error`: its reason is
    /// `handler-error`.
    fn latest_has_error(&self) -> bool {
        !self.values[ERROR].is_empty()
            && self.values[REASON]
                .last()
                .is_some_and(|r| *r == DeadLetterReason::HandlerError.as_str().as_bytes())
    }
}

fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

fn text(value: &[u8]) -> String {
    String::from_utf8_lossy(value).into_owned()
}

impl DeadLetterRecord {
    /// Reads a dead letter's headers (pairs of name and value; names compared without regard
    /// to ASCII case). Values that are not UTF-8 are read lossily; an attempt or a stream
    /// sequence that is not plain digits reads as `None`.
    pub fn read<'h, I>(headers: I) -> Self
    where
        I: IntoIterator<Item = (&'h [u8], &'h [u8])>,
    {
        let g = Gathered::of(headers);
        let last = |values: &Vec<&[u8]>| values.last().map(|v| text(v));
        let (stream, consumer, stream_sequence) = match g.msg_id_origin() {
            Some((stream, consumer, sequence)) => {
                (Some(text(stream)), Some(text(consumer)), Some(sequence))
            }
            None if g.latest_on_jetstream() => (
                last(&g.values[STREAM]),
                last(&g.values[CONSUMER]),
                g.values[STREAM_SEQUENCE].last().and_then(|v| parse_u64(v)),
            ),
            None => (None, None, None),
        };
        Self {
            subject: last(&g.values[SUBJECT]),
            mount: last(&g.values[MOUNT]),
            stream,
            consumer,
            stream_sequence,
            attempt: g.values[ATTEMPT].last().and_then(|v| parse_u64(v)),
            reason: last(&g.values[REASON]),
            error: g
                .latest_has_error()
                .then(|| last(&g.values[ERROR]))
                .flatten(),
            msg_id: g.msg_id.map(text),
            original_msg_id: g.original_msg_id.map(text),
            dead_letterings: g.values[SUBJECT].len(),
        }
    }

    /// Whether the dead letter carries anything the runtime wrote: provenance, or its own
    /// `Nats-Msg-Id`. A message without either may still be a dead letter (a Core mount's,
    /// without provenance), but nothing tells.
    pub fn is_marked(&self) -> bool {
        self.dead_letterings > 0 || self.reason.is_some() || self.msg_id.is_some()
    }

    /// The reason, when it is one the runtime writes.
    pub fn known_reason(&self) -> Option<DeadLetterReason> {
        self.reason.as_deref().and_then(DeadLetterReason::from_name)
    }
}

/// The headers a replay of the dead letter with `headers` carries (see the module docs), in
/// the order given; the replay's own `Nats-Msg-Id` is for the caller to add.
pub fn restored_headers<'h, I>(headers: I) -> Vec<(&'h [u8], &'h [u8])>
where
    I: IntoIterator<Item = (&'h [u8], &'h [u8])> + Clone,
{
    let g = Gathered::of(headers.clone());
    // How many values of each provenance name the latest dead-lettering appended (the last
    // ones): Subject, Mount, Attempt, Reason always; the JetStream three on JetStream; Error
    // with reason handler-error. A name it did not write keeps all of its values.
    let jetstream = g.latest_on_jetstream();
    let appended = [
        true,
        true,
        jetstream,
        jetstream,
        jetstream,
        true,
        true,
        g.latest_has_error(),
    ];
    // The index, among a name's values, of the one to leave out: the last, where appended.
    let drop_at: [Option<usize>; 8] = std::array::from_fn(|i| {
        appended[i]
            .then(|| g.values[i].len().checked_sub(1))
            .flatten()
    });
    let mut seen = [0usize; 8];
    headers
        .into_iter()
        .filter(|(name, _)| {
            if is_msg_id(name) || is_dropped_directive(name) {
                return false;
            }
            match provenance_index(name) {
                Some(i) => {
                    let k = seen[i];
                    seen[i] += 1;
                    drop_at[i] != Some(k)
                }
                None => true,
            }
        })
        .collect()
}

/// Which dead letters a command takes: every condition given must hold; none given takes
/// them all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadLetterFilter {
    /// Reasons (`Ruststream-Reason`), any of them.
    pub reasons: Vec<DeadLetterReason>,
    /// Mounts (`Ruststream-Mount`), any of them.
    pub mounts: Vec<String>,
    /// The original subject (`Ruststream-Subject`) matches this subject or wildcard.
    pub subject: Option<Wildcard>,
    /// Stored at or after this time, in nanoseconds since the Unix epoch.
    pub since: Option<u64>,
    /// Stored before this time, in nanoseconds since the Unix epoch.
    pub until: Option<u64>,
    /// Its sequence in the dead-letter stream is at least this (to resume where a command
    /// stopped).
    pub from_sequence: Option<u64>,
}

impl DeadLetterFilter {
    /// Whether the filter takes every dead letter.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Whether the dead letter `record`, stored at `sequence` at `stored` (nanoseconds since
    /// the Unix epoch), is taken. A condition on provenance never takes a dead letter without
    /// that provenance.
    pub fn matches(&self, record: &DeadLetterRecord, sequence: u64, stored: u64) -> bool {
        let reason_ok = self.reasons.is_empty()
            || record
                .known_reason()
                .is_some_and(|r| self.reasons.contains(&r));
        let mount_ok = self.mounts.is_empty()
            || record
                .mount
                .as_ref()
                .is_some_and(|m| self.mounts.contains(m));
        let subject_ok = match &self.subject {
            None => true,
            Some(pattern) => record
                .subject
                .as_deref()
                .and_then(|s| Subject::new(s).ok())
                .is_some_and(|s| pattern.matches(&s)),
        };
        reason_ok
            && mount_ok
            && subject_ok
            && self.since.is_none_or(|t| stored >= t)
            && self.until.is_none_or(|t| stored < t)
            && self.from_sequence.is_none_or(|s| sequence >= s)
    }

    /// The filter in the command line's words, for messages (`--reason limit --mount
    /// orders`); `Cow::Borrowed("no filter")` when empty.
    pub fn describe(&self) -> Cow<'static, str> {
        if self.is_empty() {
            return Cow::Borrowed("no filter");
        }
        let mut parts = Vec::new();
        for r in &self.reasons {
            parts.push(format!("--reason {r}"));
        }
        for m in &self.mounts {
            parts.push(format!("--mount {m}"));
        }
        if let Some(s) = &self.subject {
            parts.push(format!("--subject {}", s.as_str()));
        }
        if let Some(t) = self.since {
            parts.push(format!("--since {}", rfc3339(t)));
        }
        if let Some(t) = self.until {
            parts.push(format!("--until {}", rfc3339(t)));
        }
        if let Some(s) = self.from_sequence {
            parts.push(format!("--from-seq {s}"));
        }
        Cow::Owned(parts.join(" "))
    }
}

/// `nanos` since the Unix epoch as an RFC 3339 time in UTC, to the millisecond
/// (`2026-12-07T08:00:00.000Z`), for messages.
pub fn rfc3339(nanos: u64) -> String {
    let secs = nanos / 1_000_000_000;
    let millis = (nanos / 1_000_000) % 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (hour, minute, second) = (rest / 3600, (rest % 3600) / 60, rest % 60);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's `civil_from_days`).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z")
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::delivery::Delivery;
    use crate::header::{Headers, RetryCountReading, dead_letter_msg_id};
    use crate::provenance::Provenance;
    use crate::reply::AckReply;

    fn pairs(h: &Headers) -> Vec<(&[u8], &[u8])> {
        h.iter().collect()
    }

    /// A JetStream delivery's dead letter as the runtime writes it: the original headers,
    /// provenance, then the runtime's id.
    fn dead_letter(original: &Headers, reason: DeadLetterReason, error: Option<&str>) -> Headers {
        let reply =
            AckReply::parse(b"$JS.ACK.ORDERS.orders.3.42.40.1700000000000000000.0").expect("reply");
        let delivery = Delivery::jetstream("orders.new", reply);
        let mut h = original.for_dead_letter();
        let own_id = original
            .iter()
            .find(|(n, _)| *n == MSG_ID_HEADER.as_bytes())
            .map(|(_, v)| v);
        Provenance::new("orders", reason, error).append_to(&mut h, &delivery, own_id);
        h.append(
            Bytes::from_static(MSG_ID_HEADER.as_bytes()),
            Bytes::from(dead_letter_msg_id(
                "ORDERS",
                "orders",
                42,
                1_700_000_000_000_000_000,
            )),
        );
        h
    }

    fn original() -> Headers {
        [
            ("traceparent", "00-abc-def-01"),
            ("Nats-Msg-Id", "order-17"),
            ("x-tenant", "a"),
            ("x-tenant", "b"),
        ]
        .into_iter()
        .map(|(n, v)| (Bytes::from(n), Bytes::from(v)))
        .collect()
    }

    #[test]
    fn reads_a_jetstream_dead_letters_provenance() {
        let h = dead_letter(&original(), DeadLetterReason::HandlerError, Some("db down"));
        let r = DeadLetterRecord::read(pairs(&h));
        assert_eq!(r.subject.as_deref(), Some("orders.new"));
        assert_eq!(r.mount.as_deref(), Some("orders"));
        assert_eq!(r.stream.as_deref(), Some("ORDERS"));
        assert_eq!(r.consumer.as_deref(), Some("orders"));
        assert_eq!(r.stream_sequence, Some(42));
        assert_eq!(r.attempt, Some(3));
        assert_eq!(r.known_reason(), Some(DeadLetterReason::HandlerError));
        assert_eq!(r.error.as_deref(), Some("db down"));
        assert_eq!(r.dead_letterings, 1);
        assert_eq!(r.original_msg_id.as_deref(), Some("order-17"));
        assert!(r.is_marked());
    }

    #[test]
    fn restoring_gives_the_delivery_as_it_arrived_minus_its_directives() {
        let before = original();
        let h = dead_letter(&before, DeadLetterReason::Limit, None);
        let restored = restored_headers(pairs(&h));
        // The original's own Nats-Msg-Id never reached the dead letter (rule 9); provenance
        // kept it as `Ruststream-Msg-Id`, which the replay carries to trace it back.
        let mut expected: Vec<(&[u8], &[u8])> = pairs(&before)
            .into_iter()
            .filter(|(n, _)| *n != b"Nats-Msg-Id")
            .collect();
        expected.push((b"Ruststream-Msg-Id", b"order-17"));
        assert_eq!(restored, expected);
    }

    #[test]
    fn restoring_a_dead_letter_dead_lettered_twice_keeps_the_first_provenance() {
        // Replayed with its provenance left on (by another tool), then dead-lettered again.
        let first = dead_letter(&original(), DeadLetterReason::HandlerError, Some("boom"));
        let mut replayed = Headers::new();
        for (n, v) in first.iter().filter(|(n, _)| !is_msg_id(n)) {
            replayed.append(Bytes::copy_from_slice(n), Bytes::copy_from_slice(v));
        }
        let second = dead_letter(&replayed, DeadLetterReason::Rejected, None);
        let r = DeadLetterRecord::read(pairs(&second));
        assert_eq!(r.dead_letterings, 2);
        assert_eq!(r.known_reason(), Some(DeadLetterReason::Rejected));
        assert_eq!(
            r.error, None,
            "the error belongs to the first dead-lettering"
        );
        let restored = restored_headers(pairs(&second));
        assert_eq!(restored, pairs(&replayed));
    }

    #[test]
    fn headers_read_in_any_order_across_names_give_the_same_record_and_replay() {
        let h = dead_letter(&original(), DeadLetterReason::Rejected, None);
        let mut shuffled = pairs(&h);
        // Grouped by name, as a hash map of names gives them; within a name in order.
        shuffled.sort_by_key(|(n, _)| n.to_ascii_lowercase());
        assert_eq!(
            DeadLetterRecord::read(shuffled.clone()),
            DeadLetterRecord::read(pairs(&h))
        );
        let mut a = restored_headers(shuffled);
        let mut b = restored_headers(pairs(&h));
        a.sort();
        b.sort();
        assert_eq!(a, b);
    }

    #[test]
    fn a_core_dead_letter_has_no_jetstream_origin() {
        let mut h = Headers::new();
        h.append("x", "1");
        let delivery = Delivery::core("greet.new", RetryCountReading::default());
        Provenance::new("greet", DeadLetterReason::Limit, None).append_to(&mut h, &delivery, None);
        let r = DeadLetterRecord::read(pairs(&h));
        assert_eq!((r.stream, r.stream_sequence), (None, None));
        assert_eq!(r.subject.as_deref(), Some("greet.new"));
        let restored = restored_headers(pairs(&h));
        assert_eq!(restored, vec![(&b"x"[..], &b"1"[..])]);
    }

    #[test]
    fn a_dead_letter_without_provenance_reads_only_its_id() {
        let mut h = Headers::new();
        h.append("x", "1");
        h.append(
            "Nats-Msg-Id",
            dead_letter_msg_id("ORDERS", "orders", 7, 1_700_000_000_000_000_000),
        );
        let r = DeadLetterRecord::read(pairs(&h));
        assert!(r.is_marked());
        assert_eq!(r.subject, None);
        assert_eq!(r.stream_sequence, Some(7));
        assert_eq!(restored_headers(pairs(&h)), vec![(&b"x"[..], &b"1"[..])]);
        let plain = Headers::from_iter([("x", "1")]);
        assert!(!DeadLetterRecord::read(pairs(&plain)).is_marked());
    }

    #[test]
    fn directives_stored_by_hand_are_not_replayed() {
        let h = Headers::from_iter([
            ("Nats-Expected-Stream", "X"),
            ("Nats-TTL", "1s"),
            ("y", "2"),
        ]);
        assert_eq!(restored_headers(pairs(&h)), vec![(&b"y"[..], &b"2"[..])]);
    }

    #[test]
    fn times_read_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000_000_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(
            rfc3339(1_796_627_211_025_461_510),
            "2026-12-07T07:06:51.025Z"
        );
        assert_eq!(
            rfc3339(4_070_908_800_000_000_000),
            "2099-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn the_replay_id_is_the_dead_letters_own() {
        assert_eq!(
            replay_msg_id("DLQ", 12, 1_700_000_000_000_000_001),
            "ruststream.replay.DLQ.12.1700000000000000001"
        );
        assert_ne!(replay_msg_id("DLQ", 12, 1), replay_msg_id("DLQ", 12, 2));
    }

    #[test]
    fn filters_take_what_every_condition_takes() {
        let h = dead_letter(&original(), DeadLetterReason::Rejected, None);
        let r = DeadLetterRecord::read(pairs(&h));
        let all = DeadLetterFilter::default();
        assert!(all.is_empty() && all.matches(&r, 1, 10));
        let f = DeadLetterFilter {
            reasons: vec![DeadLetterReason::Rejected, DeadLetterReason::Limit],
            mounts: vec!["orders".into()],
            subject: Some(Wildcard::new("orders.*").expect("wildcard")),
            since: Some(10),
            until: Some(20),
            from_sequence: Some(5),
        };
        assert!(f.matches(&r, 5, 10));
        assert!(!f.matches(&r, 4, 10), "before --from-seq");
        assert!(!f.matches(&r, 5, 20), "--until is exclusive");
        assert!(!f.matches(&r, 5, 9), "before --since");
        let other_mount = DeadLetterFilter {
            mounts: vec!["payments".into()],
            ..DeadLetterFilter::default()
        };
        assert!(!other_mount.matches(&r, 1, 1));
        let other_subject = DeadLetterFilter {
            subject: Some(Wildcard::new("payments.>").expect("wildcard")),
            ..DeadLetterFilter::default()
        };
        assert!(!other_subject.matches(&r, 1, 1));
        // A condition on provenance never takes a dead letter without it.
        let bare = DeadLetterRecord::default();
        assert!(!f.matches(&bare, 5, 10));
        assert!(all.matches(&bare, 5, 10));
        assert_eq!(
            other_mount.describe(),
            "--mount payments",
            "described in the command line's words"
        );
    }
}
