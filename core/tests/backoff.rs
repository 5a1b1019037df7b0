//! Rule 18: the backoff policy's guarantees, and the planner's use of it.

#![allow(clippy::unwrap_used, missing_docs)]
#![allow(clippy::disallowed_methods)] // the tests read the clock once to get a `now`

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use ruststream_settlement::{
    AckReply, Action, Attempt, Backoff, BackoffError, DeclarationErrorKind, Delivery, Event,
    MountDeclaration, Outcome, RetryCount, RetryCountReading, Settlement, plan,
};

fn attempt(n: u64) -> Attempt {
    Attempt::new(n).unwrap()
}

/// Exponential backoffs that pass `check`: base 1 µs to 10 s, cap up to 1000× the base,
/// factor 1 to 4, jitter 0 to 0.9.
fn exponential() -> impl Strategy<Value = Backoff> {
    (1u64..10_000_000, 1u64..1000, 1000u32..4000, 0u32..900).prop_map(
        |(base_us, times, factor, jitter)| {
            let base = Duration::from_micros(base_us);
            Backoff::exponential(base, base * u32::try_from(times).unwrap())
                .factor(f64::from(factor) / 1000.0)
                .jitter(f64::from(jitter) / 1000.0)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn delays_never_exceed_the_cap(b in exponential(), key in any::<u64>(), a in 1u64..200) {
        prop_assert!(b.check().is_ok());
        prop_assert!(b.delay(key, attempt(a)) <= b.cap());
        prop_assert!(b.delay(key, attempt(u64::MAX)) <= b.cap());
    }

    #[test]
    fn delays_never_decrease_with_the_attempt(b in exponential(), key in any::<u64>()) {
        let mut before = Duration::ZERO;
        for a in 1..=80 {
            let d = b.delay(key, attempt(a));
            prop_assert!(d >= before, "attempt {a}: {d:?} after {before:?}");
            before = d;
        }
        prop_assert!(b.delay(key, attempt(u64::MAX)) >= before);
    }

    #[test]
    fn the_same_delivery_and_attempt_give_the_same_delay(
        b in exponential(), key in any::<u64>(), a in 1u64..100,
    ) {
        let copy = b;
        prop_assert_eq!(b.delay(key, attempt(a)), copy.delay(key, attempt(a)));
    }

    #[test]
    fn jitter_takes_at_most_its_fraction(b in exponential(), key in any::<u64>(), a in 1u64..40) {
        // Against the same policy without jitter.
        let plain = b.jitter(0.0);
        let full = plain.delay(key, attempt(a));
        let d = b.delay(key, attempt(a));
        prop_assert!(d <= full);
        // 0.9 is the largest jitter generated.
        prop_assert!(d.as_secs_f64() >= full.as_secs_f64() * 0.1 - 1e-9, "{d:?} of {full:?}");
    }

    #[test]
    fn deliveries_spread_out(base_ms in 10u64..1000, a in 1u64..30, seed in any::<u64>()) {
        let b = Backoff::exponential(
            Duration::from_millis(base_ms),
            Duration::from_millis(base_ms * 100),
        );
        let delays: BTreeSet<Duration> = (0..100u64)
            .map(|k| b.delay(seed.wrapping_add(k.wrapping_mul(0x9E37)), attempt(a)))
            .collect();
        prop_assert!(delays.len() >= 90, "only {} distinct delays of 100", delays.len());
        let (low, high) = (delays.first().unwrap(), delays.last().unwrap());
        // Default jitter 0.2: the delays cover most of their band.
        prop_assert!(high.as_secs_f64() - low.as_secs_f64() >= high.as_secs_f64() * 0.1);
    }
}

#[test]
fn exponential_grows_by_its_factor_up_to_its_cap() {
    let b = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(1)).jitter(0.0);
    let delays: Vec<u128> = (1..=6)
        .map(|a| b.delay(7, attempt(a)).as_millis())
        .collect();
    assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
}

#[test]
fn fixed_is_the_same_at_every_attempt() {
    let b = Backoff::fixed(Duration::from_millis(250));
    for a in [1, 2, 50, u64::MAX] {
        assert_eq!(b.delay(a, attempt(a)), Duration::from_millis(250));
    }
}

#[test]
fn bad_backoffs_are_refused_by_name() {
    let s = Duration::from_secs(1);
    let cases = [
        (
            Backoff::exponential(Duration::ZERO, s),
            BackoffError::ZeroBase,
        ),
        (
            Backoff::exponential(s * 2, s),
            BackoffError::BaseAboveCap {
                base: s * 2,
                cap: s,
            },
        ),
        (
            Backoff::exponential(s, s).factor(0.5),
            BackoffError::Factor(500),
        ),
        (
            Backoff::exponential(s, s).factor(f64::NAN),
            BackoffError::Factor(0),
        ),
        (
            Backoff::exponential(s, s).jitter(1.0),
            BackoffError::Jitter(1000),
        ),
        (Backoff::fixed(Duration::ZERO), BackoffError::ZeroBase),
        (
            Backoff::exponential(s, s).factor(-2.0),
            BackoffError::Factor(0),
        ),
    ];
    for (backoff, want) in cases {
        let err = MountDeclaration::jetstream("paced", "ORDERS", "worker")
            .backoff(backoff)
            .validate()
            .unwrap_err();
        assert_eq!(err.kind(), &DeclarationErrorKind::Backoff(want.clone()));
        let text = err.to_string();
        assert!(text.contains("paced") && text.contains("backoff"), "{text}");
    }
    assert_eq!(
        BackoffError::Factor(500).to_string(),
        "backoff factor 0.500 must be a number of at least 1 (delays must not shrink; a negative or not-a-number factor counts as 0)"
    );
}

fn js(delivered: u64, sequence: u64) -> Delivery<'static> {
    Delivery::jetstream(
        "orders.new",
        AckReply {
            domain: None,
            account_hash: None,
            stream: "ORDERS",
            consumer: "worker",
            delivered,
            stream_sequence: sequence,
            consumer_sequence: sequence,
            timestamp: 0,
            pending: 0,
            trailer: None,
        },
    )
}

