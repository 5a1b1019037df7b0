//! Testing your handlers: the orders service of `examples/orders.rs`, unchanged, on the
//! simulator (`ruststream-sim`): its retries with the backoff's delays, its dead letters with
//! their provenance, its events and its Core request, with no nats-server and no waiting.
//! Times are virtual, so they are exact; each test prints the real time it took.
//!
//! ```sh
//! cargo test -p ruststream-tokio --test orders_on_the_simulator -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use ruststream_sim::{AckKind, App, Record, Sim};

#[path = "../examples/orders.rs"]
#[allow(dead_code, unreachable_pub)]
mod orders;

/// The headers of a stored message, as (name, value) pairs sorted by name.
fn headers(m: &ruststream_sim::StoredMessage) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = m
        .headers
        .iter()
        .flat_map(|h| h.iter())
        .flat_map(|(n, vs)| vs.iter().map(move |v| (n.to_string(), v.to_string())))
        .collect();
    pairs.sort();
    pairs
}

/// Each delivery of the ORDERS message at `sequence` and what the service answered, with the
/// virtual time since `sim` started: (delivery count, delivered at, ack kind, answered at).
fn attempts(sim: &Sim, sequence: u64) -> Vec<(u64, Duration, AckKind, Duration)> {
    let journal = sim.journal();
    let since = |at: &std::time::Instant| at.saturating_duration_since(sim.now() - sim.elapsed());
    let mut out = Vec::new();
    for record in &journal {
        match record {
            Record::Delivered {
                stream,
                stream_sequence,
                delivered,
                at,
                ..
            } if stream == "ORDERS" && *stream_sequence == sequence => {
                out.push((*delivered, since(at), AckKind::Unknown, Duration::ZERO));
            }
            Record::Acknowledged {
                stream,
                stream_sequence,
                kind,
                at,
                ..
            } if stream == "ORDERS" && *stream_sequence == sequence => {
                let last = out.last_mut().expect("an answer follows a delivery");
                (last.2, last.3) = (*kind, since(at));
            }
            _ => {}
        }
    }
    out
}

/// Held by the tests whose `stuck-` orders must time out, and by the one that repairs the
/// inventory (`orders::INVENTORY_REPAIRED`, a process-wide switch) for a while.
static STUCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `test` on the orders service started on a new simulation, shuts the service down,
/// and prints the real time it all took.
fn on_the_orders_service<F, Fut>(test: F)
where
    F: FnOnce(Sim) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let real = std::time::Instant::now();
    Sim::run(|sim| async move {
        let running = orders::orders_service(App::new(&sim.url()))
            .start()
            .await
            .expect("the service starts on the simulator");
        test(sim).await;
        let report = running.shutdown().await;
        assert!(report.abandoned.is_empty(), "{report:?}");
    });
    eprintln!("real time: {:?}", real.elapsed());
}

#[test]
fn a_stuck_order_is_dead_lettered_after_four_attempts_with_the_backoffs_delays() {
    let _stuck = STUCK.lock().unwrap_or_else(|e| e.into_inner());
    on_the_orders_service(|sim| async move {
        let order = r#"{"id":5,"sku":"stuck-fig","quantity":1}"#;
        sim.publish("orders.new", order).unwrap();
        sim.run_until("the dead letter", Duration::from_secs(10), |s| {
            s.stream_messages("DLQ").unwrap().len() == 1
        })
        .await
        .unwrap();

        let tries = attempts(&sim, 1);
        let counts: Vec<u64> = tries.iter().map(|t| t.0).collect();
        assert_eq!(counts, [1, 2, 3, 4], "{tries:?}");
        // Attempts 1–3 are answered -NAK with the backoff's delay (100 ms doubling, at most
        // 20 % less for jitter), and each next delivery comes that delay later, to the
        // millisecond (tokio's timers, virtual or not, fire on whole milliseconds).
        for (n, pair) in tries.windows(2).enumerate() {
            let AckKind::Nak(Some(delay)) = pair[0].2 else {
                panic!("attempt {} answered {:?}", n + 1, pair[0].2);
            };
            let full = Duration::from_millis(100 * (1 << n));
            assert!(
                delay <= full && delay >= full.mul_f64(0.8),
                "{delay:?} for {full:?}"
            );
            let due = pair[0].3 + delay;
            assert!(
                pair[1].1 >= due && pair[1].1 - due < Duration::from_millis(1),
                "redelivered on time: {tries:?}"
            );
        }
        // Attempt 4 is the last: the dead letter is stored, then the delivery terminated.
        assert_eq!(tries[3].2, AckKind::Term, "{tries:?}");
        let dead = &sim.stream_messages("DLQ").unwrap()[0];
        assert_eq!(dead.subject.as_str(), "dlq.orders");
        assert_eq!(&dead.payload[..], order.as_bytes());
        assert!(
            dead.stored_at
                .saturating_duration_since(sim.now() - sim.elapsed())
                <= tries[3].3,
            "confirmed before the +TERM"
        );
        let h = headers(dead);
        let value = |name: &str| {
            h.iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("no {name} in {h:?}"))
        };
        assert_eq!(value("Ruststream-Reason"), "handler-error");
        assert_eq!(value("Ruststream-Attempt"), "4");
        assert!(value("Ruststream-Error").contains("inventory timed out reserving stuck-fig"));
    });
}

