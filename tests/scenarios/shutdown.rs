//! Shutdown (rule 14) and the observer.

use super::common::*;

#[test]
fn rule_14_shutdown_lets_in_flight_handlers_settle() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        let acks = Wire::watch(&tc.client, "$JS.ACK.ORDERS.>").await;
        let ev = events();
        let started = Arc::new(Mutex::new(false));
        let flag = started.clone();
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-slow-14").max_attempts(3),
                move |_d: Delivery| {
                    let flag = flag.clone();
                    async move {
                        *flag.lock().unwrap() = true;
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        Outcome::Ack
                    }
                },
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"slow").await;
        eventually("the handler to start", || {
            (*started.lock().unwrap()).then_some(())
        })
        .await;
        let report = app.shutdown().await;
        assert!(report.abandoned.is_empty(), "{report:?}");
        // The 500 ms handler outlives half of ack_wait (700 ms): its lease was renewed once.
        assert_eq!(
            acks.payloads(),
            ["+WPI", "+ACK"],
            "settled before shutdown returned"
        );
    });
}

#[test]
fn rule_14_delayed_core_copies_left_at_shutdown_are_reported_lost_without_waiting_for_them() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.grace_period(Duration::from_secs(20)).mount(
                Mount::core_subject("core-lost-14", "c14l.in"),
                scripted(&r, |_, _| Outcome::RetryAfter(Duration::from_secs(60))),
            )
        })
        .await;
        core_publish(&tc, "c14l.in", HeaderMap::new(), b"x").await;
        settled(&ev, 1).await;
        let asked = Instant::now();
        let report = app.shutdown().await;
        let took = asked.elapsed();
        assert_eq!(report.lost_copies, [("core-lost-14".to_owned(), 1)]);
        assert_eq!(
            super::losses::core_losses_metric("core-lost-14", "copy_at_shutdown"),
            1
        );
        assert_eq!(
            ruststream_tests::metrics::gauge(
                "ruststream_delayed_copies",
                &[("mount", "core-lost-14")]
            ),
            Some(0.0),
            "the lost copy left the queue"
        );
        logged(&["WARN", "mount=core-lost-14", "lost at shutdown"]).await;
        assert!(
            took < Duration::from_secs(5),
            "a copy due in 60 s cannot be published within 20 s; the shutdown took {took:?}"
        );
    });
}

#[test]
fn rule_14_delayed_core_copies_due_within_the_grace_period_are_published() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        // The grace period is 2 s (see `start`); the copy falls due 1 s after the handler.
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-due-14", "c14d.in"),
                scripted(&r, |_, _| Outcome::RetryAfter(Duration::from_secs(1))),
            )
        })
        .await;
        let wire = Wire::watch(&tc.client, "c14d.in").await;
        core_publish(&tc, "c14d.in", HeaderMap::new(), b"x").await;
        settled(&ev, 1).await;
        let asked = Instant::now();
        let report = app.shutdown().await;
        assert!(report.lost_copies.is_empty(), "{report:?}");
        let seen = wire.at_least(2).await;
        assert_eq!(
            seen[1].headers,
            [("x-ruststream-retry-count".to_owned(), "1".to_owned())]
        );
        assert!(seen[1].at >= asked, "the copy went out during the shutdown");
        assert!(
            asked.elapsed() < Duration::from_secs(2),
            "shutdown ended once the queue was empty"
        );
    });
}

#[test]
fn rule_14_no_core_delivery_starts_once_shutdown_has_begun() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        // Three apps in turn: each time the mount's task could pick the next buffered message
        // over the shutdown, so a loop that does not put the shutdown first fails here almost
        // surely.
        for round in 0..3 {
            let subject = format!("c14s.{round}");
            let started = Arc::new(Mutex::new(0usize));
            let count = started.clone();
            // Concurrency 1: the slow delivery runs on the mount's task; the others stay
            // buffered.
            let app = start(&server, &ev, |a| {
                a.mount(
                    Mount::core_subject("core-stop-14", &subject)
                        .concurrency(std::num::NonZeroUsize::MIN),
                    move |_d: Delivery| {
                        *count.lock().unwrap() += 1;
                        async {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            Outcome::Ack
                        }
                    },
                )
            })
            .await;
            for _ in 0..20 {
                core_publish(&tc, &subject, HeaderMap::new(), b"slow").await;
            }
            eventually("the first handler to start", || {
                (*started.lock().unwrap() > 0).then_some(())
            })
            .await;
            let asked = Instant::now();
            let report = app.shutdown().await;
            assert!(
                asked.elapsed() < Duration::from_secs(1),
                "shutdown took {:?}",
                asked.elapsed()
            );
            assert!(report.abandoned.is_empty(), "{report:?}");
            quiet(300).await;
            assert_eq!(
                *started.lock().unwrap(),
                1,
                "round {round}: only the delivery in flight when shutdown began ran"
            );
        }
        // The buffered ones are lost (Core cannot redeliver), and said so.
        logged(&[
            "WARN",
            "mount=core-stop-14",
            "received but not handled when shutdown began",
        ])
        .await;
        assert!(r.lock().unwrap().is_empty());
    });
}

