//! The conformance suite on the simulator: the same scenarios as `tokio.rs` and `smol.rs`, on
//! `ruststream-sim`'s app (the adapter on its virtual-time runtime) and its model of NATS and
//! JetStream, served on loopback. Every scenario's server is a [`SimServer`]; virtual time
//! makes the suite's waits free.
//!
//! Scenarios inside `on_real_server!` are not compiled here: each says why at its wrapper (a
//! subject that is not UTF-8, which the model's text subjects cannot hold; the app's own NATS
//! thread, which the simulator's runtime does not have). A header block async-nats cannot
//! read is played here: the model forwards it byte for byte ([`raw_publish`]).

#![allow(clippy::unwrap_used, missing_docs)]

use ruststream_sim as adapter;

/// Each scenario's server: the simulator's model.
use ruststream_tests::sim::SimServer as NatsServer;

/// A publish of bytes async-nats refuses to build: into the model, which forwards it as it is.
use ruststream_tests::sim::raw_publish;

/// Drives a scenario on the simulator's runtime: current-thread tokio, its clock paused.
fn run<F: std::future::Future<Output = ()>>(scenario: F) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread tokio runtime")
        .block_on(scenario);
}

/// Scenarios the model cannot play (each says why): not on the simulator.
macro_rules! on_real_server {
    ($($item:item)*) => {};
}

#[path = "../scenarios/mod.rs"]
mod scenarios;

/// Rule 24 over random interleavings: whatever the order in which the deliveries of three keys
/// arrive, how long each runs and how many run at once, no two runs of one key overlap, each
/// key's runs start in the order its deliveries arrived, and every delivery is acked once.
mod keys_over_random_interleavings {
    use proptest::prelude::*;

    use super::run;
    use crate::scenarios::common::*;
    use crate::scenarios::keys::{assert_one_at_a_time, spans, timed};

    /// One message: its key (0..3) and how long its handler runs, in ms.
    fn messages() -> impl Strategy<Value = Vec<(u8, u64)>> {
        proptest::collection::vec((0u8..3, 0u64..40), 1..14)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]

        #[test]
        fn runs_of_one_key_never_overlap_and_start_in_arrival_order(
            messages in messages(),
            concurrency in prop_oneof![Just(1usize), Just(2), Just(64)],
            core in any::<bool>(),
        ) {
            run(async {
                let server = NatsServer::start();
                let tc = js_setup(&server).await;
                let s = spans();
                let ev = events();
                let sleeps: std::collections::HashMap<String, u64> = messages
                    .iter()
                    .enumerate()
                    .map(|(i, (k, ms))| (format!("{k}-{i}"), *ms))
                    .collect();
                let mount = if core {
                    Mount::core_wildcard("keyed", "orders.*.new", "orders.copies")
                } else {
                    js_mount("keyed")
                };
                let app = start(&server, &ev, |a| {
                    a.mount(
                        mount
                            .key(adapter::Key::subject_token(1))
                            .concurrency(std::num::NonZeroUsize::new(concurrency).unwrap()),
                        timed(
                            &s,
                            move |p| Duration::from_millis(sleeps[p]),
                            |_, _| Outcome::Ack,
                        ),
                    )
                })
                .await;
                for (i, (k, _)) in messages.iter().enumerate() {
                    let subject = format!("orders.{k}.new");
                    let payload = bytes::Bytes::from(format!("{k}-{i}"));
                    if core {
                        tc.client.publish(subject, payload).await.unwrap();
                    } else {
                        tc.js.publish(subject, payload).await.unwrap().await.unwrap();
                    }
                }
                tc.client.flush().await.unwrap();
                eventually("every run", || {
                    (s.lock().unwrap().len() == messages.len()).then_some(())
                })
                .await;
                let order: Vec<(String, Vec<String>)> = (0u8..3)
                    .map(|k| {
                        let payloads = messages
                            .iter()
                            .enumerate()
                            .filter(|(_, (key, _))| *key == k)
                            .map(|(i, _)| format!("{k}-{i}"))
                            .collect();
                        (k.to_string(), payloads)
                    })
                    .collect();
                let order: Vec<(&str, Vec<&str>)> = order
                    .iter()
                    .map(|(k, p)| (k.as_str(), p.iter().map(String::as_str).collect()))
                    .collect();
                let order: Vec<(&str, &[&str])> =
                    order.iter().map(|(k, p)| (*k, p.as_slice())).collect();
                assert_one_at_a_time(&s, &order);
                settled(&ev, messages.len()).await;
                quiet(100).await;
                assert_eq!(ev.lock().unwrap().len(), messages.len(), "one settlement each");
                app.shutdown().await;
            });
        }
    }
}
