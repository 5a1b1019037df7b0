//! Property: whatever the sequence of pull events, the pull accounting never leaks a handler
//! slot nor frees one twice, and never has more messages prefetched (requested beyond the
//! slots, or waiting for one) than its prefetch allows. A model holds the slots as the adapter
//! does (free, held for requested messages, taken by running handlers) and moves exactly what
//! each call returns; the three always add up to the mount's concurrency. Prefetched messages
//! wait in a queue for a free slot, as in the adapter; without a deadline nothing is ever
//! prefetched.

#![allow(clippy::unwrap_used, missing_docs)]
#![allow(clippy::disallowed_methods)] // the test reads the clock once for a base instant

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use ruststream_settlement::{PREFETCH_PER_SLOT, PULL_EXPIRES, PULL_GRACE, PullAccounting, Receipt};

#[derive(Debug, Clone)]
enum Step {
    /// The loop looks whether a request is due, and sends it.
    Request,
    /// A message of a request arrives.
    Message,
    /// A running handler finishes and frees its slot.
    HandlerDone,
    /// The server ends a request, with this `Nats-Pending-Messages` value (raw), if any.
    RequestEnd(Option<Vec<u8>>),
    /// Time passes, in milliseconds.
    Advance(u64),
    /// The connection is lost and made again.
    ConnectionLost,
    /// Shutdown begins.
    Shutdown,
    /// The adapter gives the accounting a deadline, in milliseconds, or none.
    Deadline(Option<u64>),
    /// The consumer's `MaxRequestBatch`, or none.
    MaxBatch(Option<usize>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Request),
        4 => Just(Step::Message),
        3 => Just(Step::HandlerDone),
        2 => proptest::option::of(prop_oneof![
            (0usize..40).prop_map(|n| n.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..6),
        ])
        .prop_map(Step::RequestEnd),
        1 => (0u64..4_000).prop_map(Step::Advance),
        1 => Just(Step::ConnectionLost),
        1 => Just(Step::Shutdown),
        1 => proptest::option::of(0u64..60_000).prop_map(Step::Deadline),
        1 => proptest::option::of(0usize..50).prop_map(Step::MaxBatch),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// Also, without a deadline (leases off: `prefetching` false, every `Deadline` step left
    /// out) every requested message has a held slot: none is prefetched, none waits.
    #[test]
    fn slots_are_never_leaked_nor_freed_twice(
        concurrency in 1usize..40,
        prefetching in any::<bool>(),
        steps in proptest::collection::vec(step(), 0..200),
    ) {
        let mut a = PullAccounting::new(NonZeroUsize::new(concurrency).unwrap());
        let start = Instant::now();
        let mut now = start;
        let (mut free, mut handlers, mut queued) = (concurrency, 0usize, 0usize);
        let mut deadline = None;
        let mut max_batch = None;
        for s in steps {
            match s {
                Step::Request => {
                    if let Some(r) = a.poll_request(free, queued, now) {
                        prop_assert!(r.batch >= 1 && r.held <= free && r.held <= r.batch, "{r:?} with {free} free");
                        if let Some(most) = max_batch.filter(|m| *m > 0) {
                            prop_assert!(r.batch <= most, "{r:?} past MaxRequestBatch {most}");
                        }
                        prop_assert!(!a.is_stopping());
                        if deadline.is_none() {
                            prop_assert_eq!(r.batch, r.held);
                        }
                        // Beyond the slots it asks only for what the prefetch leaves (messages
                        // that came unrequested and wait may already fill it).
                        if r.batch > r.held {
                            let prefetched = a.outstanding() - a.held() + r.batch - r.held + queued;
                            prop_assert!(prefetched <= a.prefetch(now), "{prefetched} prefetched, {} allowed", a.prefetch(now));
                        }
                        free -= r.held;
                        a.handle_requested(r, now);
                    }
                }
                Step::Message => match a.handle_message() {
                    Receipt::Prefetched if !prefetching => {
                        prop_assert!(false, "prefetched without a deadline");
                    }
                    Receipt::Reserved => {
                        handlers += 1;
                        a.handle_started(now, handlers);
                    }
                    // The adapter takes a free slot, or queues the message until one frees.
                    Receipt::Prefetched | Receipt::Unrequested => {
                        if free > 0 {
                            free -= 1;
                            handlers += 1;
                            a.handle_started(now, handlers);
                        } else {
                            queued += 1;
                        }
                    }
                },
                Step::HandlerDone => {
                    if handlers > 0 {
                        if queued > 0 {
                            // The slot goes to the first queued message.
                            queued -= 1;
                            a.handle_started(now, handlers);
                        } else {
                            handlers -= 1;
                            free += 1;
                        }
                    }
                }
                Step::RequestEnd(pending) => free += a.handle_request_end(pending.as_deref()),
                Step::Advance(ms) => {
                    now += Duration::from_millis(ms);
                    free += a.handle_timeout(now);
                }
                Step::ConnectionLost => free += a.handle_connection_lost(),
                Step::Shutdown => a.handle_shutdown(),
                Step::Deadline(_) if !prefetching => {}
                Step::Deadline(ms) => {
                    deadline = ms.map(Duration::from_millis);
                    a.set_prefetch_deadline(deadline);
                }
                Step::MaxBatch(most) => {
                    max_batch = most;
                    a.set_max_batch(most);
                }
            }
            prop_assert_eq!(free + handlers + a.held(), concurrency);
            prop_assert!(a.held() <= a.outstanding());
            if deadline.is_none() {
                prop_assert_eq!(a.prefetch(now), 0);
            }
            prop_assert!(a.prefetch(now) <= concurrency * PREFETCH_PER_SLOT);
            if a.is_stopping() {
                prop_assert!(a.poll_request(free, queued, now).is_none());
            }
            if let Some(end) = a.poll_timeout() {
                prop_assert!(end <= now + PULL_EXPIRES + PULL_GRACE);
            }
        }
        // Whatever happened, shutdown and the loss deadline end the loop with every slot back.
        a.handle_shutdown();
        free += a.handle_timeout(now + PULL_EXPIRES + PULL_GRACE);
        prop_assert!(a.is_done());
        prop_assert_eq!(free + handlers, concurrency);
    }
}
