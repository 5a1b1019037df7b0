//! Batches (rule 23): each member of a batch is settled as a single delivery with its outcome
//! would be; a member past its limit or undecodable never joins a batch; leases, the time
//! limit, `max_wait` and shutdown apply to batches.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use adapter::Batch;

use super::common::*;

/// The batches a handler ran: each a list of (attempt, payload), in the batch's order.
type Batches = Arc<Mutex<Vec<Vec<(u64, String)>>>>;

fn batches() -> Batches {
    Arc::new(Mutex::new(Vec::new()))
}

fn ran(b: &Batches) -> Vec<Vec<(u64, String)>> {
    b.lock().unwrap().clone()
}

/// A member's outcome from its payload: `ack`, `nak` (retry), `term` (drop), `delay`
/// (`retry_after` 50 ms), `reject`, `none`; every other payload acks.
fn outcome_of(payload: &str) -> Outcome {
    match payload {
        "nak" => Outcome::Retry,
        "term" => Outcome::Drop,
        "delay" => Outcome::RetryAfter(Duration::from_millis(50)),
        "reject" => Outcome::Reject,
        "none" => Outcome::None,
        _ => Outcome::Ack,
    }
}

type BatchFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Vec<Outcome>> + Send>>;

/// A batch handler that records each batch, sleeps `sleep(first member's attempt)`, then
/// gives each member `outcome(attempt, payload)`.
fn per_member(
    b: &Batches,
    sleep: impl Fn(u64) -> Duration + Send + Sync + 'static,
    outcome: impl Fn(u64, &str) -> Outcome + Send + Sync + 'static,
) -> impl Fn(Batch) -> BatchFuture + Send + Sync + 'static {
    let b = b.clone();
    let (sleep, outcome) = (Arc::new(sleep), Arc::new(outcome));
    move |batch: Batch| {
        let members: Vec<(u64, String)> = batch
            .iter()
            .map(|m| {
                (
                    m.delivery.attempt.get(),
                    String::from_utf8_lossy(&m.value).into_owned(),
                )
            })
            .collect();
        b.lock().unwrap().push(members.clone());
        let (sleep, outcome) = (sleep.clone(), outcome.clone());
        Box::pin(async move {
            let first = members.first().map_or(1, |m| m.0);
            tokio::time::sleep(sleep(first)).await;
            members.iter().map(|(a, p)| outcome(*a, p)).collect()
        })
    }
}

/// The ack payloads seen on the wire, by the stream sequence of the delivery each settled
/// (read from the 9-token ack reply subject that the scenarios' servers send).
fn acks_by_sequence(wire: &Wire) -> BTreeMap<u64, Vec<String>> {
    let mut by = BTreeMap::<u64, Vec<String>>::new();
    for seen in wire.all() {
        let tokens: Vec<&str> = seen.subject.split('.').collect();
        assert_eq!(tokens.len(), 9, "an ack reply subject: {}", seen.subject);
        let sequence = tokens[5].parse().expect("a stream sequence");
        by.entry(sequence)
            .or_default()
            .push(String::from_utf8_lossy(&seen.payload).into_owned());
    }
    by
}

/// [`acks_by_sequence`] without the `+WPI` renewals, which members waiting for their batch
/// (or a batch that runs long) are sent as single deliveries are (rule 16): the settlements.
fn settlements_by_sequence(wire: &Wire) -> BTreeMap<u64, Vec<String>> {
    acks_by_sequence(wire)
        .into_iter()
        .map(|(s, p)| (s, p.into_iter().filter(|p| p != "+WPI").collect()))
        .collect()
}

/// Waits until the last ack payload of each stream sequence from 1 to `n` is `+ACK`.
async fn last_acked(acks: &Wire, n: u64) {
    eventually(&format!("{n} +ACKs"), || {
        let by = acks_by_sequence(acks);
        (1..=n)
            .all(|s| {
                by.get(&s)
                    .and_then(|p| p.last())
                    .is_some_and(|p| p == "+ACK")
            })
            .then_some(())
    })
    .await;
}

