//! Leases (rule 16): a handler slower than `ack_wait` runs once; a late result is not sent;
//! every handler is bounded by its mount's time limit.

use super::common::*;

/// Handles one message whose handler takes three times the delivery's span, and checks that
/// it ran once and was acknowledged, with renewals on the wire and nothing dead-lettered.
async fn runs_once(server: &NatsServer, tc: &TestClient, acks: &Wire, mount: Mount) {
    let (r, ev) = (runs(), events());
    let app = start(server, &ev, |a| {
        a.mount(
            mount.max_attempts(3).dead_letter("dlq.slow"),
            slow(&r, |_| Duration::from_millis(2_100), |_| Outcome::Ack),
        )
    })
    .await;
    ran_once_with_renewals(tc, acks, &r, &ev).await;
    app.shutdown().await;
}

/// Publishes one message to ORDERS and checks that its slow handler ran once and was
/// acknowledged: renewals, then the `+ACK`, on the wire; nothing redelivered or dead-lettered.
async fn ran_once_with_renewals(tc: &TestClient, acks: &Wire, r: &Runs, ev: &Events) {
    tc.js_publish("orders.new", HeaderMap::new(), b"slow").await;
    eventually("the +ACK", || {
        acks.payloads().iter().any(|p| p == "+ACK").then_some(())
    })
    .await;
    quiet(1_000).await;
    let payloads = acks.payloads();
    assert_eq!(attempts(r), [1], "one run, no redelivery while it ran");
    assert_eq!(
        payloads.last().map(String::as_str),
        Some("+ACK"),
        "{payloads:?}"
    );
    assert!(
        payloads[..payloads.len() - 1].iter().all(|p| p == "+WPI") && payloads.len() >= 3,
        "renewals, then the ack: {payloads:?}"
    );
    assert_eq!(tc.stream_len("DLQ").await, 0);
    let info = eventually_info(tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
    assert_eq!(info.num_redelivered, 0, "{info:?}");
    assert_eq!(dispositions(ev), [Disposition::Acked]);
}

#[test]
fn rule_16_a_handler_taking_three_ack_waits_runs_once_and_acks() {
    run(async {
        let (server, tc, acks, _, _) = js_case().await;
        runs_once(&server, &tc, &acks, js_mount("slow-ack")).await;
    });
}

#[test]
fn rule_16_a_handler_taking_three_backoff_spans_runs_once_and_acks() {
    run(async {
        let (server, tc, acks, _, _) = js_case().await;
        // BackOff[0] is the first delivery's span; the server redelivers at it, not ack_wait.
        let orders = tc.js.get_stream("ORDERS").await.unwrap();
        let max_deliver = if server.version() >= (2, 10, 14) {
            -1
        } else {
            5
        };
        orders
            .create_consumer(adapter::async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("worker".into()),
                ack_policy: adapter::async_nats::jetstream::consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(30),
                backoff: vec![Duration::from_millis(700), Duration::from_millis(1_400)],
                max_deliver,
                ..Default::default()
            })
            .await
            .unwrap();
        runs_once(
            &server,
            &tc,
            &acks,
            Mount::jetstream("slow-backoff", "ORDERS", "worker"),
        )
        .await;
    });
}

#[test]
fn rule_16_a_late_result_is_not_sent() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        // Leases off: the server redelivers after ack_wait while attempt 1 still runs.
        // Attempt 2 drops it at once; attempt 1's `+ACK`, 1.5 s in, comes too late.
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("late").leases(false).max_attempts(5),
                slow(
                    &r,
                    |attempt| Duration::from_millis(if attempt == 1 { 1_500 } else { 0 }),
                    |attempt| {
                        if attempt == 1 {
                            Outcome::Ack
                        } else {
                            Outcome::Drop
                        }
                    },
                ),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"late").await;
        logged(&["mount=late", "late result discarded"]).await;
        quiet(300).await;
        assert_eq!(
            acks.payloads(),
            ["+TERM"],
            "only the newer attempt's answer"
        );
        assert_eq!(attempts(&r), [1, 2]);
        assert_eq!(
            ruststream_tests::metrics::counter(
                "ruststream_late_results_total",
                &[("mount", "late")]
            ),
            1
        );
        app.shutdown().await;
    });
}

#[test]
fn rule_16_a_jetstream_handler_past_its_time_limit_is_cancelled_and_redelivered() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("limit-js")
                    .handler_time_limit(Duration::from_millis(300))
                    .max_attempts(3),
                slow(
                    &r,
                    |attempt| Duration::from_secs(if attempt == 1 { 60 } else { 0 }),
                    |_| Outcome::Ack,
                ),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"hangs")
            .await;
        logged(&["ERROR", "mount=limit-js", "handler time limit reached"]).await;
        eventually("the redelivery acked", || {
            acks.payloads().iter().any(|p| p == "+ACK").then_some(())
        })
        .await;
        assert_eq!(attempts(&r), [1, 2]);
        app.shutdown().await;
    });
}

