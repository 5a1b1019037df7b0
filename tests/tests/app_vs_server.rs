//! The app on the simulator against the app on a real nats-server: a proptest draws scenarios
//! (a Core or a JetStream mount, `max_attempts`, a dead-letter subject or none, each
//! attempt's outcome and how long the handler takes) and runs each twice, with the same
//! mount and handler: on `ruststream-sim` (virtual time) and on `ruststream-tokio` against
//! this suite's nats-server (real time). The handler runs (attempt, when) and what reaches the
//! wire (acknowledgements, Core copies with their retry counts, dead letters) must agree,
//! times within [`TOLERANCE`]. This keeps the simulator's model honest where users rely on it.
//!
//! The sample is bounded: [`CASES`] scenarios from a fixed seed, each a few seconds of real
//! time at most.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use ruststream_tests::NatsServer;
use ruststream_tokio::async_nats::{self, jetstream};
use ruststream_tokio::{AnyRuntime, AppOn, Backoff, Delivery, Mount, Outcome};
use tokio::time::Instant;

/// How many scenarios the sample draws.
const CASES: usize = 12;

/// How far a time on the real server may be from the simulator's: scheduling on a loaded
/// machine, and nats-server's own delivery latency.
const TOLERANCE: Duration = Duration::from_millis(150);

/// How long nothing must happen before a scenario is over (longer than any delay it draws).
const QUIET: Duration = Duration::from_millis(1_200);

/// The longest a scenario may take.
const LIMIT: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy)]
enum Step {
    Ack,
    Retry,
    RetryAfter(u64),
    Drop,
    Reject,
}

#[derive(Debug, Clone)]
struct Case {
    jetstream: bool,
    max_attempts: u32,
    dead_letter: bool,
    /// Attempt n's step and handler time (ms); the last repeats.
    steps: Vec<(Step, u64)>,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => Just(Step::Ack),
        4 => Just(Step::Retry),
        3 => (100u64..400).prop_map(Step::RetryAfter),
        1 => Just(Step::Drop),
        1 => Just(Step::Reject),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        1u32..=4,
        any::<bool>(),
        proptest::collection::vec(
            (step(), prop_oneof![3 => Just(0u64), 1 => 20u64..150]),
            1..=4,
        ),
    )
        .prop_map(|(jetstream, max_attempts, dead_letter, steps)| Case {
            jetstream,
            max_attempts,
            dead_letter,
            steps,
        })
}

/// What a run of a scenario left: handler runs (attempt, when) and the wire (what, when),
/// times from the publish.
#[derive(Debug, Clone, Default)]
struct Observed {
    runs: Vec<(u64, Duration)>,
    wire: Vec<(String, Duration)>,
}

fn outcome(step: Step) -> Outcome {
    match step {
        Step::Ack => Outcome::Ack,
        Step::Retry => Outcome::Retry,
        Step::RetryAfter(ms) => Outcome::RetryAfter(Duration::from_millis(ms)),
        Step::Drop => Outcome::Drop,
        Step::Reject => Outcome::Reject,
    }
}

/// The scenario's mount and handler on `app`, the same for both sides.
fn mounted<R: AnyRuntime>(
    app: AppOn<R>,
    case: &Case,
    runs: &Arc<Mutex<Vec<(u64, Instant)>>>,
) -> AppOn<R> {
    let mount = if case.jetstream {
        Mount::jetstream("diff", "ORDERS", "worker").ack_wait(Duration::from_secs(5))
    } else {
        Mount::core_subject("diff", "events.in")
    };
    let mut mount = mount
        .max_attempts(case.max_attempts)
        .backoff(Backoff::exponential(
            Duration::from_millis(100),
            Duration::from_millis(400),
        ));
    if case.dead_letter {
        mount = mount.dead_letter("dlq.diff");
    }
    let (steps, runs) = (case.steps.clone(), runs.clone());
    app.grace_period(Duration::from_secs(2))
        .mount(mount, move |d: Delivery| {
            let attempt = d.attempt.get();
            runs.lock().unwrap().push((attempt, Instant::now()));
            let index = usize::try_from(attempt - 1).unwrap().min(steps.len() - 1);
            let (step, ms) = steps[index];
            async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                outcome(step)
            }
        })
}

/// The subjects the comparison watches, by prefix: the JetStream acknowledgements of the
/// `ORDERS` stream, Core messages and their copies, and dead letters.
const WATCHED: [&str; 3] = ["$JS.ACK.ORDERS.", "events.", "dlq."];