/// Waits until every stream sequence of `expected` has seen exactly its settlements (`+WPI`
/// aside: see [`settlements_by_sequence`]), then asserts the whole map.
async fn assert_acks_by_sequence(wire: &Wire, expected: &[(u64, &[&str])]) {
    let want: BTreeMap<u64, Vec<String>> = expected
        .iter()
        .map(|(s, p)| (*s, p.iter().map(|p| (*p).to_owned()).collect()))
        .collect();
    eventually("every settlement", || {
        (settlements_by_sequence(wire)
            .values()
            .map(Vec::len)
            .sum::<usize>()
            >= want.values().map(Vec::len).sum())
        .then_some(())
    })
    .await;
    quiet(200).await;
    assert_eq!(
        settlements_by_sequence(wire),
        want,
        "settlements by stream sequence"
    );
}

async fn publish_all(tc: &TestClient, payloads: &[&'static [u8]]) {
    for p in payloads {
        tc.js_publish("orders.new", HeaderMap::new(), p).await;
    }
}

#[test]
fn rule_23_a_batch_of_mixed_outcomes_settles_each_member_by_its_own() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        let b = batches();
        publish_all(&tc, &[b"ack", b"nak", b"term", b"delay", b"reject"]).await;
        let app = start(&server, &ev, |a| {
            a.mount_batch(
                js_mount("batch-mixed")
                    .max_attempts(3)
                    .dead_letter("dlq.mixed")
                    .batch(5, Duration::from_millis(300)),
                per_member(
                    &b,
                    |_| Duration::ZERO,
                    |attempt, p| {
                        if attempt > 1 {
                            Outcome::Ack
                        } else {
                            outcome_of(p)
                        }
                    },
                ),
            )
        })
        .await;
        assert_acks_by_sequence(
            &acks,
            &[
                (1, &["+ACK"]),
                (2, &["-NAK", "+ACK"]),
                (3, &["+TERM"]),
                (4, &["-NAK {\"delay\": 50000000}", "+ACK"]),
                (5, &["+TERM"]),
            ],
        )
        .await;
        let all = ran(&b);
        assert_eq!(
            all[0],
            [
                (1, "ack".to_owned()),
                (1, "nak".to_owned()),
                (1, "term".to_owned()),
                (1, "delay".to_owned()),
                (1, "reject".to_owned())
            ],
            "one full batch first: {all:?}"
        );
        let again: Vec<(u64, String)> = all[1..].concat();
        assert_eq!(again.len(), 2, "the two retried members ran again: {all:?}");
        assert!(again.iter().all(|(attempt, _)| *attempt == 2), "{all:?}");
        assert_dead_letters(&tc, "DLQ", &[("dlq.mixed", b"reject")]).await;
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        assert_eq!(
            ruststream_tests::metrics::histogram(
                "ruststream_batch_size",
                &[("mount", "batch-mixed")]
            )
            .first()
            .copied(),
            Some(5.0)
        );
        assert_eq!(
            ruststream_tests::metrics::counter(
                "messaging.client.consumed.messages",
                &[("mount", "batch-mixed")]
            ),
            7,
            "metrics count members"
        );
        app.shutdown().await;
    });
}

