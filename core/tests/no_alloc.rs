//! The JetStream path allocates nothing: parsing the ack reply subject, planning every outcome
//! and rendering the ack payload, counted by an instrumented global allocator.
//!
//! This file holds a single test so that no other test thread allocates while it counts.

#![allow(clippy::disallowed_methods)] // the test reads the clock once to get a `now`

use std::alloc::System;
use std::hint::black_box;
use std::time::{Duration, Instant};

use ruststream_settlement::{AckReply, Delivery, Event, MountDeclaration, Outcome, plan};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

#[test]
fn jetstream_outcomes_do_not_allocate() {
    let policy = MountDeclaration::jetstream("orders", "ORDERS", "worker")
        .max_attempts(3)
        .dead_letter("dlq.orders")
        .validate()
        .expect("valid");
    let no_limit = MountDeclaration::jetstream("orders", "ORDERS", "worker")
        .validate()
        .expect("valid");
    let replies = [
        "$JS.ACK.ORDERS.worker.1.1042.17.1700000000123456789.5",
        "$JS.ACK.ORDERS.worker.3.1042.17.1700000000123456789.5",
        "$JS.ACK.hub.ACCHASH.ORDERS.worker.4.1042.17.1700000000123456789.5.tok",
    ];
    let events = [
        Event::Arrived,
        Event::Handled(Outcome::Ack),
        Event::Handled(Outcome::Retry),
        Event::Handled(Outcome::RetryAfter(Duration::from_millis(250))),
        Event::Handled(Outcome::Drop),
        Event::Handled(Outcome::None),
        Event::Handled(Outcome::Reject),
        Event::Undecodable,
        Event::PublishFailed,
    ];
    let now = Instant::now();

    let region = Region::new(GLOBAL);
    let mut payload_bytes = 0usize;
    for reply in replies {
        let parsed = AckReply::parse(black_box(reply.as_bytes())).expect("valid reply");
        let delivery = Delivery::jetstream("orders.new", parsed);
        for event in events {
            for p in [&policy, &no_limit] {
                let plan = plan(black_box(&delivery), black_box(event), p, now);
                if let Some(settlement) = plan.settlement() {
                    payload_bytes += settlement.payload().as_bytes().len();
                }
                black_box(&plan);
            }
        }
    }
    let change = region.change();
    assert!(
        payload_bytes > 0,
        "the loop settled nothing: the test measured nothing"
    );
    assert_eq!(
        (
            change.allocations,
            change.reallocations,
            change.bytes_allocated
        ),
        (0, 0, 0),
        "the JetStream path allocated: {change:?}"
    );
}