#[test]
fn a_panicking_observer_is_logged_and_the_mount_goes_on() {
    run(async {
        let (server, tc, r, _) = core_case().await;
        capture_logs();
        let calls = Arc::new(Mutex::new(0usize));
        let seen = calls.clone();
        let app = App::new(&server.url())
            .on_settled(move |_| {
                let n = {
                    let mut n = seen.lock().unwrap();
                    *n += 1;
                    *n
                };
                if n == 1 {
                    panic!("observer bug");
                }
            })
            .mount(
                Mount::core_subject("observer-panics", "obs.in"),
                scripted(&r, |_, _| Outcome::Ack),
            )
            .start()
            .await
            .expect("the app starts");
        for _ in 0..3 {
            core_publish(&tc, "obs.in", HeaderMap::new(), b"x").await;
        }
        eventually("three handler runs", || {
            (r.lock().unwrap().len() == 3).then_some(())
        })
        .await;
        eventually("three observer calls", || {
            (*calls.lock().unwrap() == 3).then_some(())
        })
        .await;
        logged(&[
            "ERROR",
            "mount=observer-panics",
            "on_settled observer panicked",
            "observer bug",
        ])
        .await;
        let report = app.shutdown().await;
        assert!(report.abandoned.is_empty(), "{report:?}");
    });
}

#[test]
fn rule_14_shutdown_with_idle_core_mounts_does_not_wait_for_the_grace_period() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-idle-14", "c14i.in"),
                scripted(&r, |_, _| Outcome::Ack),
            )
            .mount(
                Mount::core_wildcard("core-idle-wild-14", "c14w.*", "c14w.retry"),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        core_publish(&tc, "c14i.in", HeaderMap::new(), b"x").await;
        core_publish(&tc, "c14w.a", HeaderMap::new(), b"y").await;
        settled(&ev, 2).await;
        let asked = Instant::now();
        let report = app.shutdown().await;
        let took = asked.elapsed();
        // The grace period is 2 s (see `start`): idle mounts end at once.
        assert!(took < Duration::from_secs(1), "shutdown took {took:?}");
        assert!(
            report.abandoned.is_empty() && report.lost_copies.is_empty(),
            "{report:?}"
        );
    });
}

#[test]
fn rule_14_shutdown_abandons_a_hung_handler_after_the_grace_period() {
    run(async {
        let server = NatsServer::start();
        let tc = core_setup(&server).await;
        let ev = events();
        let started = Arc::new(Mutex::new(false));
        let flag = started.clone();
        // Concurrency 1: the hung delivery runs on the mount's own loop.
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-hung-14", "c14h.in")
                    .concurrency(std::num::NonZeroUsize::MIN),
                move |_d: Delivery| {
                    let flag = flag.clone();
                    async move {
                        *flag.lock().unwrap() = true;
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        Outcome::Ack
                    }
                },
            )
        })
        .await;
        core_publish(&tc, "c14h.in", HeaderMap::new(), b"hangs").await;
        eventually("the handler to start", || {
            (*started.lock().unwrap()).then_some(())
        })
        .await;
        let began = Instant::now();
        let report = app.shutdown().await;
        let took = began.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "shutdown took {took:?} with a 2 s grace period"
        );
        assert_eq!(report.abandoned, [("core-hung-14".to_owned(), 1)]);
    });
}

