//! The checks behind ruststream's fuzz targets, as plain functions over raw bytes.
//!
//! Each `fuzz_targets/*.rs` calls one `check_*` function here with libFuzzer's input. Keeping
//! the checks in a library lets `cargo test -p ruststream-fuzz` replay the committed corpus
//! (`fuzz/corpus/<target>/`) through the same code without libFuzzer, and lets a regression be
//! reproduced with an ordinary test.
//!
//! Every check panics (and so makes libFuzzer report a crash) when the code under test panics
//! or disagrees with the reference model written here from SETTLEMENT.md.

#![allow(clippy::disallowed_methods)] // the planner check reads the clock once for a base instant

use std::num::NonZeroU32;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use arbitrary::{Arbitrary, Unstructured};
use ruststream_settlement::{
    AckError, AckReply, Action, DeadLetterReason, Delivery, Disposition, Event, Log, MAX_NAK_DELAY,
    Model, MountDeclaration, MountPolicy, Outcome, RETRY_COUNT_HEADER, RetryCount,
    RetryCountReading, Settlement, plan,
};

/// The names of the fuzz targets, which are also the corpus folder names.
pub const TARGETS: [&str; 5] = [
    "retry_count_header",
    "ack_reply",
    "planner",
    "ack_payload",
    "header_block",
];

/// The reference model of rule 5, written as plainly as possible: the header's values in
/// order; for each, strip ASCII whitespace at both ends; digits only → a number (saturating);
/// anything else → ignored. The largest number wins.
fn rule_5_model(pairs: &[(Vec<u8>, Vec<u8>)]) -> RetryCountReading {
    let mut count: Option<u64> = None;
    let mut ignored = 0u32;
    for (name, value) in pairs {
        if name.to_ascii_lowercase() != RETRY_COUNT_HEADER.as_bytes() {
            continue;
        }
        let mut v: &[u8] = value;
        while let [first, rest @ ..] = v {
            if !first.is_ascii_whitespace() {
                break;
            }
            v = rest;
        }
        while let [rest @ .., last] = v {
            if !last.is_ascii_whitespace() {
                break;
            }
            v = rest;
        }
        if v.is_empty() || v.iter().any(|b| !b.is_ascii_digit()) {
            ignored += 1;
            continue;
        }
        // Digits beyond u64 saturate: compare as a big decimal through u128 steps.
        let mut n: u128 = 0;
        for d in v {
            n = (n * 10 + u128::from(d - b'0')).min(u128::from(u64::MAX) + 1);
        }
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        count = Some(count.map_or(n, |c| c.max(n)));
    }
    RetryCountReading {
        count: count.map(RetryCount),
        ignored,
    }
}

/// Parses the `retry_count_header` input: one header per `\n`-separated line, the name before
/// the first `:`, the value after it (a line without `:` is a name with an empty value). Names
/// and values are arbitrary bytes otherwise, so seeds stay readable.
fn header_lines(data: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    data.split(|&b| b == b'\n')
        .map(|line| match line.iter().position(|&b| b == b':') {
            Some(i) => (line[..i].to_vec(), line[i + 1..].to_vec()),
            None => (line.to_vec(), Vec::new()),
        })
        .collect()
}

/// Target `retry_count_header`: arbitrary header maps (one `name:value` per line); the reader never
/// panics and agrees with the rule-5 model.
pub fn check_retry_count(data: &[u8]) {
    let pairs = header_lines(data);
    let got = RetryCountReading::read(pairs.iter().map(|(n, v)| (&n[..], &v[..])));
    let want = rule_5_model(&pairs);
    assert_eq!(got, want, "rule 5 disagrees on {pairs:?}");
}

