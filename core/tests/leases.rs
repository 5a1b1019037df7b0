//! Properties of the lease rules (rule 16), driven through random sequences of handler starts,
//! ends and time passing, with the one timer an adapter would keep.

#![allow(clippy::unwrap_used, missing_docs)]
#![allow(clippy::disallowed_methods)] // the test reads the clock once for a base instant

use std::collections::HashMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use ruststream_settlement::{LeaseDue, LeaseEnd, LeaseKey, LeaseTerms, Leases};

#[derive(Debug, Clone)]
enum Step {
    /// A handler starts: span (ms, or none for Core), renew, time limit (ms).
    Start(Option<u64>, bool, u64),
    /// The handler of the n-th running lease (modulo) finishes.
    End(usize),
    /// Time passes (ms); the timer fires for what is due.
    Advance(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => (proptest::option::of(1_000u64..10_000), any::<bool>(), 1_000u64..60_000)
            .prop_map(|(span, renew, limit)| Step::Start(span, renew, limit)),
        2 => any::<usize>().prop_map(Step::End),
        4 => (1u64..400).prop_map(Step::Advance),
    ]
}

struct Running {
    key: LeaseKey,
    started: Instant,
    terms: LeaseTerms,
    limited: bool,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// With the timer served on time and every `+WPI` sent: a renewed lease is never late, a
    /// lease without renewals is late exactly when it ends past its span, nothing is due for a
    /// lease that ended, and no renewal comes after the time limit.
    #[test]
    fn leases_hold_while_renewed_and_end_cleanly(steps in proptest::collection::vec(step(), 0..150)) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut leases = Leases::new();
        let mut running: Vec<Running> = Vec::new();
        let mut ended: Vec<LeaseKey> = Vec::new();
        let mut limits: HashMap<LeaseKey, Instant> = HashMap::new();
        for s in steps {
            match s {
                Step::Start(span, renew, limit) => {
                    let terms = LeaseTerms {
                        span: span.map(Duration::from_millis),
                        renew,
                        limit: Duration::from_millis(limit),
                        delivery: None,
                    };
                    let key = leases.handle_start(terms, (), now);
                    running.push(Running { key, started: now, terms, limited: false });
                }
                Step::End(n) => {
                    if running.is_empty() {
                        continue;
                    }
                    let r = running.remove(n % running.len());
                    let (end, item) = leases.handle_end(r.key, now);
                    prop_assert!(item.is_some());
                    ended.push(r.key);
                    match (r.terms.span, r.terms.renew) {
                        (Some(span), false) => {
                            let late = now > r.started + span;
                            prop_assert_eq!(matches!(end, LeaseEnd::Late { .. }), late);
                        }
                        (Some(_), true) if !r.limited => prop_assert_eq!(end, LeaseEnd::OnTime),
                        (None, _) => prop_assert_eq!(end, LeaseEnd::OnTime),
                        _ => {}
                    }
                }
                Step::Advance(ms) => {
                    let target = now + Duration::from_millis(ms);
                    // The one timer: fire at each due instant up to the target, in order.
                    while let Some(at) = leases.poll_timeout().filter(|at| *at <= target) {
                        now = at.max(now);
                        for due in leases.handle_timeout(now) {
                            match due {
                                LeaseDue::Renew(key) => {
                                    prop_assert!(!ended.contains(&key), "renewal of an ended lease");
                                    prop_assert!(!limits.contains_key(&key), "renewal after the time limit");
                                    leases.handle_renewed(key, now);
                                }
                                LeaseDue::TimeLimit(key) => {
                                    prop_assert!(!ended.contains(&key), "time limit of an ended lease");
                                    let r = running.iter_mut().find(|r| r.key == key).unwrap();
                                    prop_assert_eq!(now, r.started + r.terms.limit);
                                    r.limited = true;
                                    limits.insert(key, now);
                                }
                            }
                        }
                        prop_assert!(leases.poll_timeout().is_none_or(|next| next > now));
                    }
                    now = target;
                }
            }
            prop_assert_eq!(leases.len(), running.len());
            // Nothing stays scheduled for a lease that ended: the schedule is bounded by the
            // handlers running.
            prop_assert!(leases.scheduled() <= 2 * leases.len(), "{} scheduled for {} leases", leases.scheduled(), leases.len());
            if running.is_empty() {
                prop_assert_eq!(leases.poll_timeout(), None);
            }
        }
    }
}
