//! Part C, the Core rows: one test per row.

use super::common::*;

#[test]
fn row_10_core_ack_logs_unsupported() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-ack-10", "c10.in"),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        core_publish(&tc, "c10.in", HeaderMap::new(), b"x").await;
        settled(&ev, 1).await;
        logged(&["AckError::Unsupported", "mount=core-ack-10"]).await;
        // Rule 22: observers see the handler's outcome, not an error.
        assert_eq!(dispositions(&ev), [Disposition::Acked]);
        app.shutdown().await;
    });
}

#[test]
fn row_11_core_drop_logs_unsupported() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-drop-11", "c11.in").max_attempts(3),
                scripted(&r, |_, _| Outcome::Drop),
            )
        })
        .await;
        let wire = Wire::watch(&tc.client, "c11.in").await;
        core_publish(&tc, "c11.in", HeaderMap::new(), b"x").await;
        settled(&ev, 1).await;
        logged(&["AckError::Unsupported", "mount=core-drop-11"]).await;
        quiet(300).await;
        assert_eq!(wire.all().len(), 1, "no copy for drop");
        assert_eq!(dispositions(&ev), [Disposition::Dropped]);
        app.shutdown().await;
    });
}

#[test]
fn row_12_core_retry_without_limit_only_logs() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-retry-12", "c12.in"),
                scripted(&r, |_, _| Outcome::Retry),
            )
        })
        .await;
        let wire = Wire::watch(&tc.client, "c12.in").await;
        core_publish(&tc, "c12.in", HeaderMap::new(), b"x").await;
        core_publish(&tc, "c12.in", HeaderMap::new(), b"y").await;
        settled(&ev, 2).await;
        logged(&["AckError::Unsupported", "mount=core-retry-12"]).await;
        // Rule 22: a warning too, once per mount however many retries do nothing.
        logged(&["WARN", "mount=core-retry-12", "retry does nothing"]).await;
        quiet(300).await;
        assert_eq!(
            log_lines_for("core-retry-12", "retry does nothing").len(),
            1,
            "warned once"
        );
        assert_eq!(wire.all().len(), 2, "no copy without a limit");
        assert_eq!(attempts(&r), [1, 1]);
        assert_eq!(
            dispositions(&ev),
            [Disposition::Unsupported, Disposition::Unsupported]
        );
        app.shutdown().await;
    });
}

#[test]
fn row_13_core_retry_below_limit_copies_now() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let (rw, evw) = (runs(), events());
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-retry-13", "c13.in").max_attempts(3),
                scripted(&r, |attempt, _| {
                    if attempt < 2 {
                        Outcome::Retry
                    } else {
                        Outcome::Ack
                    }
                }),
            )
        })
        .await;
        let app_w = start(&server, &evw, |a| {
            a.mount(
                Mount::core_wildcard("core-wild-13", "c13w.*", "c13w.retry").max_attempts(3),
                scripted(&rw, |attempt, _| {
                    if attempt < 2 {
                        Outcome::Retry
                    } else {
                        Outcome::Ack
                    }
                }),
            )
        })
        .await;
        let own = Wire::watch(&tc.client, "c13.in").await;
        let named = Wire::watch(&tc.client, "c13w.retry").await;
        core_publish(
            &tc,
            "c13.in",
            headers(&[("Trace-Id", "t1"), ("Nats-Expected-Stream", "X")]),
            b"p13",
        )
        .await;
        core_publish(&tc, "c13w.eu", HeaderMap::new(), b"p13w").await;
        let seen = own.at_least(2).await;
        assert_eq!(
            seen[1].headers,
            [
                ("Trace-Id".to_owned(), "t1".to_owned()),
                ("x-ruststream-retry-count".to_owned(), "1".to_owned())
            ]
        );
        assert_eq!(&seen[1].payload[..], b"p13");
        assert_copies(&named, &[("c13w.retry", "p13w", "1")]).await;
        eventually("both copies handled", || {
            (attempts(&r) == [1, 2] && attempts(&rw) == [1, 2]).then_some(())
        })
        .await;
        logged(&["AckError::Unsupported", "mount=core-retry-13"]).await;
        assert_eq!(dispositions(&ev)[0], Disposition::Retried);
        app.shutdown().await;
        app_w.shutdown().await;
    });
}