#[test]
fn rule_14_core_messages_queued_behind_a_stuck_handler_are_reported_lost() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.grace_period(Duration::from_millis(500)).mount(
                Mount::core_subject("core-stuck-14", "c14s.in")
                    .concurrency(std::num::NonZeroUsize::new(2).unwrap()),
                slow(&r, |_| Duration::from_secs(30), |_| Outcome::Ack),
            )
        })
        .await;
        for _ in 0..5 {
            core_publish(&tc, "c14s.in", HeaderMap::new(), b"x").await;
        }
        // Two run (one on a slot, one holding the mount's loop); three wait behind them.
        eventually("two handlers running", || {
            (attempts(&r).len() == 2).then_some(())
        })
        .await;
        quiet(200).await;
        let report = app.shutdown().await;
        assert_eq!(report.abandoned, [("core-stuck-14".to_owned(), 2)]);
        logged(&["WARN", "mount=core-stuck-14", "messages=3", "not handled"]).await;
        assert_eq!(
            super::losses::core_losses_metric("core-stuck-14", "unhandled_at_shutdown"),
            3
        );
    });
}

#[test]
fn rule_14_slots_held_for_pull_requests_are_not_reported_as_abandoned_handlers() {
    run(async {
        let (server, tc, _acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.grace_period(Duration::from_millis(300)).mount(
                js_mount("js-stuck-14"),
                slow(&r, |_| Duration::from_secs(30), |_| Outcome::Ack),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"hangs")
            .await;
        eventually("the handler running", || {
            (attempts(&r).len() == 1).then_some(())
        })
        .await;
        quiet(200).await;
        let report = app.shutdown().await;
        // One handler runs; the 63 slots held for the open pull request are not handlers.
        assert_eq!(report.abandoned, [("js-stuck-14".to_owned(), 1)]);
    });
}

/// A JetStream handler abandoned at the end of the grace period that finishes afterwards
/// cannot send its `+ACK` (the app's client is gone): what observers see says so, instead of
/// reporting an `+ACK` that never went on the wire. The server redelivers the message.
#[test]
fn rule_14_a_settlement_that_could_not_be_sent_is_not_reported_as_sent() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.grace_period(Duration::from_millis(300)).mount(
                js_mount("js-unsent-14").ack_wait(Duration::from_secs(30)),
                slow(&r, |_| Duration::from_millis(1500), |_| Outcome::Ack),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"slow").await;
        eventually("the handler to start", || {
            (attempts(&r).len() == 1).then_some(())
        })
        .await;
        let report = app.shutdown().await;
        assert_eq!(
            report.abandoned,
            [("js-unsent-14".to_owned(), 1)],
            "{report:?}"
        );
        let all = settled(&ev, 1).await;
        let s = &all[0];
        // On tokio the handler finishes and its `+ACK` cannot be sent; on smol the app's
        // Tokio reactor has stopped, so its sleep panics (no outcome, nothing to send).
        // Either way nothing claims an `+ACK` that never went out.
        assert!(
            !(s.settlement_sent && s.wire.contains("+ACK")),
            "reported as sent: {s:?}"
        );
        if s.outcome == Some(Outcome::Ack) {
            assert!(
                !s.settlement_sent && s.wire.contains("(settlement not sent)"),
                "{s:?}"
            );
        }
        assert!(acks.payloads().is_empty(), "{:?}", acks.payloads());
        assert_eq!(
            ruststream_tests::metrics::counter(
                "ruststream_wire_actions_total",
                &[("mount", "js-unsent-14"), ("action", "ack")]
            ),
            0
        );
    });
}

on_real_server! {
/// The app owns the thread its NATS connection and mount loops run on (its `NatsThread`). If
/// that thread ends, the app reports it and stops; it does not hang. Not on the simulator,
/// whose runtime has no thread of its own to lose.
#[test]
fn the_loss_of_the_app_s_nats_thread_is_reported_not_hung() {
    run(async {
        let server = NatsServer::start();
        let running = App::new(&server.url())
            .mount(
                Mount::core_subject("nats-thread", "nats-thread.in"),
                |_: Delivery| async { Outcome::Ack },
            )
            .start()
            .await
            .expect("the app starts");
        running.stop_reactor();
        let report = tokio::time::timeout(Duration::from_secs(20), running.until_signal())
            .await
            .expect("until_signal returns once the thread is gone, instead of hanging");
        let failed = report.expect_err("the app stopped on its own: an error");
        let failure = failed.report.failure.expect("the loss is reported");
        assert!(failure.contains("NATS thread"), "{failure}");
    });
}
}

on_real_server! {
/// Every handle dropped: the app's NATS thread (its connection's runtime) ends once its mount
/// loops have, instead of lingering. Not on the simulator, whose runtime has no such thread.
#[test]
fn the_app_s_nats_thread_ends_once_every_handle_is_dropped_and_its_mounts_have_stopped() {
    run(async {
        let server = NatsServer::start();
        let ev = events();
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("dropped-thread", "dropped-thread.in"),
                |_: Delivery| async { Outcome::Ack },
            )
        })
        .await;
        drop(app);
        logged(&["DEBUG", "the app's NATS thread ends: its mount loops have ended"]).await;
    });
}
}

