//! The app on the simulator: the adapter's own App, mounts and handlers, on the model and the
//! virtual clock.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::stream;
use ruststream_sim::{App, Backoff, Delivery, Mount, Outcome, Record, Sim};

fn stream(name: &str, subjects: &[&str]) -> stream::Config {
    stream::Config {
        name: name.to_owned(),
        subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    }
}

#[test]
fn a_jetstream_delivery_is_dead_lettered_after_three_attempts_with_the_backoffs_delays() {
    let real = Instant::now();
    let (runs, dead) = Sim::run(|sim| async move {
        let runs: Arc<Mutex<Vec<(u64, Duration)>>> = Arc::default();
        let sink = runs.clone();
        let clock = sim.clone();
        let running = App::new(&sim.url())
            .stream(stream("ORDERS", &["orders.>"]))
            .stream(stream("DLQ", &["dlq.orders"]))
            .mount(
                Mount::jetstream("orders", "ORDERS", "worker")
                    .max_attempts(3)
                    .backoff(
                        Backoff::exponential(Duration::from_secs(1), Duration::from_secs(10))
                            .jitter(0.0),
                    )
                    .dead_letter("dlq.orders"),
                move |d: Delivery| {
                    sink.lock()
                        .unwrap()
                        .push((d.attempt.get(), clock.elapsed()));
                    async { Outcome::Retry }
                },
            )
            .start()
            .await
            .unwrap();
        sim.publish("orders.new", r#"{"id":1}"#).unwrap();
        sim.run_until("the dead letter", Duration::from_secs(60), |s| {
            s.stream_messages("DLQ").unwrap().len() == 1
        })
        .await
        .unwrap();
        running.shutdown().await;
        let journal = sim.journal();
        let acks: Vec<_> = journal
            .iter()
            .filter_map(|r| match r {
                Record::Acknowledged { kind, .. } => Some(format!("{kind:?}")),
                _ => None,
            })
            .collect();
        eprintln!("acks {acks:?}");
        let runs = runs.lock().unwrap().clone();
        (runs, sim.stream_messages("DLQ").unwrap())
    });
    eprintln!("runs {runs:?} real {:?}", real.elapsed());
    assert_eq!(runs.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(dead.len(), 1);
}

/// What a run leaves: every journal record with its virtual time from the start, inbox names
/// (random in async-nats) replaced by their order of first appearance, and the handler runs.
fn trace_of(sim: &Sim, start: Instant, runs: &[(String, u64, Duration)]) -> Vec<String> {
    let mut inboxes: Vec<String> = Vec::new();
    let mut name = |s: &str| -> String {
        let mut out = String::new();
        let mut rest = s;
        while let Some(at) = rest.find("_INBOX.") {
            out.push_str(&rest[..at + "_INBOX.".len()]);
            rest = &rest[at + "_INBOX.".len()..];
            let end = rest
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
            let token = &rest[..end];
            let n = inboxes.iter().position(|i| i == token).unwrap_or_else(|| {
                inboxes.push(token.to_owned());
                inboxes.len() - 1
            });
            out.push_str(&format!("inbox{n}"));
            rest = &rest[end..];
        }
        out.push_str(rest);
        out
    };
    let mut trace: Vec<String> = sim
        .journal()
        .iter()
        .map(|r| {
            let text = format!("{r:?}");
            // `at: Instant { .. }` is process-specific: the offset from the start instead.
            let at = match r {
                Record::Published { at, .. }
                | Record::Delivered { at, .. }
                | Record::Acknowledged { at, .. }
                | Record::MaxDeliveries { at, .. }
                | Record::Disconnected { at, .. } => at.saturating_duration_since(start),
                _ => Duration::ZERO,
            };
            let text = text
                .split_once(" }, ")
                .map_or(text.clone(), |(_, rest)| rest.to_owned());
            format!("{at:?} {}", name(&text))
        })
        .collect();
    trace.extend(
        runs.iter()
            .map(|(p, a, t)| format!("run {p} attempt {a} at {t:?}")),
    );
    trace
}

/// Core and JetStream mounts with retries, delays, a dead letter, concurrency and a dropped
/// connection: the same trace every run.
#[test]
fn the_same_scenario_gives_the_same_trace_every_run() {
    let once = || {
        Sim::run(|sim| async move {
            let start = sim.now();
            let runs: Arc<Mutex<Vec<(String, u64, Duration)>>> = Arc::default();
            let (js_sink, core_sink) = (runs.clone(), runs.clone());
            let (js_clock, core_clock) = (sim.clone(), sim.clone());
            let running = App::new(&sim.url())
                .stream(stream("ORDERS", &["orders.>"]))
                .stream(stream("DLQ", &["dlq.>"]))
                .mount(
                    Mount::jetstream("orders", "ORDERS", "worker")
                        .max_attempts(3)
                        .backoff(Backoff::exponential(
                            Duration::from_millis(200),
                            Duration::from_secs(5),
                        ))
                        .dead_letter("dlq.orders"),
                    move |d: Delivery| {
                        let payload = String::from_utf8_lossy(&d.payload).into_owned();
                        let attempt = d.attempt.get();
                        js_sink.lock().unwrap().push((
                            payload.clone(),
                            attempt,
                            js_clock.elapsed(),
                        ));
                        async move {
                            tokio::time::sleep(Duration::from_millis(30)).await;
                            match (payload.as_str(), attempt) {
                                ("fail", _) => Outcome::Retry,
                                ("twice", 1) => Outcome::RetryAfter(Duration::from_millis(700)),
                                _ => Outcome::Ack,
                            }
                        }
                    },
                )
                .mount(
                    Mount::core_subject("events", "events.in")
                        .max_attempts(2)
                        .dead_letter("dlq.events"),
                    move |d: Delivery| {
                        let payload = String::from_utf8_lossy(&d.payload).into_owned();
                        core_sink.lock().unwrap().push((
                            payload,
                            d.attempt.get(),
                            core_clock.elapsed(),
                        ));
                        async { Outcome::RetryAfter(Duration::from_millis(250)) }
                    },
                )
                .start()
                .await
                .unwrap();
            for (n, payload) in ["ok", "fail", "twice", "ok2"].iter().enumerate() {
                sim.publish("orders.new", *payload).unwrap();
                sim.publish("events.in", format!("event-{n}")).unwrap();
                sim.advance(Duration::from_millis(50)).await;
            }
            sim.advance(Duration::from_millis(300)).await;
            sim.drop_connections();
            sim.run_until("the dead letters", Duration::from_secs(60), |s| {
                s.stream_messages("DLQ").unwrap().len() == 5
            })
            .await
            .unwrap();
            sim.run_until_idle(Duration::from_secs(2), Duration::from_secs(60))
                .await
                .unwrap();
            running.shutdown().await;
            let runs = runs.lock().unwrap().clone();
            trace_of(&sim, start, &runs)
        })
    };
    let first = once();
    assert!(first.len() > 40, "a trace worth comparing: {first:#?}");
    for _ in 0..5 {
        let again = once();
        if again != first {
            let at = first.iter().zip(&again).position(|(a, b)| a != b);
            panic!(
                "a different trace, first at {at:?}:\n{:#?}\nvs\n{:#?}",
                at.map(|i| &first[i..(i + 5).min(first.len())]),
                at.map(|i| &again[i..(i + 5).min(again.len())])
            );
        }
    }
}
