//! Part C, the JetStream rows: one test per row.

use super::common::*;

#[test]
fn row_01_jetstream_ack() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-ack").max_attempts(3),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"order-1")
            .await;
        assert_acks(&acks, &["+ACK"]).await;
        let ci = eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        assert_eq!(ci.num_redelivered, 0);
        quiet(900).await; // past ack_wait: nothing comes back
        assert_eq!(attempts(&r), [1]);
        assert_eq!(dispositions(&ev), [Disposition::Acked]);
        app.shutdown().await;
    });
}

#[test]
fn row_02_jetstream_drop() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-drop").max_attempts(3),
                scripted(&r, |_, _| Outcome::Drop),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"order-1")
            .await;
        assert_acks(&acks, &["+TERM"]).await;
        eventually_info(&tc, |i| i.num_ack_pending == 0).await;
        quiet(900).await;
        assert_eq!(
            attempts(&r),
            [1],
            "a terminated message is never sent again"
        );
        assert_eq!(dispositions(&ev), [Disposition::Dropped]);
        app.shutdown().await;
    });
}

#[test]
fn row_03_jetstream_retry_below_limit() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-retry").max_attempts(3),
                scripted(&r, |attempt, _| {
                    if attempt == 1 {
                        Outcome::Retry
                    } else {
                        Outcome::Ack
                    }
                }),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"order-1")
            .await;
        assert_acks(&acks, &["-NAK", "+ACK"]).await;
        // Redelivered at once, with delivered + 1 on the same stream sequence.
        let seen = acks.all();
        assert!(
            seen[0].subject.starts_with("$JS.ACK.ORDERS.worker.1.1."),
            "{}",
            seen[0].subject
        );
        assert!(
            seen[1].subject.starts_with("$JS.ACK.ORDERS.worker.2.1."),
            "{}",
            seen[1].subject
        );
        assert_eq!(attempts(&r), [1, 2]);
        let e = settled(&ev, 2).await;
        assert_eq!(e[1].stream_sequence, Some(1));
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        app.shutdown().await;
    });
}

#[test]
fn row_04_jetstream_retry_after_below_limit() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-retry-after").max_attempts(3),
                scripted(&r, |attempt, _| match attempt {
                    1 => Outcome::RetryAfter(Duration::from_millis(400)),
                    _ => Outcome::Ack,
                }),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"order-1")
            .await;
        assert_acks(&acks, &[r#"-NAK {"delay": 400000000}"#, "+ACK"]).await;
        let runs = r.lock().unwrap().clone();
        assert_eq!(runs.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2]);
        let gap = runs[1].2 - runs[0].2;
        assert!(
            gap >= Duration::from_millis(400),
            "redelivered after {gap:?}, before the delay"
        );
        assert!(gap < Duration::from_secs(5), "redelivered after {gap:?}");
        assert_eq!(
            dispositions(&ev),
            [Disposition::Delayed, Disposition::Acked]
        );
        app.shutdown().await;
    });
}

#[test]
fn row_05_jetstream_at_limit_dead_letter_then_term() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-dlq").max_attempts(2).dead_letter("dlq.orders"),
                scripted(&r, |_, _| Outcome::Retry),
            )
        })
        .await;
        // Rule 9: the directive would make the DLQ stream refuse the dead letter if kept.
        let original = headers(&[
            ("Trace-Id", "abc"),
            ("tag", "one"),
            ("tag", "two"),
            ("Nats-Msg-Id", "order-1-id"),
            ("Nats-Expected-Stream", "ORDERS"),
        ]);
        tc.js_publish("orders.new", original, b"{\"id\":1}").await;
        assert_acks(&acks, &["-NAK", "+TERM"]).await;
        assert_eq!(attempts(&r), [1, 2]);
        let stored = assert_dead_letters(&tc, "DLQ", &[("dlq.orders", b"{\"id\":1}")]).await;
        let hdrs = &without_stored_time(&stored[0].1);
        // Rule 9: the original's `Nats-Msg-Id` is replaced by the runtime's own.
        let want: Vec<(String, String)> = [
            ("Nats-Msg-Id", "ruststream.dead-letter.ORDERS.worker.1"),
            ("Trace-Id", "abc"),
            ("tag", "one"),
            ("tag", "two"),
        ]
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
        assert_eq!(
            hdrs, &want,
            "dead letter headers byte for byte, directives aside"
        );
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        assert_eq!(
            dispositions(&ev),
            [Disposition::Retried, Disposition::DeadLettered]
        );
        logged(&[
            "WARN",
            "mount=js-dlq",
            "attempt=2",
            "dead_letter=dlq.orders",
            "dead letter published",
        ])
        .await;
        app.shutdown().await;
    });
}

