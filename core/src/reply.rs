//! The JetStream ack reply subject: parsing what the server says about a delivery.
//!
//! Every message a JetStream consumer delivers carries a reply subject on which it is
//! acknowledged. The server encodes the delivery's metadata in it (NATS ADR-15, "JetStream
//! Subject Naming"):
//!
//! ```text
//! $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>
//! $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>[.<token>…]
//! ```
//!
//! The first form has exactly 9 tokens. The second has at least 11: newer servers append a
//! random token, and later tokens are reserved, so everything after the 11th token is kept
//! verbatim in [`AckReply::trailer`]. A domain of `_` means "no domain".
//!
//! `delivered` is the attempt number the settlement rules count with (SETTLEMENT.md rule 1).

use std::fmt;

/// The prefix every ack reply subject starts with.
pub const ACK_PREFIX: &str = "$JS.ACK.";

/// Why an ack reply subject was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AckReplyError {
    /// The subject does not start with `$JS.ACK.`.
    #[error("reply subject does not start with `$JS.ACK.`")]
    NotAckSubject,
    /// The subject is not valid UTF-8.
    #[error("reply subject is not valid UTF-8")]
    NotUtf8,
    /// The token count is neither 9 nor at least 11.
    #[error("ack reply subject has {0} tokens; expected 9, or 11 or more")]
    TokenCount(usize),
    /// A token is empty.
    #[error("ack reply subject has an empty token")]
    EmptyToken,
    /// A numeric field is not plain ASCII digits, or does not fit in 64 bits.
    #[error("ack reply subject field `{0}` is not a decimal number that fits in 64 bits")]
    Number(&'static str),
    /// `delivered` is 0; deliveries are counted from 1.
    #[error("ack reply subject says the message was delivered 0 times")]
    ZeroDelivered,
}

/// The metadata of one JetStream delivery, as its ack reply subject gives it.
///
/// Borrows from the reply subject; parsing allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckReply<'a> {
    /// The JetStream domain; `None` in the 9-token form or when the server writes `_`.
    pub domain: Option<&'a str>,
    /// The account hash; `None` in the 9-token form.
    pub account_hash: Option<&'a str>,
    /// The stream name.
    pub stream: &'a str,
    /// The consumer name.
    pub consumer: &'a str,
    /// How many times this message has been delivered to this consumer, this one included.
    /// At least 1; this is the attempt number.
    pub delivered: u64,
    /// The message's sequence in the stream.
    pub stream_sequence: u64,
    /// The delivery's sequence in the consumer.
    pub consumer_sequence: u64,
    /// When the message was stored, in nanoseconds since the Unix epoch.
    pub timestamp: u64,
    /// How many messages the consumer still has pending after this one.
    pub pending: u64,
    /// The tokens after the 11th in the long form (the random token and any reserved ones),
    /// verbatim and without the leading `.`; `None` when there are none.
    pub trailer: Option<&'a str>,
}

/// Parses one numeric field: ASCII digits only, no sign, no whitespace, fits in `u64`.
fn number(bytes: &[u8], field: &'static str) -> Result<u64, AckReplyError> {
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return Err(AckReplyError::Number(field));
    }
    bytes.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .ok_or(AckReplyError::Number(field))
    })
}

