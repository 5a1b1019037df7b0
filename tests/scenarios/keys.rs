//! Order per key (rule 24): deliveries of one key never run at once and start in the order
//! they arrived; different keys run concurrently; a retried delivery goes back to NATS and
//! its key goes on; batches never hold two deliveries of one key.

use adapter::{Batch, Key};

use super::common::*;

/// One handler run: (key, payload, start, end).
pub(crate) type Spans = Arc<Mutex<Vec<(String, String, Instant, Instant)>>>;

pub(crate) fn spans() -> Spans {
    Arc::new(Mutex::new(Vec::new()))
}

/// A handler that records each run's span, sleeps `sleep(payload)` and then returns
/// `outcome(attempt, payload)`; the key is the subject's token 1.
pub(crate) fn timed(
    spans: &Spans,
    sleep: impl Fn(&str) -> Duration + Send + Sync + 'static,
    outcome: impl Fn(u64, &str) -> Outcome + Send + Sync + 'static,
) -> impl Fn(Delivery) -> std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send>>
+ Send
+ Sync
+ 'static {
    let spans = spans.clone();
    let (sleep, outcome) = (Arc::new(sleep), Arc::new(outcome));
    move |d: Delivery| {
        let spans = spans.clone();
        let (sleep, outcome) = (sleep.clone(), outcome.clone());
        Box::pin(async move {
            let start = Instant::now();
            let key = d.subject.split('.').nth(1).unwrap_or_default().to_owned();
            let payload = String::from_utf8_lossy(&d.payload).into_owned();
            tokio::time::sleep(sleep(&payload)).await;
            spans
                .lock()
                .unwrap()
                .push((key, payload.clone(), start, Instant::now()));
            outcome(d.attempt.get(), &payload)
        })
    }
}

/// Asserts that no two runs of one key overlapped, and that each key's runs started in
/// `order` (the payloads of each key, in the order they were published). Returns whether runs
/// of different keys overlapped.
pub(crate) fn assert_one_at_a_time(spans: &Spans, order: &[(&str, &[&str])]) -> bool {
    let all = spans.lock().unwrap().clone();
    for (key, payloads) in order {
        let mut runs: Vec<_> = all.iter().filter(|r| r.0 == *key).collect();
        runs.sort_by_key(|r| r.2);
        let started: Vec<&str> = runs.iter().map(|r| r.1.as_str()).collect();
        assert_eq!(&started, payloads, "key {key} started in arrival order");
        for pair in runs.windows(2) {
            assert!(
                pair[1].2 >= pair[0].3,
                "two runs of key {key} overlapped: {:?} and {:?}",
                pair[0].1,
                pair[1].1
            );
        }
    }
    all.iter()
        .any(|a| all.iter().any(|b| a.0 != b.0 && a.2 < b.3 && b.2 < a.3))
}

/// Waits until `wire` has seen `expected` settlements (`+WPI` renewals aside: a delivery
/// waiting for its key is renewed, rule 16), then asserts they are exactly those.
async fn assert_settled(wire: &Wire, expected: &[&str]) {
    let settlements = || -> Vec<String> {
        wire.payloads()
            .into_iter()
            .filter(|p| p != "+WPI")
            .collect()
    };
    eventually("the settlements", || {
        (settlements().len() >= expected.len()).then_some(())
    })
    .await;
    quiet(200).await;
    assert_eq!(settlements(), expected, "settlements on the wire");
}

#[test]
fn rule_24_two_keys_interleaved_run_one_at_a_time_in_arrival_order() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        let s = spans();
        publish_keyed(
            &tc,
            &[
                ("orders.a.1", b"a1"),
                ("orders.b.1", b"b1"),
                ("orders.a.2", b"a2"),
                ("orders.b.2", b"b2"),
                ("orders.a.3", b"a3"),
                ("orders.b.3", b"b3"),
            ],
        )
        .await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("keyed").key(Key::subject_token(1)),
                timed(&s, |_| Duration::from_millis(150), |_, _| Outcome::Ack),
            )
        })
        .await;
        assert_settled(&acks, &["+ACK"; 6]).await;
        let concurrent = assert_one_at_a_time(
            &s,
            &[("a", &["a1", "a2", "a3"]), ("b", &["b1", "b2", "b3"])],
        );
        assert!(concurrent, "different keys run at once");
        app.shutdown().await;
    });
}