#[test]
fn row_06_jetstream_at_limit_without_dead_letter_terms() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-limit").max_attempts(2),
                scripted(&r, |_, _| Outcome::RetryAfter(Duration::from_millis(50))),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"x").await;
        assert_acks(&acks, &[r#"-NAK {"delay": 50000000}"#, "+TERM"]).await;
        quiet(900).await;
        assert_eq!(attempts(&r), [1, 2]);
        assert_eq!(tc.stream_len("DLQ").await, 0);
        assert_eq!(
            dispositions(&ev),
            [Disposition::Delayed, Disposition::Terminated]
        );
        app.shutdown().await;
    });
}

#[test]
fn row_07_jetstream_arrives_past_limit_handler_not_run() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        // No outcome twice: the server redelivers after ack_wait; the third delivery is past
        // max_attempts 2 and goes to the dead letter without running the handler (rule 3).
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-past").max_attempts(2).dead_letter("dlq.past"),
                scripted(&r, |_, _| Outcome::None),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"hangs")
            .await;
        assert_acks(&acks, &["+TERM"]).await;
        assert!(
            acks.all()[0]
                .subject
                .starts_with("$JS.ACK.ORDERS.worker.3."),
            "{}",
            acks.all()[0].subject
        );
        assert_eq!(
            attempts(&r),
            [1, 2],
            "the handler does not run past the limit"
        );
        assert_eq!(tc.stored("DLQ").await.len(), 1);
        let e = settled(&ev, 3).await;
        assert!(!e[2].handler_ran);
        assert_eq!(e[2].disposition, Disposition::DeadLettered);
        app.shutdown().await;
    });
}

#[test]
fn row_08_jetstream_no_outcome_server_redelivers() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-none").max_attempts(5),
                scripted(&r, |attempt, _| {
                    if attempt == 1 {
                        Outcome::None
                    } else {
                        Outcome::Ack
                    }
                }),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"x").await;
        assert_acks(&acks, &["+ACK"]).await;
        let runs = r.lock().unwrap().clone();
        assert_eq!(runs.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2]);
        assert!(
            runs[1].2 - runs[0].2 >= Duration::from_millis(600),
            "redelivered only after ack_wait"
        );
        assert_eq!(
            dispositions(&ev),
            [Disposition::NoOutcome, Disposition::Acked]
        );
        app.shutdown().await;
    });
}

#[test]
fn row_09_jetstream_dead_letter_publish_fails_naks_and_retries() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-dlq-fail")
                    .max_attempts(1)
                    .dead_letter("dlq.fail")
                    .dead_letter_retry_delay(Duration::from_millis(300)),
                scripted(&r, |_, _| Outcome::Retry),
            )
        })
        .await;
        // The dead-letter stream disappears after start-up.
        tc.js.delete_stream("DLQ").await.expect("delete DLQ");
        tc.js_publish("orders.new", HeaderMap::new(), b"precious")
            .await;
        acks.at_least(1).await;
        assert_eq!(
            acks.payloads()[0],
            r#"-NAK {"delay": 300000000}"#,
            "not settled while the dead letter failed"
        );
        assert!(!acks.payloads().iter().any(|p| p == "+TERM"));
        // Once the stream is back, the delivery returns past the limit and is dead-lettered.
        tc.stream("DLQ", &["dlq.>"]).await;
        eventually("the dead letter to arrive", || {
            acks.payloads().iter().any(|p| p == "+TERM").then_some(())
        })
        .await;
        assert_dead_letters(&tc, "DLQ", &[("dlq.fail", b"precious")]).await;
        assert_eq!(
            attempts(&r),
            [1],
            "the handler ran once; later deliveries were past the limit"
        );
        assert!(dispositions(&ev).contains(&Disposition::DeadLetterRetry));
        app.shutdown().await;
    });
}

/// The consumer `worker` of `ORDERS` once nothing is pending or unacknowledged, within
/// `within` (slow handlers take longer than [`eventually_info`] waits).
async fn drained(
    tc: &TestClient,
    within: Duration,
) -> adapter::async_nats::jetstream::consumer::Info {
    let deadline = Instant::now() + within;
    loop {
        let info = tc.consumer_info("ORDERS", "worker").await;
        if info.num_ack_pending == 0 && info.num_pending == 0 {
            return info;
        }
        assert!(Instant::now() < deadline, "{info:?}");
        quiet(200).await;
    }
}