/// Target `ack_reply`: arbitrary bytes (with the `$JS.ACK.` prefix put in front when the
/// first byte is odd, so the fuzzer reaches the fields). Never panics; an accepted subject
/// renders back to one that parses to the same metadata, with `delivered` at least 1.
pub fn check_ack_reply(data: &[u8]) {
    let input: Vec<u8> = match data.split_first() {
        Some((first, rest)) if first & 1 == 1 => [b"$JS.ACK.".as_slice(), rest].concat(),
        Some((_, rest)) => rest.to_vec(),
        None => Vec::new(),
    };
    if let Ok(reply) = AckReply::parse(&input) {
        assert!(reply.delivered >= 1, "accepted delivered = 0");
        let rendered = reply.to_string();
        let again = AckReply::parse(rendered.as_bytes())
            .unwrap_or_else(|e| panic!("rendered {rendered:?} does not parse: {e}"));
        assert_eq!(reply, again, "round trip through {rendered:?}");
    }
}

/// Target `header_block`: arbitrary bytes as a stored message's header block
/// ([`Headers::parse_block`](ruststream_settlement::Headers::parse_block)). A block that reads
/// renders back (`NATS/1.0`, a `name: value` line each, an empty line) to the same headers;
/// what a dead letter says of itself reads from them without a panic, and the headers its
/// replay carries ([`restored_headers`](ruststream_settlement::restored_headers)) are some of them,
/// in order.
pub fn check_header_block(data: &[u8]) {
    let Some(headers) = ruststream_settlement::Headers::parse_block(data) else {
        return;
    };
    let mut block = b"NATS/1.0\r\n".to_vec();
    for (name, value) in headers.iter() {
        block.extend_from_slice(name);
        block.extend_from_slice(b": ");
        block.extend_from_slice(value);
        block.extend_from_slice(b"\r\n");
    }
    block.extend_from_slice(b"\r\n");
    let again = ruststream_settlement::Headers::parse_block(&block)
        .unwrap_or_else(|| panic!("the rendered block {block:?} does not read"));
    assert_eq!(headers, again, "round trip through {block:?}");
    let _ = ruststream_settlement::DeadLetterRecord::read(headers.iter());
    let restored = ruststream_settlement::restored_headers(headers.iter());
    let mut all = headers.iter();
    for pair in &restored {
        assert!(
            all.any(|p| p == *pair),
            "the replay's {pair:?} is not one of the dead letter's headers, in order"
        );
    }
}

/// Target `ack_payload`: an arbitrary `retry_after` delay, read as seconds (the first 8 bytes,
/// little-endian, zero-padded) and nanoseconds (the next 4, modulo 10^9). The payload is `-NAK` for zero, and
/// otherwise `-NAK ` followed by JSON whose `delay` is an integer number of nanoseconds, at
/// most `i64::MAX`, equal to the delay clamped (rule 12).
pub fn check_ack_payload(data: &[u8]) {
    let mut bytes = [0u8; 12];
    let n = data.len().min(12);
    bytes[..n].copy_from_slice(&data[..n]);
    let secs = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    let nanos = u32::from_le_bytes(bytes[8..].try_into().expect("4 bytes"));
    let delay = Duration::new(secs, nanos % 1_000_000_000);
    let payload = Settlement::nak(delay).payload();
    let bytes = payload.as_bytes();
    if delay.is_zero() {
        assert_eq!(bytes, b"-NAK");
        return;
    }
    let json = bytes
        .strip_prefix(b"-NAK ")
        .expect("a delayed -NAK starts with `-NAK `");
    let value: serde_json::Value = serde_json::from_slice(json).expect("the delay is JSON");
    let ns = value["delay"]
        .as_i64()
        .expect("delay is an integer that fits in i64");
    assert!(ns > 0, "a non-zero delay was sent as {ns}");
    let want = delay.min(MAX_NAK_DELAY).as_nanos();
    assert_eq!(u128::from(ns as u64), want, "delay {delay:?} sent as {ns}");
    assert_eq!(
        value.as_object().map(|o| o.len()),
        Some(1),
        "only `delay` in {value}"
    );
}

/// The fuzzer's picture of a mount.
#[derive(Debug, Arbitrary)]
struct PolicyInput {
    descriptor: u8,
    limit: Option<NonZeroU32>,
    dead_letter: bool,
    retry_delay_ms: u32,
}

