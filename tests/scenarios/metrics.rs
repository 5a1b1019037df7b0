//! Metrics through the `metrics` facade (issue 15): counted exactly, per mount, by the
//! recording recorder every test binary installs before its apps start.

use super::common::*;
use ruststream_tests::metrics::{counter, gauge, histogram};

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
        for (reason, n) in [("limit", 1), ("rejected", 1), ("undecodable", 0)] {
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