impl<'a> AckReply<'a> {
    /// Parses an ack reply subject in either form.
    ///
    /// # Errors
    /// [`AckReplyError::NotAckSubject`] without the `$JS.ACK.` prefix,
    /// [`AckReplyError::NotUtf8`], [`AckReplyError::TokenCount`] for any count other than 9
    /// or 11 and more, [`AckReplyError::EmptyToken`], [`AckReplyError::Number`] naming the
    /// first numeric field that is not plain digits or overflows `u64`, and
    /// [`AckReplyError::ZeroDelivered`].
    pub fn parse(subject: &'a [u8]) -> Result<Self, AckReplyError> {
        let rest = subject
            .strip_prefix(ACK_PREFIX.as_bytes())
            .ok_or(AckReplyError::NotAckSubject)?;
        // At most 10 pieces: in the long form the 10th is the trailer, every token after the
        // 11th, verbatim.
        let mut pieces: [&'a [u8]; 10] = [&[]; 10];
        let mut n = 0;
        for piece in rest.splitn(10, |&b| b == b'.') {
            pieces[n] = piece;
            n += 1;
        }
        let (domain, account_hash, fields, trailer) = match n {
            7 => (None, None, &pieces[..7], None),
            9 | 10 => {
                let domain = text(pieces[0])?;
                let hash = text(pieces[1])?;
                let trailer = match n {
                    10 => Some(text(pieces[9])?),
                    _ => None,
                };
                (
                    (domain != "_").then_some(domain),
                    Some(hash),
                    &pieces[2..9],
                    trailer,
                )
            }
            n => return Err(AckReplyError::TokenCount(n + 2)),
        };
        let stream = text(fields[0])?;
        let consumer = text(fields[1])?;
        let delivered = number(fields[2], "delivered")?;
        let stream_sequence = number(fields[3], "stream sequence")?;
        let consumer_sequence = number(fields[4], "consumer sequence")?;
        let timestamp = number(fields[5], "timestamp")?;
        let pending = number(fields[6], "pending")?;
        if trailer.is_some_and(|t| t.split('.').any(str::is_empty)) {
            return Err(AckReplyError::EmptyToken);
        }
        if delivered == 0 {
            return Err(AckReplyError::ZeroDelivered);
        }
        Ok(Self {
            domain,
            account_hash,
            stream,
            consumer,
            delivered,
            stream_sequence,
            consumer_sequence,
            timestamp,
            pending,
            trailer,
        })
    }
}

/// A name token (domain, account hash, stream, consumer, trailer): non-empty UTF-8.
fn text(token: &[u8]) -> Result<&str, AckReplyError> {
    if token.is_empty() {
        return Err(AckReplyError::EmptyToken);
    }
    std::str::from_utf8(token).map_err(|_| AckReplyError::NotUtf8)
}

impl fmt::Display for AckReply<'_> {
    /// Renders the ack reply subject again: the 9-token form when there is no account hash,
    /// otherwise the long form (`_` for no domain) followed by the trailer.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(ACK_PREFIX)?;
        if let Some(hash) = self.account_hash {
            write!(f, "{}.{hash}.", self.domain.unwrap_or("_"))?;
        }
        write!(
            f,
            "{}.{}.{}.{}.{}.{}.{}",
            self.stream,
            self.consumer,
            self.delivered,
            self.stream_sequence,
            self.consumer_sequence,
            self.timestamp,
            self.pending
        )?;
        if let Some(trailer) = self.trailer {
            write!(f, ".{trailer}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "$JS.ACK.ORDERS.worker.3.1042.17.1700000000123456789.5";
    const V2: &str = "$JS.ACK.hub.ACCHASH.ORDERS.worker.3.1042.17.1700000000123456789.5.R4nd0m";

    #[test]
    fn parses_the_nine_token_form() {
        let r = AckReply::parse(V1.as_bytes()).expect("valid");
        assert_eq!(
            r,
            AckReply {
                domain: None,
                account_hash: None,
                stream: "ORDERS",
                consumer: "worker",
                delivered: 3,
                stream_sequence: 1042,
                consumer_sequence: 17,
                timestamp: 1_700_000_000_123_456_789,
                pending: 5,
                trailer: None,
            }
        );
        assert_eq!(r.to_string(), V1);
    }

    #[test]
    fn parses_the_long_form() {
        let r = AckReply::parse(V2.as_bytes()).expect("valid");
        assert_eq!(r.domain, Some("hub"));
        assert_eq!(r.account_hash, Some("ACCHASH"));
        assert_eq!(r.stream, "ORDERS");
        assert_eq!(r.consumer, "worker");
        assert_eq!(r.delivered, 3);
        assert_eq!(r.pending, 5);
        assert_eq!(r.trailer, Some("R4nd0m"));
        assert_eq!(r.to_string(), V2);

        // `_` is "no domain"; 11 tokens means no trailer; later tokens are kept verbatim.
        let r = AckReply::parse(b"$JS.ACK._.H.S.C.1.2.3.4.0").expect("valid");
        assert_eq!(
            (r.domain, r.account_hash, r.trailer),
            (None, Some("H"), None)
        );
        assert_eq!(r.to_string(), "$JS.ACK._.H.S.C.1.2.3.4.0");
        let r = AckReply::parse(b"$JS.ACK._.H.S.C.1.2.3.4.0.tok.future").expect("valid");
        assert_eq!(r.trailer, Some("tok.future"));
        assert_eq!(r.to_string(), "$JS.ACK._.H.S.C.1.2.3.4.0.tok.future");
    }

    #[test]
    fn refuses_hostile_input() {
        use AckReplyError as E;
        let cases: &[(&[u8], AckReplyError)] = &[
            (b"", E::NotAckSubject),
            (b"$JS.ACK", E::NotAckSubject),
            (b"$js.ack.S.C.1.2.3.4.5", E::NotAckSubject),
            (b"_INBOX.abc", E::NotAckSubject),
            (b"$JS.ACK.", E::TokenCount(3)),
            (b"$JS.ACK.S.C.1.2.3.4", E::TokenCount(8)),
            (b"$JS.ACK.D.S.C.1.2.3.4.5", E::TokenCount(10)),
            (b"$JS.ACK..C.1.2.3.4.5", E::EmptyToken),
            (b"$JS.ACK.S..1.2.3.4.5", E::EmptyToken),
            (b"$JS.ACK..H.S.C.1.2.3.4.5", E::EmptyToken),
            (b"$JS.ACK.D..S.C.1.2.3.4.5", E::EmptyToken),
            (b"$JS.ACK.D.H.S.C.1.2.3.4.5.", E::EmptyToken),
            (b"$JS.ACK.D.H.S.C.1.2.3.4.5.a..b", E::EmptyToken),
            (b"$JS.ACK.S.C.x.2.3.4.5", E::Number("delivered")),
            (b"$JS.ACK.S.C.+1.2.3.4.5", E::Number("delivered")),
            (b"$JS.ACK.S.C.-1.2.3.4.5", E::Number("delivered")),
            (b"$JS.ACK.S.C. 1.2.3.4.5", E::Number("delivered")),
            (b"$JS.ACK.S.C.1.2.3.4. 5", E::Number("pending")),
            (b"$JS.ACK.S.C.1..3.4.5", E::Number("stream sequence")),
            (
                b"$JS.ACK.S.C.18446744073709551616.2.3.4.5",
                E::Number("delivered"),
            ),
            (
                b"$JS.ACK.S.C.1.2.99999999999999999999.4.5",
                E::Number("consumer sequence"),
            ),
            (b"$JS.ACK.S.C.1.2.3.1e9.5", E::Number("timestamp")),
            (b"$JS.ACK.S.C.0.2.3.4.5", E::ZeroDelivered),
            (b"$JS.ACK.S\xff.C.1.2.3.4.5", E::NotUtf8),
        ];
        for (input, want) in cases {
            assert_eq!(
                AckReply::parse(input),
                Err(*want),
                "{}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn largest_numbers_fit() {
        let s = format!("$JS.ACK.S.C.{m}.{m}.{m}.{m}.{m}", m = u64::MAX);
        let r = AckReply::parse(s.as_bytes()).expect("valid");
        assert_eq!(r.delivered, u64::MAX);
        assert_eq!(r.to_string(), s);
    }

    #[test]
    fn leading_zeros_parse_to_the_same_metadata() {
        let a = AckReply::parse(b"$JS.ACK.S.C.01.002.3.4.5").expect("valid");
        let rendered = a.to_string();
        let b = AckReply::parse(rendered.as_bytes()).expect("valid");
        assert_eq!(a, b);
    }
}