#[derive(Debug, Arbitrary)]
enum DeliveryInput {
    Core { count: Option<u64>, ignored: u8 },
    JetStream { delivered: u64 },
}

#[derive(Debug, Arbitrary)]
enum OutcomeInput {
    Ack,
    Retry,
    RetryAfter { secs: u64, nanos: u32 },
    Drop,
    None,
    Reject,
}

#[derive(Debug, Arbitrary)]
enum EventInput {
    Arrived,
    Handled(OutcomeInput),
    Undecodable,
    PublishFailed,
    CopyTooLarge,
}

#[derive(Debug, Arbitrary)]
struct PlanInput {
    policy: PolicyInput,
    delivery: DeliveryInput,
    event: EventInput,
    now_offset_ms: u32,
}

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn build_policy(p: &PolicyInput) -> MountPolicy {
    let d = match p.descriptor % 4 {
        0 => MountDeclaration::core_subject("m", "orders.new"),
        1 => MountDeclaration::core_wildcard("m", "orders.*", Some("orders.retry")),
        2 => MountDeclaration::core_wildcard("m", "orders.*", Some("retry.orders")),
        _ => MountDeclaration::jetstream("m", "ORDERS", "worker"),
    };
    let d = d.dead_letter_retry_delay(Duration::from_millis(u64::from(p.retry_delay_ms)));
    let d = match p.limit {
        Some(n) => d.max_attempts(n.get()),
        None => d,
    };
    let d = if p.dead_letter && p.limit.is_some() {
        d.dead_letter("dlq.orders")
    } else {
        d
    };
    d.validate()
        .expect("the fuzzer only builds valid declarations")
}

/// What SETTLEMENT.md Part C says, as (actions, disposition) with copy deadlines as delays.
#[derive(Debug, PartialEq, Eq)]
enum Expected {
    Settle(Settlement),
    CopyNow(RetryCount),
    CopyAfter(RetryCount, Duration),
    DeadLetter(DeadLetterReason),
    Unsupported,
    RetryCountIgnored(u32),
    LetGo,
    Lost,
}