#[test]
fn rule_23_one_outcome_for_the_batch_applies_to_each_member() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        publish_all(&tc, &[b"a", b"b", b"c"]).await;
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let seen = sizes.clone();
        let app = start(&server, &ev, |a| {
            a.mount_batch(
                js_mount("batch-one").batch(3, Duration::from_secs(2)),
                move |batch: Batch| {
                    seen.lock().unwrap().push(batch.len());
                    async { Outcome::Drop }
                },
            )
        })
        .await;
        assert_acks_by_sequence(&acks, &[(1, &["+TERM"]), (2, &["+TERM"]), (3, &["+TERM"])]).await;
        assert_eq!(*sizes.lock().unwrap(), [3]);
        assert_eq!(dispositions(&ev), [Disposition::Dropped; 3]);
        app.shutdown().await;
    });
}

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[test]
fn rule_23_an_undecodable_member_takes_its_own_path_and_the_batch_goes_on() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        publish_all(&tc, &[b"{\"id\":1}", b"not json", b"{\"id\":3}"]).await;
        let ids = Arc::new(Mutex::new(Vec::new()));
        let seen = ids.clone();
        let app = start(&server, &ev, |a| {
            a.mount_json_batch(
                js_mount("batch-json")
                    .max_attempts(3)
                    .dead_letter("dlq.json")
                    .batch(3, Duration::from_millis(300)),
                move |batch: Batch<Order>| {
                    seen.lock()
                        .unwrap()
                        .push(batch.values().map(|o| o.id).collect::<Vec<_>>());
                    async { Outcome::Ack }
                },
            )
        })
        .await;
        assert_acks_by_sequence(&acks, &[(1, &["+ACK"]), (2, &["+TERM"]), (3, &["+ACK"])]).await;
        assert_eq!(
            *ids.lock().unwrap(),
            [vec![1, 3]],
            "the bad member never joins"
        );
        assert_dead_letters(&tc, "DLQ", &[("dlq.json", b"not json")]).await;
        let undecodable: Vec<bool> = ev.lock().unwrap().iter().map(|s| s.undecodable).collect();
        assert_eq!(undecodable.iter().filter(|u| **u).count(), 1);
        app.shutdown().await;
    });
}

#[test]
fn rule_23_a_member_at_its_limit_is_dead_lettered_alone() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        let b = batches();
        publish_all(&tc, &[b"ok", b"nak"]).await;
        let app = start(&server, &ev, |a| {
            a.mount_batch(
                js_mount("batch-limit")
                    .max_attempts(1)
                    .dead_letter("dlq.limit")
                    .provenance()
                    .batch(2, Duration::from_secs(2)),
                per_member(&b, |_| Duration::ZERO, |_, p| outcome_of(p)),
            )
        })
        .await;
        assert_acks_by_sequence(&acks, &[(1, &["+ACK"]), (2, &["+TERM"])]).await;
        let stored = assert_dead_letters(&tc, "DLQ", &[("dlq.limit", b"nak")]).await;
        assert!(
            stored[0]
                .1
                .iter()
                .any(|(n, v)| n == "Ruststream-Reason" && v == "limit"),
            "{:?}",
            stored[0].1
        );
        assert!(
            stored[0]
                .1
                .iter()
                .any(|(n, v)| n == "Ruststream-Stream-Sequence" && v == "2"),
            "{:?}",
            stored[0].1
        );
        assert_eq!(ran(&b).len(), 1);
        app.shutdown().await;
    });
}

#[test]
fn rule_23_a_member_past_its_limit_never_joins_a_batch() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        let b = batches();
        // `none` twice: the server redelivers it after ack_wait; its third delivery is past
        // max_attempts 2 and is dead-lettered without running (rule 3).
        let app = start(&server, &ev, |a| {
            a.mount_batch(
                js_mount("batch-past")
                    .max_attempts(2)
                    .dead_letter("dlq.past")
                    .batch(4, Duration::from_millis(100)),
                per_member(&b, |_| Duration::ZERO, |_, p| outcome_of(p)),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"none").await;
        assert_dead_letters(&tc, "DLQ", &[("dlq.past", b"none")]).await;
        tc.js_publish("orders.new", HeaderMap::new(), b"after")
            .await;
        eventually("the later member acked", || {
            acks_by_sequence(&acks)
                .get(&2)
                .is_some_and(|p| p == &["+ACK"])
                .then_some(())
        })
        .await;
        let all = ran(&b);
        let runs_of_none: Vec<u64> = all
            .iter()
            .flatten()
            .filter(|(_, p)| p == "none")
            .map(|(a, _)| *a)
            .collect();
        assert_eq!(runs_of_none, [1, 2], "never run past the limit: {all:?}");
        assert_eq!(
            acks_by_sequence(&acks).get(&1).cloned(),
            Some(vec!["+TERM".to_owned()])
        );
        let past = ev
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.stream_sequence == Some(1) && !s.handler_ran)
            .count();
        assert_eq!(past, 1);
        app.shutdown().await;
    });
}

