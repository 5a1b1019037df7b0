//! The app on the simulator: the adapter's own App, mounts and handlers, on the model and the
//! virtual clock.

#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::stream;
use ruststream_sim::{AckKind, App, Backoff, Delivery, Mount, Outcome, Record, Sim};

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

/// Handler runs: (what ran, attempt, virtual time).
type NamedRuns = Arc<Mutex<Vec<(String, u64, Duration)>>>;

/// A Core mount of a queue group's member `member`: records its runs as `<payload>@<member>`.
fn job(
    runs: &NamedRuns,
    sim: &Sim,
    member: &'static str,
) -> impl Fn(Delivery) -> std::future::Ready<Outcome> + Send + Sync + 'static {
    let (runs, clock) = (runs.clone(), sim.clone());
    move |d: Delivery| {
        let payload = String::from_utf8_lossy(&d.payload).into_owned();
        runs.lock().unwrap().push((
            format!("{payload}@{member}"),
            d.attempt.get(),
            clock.elapsed(),
        ));
        std::future::ready(Outcome::Ack)
    }
}

/// Core and JetStream mounts with retries, delays, a dead letter, a slow handler, a queue
/// group, and a dropped connection: the same trace every run.
#[test]
fn the_same_scenario_gives_the_same_trace_every_run() {
    let once = || {
        Sim::run(|sim| async move {
            let start = sim.now();
            let runs: NamedRuns = Arc::default();
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
                .mount(
                    Mount::core_subject("jobs-a", "jobs.in").queue_group("workers"),
                    job(&runs, &sim, "a"),
                )
                .mount(
                    Mount::core_subject("jobs-b", "jobs.in").queue_group("workers"),
                    job(&runs, &sim, "b"),
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
            // After the reconnect, the queue group's members take turns in the order they
            // subscribed again.
            for n in 0..6 {
                sim.publish("jobs.in", format!("job-{n}")).unwrap();
            }
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

/// The JetStream mount of the fault tests: ORDERS and DLQ declared, `ack_wait` 2 s.
fn faulty_app(
    sim: &Sim,
    runs: &Arc<Mutex<Vec<(u64, Duration)>>>,
    max_attempts: u32,
    outcome: Outcome,
) -> App {
    let (sink, clock) = (runs.clone(), sim.clone());
    App::new(&sim.url())
        .stream(stream("ORDERS", &["orders.>"]))
        .stream(stream("DLQ", &["dlq.orders"]))
        .mount(
            Mount::jetstream("orders", "ORDERS", "worker")
                .ack_wait(Duration::from_secs(2))
                .max_attempts(max_attempts)
                .dead_letter("dlq.orders"),
            move |d: Delivery| {
                sink.lock()
                    .unwrap()
                    .push((d.attempt.get(), clock.elapsed()));
                std::future::ready(outcome)
            },
        )
}

fn acks(sim: &Sim) -> Vec<AckKind> {
    sim.journal()
        .iter()
        .filter_map(|r| match r {
            Record::Acknowledged {
                kind, lost: false, ..
            } => Some(*kind),
            _ => None,
        })
        .collect()
}

/// An `+ACK` lost on its way: the server redelivers at `ack_wait`, and the handler runs again
/// (at-least-once: the handler must be idempotent).
#[test]
fn a_lost_ack_brings_the_message_back_at_ack_wait() {
    Sim::run(|sim| async move {
        let runs: Arc<Mutex<Vec<(u64, Duration)>>> = Arc::default();
        let running = faulty_app(&sim, &runs, 3, Outcome::Ack)
            .start()
            .await
            .unwrap();
        sim.faults(|f| {
            f.lose_acks(1);
        });
        sim.publish("orders.new", "1").unwrap();
        sim.run_until("the second run", Duration::from_secs(10), |_| {
            runs.lock().unwrap().len() == 2
        })
        .await
        .unwrap();
        sim.advance(Duration::from_secs(5)).await;
        running.shutdown().await;
        let runs = runs.lock().unwrap().clone();
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert_eq!(runs[1].0, 2, "the redelivery is attempt 2");
        let gap = runs[1].1 - runs[0].1;
        assert!(
            gap >= Duration::from_secs(2) && gap < Duration::from_millis(2_002),
            "{gap:?}"
        );
        assert_eq!(acks(&sim), [AckKind::Ack]);
        let state = sim.consumer_state("ORDERS", "worker").unwrap();
        assert_eq!(state.num_ack_pending, 0, "{state:?}");
    });
}

/// A dead-letter publish that fails is not confirmed, so the delivery is not terminated: it
/// is answered `-NAK` with the mount's dead-letter retry delay (5 s); its redelivery, past
/// `max_attempts`, goes to the dead-letter subject without running the handler again, and
/// only then is the delivery terminated. Nothing is lost or run twice; one dead letter.
#[test]
fn a_failed_dead_letter_publish_is_retried_before_anything_is_settled() {
    Sim::run(|sim| async move {
        let runs: Arc<Mutex<Vec<(u64, Duration)>>> = Arc::default();
        let running = faulty_app(&sim, &runs, 1, Outcome::Reject)
            .start()
            .await
            .unwrap();
        sim.faults(|f| f.fail_publishes("dlq.orders", 1).map(|_| ()))
            .unwrap();
        sim.publish("orders.new", "poison").unwrap();
        sim.run_until("the dead letter", Duration::from_secs(30), |s| {
            s.stream_messages("DLQ").unwrap().len() == 1
        })
        .await
        .unwrap();
        sim.advance(Duration::from_secs(1)).await;
        running.shutdown().await;
        assert_eq!(
            acks(&sim),
            [AckKind::Nak(Some(Duration::from_secs(5))), AckKind::Term]
        );
        let runs = runs.lock().unwrap().clone();
        assert_eq!(
            runs.iter().map(|r| r.0).collect::<Vec<_>>(),
            [1],
            "run once"
        );
        assert_eq!(sim.stream_messages("DLQ").unwrap().len(), 1);
        let failed = sim
            .journal()
            .iter()
            .filter(|r| matches!(r, Record::Published { subject, failed: true, .. } if subject == "dlq.orders"))
            .count();
        assert_eq!(failed, 1, "the fault took the first dead-letter publish");
    });
}

/// Health's `since` times are the runtime's clock: on the simulator, virtual. The app started
/// at 0 and shut down after a minute of virtual time: its mounts stopped since then.
#[test]
fn health_times_are_virtual_on_the_simulator() {
    Sim::run(|sim| async move {
        let start = sim.now();
        let running = App::new(&sim.url())
            .mount(Mount::core_subject("greet", "greet"), |_: Delivery| {
                std::future::ready(Outcome::Ack)
            })
            .start()
            .await
            .unwrap();
        let health = running.health();
        let consuming = health.get();
        assert!(
            consuming.ready() && consuming.live_at(sim.now()),
            "{consuming:?}"
        );
        assert!(consuming.mounts[0].since < start + Duration::from_secs(1));
        sim.advance(Duration::from_secs(60)).await;
        running.shutdown().await;
        let stopped = health.get();
        let mount = &stopped.mounts[0];
        assert_ne!(
            mount.state,
            ruststream_sim::MountState::Consuming,
            "{stopped:?}"
        );
        assert!(
            mount.since >= start + Duration::from_secs(60),
            "stopped {:?} after the start, before the shutdown at 60 s",
            mount.since.saturating_duration_since(start)
        );
    });
}

/// `drop_connections` closes every connection at once: none is open after it, a publish right
/// after reaches no subscriber, and the journal has the disconnections first. The app then
/// reconnects and receives again.
#[test]
fn dropped_connections_are_gone_at_once_and_come_back() {
    Sim::run(|sim| async move {
        let runs: NamedRuns = Arc::default();
        let running = App::new(&sim.url())
            .mount(
                Mount::core_subject("jobs", "jobs.in"),
                job(&runs, &sim, "a"),
            )
            .start()
            .await
            .unwrap();
        assert_eq!(sim.connections().len(), 1, "the app's connection");
        let dropped = sim.drop_connections();
        assert_eq!(dropped.len(), 1);
        assert!(sim.connections().is_empty(), "{:?}", sim.connections());
        let published = sim.publish("jobs.in", "while-down").unwrap();
        assert_eq!(
            published.receivers, 0,
            "nobody is subscribed while the app is down"
        );
        let journal = sim.journal();
        let down = journal
            .iter()
            .position(|r| matches!(r, Record::Disconnected { .. }))
            .expect("recorded");
        let while_down = journal
            .iter()
            .position(
                |r| matches!(r, Record::Published { payload, .. } if &payload[..] == b"while-down"),
            )
            .expect("recorded");
        assert!(down < while_down, "{journal:#?}");
        sim.run_until("the app back", Duration::from_secs(10), |s| {
            s.connections().len() == 1
        })
        .await
        .unwrap();
        sim.advance(Duration::from_millis(100)).await;
        sim.publish("jobs.in", "after").unwrap();
        sim.run_until("the run", Duration::from_secs(10), |_| {
            !runs.lock().unwrap().is_empty()
        })
        .await
        .unwrap();
        let ran: Vec<String> = runs.lock().unwrap().iter().map(|r| r.0.clone()).collect();
        assert_eq!(
            ran,
            ["after@a"],
            "what was published while down is lost (Core)"
        );
        running.shutdown().await;
    });
}

/// Messages up to `max_payload` pass the endpoint whole, Core and JetStream, headers and all.
#[test]
fn large_messages_pass_the_endpoint_whole() {
    Sim::run(|sim| async move {
        let sizes: Arc<Mutex<Vec<(String, usize)>>> = Arc::default();
        let (core_sink, js_sink) = (sizes.clone(), sizes.clone());
        let running = App::new(&sim.url())
            .stream(stream("BIG", &["big.js"]))
            .mount(
                Mount::core_subject("big-core", "big.core"),
                move |d: Delivery| {
                    core_sink
                        .lock()
                        .unwrap()
                        .push(("core".into(), d.payload.len()));
                    std::future::ready(Outcome::Ack)
                },
            )
            .mount(
                Mount::jetstream("big-js", "BIG", "worker"),
                move |d: Delivery| {
                    js_sink.lock().unwrap().push(("js".into(), d.payload.len()));
                    std::future::ready(Outcome::Ack)
                },
            )
            .start()
            .await
            .unwrap();
        let client = async_nats::connect(sim.url()).await.unwrap();
        let big = bytes::Bytes::from(vec![b'x'; 1_000_000]);
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("k", "v");
        client
            .publish_with_headers("big.core", headers.clone(), big.clone())
            .await
            .unwrap();
        client.flush().await.unwrap();
        let js = async_nats::jetstream::new(client.clone());
        js.publish_with_headers("big.js", headers, big)
            .await
            .unwrap()
            .await
            .expect("stored");
        sim.run_until("both", Duration::from_secs(10), |_| {
            sizes.lock().unwrap().len() == 2
        })
        .await
        .unwrap();
        let mut got = sizes.lock().unwrap().clone();
        got.sort();
        assert_eq!(
            got,
            [("core".to_owned(), 1_000_000), ("js".to_owned(), 1_000_000)]
        );
        running.shutdown().await;
    });
}

/// `Sim::run` inside a tokio runtime says what to use instead.
#[test]
fn sim_run_inside_a_runtime_says_what_to_use_instead() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let panic = runtime.block_on(async {
        std::panic::catch_unwind(|| Sim::run(|_| async {})).expect_err("refused")
    });
    let text = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default();
    assert!(text.contains("Sim::start"), "{text}");
}

/// Runs `test` on a thread of its own and fails it when it panics or does not end within a
/// minute of real time (a panic inside the runtime's own tasks would otherwise only be logged).
fn ends<T: Send + 'static>(test: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(test());
    });
    ended
        .recv_timeout(Duration::from_secs(60))
        .expect("the test ended within a minute of real time, without a panic")
}

/// A setting of `Duration::MAX` means "never", as `disconnected_limit` documents, for every
/// duration an application gives: a handler time limit of `Duration::MAX` still lets a handler
/// that waits settle (it panicked in the lease's arithmetic, and the `+ACK` was never sent).
#[test]
fn duration_max_as_a_handler_time_limit_means_no_limit() {
    let acks = ends(|| {
        Sim::run(|sim| async move {
            let running = App::new(&sim.url())
                .stream(stream("ORDERS", &["orders.>"]))
                .mount(
                    Mount::jetstream("orders", "ORDERS", "worker")
                        .handler_time_limit(Duration::MAX),
                    |_: Delivery| async {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        Outcome::Ack
                    },
                )
                .start()
                .await
                .unwrap();
            sim.publish("orders.new", "1").unwrap();
            sim.advance(Duration::from_secs(5)).await;
            running.shutdown().await;
            sim.journal()
                .iter()
                .filter(|r| {
                    matches!(
                        r,
                        Record::Acknowledged {
                            kind: AckKind::Ack,
                            ..
                        }
                    )
                })
                .count()
        })
    });
    assert_eq!(acks, 1);
}

/// A grace period of `Duration::MAX`: the shutdown waits for what runs, and reports (it
/// panicked computing its deadline).
#[test]
fn duration_max_as_a_grace_period_waits_for_what_runs() {
    let report = ends(|| {
        Sim::run(|sim| async move {
            let running = App::new(&sim.url())
                .grace_period(Duration::MAX)
                .mount(Mount::core_subject("greet", "greet"), |_: Delivery| async {
                    Outcome::Ack
                })
                .start()
                .await
                .unwrap();
            sim.publish("greet", "hi").unwrap();
            sim.advance(Duration::from_millis(100)).await;
            running.shutdown().await
        })
    });
    assert_eq!(report, ruststream_sim::ShutdownReport::default());
}

/// A consumer re-read of `Duration::MAX`: the consumer is never read again, and the supervisor
/// still does its other work: a connection down past the app's limit ends the app (the
/// supervisor panicked at its first deadline, and the app stayed up, consuming nothing).
#[test]
fn duration_max_as_a_consumer_reread_never_rereads_and_the_supervisor_goes_on() {
    let failure = ends(|| {
        Sim::run(|sim| async move {
            let running = App::new(&sim.url())
                .consumer_reread(Duration::MAX)
                .disconnected_limit(Duration::from_secs(5))
                .mount(Mount::core_subject("greet", "greet"), |_: Delivery| async {
                    Outcome::Ack
                })
                .start()
                .await
                .unwrap();
            sim.go_down();
            sim.advance(Duration::from_secs(20)).await;
            running.until_signal().await.err().map(|e| e.to_string())
        })
    });
    assert!(
        failure.as_deref().is_some_and(|f| f.contains("down")),
        "{failure:?}"
    );
}