#[test]
fn rule_24_deliveries_without_a_key_are_not_ordered() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        let s = spans();
        let mut h = HeaderMap::new();
        h.insert("Account", "1");
        tc.js_publish("orders.x.1", h.clone(), b"keyed-1").await;
        tc.js_publish("orders.x.2", h, b"keyed-2").await;
        tc.js_publish("orders.x.3", HeaderMap::new(), b"free-1")
            .await;
        tc.js_publish("orders.x.4", HeaderMap::new(), b"free-2")
            .await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("by-header").key(Key::header("account")),
                timed(&s, |_| Duration::from_millis(200), |_, _| Outcome::Ack),
            )
        })
        .await;
        assert_settled(&acks, &["+ACK"; 4]).await;
        let all = s.lock().unwrap().clone();
        let span = |p: &str| all.iter().find(|r| r.1 == p).cloned().unwrap();
        let (k1, k2) = (span("keyed-1"), span("keyed-2"));
        assert!(k2.2 >= k1.3, "one key, one at a time");
        let (f1, f2) = (span("free-1"), span("free-2"));
        assert!(
            f1.2 < f2.3 && f2.2 < f1.3,
            "no key, no order: they ran at once"
        );
        app.shutdown().await;
    });
}

#[test]
fn rule_24_a_poison_delivery_of_one_key_is_dead_lettered_while_the_others_go_on() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        let s = spans();
        publish_keyed(
            &tc,
            &[
                ("orders.a.1", b"poison"),
                ("orders.b.1", b"b1"),
                ("orders.a.2", b"a2"),
                ("orders.b.2", b"b2"),
            ],
        )
        .await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("keyed-poison")
                    .key(Key::subject_token(1))
                    .max_attempts(2)
                    .dead_letter("dlq.keyed"),
                timed(
                    &s,
                    |_| Duration::from_millis(20),
                    |_, p| {
                        if p == "poison" {
                            Outcome::Retry
                        } else {
                            Outcome::Ack
                        }
                    },
                ),
            )
        })
        .await;
        assert_dead_letters(&tc, "DLQ", &[("dlq.keyed", b"poison")]).await;
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        let all = s.lock().unwrap().clone();
        let order: Vec<&str> = {
            let mut a: Vec<_> = all.iter().filter(|r| r.0 == "a").collect();
            a.sort_by_key(|r| r.2);
            a.iter().map(|r| r.1.as_str()).collect()
        };
        // The default order: the retry went back to the server and came back after a2.
        assert_eq!(order, ["poison", "a2", "poison"], "{all:?}");
        assert_one_at_a_time(&s, &[("b", &["b1", "b2"])]);
        let acked = acks.payloads().iter().filter(|p| *p == "+ACK").count();
        assert_eq!(acked, 3, "{:?}", acks.payloads());
        app.shutdown().await;
    });
}

#[test]
fn rule_24_the_time_limit_counts_from_the_turn_not_the_arrival() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        let s = spans();
        tc.js_publish("orders.a.1", HeaderMap::new(), b"first")
            .await;
        tc.js_publish("orders.a.2", HeaderMap::new(), b"second")
            .await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("keyed-limit")
                    .key(Key::subject_token(1))
                    .handler_time_limit(Duration::from_millis(600)),
                timed(&s, |_| Duration::from_millis(400), |_, _| Outcome::Ack),
            )
        })
        .await;
        // The second waits 400 ms for its turn, then runs 400 ms: 800 ms after it arrived,
        // within the limit from its turn.
        assert_settled(&acks, &["+ACK", "+ACK"]).await;
        assert!(log_lines_for("keyed-limit", "time limit").is_empty());
        assert_one_at_a_time(&s, &[("a", &["first", "second"])]);
        app.shutdown().await;
    });
}