#[test]
fn rule_23_a_batch_slower_than_ack_wait_runs_once_with_renewals() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        let b = batches();
        publish_all(&tc, &[b"slow-1", b"slow-2"]).await;
        let app = start(&server, &ev, |a| {
            a.mount_batch(
                js_mount("batch-slow").batch(2, Duration::from_secs(2)),
                per_member(&b, |_| Duration::from_millis(2_100), |_, _| Outcome::Ack),
            )
        })
        .await;
        last_acked(&acks, 2).await;
        quiet(1_000).await;
        for (sequence, payloads) in acks_by_sequence(&acks) {
            assert!(
                payloads.len() >= 3
                    && payloads[..payloads.len() - 1].iter().all(|p| p == "+WPI")
                    && payloads.last().is_some_and(|p| p == "+ACK"),
                "renewals, then the ack, for {sequence}: {payloads:?}"
            );
        }
        assert_eq!(ran(&b).len(), 1, "the batch ran once");
        let info = eventually_info(&tc, |i| i.num_ack_pending == 0).await;
        assert_eq!(info.num_redelivered, 0, "{info:?}");
        app.shutdown().await;
    });
}

#[test]
fn rule_23_max_wait_flushes_a_partial_batch() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        let b = batches();
        let app = start(&server, &ev, |a| {
            a.mount_batch(
                js_mount("batch-wait").batch(10, Duration::from_millis(300)),
                per_member(&b, |_| Duration::ZERO, |_, _| Outcome::Ack),
            )
        })
        .await;
        let published = Instant::now();
        publish_all(&tc, &[b"1", b"2", b"3"]).await;
        assert_acks_by_sequence(&acks, &[(1, &["+ACK"]), (2, &["+ACK"]), (3, &["+ACK"])]).await;
        let first_ack = acks.all()[0].at;
        assert!(
            first_ack.duration_since(published) >= Duration::from_millis(250),
            "the batch waited for more: {:?}",
            first_ack.duration_since(published)
        );
        let all = ran(&b);
        assert_eq!(all.len(), 1, "{all:?}");
        assert_eq!(all[0].len(), 3, "{all:?}");
        app.shutdown().await;
    });
}

#[test]
fn rule_23_the_time_limit_applies_to_the_batch() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        let b = batches();
        publish_all(&tc, &[b"1", b"2"]).await;
        let app = start(&server, &ev, |a| {
            a.mount_batch(
                js_mount("batch-limit-time")
                    .handler_time_limit(Duration::from_millis(300))
                    .batch(2, Duration::from_secs(2)),
                per_member(
                    &b,
                    |attempt| Duration::from_secs(if attempt == 1 { 3_600 } else { 0 }),
                    |_, _| Outcome::Ack,
                ),
            )
        })
        .await;
        logged(&["mount=batch-limit-time", "batch handler time limit reached"]).await;
        // No outcome: the server delivers both again after ack_wait, and the second batch acks.
        last_acked(&acks, 2).await;
        let all = ran(&b);
        assert_eq!(all.len(), 2, "{all:?}");
        assert!(all[1].iter().all(|(attempt, _)| *attempt == 2), "{all:?}");
        app.shutdown().await;
    });
}

#[test]
fn rule_23_a_per_member_list_of_the_wrong_length_retries_every_member() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        publish_all(&tc, &[b"1", b"2"]).await;
        let app = start(&server, &ev, |a| {
            a.mount_batch(
                js_mount("batch-wrong")
                    .max_attempts(5)
                    .batch(2, Duration::from_secs(2)),
                |batch: Batch| async move {
                    if batch.iter().all(|m| m.delivery.attempt.get() == 1) {
                        vec![Outcome::Ack]
                    } else {
                        vec![Outcome::Ack; batch.len()]
                    }
                },
            )
        })
        .await;
        logged(&["mount=batch-wrong", "wrong length"]).await;
        assert_acks_by_sequence(&acks, &[(1, &["-NAK", "+ACK"]), (2, &["-NAK", "+ACK"])]).await;
        app.shutdown().await;
    });
}

