//! Property tests of the planner, the header rules and the delay queue.

#![allow(clippy::disallowed_methods)] // tests read the clock once to get a base instant

use std::num::NonZeroU32;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use proptest::prelude::*;
use ruststream_settlement::{
    AckReply, Action, DROPPED_DIRECTIVE_PREFIXES, DROPPED_DIRECTIVES, DeadLetterReason, DelayQueue,
    Delivery, Disposition, Event, Headers, Message, MountDeclaration, MountPolicy, Outcome,
    Provenance, RETRY_COUNT_HEADER, RetryCount, RetryCountReading, Settlement, Subject, plan,
    plan_with_clock, retry_in_place,
};

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        (0u64..10_000).prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        Just(Duration::MAX),
    ]
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(Outcome::Ack),
        Just(Outcome::Retry),
        duration().prop_map(Outcome::RetryAfter),
        Just(Outcome::Drop),
        Just(Outcome::None),
        Just(Outcome::Reject),
    ]
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        Just(Event::Arrived),
        outcome().prop_map(Event::Handled),
        Just(Event::Undecodable),
        Just(Event::PublishFailed),
    ]
}

fn policy() -> impl Strategy<Value = MountPolicy> {
    let descriptor = prop_oneof![
        Just(MountDeclaration::core_subject("m", "orders.new")),
        Just(MountDeclaration::core_wildcard(
            "m",
            "orders.*",
            Some("orders.retry")
        )),
        Just(MountDeclaration::core_wildcard(
            "m",
            "orders.*",
            Some("retry.orders")
        )),
        Just(MountDeclaration::jetstream("m", "ORDERS", "worker")),
    ];
    let limit = prop_oneof![
        Just(None),
        (1u32..12).prop_map(Some),
        any::<NonZeroU32>().prop_map(|n| Some(n.get()))
    ];
    (descriptor, limit, any::<bool>(), duration()).prop_map(|(d, limit, dlq, delay)| {
        let d = d.dead_letter_retry_delay(delay);
        let d = match limit {
            Some(n) => d.max_attempts(n),
            None => d,
        };
        let d = if dlq && limit.is_some() {
            d.dead_letter("dlq.orders")
        } else {
            d
        };
        d.validate().expect("generated declarations are valid")
    })
}

fn reading() -> impl Strategy<Value = RetryCountReading> {
    let count = prop_oneof![
        Just(None),
        (0u64..20).prop_map(|n| Some(RetryCount(n))),
        any::<u64>().prop_map(|n| Some(RetryCount(n)))
    ];
    (count, prop_oneof![Just(0u32), 1u32..4])
        .prop_map(|(count, ignored)| RetryCountReading { count, ignored })
}

fn delivered() -> impl Strategy<Value = u64> {
    prop_oneof![1u64..20, 1u64..=u64::MAX]
}

/// A delivery; JetStream deliveries borrow their stream and consumer names from statics.
fn delivery() -> impl Strategy<Value = Delivery<'static>> {
    prop_oneof![
        reading().prop_map(|r| Delivery::core("orders.new", r)),
        delivered().prop_map(|delivered| Delivery::jetstream(
            "orders.new",
            AckReply {
                domain: None,
                account_hash: None,
                stream: "ORDERS",
                consumer: "worker",
                delivered,
                stream_sequence: 1,
                consumer_sequence: 1,
                timestamp: 0,
                pending: 0,
                trailer: None,
            }
        )),
    ]
}

fn now() -> impl Strategy<Value = Instant> {
    (0u64..10_000_000).prop_map(|ms| base() + Duration::from_millis(ms))
}