/// Issue 13's guard: whatever the pull window, a message fetched ahead of a free handler slot
/// must never wait past its deadline. `ack_wait` 3 s, one slot, 1 s handlers, 10 messages:
/// every message runs once, at attempt 1.
#[test]
fn prefetched_messages_never_wait_past_ack_wait() {
    run(async {
        let (server, tc, _acks, r, ev) = js_case().await;
        for _ in 0..10 {
            tc.js_publish("orders.new", HeaderMap::new(), b"one second")
                .await;
        }
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::jetstream("js-prefetch", "ORDERS", "worker")
                    .ack_wait(Duration::from_secs(3))
                    .concurrency(std::num::NonZeroUsize::MIN),
                slow(&r, |_| Duration::from_secs(1), |_| Outcome::Ack),
            )
        })
        .await;
        let info = drained(&tc, Duration::from_secs(30)).await;
        app.shutdown().await;
        assert_eq!(attempts(&r), [1; 10], "every message once, at attempt 1");
        assert_eq!(
            info.delivered.consumer_sequence, 10,
            "nothing redelivered: {info:?}"
        );
    });
}

/// Issue 13: a prefetched message that waits for a slot past its deadline is renewed with
/// `+WPI`, so it is not delivered again elsewhere while it waits. Two apps share the durable.
/// The first has one slot and `ack_wait` 2 s: 30 messages of 10 ms measure a rate that
/// prefetches 3 (the cap per slot), then 4 messages of 1.5 s follow, so the last prefetched
/// ones wait up to 4.5 s for the slot. The second app starts once the slow ones have, with pull
/// requests waiting on the server: a message that expired while it waited would go to it, and
/// run twice.
#[test]
fn prefetched_messages_that_wait_are_renewed_and_run_once() {
    run(async {
        let (server, tc, _acks, r, ev) = js_case().await;
        for _ in 0..34 {
            tc.js_publish("orders.new", HeaderMap::new(), b"fast, then slow")
                .await;
        }
        let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handler = |started: Arc<std::sync::atomic::AtomicUsize>| {
            let runs = r.clone();
            move |d: Delivery| {
                let k = started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                runs.lock()
                    .unwrap()
                    .push((d.attempt.get(), String::new(), Instant::now()));
                let sleep = Duration::from_millis(if k < 30 { 10 } else { 1_500 });
                async move {
                    tokio::time::sleep(sleep).await;
                    Outcome::Ack
                }
            }
        };
        let mount = || {
            Mount::jetstream("js-prefetch-wait", "ORDERS", "worker")
                .ack_wait(Duration::from_secs(2))
                .concurrency(std::num::NonZeroUsize::MIN)
        };
        let first = start(&server, &ev, |a| a.mount(mount(), handler(started.clone()))).await;
        eventually("the slow messages to start", || {
            (started.load(std::sync::atomic::Ordering::SeqCst) > 30).then_some(())
        })
        .await;
        let second = start(&server, &ev, |a| a.mount(mount(), handler(started.clone()))).await;
        let info = drained(&tc, Duration::from_secs(40)).await;
        first.shutdown().await;
        second.shutdown().await;
        assert_eq!(attempts(&r), [1; 34], "every message once, at attempt 1");
        assert_eq!(
            info.delivered.consumer_sequence, 34,
            "nothing redelivered: {info:?}"
        );
    });
}

/// Part C, JetStream `reject` with a dead-letter subject (rule 17): at attempt 1 of 5 the
/// delivery goes to the dead-letter subject as it arrived, then `+TERM`.
#[test]
fn row_jetstream_reject_dead_letter_then_term() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-reject-dlq")
                    .max_attempts(5)
                    .dead_letter("dlq.orders"),
                scripted(&r, |_, _| Outcome::Reject),
            )
        })
        .await;
        let original = headers(&[("Trace-Id", "r1")]);
        tc.js_publish("orders.new", original, b"{\"id\":7}").await;
        assert_acks(&acks, &["+TERM"]).await;
        let stored = assert_dead_letters(&tc, "DLQ", &[("dlq.orders", b"{\"id\":7}")]).await;
        assert_eq!(
            without_stored_time(&stored[0].1),
            [
                (
                    "Nats-Msg-Id".to_owned(),
                    "ruststream.dead-letter.ORDERS.worker.1".to_owned()
                ),
                ("Trace-Id".to_owned(), "r1".to_owned()),
            ]
        );
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        quiet(300).await;
        assert_eq!(attempts(&r), [1], "never run again");
        let all = settled(&ev, 1).await;
        assert_eq!(
            (all.len(), all[0].disposition, all[0].outcome),
            (1, Disposition::DeadLettered, Some(Outcome::Reject))
        );
        app.shutdown().await;
    });
}

/// Part C, JetStream `reject` without a dead-letter subject: `+TERM` at once, with or without
/// a limit.
#[test]
fn row_jetstream_reject_without_dead_letter_terms() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(js_mount("js-reject"), scripted(&r, |_, _| Outcome::Reject))
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"x").await;
        assert_acks(&acks, &["+TERM"]).await;
        quiet(300).await;
        assert_eq!(attempts(&r), [1]);
        assert_eq!(tc.stream_len("DLQ").await, 0);
        assert_eq!(dispositions(&ev), [Disposition::Terminated]);
        app.shutdown().await;
    });
}
