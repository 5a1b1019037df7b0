//! What clients send the server, read as nats-server reads it: acknowledgement payloads and
//! pull requests.

use std::time::Duration;

/// How an acknowledgement reads (the payload of a publish to a `$JS.ACK.` subject).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckKind {
    /// `+ACK` (or an empty payload).
    Ack,
    /// `-NAK`, with its delay when it has one.
    Nak(Option<Duration>),
    /// `+WPI`.
    Progress,
    /// `+TERM`.
    Term,
    /// `+NXT`: acknowledged, and a pull request follows (not modelled: read as `+ACK`).
    Next,
    /// Anything else: ignored, as the server ignores it.
    Unknown,
}

impl AckKind {
    /// Reads an ack payload as nats-server does. A `-NAK` whose delay does not read as
    /// `{"delay": <ns>}` is a `-NAK` without delay (the server logs it; so does nothing here).
    pub fn parse(payload: &[u8]) -> Self {
        match payload {
            b"" | b"+ACK" | b"+OK" => Self::Ack,
            b"+WPI" => Self::Progress,
            p if p.starts_with(b"+NXT") => Self::Next,
            p if p.starts_with(b"+TERM") => Self::Term,
            p if p.starts_with(b"-NAK") => {
                let arg = p[4..].trim_ascii();
                #[derive(serde::Deserialize)]
                struct Delay {
                    delay: i64,
                }
                let delay = serde_json::from_slice::<Delay>(arg)
                    .ok()
                    .map(|d| Duration::from_nanos(d.delay.max(0).unsigned_abs()));
                Self::Nak(delay)
            }
            _ => Self::Unknown,
        }
    }
}

/// A pull request, as `CONSUMER.MSG.NEXT` takes it (`{"batch": n, "expires": ns, "no_wait": b}`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct PullRequest {
    /// How many messages, at least 1.
    #[serde(default = "one")]
    pub batch: usize,
    /// How long it waits, in nanoseconds on the wire; `None`: until it is filled.
    #[serde(default, with = "nanos")]
    pub expires: Option<Duration>,
    /// End at once with `404` when nothing is there.
    #[serde(default)]
    pub no_wait: bool,
}

fn one() -> usize {
    1
}

mod nanos {
    use std::time::Duration;

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let n: Option<i64> = serde::Deserialize::deserialize(d)?;
        Ok(n.filter(|n| *n > 0)
            .map(|n| Duration::from_nanos(n.unsigned_abs())))
    }
}
