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
/// runtime. Once it has to wait, a Core handler's rest moves to a task on the application's
/// runtime; a JetStream handler's goes on beside the connection while its polls are short,
/// and moves to the application's runtime after a poll longer than 1 ms; after three such
/// deliveries close together, so do the mount's next deliveries that wait (issue 39). A step that
/// ran anywhere else fails it. (The heaviness is timed on the wall clock: a loaded machine
/// that stops the NATS thread for over 1 ms in a light poll moves that delivery too, so the
/// light mount's three deliveries must go on beside the connection twice or more.)
#[test]
fn tokio_handlers_start_on_the_app_s_threads_and_the_rest_runs_where_the_mount_places_it() {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use adapter::{App, Delivery, Mount, Outcome};

    type Seen = Arc<Mutex<Vec<(&'static str, String)>>>;

    fn thread_name() -> String {
        std::thread::current().name().unwrap_or("").to_owned()
    }

    /// A handler that writes down where each of its steps ran; a heavy one blocks for 5 ms
    /// in a poll after its first wait, and writes down where it went on after that poll.
    fn recording(
        sink: Seen,
        heavy: bool,
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
                if heavy {
                    std::thread::sleep(Duration::from_millis(5));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    sink.lock()
                        .unwrap()
                        .push(("after a heavy poll", thread_name()));
                }
                Outcome::Ack
            })
        }
    }

    let app_s = |thread: &str| !thread.is_empty() && !thread.starts_with("ruststream-");
    run(async {
        let server = NatsServer::start();
        let client = async_nats::connect(server.url()).await.unwrap();
        async_nats::jetstream::new(client.clone())
            .create_stream(async_nats::jetstream::stream::Config {
                name: "THREADS".to_owned(),
                subjects: vec!["threads.js".to_owned(), "threads.heavy".to_owned()],
                ..Default::default()
            })
            .await
            .unwrap();
        let (core, jetstream, heavy): (Seen, Seen, Seen) = Default::default();
        let running = App::new(&server.url())
            .mount(
                Mount::core_subject("threads-core", "threads.in"),
                recording(core.clone(), false),
            )
            .mount(
                Mount::jetstream("threads-js", "THREADS", "threads").filter_subject("threads.js"),
                recording(jetstream.clone(), false),
            )
            .mount(
                Mount::jetstream("threads-heavy", "THREADS", "threads-heavy")
                    .filter_subject("threads.heavy"),
                recording(heavy.clone(), true),
            )
            .start()
            .await
            .expect("the app starts");
        client.publish("threads.in", "x".into()).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let wait = |seen: &Seen, n: usize| seen.lock().unwrap().len() >= n;
        for n in [3, 6, 9] {
            client.publish("threads.js", "x".into()).await.unwrap();
            client.flush().await.unwrap();
            while !wait(&jetstream, n) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // The heavy mount's deliveries one after the other: each comes after the heavy poll
        // of the one before.
        for n in [4, 8, 12, 16] {
            client.publish("threads.heavy", "x".into()).await.unwrap();
            client.flush().await.unwrap();
            while !wait(&heavy, n) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        while !wait(&core, 3) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        running.shutdown().await;
        let (core, jetstream, heavy) = (
            core.lock().unwrap().clone(),
            jetstream.lock().unwrap().clone(),
            heavy.lock().unwrap().clone(),
        );
        assert_eq!(core.len(), 3, "the handler ran to its end: {core:?}");
        assert_eq!(
            core[0],
            ("first poll", "ruststream-core".to_owned()),
            "{core:?}"
        );
        assert!(core[1..].iter().all(|(_, t)| app_s(t)), "{core:?}");
        let nats = "ruststream-nats".to_owned();
        assert_eq!(
            jetstream.len(),
            9,
            "the handlers ran to their end: {jetstream:?}"
        );
        for run in jetstream.chunks(3) {
            assert_eq!(run[0], ("first poll", nats.clone()), "{jetstream:?}");
            assert!(app_s(&run[1].1), "spawned: {jetstream:?}");
            assert_eq!(run[2].0, "after waiting", "{jetstream:?}");
        }
        let beside = jetstream.chunks(3).filter(|run| run[2].1 == nats).count();
        assert!(beside >= 2, "went on beside the connection: {jetstream:?}");
        assert_eq!(heavy.len(), 16, "the handlers ran to their end: {heavy:?}");
        for (k, run) in heavy.chunks(4).enumerate() {
            assert_eq!(run[0], ("first poll", nats.clone()), "{heavy:?}");
            assert_eq!(run[2].0, "after waiting", "{heavy:?}");
            if k < 3 {
                // Beside the connection (unless the machine stalled it), until its heavy poll.
                assert!(app_s(&run[3].1), "moved after its heavy poll: {heavy:?}");
            } else {
                assert!(
                    app_s(&run[2].1) && app_s(&run[3].1),
                    "after three heavy ones close together, the next delivery that waits goes on on the application's runtime: {heavy:?}"
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
