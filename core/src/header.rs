//! Headers: the retry-count header on Core copies, and what copies and dead letters keep.
//!
//! On Core NATS the runtime counts attempts itself, in the header
//! [`RETRY_COUNT_HEADER`] (`x-ruststream-retry-count`) of each copy it publishes
//! (SETTLEMENT.md Part A, "Reprocessing"). This module owns that header's wire format:
//!
//! - **Writing** (rule 4): a copy published after attempt `n` carries the value `n` in decimal
//!   ASCII. Every earlier value of the header, under any letter case, is replaced; every other
//!   header is kept byte for byte, in order, with its letter case and repeated values.
//! - **Reading** (rule 5): see [`RetryCountReading::read`].
//! - **Forwarding** (rule 9): copies and dead letters drop the JetStream publish directives
//!   listed in [`DROPPED_DIRECTIVES`] and [`DROPPED_DIRECTIVE_PREFIXES`] (`Nats-Msg-Id`
//!   among them), and keep everything else; a JetStream dead letter carries the runtime's own
//!   `Nats-Msg-Id` ([`dead_letter_msg_id`]).
//!
//! Header names and values are bytes here: NATS headers are an HTTP-like block (NATS ADR-4,
//! "NATS Message Headers"), and a publisher may put anything in them.

use bytes::Bytes;

/// The header in which Core copies carry their retry count: `x-ruststream-retry-count`.
///
/// Written in this letter case; read in any (rule 5).
pub const RETRY_COUNT_HEADER: &str = "x-ruststream-retry-count";

/// JetStream publish directives that copies and dead letters never carry (rule 9): headers a
/// stream acts on when a message is published to it, so that it would refuse, rewrite, expire,
/// schedule, batch or count the copy instead of storing it. Compared without regard to case;
/// see also [`DROPPED_DIRECTIVE_PREFIXES`].
///
/// Checked against the header constants of nats-server's `server/stream.go` (`JSMsgId`,
/// `JSExpected*`, `JSMsgRollup`, `JSMessageTTL`, `JSMessageIncr`) and
/// `server/jetstream_api.go` (`JSRequiredApiLevel`) at the 2.15 development line.
/// `Nats-Msg-Id` is dropped so that a stream's deduplication can never swallow a copy or a
/// dead letter; a JetStream dead letter carries an id of the runtime's own instead
/// ([`dead_letter_msg_id`]).
pub const DROPPED_DIRECTIVES: [&str; 10] = [
    MSG_ID_HEADER,
    "Nats-Expected-Stream",
    "Nats-Expected-Last-Sequence",
    "Nats-Expected-Last-Subject-Sequence",
    "Nats-Expected-Last-Subject-Sequence-Subject",
    "Nats-Expected-Last-Msg-Id",
    "Nats-Rollup",
    "Nats-TTL",
    "Nats-Incr",
    "Nats-Required-Api-Level",
];

/// The header by which a stream deduplicates what is published to it: `Nats-Msg-Id`
/// (nats-server `server/stream.go`, `JSMsgId`).
pub const MSG_ID_HEADER: &str = "Nats-Msg-Id";

/// The `Nats-Msg-Id` a JetStream delivery's dead letter carries (rule 9):
/// `ruststream.dead-letter.<stream>.<consumer>.<stream sequence>.<stored>`, where `<stored>`
/// is when the message was stored (nanoseconds since the Unix epoch, from the ack reply
/// subject). The same delivery always gets the same id, so a dead-letter publish retried after
/// a failure (rule 8) is stored once; two consumers that give up on one message store one dead
/// letter each; a stream deleted and created again, whose sequences start over, does not reuse
/// an id within the dead-letter stream's duplicate window; and the id never equals one a
/// publisher chose for the original. Stream and consumer names cannot contain `.`, so the parts
/// never run together.
pub fn dead_letter_msg_id(
    stream: &str,
    consumer: &str,
    stream_sequence: u64,
    stored: u64,
) -> String {
    format!("ruststream.dead-letter.{stream}.{consumer}.{stream_sequence}.{stored}")
}

/// The prefix of the `Nats-Msg-Id` a handler's JetStream publish carries by default
/// ([`publish_msg_id`]).
pub const PUBLISH_MSG_ID_PREFIX: &str = "ruststream.publish.";