/// Every handle to the app (its `Running`, no `ShutdownHandle`) dropped without a shutdown:
/// the app can never be shut down gracefully, so every mount stops consuming, Core and
/// JetStream alike, each saying so. (The pull loop used to go on consuming, spinning on the
/// closed shutdown channel, while the Core loop had stopped.)
#[test]
fn dropping_every_handle_to_the_app_stops_every_mount_and_says_so() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        let handled = Arc::new(Mutex::new(Vec::new()));
        let (core_sink, js_sink) = (handled.clone(), handled.clone());
        let ev = events();
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("dropped-core", "dropped.core"),
                move |_d: Delivery| {
                    core_sink.lock().unwrap().push("core");
                    async { Outcome::Ack }
                },
            )
            .mount(js_mount("dropped-js"), move |_d: Delivery| {
                js_sink.lock().unwrap().push("jetstream");
                async { Outcome::Ack }
            })
        })
        .await;
        drop(app);
        // As at a shutdown, what the JetStream mount's outstanding pull requests bring is
        // still handled: they end within PULL_EXPIRES (1 s).
        quiet(1_500).await;
        for _ in 0..3 {
            tc.client.publish("dropped.core", "x".into()).await.unwrap();
            tc.js_publish("orders.new", HeaderMap::new(), b"x").await;
        }
        tc.client.flush().await.unwrap();
        quiet(1_000).await;
        assert_eq!(
            *handled.lock().unwrap(),
            Vec::<&str>::new(),
            "nothing handled once every handle is gone"
        );
        for mount in ["dropped-core", "dropped-js"] {
            assert!(
                !log_lines_for(mount, "was dropped without a shutdown").is_empty(),
                "{mount} says why it stopped"
            );
        }
    });
}

/// A started app whose one JetStream mount, `name`, counts its handler's runs (the count, given
/// back) and sleeps `handler` before it acks; the consumer's ack subjects watched (the
/// [`Wire`], given back); one message published, and its handler started.
async fn slow_jetstream_app(
    server: &NatsServer,
    tc: &TestClient,
    name: &str,
    handler: Duration,
) -> (Running, Arc<Mutex<u32>>, Wire) {
    let acks = Wire::watch(&tc.client, "$JS.ACK.ORDERS.>").await;
    let ev = events();
    let started = Arc::new(Mutex::new(0_u32));
    let count = started.clone();
    let app = start(server, &ev, |a| {
        a.mount(js_mount(name), move |_d: Delivery| {
            *count.lock().unwrap() += 1;
            async move {
                tokio::time::sleep(handler).await;
                Outcome::Ack
            }
        })
    })
    .await;
    tc.js_publish("orders.new", HeaderMap::new(), b"slow").await;
    eventually("the handler to start", || {
        (*started.lock().unwrap() > 0).then_some(())
    })
    .await;
    (app, started, acks)
}

/// The one message of [`slow_jetstream_app`] was handled once and acked, the `+ACK` last.
async fn acked_once(tc: &TestClient, acks: &Wire, started: &Mutex<u32>) {
    let info = eventually_info(tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
    assert_eq!(info.ack_floor.stream_sequence, 1, "{info:?}");
    let payloads = acks.payloads();
    assert_eq!(
        payloads.last().map(String::as_str),
        Some("+ACK"),
        "{payloads:?}"
    );
    assert_eq!(*started.lock().unwrap(), 1, "handled once");
}

/// Every handle dropped while a JetStream handler runs: the delivery still settles, its lease
/// is still renewed, and its `+ACK` reaches the server. (The app's NATS thread used to drop
/// its runtime, and with it the connection's task, a fixed 100 ms after the last handle went,
/// so the handler's `+ACK` was never sent and the message came back after `ack_wait`.)
#[test]
fn a_jetstream_delivery_running_when_every_handle_drops_is_still_acked() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        let (app, started, acks) = slow_jetstream_app(
            &server,
            &tc,
            "dropped-slow-js",
            Duration::from_millis(1_200),
        )
        .await;
        drop(app);
        acked_once(&tc, &acks, &started).await;
        // The handler outlives ack_wait (700 ms): its lease was still renewed.
        assert!(
            acks.payloads().contains(&"+WPI".to_owned()),
            "{:?}",
            acks.payloads()
        );
        // Past ack_wait: nothing came back to be handled again.
        quiet(1_000).await;
        assert_eq!(*started.lock().unwrap(), 1, "handled once");
        // And the app's lease loop, kept for the running handler, ended after it.
        logged(&["DEBUG", "the lease loop ends: every mount of the app"]).await;
    });
}