#[test]
fn rule_24_core_deliveries_of_one_key_run_one_at_a_time() {
    run(async {
        let (server, tc, _, ev) = core_case().await;
        let s = spans();
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_wildcard("core-keyed", "acct.*.event", "acct.copies")
                    .key(Key::subject_token(1)),
                timed(&s, |_| Duration::from_millis(100), |_, _| Outcome::Ack),
            )
        })
        .await;
        for (subject, payload) in [
            ("acct.a.event", &b"a1"[..]),
            ("acct.b.event", b"b1"),
            ("acct.a.event", b"a2"),
            ("acct.a.event", b"a3"),
            ("acct.b.event", b"b2"),
        ] {
            tc.client
                .publish(subject.to_owned(), bytes::Bytes::from_static(payload))
                .await
                .unwrap();
        }
        tc.client.flush().await.unwrap();
        eventually("five runs", || (s.lock().unwrap().len() == 5).then_some(())).await;
        let concurrent =
            assert_one_at_a_time(&s, &[("a", &["a1", "a2", "a3"]), ("b", &["b1", "b2"])]);
        assert!(concurrent, "different keys run at once");
        app.shutdown().await;
    });
}

#[test]
fn rule_24_a_batch_never_holds_two_deliveries_of_one_key() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        publish_keyed(
            &tc,
            &[
                ("orders.a.1", b"a1"),
                ("orders.b.1", b"b1"),
                ("orders.a.2", b"a2"),
                ("orders.c.1", b"c1"),
                ("orders.a.3", b"a3"),
            ],
        )
        .await;
        let seen = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
        let sink = seen.clone();
        let app = start(&server, &ev, |a| {
            a.mount_batch(
                js_mount("keyed-batch")
                    .key(Key::subject_token(1))
                    .batch(5, Duration::from_millis(100)),
                move |batch: Batch| {
                    sink.lock().unwrap().push(
                        batch
                            .iter()
                            .map(|m| String::from_utf8_lossy(&m.value).into_owned())
                            .collect(),
                    );
                    async { Outcome::Ack }
                },
            )
        })
        .await;
        assert_settled(&acks, &["+ACK"; 5]).await;
        let batches = seen.lock().unwrap().clone();
        for batch in &batches {
            let a = batch.iter().filter(|p| p.starts_with('a')).count();
            assert!(a <= 1, "two deliveries of key a in one batch: {batches:?}");
        }
        let a_order: Vec<&String> = batches
            .iter()
            .flatten()
            .filter(|p| p.starts_with('a'))
            .collect();
        assert_eq!(a_order, ["a1", "a2", "a3"], "{batches:?}");
        assert_eq!(
            batches[0],
            ["a1", "b1", "c1"],
            "the first batch takes one of each key"
        );
        app.shutdown().await;
    });
}

/// Publishes each (subject, payload) to ORDERS, awaiting the stream's acknowledgement.
async fn publish_keyed(tc: &TestClient, messages: &[(&str, &'static [u8])]) {
    for (subject, payload) in messages {
        tc.js
            .publish((*subject).to_owned(), bytes::Bytes::from_static(payload))
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

/// The runs recorded by [`timed`] of key `key`, in the order they started: (payload, start,
/// end).
fn runs_of(s: &Spans, key: &str) -> Vec<(String, Instant, Instant)> {
    let mut runs: Vec<_> = s
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.0 == key)
        .map(|r| (r.1.clone(), r.2, r.3))
        .collect();
    runs.sort_by_key(|r| r.1);
    runs
}

#[test]
fn rule_24_strict_order_runs_a_retry_again_in_place_after_its_backoff() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        let s = spans();
        publish_keyed(
            &tc,
            &[
                ("orders.a.1", b"a1"),
                ("orders.a.2", b"a2"),
                ("orders.b.1", b"b1"),
            ],
        )
        .await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("strict")
                    .key(Key::subject_token(1))
                    .strict_order(true)
                    .max_attempts(3)
                    .backoff(adapter::Backoff::fixed(Duration::from_millis(300))),
                timed(
                    &s,
                    |_| Duration::from_millis(10),
                    |attempt, p| {
                        if p == "a1" && attempt < 3 {
                            Outcome::Retry
                        } else {
                            Outcome::Ack
                        }
                    },
                ),
            )
        })
        .await;
        assert_settled(&acks, &["+ACK", "+ACK", "+ACK"]).await;
        assert!(
            !acks.payloads().iter().any(|p| p.starts_with("-NAK")),
            "nothing goes back to NATS: {:?}",
            acks.payloads()
        );
        let a = runs_of(&s, "a");
        let order: Vec<&str> = a.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(order, ["a1", "a1", "a1", "a2"], "in place, a2 waiting");
        for pair in a.windows(2).take(2) {
            assert!(
                pair[1].1.duration_since(pair[0].2) >= Duration::from_millis(250),
                "the backoff's delay between runs in place"
            );
        }
        let b = runs_of(&s, "b");
        assert!(b[0].1 < a[1].1, "another key is not held back");
        let attempts: Vec<u64> = ev
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.stream_sequence == Some(1))
            .map(|e| e.attempt)
            .collect();
        assert_eq!(attempts, [3], "one settlement, at the third attempt");
        let info = eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        assert_eq!(info.num_redelivered, 0, "{info:?}");
        app.shutdown().await;
    });
}