#[test]
fn rule_23_a_batch_in_flight_at_shutdown_is_waited_for_and_settled() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        let b = batches();
        publish_all(&tc, &[b"1", b"2", b"3"]).await;
        let app = start(&server, &ev, |a| {
            a.mount_batch(
                js_mount("batch-stop").batch(3, Duration::from_secs(2)),
                per_member(&b, |_| Duration::from_millis(800), |_, _| Outcome::Ack),
            )
        })
        .await;
        eventually("the batch running", || (!ran(&b).is_empty()).then_some(())).await;
        app.shutdown().await;
        assert_acks_by_sequence(&acks, &[(1, &["+ACK"]), (2, &["+ACK"]), (3, &["+ACK"])]).await;
        assert_eq!(dispositions(&ev), [Disposition::Acked; 3]);
    });
}

#[test]
fn rule_23_an_open_batch_closes_when_shutdown_begins() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        let b = batches();
        publish_all(&tc, &[b"1", b"2"]).await;
        let app = start(&server, &ev, |a| {
            a.mount_batch(
                js_mount("batch-open").batch(10, Duration::from_secs(3_600)),
                per_member(&b, |_| Duration::ZERO, |_, _| Outcome::Ack),
            )
        })
        .await;
        eventually("both members received", || {
            (ruststream_tests::metrics::counter(
                "messaging.client.consumed.messages",
                &[("mount", "batch-open")],
            ) == 2)
                .then_some(())
        })
        .await;
        assert!(ran(&b).is_empty(), "the batch waits for more");
        app.shutdown().await;
        assert_acks_by_sequence(&acks, &[(1, &["+ACK"]), (2, &["+ACK"])]).await;
        assert_eq!(ran(&b).len(), 1);
    });
}

#[test]
fn rule_23_core_members_each_get_their_own_copy_and_dead_letter() {
    run(async {
        let (server, tc, _, ev) = core_case().await;
        let copies = Wire::watch(&tc.client, "pay.copies").await;
        let dead = Wire::watch(&tc.client, "pay.dead").await;
        let b = batches();
        let app = start(&server, &ev, |a| {
            a.mount_batch(
                Mount::core_wildcard("core-batch", "pay.in.*", "pay.copies")
                    .max_attempts(2)
                    .dead_letter("pay.dead")
                    .batch(3, Duration::from_millis(200)),
                per_member(&b, |_| Duration::ZERO, |_, p| outcome_of(p)),
            )
        })
        .await;
        for (subject, payload) in [
            ("pay.in.a", &b"ack"[..]),
            ("pay.in.b", b"nak"),
            ("pay.in.c", b"reject"),
        ] {
            tc.client
                .publish(subject.to_owned(), bytes::Bytes::from_static(payload))
                .await
                .unwrap();
        }
        tc.client.flush().await.unwrap();
        // `nak` below the limit: one copy with its count; its second attempt (the copy) is at
        // the limit and is dead-lettered, as `reject` is at once.
        assert_copies(&copies, &[("pay.copies", "nak", "1")]).await;
        let seen = dead.at_least(2).await;
        let mut dead_payloads: Vec<String> = seen
            .iter()
            .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
            .collect();
        dead_payloads.sort();
        assert_eq!(dead_payloads, ["nak", "reject"]);
        let all = ran(&b);
        assert_eq!(all[0].len(), 3, "one batch of three first: {all:?}");
        assert_eq!(all.concat().len(), 4, "the copy ran once more: {all:?}");
        app.shutdown().await;
    });
}