#[test]
fn row_14_core_retry_after_copies_after_the_delay() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-after-14", "c14.in"), // no limit: still a copy (rule 6)
                scripted(&r, |attempt, _| {
                    if attempt == 1 {
                        Outcome::RetryAfter(Duration::from_millis(300))
                    } else {
                        Outcome::Ack
                    }
                }),
            )
        })
        .await;
        let wire = Wire::watch(&tc.client, "c14.in").await;
        core_publish(&tc, "c14.in", HeaderMap::new(), b"later").await;
        assert_copies(&wire, &[("c14.in", "later", ""), ("c14.in", "later", "1")]).await;
        let seen = wire.all();
        let gap = seen[1].at - seen[0].at;
        assert!(gap >= Duration::from_millis(300), "copy after {gap:?}");
        assert!(gap < Duration::from_secs(5), "copy after {gap:?}");
        assert_eq!(
            seen[1].headers,
            [("x-ruststream-retry-count".to_owned(), "1".to_owned())]
        );
        eventually("the copy handled", || {
            (attempts(&r) == [1, 2]).then_some(())
        })
        .await;
        assert_eq!(
            dispositions(&ev),
            [Disposition::Delayed, Disposition::Acked]
        );
        app.shutdown().await;
    });
}

#[test]
fn row_15_core_at_limit_dead_letter() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        tc.stream("DLQ", &["dlq.>"]).await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-dlq-15", "c15.in")
                    .max_attempts(2)
                    .dead_letter("dlq.c15"),
                scripted(&r, |_, _| Outcome::Retry),
            )
        })
        .await;
        core_publish(&tc, "c15.in", headers(&[("Trace-Id", "t15")]), b"p15").await;
        eventually("a dead letter", || {
            (dispositions(&ev).contains(&Disposition::DeadLettered)).then_some(())
        })
        .await;
        assert_eq!(attempts(&r), [1, 2]);
        let stored = assert_dead_letters(&tc, "DLQ", &[("dlq.c15", b"p15")]).await;
        // The delivery as it arrived: the attempt-2 copy, with its retry-count header.
        assert_eq!(
            stored[0].1,
            [
                ("Trace-Id".to_owned(), "t15".to_owned()),
                ("x-ruststream-retry-count".to_owned(), "1".to_owned())
            ]
        );
        logged(&[
            "WARN",
            "mount=core-dlq-15",
            "dead_letter=dlq.c15",
            "dead letter published",
        ])
        .await;
        app.shutdown().await;
    });
}

#[test]
fn row_16_core_at_limit_without_dead_letter_warns() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-letgo-16", "c16.in").max_attempts(2),
                scripted(&r, |_, _| Outcome::Retry),
            )
        })
        .await;
        let wire = Wire::watch(&tc.client, "c16.in").await;
        core_publish(&tc, "c16.in", HeaderMap::new(), b"x").await;
        logged(&["WARN", "mount=core-letgo-16", "let go"]).await;
        quiet(300).await;
        assert_eq!(attempts(&r), [1, 2]);
        assert_eq!(
            wire.all().len(),
            2,
            "the original and one copy, nothing more"
        );
        assert_eq!(
            dispositions(&ev),
            [Disposition::Retried, Disposition::LetGo]
        );
        app.shutdown().await;
    });
}

#[test]
fn row_17_core_arrives_past_limit_handler_not_run() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        tc.stream("DLQ", &["dlq.>"]).await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-past-17", "c17.in")
                    .max_attempts(3)
                    .dead_letter("dlq.c17"),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        let (r2, ev2) = (runs(), events());
        let app2 = start(&server, &ev2, |a| {
            a.mount(
                Mount::core_subject("core-past-17b", "c17b.in").max_attempts(3),
                scripted(&r2, |_, _| Outcome::Ack),
            )
        })
        .await;
        core_publish(
            &tc,
            "c17.in",
            headers(&[("x-ruststream-retry-count", "3")]),
            b"p17",
        )
        .await;
        core_publish(
            &tc,
            "c17b.in",
            headers(&[("x-ruststream-retry-count", "7")]),
            b"p17b",
        )
        .await;
        let e = settled(&ev, 1).await;
        assert_eq!(e[0].disposition, Disposition::DeadLettered);
        assert!(!e[0].handler_ran);
        let e2 = settled(&ev2, 1).await;
        assert_eq!(e2[0].disposition, Disposition::LetGo);
        assert!(
            attempts(&r).is_empty() && attempts(&r2).is_empty(),
            "handlers never ran"
        );
        assert_eq!(tc.stored("DLQ").await.len(), 1);
        logged(&["WARN", "mount=core-past-17b", "let go"]).await;
        app.shutdown().await;
        app2.shutdown().await;
    });
}

#[test]
fn row_18_core_no_outcome_nothing() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-none-18", "c18.in").max_attempts(3),
                scripted(&r, |_, _| Outcome::None),
            )
        })
        .await;
        let wire = Wire::watch(&tc.client, "c18.in").await;
        core_publish(&tc, "c18.in", HeaderMap::new(), b"x").await;
        settled(&ev, 1).await;
        quiet(300).await;
        assert_eq!(wire.all().len(), 1);
        assert_eq!(dispositions(&ev), [Disposition::NoOutcome]);
        assert!(log_lines_for("core-none-18", "AckError::Unsupported").is_empty());
        app.shutdown().await;
    });
}