/// The `Nats-Msg-Id` of the `index`-th JetStream publish (from 0) of a handler run for the
/// delivery of stream `stream`'s message `stream_sequence` (stored at `stored`, nanoseconds)
/// by consumer `consumer`, of `payload` to `subject`:
/// `ruststream.publish.<stream>.<consumer>.<stream sequence>.<stored>.<index>.<hash>`, where
/// `<hash>` is 16 hex digits of a 64-bit FNV-1a hash ([`key_of`](crate::key_of)) of the
/// subject, a `0xFF` byte and the payload (headers are left out: a trace context differs from
/// run to run).
///
/// A run of the same delivery that publishes the same thing at the same place gets the same
/// id, so that a stream drops what a redelivered handler publishes again within its duplicate
/// window: a handler that published, then crashed (or lost its connection) before its `+ACK`,
/// stores its events once. Something else published at that place (another subject, another
/// payload) gets another id and is stored: an id never makes a stream drop what was not
/// stored before. So a payload that differs from run to run (the time of the run in it) is
/// stored again, as without an id. The stored time keeps ids apart across a stream deleted
/// and made again, whose sequences start over; the consumer keeps apart the runs of two
/// services that consume one stream.
pub fn publish_msg_id(
    stream: &str,
    consumer: &str,
    stream_sequence: u64,
    stored: u64,
    index: u32,
    subject: &[u8],
    payload: &[u8],
) -> String {
    // 0xFF never occurs in a subject: it ends the subject, so that no two pairs hash as one.
    let hash = crate::key_of(crate::KEY_SEED, subject);
    let hash = crate::key_of(crate::key_of(hash, &[0xFF]), payload);
    format!(
        "{PUBLISH_MSG_ID_PREFIX}{stream}.{consumer}.{stream_sequence}.{stored}.{index}.{hash:016x}"
    )
}

/// Prefixes of JetStream publish directives that copies and dead letters never carry (rule 9):
/// every `Nats-Schedule*` header (message schedules: `Nats-Schedule`, `-TTL`, `-Target`,
/// `-Time-Zone`, `-Rollup`, `-Source`) and every `Nats-Batch-*` header (atomic batches:
/// `-Id`, `-Sequence`, `-Commit`), from the same `server/stream.go` constants. Compared
/// without regard to case.
pub const DROPPED_DIRECTIVE_PREFIXES: [&str; 2] = ["Nats-Schedule", "Nats-Batch-"];

/// How many copies of a Core message the runtime has published before this one: the value of
/// [`RETRY_COUNT_HEADER`]. The delivery's attempt is `count + 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RetryCount(pub u64);

impl RetryCount {
    /// Renders the count as the header value: decimal ASCII digits, no sign, no padding.
    pub fn to_header_value(self) -> Bytes {
        Bytes::copy_from_slice(itoa::Buffer::new().format(self.0).as_bytes())
    }
}

/// What a Core delivery's headers say about its retry count (rule 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetryCountReading {
    /// The largest valid value of the header; `None` when the header is absent or no value of
    /// it is valid (the delivery then counts as a first delivery).
    pub count: Option<RetryCount>,
    /// How many values of the header were ignored because they are not digits. The runtime
    /// logs a warning when this is not zero.
    pub ignored: u32,
}

/// Whether `name` is the retry-count header, in any letter case.
pub fn is_retry_count(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(RETRY_COUNT_HEADER.as_bytes())
}

/// Whether `name` is a JetStream publish directive that copies and dead letters drop (rule 9).
pub fn is_dropped_directive(name: &[u8]) -> bool {
    DROPPED_DIRECTIVES
        .iter()
        .any(|d| name.eq_ignore_ascii_case(d.as_bytes()))
        || DROPPED_DIRECTIVE_PREFIXES.iter().any(|p| {
            name.get(..p.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(p.as_bytes()))
        })
}

/// Parses one value of the retry-count header: ASCII digits with optional surrounding ASCII
/// whitespace; overflow saturates at `u64::MAX`. `None` for anything else (empty, signs,
/// inner spaces, other bytes).
pub fn parse_retry_count(value: &[u8]) -> Option<RetryCount> {
    parse_count(value).map(RetryCount)
}

/// A count in a header value: ASCII digits with optional surrounding ASCII whitespace,
/// saturating at `u64::MAX`; `None` for anything else. Shared by the headers the core reads
/// (`x-ruststream-retry-count`, `Nats-Pending-Messages`).
pub(crate) fn parse_count(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0u64, |n, &d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    }))
}