/// The decision table, transcribed row by row, independently of the planner's code.
fn part_c(
    delivery: &Delivery<'_>,
    event: &Event,
    policy: &MountPolicy,
) -> (Vec<Expected>, Disposition) {
    use Expected as E;
    let a = delivery.attempt().get();
    let limit = policy.max_attempts().map(|l| u64::from(l.get()));
    let dlq = policy.dead_letter().is_some();
    let at_limit = limit.is_some_and(|l| a >= l);
    let past_limit = limit.is_some_and(|l| a > l);
    let js = matches!(delivery.model, Model::JetStream(_));
    let at_limit_plan = |reason: DeadLetterReason| match (js, dlq) {
        (true, true) => (
            vec![E::DeadLetter(reason), E::Settle(Settlement::Term)],
            Disposition::DeadLettered,
        ),
        (true, false) => (vec![E::Settle(Settlement::Term)], Disposition::Terminated),
        (false, true) => (vec![E::DeadLetter(reason)], Disposition::DeadLettered),
        (false, false) => (vec![E::LetGo], Disposition::LetGo),
    };
    let count = RetryCount(a);
    match *event {
        Event::Arrived => {
            let mut logs = Vec::new();
            if let Model::Core(r) = delivery.model
                && r.ignored > 0
            {
                logs.push(E::RetryCountIgnored(r.ignored));
            }
            if past_limit {
                let (actions, d) = at_limit_plan(DeadLetterReason::Limit);
                logs.extend(actions);
                (logs, d)
            } else {
                (logs, Disposition::RunHandler)
            }
        }
        Event::Undecodable => at_limit_plan(DeadLetterReason::Undecodable),
        Event::CopyTooLarge => at_limit_plan(DeadLetterReason::CopyTooLarge),
        Event::PublishFailed if js => (
            vec![E::Settle(Settlement::nak(policy.dead_letter_retry_delay()))],
            Disposition::DeadLetterRetry,
        ),
        Event::PublishFailed => (vec![E::Lost], Disposition::Lost),
        Event::Handled(outcome) if js => match outcome {
            Outcome::Ack => (vec![E::Settle(Settlement::Ack)], Disposition::Acked),
            Outcome::Drop => (vec![E::Settle(Settlement::Term)], Disposition::Dropped),
            Outcome::None => (vec![], Disposition::NoOutcome),
            // Part C: reject (or undecodable), any limit state, on both models.
            Outcome::Reject => at_limit_plan(DeadLetterReason::Rejected),
            Outcome::Retry | Outcome::RetryAfter(_) if at_limit => {
                at_limit_plan(DeadLetterReason::Limit)
            }
            Outcome::Retry => (vec![E::Settle(Settlement::Nak)], Disposition::Retried),
            Outcome::RetryAfter(d) if d.is_zero() => {
                (vec![E::Settle(Settlement::Nak)], Disposition::Retried)
            }
            Outcome::RetryAfter(d) => (
                vec![E::Settle(Settlement::NakWithDelay(d.min(MAX_NAK_DELAY)))],
                Disposition::Delayed,
            ),
        },
        Event::Handled(outcome) => {
            let has_copy_subject = policy.copy_subject().is_some();
            match outcome {
                // Rule 22: logged, and recorded as the handler's outcome.
                Outcome::Ack => (vec![E::Unsupported], Disposition::Acked),
                Outcome::Drop => (vec![E::Unsupported], Disposition::Dropped),
                Outcome::None => (vec![], Disposition::NoOutcome),
                Outcome::Reject => at_limit_plan(DeadLetterReason::Rejected),
                Outcome::Retry if limit.is_none() => {
                    (vec![E::Unsupported], Disposition::Unsupported)
                }
                Outcome::Retry | Outcome::RetryAfter(_) if at_limit || !has_copy_subject => {
                    at_limit_plan(DeadLetterReason::Limit)
                }
                Outcome::Retry => (
                    vec![E::Unsupported, E::CopyNow(count)],
                    Disposition::Retried,
                ),
                Outcome::RetryAfter(d) if d.is_zero() => {
                    (vec![E::CopyNow(count)], Disposition::Retried)
                }
                Outcome::RetryAfter(d) => (vec![E::CopyAfter(count, d)], Disposition::Delayed),
            }
        }
    }
}

