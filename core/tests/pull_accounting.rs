//! Property: whatever the sequence of pull events, the pull accounting never leaks a handler
//! slot nor frees one twice. A model holds the slots as the adapter does (free, held by
//! running handlers) and moves exactly what each call returns; the three always add up to
//! the mount's concurrency.

#![allow(clippy::unwrap_used, missing_docs)]
#![allow(clippy::disallowed_methods)] // the test reads the clock once for a base instant

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use ruststream_core::{PULL_EXPIRES, PULL_GRACE, PullAccounting, Receipt};

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
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn slots_are_never_leaked_nor_freed_twice(
        concurrency in 1usize..40,
        steps in proptest::collection::vec(step(), 0..200),
    ) {
        let mut a = PullAccounting::new(NonZeroUsize::new(concurrency).unwrap());
        let start = Instant::now();
        let mut now = start;
        let (mut free, mut handlers) = (concurrency, 0usize);
        for s in steps {
            match s {
                Step::Request => {
                    if let Some(r) = a.poll_request(free) {
                        prop_assert!(r.batch >= 1 && r.batch <= free, "{r:?} with {free} free");
                        prop_assert!(!a.is_stopping());
                        free -= r.batch;
                        a.handle_requested(r, now);
                    }
                }
                Step::Message => match a.handle_message() {
                    Receipt::Reserved => handlers += 1,
                    // The adapter waits for a free slot; without one the message waits.
                    Receipt::Unrequested => {
                        if free > 0 {
                            free -= 1;
                            handlers += 1;
                        }
                    }
                },
                Step::HandlerDone => {
                    if handlers > 0 {
                        handlers -= 1;
                        free += 1;
                    }
                }
                Step::RequestEnd(pending) => free += a.handle_request_end(pending.as_deref()),
                Step::Advance(ms) => {
                    now += Duration::from_millis(ms);
                    free += a.handle_timeout(now);
                }
                Step::ConnectionLost => free += a.handle_connection_lost(),
                Step::Shutdown => a.handle_shutdown(),
            }
            prop_assert_eq!(free + handlers + a.outstanding(), concurrency);
            if a.is_stopping() {
                prop_assert!(a.poll_request(free).is_none());
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