impl RetryCountReading {
    /// Reads the retry count from a delivery's headers, given as `(name, value)` pairs, one
    /// pair per value (a repeated header is several pairs).
    ///
    /// Rule 5: the name matches in any letter case; a value is ASCII digits, surrounding ASCII
    /// whitespace ignored; digits that overflow saturate to `u64::MAX`; where the header
    /// repeats, the largest valid value wins; a value that is not digits is counted in
    /// [`ignored`](Self::ignored) and otherwise ignored. Never fails, never allocates.
    pub fn read<'h, I>(headers: I) -> Self
    where
        I: IntoIterator<Item = (&'h [u8], &'h [u8])>,
    {
        let mut reading = Self::default();
        for (_, value) in headers.into_iter().filter(|(name, _)| is_retry_count(name)) {
            match parse_retry_count(value) {
                Some(n) => reading.count = reading.count.max(Some(n)),
                None => reading.ignored = reading.ignored.saturating_add(1),
            }
        }
        reading
    }

    /// The count this reading stands for: the valid count, or 0 when there is none.
    pub fn count_or_zero(self) -> RetryCount {
        self.count.unwrap_or_default()
    }
}

/// An ordered list of message headers: names and values as bytes, letter case, order and
/// repeated names kept exactly as given.
///
/// This is what a delayed copy carries in the [`DelayQueue`](crate::DelayQueue); adapters
/// convert to and from their client's header type at the edges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(Vec<(Bytes, Bytes)>);

impl Headers {
    /// No headers.
    pub fn new() -> Self {
        Self(Vec::new())
    }

    /// Appends one `(name, value)` pair after the existing ones.
    pub fn append(&mut self, name: impl Into<Bytes>, value: impl Into<Bytes>) {
        self.0.push((name.into(), value.into()));
    }

    /// The pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone + '_ {
        self.0.iter().map(|(n, v)| (&n[..], &v[..]))
    }

    /// Removes every pair named exactly `name` (byte for byte), keeping the others in order.
    pub fn remove(&mut self, name: &[u8]) {
        self.0.retain(|(n, _)| &n[..] != name);
    }

    /// How many pairs there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The headers a copy published after attempt `after_attempt` carries (rules 4 and 9):
    /// every pair except the retry-count header (any case) and the dropped directives, in
    /// order, then `x-ruststream-retry-count: <after_attempt>` last.
    pub fn for_copy(&self, after_attempt: RetryCount) -> Self {
        let mut out = Vec::with_capacity(self.0.len() + 1);
        out.extend(
            self.0
                .iter()
                .filter(|(n, _)| !is_retry_count(n) && !is_dropped_directive(n))
                .cloned(),
        );
        out.push((
            Bytes::from_static(RETRY_COUNT_HEADER.as_bytes()),
            after_attempt.to_header_value(),
        ));
        Self(out)
    }

    /// The headers a dead letter carries (rule 9): every pair except the dropped directives,
    /// in order, byte for byte. The retry-count header is kept as it arrived.
    pub fn for_dead_letter(&self) -> Self {
        Self(
            self.0
                .iter()
                .filter(|(n, _)| !is_dropped_directive(n))
                .cloned()
                .collect(),
        )
    }
}

impl Headers {
    /// Reads a NATS header block as a server stores and sends it: `NATS/1.0` (with an
    /// optional status after it) on its first line, then one `name: value` line each, ended by
    /// `\r\n` (a bare `\n` is taken too), up to an empty line or the end. Every value of a
    /// repeated name is kept, in order, and the order across names too (async-nats' own reading
    /// of a stored message keeps only the last value of a name). A value's leading and trailing
    /// spaces and tabs go; names and values are kept as bytes, unchecked.
    ///
    /// `None` when the block does not begin with `NATS/1.0`, or a line has no `:`.
    pub fn parse_block(block: &[u8]) -> Option<Self> {
        let mut lines = block
            .split(|&b| b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
        if !lines.next()?.starts_with(b"NATS/1.0") {
            return None;
        }
        let mut headers = Self::new();
        for line in lines {
            if line.is_empty() {
                break;
            }
            let colon = line.iter().position(|&b| b == b':')?;
            let (name, value) = (&line[..colon], &line[colon + 1..]);
            let value = value.trim_ascii();
            headers.append(Bytes::copy_from_slice(name), Bytes::copy_from_slice(value));
        }
        Some(headers)
    }
}

impl<N: Into<Bytes>, V: Into<Bytes>> FromIterator<(N, V)> for Headers {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        Self(
            iter.into_iter()
                .map(|(n, v)| (n.into(), v.into()))
                .collect(),
        )
    }
}

#[cfg(test)]
mod publish_id_tests {
    use super::publish_msg_id;

