//! SETTLEMENT.md Part C, row by row: one test per row, each asserting the exact action list.
//!
//! Test names are `row_NN_<model>_<outcome>_<limit state>`, numbered in the table's order.

#![allow(clippy::disallowed_methods)] // tests read the clock once to get a `now`

use std::time::{Duration, Instant};

use ruststream_settlement::{
    AckError, AckReply, Action, DeadLetterReason, Delivery, Disposition, Event, Log, MAX_NAK_DELAY,
    MountDeclaration, MountPolicy, Outcome, RetryCount, RetryCountReading, Settlement, Subject,
    plan,
};

const DLQ: &str = "dlq.orders";

fn reply(delivered: u64) -> AckReply<'static> {
    AckReply {
        domain: None,
        account_hash: None,
        stream: "ORDERS",
        consumer: "worker",
        delivered,
        stream_sequence: 7,
        consumer_sequence: 9,
        timestamp: 1_700_000_000_000_000_000,
        pending: 0,
        trailer: None,
    }
}

/// A JetStream delivery at attempt `a`.
fn js(a: u64) -> Delivery<'static> {
    Delivery::jetstream("orders.new", reply(a))
}

/// A Core delivery at attempt `a` (its header says `a - 1`; attempt 1 has no header).
fn core(a: u64) -> Delivery<'static> {
    let count = (a > 1).then_some(RetryCount(a - 1));
    Delivery::core("orders.new", RetryCountReading { count, ignored: 0 })
}

fn finish(d: MountDeclaration, limit: Option<u32>, dlq: bool) -> MountPolicy {
    let d = match limit {
        Some(n) => d.max_attempts(n),
        None => d,
    };
    let d = if dlq { d.dead_letter(DLQ) } else { d };
    d.validate().expect("valid declaration")
}

fn js_policy(limit: Option<u32>, dlq: bool) -> MountPolicy {
    finish(
        MountDeclaration::jetstream("js", "ORDERS", "worker"),
        limit,
        dlq,
    )
}

fn core_subject(limit: Option<u32>, dlq: bool) -> MountPolicy {
    finish(
        MountDeclaration::core_subject("core", "orders.new"),
        limit,
        dlq,
    )
}

fn core_wildcard(limit: Option<u32>, dlq: bool) -> MountPolicy {
    finish(
        MountDeclaration::core_wildcard("wild", "orders.*", Some("orders.retry")),
        limit,
        dlq,
    )
}

fn subject(s: &str) -> Subject {
    Subject::new(s).expect("valid subject")
}

fn now() -> Instant {
    Instant::now()
}

/// The exact action list for `event`.
fn actions<'p>(
    d: &Delivery<'_>,
    event: impl Into<Event>,
    p: &'p MountPolicy,
    now: Instant,
) -> Vec<Action<'p>> {
    plan(d, event.into(), p, now).actions().to_vec()
}

const UNSUPPORTED: Action<'static> = Action::Log(Log::Unsupported(AckError::Unsupported));

/// Every combination of limit state a row marked "any" covers: (limit, attempt).
const ANY: [(Option<u32>, u64); 5] = [
    (None, 1),
    (None, 9),
    (Some(3), 1),
    (Some(3), 3),
    (Some(3), 4),
];

#[test]
fn row_01_jetstream_ack_any() {
    for (limit, a) in ANY {
        for dlq in [false, limit.is_some()] {
            let p = js_policy(limit, dlq);
            assert_eq!(
                actions(&js(a), Outcome::Ack, &p, now()),
                [Action::Settle(Settlement::Ack)]
            );
        }
    }
}

#[test]
fn row_02_jetstream_drop_any() {
    for (limit, a) in ANY {
        for dlq in [false, limit.is_some()] {
            let p = js_policy(limit, dlq);
            assert_eq!(
                actions(&js(a), Outcome::Drop, &p, now()),
                [Action::Settle(Settlement::Term)]
            );
        }
    }
}

#[test]
fn row_03_jetstream_retry_below_limit() {
    for (limit, a) in [(None, 1), (None, 1000), (Some(3), 1), (Some(3), 2)] {
        let p = js_policy(limit, limit.is_some());
        assert_eq!(
            actions(&js(a), Outcome::Retry, &p, now()),
            [Action::Settle(Settlement::Nak)]
        );
    }
}

