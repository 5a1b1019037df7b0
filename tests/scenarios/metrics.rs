//! Metrics through the `metrics` facade (issue 15): counted exactly, per mount, by the
//! recording recorder every test binary installs before its apps start.

use super::common::*;
use ruststream_tests::metrics::{counter, gauge, histogram};

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

fn count(name: &str, mount: &str, label: Option<(&str, &str)>) -> u64 {
    let mut labels = vec![("mount", mount)];
    labels.extend(label);
    counter(name, &labels)
}

fn wire(mount: &str, action: &str) -> u64 {
    count(
        "ruststream_wire_actions_total",
        mount,
        Some(("action", action)),
    )
}

fn outcome(mount: &str, outcome: &str) -> u64 {
    count(
        "ruststream_handler_outcomes_total",
        mount,
        Some(("outcome", outcome)),
    )
}

/// Every JetStream wire action but `+WPI` (below), each outcome, the dead letters by reason,
/// the handler durations, and the handler errors, counted exactly.
#[test]
fn metrics_count_jetstream_outcomes_and_wire_actions() {
    run(async {
        let (server, tc, acks, _r, ev) = js_case().await;
        let m = "js-metrics";
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount(m)
                    .max_attempts(2)
                    .dead_letter("dlq.orders")
                    .on_error(adapter::ErrorPolicy::Reject),
                |d: Delivery| async move {
                    let first = d.attempt.get() == 1;
                    Ok(match &d.payload[..] {
                        b"ack" => Outcome::Ack,
                        b"drop" => Outcome::Drop,
                        b"retry" => Outcome::Retry,
                        b"later" if first => Outcome::RetryAfter(Duration::from_millis(50)),
                        b"later" => Outcome::Ack,
                        _ => return Err("bad order"),
                    })
                },
            )
        })
        .await;
        for payload in [&b"ack"[..], b"drop", b"retry", b"later", b"bad"] {
            tc.js_publish("orders.new", HeaderMap::new(), payload).await;
        }
        acks.at_least(7).await;
        settled(&ev, 7).await;
        assert_eq!(count("messaging.client.consumed.messages", m, None), 7);
        for (o, n) in [
            ("ack", 2),
            ("drop", 1),
            ("retry", 2),
            ("retry_after", 1),
            ("reject", 1),
            ("none", 0),
        ] {
            assert_eq!(outcome(m, o), n, "outcome {o}");
        }
        assert_eq!(count("ruststream_handler_errors_total", m, None), 1);
        for (action, n) in [
            ("ack", 2),
            ("nak", 1),
            ("nak_delay", 1),
            ("term", 3),
            ("dead_letter", 2),
            ("copy", 0),
            ("wpi", 0),
        ] {
            assert_eq!(wire(m, action), n, "wire action {action}");
        }
        // The `Err` the error policy rejected counts as `handler-error`, as its provenance
        // header would say (rule 19), not as the `rejected` its plan gave.
        for (reason, n) in [
            ("limit", 1),
            ("rejected", 0),
            ("handler-error", 1),
            ("undecodable", 0),
        ] {
            assert_eq!(
                count("ruststream_dead_letters_total", m, Some(("reason", reason))),
                n,
                "dead letters for {reason}"
            );
        }
        let durations = histogram("messaging.process.duration", &[("mount", m)]);
        assert_eq!(durations.len(), 7, "{durations:?}");
        assert!(
            durations.iter().all(|d| (0.0..1.0).contains(d)),
            "{durations:?}"
        );
        assert_eq!(
            gauge("ruststream_handlers_waiting", &[("mount", m)]),
            Some(0.0)
        );
        app.shutdown().await;
    });
}