/// Runs `case` on the app `app` connected to `url`: the streams, a watch on the wire, the
/// app, one message, then waits until [`QUIET`].
async fn observe<R: AnyRuntime>(url: &str, app: AppOn<R>, case: &Case) -> Observed {
    let client = async_nats::connect(url).await.expect("the test client");
    let js = jetstream::new(client.clone());
    for (name, subject) in [("ORDERS", "orders.>"), ("DLQ", "dlq.>")] {
        js.create_stream(jetstream::stream::Config {
            name: name.to_owned(),
            subjects: vec![subject.to_owned()],
            storage: jetstream::stream::StorageType::Memory,
            ..Default::default()
        })
        .await
        .expect("a stream");
    }
    // One subscription for the whole wire, read by one task: the server sends a connection's
    // messages in the order it routed them, and so they are recorded. (A subscription and a
    // task for each subject recorded a dead letter and the `+TERM` sent after its confirmation
    // in either order, as the two tasks happened to run: it failed once in a CI run.)
    let wire: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let mut sub = client.subscribe(">").await.expect("subscribe");
    let sink = wire.clone();
    tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            if WATCHED.iter().any(|prefix| m.subject.starts_with(prefix)) {
                sink.lock().unwrap().push((seen(&m), Instant::now()));
            }
        }
    });
    client.flush().await.expect("flush");
    let runs: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::default();
    let running = mounted(app, case, &runs)
        .start()
        .await
        .expect("the app starts");
    let published = Instant::now();
    if case.jetstream {
        js.publish("orders.new", "order".into())
            .await
            .expect("publish")
            .await
            .expect("stored");
    } else {
        client
            .publish("events.in", "event".into())
            .await
            .expect("publish");
        client.flush().await.expect("flush");
    }
    let (mut seen_count, mut since) = (0, Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let count = runs.lock().unwrap().len() + wire.lock().unwrap().len();
        if count != seen_count {
            (seen_count, since) = (count, Instant::now());
        } else if since.elapsed() >= QUIET {
            break;
        }
        assert!(published.elapsed() < LIMIT, "{case:?} never went quiet");
    }
    running.shutdown().await;
    let from = |t: Instant| t.saturating_duration_since(published);
    let runs = runs
        .lock()
        .unwrap()
        .iter()
        .map(|(a, t)| (*a, from(*t)))
        .collect();
    let wire = wire
        .lock()
        .unwrap()
        .iter()
        .map(|(w, t)| (w.clone(), from(*t)))
        .collect();
    Observed { runs, wire }
}

/// A message on the wire, as the comparison reads it: an acknowledgement's payload, a Core
/// message's subject, payload and retry count, a dead letter's subject, payload and header
/// names (its `Nats-Msg-Id` holds a server time).
fn seen(m: &async_nats::Message) -> String {
    let payload = String::from_utf8_lossy(&m.payload);
    if m.subject.starts_with("$JS.ACK.") {
        return format!("ack {payload}");
    }
    let headers = m.headers.clone().unwrap_or_default();
    let retry = headers
        .get("x-ruststream-retry-count")
        .map(|v| v.as_str().to_owned())
        .unwrap_or_default();
    let mut names: Vec<String> = headers.iter().map(|(n, _)| n.to_string()).collect();
    names.sort();
    format!("{} {payload} retry={retry} headers={names:?}", m.subject)
}

fn on_sim(case: &Case) -> Observed {
    ruststream_sim::Sim::run(|sim| async move {
        observe(&sim.url(), ruststream_sim::App::new(&sim.url()), case).await
    })
}

fn on_server(case: &Case) -> Observed {
    let server = NatsServer::start();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(observe(
            &server.url(),
            ruststream_tokio::App::new(&server.url()),
            case,
        ))
}

fn agree(case: &Case, sim: &Observed, real: &Observed) -> Result<(), String> {
    let what = |o: &Observed| -> (Vec<u64>, Vec<String>) {
        (
            o.runs.iter().map(|r| r.0).collect(),
            o.wire.iter().map(|w| w.0.clone()).collect(),
        )
    };
    if what(sim) != what(real) {
        return Err(format!(
            "{case:?}: the simulator and the server differ\nsim:    {sim:?}\nserver: {real:?}"
        ));
    }
    let times = |o: &Observed| -> Vec<Duration> {
        o.runs
            .iter()
            .map(|r| r.1)
            .chain(o.wire.iter().map(|w| w.1))
            .collect()
    };
    for (s, r) in times(sim).into_iter().zip(times(real)) {
        if s.abs_diff(r) > TOLERANCE {
            return Err(format!(
                "{case:?}: a time differs by more than {TOLERANCE:?} ({s:?} on the simulator, \
                 {r:?} on the server)\nsim:    {sim:?}\nserver: {real:?}"
            ));
        }
    }
    Ok(())
}

#[test]
fn the_app_on_the_simulator_does_what_it_does_on_a_real_server() {
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: u32::try_from(CASES).unwrap(),
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[16; 32]),
    );
    let strategy = case();
    let mut failures = Vec::new();
    let mut sample = Vec::new();
    for _ in 0..CASES {
        let case = strategy
            .new_tree(&mut runner)
            .expect("a scenario")
            .current();
        let sim = on_sim(&case);
        let real = on_server(&case);
        eprintln!("{case:?}\n  runs {:?}\n  wire {:?}", real.runs, real.wire);
        sample.push(case.clone());
        if let Err(e) = agree(&case, &sim, &real) {
            failures.push(e);
        }
    }
    assert!(
        sample.iter().any(|c| c.jetstream) && sample.iter().any(|c| !c.jetstream),
        "the sample has both kinds of mount: {sample:?}"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