/// Target `planner`: arbitrary deliveries, events, policies and `now`. Every plan keeps the
/// ordering invariants and matches the Part C table.
pub fn check_plan(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(input) = PlanInput::arbitrary(&mut u) else {
        return;
    };
    let policy = build_policy(&input.policy);
    let delivery = match input.delivery {
        DeliveryInput::Core { count, ignored } => Delivery::core(
            "orders.new",
            RetryCountReading {
                count: count.map(RetryCount),
                ignored: u32::from(ignored % 4),
            },
        ),
        DeliveryInput::JetStream { delivered } => Delivery::jetstream(
            "orders.new",
            AckReply {
                domain: None,
                account_hash: None,
                stream: "ORDERS",
                consumer: "worker",
                delivered: delivered.max(1),
                stream_sequence: 1,
                consumer_sequence: 1,
                timestamp: 0,
                pending: 0,
                trailer: None,
            },
        ),
    };
    let event = match input.event {
        EventInput::Arrived => Event::Arrived,
        EventInput::Undecodable => Event::Undecodable,
        EventInput::CopyTooLarge => Event::CopyTooLarge,
        EventInput::PublishFailed => Event::PublishFailed,
        EventInput::Handled(o) => Event::Handled(match o {
            OutcomeInput::Ack => Outcome::Ack,
            OutcomeInput::Retry => Outcome::Retry,
            OutcomeInput::RetryAfter { secs, nanos } => {
                Outcome::RetryAfter(Duration::new(secs, nanos % 1_000_000_000))
            }
            OutcomeInput::Drop => Outcome::Drop,
            OutcomeInput::None => Outcome::None,
            OutcomeInput::Reject => Outcome::Reject,
        }),
    };
    let now = base() + Duration::from_millis(u64::from(input.now_offset_ms));
    let got = plan(&delivery, event, &policy, now);
    assert_eq!(
        got,
        plan(&delivery, event, &policy, now),
        "not deterministic"
    );

    // Ordering invariants.
    let actions = got.actions();
    let settles = actions
        .iter()
        .filter(|a| matches!(a, Action::Settle(_)))
        .count();
    assert!(settles <= 1, "two settlements: {actions:?}");
    if settles == 1 {
        assert!(
            matches!(actions.last(), Some(Action::Settle(_))),
            "settlement not last: {actions:?}"
        );
    }

    // The table.
    let observed: Vec<Expected> = actions
        .iter()
        .map(|a| match *a {
            Action::Settle(s) => Expected::Settle(s),
            Action::PublishCopy {
                subject,
                retry_count,
            } => {
                assert_eq!(Some(subject), policy.copy_subject());
                Expected::CopyNow(retry_count)
            }
            Action::ScheduleCopy {
                subject,
                retry_count,
                at,
            } => {
                assert_eq!(Some(subject), policy.copy_subject());
                assert!(at >= now, "copy armed in the past");
                let delay = at - now;
                match event {
                    Event::Handled(Outcome::RetryAfter(d)) => {
                        if now.checked_add(d).is_some() {
                            assert_eq!(delay, d, "copy armed for the wrong delay");
                        }
                        Expected::CopyAfter(retry_count, d)
                    }
                    other => panic!("copy armed for {other:?}"),
                }
            }
            Action::PublishDeadLetter { subject, reason } => {
                assert_eq!(Some(subject), policy.dead_letter());
                Expected::DeadLetter(reason)
            }
            Action::Log(Log::Unsupported(AckError::Unsupported)) => Expected::Unsupported,
            Action::Log(Log::RetryCountIgnored { values }) => Expected::RetryCountIgnored(values),
            Action::Log(Log::LetGo) => Expected::LetGo,
            Action::Log(Log::Lost) => Expected::Lost,
            Action::Log(other) => panic!("unknown log {other:?}"),
        })
        .collect();
    let (want, disposition) = part_c(&delivery, &event, &policy);
    assert_eq!(
        observed, want,
        "Part C disagrees for {delivery:?} {event:?} {policy:?}"
    );
    assert_eq!(
        got.disposition(),
        disposition,
        "disposition for {delivery:?} {event:?}"
    );
}

/// Runs `check` over every file in `fuzz/corpus/<target>/`, and returns how many it ran.
///
/// # Panics
/// When the folder cannot be read or is empty (a missing corpus must not pass silently), or
/// when a check fails.
pub fn replay(target: &str, check: fn(&[u8])) -> usize {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let entries =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    let mut n = 0;
    for entry in entries {
        let path = entry.expect("corpus entry").path();
        let data =
            std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        check(&data);
        n += 1;
    }
    assert!(n > 0, "the corpus {} is empty", dir.display());
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_retry_count_header_corpus() {
        replay("retry_count_header", check_retry_count);
    }

    #[test]
    fn replay_ack_reply_corpus() {
        replay("ack_reply", check_ack_reply);
    }

    #[test]
    fn replay_planner_corpus() {
        replay("planner", check_plan);
    }

    #[test]
    fn replay_ack_payload_corpus() {
        replay("ack_payload", check_ack_payload);
    }

    #[test]
    fn replay_header_block_corpus() {
        replay("header_block", check_header_block);
    }

    #[test]
    fn the_rule_5_model_is_not_trivial() {
        let pairs = vec![
            (b"X-RUSTSTREAM-RETRY-COUNT".to_vec(), b" 4 ".to_vec()),
            (b"x-ruststream-retry-count".to_vec(), b"x".to_vec()),
            (
                b"x-ruststream-retry-count".to_vec(),
                b"99999999999999999999999".to_vec(),
            ),
        ];
        assert_eq!(
            rule_5_model(&pairs),
            RetryCountReading {
                count: Some(RetryCount(u64::MAX)),
                ignored: 1
            }
        );
    }
}