fn is_publish(a: &Action<'_>) -> bool {
    matches!(
        a,
        Action::PublishCopy { .. } | Action::PublishDeadLetter { .. }
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Rule 24's strict order: a delivery runs again in place exactly when the plan of its
    /// outcome would have sent it back to NATS below the limit (`-NAK`, or a Core copy), and
    /// after the delay that plan would have asked for; each run in place counts as an attempt.
    #[test]
    fn a_retry_runs_again_in_place_exactly_where_it_would_go_back_below_the_limit(
        d in delivery(),
        outcome in outcome(),
        policy in policy(),
        runs in 0u64..30,
        now in now(),
    ) {
        // A Core delivery on a JetStream mount (an adapter bug) is not a case of rule 24.
        if matches!(policy.descriptor(), ruststream_settlement::Descriptor::JetStream { .. })
            != matches!(d.model, ruststream_settlement::Model::JetStream(_))
        {
            return Ok(());
        }
        let d = d.after_runs_in_place(runs);
        let in_place = retry_in_place(&d, outcome, &policy);
        let planned = plan(&d, Event::Handled(outcome), &policy, now);
        let goes_back = matches!(planned.disposition(), Disposition::Retried | Disposition::Delayed | Disposition::Unsupported);
        let below = policy.max_attempts().is_none_or(|max| d.attempt().get() < u64::from(max.get()));
        let retry = matches!(outcome, Outcome::Retry | Outcome::RetryAfter(_));
        prop_assert_eq!(in_place.is_some(), retry && below, "{:?} {:?}", planned, in_place);
        if in_place.is_some() {
            prop_assert!(goes_back, "in place only where the plan goes back: {planned:?}");
        }
        match (in_place, planned.settlement()) {
            // The wire clamps a delay (rule 12); in place it is kept as it is.
            (Some(delay), Some(Settlement::NakWithDelay(nak))) => {
                prop_assert_eq!(delay.min(ruststream_settlement::MAX_NAK_DELAY), nak)
            }
            (Some(delay), Some(Settlement::Nak)) => prop_assert!(delay.is_zero()),
            _ => {}
        }
        prop_assert_eq!(d.after_runs_in_place(0).attempt().get().saturating_add(runs), d.attempt().get());
    }

    /// Rule 24's strict order ends: runs in place stop at the limit, where the plan of a retry
    /// takes the at-limit path.
    #[test]
    fn runs_in_place_stop_at_the_limit(
        d in delivery(),
        policy in policy(),
        now in now(),
    ) {
        if matches!(policy.descriptor(), ruststream_settlement::Descriptor::JetStream { .. })
            != matches!(d.model, ruststream_settlement::Model::JetStream(_))
        {
            return Ok(());
        }
        // Limits up to 1,000 (the generator also draws huge ones, too many runs to walk).
        let Some(max) = policy.max_attempts().filter(|max| max.get() <= 1_000) else { return Ok(()); };
        let mut runs = 0u64;
        while retry_in_place(&d.after_runs_in_place(runs), Outcome::Retry, &policy).is_some() {
            runs += 1;
            prop_assert!(runs <= u64::from(max.get()), "more runs than attempts");
        }
        let last = d.after_runs_in_place(runs);
        prop_assert!(last.attempt().get() >= u64::from(max.get()));
        let planned = plan(&last, Event::Handled(Outcome::Retry), &policy, now);
        prop_assert!(matches!(planned.disposition(), Disposition::DeadLettered | Disposition::Terminated | Disposition::LetGo), "{:?}", planned);
    }

    /// A copy waiting in the delay queue, packed, is published exactly as the copy built at
    /// once would be: reply subject, headers (names, values, order, repeats), payload.
    #[test]
    fn a_pending_copy_publishes_what_the_copy_would_be(
        pairs in headers(),
        reply in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
        retry_count in 0u64..1_000,
        mount in 0usize..8,
    ) {
        let message = Message {
            reply: reply.map(Bytes::from),
            headers: to_headers(&pairs),
            payload: Bytes::from(payload),
        };
        let subject = Subject::new("orders.retry").expect("valid");
        let pending = ruststream_settlement::PendingCopy::new(mount, &message, RetryCount(retry_count));
        prop_assert_eq!(pending.mount(), mount);
        prop_assert_eq!(
            pending.into_publication(&subject),
            message.copy(&subject, RetryCount(retry_count))
        );
    }

    /// The planner never panics, is deterministic, and keeps the ordering invariants.
    #[test]
    fn plans_are_deterministic_and_ordered(d in delivery(), e in event(), p in policy(), now in now()) {
        let first = plan(&d, e, &p, now);
        let second = plan(&d, e, &p, now);
        prop_assert_eq!(&first, &second);

        let actions = first.actions();
        let settles: Vec<usize> = actions.iter().enumerate()
            .filter(|(_, a)| matches!(a, Action::Settle(_))).map(|(i, _)| i).collect();
        prop_assert!(settles.len() <= 1, "more than one settlement: {:?}", actions);
        if let Some(&i) = settles.first() {
            prop_assert_eq!(i, actions.len() - 1, "settlement not last: {:?}", actions);
            prop_assert!(actions[..i].iter().all(|a| !matches!(a, Action::Settle(_))));
        }
        // Every publish comes before the settlement.
        let last_publish = actions.iter().rposition(is_publish);
        if let (Some(p), Some(&s)) = (last_publish, settles.first()) {
            prop_assert!(p < s);
        }
        // Core deliveries never get a settlement; JetStream ones never get a copy.
        match d.model {
            ruststream_settlement::Model::Core(_) => prop_assert!(settles.is_empty()),
            ruststream_settlement::Model::JetStream(_) => {
                let copies = actions.iter().any(|a| matches!(a, Action::PublishCopy { .. } | Action::ScheduleCopy { .. }));
                prop_assert!(!copies, "copy on JetStream: {:?}", actions);
            }
        }
        // Only an arrival may run the handler.
        prop_assert_eq!(first.runs_handler(), first.disposition() == Disposition::RunHandler);
        if first.runs_handler() {
            prop_assert_eq!(e, Event::Arrived);
            prop_assert!(actions.iter().all(|a| matches!(a, Action::Log(_))));
        }
    }

    /// `plan_with_clock` reads its clock exactly once for a plan that arms a copy and never
    /// otherwise, and plans what `plan` plans at that instant.
    #[test]
    fn the_clock_is_read_only_to_arm_a_copy(d in delivery(), e in event(), p in policy(), now in now()) {
        let reads = std::cell::Cell::new(0u32);
        let lazy = plan_with_clock(&d, e, &p, || {
            reads.set(reads.get() + 1);
            now
        });
        prop_assert_eq!(&lazy, &plan(&d, e, &p, now));
        let arms = lazy.actions().iter().any(|a| matches!(a, Action::ScheduleCopy { .. }));
        prop_assert_eq!(reads.get(), u32::from(arms), "{}", lazy);
    }

    /// A copy published after attempt n carries n; a delayed copy is never due before now.
    #[test]
    fn copies_carry_the_attempt(d in delivery(), o in outcome(), p in policy(), now in now()) {
        let pl = plan(&d, Event::Handled(o), &p, now);
        for a in pl.actions() {
            match *a {
                Action::PublishCopy { retry_count, subject } => {
                    prop_assert_eq!(retry_count, d.attempt().as_retry_count());
                    prop_assert_eq!(Some(subject), p.copy_subject());
                }
                Action::ScheduleCopy { retry_count, subject, at } => {
                    prop_assert_eq!(retry_count, d.attempt().as_retry_count());
                    prop_assert_eq!(Some(subject), p.copy_subject());
                    prop_assert!(at >= now);
                    if let Outcome::RetryAfter(delay) = o
                        && let Some(exact) = now.checked_add(delay)
                    {
                        prop_assert_eq!(at, exact);
                    }
                }
                Action::PublishDeadLetter { subject, .. } => prop_assert_eq!(Some(subject), p.dead_letter()),
                Action::Settle(Settlement::NakWithDelay(delay)) => {
                    prop_assert!(!delay.is_zero() && delay <= ruststream_settlement::MAX_NAK_DELAY);
                }
                Action::Settle(_) | Action::Log(_) => {}
            }
        }
    }
}

/// Header names: the retry-count header and the directives in random letter case, plus
/// ordinary and arbitrary names.
fn header_name() -> impl Strategy<Value = Vec<u8>> {
    let special = prop_oneof![
        Just(RETRY_COUNT_HEADER.to_owned()),
        Just("Nats-Msg-Id".to_owned()),
        proptest::sample::select(DROPPED_DIRECTIVES.to_vec()).prop_map(str::to_owned),
        (
            proptest::sample::select(DROPPED_DIRECTIVE_PREFIXES.to_vec()),
            "[A-Za-z-]{0,8}"
        )
            .prop_map(|(prefix, rest)| format!("{prefix}{rest}")),
    ];
    let cased = (special, any::<u64>()).prop_map(|(name, bits)| {
        name.bytes()
            .enumerate()
            .map(|(i, b)| {
                if bits >> (i % 64) & 1 == 1 {
                    b.to_ascii_uppercase()
                } else {
                    b.to_ascii_lowercase()
                }
            })
            .collect::<Vec<u8>>()
    });
    prop_oneof![
        cased,
        "[A-Za-z-]{1,12}".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..8)
    ]
}

fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        "[0-9]{1,25}".prop_map(String::into_bytes),
        " ?[0-9]{1,3}\t?".prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..12),
    ]
}

fn headers() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>)>> {
    proptest::collection::vec((header_name(), header_value()), 0..10)
}

fn to_headers(pairs: &[(Vec<u8>, Vec<u8>)]) -> Headers {
    pairs
        .iter()
        .map(|(n, v)| (Bytes::copy_from_slice(n), Bytes::copy_from_slice(v)))
        .collect()
}

fn lower(name: &[u8]) -> Vec<u8> {
    name.to_ascii_lowercase()
}

/// The reference of rule 9: a directive, or a name that starts with a directive prefix,
/// compared in lower case.
fn is_directive(name: &[u8]) -> bool {
    let name = lower(name);
    DROPPED_DIRECTIVES
        .iter()
        .any(|d| lower(d.as_bytes()) == name)
        || DROPPED_DIRECTIVE_PREFIXES
            .iter()
            .any(|p| name.starts_with(&lower(p.as_bytes())))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// A dead letter keeps the payload and the headers byte for byte, except rule-9 directives;
    /// a JetStream one ends with the runtime's own `Nats-Msg-Id`, naming the delivery. With
    /// provenance, the delivery's own `Nats-Msg-Id` is kept as `Ruststream-Msg-Id`.
    #[test]
    fn dead_letters_keep_payload_and_headers(
        pairs in headers(),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
        jetstream in any::<bool>(),
        stream_sequence in 1u64..1_000_000,
        provenance in any::<bool>(),
    ) {
        let payload = Bytes::from(payload);
        let message = Message { reply: Some(Bytes::from_static(b"_INBOX.x")), headers: to_headers(&pairs), payload: payload.clone() };
        let dlq = Subject::new("dlq.orders").expect("valid");
        let reply = format!("$JS.ACK.ORDERS.worker.3.{stream_sequence}.9.1700000000000000000.0");
        let delivery = match jetstream {
            true => Delivery::jetstream("orders.new", AckReply::parse(reply.as_bytes()).expect("valid")),
            false => Delivery::core("orders.new", RetryCountReading::default()),
        };
        let origin = Provenance::new("orders", DeadLetterReason::Limit, None);
        let dead = message.dead_letter(&dlq, &delivery, provenance.then_some(&origin));
        prop_assert_eq!(&dead.payload, &payload);
        prop_assert_eq!(dead.payload.as_ptr(), payload.as_ptr(), "payload was copied");
        let mut want: Vec<(Vec<u8>, Vec<u8>)> = pairs.iter().filter(|(n, _)| !is_directive(n)).cloned().collect();
        // Rule 19: provenance is appended after the delivery's own headers, which stay as
        // they were, whatever they hold (even `Ruststream-` names of an earlier dead letter).
        if provenance {
            // The delivery's own `Nats-Msg-Id` (its first value, the one nats-server
            // deduplicates on) goes as `Ruststream-Msg-Id`.
            let own_id = pairs.iter().find(|(n, _)| lower(n) == b"nats-msg-id").map(|(_, v)| &v[..]);
            let mut added = Headers::new();
            origin.append_to(&mut added, &delivery, own_id);
            want.extend(added.iter().map(|(n, v)| (n.to_vec(), v.to_vec())));
        }
        if jetstream {
            want.push((b"Nats-Msg-Id".to_vec(), format!("ruststream.dead-letter.ORDERS.worker.{stream_sequence}.1700000000000000000").into_bytes()));
        }
        let got: Vec<(Vec<u8>, Vec<u8>)> = dead.headers.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
        prop_assert_eq!(got, want);
    }

    /// A copy replaces every retry-count value with the attempt, keeps the rest byte for byte
    /// (directives aside), keeps payload and reply, and reads back as exactly that count.
    #[test]
    fn copies_rewrite_only_the_count(pairs in headers(), n in any::<u64>()) {
        let message = Message { reply: Some(Bytes::from_static(b"_INBOX.r")), headers: to_headers(&pairs), payload: Bytes::from_static(b"{}") };
        let to = Subject::new("orders.retry").expect("valid");
        let copy = message.copy(&to, RetryCount(n));
        prop_assert_eq!(&copy.reply, &message.reply);
        prop_assert_eq!(copy.payload.as_ptr(), message.payload.as_ptr());
        let mut want: Vec<(Vec<u8>, Vec<u8>)> = pairs.iter()
            .filter(|(name, _)| !is_directive(name) && lower(name) != RETRY_COUNT_HEADER.as_bytes())
            .cloned().collect();
        want.push((RETRY_COUNT_HEADER.as_bytes().to_vec(), n.to_string().into_bytes()));
        let got: Vec<(Vec<u8>, Vec<u8>)> = copy.headers.iter().map(|(a, b)| (a.to_vec(), b.to_vec())).collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(RetryCountReading::read(copy.headers.iter()), RetryCountReading { count: Some(RetryCount(n)), ignored: 0 });
    }

    /// Rule 5 against a simple reference: largest valid value wins, invalid ones are counted.
    #[test]
    fn reading_matches_rule_5(pairs in headers()) {
        let mut count: Option<u64> = None;
        let mut ignored = 0u32;
        for (name, value) in &pairs {
            if lower(name) != RETRY_COUNT_HEADER.as_bytes() {
                continue;
            }
            let text = String::from_utf8_lossy(value);
            let trimmed = text.trim_matches(|c: char| c.is_ascii_whitespace());
            if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
                let v = trimmed.parse::<u64>().unwrap_or(u64::MAX); // only overflow fails here
                count = Some(count.map_or(v, |c| c.max(v)));
            } else {
                ignored += 1;
            }
        }
        let r = RetryCountReading::read(pairs.iter().map(|(n, v)| (&n[..], &v[..])));
        prop_assert_eq!(r, RetryCountReading { count: count.map(RetryCount), ignored });
    }

    /// A Core message whose handler retries forever runs at most `max_attempts` times, then is
    /// dead-lettered or let go, whatever its first header said.
    #[test]
    fn core_retries_are_bounded(
        limit in 1u32..12,
        dlq in any::<bool>(),
        wildcard in any::<bool>(),
        first in headers(),
        outcomes in proptest::collection::vec(prop_oneof![Just(Outcome::Retry), (0u64..50).prop_map(|ms| Outcome::RetryAfter(Duration::from_millis(ms)))], 1..4),
    ) {
        let d = if wildcard {
            MountDeclaration::core_wildcard("m", "orders.*", Some("orders.retry"))
        } else {
            MountDeclaration::core_subject("m", "orders.new")
        };
        let d = d.max_attempts(limit);
        let p = if dlq { d.dead_letter("dlq.orders") } else { d }.validate().expect("valid");
        let mut message = Message { reply: None, headers: to_headers(&first), payload: Bytes::from_static(b"x") };
        let mut runs = 0u32;
        let now = base();
        let end = loop {
            let delivery = Delivery::core("orders.new", RetryCountReading::read(message.headers.iter()));
            let arrival = plan(&delivery, Event::Arrived, &p, now);
            if !arrival.runs_handler() {
                break arrival.disposition();
            }
            runs += 1;
            prop_assert!(runs <= limit, "handler ran {} times with max_attempts {}", runs, limit);
            let outcome = outcomes[runs as usize % outcomes.len()];
            let pl = plan(&delivery, Event::Handled(outcome), &p, now);
            let next = pl.actions().iter().find_map(|a| match *a {
                Action::PublishCopy { subject, retry_count } | Action::ScheduleCopy { subject, retry_count, .. } => {
                    Some(message.copy(subject, retry_count))
                }
                _ => None,
            });
            match next {
                Some(copy) => message = Message { reply: copy.reply, headers: copy.headers, payload: copy.payload },
                None => break pl.disposition(),
            }
        };
        let want = if dlq { Disposition::DeadLettered } else { Disposition::LetGo };
        prop_assert_eq!(end, want);
    }

    /// The delay queue returns every item exactly once, never before its deadline, in deadline
    /// order (ties in insertion order).
    #[test]
    fn delay_queue_releases_each_item_once_in_order(
        ops in proptest::collection::vec(prop_oneof![
            (0u64..1_000).prop_map(Some),   // insert with this deadline offset (ms)
            Just(None),                      // advance the clock and poll
        ], 0..200),
        steps in proptest::collection::vec(0u64..100, 1..20),
    ) {
        let t0 = base();
        let mut q = DelayQueue::new();
        let mut deadlines = Vec::new();
        let mut released = Vec::new();
        let mut now_ms = 0u64;
        let mut step = steps.iter().cycle();
        for op in ops {
            match op {
                Some(offset) => {
                    let at_ms = now_ms + offset;
                    q.handle_copy(deadlines.len(), t0 + Duration::from_millis(at_ms));
                    deadlines.push(at_ms);
                }
                None => {
                    now_ms += step.next().copied().unwrap_or(1);
                    let now = t0 + Duration::from_millis(now_ms);
                    let batch: Vec<usize> = q.handle_timeout(now).collect();
                    for w in batch.windows(2) {
                        prop_assert!((deadlines[w[0]], w[0]) < (deadlines[w[1]], w[1]), "out of order: {:?}", w);
                    }
                    for &id in &batch {
                        prop_assert!(deadlines[id] <= now_ms, "released before its deadline");
                    }
                    if let Some(next) = q.poll_timeout() {
                        prop_assert!(next > now, "a due item was left behind");
                    }
                    released.extend(batch);
                }
            }
        }
        let far = t0 + Duration::from_secs(3600);
        released.extend(q.handle_timeout(far));
        prop_assert!(q.is_empty());
        released.sort_unstable();
        prop_assert_eq!(released, (0..deadlines.len()).collect::<Vec<_>>());
    }
}
