//! The conformance suite on the tokio adapter.

#![allow(clippy::unwrap_used, missing_docs)]

use ruststream_tokio as adapter;

/// Drives a scenario on a fresh multi-threaded tokio runtime.
fn run<F: std::future::Future<Output = ()>>(scenario: F) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(scenario);
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

/// tokio only: a handler is first polled on its mount loop's thread (a Core mount's on the
/// app's Core thread, a JetStream mount's on the app's NATS thread, beside the connection),
/// with the application's runtime entered, so that what it spawns runs on the application's
/// runtime; once it has to wait, the rest of it moves to a task there too. A handler whose
/// first poll did not run on its loop's thread, or whose spawned task or later polls did,
/// fails it.
#[test]
fn tokio_handlers_start_on_the_app_s_threads_and_the_rest_runs_on_the_application_s_runtime() {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use adapter::{App, Delivery, Mount, Outcome};

    type Seen = Arc<Mutex<Vec<(&'static str, String)>>>;

    fn thread_name() -> String {
        std::thread::current().name().unwrap_or("").to_owned()
    }

    /// A handler that writes down where each of its steps ran.
    fn recording(
        sink: Seen,
    ) -> impl Fn(Delivery) -> std::pin::Pin<Box<dyn Future<Output = Outcome> + Send>>
    + Send
    + Sync
    + 'static {
        move |_: Delivery| {
            let sink = sink.clone();
            Box::pin(async move {
                sink.lock().unwrap().push(("first poll", thread_name()));
                let spawned = tokio::spawn(async { thread_name() }).await.unwrap();
                sink.lock().unwrap().push(("spawned", spawned));
                tokio::time::sleep(Duration::from_millis(10)).await;
                sink.lock().unwrap().push(("after waiting", thread_name()));
                Outcome::Ack
            })
        }
    }

    run(async {
        let server = NatsServer::start();
        let client = async_nats::connect(server.url()).await.unwrap();
        async_nats::jetstream::new(client.clone())
            .create_stream(async_nats::jetstream::stream::Config {
                name: "THREADS".to_owned(),
                subjects: vec!["threads.js".to_owned()],
                ..Default::default()
            })
            .await
            .unwrap();
        let (core, jetstream): (Seen, Seen) = (Arc::default(), Arc::default());
        let running = App::new(&server.url())
            .mount(
                Mount::core_subject("threads-core", "threads.in"),
                recording(core.clone()),
            )
            .mount(
                Mount::jetstream("threads-js", "THREADS", "threads"),
                recording(jetstream.clone()),
            )
            .start()
            .await
            .expect("the app starts");
        client.publish("threads.in", "x".into()).await.unwrap();
        client.publish("threads.js", "x".into()).await.unwrap();
        client.flush().await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while (core.lock().unwrap().len() < 3 || jetstream.lock().unwrap().len() < 3)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        running.shutdown().await;
        for (seen, loop_thread) in [(core, "ruststream-core"), (jetstream, "ruststream-nats")] {
            let seen = seen.lock().unwrap().clone();
            assert_eq!(seen.len(), 3, "the handler ran to its end: {seen:?}");
            assert_eq!(seen[0], ("first poll", loop_thread.to_owned()), "{seen:?}");
            for (when, thread) in &seen[1..] {
                assert!(
                    !thread.is_empty() && !thread.starts_with("ruststream-"),
                    "{when}: on the application's runtime, not one of the app's threads: {seen:?}"
                );
            }
        }
    });
}

/// tokio only: an app lives no longer than the runtime it was started on. When that runtime
/// shuts down, the app's NATS thread stops with it (as the app's tasks would if they ran on
/// that runtime), and the app, looked at from another runtime, says it cannot go on.
#[test]
fn tokio_an_app_stops_with_the_runtime_it_was_started_on() {
    use std::time::Duration;

    use adapter::{App, Delivery, Mount, Outcome};

    let server = NatsServer::start();
    let first = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let running = first.block_on(async {
        App::new(&server.url())
            .mount(
                Mount::core_subject("with-runtime", "with-runtime.in"),
                |_: Delivery| async { Outcome::Ack },
            )
            .start()
            .await
            .expect("the app starts")
    });
    first.shutdown_timeout(Duration::from_secs(5));
    run(async move {
        let report = tokio::time::timeout(Duration::from_secs(20), running.until_signal())
            .await
            .expect("until_signal returns at once: the app's thread has stopped");
        let failed = report.expect_err("the app stopped with its runtime: an error");
        let failure = failed.report.failure.expect("the stop is reported");
        assert!(failure.contains("NATS thread"), "{failure}");
    });
}