#[test]
fn rule_24_strict_order_at_the_limit_dead_letters_and_the_key_goes_on() {
    run(async {
        let (server, tc, acks, _, ev) = js_case().await;
        let s = spans();
        publish_keyed(&tc, &[("orders.a.1", b"poison"), ("orders.a.2", b"a2")]).await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("strict-limit")
                    .key(Key::subject_token(1))
                    .strict_order(true)
                    .max_attempts(2)
                    .dead_letter("dlq.strict")
                    .provenance(),
                timed(
                    &s,
                    |_| Duration::ZERO,
                    |_, p| {
                        if p == "poison" {
                            Outcome::RetryAfter(Duration::from_millis(100))
                        } else {
                            Outcome::Ack
                        }
                    },
                ),
            )
        })
        .await;
        assert_settled(&acks, &["+TERM", "+ACK"]).await;
        let stored = assert_dead_letters(&tc, "DLQ", &[("dlq.strict", b"poison")]).await;
        let header = |name: &str| {
            stored[0]
                .1
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(header("Ruststream-Reason").as_deref(), Some("limit"));
        assert_eq!(header("Ruststream-Attempt").as_deref(), Some("2"));
        let order: Vec<String> = runs_of(&s, "a").into_iter().map(|r| r.0).collect();
        assert_eq!(order, ["poison", "poison", "a2"]);
        app.shutdown().await;
    });
}

#[test]
fn rule_24_strict_order_on_core_retries_in_place_without_a_copy() {
    run(async {
        let (server, tc, _, ev) = core_case().await;
        let copies = Wire::watch(&tc.client, "acct.copies").await;
        let s = spans();
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_wildcard("core-strict", "acct.*.event", "acct.copies")
                    .key(Key::subject_token(1))
                    .strict_order(true)
                    .max_attempts(3),
                timed(
                    &s,
                    |_| Duration::from_millis(5),
                    |attempt, p| {
                        if p == "a1" && attempt == 1 {
                            Outcome::Retry
                        } else {
                            Outcome::Ack
                        }
                    },
                ),
            )
        })
        .await;
        for payload in [&b"a1"[..], b"a2"] {
            tc.client
                .publish("acct.a.event", bytes::Bytes::from_static(payload))
                .await
                .unwrap();
        }
        tc.client.flush().await.unwrap();
        eventually("three runs", || {
            (s.lock().unwrap().len() == 3).then_some(())
        })
        .await;
        quiet(300).await;
        let order: Vec<String> = runs_of(&s, "a").into_iter().map(|r| r.0).collect();
        assert_eq!(order, ["a1", "a1", "a2"]);
        assert!(copies.all().is_empty(), "no copy: {:?}", copies.payloads());
        app.shutdown().await;
    });
}

#[test]
fn rule_24_start_up_refuses_strict_order_without_a_key_or_a_limit() {
    run(async {
        let (server, _tc, _, _) = core_case().await;
        let err = start_err(&server, |a| {
            a.mount(
                Mount::core_subject("no-key", "s.one")
                    .strict_order(true)
                    .max_attempts(3),
                |_d: Delivery| async { Outcome::Ack },
            )
        })
        .await;
        assert!(
            matches!(&err, StartError::Setting { mount, reason } if mount == "no-key" && reason.contains("needs a key")),
            "{err}"
        );
        let err = start_err(&server, |a| {
            a.mount(
                Mount::core_subject("no-limit", "s.two")
                    .key(Key::subject_token(0))
                    .strict_order(true),
                |_d: Delivery| async { Outcome::Ack },
            )
        })
        .await;
        assert!(
            matches!(&err, StartError::Setting { mount, reason } if mount == "no-limit" && reason.contains("max_attempts")),
            "{err}"
        );
    });
}

