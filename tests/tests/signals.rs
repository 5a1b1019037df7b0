//! Shutdown on SIGTERM and SIGINT (rule 14), on both adapters, through `until_signal`.
//!
//! Signals go to the whole process, so this binary holds a single test that runs its phases
//! one after another: tokio first, then smol. The test sends the signals to its own process
//! with the shell's `kill`. It listens for both signals itself from the start, so that a
//! signal can never take the process down before the app under test listens.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ruststream_tests::{NatsServer, TestClient, eventually};

/// Sends `signal` (`TERM` or `INT`) to this process, with the shell's own `kill` (procps'
/// `kill(1)` is not on every machine).
fn signal_self(signal: &str) {
    let status = std::process::Command::new("sh")
        .args(["-c", "kill -s \"$1\" \"$2\"", "sh", signal])
        .arg(std::process::id().to_string())
        .status()
        .expect("sh runs");
    assert!(status.success(), "kill -s {signal} failed: {status}");
}

/// Time for `until_signal` to be polled and listening.
const LISTENING: Duration = Duration::from_millis(300);

/// Sends SIGTERM, and SIGINT after it when `twice`; waits for `report` (at most 10 s); gives
/// it with how long it took from the first signal.
async fn signalled<F: std::future::Future>(report: F, twice: bool) -> (F::Output, Duration) {
    let asked = Instant::now();
    signal_self("TERM");
    if twice {
        tokio::time::sleep(LISTENING).await;
        signal_self("INT");
    }
    let report = tokio::time::timeout(Duration::from_secs(10), report)
        .await
        .expect("until_signal returns");
    (report, asked.elapsed())
}

/// The phases on one adapter: `$adapter` is its crate, `$spawn` spawns a `Send + 'static`
/// future on its runtime and gives something to `.await` for the output.
macro_rules! phases {
    ($adapter:ident, $spawn:expr) => {{
        use $adapter::{App, Delivery, Mount, Outcome};
        let server = NatsServer::start();
        let tc = TestClient::connect(&server).await;
        let name = stringify!($adapter);

        // First one signal: the in-flight handler (500 ms) finishes within the grace period
        // and nothing is abandoned. Then a second signal during the shutdown: the grace period
        // (30 s) ends at once, and the hung handler (120 s) is reported abandoned.
        for (subject, sleep, signalled_twice) in [
            ("sig.slow", Duration::from_millis(500), false),
            ("sig.hang", Duration::from_secs(120), true),
        ] {
            let started = Arc::new(AtomicBool::new(false));
            let finished = Arc::new(AtomicBool::new(false));
            let (s, f) = (started.clone(), finished.clone());
            let running = App::new(&server.url())
                .grace_period(Duration::from_secs(30))
                .mount(Mount::core_subject(name, subject), move |_: Delivery| {
                    let (s, f) = (s.clone(), f.clone());
                    async move {
                        s.store(true, Ordering::SeqCst);
                        if sleep >= Duration::from_secs(60) {
                            // The hung handler waits on no Tokio timer: on smol, an abandoned
                            // handler's Tokio timer panics once the app's NATS thread (whose
                            // runtime it is on) stops, and printing that panic's backtrace on
                            // smol's one executor thread held up the end of the shutdown past
                            // this test's 10 s once in CI (documented in ruststream-smol).
                            std::future::pending::<()>().await;
                        }
                        tokio::time::sleep(sleep).await;
                        f.store(true, Ordering::SeqCst);
                        Outcome::Ack
                    }
                })
                .start()
                .await
                .expect("the app starts");
            let report = $spawn(running.until_signal());
            tokio::time::sleep(LISTENING).await;
            tc.client.publish(subject, "x".into()).await.unwrap();
            tc.client.flush().await.unwrap();
            eventually("the handler to start", || {
                started.load(Ordering::SeqCst).then_some(())
            })
            .await;
            let (report, took) = signalled(report, signalled_twice).await;
            let report = report.expect("a signalled shutdown is not a failure");
            assert!(
                took < Duration::from_secs(5),
                "{name} {subject}: took {took:?}"
            );
            if signalled_twice {
                assert_eq!(report.abandoned, [(name.to_owned(), 1)], "{name}");
            } else {
                assert!(
                    finished.load(Ordering::SeqCst),
                    "{name}: the handler finished first"
                );
                assert!(report.abandoned.is_empty(), "{name}: {report:?}");
            }
        }

        // A delayed Core copy due within the grace period (20 s of 30 s): the first signal
        // waits for it, the second ends the wait at once and reports it lost.
        let subject = "sig.copy";
        let running = App::new(&server.url())
            .grace_period(Duration::from_secs(30))
            .mount(
                Mount::core_subject(&format!("{name}-copy"), subject),
                |d: Delivery| async move {
                    match d.attempt.get() {
                        1 => Outcome::RetryAfter(Duration::from_secs(20)),
                        _ => Outcome::Ack,
                    }
                },
            )
            .start()
            .await
            .expect("the app starts");
        let report = $spawn(running.until_signal());
        tokio::time::sleep(LISTENING).await;
        tc.client.publish(subject, "x".into()).await.unwrap();
        tc.client.flush().await.unwrap();
        ruststream_tests::logged(&[&format!("mount={name}-copy"), "settled"]).await;
        let (report, took) = signalled(report, true).await;
        let report = report.expect("a signalled shutdown is not a failure");
        assert!(
            took < Duration::from_secs(5),
            "{name} with a copy waiting: took {took:?}"
        );
        assert_eq!(report.lost_copies, [(format!("{name}-copy"), 1)], "{name}");
    }};
}

#[test]
fn sigterm_shuts_down_gracefully_and_a_second_signal_ends_the_grace_period() {
    ruststream_tests::capture_logs();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            // Listening from the start: once Tokio has registered a handler for a signal, it
            // stays registered for the life of the process, so no signal takes it down.
            use tokio::signal::unix::{SignalKind, signal};
            let _term = signal(SignalKind::terminate()).unwrap();
            let _int = signal(SignalKind::interrupt()).unwrap();
            phases!(ruststream_tokio, |f| {
                let task = tokio::spawn(f);
                async { task.await.unwrap() }
            });
        });
    smol::block_on(async_compat::Compat::new(async {
        phases!(ruststream_smol, smol::spawn);
    }));
}
