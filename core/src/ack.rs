//! Settlements and their ack payloads on the wire.
//!
//! A JetStream delivery is settled by publishing one of these payloads to its ack reply
//! subject (NATS docs, "JetStream Consumers: Acknowledgement Models"; NATS ADR-15):
//!
//! | settlement | payload |
//! |---|---|
//! | [`Settlement::Ack`] | `+ACK` |
//! | [`Settlement::Nak`] | `-NAK` |
//! | [`Settlement::NakWithDelay`] | `-NAK {"delay": <nanoseconds>}` |
//! | [`Settlement::Term`] | `+TERM` |
//!
//! The delay is a JSON integer of nanoseconds. Rule 12: a delay too large for a signed 64-bit
//! nanosecond count is clamped to `i64::MAX` ns, because the server reads an overflowing value
//! as an immediate retry; a zero delay is a plain `-NAK` (see [`Settlement::nak`]).

use std::time::Duration;

use bytes::Bytes;

/// The largest delay the server accepts in a `-NAK`: `i64::MAX` nanoseconds (about 292 years).
pub const MAX_NAK_DELAY: Duration = Duration::from_nanos(i64::MAX as u64);

/// The error a Core NATS delivery gives when asked to acknowledge: Core NATS keeps nothing
/// for redelivery, so there is nothing to settle (SETTLEMENT.md Part A, "Completion").
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AckError {
    /// Acknowledgement is not supported: the delivery came over Core NATS, not JetStream.
    #[error("acknowledgement is not supported on a Core NATS delivery")]
    Unsupported,
}

/// The payload that renews a running handler's lease (rule 16): `+WPI`, "work in progress",
/// sent on the delivery's ack reply subject. The server restarts the delivery's ack timer and
/// does not redeliver it while the handler runs (NATS docs, "Consumer Acknowledgments").
pub const WORK_IN_PROGRESS: &[u8] = b"+WPI";

/// How a JetStream delivery is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Settlement {
    /// `+ACK`: done; the server never sends it again.
    Ack,
    /// `-NAK`: the server sends it again at once, with `delivered + 1`.
    Nak,
    /// `-NAK {"delay": ns}`: the server sends it again after the delay. Holds a delay that is
    /// not zero and at most [`MAX_NAK_DELAY`] when built with [`Settlement::nak`].
    NakWithDelay(Duration),
    /// `+TERM`: terminated; the server never sends it again.
    Term,
}

impl Settlement {
    /// A negative acknowledgement asking for redelivery after `delay`: a plain
    /// [`Settlement::Nak`] for a zero delay, otherwise [`Settlement::NakWithDelay`] with the
    /// delay clamped to [`MAX_NAK_DELAY`] (rule 12).
    pub fn nak(delay: Duration) -> Self {
        if delay.is_zero() {
            Self::Nak
        } else {
            Self::NakWithDelay(delay.min(MAX_NAK_DELAY))
        }
    }

    /// The payload to publish on the ack reply subject. Never allocates.
    pub fn payload(self) -> AckPayload {
        match self {
            Self::Ack => AckPayload::fixed(b"+ACK"),
            Self::Nak => AckPayload::fixed(b"-NAK"),
            Self::Term => AckPayload::fixed(b"+TERM"),
            Self::NakWithDelay(delay) => AckPayload::nak_with_delay(delay),
        }
    }
}

/// The longest payload: `-NAK {"delay": ` + 19 digits of `i64::MAX` + `}`.
const PAYLOAD_CAPACITY: usize = 16 + 19 + 1;

/// An ack payload, held inline (at most 36 bytes).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct AckPayload {
    buf: [u8; PAYLOAD_CAPACITY],
    len: u8,
}

impl AckPayload {
    fn fixed(text: &[u8]) -> Self {
        let mut buf = [0; PAYLOAD_CAPACITY];
        buf[..text.len()].copy_from_slice(text);
        Self {
            buf,
            len: text.len() as u8,
        }
    }

    fn nak_with_delay(delay: Duration) -> Self {
        let nanos = delay.min(MAX_NAK_DELAY).as_nanos() as u64;
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(nanos).as_bytes();
        let mut buf = [0; PAYLOAD_CAPACITY];
        let head = b"-NAK {\"delay\": ";
        buf[..head.len()].copy_from_slice(head);
        let end = head.len() + digits.len();
        buf[head.len()..end].copy_from_slice(digits);
        buf[end] = b'}';
        Self {
            buf,
            len: (end + 1) as u8,
        }
    }

    /// The payload bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    /// The payload as [`Bytes`], ready to publish; static (no allocation) for `+ACK`, `-NAK`
    /// and `+TERM`.
    pub fn to_bytes(&self) -> Bytes {
        match self.as_bytes() {
            b"+ACK" => Bytes::from_static(b"+ACK"),
            b"-NAK" => Bytes::from_static(b"-NAK"),
            b"+TERM" => Bytes::from_static(b"+TERM"),
            other => Bytes::copy_from_slice(other),
        }
    }
}

impl std::fmt::Debug for AckPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AckPayload({:?})",
            String::from_utf8_lossy(self.as_bytes())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: Settlement) -> String {
        String::from_utf8(s.payload().as_bytes().to_vec()).expect("ASCII payload")
    }

    #[test]
    fn payloads() {
        assert_eq!(text(Settlement::Ack), "+ACK");
        assert_eq!(text(Settlement::Nak), "-NAK");
        assert_eq!(text(Settlement::Term), "+TERM");
        assert_eq!(
            text(Settlement::nak(Duration::from_millis(250))),
            r#"-NAK {"delay": 250000000}"#
        );
        assert_eq!(
            text(Settlement::nak(Duration::from_nanos(1))),
            r#"-NAK {"delay": 1}"#
        );
    }

    #[test]
    fn zero_delay_is_plain_nak() {
        assert_eq!(Settlement::nak(Duration::ZERO), Settlement::Nak);
    }

    #[test]
    fn huge_delay_is_clamped() {
        assert_eq!(
            Settlement::nak(Duration::MAX),
            Settlement::NakWithDelay(MAX_NAK_DELAY)
        );
        assert_eq!(
            text(Settlement::nak(Duration::MAX)),
            r#"-NAK {"delay": 9223372036854775807}"#
        );
        // Even a hand-built variant beyond the bound renders clamped.
        assert_eq!(
            text(Settlement::NakWithDelay(Duration::from_secs(u64::MAX))),
            r#"-NAK {"delay": 9223372036854775807}"#
        );
        let just_over = MAX_NAK_DELAY + Duration::from_nanos(1);
        assert_eq!(
            Settlement::nak(just_over),
            Settlement::NakWithDelay(MAX_NAK_DELAY)
        );
    }

    #[test]
    fn to_bytes_matches_as_bytes() {
        for s in [
            Settlement::Ack,
            Settlement::Nak,
            Settlement::Term,
            Settlement::nak(Duration::from_secs(3)),
        ] {
            assert_eq!(&s.payload().to_bytes()[..], s.payload().as_bytes());
        }
    }
}