    #[test]
    fn a_publish_id_names_the_delivery_the_place_and_what_is_published() {
        let id = |index, subject: &[u8], payload: &[u8]| {
            publish_msg_id(
                "ORDERS",
                "worker",
                42,
                1_700_000_000_000_000_000,
                index,
                subject,
                payload,
            )
        };
        let first = id(0, b"order.accepted", b"{\"id\":42}");
        assert!(
            first.starts_with("ruststream.publish.ORDERS.worker.42.1700000000000000000.0."),
            "{first}"
        );
        assert_eq!(first.rsplit('.').next().map(str::len), Some(16), "{first}");
        // The same publish at the same place: the same id, whatever run makes it.
        assert_eq!(first, id(0, b"order.accepted", b"{\"id\":42}"));
        // Another place, subject or payload: another id.
        assert_ne!(first, id(1, b"order.accepted", b"{\"id\":42}"));
        assert_ne!(first, id(0, b"order.rejected", b"{\"id\":42}"));
        assert_ne!(first, id(0, b"order.accepted", b"{\"id\":43}"));
        // The boundary between subject and payload counts.
        assert_ne!(id(0, b"ab", b"c"), id(0, b"a", b"bc"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&[u8], &[u8])]) -> RetryCountReading {
        RetryCountReading::read(pairs.iter().copied())
    }

    const H: &[u8] = b"x-ruststream-retry-count";

    #[test]
    fn absent_header_counts_as_zero() {
        let r = read(&[]);
        assert_eq!(
            r,
            RetryCountReading {
                count: None,
                ignored: 0
            }
        );
        assert_eq!(r.count_or_zero(), RetryCount(0));
        let r = read(&[(b"other", b"5")]);
        assert_eq!(r.count, None);
    }

    #[test]
    fn plain_digits_and_whitespace() {
        assert_eq!(read(&[(H, b"3")]).count, Some(RetryCount(3)));
        assert_eq!(read(&[(H, b"  3\t")]).count, Some(RetryCount(3)));
        assert_eq!(read(&[(H, b"007")]).count, Some(RetryCount(7)));
        assert_eq!(read(&[(H, b"0")]).count, Some(RetryCount(0)));
    }

    #[test]
    fn hostile_values_are_ignored() {
        for bad in [
            &b""[..],
            b" ",
            b"+1",
            b"-1",
            b"1 2",
            b"1.0",
            b"0x10",
            b"\xff\xfe",
            b"\xd9\xa3", // Arabic-Indic digit three, not ASCII
            b"1e3",
            b"\x001",
        ] {
            let r = read(&[(H, bad)]);
            assert_eq!(
                r,
                RetryCountReading {
                    count: None,
                    ignored: 1
                },
                "{bad:?}"
            );
        }
    }

    #[test]
    fn overflow_saturates() {
        let r = read(&[(H, b"99999999999999999999999999999")]);
        assert_eq!(r.count, Some(RetryCount(u64::MAX)));
        let r = read(&[(H, b"18446744073709551615")]);
        assert_eq!(r.count, Some(RetryCount(u64::MAX)));
        let r = read(&[(H, b"18446744073709551616")]);
        assert_eq!(r.count, Some(RetryCount(u64::MAX)));
    }

    #[test]
    fn repeated_and_mixed_case_largest_valid_wins() {
        let r = read(&[
            (b"X-RustStream-Retry-Count", b"2"),
            (b"x-ruststream-retry-count", b"junk"),
            (b"X-RUSTSTREAM-RETRY-COUNT", b"5"),
            (b"x-ruststream-retry-count", b"4"),
        ]);
        assert_eq!(
            r,
            RetryCountReading {
                count: Some(RetryCount(5)),
                ignored: 1
            }
        );
        // Only invalid values: counts as absent, but says how many were ignored.
        let r = read(&[(H, b"a"), (b"X-Ruststream-Retry-Count", b"-2")]);
        assert_eq!(
            r,
            RetryCountReading {
                count: None,
                ignored: 2
            }
        );
        // A name that only looks alike does not match.
        let r = read(&[
            (b"x-ruststream-retry-count ", b"9"),
            (b"x-ruststream-retry-coun", b"9"),
        ]);
        assert_eq!(r.count, None);
        // Non-UTF-8 name bytes never match and never panic.
        let r = read(&[(b"\xff-ruststream-retry-count", b"9")]);
        assert_eq!(r.count, None);
    }