/// Row 13 under load: a burst of Core retries through a client whose command channel holds
/// one command, so that copies often find it full and wait in the mount loop (issue 13's
/// in-place copy). Every message runs once at attempt 1 and once at attempt 2, and the copy's
/// handler sees the delivered headers (shared with the runtime, not copied) plus the retry
/// count.
#[test]
fn row_13_core_retries_in_a_burst_through_a_full_client() {
    run(async {
        let (server, tc, _r, ev) = core_case().await;
        const N: usize = 400;
        /// A run: attempt, payload, its `Trace-Id` and retry-count headers.
        type Run = (u64, String, Option<String>, Option<String>);
        let seen: Arc<Mutex<Vec<Run>>> = Arc::default();
        let sink = seen.clone();
        let own = adapter::connect_url(
            &server.url(),
            adapter::async_nats::ConnectOptions::new().client_capacity(1),
        )
        .await
        .expect("the application's client");
        let sink_events = ev.clone();
        let app = App::with_client(own)
            .grace_period(Duration::from_secs(2))
            .on_settled(move |s| sink_events.lock().unwrap().push(s.clone()))
            .mount(
                Mount::core_subject("core-burst-13", "c13b.in").max_attempts(3),
                move |d: Delivery| {
                    let header = |name: &str| {
                        d.headers
                            .as_deref()
                            .and_then(|h| h.get(name))
                            .map(|v| v.as_str().to_owned())
                    };
                    sink.lock().unwrap().push((
                        d.attempt.get(),
                        String::from_utf8_lossy(&d.payload).into_owned(),
                        header("Trace-Id"),
                        header("x-ruststream-retry-count"),
                    ));
                    std::future::ready(match d.attempt.get() {
                        1 => Outcome::Retry,
                        _ => Outcome::Ack,
                    })
                },
            )
            .start()
            .await
            .expect("the app starts");
        for i in 0..N {
            tc.client
                .publish_with_headers(
                    "c13b.in",
                    headers(&[("Trace-Id", &format!("t{i}"))]),
                    format!("p{i}").into(),
                )
                .await
                .expect("publish");
        }
        tc.client.flush().await.expect("flush");
        settled(&ev, 2 * N).await;
        quiet(200).await;
        let mut runs = seen.lock().unwrap().clone();
        runs.sort();
        let expected: Vec<_> = (1..=2u64)
            .flat_map(|attempt| {
                (0..N).map(move |i| {
                    (
                        attempt,
                        format!("p{i}"),
                        Some(format!("t{i}")),
                        (attempt == 2).then(|| "1".to_owned()),
                    )
                })
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(
            runs, expected,
            "each message once per attempt, headers as delivered"
        );
        let dispositions = dispositions(&ev);
        let retried = dispositions
            .iter()
            .filter(|d| **d == Disposition::Retried)
            .count();
        assert_eq!((retried, dispositions.len()), (N, 2 * N));
        let losses = app.core_losses();
        assert!(losses.is_empty(), "nothing lost: {losses:?}");
        app.shutdown().await;
    });
}

/// Part C, Core `reject` with a dead-letter subject (rule 17): at attempt 1 of 3 the delivery
/// is dead-lettered as it arrived, and no copy is published.
#[test]
fn row_core_reject_dead_letter() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        tc.stream("DLQ", &["dlq.>"]).await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-reject-dlq", "crj.in")
                    .max_attempts(3)
                    .dead_letter("dlq.crj"),
                scripted(&r, |_, _| Outcome::Reject),
            )
        })
        .await;
        let wire = Wire::watch(&tc.client, "crj.in").await;
        core_publish(&tc, "crj.in", headers(&[("Trace-Id", "tr")]), b"poison").await;
        let stored = assert_dead_letters(&tc, "DLQ", &[("dlq.crj", b"poison")]).await;
        assert_eq!(stored[0].1, [("Trace-Id".to_owned(), "tr".to_owned())]);
        quiet(300).await;
        assert_eq!(attempts(&r), [1]);
        assert_eq!(wire.all().len(), 1, "the original only: no copy");
        assert_eq!(dispositions(&ev), [Disposition::DeadLettered]);
        app.shutdown().await;
    });
}

/// Part C, Core `reject` without a dead-letter subject: nothing is published, and a warning
/// names the mount.
#[test]
fn row_core_reject_without_dead_letter_warns() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-reject", "crn.in").max_attempts(3),
                scripted(&r, |_, _| Outcome::Reject),
            )
        })
        .await;
        let wire = Wire::watch(&tc.client, "crn.in").await;
        core_publish(&tc, "crn.in", HeaderMap::new(), b"x").await;
        logged(&["WARN", "mount=core-reject", "rejected", "let go"]).await;
        quiet(300).await;
        assert_eq!(attempts(&r), [1]);
        assert_eq!(wire.all().len(), 1, "the original only: no copy");
        assert_eq!(dispositions(&ev), [Disposition::LetGo]);
        app.shutdown().await;
    });
}