#[test]
fn rule_16_a_core_handler_past_its_time_limit_is_cancelled_and_the_mount_goes_on() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("limit-core", "lim.in")
                    .handler_time_limit(Duration::from_millis(200)),
                slow(&r, |_| Duration::from_secs(60), |_| Outcome::Ack),
            )
        })
        .await;
        core_publish(&tc, "lim.in", HeaderMap::new(), b"one").await;
        logged(&["ERROR", "mount=limit-core", "handler time limit reached"]).await;
        core_publish(&tc, "lim.in", HeaderMap::new(), b"two").await;
        eventually("both handled and settled", || {
            (dispositions(&ev).len() == 2).then_some(())
        })
        .await;
        let report = app.shutdown().await;
        assert!(report.abandoned.is_empty(), "{report:?}");
    });
}

#[test]
fn rule_16_start_up_warns_of_an_ack_wait_too_short_for_leases() {
    run(async {
        let (server, _tc, _acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::jetstream("short-wait", "ORDERS", "worker")
                    .ack_wait(Duration::from_millis(50)),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        logged(&["WARN", "mount=short-wait", "shorter than 100 ms"]).await;
        app.shutdown().await;
    });
}

#[test]
fn rule_16_leases_follow_a_consumer_whose_ack_wait_changes() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let orders = tc.js.get_stream("ORDERS").await.unwrap();
        let config = |ack_wait| adapter::async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("worker".to_owned()),
            ack_policy: adapter::async_nats::jetstream::consumer::AckPolicy::Explicit,
            ack_wait,
            ..Default::default()
        };
        orders
            .create_consumer(config(Duration::from_secs(10)))
            .await
            .expect("the consumer");
        let app = start(&server, &ev, |a| {
            a.consumer_reread(Duration::from_millis(200)).mount(
                js_mount("lease-change").max_attempts(3),
                slow(&r, |_| Duration::from_millis(2_500), |_| Outcome::Ack),
            )
        })
        .await;
        // The operator shortens ack_wait while the service runs: read at start-up, a lease
        // would first be renewed after 5 s, long after the server redelivers at 1 s.
        orders
            .update_consumer(config(Duration::from_secs(1)))
            .await
            .expect("ack_wait updated");
        logged(&["mount=lease-change", "ack_wait or BackOff changed", "1s"]).await;
        // Renewed every 500 ms from now on: one run, acknowledged.
        ran_once_with_renewals(&tc, &acks, &r, &ev).await;
        let payloads = acks.payloads();
        assert!(
            payloads.iter().filter(|p| *p == "+WPI").count() >= 3,
            "renewed every 500 ms: {payloads:?}"
        );
        app.shutdown().await;
    });
}

/// Issue 41: a consumer the runtime creates gets a short `ack_wait` where leases make it
/// safe, so that a crashed instance's messages come back within 10 s: 10 s with leases on
/// (the default), the server's 30 s with them off, and the one given when given. What it
/// costs: a handler that runs 11 s is renewed twice (at 5 s and at 10 s), then acked, and
/// runs once; one that finishes at once is never renewed.
#[test]
fn rule_16_a_created_consumer_gets_a_short_ack_wait_and_a_long_handler_its_renewals() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let elsewhere = "orders.elsewhere";
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::jetstream("leased-10s", "ORDERS", "w10"),
                slow(&r, |_| Duration::from_secs(11), |_| Outcome::Ack),
            )
            .mount(
                Mount::jetstream("unleased-30s", "ORDERS", "w30")
                    .leases(false)
                    .filter_subject(elsewhere),
                |_d: Delivery| async { Outcome::Ack },
            )
            .mount(
                Mount::jetstream("given-7s", "ORDERS", "w7")
                    .ack_wait(Duration::from_secs(7))
                    .filter_subject(elsewhere),
                |_d: Delivery| async { Outcome::Ack },
            )
        })
        .await;
        for (consumer, ack_wait) in [
            ("w10", adapter::DEFAULT_ACK_WAIT),
            ("w30", adapter::DEFAULT_ACK_WAIT_WITHOUT_LEASES),
            ("w7", Duration::from_secs(7)),
        ] {
            let info = tc.consumer_info("ORDERS", consumer).await;
            assert_eq!(info.config.ack_wait, ack_wait, "{consumer}");
        }
        assert_eq!(adapter::DEFAULT_ACK_WAIT, Duration::from_secs(10));
        tc.js_publish("orders.new", HeaderMap::new(), b"long").await;
        // Past the second renewal; the ack comes at 11 s.
        quiet(10_500).await;
        eventually("the +ACK", || {
            acks.payloads().iter().any(|p| p == "+ACK").then_some(())
        })
        .await;
        assert_eq!(acks.payloads(), ["+WPI", "+WPI", "+ACK"]);
        assert_eq!(attempts(&r), [1], "one run, no redelivery while it ran");
        assert_eq!(dispositions(&ev), [Disposition::Acked]);
        app.shutdown().await;
    });
}
