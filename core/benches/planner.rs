//! Criterion benchmarks of the planner and the two parsers.
//!
//! Run: `cargo bench -p ruststream-settlement --bench planner`. Results: BENCHMARKS.md.

#![allow(missing_docs, clippy::disallowed_methods, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use ruststream_settlement::{
    AckReply, Delivery, Event, MountDeclaration, Outcome, RetryCount, RetryCountReading, plan,
};

const REPLY_V1: &str = "$JS.ACK.ORDERS.worker.2.1042.17.1700000000123456789.5";
const REPLY_V2: &str = "$JS.ACK.hub.ACCHASH.ORDERS.worker.2.1042.17.1700000000123456789.5.R4nd0m";

fn planner(c: &mut Criterion) {
    let js = MountDeclaration::jetstream("orders", "ORDERS", "worker")
        .max_attempts(3)
        .dead_letter("dlq.orders")
        .validate()
        .unwrap();
    let core = MountDeclaration::core_subject("orders", "orders.new")
        .max_attempts(3)
        .dead_letter("dlq.orders")
        .validate()
        .unwrap();
    let below = Delivery::jetstream("orders.new", AckReply::parse(REPLY_V1.as_bytes()).unwrap());
    let at_limit_reply = REPLY_V1.replace(".worker.2.", ".worker.3.");
    let at_limit = Delivery::jetstream(
        "orders.new",
        AckReply::parse(at_limit_reply.as_bytes()).unwrap(),
    );
    let core_below = Delivery::core(
        "orders.new",
        RetryCountReading {
            count: Some(RetryCount(1)),
            ignored: 0,
        },
    );
    let now = Instant::now();

    let mut g = c.benchmark_group("planner");
    let cases = [
        ("jetstream_ack", &below, Outcome::Ack, &js),
        ("jetstream_retry", &below, Outcome::Retry, &js),
        (
            "jetstream_retry_after",
            &below,
            Outcome::RetryAfter(Duration::from_millis(250)),
            &js,
        ),
        ("jetstream_dead_letter", &at_limit, Outcome::Retry, &js),
        ("core_retry_copy", &core_below, Outcome::Retry, &core),
        (
            "core_retry_after_timer",
            &core_below,
            Outcome::RetryAfter(Duration::from_millis(250)),
            &core,
        ),
    ];
    for (name, delivery, outcome, policy) in cases {
        g.bench_function(name, |b| {
            b.iter(|| {
                plan(
                    black_box(delivery),
                    black_box(Event::Handled(outcome)),
                    black_box(policy),
                    now,
                )
            })
        });
    }
    g.bench_function("jetstream_arrived", |b| {
        b.iter(|| {
            plan(
                black_box(&below),
                black_box(Event::Arrived),
                black_box(&js),
                now,
            )
        })
    });
    g.bench_function("jetstream_parse_plan_payload", |b| {
        b.iter(|| {
            let reply = AckReply::parse(black_box(REPLY_V1.as_bytes())).unwrap();
            let d = Delivery::jetstream("orders.new", reply);
            let p = plan(
                &d,
                Event::Handled(Outcome::RetryAfter(Duration::from_millis(250))),
                &js,
                now,
            );
            p.settlement().map(|s| s.payload())
        })
    });
    g.finish();
}

fn parsers(c: &mut Criterion) {
    let mut g = c.benchmark_group("parsers");
    g.bench_function("ack_reply_9_tokens", |b| {
        b.iter(|| AckReply::parse(black_box(REPLY_V1.as_bytes())))
    });
    g.bench_function("ack_reply_12_tokens", |b| {
        b.iter(|| AckReply::parse(black_box(REPLY_V2.as_bytes())))
    });

    let typical: Vec<(&[u8], &[u8])> = vec![
        (b"Content-Type", b"application/json"),
        (b"Trace-Id", b"4bf92f3577b34da6a3ce929d0e0e4736"),
        (b"x-ruststream-retry-count", b"2"),
    ];
    let hostile: Vec<(&[u8], &[u8])> = vec![
        (b"X-RUSTSTREAM-RETRY-COUNT", b" 99999999999999999999999 "),
        (b"x-ruststream-retry-count", b"-1"),
        (b"X-Ruststream-Retry-Count", b"\xff\xfe"),
        (b"x-ruststream-retry-count", b"7"),
    ];
    g.bench_function("retry_count_typical", |b| {
        b.iter(|| RetryCountReading::read(black_box(&typical).iter().copied()))
    });
    g.bench_function("retry_count_hostile", |b| {
        b.iter(|| RetryCountReading::read(black_box(&hostile).iter().copied()))
    });
    g.bench_function("retry_count_absent", |b| {
        b.iter(|| RetryCountReading::read(black_box(&typical[..2]).iter().copied()))
    });
    g.finish();
}

criterion_group!(benches, planner, parsers);
criterion_main!(benches);
