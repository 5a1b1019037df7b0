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