/// One vocabulary for why a message was dead-lettered (issue 41): for every reason of rule
/// 19, `ruststream_dead_letters_total{reason}` counts what the dead letters' own
/// `Ruststream-Reason` headers say, and the dead-letter log line names the same reason. A copy
/// too large goes without provenance (its dead letter would not fit with it), so its metric
/// and log line are checked alone.
#[test]
fn metrics_dead_letter_reasons_agree_with_provenance_headers() {
    run(async {
        let (server, tc, acks, _r, ev) = js_case().await;
        let (js, core) = ("js-reasons", "core-reasons");
        let app = start(&server, &ev, |a| {
            a.mount_json(
                js_mount(js)
                    .max_attempts(2)
                    .dead_letter("dlq.orders")
                    .provenance(),
                |order: Order, _d: Delivery| async move {
                    match order.id {
                        1 => Ok(Outcome::Retry),
                        2 => Ok(Outcome::Reject),
                        _ => Err("inventory down"),
                    }
                },
            )
            .mount(
                Mount::core_wildcard(core, "mreasons.in.*", "mreasons.retry")
                    .max_attempts(3)
                    .dead_letter("dlq.core")
                    .provenance(),
                |_d: Delivery| async { Outcome::Retry },
            )
        })
        .await;
        for payload in [
            &b"{\"id\":1}"[..],
            b"{\"id\":2}",
            b"{\"id\":3}",
            b"not json",
        ] {
            tc.js_publish("orders.new", HeaderMap::new(), payload).await;
        }
        // Fits as published; its copy would not (rule 21).
        let max = tc.client.server_info().max_payload;
        tc.client
            .publish("mreasons.in.a", bytes::Bytes::from(vec![b'x'; max - 10]))
            .await
            .expect("publish");
        tc.client.flush().await.expect("flush");
        // id 1: -NAK, then +TERM at the limit; id 2: +TERM; id 3: -NAK, +TERM; not json: +TERM.
        acks.at_least(6).await;
        settled(&ev, 7).await;
        let stored = loop {
            let stored = tc.stored("DLQ").await;
            if stored.len() >= 5 {
                break stored;
            }
            quiet(20).await;
        };
        assert_eq!(stored.len(), 5, "{stored:?}");
        let mut from_headers = std::collections::BTreeMap::<String, u64>::new();
        for (subject, headers, _) in &stored {
            let reasons: Vec<&String> = headers
                .iter()
                .filter(|(name, _)| name == "Ruststream-Reason")
                .map(|(_, value)| value)
                .collect();
            match subject.as_str() {
                "dlq.orders" => {
                    assert_eq!(reasons.len(), 1, "{headers:?}");
                    *from_headers.entry(reasons[0].clone()).or_default() += 1;
                }
                _ => assert!(reasons.is_empty(), "a copy too large: {headers:?}"),
            }
        }
        let want: std::collections::BTreeMap<String, u64> = [
            ("limit", 1),
            ("rejected", 1),
            ("handler-error", 1),
            ("undecodable", 1),
        ]
        .into_iter()
        .map(|(r, n)| (r.to_owned(), n))
        .collect();
        assert_eq!(from_headers, want);
        for reason in adapter::dead_letters::DeadLetterReason::ALL {
            let reason = reason.as_str();
            let (at_js, at_core) = match reason {
                "copy-too-large" => (0, 1),
                _ => (from_headers[reason], 0),
            };
            let metric = |m| count("ruststream_dead_letters_total", m, Some(("reason", reason)));
            assert_eq!(metric(js), at_js, "{js}: {reason}");
            assert_eq!(metric(core), at_core, "{core}: {reason}");
            let mount = match at_js {
                0 => core,
                _ => js,
            };
            logged(&[
                &format!("mount={mount}"),
                &format!("reason={reason}"),
                "dead letter published",
            ])
            .await;
        }
        app.shutdown().await;
    });
}

/// `+WPI`: each renewal on the wire is counted, and a handler that waits is in the
/// `ruststream_handlers_waiting` gauge while it runs.
#[test]
fn metrics_count_lease_renewals_and_waiting_handlers() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let m = "js-metrics-wpi";
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount(m),
                slow(&r, |_| Duration::from_millis(1500), |_| Outcome::Ack),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"slow").await;
        eventually("the handler waiting", || {
            (gauge("ruststream_handlers_waiting", &[("mount", m)]) == Some(1.0)).then_some(())
        })
        .await;
        settled(&ev, 1).await;
        let payloads = acks.payloads();
        let renewals = payloads.iter().filter(|p| *p == "+WPI").count() as u64;
        assert!(renewals >= 1, "{payloads:?}");
        assert_eq!(wire(m, "wpi"), renewals, "{payloads:?}");
        assert_eq!(wire(m, "ack"), 1);
        assert_eq!(
            gauge("ruststream_handlers_waiting", &[("mount", m)]),
            Some(0.0)
        );
        let durations = histogram("messaging.process.duration", &[("mount", m)]);
        assert_eq!(durations.len(), 1);
        assert!(durations[0] >= 1.4, "{durations:?}");
        app.shutdown().await;
    });
}

/// Core copies, at once and after a delay, counted when published; the delay queue's gauge
/// while one waits.
#[test]
fn metrics_count_core_copies_and_the_delay_queue() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let m = "core-metrics";
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject(m, "cmet.in").max_attempts(3),
                scripted(&r, |attempt, payload| match (payload, attempt) {
                    ("retry", _) => Outcome::Retry,
                    ("later", 1) => Outcome::RetryAfter(Duration::from_millis(500)),
                    _ => Outcome::Ack,
                }),
            )
        })
        .await;
        core_publish(&tc, "cmet.in", HeaderMap::new(), b"later").await;
        eventually("the copy waiting", || {
            (gauge("ruststream_delayed_copies", &[("mount", m)]) == Some(1.0)).then_some(())
        })
        .await;
        core_publish(&tc, "cmet.in", HeaderMap::new(), b"retry").await;
        settled(&ev, 5).await;
        assert_eq!(count("messaging.client.consumed.messages", m, None), 5);
        // `retry` at attempts 1 and 2 copies at once; at 3 it is let go (no dead letter).
        // `later` copies after its delay, then acks.
        assert_eq!(wire(m, "copy"), 3);
        assert_eq!(outcome(m, "retry"), 3);
        assert_eq!(outcome(m, "retry_after"), 1);
        assert_eq!(outcome(m, "ack"), 1);
        assert_eq!(wire(m, "ack"), 0, "Core has no acknowledgements");
        assert_eq!(
            gauge("ruststream_delayed_copies", &[("mount", m)]),
            Some(0.0)
        );
        assert_eq!(
            super::losses::core_losses_metric(m, "copy")
                + super::losses::core_losses_metric(m, "slow_consumer"),
            0
        );
        app.shutdown().await;
    });
}