/// A started app whose one Core mount, `(name, subject)` with `max_attempts` 3, counts its
/// handler's runs (the count, given back) and sleeps `handler` before it returns `outcome`;
/// one message published, and its handler started.
async fn slow_core_app(
    server: &NatsServer,
    tc: &TestClient,
    (name, subject): (&str, &str),
    handler: Duration,
    outcome: Outcome,
) -> (Running, Arc<Mutex<u32>>) {
    let ev = events();
    let started = Arc::new(Mutex::new(0_u32));
    let count = started.clone();
    let app = start(server, &ev, |a| {
        a.mount(
            Mount::core_subject(name, subject).max_attempts(3),
            move |_d: Delivery| {
                *count.lock().unwrap() += 1;
                async move {
                    tokio::time::sleep(handler).await;
                    outcome
                }
            },
        )
    })
    .await;
    core_publish(tc, subject, HeaderMap::new(), b"x").await;
    eventually("the handler to start", || {
        (*started.lock().unwrap() > 0).then_some(())
    })
    .await;
    (app, started)
}

/// Every handle dropped while a Core handler runs that asks for a retry: its copy is still
/// published (the last attempt's decision is not lost with the app's NATS thread).
#[test]
fn a_core_retry_decided_after_every_handle_drops_still_publishes_its_copy() {
    run(async {
        let (server, tc, _r, _ev) = core_case().await;
        let wire = Wire::watch(&tc.client, "dropped-retry.in").await;
        let (app, started) = slow_core_app(
            &server,
            &tc,
            ("dropped-retry-core", "dropped-retry.in"),
            Duration::from_millis(400),
            Outcome::Retry,
        )
        .await;
        drop(app);
        let copies = eventually("the retry's copy on the wire", || {
            let all = wire.all();
            (all.len() >= 2).then_some(all)
        })
        .await;
        assert!(
            copies[1]
                .headers
                .contains(&("x-ruststream-retry-count".to_owned(), "1".to_owned())),
            "{copies:?}"
        );
        quiet(300).await;
        assert_eq!(
            *started.lock().unwrap(),
            1,
            "the stopped mount does not handle its copy"
        );
    });
}

/// Every handle dropped while a Core handler runs that asks for a delayed retry: its copy
/// falls due after the mount has stopped, so no grace period can publish it; it is lost, and
/// not silently (counted, and logged per mount).
#[test]
fn a_delayed_core_copy_left_when_every_handle_drops_is_counted_and_logged() {
    run(async {
        let (server, tc, _r, _ev) = core_case().await;
        let (app, _started) = slow_core_app(
            &server,
            &tc,
            ("dropped-delayed-core", "dropped-delayed.in"),
            Duration::from_millis(300),
            Outcome::RetryAfter(Duration::from_secs(60)),
        )
        .await;
        drop(app);
        logged(&[
            "WARN",
            "mount=dropped-delayed-core",
            "delayed Core copies lost: the app's Running was dropped without a shutdown",
        ])
        .await;
        assert_eq!(
            super::losses::core_losses_metric("dropped-delayed-core", "copy_at_shutdown"),
            1
        );
    });
}

/// The app's `Running` dropped while a `ShutdownHandle` is kept, then the handle asks for the
/// shutdown while a JetStream handler runs: with no `Running`, no graceful shutdown waits for
/// the handler, yet it still settles, and its `+ACK` reaches the server. (The mount loop used
/// to end without waiting for it, and the app's NATS thread, with the connection, ended
/// before the handler did: its result came after its lease had stopped, and was discarded.)
#[test]
fn a_shutdown_asked_through_a_handle_after_running_is_dropped_still_settles_what_runs() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        let (app, started, acks) =
            slow_jetstream_app(&server, &tc, "handle-kept-js", Duration::from_secs(8)).await;
        let handle = app.shutdown_handle();
        drop(app);
        handle.shutdown();
        // The handler ends 8 s after it started: past PATIENCE from here only if it hangs.
        quiet(6_000).await;
        acked_once(&tc, &acks, &started).await;
    });
}