#[test]
fn a_jetstream_retry_with_a_backoff_naks_with_its_delay() {
    let b = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(10));
    let policy = MountDeclaration::jetstream("paced", "ORDERS", "worker")
        .max_attempts(5)
        .backoff(b)
        .validate()
        .unwrap();
    let now = Instant::now();
    for a in 1..5 {
        let d = js(a, 42);
        let want = b.delay(d.key(), attempt(a));
        assert!(want >= Duration::from_millis(80) * 2u32.pow(u32::try_from(a).unwrap() - 1));
        let pl = plan(&d, Event::Handled(Outcome::Retry), &policy, now);
        assert_eq!(pl.actions(), [Action::Settle(Settlement::nak(want))]);
    }
    // The same message at the same attempt, on another consumer's delivery of it: the same
    // key only for the same stream, consumer and sequence.
    assert_eq!(js(2, 42).key(), js(3, 42).key());
    assert_ne!(js(2, 42).key(), js(2, 43).key());
    // At the limit the at-limit path, unchanged.
    let pl = plan(&js(5, 42), Event::Handled(Outcome::Retry), &policy, now);
    assert_eq!(pl.actions(), [Action::Settle(Settlement::Term)]);
    // retry_after keeps its own delay.
    let own = Duration::from_millis(7);
    let pl = plan(
        &js(1, 42),
        Event::Handled(Outcome::RetryAfter(own)),
        &policy,
        now,
    );
    assert_eq!(pl.actions(), [Action::Settle(Settlement::nak(own))]);
}

#[test]
fn a_core_retry_with_a_backoff_schedules_its_copy_even_without_a_limit() {
    let b = Backoff::fixed(Duration::from_millis(300));
    let policy = MountDeclaration::core_subject("paced", "orders.new")
        .backoff(b)
        .validate()
        .unwrap();
    let now = Instant::now();
    let d = Delivery::core(
        "orders.new",
        RetryCountReading {
            count: Some(RetryCount(2)),
            ignored: 0,
        },
    )
    .with_key(99);
    assert_eq!(d.key(), 99);
    // An adapter's Core key: the subject's and the payload's, the same for every copy.
    let core = |payload: &[u8]| {
        Delivery::core("orders.new", RetryCountReading::default()).keyed_by_payload(payload)
    };
    assert_eq!(core(b"a").key(), core(b"a").key());
    assert_ne!(core(b"a").key(), core(b"b").key());
    let pl = plan(&d, Event::Handled(Outcome::Retry), &policy, now);
    match pl.actions() {
        [
            Action::ScheduleCopy {
                retry_count, at, ..
            },
        ] => {
            assert_eq!(*retry_count, RetryCount(3));
            assert_eq!(*at, now + Duration::from_millis(300));
        }
        other => panic!("{other:?}"),
    }
}