#[test]
fn rule_23_start_up_refuses_a_batch_declared_on_one_side_only() {
    run(async {
        let (server, _tc, _, _) = core_case().await;
        let err = start_err(&server, |a| {
            a.mount(
                Mount::core_subject("single", "s.one").batch(10, Duration::from_millis(50)),
                |_d: Delivery| async { Outcome::Ack },
            )
        })
        .await;
        assert!(
            matches!(&err, StartError::Setting { mount, reason } if mount == "single" && reason.contains("mount_batch")),
            "{err}"
        );
        let err = start_err(&server, |a| {
            a.mount_batch(Mount::core_subject("no-size", "s.two"), |_b: Batch| async {
                Outcome::Ack
            })
        })
        .await;
        assert!(
            matches!(&err, StartError::Setting { mount, reason } if mount == "no-size" && reason.contains("Mount::batch")),
            "{err}"
        );
        let err = start_err(&server, |a| {
            a.mount_batch(
                Mount::core_subject("zero", "s.three").batch(0, Duration::ZERO),
                |_b: Batch| async { Outcome::Ack },
            )
        })
        .await;
        assert!(
            matches!(&err, StartError::Setting { mount, reason } if mount == "zero" && reason.contains("max is 0")),
            "{err}"
        );
    });
}

#[test]
fn rule_23_start_up_warns_of_a_batch_max_above_max_ack_pending() {
    run(async {
        let (server, tc, _acks, _, ev) = js_case().await;
        tc.js
            .get_stream("ORDERS")
            .await
            .unwrap()
            .create_consumer(adapter::async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("worker".into()),
                ack_policy: adapter::async_nats::jetstream::consumer::AckPolicy::Explicit,
                max_ack_pending: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        let app = start(&server, &ev, |a| {
            a.mount_batch(
                Mount::jetstream("batch-too-big", "ORDERS", "worker")
                    .batch(20, Duration::from_millis(50)),
                |_b: Batch| async { Outcome::Ack },
            )
        })
        .await;
        logged(&[
            "mount=batch-too-big",
            "above the consumer's max_ack_pending",
        ])
        .await;
        app.shutdown().await;
    });
}

/// A batch that awaits past the grace period is given up on by the shutdown, as a single
/// handler is, and runs on to its end after the app has stopped (its members' results are not
/// sent). Its time limit was once timed on the app's NATS thread, where its first poll ran:
/// that thread's runtime ended with the app, and the limit's timer panicked the run at its
/// next poll ("A Tokio 1.x context was found, but it is being shutdown"), cutting the
/// application's function off mid-way.
#[test]
fn rule_23_a_batch_the_shutdown_gives_up_on_runs_on_to_its_end() {
    run(async {
        let (server, tc, _acks, _, ev) = js_case().await;
        publish_all(&tc, &[b"1", b"2"]).await;
        let (started, finished) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (began, done) = (started.clone(), finished.clone());
        let wake_it: Arc<Mutex<Option<tokio::sync::oneshot::Sender<()>>>> = Arc::default();
        let waker = wake_it.clone();
        let app = start(&server, &ev, |a| {
            a.grace_period(Duration::from_millis(200)).mount_batch(
                js_mount("batch-given-up").batch(2, Duration::from_secs(2)),
                move |batch: Batch| {
                    let (began, done) = (began.clone(), done.clone());
                    // Woken by the test once the app has stopped, not by a timer of either
                    // runtime: the batch awaits past its first poll, and only the runtime's
                    // own timers (its time limit's) are under test.
                    let (wake, woken) = tokio::sync::oneshot::channel::<()>();
                    *waker.lock().unwrap() = Some(wake);
                    async move {
                        began.store(true, Ordering::SeqCst);
                        let _ = woken.await;
                        done.store(true, Ordering::SeqCst);
                        vec![Outcome::Ack; batch.len()]
                    }
                },
            )
        })
        .await;
        eventually("the batch runs", || {
            started.load(Ordering::SeqCst).then_some(())
        })
        .await;
        let report = app.shutdown().await;
        assert_eq!(report.abandoned.len(), 1, "{report:?}");
        // The app's threads end just after `shutdown` returns.
        quiet(500).await;
        let wake = wake_it.lock().unwrap().take().expect("the batch ran");
        wake.send(()).expect("the batch still waits");
        eventually("the batch ran on to its end", || {
            finished.load(Ordering::SeqCst).then_some(())
        })
        .await;
    });
}