#[test]
fn rule_24_start_up_refuses_strict_order_with_leases_off_on_jetstream() {
    run(async {
        let (server, _tc, _, _, _) = js_case().await;
        let err = start_err(&server, |a| {
            a.mount(
                js_mount("strict-no-leases")
                    .key(Key::subject_token(1))
                    .strict_order(true)
                    .max_attempts(3)
                    .leases(false),
                |_d: Delivery| async { Outcome::Ack },
            )
        })
        .await;
        assert!(
            matches!(&err, StartError::Setting { mount, reason } if mount == "strict-no-leases" && reason.contains("needs leases")),
            "{err}"
        );
    });
}

#[test]
fn rule_24_a_delivery_without_a_key_is_still_bounded_by_the_time_limit() {
    run(async {
        let (server, tc, _acks, _, ev) = js_case().await;
        // No `Account` header: no key, so not ordered; still a handler under rule 16's limit.
        tc.js_publish("orders.x.1", HeaderMap::new(), b"hang").await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("keyless-limit")
                    .key(Key::header("Account"))
                    .handler_time_limit(Duration::from_millis(300)),
                |_d: Delivery| async {
                    tokio::time::sleep(Duration::from_secs(3_600)).await;
                    Outcome::Ack
                },
            )
        })
        .await;
        logged(&["mount=keyless-limit", "handler time limit reached"]).await;
        app.shutdown().await;
    });
}

#[test]
fn rule_24_start_up_refuses_waits_that_cannot_work() {
    run(async {
        let (server, _tc, _, _, _) = js_case().await;
        for (name, mount) in [
            (
                "key-no-leases",
                js_mount("key-no-leases")
                    .key(Key::subject_token(1))
                    .leases(false),
            ),
            (
                "batch-no-leases",
                js_mount("batch-no-leases")
                    .batch(10, Duration::from_millis(10))
                    .leases(false),
            ),
        ] {
            let batch = name.starts_with("batch");
            let err = start_err(&server, |a| {
                if batch {
                    a.mount_batch(mount, |_b: Batch| async { Outcome::Ack })
                } else {
                    a.mount(mount, |_d: Delivery| async { Outcome::Ack })
                }
            })
            .await;
            assert!(
                matches!(&err, StartError::Setting { mount, reason } if mount == name && reason.contains("needs leases")),
                "{err}"
            );
        }
        let err = start_err(&server, |a| {
            a.mount(
                Mount::core_wildcard("wild-token", "acct.*.event", "acct.copies")
                    .key(Key::subject_token(1))
                    .max_attempts(3),
                |_d: Delivery| async { Outcome::Ack },
            )
        })
        .await;
        assert!(
            matches!(&err, StartError::Setting { mount, reason } if mount == "wild-token" && reason.contains("acct.copies")),
            "{err}"
        );
    });
}

#[test]
fn rule_24_strict_order_holds_the_key_until_a_dead_letter_is_confirmed() {
    run(async {
        let (server, tc, _acks, _, ev) = js_case().await;
        publish_keyed(&tc, &[("orders.a.1", b"reject"), ("orders.a.2", b"a2")]).await;
        let order = Arc::new(Mutex::new(Vec::<String>::new()));
        let (runs, settles) = (order.clone(), order.clone());
        let app = start(&server, &ev, |a| {
            a.on_settled(move |s| {
                settles
                    .lock()
                    .unwrap()
                    .push(format!("settled {}", s.stream_sequence.unwrap_or(0)))
            })
            .mount(
                js_mount("strict-dlq")
                    .key(Key::subject_token(1))
                    .strict_order(true)
                    .max_attempts(3)
                    .dead_letter("dlq.strict"),
                move |d: Delivery| {
                    let runs = runs.clone();
                    async move {
                        let payload = String::from_utf8_lossy(&d.payload).into_owned();
                        runs.lock().unwrap().push(format!("run {payload}"));
                        if payload == "reject" {
                            Outcome::Reject
                        } else {
                            Outcome::Ack
                        }
                    }
                },
            )
        })
        .await;
        settled(&ev, 2).await;
        assert_eq!(
            *order.lock().unwrap(),
            ["run reject", "settled 1", "run a2", "settled 2"],
            "the key's next delivery runs after the dead letter is confirmed and +TERM sent"
        );
        app.shutdown().await;
    });
}