#[test]
fn a_flaky_order_is_accepted_on_its_third_attempt_and_a_poison_one_rejected_at_once() {
    on_the_orders_service(|sim| async move {
        sim.publish("orders.new", r#"{"id":3,"sku":"flaky-plum","quantity":3}"#)
            .unwrap();
        sim.publish("orders.new", r#"{"id":4,"sku":"kiwi","quantity":0}"#)
            .unwrap();
        sim.publish("orders.new", "not an order").unwrap();
        sim.run_until(
            "the event and two dead letters",
            Duration::from_secs(10),
            |s| {
                s.stream_messages("EVENTS").unwrap().len() == 1
                    && s.stream_messages("DLQ").unwrap().len() == 2
            },
        )
        .await
        .unwrap();

        let flaky = attempts(&sim, 1);
        let answers: Vec<AckKind> = flaky.iter().map(|t| t.2).collect();
        assert!(
            matches!(
                answers[..],
                [AckKind::Nak(Some(_)), AckKind::Nak(Some(_)), AckKind::Ack]
            ),
            "{flaky:?}"
        );
        let event = &sim.stream_messages("EVENTS").unwrap()[0];
        assert_eq!(event.subject.as_str(), "order.accepted");
        let accepted: serde_json::Value = serde_json::from_slice(&event.payload).unwrap();
        assert_eq!(accepted["sku"], "flaky-plum");

        // The poison and the undecodable: one delivery each, dead-lettered at once.
        for (sequence, reason) in [(2, "rejected"), (3, "undecodable")] {
            let tries = attempts(&sim, sequence);
            assert_eq!(tries.len(), 1, "{tries:?}");
            assert_eq!(tries[0].2, AckKind::Term);
            let stored = sim.stream_messages("DLQ").unwrap();
            let dead = stored
                .iter()
                .find(|m| headers(m).contains(&("Ruststream-Reason".into(), reason.into())))
                .unwrap_or_else(|| panic!("a dead letter `{reason}` in {stored:?}"));
            assert_eq!(dead.subject.as_str(), "dlq.orders");
        }

        // The Core request, from a client of the test's own.
        let client = ruststream_sim::async_nats::connect(sim.url())
            .await
            .unwrap();
        let reply = client
            .request("orders.count", "".into())
            .await
            .expect("answered");
        let count: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
        assert_eq!(count["accepted"], 1);
    });
}

#[test]
fn a_stuck_orders_dead_letter_is_listed_and_replayed_once_the_inventory_is_repaired() {
    use ruststream_sim::dead_letters::{
        DeadLetterFilter, DeadLetterReason, DeadLetters, ReplayOptions,
    };
    let _stuck = STUCK.lock().unwrap_or_else(|e| e.into_inner());
    on_the_orders_service(|sim| async move {
        sim.publish("orders.new", r#"{"id":5,"sku":"stuck-fig","quantity":1}"#)
            .unwrap();
        sim.run_until("the dead letter", Duration::from_secs(10), |s| {
            s.stream_messages("DLQ").unwrap().len() == 1
        })
        .await
        .unwrap();
        let client = ruststream_sim::async_nats::connect(sim.url())
            .await
            .unwrap();
        let dlq = DeadLetters::open(client, "DLQ").await.expect("DLQ");
        let mut listed = Vec::new();
        dlq.each(&DeadLetterFilter::default(), false, |dead| {
            listed.push(dead)
        })
        .await
        .expect("listed");
        assert_eq!(listed.len(), 1);
        let record = &listed[0].record;
        assert_eq!(record.known_reason(), Some(DeadLetterReason::HandlerError));
        assert_eq!(record.subject.as_deref(), Some("orders.new"));
        assert_eq!((record.stream_sequence, record.attempt), (Some(1), Some(4)));

        orders::INVENTORY_REPAIRED.store(true, std::sync::atomic::Ordering::Relaxed);
        let options = ReplayOptions {
            delete: true,
            ..ReplayOptions::default()
        };
        let summary = dlq
            .replay(&options, |_| {}, |_| {})
            .await
            .expect("replayed");
        orders::INVENTORY_REPAIRED.store(false, std::sync::atomic::Ordering::Relaxed);
        assert_eq!((summary.stored, summary.deleted), (1, 1), "{summary:?}");
        sim.run_until("the replayed order's event", Duration::from_secs(10), |s| {
            s.stream_messages("EVENTS").unwrap().len() == 1
        })
        .await
        .unwrap();
        assert!(sim.stream_messages("DLQ").unwrap().is_empty());
        // Accepted on its first attempt: the replay is a new message, sequence 2.
        let replayed = attempts(&sim, 2);
        assert_eq!(replayed.len(), 1, "{replayed:?}");
        assert_eq!(replayed[0].2, AckKind::Ack);
    });
}