#[test]
fn row_04_jetstream_retry_after_below_limit() {
    let d = Duration::from_millis(250);
    for (limit, a) in [(None, 1), (None, 1000), (Some(3), 1), (Some(3), 2)] {
        let p = js_policy(limit, false);
        let got = actions(&js(a), Outcome::RetryAfter(d), &p, now());
        assert_eq!(got, [Action::Settle(Settlement::NakWithDelay(d))]);
        let Action::Settle(s) = got[0] else {
            unreachable!()
        };
        assert_eq!(s.payload().as_bytes(), br#"-NAK {"delay": 250000000}"#);
    }
    // Rule 12: zero is a plain -NAK; too large is clamped to i64::MAX ns.
    let p = js_policy(None, false);
    assert_eq!(
        actions(&js(1), Outcome::RetryAfter(Duration::ZERO), &p, now()),
        [Action::Settle(Settlement::Nak)]
    );
    assert_eq!(
        actions(&js(1), Outcome::RetryAfter(Duration::MAX), &p, now()),
        [Action::Settle(Settlement::NakWithDelay(MAX_NAK_DELAY))]
    );
}

#[test]
fn row_05_jetstream_retry_at_limit_with_dead_letter() {
    let p = js_policy(Some(3), true);
    let dlq = subject(DLQ);
    for a in [3, 4, u64::MAX] {
        for outcome in [Outcome::Retry, Outcome::RetryAfter(Duration::from_secs(1))] {
            let pl = plan(&js(a), outcome.into(), &p, now());
            assert_eq!(
                pl.actions(),
                [
                    Action::PublishDeadLetter {
                        subject: &dlq,
                        reason: DeadLetterReason::Limit,
                    },
                    Action::Settle(Settlement::Term)
                ]
            );
            assert_eq!(pl.disposition(), Disposition::DeadLettered);
        }
    }
}

#[test]
fn row_06_jetstream_retry_at_limit_without_dead_letter() {
    for limit in [1, 3] {
        let p = js_policy(Some(limit), false);
        for a in [u64::from(limit), u64::from(limit) + 1] {
            for outcome in [Outcome::Retry, Outcome::RetryAfter(Duration::from_secs(1))] {
                let pl = plan(&js(a), outcome.into(), &p, now());
                assert_eq!(pl.actions(), [Action::Settle(Settlement::Term)]);
                assert_eq!(pl.disposition(), Disposition::Terminated);
            }
        }
    }
}

#[test]
fn row_07_jetstream_arrives_past_limit_handler_not_run() {
    let dlq = subject(DLQ);
    let with = js_policy(Some(3), true);
    let pl = plan(&js(4), Event::Arrived, &with, now());
    assert!(!pl.runs_handler());
    assert_eq!(
        pl.actions(),
        [
            Action::PublishDeadLetter {
                subject: &dlq,
                reason: DeadLetterReason::Limit,
            },
            Action::Settle(Settlement::Term)
        ]
    );

    let without = js_policy(Some(3), false);
    let pl = plan(&js(4), Event::Arrived, &without, now());
    assert!(!pl.runs_handler());
    assert_eq!(pl.actions(), [Action::Settle(Settlement::Term)]);

    // At the limit (not past it) and below it, the handler runs and nothing is sent yet.
    for a in [1, 3] {
        let pl = plan(&js(a), Event::Arrived, &with, now());
        assert!(pl.runs_handler());
        assert_eq!(pl.actions(), []);
    }
    // Without a limit, no attempt is past it.
    assert!(
        plan(
            &js(u64::MAX),
            Event::Arrived,
            &js_policy(None, false),
            now()
        )
        .runs_handler()
    );
}

#[test]
fn row_08_jetstream_no_outcome_any() {
    for (limit, a) in ANY {
        let p = js_policy(limit, limit.is_some());
        let pl = plan(&js(a), Outcome::None.into(), &p, now());
        assert_eq!(pl.actions(), []);
        assert_eq!(pl.disposition(), Disposition::NoOutcome);
    }
}

#[test]
fn row_09_jetstream_dead_letter_publish_fails() {
    let p = finish(
        MountDeclaration::jetstream("js", "ORDERS", "worker")
            .dead_letter_retry_delay(Duration::from_secs(2)),
        Some(3),
        true,
    );
    let pl = plan(&js(3), Event::PublishFailed, &p, now());
    assert_eq!(
        pl.actions(),
        [Action::Settle(Settlement::NakWithDelay(
            Duration::from_secs(2)
        ))]
    );
    assert_eq!(pl.disposition(), Disposition::DeadLetterRetry);
    // It comes back past the limit and the dead letter is tried again (rule 3).
    let again = plan(&js(4), Event::Arrived, &p, now());
    assert!(!again.runs_handler());
    assert_eq!(again.disposition(), Disposition::DeadLettered);
}

#[test]
fn row_10_core_ack_any() {
    for (limit, a) in ANY {
        for p in [
            core_subject(limit, limit.is_some()),
            core_wildcard(limit, false),
        ] {
            let pl = plan(&core(a), Outcome::Ack.into(), &p, now());
            assert_eq!(pl.actions(), [UNSUPPORTED]);
            // Rule 22: observers see the handler's outcome.
            assert_eq!(pl.disposition(), Disposition::Acked);
        }
    }
}

#[test]
fn row_11_core_drop_any() {
    for (limit, a) in ANY {
        for p in [
            core_subject(limit, limit.is_some()),
            core_wildcard(limit, false),
        ] {
            let pl = plan(&core(a), Outcome::Drop.into(), &p, now());
            assert_eq!(pl.actions(), [UNSUPPORTED]);
            assert_eq!(pl.disposition(), Disposition::Dropped);
        }
    }
}

#[test]
fn row_12_core_retry_without_limit() {
    for a in [1, 2, 50] {
        for p in [core_subject(None, false), core_wildcard(None, false)] {
            let pl = plan(&core(a), Outcome::Retry.into(), &p, now());
            assert_eq!(pl.actions(), [UNSUPPORTED]);
            assert_eq!(pl.disposition(), Disposition::Unsupported);
        }
    }
}

#[test]
fn row_13_core_retry_below_limit_copies_now() {
    let own = subject("orders.new");
    let named = subject("orders.retry");
    for a in [1, 2] {
        let p = core_subject(Some(3), true);
        assert_eq!(
            actions(&core(a), Outcome::Retry, &p, now()),
            [
                UNSUPPORTED,
                Action::PublishCopy {
                    subject: &own,
                    retry_count: RetryCount(a)
                }
            ]
        );
        let p = core_wildcard(Some(3), false);
        assert_eq!(
            actions(&core(a), Outcome::Retry, &p, now()),
            [
                UNSUPPORTED,
                Action::PublishCopy {
                    subject: &named,
                    retry_count: RetryCount(a)
                }
            ]
        );
    }
}

#[test]
fn row_14_core_retry_after_below_limit_copies_after_delay() {
    let own = subject("orders.new");
    let named = subject("orders.retry");
    let d = Duration::from_millis(200);
    let t = now();
    for (limit, a) in [(None, 1), (None, 40), (Some(3), 1), (Some(3), 2)] {
        assert_eq!(
            actions(
                &core(a),
                Outcome::RetryAfter(d),
                &core_subject(limit, false),
                t
            ),
            [Action::ScheduleCopy {
                subject: &own,
                retry_count: RetryCount(a),
                at: t + d
            }]
        );
        assert_eq!(
            actions(
                &core(a),
                Outcome::RetryAfter(d),
                &core_wildcard(limit, false),
                t
            ),
            [Action::ScheduleCopy {
                subject: &named,
                retry_count: RetryCount(a),
                at: t + d
            }]
        );
    }
    // A zero delay is a copy at once (no Unsupported: retry_after is supported on Core).
    assert_eq!(
        actions(
            &core(1),
            Outcome::RetryAfter(Duration::ZERO),
            &core_subject(Some(3), false),
            t
        ),
        [Action::PublishCopy {
            subject: &own,
            retry_count: RetryCount(1)
        }]
    );
    // A delay past what an Instant can hold is armed as far out as it can be, never before now.
    let p = core_subject(None, false);
    let pl = plan(&core(1), Outcome::RetryAfter(Duration::MAX).into(), &p, t);
    let [Action::ScheduleCopy { at, .. }] = pl.actions() else {
        panic!("{pl:?}")
    };
    assert!(*at > t + Duration::from_secs(86_400 * 365));
}

#[test]
fn row_15_core_retry_at_limit_with_dead_letter() {
    let dlq = subject(DLQ);
    for p in [core_subject(Some(3), true), core_wildcard(Some(3), true)] {
        for a in [3, 4] {
            for outcome in [
                Outcome::Retry,
                Outcome::RetryAfter(Duration::from_millis(5)),
            ] {
                let pl = plan(&core(a), outcome.into(), &p, now());
                assert_eq!(
                    pl.actions(),
                    [Action::PublishDeadLetter {
                        subject: &dlq,
                        reason: DeadLetterReason::Limit,
                    }]
                );
                assert_eq!(pl.disposition(), Disposition::DeadLettered);
            }
        }
    }
}

#[test]
fn row_16_core_retry_at_limit_without_dead_letter_warns() {
    for p in [core_subject(Some(2), false), core_wildcard(Some(2), false)] {
        for a in [2, 3] {
            for outcome in [
                Outcome::Retry,
                Outcome::RetryAfter(Duration::from_millis(5)),
            ] {
                let pl = plan(&core(a), outcome.into(), &p, now());
                assert_eq!(pl.actions(), [Action::Log(Log::LetGo)]);
                assert_eq!(pl.disposition(), Disposition::LetGo);
            }
        }
    }
}

#[test]
fn row_17_core_arrives_past_limit_handler_not_run() {
    let dlq = subject(DLQ);
    let p = core_subject(Some(3), true);
    let pl = plan(&core(4), Event::Arrived, &p, now());
    assert!(!pl.runs_handler());
    assert_eq!(
        pl.actions(),
        [Action::PublishDeadLetter {
            subject: &dlq,
            reason: DeadLetterReason::Limit,
        }]
    );

    let p = core_wildcard(Some(3), false);
    let pl = plan(&core(4), Event::Arrived, &p, now());
    assert!(!pl.runs_handler());
    assert_eq!(pl.actions(), [Action::Log(Log::LetGo)]);

    let p = core_subject(Some(3), true);
    let pl = plan(&core(3), Event::Arrived, &p, now());
    assert!(pl.runs_handler());
    assert_eq!(pl.actions(), []);
}

#[test]
fn row_18_core_no_outcome_any() {
    for (limit, a) in ANY {
        for p in [
            core_subject(limit, limit.is_some()),
            core_wildcard(limit, false),
        ] {
            let pl = plan(&core(a), Outcome::None.into(), &p, now());
            assert_eq!(pl.actions(), []);
            assert_eq!(pl.disposition(), Disposition::NoOutcome);
        }
    }
}

// Part C's reject rows (rule 17): the at-limit path now, whatever the attempt. A dead-letter
// subject needs a limit, so the DLQ rows cover the limit states that have one.

#[test]
fn row_jetstream_reject_with_dead_letter() {
    let dlq = subject(DLQ);
    for (limit, a) in ANY.into_iter().filter(|(limit, _)| limit.is_some()) {
        let p = js_policy(limit, true);
        let pl = plan(&js(a), Outcome::Reject.into(), &p, now());
        assert_eq!(
            pl.actions(),
            [
                Action::PublishDeadLetter {
                    subject: &dlq,
                    reason: DeadLetterReason::Rejected,
                },
                Action::Settle(Settlement::Term)
            ],
            "limit {limit:?}, attempt {a}"
        );
        assert_eq!(pl.disposition(), Disposition::DeadLettered);
    }
}

#[test]
fn row_jetstream_reject_without_dead_letter() {
    for (limit, a) in ANY {
        let p = js_policy(limit, false);
        let pl = plan(&js(a), Outcome::Reject.into(), &p, now());
        assert_eq!(
            pl.actions(),
            [Action::Settle(Settlement::Term)],
            "limit {limit:?}, attempt {a}"
        );
        assert_eq!(pl.disposition(), Disposition::Terminated);
    }
}

#[test]
fn row_core_reject_with_dead_letter() {
    let dlq = subject(DLQ);
    for (limit, a) in ANY.into_iter().filter(|(limit, _)| limit.is_some()) {
        for p in [core_subject(limit, true), core_wildcard(limit, true)] {
            let pl = plan(&core(a), Outcome::Reject.into(), &p, now());
            assert_eq!(
                pl.actions(),
                [Action::PublishDeadLetter {
                    subject: &dlq,
                    reason: DeadLetterReason::Rejected,
                }],
                "limit {limit:?}, attempt {a}"
            );
            assert_eq!(pl.disposition(), Disposition::DeadLettered);
        }
    }
}

#[test]
fn row_core_reject_without_dead_letter_warns() {
    for (limit, a) in ANY {
        for p in [core_subject(limit, false), core_wildcard(limit, false)] {
            let pl = plan(&core(a), Outcome::Reject.into(), &p, now());
            assert_eq!(
                pl.actions(),
                [Action::Log(Log::LetGo)],
                "limit {limit:?}, attempt {a}"
            );
            assert_eq!(pl.disposition(), Disposition::LetGo);
        }
    }
}

// Beyond the table: the other events the planner takes.

#[test]
fn undecodable_payload_takes_the_at_limit_path() {
    let dlq = subject(DLQ);
    let p = js_policy(Some(5), true);
    let pl = plan(&js(1), Event::Undecodable, &p, now());
    assert_eq!(
        pl.actions(),
        [
            Action::PublishDeadLetter {
                subject: &dlq,
                reason: DeadLetterReason::Undecodable,
            },
            Action::Settle(Settlement::Term)
        ]
    );
    let p = js_policy(None, false);
    let pl = plan(&js(1), Event::Undecodable, &p, now());
    assert_eq!(pl.actions(), [Action::Settle(Settlement::Term)]);
    let p = core_subject(Some(5), true);
    let pl = plan(&core(1), Event::Undecodable, &p, now());
    assert_eq!(
        pl.actions(),
        [Action::PublishDeadLetter {
            subject: &dlq,
            reason: DeadLetterReason::Undecodable,
        }]
    );
    let p = core_subject(None, false);
    let pl = plan(&core(1), Event::Undecodable, &p, now());
    assert_eq!(pl.actions(), [Action::Log(Log::LetGo)]);
}

#[test]
fn rule_21_core_copy_too_large_takes_the_at_limit_path() {
    let dlq = subject(DLQ);
    // Below the limit: the copy would have gone out; its dead letter goes instead.
    let p = core_wildcard(Some(5), true);
    let pl = plan(&core(1), Event::CopyTooLarge, &p, now());
    assert_eq!(
        pl.actions(),
        [Action::PublishDeadLetter {
            subject: &dlq,
            reason: DeadLetterReason::CopyTooLarge,
        }]
    );
    assert_eq!(pl.disposition(), Disposition::DeadLettered);
    // Without a dead-letter subject: let go, with the at-limit warning.
    let p = core_wildcard(Some(5), false);
    let pl = plan(&core(2), Event::CopyTooLarge, &p, now());
    assert_eq!(pl.actions(), [Action::Log(Log::LetGo)]);
    assert_eq!(pl.disposition(), Disposition::LetGo);
}

#[test]
fn core_publish_failure_is_logged_as_lost() {
    let p = core_subject(Some(3), true);
    let pl = plan(&core(3), Event::PublishFailed, &p, now());
    assert_eq!(pl.actions(), [Action::Log(Log::Lost)]);
    assert_eq!(pl.disposition(), Disposition::Lost);
    assert_eq!(pl.settlement(), None);
}

#[test]
fn rule_5_ignored_header_values_are_logged_on_arrival() {
    let d = Delivery::core(
        "orders.new",
        RetryCountReading {
            count: None,
            ignored: 2,
        },
    );
    let p = core_subject(Some(3), false);
    let pl = plan(&d, Event::Arrived, &p, now());
    assert!(pl.runs_handler());
    assert_eq!(
        pl.actions(),
        [Action::Log(Log::RetryCountIgnored { values: 2 })]
    );
    // The delivery counts as attempt 1, and its copy carries a clean value.
    let own = subject("orders.new");
    assert_eq!(
        actions(&d, Outcome::Retry, &core_subject(Some(3), false), now()),
        [
            UNSUPPORTED,
            Action::PublishCopy {
                subject: &own,
                retry_count: RetryCount(1)
            }
        ]
    );
}

#[test]
fn core_delivery_on_a_jetstream_mount_has_nowhere_to_copy() {
    // An adapter bug, but the planner stays total: the at-limit path instead of a copy.
    let p = js_policy(Some(3), false);
    let pl = plan(&core(1), Outcome::Retry.into(), &p, now());
    assert_eq!(pl.actions(), [Action::Log(Log::LetGo)]);
}

#[test]
fn plans_describe_their_wire_actions() {
    let p = js_policy(Some(3), true);
    assert_eq!(
        plan(&js(3), Outcome::Retry.into(), &p, now()).to_string(),
        "dead letter to dlq.orders, +TERM"
    );
    assert_eq!(
        plan(
            &js(1),
            Outcome::RetryAfter(Duration::from_millis(5)).into(),
            &p,
            now()
        )
        .to_string(),
        r#"-NAK {"delay": 5000000}"#
    );
    assert_eq!(
        plan(&js(1), Outcome::None.into(), &p, now()).to_string(),
        "nothing"
    );
    let c = core_subject(Some(3), false);
    assert_eq!(
        plan(&core(2), Outcome::Retry.into(), &c, now()).to_string(),
        "no ack on Core NATS (AckError::Unsupported, debug), copy to orders.new (x-ruststream-retry-count: 2)"
    );
}