    #[test]
    fn header_value_is_decimal() {
        assert_eq!(RetryCount(0).to_header_value(), Bytes::from_static(b"0"));
        assert_eq!(
            RetryCount(u64::MAX).to_header_value(),
            Bytes::from_static(b"18446744073709551615")
        );
    }

    #[test]
    fn copy_headers_replace_count_and_keep_the_rest() {
        let h: Headers = [
            (&b"Trace-Id"[..], &b"abc"[..]),
            (b"X-RUSTSTREAM-RETRY-COUNT", b"1"),
            (b"x-ruststream-retry-count", b"junk"),
            (b"tag", b"a"),
            (b"Nats-Expected-Stream", b"S"),
            (b"tag", b"b"),
            (b"nats-rollup", b"sub"),
            (b"Nats-Msg-Id", b"m-1"),
        ]
        .into_iter()
        .map(|(n, v)| (Bytes::copy_from_slice(n), Bytes::copy_from_slice(v)))
        .collect();
        let copy = h.for_copy(RetryCount(2));
        let got: Vec<_> = copy.iter().collect();
        assert_eq!(
            got,
            vec![
                (&b"Trace-Id"[..], &b"abc"[..]),
                (b"tag", b"a"),
                (b"tag", b"b"),
                (b"x-ruststream-retry-count", b"2"),
            ]
        );
        let dl = h.for_dead_letter();
        let got: Vec<_> = dl.iter().collect();
        assert_eq!(
            got,
            vec![
                (&b"Trace-Id"[..], &b"abc"[..]),
                (b"X-RUSTSTREAM-RETRY-COUNT", b"1"),
                (b"x-ruststream-retry-count", b"junk"),
                (b"tag", b"a"),
                (b"tag", b"b"),
            ]
        );
    }

    #[test]
    fn dead_letter_ids_name_the_delivery() {
        assert_eq!(
            dead_letter_msg_id("ORDERS", "worker", 42, 1_700_000_000_000_000_000),
            "ruststream.dead-letter.ORDERS.worker.42.1700000000000000000"
        );
        assert_ne!(
            dead_letter_msg_id("ORDERS", "a", 1, 5),
            dead_letter_msg_id("ORDERS", "b", 1, 5)
        );
        // The same sequence in a stream created again: another message, another id.
        assert_ne!(
            dead_letter_msg_id("ORDERS", "a", 1, 5),
            dead_letter_msg_id("ORDERS", "a", 1, 6)
        );
    }

    #[test]
    fn every_directive_is_dropped_in_any_case() {
        for d in DROPPED_DIRECTIVES {
            assert!(is_dropped_directive(d.as_bytes()));
            assert!(is_dropped_directive(d.to_ascii_lowercase().as_bytes()));
            assert!(is_dropped_directive(d.to_ascii_uppercase().as_bytes()));
        }
        for d in [
            "Nats-Schedule",
            "Nats-Schedule-TTL",
            "nats-schedule-target",
            "NATS-SCHEDULE-TIME-ZONE",
            "Nats-Schedule-Rollup",
            "Nats-Schedule-Source",
            "Nats-Batch-Id",
            "nats-batch-sequence",
            "Nats-Batch-Commit",
        ] {
            assert!(is_dropped_directive(d.as_bytes()), "{d}");
        }
        assert!(is_dropped_directive(b"nats-msg-id"));
        assert!(!is_dropped_directive(b"Nats-Expected-Stream2"));
        assert!(!is_dropped_directive(b"Nats-Batch"));
        assert!(!is_dropped_directive(b"Nats-Sched"));
        assert!(!is_dropped_directive(b"X-Nats-TTL"));
    }
}

#[cfg(test)]
mod block_tests {
    use super::Headers;

    #[test]
    fn a_header_block_keeps_every_value_in_order() {
        let block = b"NATS/1.0\r\nx-tenant: a\r\nTrace: t\r\nx-tenant:  b \r\n\r\n";
        let h = Headers::parse_block(block).expect("a block");
        let pairs: Vec<(&[u8], &[u8])> = h.iter().collect();
        assert_eq!(
            pairs,
            [
                (&b"x-tenant"[..], &b"a"[..]),
                (b"Trace", b"t"),
                (b"x-tenant", b"b")
            ]
        );
        assert!(Headers::parse_block(b"HTTP/1.1\r\n\r\n").is_none());
        assert!(Headers::parse_block(b"NATS/1.0\r\nno colon\r\n\r\n").is_none());
        let status = Headers::parse_block(b"NATS/1.0 100 Idle\r\n\r\n").expect("a status");
        assert!(status.is_empty());
    }
}
