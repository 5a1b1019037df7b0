//! The conformance suite on the smol adapter: the same scenarios as `tokio.rs`.

#![allow(clippy::unwrap_used, missing_docs)]

use ruststream_smol as adapter;

/// Drives a scenario on smol. The scenario's own test client (async-nats, Tokio timers) runs
/// inside async-compat's Tokio context; the app's tasks run on smol's executor.
fn run<F: std::future::Future<Output = ()>>(scenario: F) {
    smol::block_on(async_compat::Compat::new(scenario));
}

/// Each scenario's server: a real nats-server.
use ruststream_tests::NatsServer;

/// A publish of bytes async-nats refuses to build: over a raw connection to the real server.
use ruststream_tests::raw::raw_publish;

/// Every scenario runs here, those that need a real server's process included.
macro_rules! on_real_server {
    ($($item:item)*) => { $($item)* };
}

#[path = "../scenarios/mod.rs"]
mod scenarios;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use adapter::{App, Delivery, Mount, Outcome};

/// smol only: a user's own async-nats client, built in plain `smol::block_on` (no Tokio
/// context around the test) with the crate's `Compat`, given to the app, and used outside
/// any handler: a Core publish as it is, JetStream calls inside `Compat`.
#[test]
fn smol_users_own_client_works_through_compat() {
    use adapter::{Compat, async_nats};
    smol::block_on(async {
        let server = NatsServer::start();
        let client = Compat::new(async_nats::connect(server.url()))
            .await
            .expect("connects inside Compat");
        let js = Compat::new(async { async_nats::jetstream::new(client.clone()) }).await;
        Compat::new(js.create_stream(async_nats::jetstream::stream::Config {
            name: "OWN".into(),
            subjects: vec!["own.js".into()],
            storage: async_nats::jetstream::stream::StorageType::Memory,
            ..Default::default()
        }))
        .await
        .expect("a JetStream call inside Compat");
        let handled = Arc::new(Mutex::new(Vec::new()));
        let (core_sink, js_sink) = (handled.clone(), handled.clone());
        let running = App::with_client(client.clone())
            .mount(
                Mount::core_subject("own-core", "own.core"),
                move |d: Delivery| {
                    core_sink.lock().unwrap().push(d.subject.to_string());
                    async { Outcome::Ack }
                },
            )
            .mount(
                Mount::jetstream("own-js", "OWN", "worker"),
                move |d: Delivery| {
                    js_sink.lock().unwrap().push(d.subject.to_string());
                    async { Outcome::Ack }
                },
            )
            .start()
            .await
            .expect("the app starts on the user's client");
        client
            .publish("own.core", "x".into())
            .await
            .expect("a Core publish, as it is");
        client.flush().await.expect("flush");
        Compat::new(async { js.publish("own.js", "y".into()).await?.await })
            .await
            .expect("a JetStream publish inside Compat");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut seen = handled.lock().unwrap().clone();
            seen.sort();
            if seen == ["own.core", "own.js"] {
                break;
            }
            assert!(Instant::now() < deadline, "handled only {seen:?}");
            smol::Timer::after(Duration::from_millis(20)).await;
        }
        let report = running.shutdown().await;
        assert!(report.abandoned.is_empty(), "{report:?}");
    });
}
