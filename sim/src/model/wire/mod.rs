//! The vocabulary on the wire, stateless. Here, what clients send the server, read as
//! nats-server reads it: acknowledgement payloads and pull requests; and the size of a header
//! block on the wire. In [`protocol`], the NATS client protocol's operations and messages,
//! parsed from bytes and written to bytes; in [`api`], the JetStream API's JSON.

use std::time::Duration;

use async_nats::HeaderMap;

pub(crate) mod api;
pub(crate) mod protocol;

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
    /// Reads an ack payload as nats-server does. A `-NAK`'s delay is `{"delay": <ns>}` or a Go
    /// duration (`-NAK 600ms`, `-NAK 1m30s`); one that reads as neither is a `-NAK` without
    /// delay (the server logs it; nothing does here).
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
                let delay = if arg.first() == Some(&b'{') {
                    serde_json::from_slice::<Delay>(arg)
                        .ok()
                        .map(|d| Duration::from_nanos(d.delay.max(0).unsigned_abs()))
                } else {
                    std::str::from_utf8(arg).ok().and_then(go_duration)
                };
                Self::Nak(delay)
            }
            _ => Self::Unknown,
        }
    }
}

/// A pull request, as `CONSUMER.MSG.NEXT` takes it (`{"batch": n, "expires": ns, "no_wait": b,
/// "idle_heartbeat": ns}`, and for a consumer with priority groups `"group"`,
/// `"min_pending"`, `"min_ack_pending"` and `"id"`: [`PullPriority`]).
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
    /// How often the server sends `100 Idle Heartbeat` while the request waits with nothing
    /// to deliver, in nanoseconds on the wire; `None`: never.
    #[serde(default, with = "nanos")]
    pub idle_heartbeat: Option<Duration>,
    /// Its priority-group fields. nats-server 2.11+ reads them from every JSON request (all
    /// empty when it sets none); `None` for a request that is no JSON object (an empty body),
    /// which the server takes without a group.
    #[serde(flatten)]
    pub priority: Option<PullPriority>,
}

/// The priority-group fields of a pull request (nats-server 2.11+; 2.9 ignores them). A field
/// given as `null` (async-nats writes `"min_pending":null` and the like) is left out, as Go
/// reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct PullPriority {
    /// `group`: the consumer's priority group it pulls for (required, and one of the
    /// consumer's, when the consumer has a priority policy).
    #[serde(deserialize_with = "null_is_default")]
    pub group: String,
    /// `min_pending` (overflow): served only while the consumer's `num_pending` is at least
    /// this; 0 for no limit.
    #[serde(deserialize_with = "null_is_default")]
    pub min_pending: i64,
    /// `min_ack_pending` (overflow): served only while the consumer's `num_ack_pending` is at
    /// least this; 0 for no limit.
    #[serde(deserialize_with = "null_is_default")]
    pub min_ack_pending: i64,
    /// `id` (pinned client): the `Nats-Pin-Id` the client was given; empty for none.
    #[serde(deserialize_with = "null_is_default")]
    pub id: String,
    /// `priority` (nats-server 2.12's prioritized policy, which the model refuses): only
    /// checked to be within 0..=9, as the server checks it.
    #[serde(deserialize_with = "null_is_default")]
    pub priority: i64,
}

/// A JSON `null` read as the type's default, as Go's `encoding/json` leaves the field.
fn null_is_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + serde::Deserialize<'de>,
{
    Ok(<Option<T> as serde::Deserialize>::deserialize(d)?.unwrap_or_default())
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

/// A Go duration, as Go's `time.ParseDuration` reads it: a sequence of decimal numbers, each
/// with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), like `300ms` or `1h2m3.5s`. `None` for
/// anything else, or a negative one.
fn go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.is_empty() || rest.starts_with('-') {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total += number * nanos_per;
    }
    (total.is_finite() && total < u64::MAX as f64).then(|| Duration::from_nanos(total as u64))
}

/// The headers' size on the wire: `NATS/1.0\r\n`, each `name: value\r\n`, and `\r\n`.
pub(crate) fn headers_len(headers: &HeaderMap) -> usize {
    let pairs: usize = headers
        .iter()
        .map(|(name, values)| {
            values
                .iter()
                .map(|v| AsRef::<str>::as_ref(name).len() + 2 + v.as_str().len() + 2)
                .sum::<usize>()
        })
        .sum();
    10 + pairs + 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nak_delays_read_as_json_or_go_durations() {
        let nak = |p: &str| AckKind::parse(p.as_bytes());
        let ms = Duration::from_millis;
        assert_eq!(
            nak(r#"-NAK {"delay": 300000000}"#),
            AckKind::Nak(Some(ms(300)))
        );
        assert_eq!(nak("-NAK 600ms"), AckKind::Nak(Some(ms(600))));
        assert_eq!(nak("-NAK 1m30s"), AckKind::Nak(Some(ms(90_000))));
        assert_eq!(nak("-NAK 1.5s"), AckKind::Nak(Some(ms(1_500))));
        assert_eq!(
            nak("-NAK 250us"),
            AckKind::Nak(Some(Duration::from_micros(250)))
        );
        assert_eq!(nak("-NAK"), AckKind::Nak(None));
        assert_eq!(nak("-NAK soon"), AckKind::Nak(None));
        assert_eq!(nak("-NAK 5"), AckKind::Nak(None), "a number without a unit");
        assert_eq!(nak("-NAK -1s"), AckKind::Nak(None));
    }
}
