// The conformance scenarios, written once. Each adapter's test file defines `adapter` (the
// crate under test) and `run` (how to drive a future on its runtime), then `include!`s this
// file. Test names follow SETTLEMENT.md: `row_NN_*` for Part C rows, `rule_NN_*` for Part B.
//
// Every test starts its own nats-server (a free port, a temporary store) and its own app.
// Assertions wait for eventual outcomes with generous deadlines; delays are in milliseconds.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use adapter::async_nats::HeaderMap;
use adapter::{App, Delivery, Disposition, Mount, Outcome, Running, Settled, StartError};
use ruststream_tests::{NatsServer, ServerOptions, TestClient, Wire, capture_logs, eventually, logged};

/// Handler runs: (attempt, payload, when).
type Runs = Arc<Mutex<Vec<(u64, String, Instant)>>>;

/// Settlements the app reported.
type Events = Arc<Mutex<Vec<Settled>>>;

/// A handler that records each run and returns `script(attempt, payload)`.
fn scripted(
    runs: &Runs,
    script: impl Fn(u64, &str) -> Outcome + Send + Sync + 'static,
) -> impl Fn(Delivery) -> std::future::Ready<Outcome> + Send + Sync + 'static {
    let runs = runs.clone();
    move |d: Delivery| {
        let payload = String::from_utf8_lossy(&d.payload).into_owned();
        let outcome = script(d.attempt.get(), &payload);
        runs.lock().unwrap().push((d.attempt.get(), payload, Instant::now()));
        std::future::ready(outcome)
    }
}

fn runs() -> Runs {
    Arc::new(Mutex::new(Vec::new()))
}

fn attempts(runs: &Runs) -> Vec<u64> {
    runs.lock().unwrap().iter().map(|r| r.0).collect()
}

async fn start(server: &NatsServer, events: &Events, build: impl FnOnce(App) -> App) -> Running {
    start_at(&server.url(), events, build).await
}

/// As [`start`], connecting to `url` (one or several server URLs, credentials and all).
async fn start_at(url: &str, events: &Events, build: impl FnOnce(App) -> App) -> Running {
    capture_logs();
    let sink = events.clone();
    let app = App::new(url)
        .grace_period(Duration::from_secs(2))
        .on_settled(move |s| sink.lock().unwrap().push(s.clone()));
    match build(app).start().await {
        Ok(running) => running,
        Err(e) => panic!("the app did not start: {e}"),
    }
}

fn events() -> Events {
    Arc::new(Mutex::new(Vec::new()))
}

async fn settled(events: &Events, n: usize) -> Vec<Settled> {
    eventually(&format!("{n} settlement(s)"), || {
        let all = events.lock().unwrap().clone();
        (all.len() >= n).then_some(all)
    })
    .await
}

fn dispositions(events: &Events) -> Vec<Disposition> {
    events.lock().unwrap().iter().map(|s| s.disposition).collect()
}

async fn start_err(server: &NatsServer, build: impl FnOnce(App) -> App) -> StartError {
    capture_logs();
    let app = App::new(&server.url());
    build(app).start().await.expect_err("start-up must refuse this declaration")
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in pairs {
        h.append(*n, *v);
    }
    h
}

/// A JetStream set-up: stream ORDERS on `orders.>`, stream DLQ on `dlq.>`.
async fn js_setup(server: &NatsServer) -> TestClient {
    let tc = TestClient::connect(server).await;
    tc.stream("ORDERS", &["orders.>"]).await;
    tc.stream("DLQ", &["dlq.>"]).await;
    tc
}

/// A JetStream test: its server, the set-up of [`js_setup`], a watch on the ack reply
/// subjects of ORDERS, and empty run and settlement records.
async fn js_case() -> (NatsServer, TestClient, Wire, Runs, Events) {
    let server = NatsServer::start();
    let tc = js_setup(&server).await;
    let acks = Wire::watch(&tc.client, "$JS.ACK.ORDERS.>").await;
    (server, tc, acks, runs(), events())
}

fn js_mount(name: &str) -> Mount {
    Mount::jetstream(name, "ORDERS", "worker").ack_wait(Duration::from_millis(700))
}

/// Sleeps a little to show that nothing more happens.
async fn quiet(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

// ---------------------------------------------------------------- JetStream rows (Part C)

#[test]
fn row_01_jetstream_ack() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| a.mount(js_mount("js-ack").max_attempts(3), scripted(&r, |_, _| Outcome::Ack))).await;
        tc.js_publish("orders.new", HeaderMap::new(), b"order-1").await;
        acks.at_least(1).await;
        assert_eq!(acks.payloads(), ["+ACK"]);
        let ci = eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        assert_eq!(ci.num_redelivered, 0);
        quiet(900).await; // past ack_wait: nothing comes back
        assert_eq!(attempts(&r), [1]);
        assert_eq!(dispositions(&ev), [Disposition::Acked]);
        app.shutdown().await;
    });
}

/// Waits until the consumer's info satisfies `ok`.
async fn eventually_info(
    tc: &TestClient,
    ok: impl Fn(&adapter::async_nats::jetstream::consumer::Info) -> bool,
) -> adapter::async_nats::jetstream::consumer::Info {
    let deadline = Instant::now() + ruststream_tests::PATIENCE;
    loop {
        let info = tc.consumer_info("ORDERS", "worker").await;
        if ok(&info) {
            return info;
        }
        assert!(Instant::now() < deadline, "consumer info never matched: {info:?}");
        quiet(50).await;
    }
}

#[test]
fn row_02_jetstream_drop() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| a.mount(js_mount("js-drop").max_attempts(3), scripted(&r, |_, _| Outcome::Drop))).await;
        tc.js_publish("orders.new", HeaderMap::new(), b"order-1").await;
        acks.at_least(1).await;
        assert_eq!(acks.payloads(), ["+TERM"]);
        eventually_info(&tc, |i| i.num_ack_pending == 0).await;
        quiet(900).await;
        assert_eq!(attempts(&r), [1], "a terminated message is never sent again");
        assert_eq!(dispositions(&ev), [Disposition::Dropped]);
        app.shutdown().await;
    });
}

#[test]
fn row_03_jetstream_retry_below_limit() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-retry").max_attempts(3),
                scripted(&r, |attempt, _| if attempt == 1 { Outcome::Retry } else { Outcome::Ack }),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"order-1").await;
        acks.at_least(2).await;
        assert_eq!(acks.payloads(), ["-NAK", "+ACK"]);
        // Redelivered at once, with delivered + 1 on the same stream sequence.
        let seen = acks.all();
        assert!(seen[0].subject.starts_with("$JS.ACK.ORDERS.worker.1.1."), "{}", seen[0].subject);
        assert!(seen[1].subject.starts_with("$JS.ACK.ORDERS.worker.2.1."), "{}", seen[1].subject);
        assert_eq!(attempts(&r), [1, 2]);
        let e = settled(&ev, 2).await;
        assert_eq!(e[1].stream_sequence, Some(1));
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        app.shutdown().await;
    });
}

#[test]
fn row_04_jetstream_retry_after_below_limit() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-retry-after").max_attempts(3),
                scripted(&r, |attempt, _| match attempt {
                    1 => Outcome::RetryAfter(Duration::from_millis(400)),
                    _ => Outcome::Ack,
                }),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"order-1").await;
        acks.at_least(2).await;
        assert_eq!(acks.payloads(), [r#"-NAK {"delay": 400000000}"#, "+ACK"]);
        let runs = r.lock().unwrap().clone();
        assert_eq!(runs.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2]);
        let gap = runs[1].2 - runs[0].2;
        assert!(gap >= Duration::from_millis(400), "redelivered after {gap:?}, before the delay");
        assert!(gap < Duration::from_secs(5), "redelivered after {gap:?}");
        assert_eq!(dispositions(&ev), [Disposition::Delayed, Disposition::Acked]);
        app.shutdown().await;
    });
}

#[test]
fn row_05_jetstream_at_limit_dead_letter_then_term() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(js_mount("js-dlq").max_attempts(2).dead_letter("dlq.orders"), scripted(&r, |_, _| Outcome::Retry))
        })
        .await;
        // Rule 9: the directive would make the DLQ stream refuse the dead letter if kept.
        let original = headers(&[
            ("Trace-Id", "abc"),
            ("tag", "one"),
            ("tag", "two"),
            ("Nats-Msg-Id", "order-1-id"),
            ("Nats-Expected-Stream", "ORDERS"),
        ]);
        tc.js_publish("orders.new", original, b"{\"id\":1}").await;
        acks.at_least(2).await;
        assert_eq!(acks.payloads(), ["-NAK", "+TERM"]);
        assert_eq!(attempts(&r), [1, 2]);
        let stored = tc.stored("DLQ").await;
        assert_eq!(stored.len(), 1);
        let (subject, hdrs, payload) = &stored[0];
        assert_eq!(subject, "dlq.orders");
        assert_eq!(&payload[..], b"{\"id\":1}");
        let want: Vec<(String, String)> = [("Nats-Msg-Id", "order-1-id"), ("Trace-Id", "abc"), ("tag", "one"), ("tag", "two")]
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect();
        assert_eq!(hdrs, &want, "dead letter headers byte for byte, directives aside");
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        assert_eq!(dispositions(&ev), [Disposition::Retried, Disposition::DeadLettered]);
        logged(&["WARN", "mount=js-dlq", "attempt=2", "dead_letter=dlq.orders", "dead letter published"]).await;
        app.shutdown().await;
    });
}

#[test]
fn row_06_jetstream_at_limit_without_dead_letter_terms() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-limit").max_attempts(2),
                scripted(&r, |_, _| Outcome::RetryAfter(Duration::from_millis(50))),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"x").await;
        acks.at_least(2).await;
        assert_eq!(acks.payloads(), [r#"-NAK {"delay": 50000000}"#, "+TERM"]);
        quiet(900).await;
        assert_eq!(attempts(&r), [1, 2]);
        assert_eq!(tc.stream_len("DLQ").await, 0);
        assert_eq!(dispositions(&ev), [Disposition::Delayed, Disposition::Terminated]);
        app.shutdown().await;
    });
}

#[test]
fn row_07_jetstream_arrives_past_limit_handler_not_run() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        // No outcome twice: the server redelivers after ack_wait; the third delivery is past
        // max_attempts 2 and goes to the dead letter without running the handler (rule 3).
        let app = start(&server, &ev, |a| {
            a.mount(js_mount("js-past").max_attempts(2).dead_letter("dlq.past"), scripted(&r, |_, _| Outcome::None))
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"hangs").await;
        acks.at_least(1).await;
        assert_eq!(acks.payloads(), ["+TERM"]);
        assert!(acks.all()[0].subject.starts_with("$JS.ACK.ORDERS.worker.3."), "{}", acks.all()[0].subject);
        assert_eq!(attempts(&r), [1, 2], "the handler does not run past the limit");
        assert_eq!(tc.stored("DLQ").await.len(), 1);
        let e = settled(&ev, 3).await;
        assert!(!e[2].handler_ran);
        assert_eq!(e[2].disposition, Disposition::DeadLettered);
        app.shutdown().await;
    });
}

#[test]
fn row_08_jetstream_no_outcome_server_redelivers() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-none").max_attempts(5),
                scripted(&r, |attempt, _| if attempt == 1 { Outcome::None } else { Outcome::Ack }),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"x").await;
        acks.at_least(1).await;
        assert_eq!(acks.payloads(), ["+ACK"], "nothing is sent for no outcome");
        let runs = r.lock().unwrap().clone();
        assert_eq!(runs.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2]);
        assert!(runs[1].2 - runs[0].2 >= Duration::from_millis(600), "redelivered only after ack_wait");
        assert_eq!(dispositions(&ev), [Disposition::NoOutcome, Disposition::Acked]);
        app.shutdown().await;
    });
}

#[test]
fn row_09_jetstream_dead_letter_publish_fails_naks_and_retries() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-dlq-fail")
                    .max_attempts(1)
                    .dead_letter("dlq.fail")
                    .dead_letter_retry_delay(Duration::from_millis(300)),
                scripted(&r, |_, _| Outcome::Retry),
            )
        })
        .await;
        // The dead-letter stream disappears after start-up.
        tc.js.delete_stream("DLQ").await.expect("delete DLQ");
        tc.js_publish("orders.new", HeaderMap::new(), b"precious").await;
        acks.at_least(1).await;
        assert_eq!(acks.payloads()[0], r#"-NAK {"delay": 300000000}"#, "not settled while the dead letter failed");
        assert!(!acks.payloads().iter().any(|p| p == "+TERM"));
        // Once the stream is back, the delivery returns past the limit and is dead-lettered.
        tc.stream("DLQ", &["dlq.>"]).await;
        eventually("the dead letter to arrive", || {
            acks.payloads().iter().any(|p| p == "+TERM").then_some(())
        })
        .await;
        let stored = tc.stored("DLQ").await;
        assert_eq!(stored.len(), 1);
        assert_eq!(&stored[0].2[..], b"precious");
        assert_eq!(attempts(&r), [1], "the handler ran once; later deliveries were past the limit");
        assert!(dispositions(&ev).contains(&Disposition::DeadLetterRetry));
        app.shutdown().await;
    });
}

// ---------------------------------------------------------------- Core rows (Part C)

async fn core_setup(server: &NatsServer) -> TestClient {
    TestClient::connect(server).await
}

/// A Core test: its server, a test client, and empty run and settlement records.
async fn core_case() -> (NatsServer, TestClient, Runs, Events) {
    let server = NatsServer::start();
    let tc = core_setup(&server).await;
    (server, tc, runs(), events())
}

async fn core_publish(tc: &TestClient, subject: &str, headers: HeaderMap, payload: &'static [u8]) {
    tc.client
        .publish_with_headers(subject.to_owned(), headers, bytes::Bytes::from_static(payload))
        .await
        .expect("publish");
    tc.client.flush().await.expect("flush");
}

#[test]
fn row_10_core_ack_logs_unsupported() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| a.mount(Mount::core_subject("core-ack-10", "c10.in"), scripted(&r, |_, _| Outcome::Ack))).await;
        core_publish(&tc, "c10.in", HeaderMap::new(), b"x").await;
        settled(&ev, 1).await;
        logged(&["AckError::Unsupported", "mount=core-ack-10"]).await;
        assert_eq!(dispositions(&ev), [Disposition::Unsupported]);
        app.shutdown().await;
    });
}

#[test]
fn row_11_core_drop_logs_unsupported() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(Mount::core_subject("core-drop-11", "c11.in").max_attempts(3), scripted(&r, |_, _| Outcome::Drop))
        })
        .await;
        let wire = Wire::watch(&tc.client, "c11.in").await;
        core_publish(&tc, "c11.in", HeaderMap::new(), b"x").await;
        settled(&ev, 1).await;
        logged(&["AckError::Unsupported", "mount=core-drop-11"]).await;
        quiet(300).await;
        assert_eq!(wire.all().len(), 1, "no copy for drop");
        app.shutdown().await;
    });
}

#[test]
fn row_12_core_retry_without_limit_only_logs() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| a.mount(Mount::core_subject("core-retry-12", "c12.in"), scripted(&r, |_, _| Outcome::Retry))).await;
        let wire = Wire::watch(&tc.client, "c12.in").await;
        core_publish(&tc, "c12.in", HeaderMap::new(), b"x").await;
        settled(&ev, 1).await;
        logged(&["AckError::Unsupported", "mount=core-retry-12"]).await;
        quiet(300).await;
        assert_eq!(wire.all().len(), 1, "no copy without a limit");
        assert_eq!(attempts(&r), [1]);
        app.shutdown().await;
    });
}

#[test]
fn row_13_core_retry_below_limit_copies_now() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let (rw, evw) = (runs(), events());
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-retry-13", "c13.in").max_attempts(3),
                scripted(&r, |attempt, _| if attempt < 2 { Outcome::Retry } else { Outcome::Ack }),
            )
        })
        .await;
        let app_w = start(&server, &evw, |a| {
            a.mount(
                Mount::core_wildcard("core-wild-13", "c13w.*", "c13w.retry").max_attempts(3),
                scripted(&rw, |attempt, _| if attempt < 2 { Outcome::Retry } else { Outcome::Ack }),
            )
        })
        .await;
        let own = Wire::watch(&tc.client, "c13.in").await;
        let named = Wire::watch(&tc.client, "c13w.retry").await;
        core_publish(&tc, "c13.in", headers(&[("Trace-Id", "t1"), ("Nats-Expected-Stream", "X")]), b"p13").await;
        core_publish(&tc, "c13w.eu", HeaderMap::new(), b"p13w").await;
        let seen = own.at_least(2).await;
        assert_eq!(seen[1].headers, [("Trace-Id".to_owned(), "t1".to_owned()), ("x-ruststream-retry-count".to_owned(), "1".to_owned())]);
        assert_eq!(&seen[1].payload[..], b"p13");
        let copies = named.at_least(1).await;
        assert_eq!(copies[0].headers, [("x-ruststream-retry-count".to_owned(), "1".to_owned())]);
        eventually("both copies handled", || (attempts(&r) == [1, 2] && attempts(&rw) == [1, 2]).then_some(())).await;
        logged(&["AckError::Unsupported", "mount=core-retry-13"]).await;
        assert_eq!(dispositions(&ev)[0], Disposition::Retried);
        app.shutdown().await;
        app_w.shutdown().await;
    });
}

#[test]
fn row_14_core_retry_after_copies_after_the_delay() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-after-14", "c14.in"), // no limit: still a copy (rule 6)
                scripted(&r, |attempt, _| if attempt == 1 { Outcome::RetryAfter(Duration::from_millis(300)) } else { Outcome::Ack }),
            )
        })
        .await;
        let wire = Wire::watch(&tc.client, "c14.in").await;
        core_publish(&tc, "c14.in", HeaderMap::new(), b"later").await;
        let seen = wire.at_least(2).await;
        let gap = seen[1].at - seen[0].at;
        assert!(gap >= Duration::from_millis(300), "copy after {gap:?}");
        assert!(gap < Duration::from_secs(5), "copy after {gap:?}");
        assert_eq!(seen[1].headers, [("x-ruststream-retry-count".to_owned(), "1".to_owned())]);
        eventually("the copy handled", || (attempts(&r) == [1, 2]).then_some(())).await;
        assert_eq!(dispositions(&ev), [Disposition::Delayed, Disposition::Unsupported]);
        app.shutdown().await;
    });
}

#[test]
fn row_15_core_at_limit_dead_letter() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        tc.stream("DLQ", &["dlq.>"]).await;
        let app = start(&server, &ev, |a| {
            a.mount(Mount::core_subject("core-dlq-15", "c15.in").max_attempts(2).dead_letter("dlq.c15"), scripted(&r, |_, _| Outcome::Retry))
        })
        .await;
        core_publish(&tc, "c15.in", headers(&[("Trace-Id", "t15")]), b"p15").await;
        eventually("a dead letter", || (dispositions(&ev).contains(&Disposition::DeadLettered)).then_some(())).await;
        assert_eq!(attempts(&r), [1, 2]);
        let stored = tc.stored("DLQ").await;
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].0, "dlq.c15");
        assert_eq!(&stored[0].2[..], b"p15");
        // The delivery as it arrived: the attempt-2 copy, with its retry-count header.
        assert_eq!(stored[0].1, [("Trace-Id".to_owned(), "t15".to_owned()), ("x-ruststream-retry-count".to_owned(), "1".to_owned())]);
        logged(&["WARN", "mount=core-dlq-15", "dead_letter=dlq.c15", "dead letter published"]).await;
        app.shutdown().await;
    });
}

#[test]
fn row_16_core_at_limit_without_dead_letter_warns() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(Mount::core_subject("core-letgo-16", "c16.in").max_attempts(2), scripted(&r, |_, _| Outcome::Retry))
        })
        .await;
        let wire = Wire::watch(&tc.client, "c16.in").await;
        core_publish(&tc, "c16.in", HeaderMap::new(), b"x").await;
        logged(&["WARN", "mount=core-letgo-16", "let go"]).await;
        quiet(300).await;
        assert_eq!(attempts(&r), [1, 2]);
        assert_eq!(wire.all().len(), 2, "the original and one copy, nothing more");
        assert_eq!(dispositions(&ev), [Disposition::Retried, Disposition::LetGo]);
        app.shutdown().await;
    });
}

#[test]
fn row_17_core_arrives_past_limit_handler_not_run() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        tc.stream("DLQ", &["dlq.>"]).await;
        let app = start(&server, &ev, |a| {
            a.mount(Mount::core_subject("core-past-17", "c17.in").max_attempts(3).dead_letter("dlq.c17"), scripted(&r, |_, _| Outcome::Ack))
        })
        .await;
        let (r2, ev2) = (runs(), events());
        let app2 = start(&server, &ev2, |a| {
            a.mount(Mount::core_subject("core-past-17b", "c17b.in").max_attempts(3), scripted(&r2, |_, _| Outcome::Ack))
        })
        .await;
        core_publish(&tc, "c17.in", headers(&[("x-ruststream-retry-count", "3")]), b"p17").await;
        core_publish(&tc, "c17b.in", headers(&[("x-ruststream-retry-count", "7")]), b"p17b").await;
        let e = settled(&ev, 1).await;
        assert_eq!(e[0].disposition, Disposition::DeadLettered);
        assert!(!e[0].handler_ran);
        let e2 = settled(&ev2, 1).await;
        assert_eq!(e2[0].disposition, Disposition::LetGo);
        assert!(attempts(&r).is_empty() && attempts(&r2).is_empty(), "handlers never ran");
        assert_eq!(tc.stored("DLQ").await.len(), 1);
        logged(&["WARN", "mount=core-past-17b", "let go"]).await;
        app.shutdown().await;
        app2.shutdown().await;
    });
}

#[test]
fn row_18_core_no_outcome_nothing() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| a.mount(Mount::core_subject("core-none-18", "c18.in").max_attempts(3), scripted(&r, |_, _| Outcome::None))).await;
        let wire = Wire::watch(&tc.client, "c18.in").await;
        core_publish(&tc, "c18.in", HeaderMap::new(), b"x").await;
        settled(&ev, 1).await;
        quiet(300).await;
        assert_eq!(wire.all().len(), 1);
        assert_eq!(dispositions(&ev), [Disposition::NoOutcome]);
        assert!(log_lines_for("core-none-18", "AckError::Unsupported").is_empty());
        app.shutdown().await;
    });
}

fn log_lines_for(mount: &str, text: &str) -> Vec<String> {
    ruststream_tests::log_lines(&[&format!("mount={mount}"), text])
}

// ---------------------------------------------------------------- Part B rules

#[test]
fn rule_05_retry_count_header_parsing_on_the_wire() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-hdr-05", "c05.in").max_attempts(5),
                scripted(&r, |_, payload| if payload == "junk" { Outcome::Retry } else { Outcome::Ack }),
            )
        })
        .await;
        let wire = Wire::watch(&tc.client, "c05.in").await;
        // Mixed case, repeated: the largest valid value (2) wins: attempt 3.
        core_publish(&tc, "c05.in", headers(&[("X-RustStream-Retry-Count", "1"), ("X-RUSTSTREAM-RETRY-COUNT", " 2 ")]), b"mixed").await;
        eventually("mixed-case handled", || (attempts(&r) == [3]).then_some(())).await;
        // Not digits: ignored with a warning, attempt 1; the copy carries a clean value.
        core_publish(&tc, "c05.in", headers(&[("x-ruststream-retry-count", "lots")]), b"junk").await;
        logged(&["WARN", "mount=core-hdr-05", "not digits", "header=[\"lots\"]"]).await;
        let seen = wire.at_least(3).await;
        let copy = &seen[2];
        assert_eq!(copy.headers, [("x-ruststream-retry-count".to_owned(), "1".to_owned())]);
        eventually("junk and its copy handled", || (attempts(&r).len() >= 3).then_some(())).await;
        assert_eq!(attempts(&r)[1], 1);
        app.shutdown().await;
    });
}

#[test]
fn rule_10_wildcard_copies_are_handled_once() {
    run(async {
        let server = NatsServer::start();
        let tc = core_setup(&server).await;
        // The wildcard matches its copy subject: copies arrive through its own subscription.
        let (r1, ev1) = (runs(), events());
        let app1 = start(&server, &ev1, |a| {
            a.mount(
                Mount::core_wildcard("wild-in-10", "w10.*", "w10.retry").max_attempts(3),
                scripted(&r1, |attempt, _| if attempt == 1 { Outcome::Retry } else { Outcome::Ack }),
            )
        })
        .await;
        // It does not: the runtime subscribes the mount to the copy subject as well.
        let (r2, ev2) = (runs(), events());
        let app2 = start(&server, &ev2, |a| {
            a.mount(
                Mount::core_wildcard("wild-out-10", "x10.*", "retry.x10").max_attempts(3),
                scripted(&r2, |attempt, _| if attempt == 1 { Outcome::Retry } else { Outcome::Ack }),
            )
        })
        .await;
        core_publish(&tc, "w10.eu", HeaderMap::new(), b"a").await;
        core_publish(&tc, "x10.eu", HeaderMap::new(), b"b").await;
        eventually("both copies handled", || (attempts(&r1).len() == 2 && attempts(&r2).len() == 2).then_some(())).await;
        quiet(400).await;
        assert_eq!(attempts(&r1), [1, 2], "each copy handled exactly once");
        assert_eq!(attempts(&r2), [1, 2], "each copy handled exactly once");
        app1.shutdown().await;
        app2.shutdown().await;
    });
}

fn declaration_error(err: &StartError) -> String {
    err.to_string()
}

#[test]
fn rule_11_bad_declarations_are_refused_naming_the_mount() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        let noop = |_: Delivery| async { Outcome::Ack };

        let e = start_err(&server, |a| a.mount(Mount::core_subject("bad-core", "a.*"), noop)).await;
        assert!(matches!(e, StartError::Declaration(_)), "{e}");
        assert!(declaration_error(&e).contains("mount `bad-core`"), "{e}");

        let e = start_err(&server, |a| a.mount(Mount::core_subject("bad-space", "a b"), noop)).await;
        assert!(declaration_error(&e).contains("mount `bad-space`"), "{e}");

        let e = start_err(&server, |a| a.mount(Mount::core_subject("bad-token", "a..b"), noop)).await;
        assert!(declaration_error(&e).contains("mount `bad-token`"), "{e}");

        let e = start_err(&server, |a| a.mount(Mount::core_wildcard("bad-copy", "w.*", "w.>"), noop)).await;
        assert!(declaration_error(&e).contains("mount `bad-copy`") && declaration_error(&e).contains("copy subject"), "{e}");

        let e = start_err(&server, |a| a.mount(Mount::core_wildcard("no-copy", "w.*", ""), noop)).await;
        assert!(declaration_error(&e).contains("mount `no-copy`"), "{e}");

        let e = start_err(&server, |a| a.mount(Mount::core_subject("dlq-no-limit", "a").dead_letter("dlq.x"), noop)).await;
        assert!(declaration_error(&e).contains("mount `dlq-no-limit`") && declaration_error(&e).contains("max_attempts"), "{e}");

        let e = start_err(&server, |a| a.mount(Mount::core_subject("dlq-wild", "a").max_attempts(2).dead_letter("dlq.*"), noop)).await;
        assert!(declaration_error(&e).contains("mount `dlq-wild`"), "{e}");

        let e = start_err(&server, |a| a.mount(Mount::jetstream("no-stream", "NOPE", "w"), noop)).await;
        assert!(matches!(&e, StartError::Server { mount, .. } if mount == "no-stream"), "{e}");

        // A JetStream mount whose dead-letter subject no stream stores (rule 8).
        let e = start_err(&server, |a| a.mount(js_mount("dlq-unstored").max_attempts(2).dead_letter("nowhere.x"), noop)).await;
        assert!(declaration_error(&e).contains("mount `dlq-unstored`") && declaration_error(&e).contains("nowhere.x"), "{e}");

        // Dead letters that would come back to the mount: an endless loop, refused.
        let e = start_err(&server, |a| a.mount(js_mount("dlq-loop").max_attempts(2).dead_letter("orders.dlq"), noop)).await;
        assert!(declaration_error(&e).contains("mount `dlq-loop`") && declaration_error(&e).contains("comes back"), "{e}");
        // Both refusals came after the durable was created: it was removed again.
        let left = tc.js.get_stream("ORDERS").await.expect("stream").consumer_info("worker").await;
        assert!(
            matches!(&left, Err(e) if e.kind() == adapter::async_nats::jetstream::context::ConsumerInfoErrorKind::NotFound),
            "a refused start-up left its durable behind: {left:?}"
        );
        let e = start_err(&server, |a| a.mount(Mount::core_subject("core-loop", "loop.x").max_attempts(2).dead_letter("loop.x"), noop)).await;
        assert!(declaration_error(&e).contains("mount `core-loop`") && declaration_error(&e).contains("comes back"), "{e}");

        // A mount name that would break `mount=<name>` in logs.
        let e = start_err(&server, |a| a.mount(Mount::core_subject("my mount", "a"), noop)).await;
        assert!(declaration_error(&e).contains("mount `my mount`"), "{e}");

        // A consumer whose ack policy is not explicit.
        let stream = tc.js.get_stream("ORDERS").await.expect("stream");
        stream
            .create_consumer(adapter::async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("none-ack".to_owned()),
                ack_policy: adapter::async_nats::jetstream::consumer::AckPolicy::None,
                ..Default::default()
            })
            .await
            .expect("consumer");
        let e = start_err(&server, |a| a.mount(Mount::jetstream("ack-none", "ORDERS", "none-ack"), noop)).await;
        assert!(declaration_error(&e).contains("mount `ack-none`") && declaration_error(&e).contains("explicit"), "{e}");

        // A consumer whose max_deliver is not above max_attempts.
        stream
            .create_consumer(adapter::async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("md3".to_owned()),
                max_deliver: 3,
                ..Default::default()
            })
            .await
            .expect("consumer");
        let e = start_err(&server, |a| a.mount(Mount::jetstream("md-low", "ORDERS", "md3").max_attempts(3), noop)).await;
        assert!(declaration_error(&e).contains("mount `md-low`") && declaration_error(&e).contains("max_deliver"), "{e}");

        // Duplicate mount names.
        let e = start_err(&server, |a| a.mount(Mount::core_subject("twice", "a"), noop).mount(Mount::core_subject("twice", "b"), noop)).await;
        assert!(matches!(e, StartError::DuplicateMount(ref m) if m == "twice"), "{e}");

        // The runtime never changed the consumers it was refused on.
        assert_eq!(tc.consumer_info("ORDERS", "md3").await.config.max_deliver, 3);
        // A consumer with BackOff is accepted, with a warning.
        stream
            .create_consumer(adapter::async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("backoff".to_owned()),
                max_deliver: 10,
                backoff: vec![Duration::from_millis(100), Duration::from_millis(200)],
                ..Default::default()
            })
            .await
            .expect("consumer");
        let ev = events();
        let app = start(&server, &ev, |a| a.mount(Mount::jetstream("with-backoff", "ORDERS", "backoff").max_attempts(3), noop)).await;
        logged(&["WARN", "mount `with-backoff`", "BackOff"]).await;
        app.shutdown().await;
    });
}

#[test]
fn rule_11_refused_mount_consumes_nothing() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        tc.js_publish("orders.new", HeaderMap::new(), b"keep").await;
        let r = runs();
        let e = start_err(&server, |a| {
            a.mount(js_mount("good").max_attempts(2), scripted(&r, |_, _| Outcome::Ack))
                .mount(Mount::core_subject("bad", "x.>"), scripted(&r, |_, _| Outcome::Ack))
        })
        .await;
        assert!(declaration_error(&e).contains("mount `bad`"));
        quiet(300).await;
        assert!(attempts(&r).is_empty());
        assert_eq!(tc.stream_len("ORDERS").await, 1);
    });
}

#[test]
fn server_without_jetstream_refuses_a_jetstream_mount_saying_why_and_runs_core() {
    run(async {
        let server = NatsServer::start_without_jetstream();
        let r = runs();
        let e = start_err(&server, |a| {
            a.mount(js_mount("orders-js"), scripted(&r, |_, _| Outcome::Ack))
        })
        .await;
        let text = e.to_string();
        assert!(matches!(e, StartError::Server { .. }), "{e:?}");
        assert!(text.contains("mount `orders-js`"), "{text}");
        assert!(text.contains("JetStream is not enabled on the server"), "{text}");
        assert!(attempts(&r).is_empty());

        // Core mounts need no JetStream: a dead-letter subject no stream can store falls
        // back to a flushed plain publish.
        let tc = TestClient::connect(&server).await;
        let dlq = Wire::watch(&tc.client, "nojs.dlq").await;
        let ev = events();
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("orders-core", "nojs.in")
                    .max_attempts(1)
                    .dead_letter("nojs.dlq"),
                scripted(&r, |_, _| Outcome::Retry),
            )
        })
        .await;
        core_publish(&tc, "nojs.in", HeaderMap::new(), b"p").await;
        assert_eq!(dlq.at_least(1).await[0].payload, b"p"[..]);
        assert_eq!(settled(&ev, 1).await[0].disposition, Disposition::DeadLettered);
        app.shutdown().await;
    });
}

#[test]
fn rule_13_jetstream_panic_is_no_outcome_and_the_service_goes_on() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-panic-13").max_attempts(3),
                scripted(&r, |attempt, payload| {
                    if payload == "boom" && attempt == 1 {
                        panic!("handler exploded");
                    }
                    Outcome::Ack
                }),
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"boom").await;
        tc.js_publish("orders.new", HeaderMap::new(), b"fine").await;
        logged(&["ERROR", "mount=js-panic-13", "handler panicked", "handler exploded"]).await;
        acks.at_least(2).await;
        assert_eq!(acks.payloads(), ["+ACK", "+ACK"]);
        // "boom" came back after ack_wait with delivered 2.
        assert!(acks.all().iter().any(|s| s.subject.starts_with("$JS.ACK.ORDERS.worker.2.")));
        app.shutdown().await;
    });
}

#[test]
fn rule_13_core_panic_is_gone_and_the_service_goes_on() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-panic-13", "c13p.in").max_attempts(3),
                scripted(&r, |_, payload| {
                    if payload == "boom" {
                        panic!("handler exploded");
                    }
                    Outcome::Ack
                }),
            )
        })
        .await;
        core_publish(&tc, "c13p.in", HeaderMap::new(), b"boom").await;
        core_publish(&tc, "c13p.in", HeaderMap::new(), b"fine").await;
        logged(&["ERROR", "mount=core-panic-13", "handler panicked"]).await;
        let e = settled(&ev, 2).await;
        let panicked: Vec<_> = e.iter().filter(|s| s.disposition == Disposition::NoOutcome).collect();
        assert_eq!(panicked.len(), 1, "{e:?}");
        assert_eq!(panicked[0].outcome, Some(Outcome::None), "a panic counts as no outcome");
        assert!(e.iter().any(|s| s.disposition == Disposition::Unsupported), "the next message was handled");
        app.shutdown().await;
    });
}

#[test]
fn rule_14_shutdown_lets_in_flight_handlers_settle() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        let acks = Wire::watch(&tc.client, "$JS.ACK.ORDERS.>").await;
        let ev = events();
        let started = Arc::new(Mutex::new(false));
        let flag = started.clone();
        let app = start(&server, &ev, |a| {
            a.mount(js_mount("js-slow-14").max_attempts(3), move |_d: Delivery| {
                let flag = flag.clone();
                async move {
                    *flag.lock().unwrap() = true;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Outcome::Ack
                }
            })
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"slow").await;
        eventually("the handler to start", || (*started.lock().unwrap()).then_some(())).await;
        let report = app.shutdown().await;
        assert!(report.abandoned.is_empty(), "{report:?}");
        assert_eq!(acks.payloads(), ["+ACK"], "settled before shutdown returned");
    });
}

#[test]
fn rule_14_delayed_core_copies_left_at_shutdown_are_reported_lost() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(Mount::core_subject("core-lost-14", "c14l.in"), scripted(&r, |_, _| Outcome::RetryAfter(Duration::from_secs(60))))
        })
        .await;
        core_publish(&tc, "c14l.in", HeaderMap::new(), b"x").await;
        settled(&ev, 1).await;
        let report = app.shutdown().await;
        assert_eq!(report.lost_copies, [("core-lost-14".to_owned(), 1)]);
        logged(&["WARN", "mount=core-lost-14", "lost at shutdown"]).await;
    });
}

#[test]
fn rule_14_delayed_core_copies_due_within_the_grace_period_are_published() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        // The grace period is 2 s (see `start`); the copy falls due 1 s after the handler.
        let app = start(&server, &ev, |a| {
            a.mount(Mount::core_subject("core-due-14", "c14d.in"), scripted(&r, |_, _| Outcome::RetryAfter(Duration::from_secs(1))))
        })
        .await;
        let wire = Wire::watch(&tc.client, "c14d.in").await;
        core_publish(&tc, "c14d.in", HeaderMap::new(), b"x").await;
        settled(&ev, 1).await;
        let asked = Instant::now();
        let report = app.shutdown().await;
        assert!(report.lost_copies.is_empty(), "{report:?}");
        let seen = wire.at_least(2).await;
        assert_eq!(seen[1].headers, [("x-ruststream-retry-count".to_owned(), "1".to_owned())]);
        assert!(seen[1].at >= asked, "the copy went out during the shutdown");
        assert!(asked.elapsed() < Duration::from_secs(2), "shutdown ended once the queue was empty");
    });
}

#[test]
fn rule_14_no_core_delivery_starts_once_shutdown_has_begun() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        // Three apps in turn: each time the mount's task could pick the next buffered message
        // over the shutdown, so a loop that does not put the shutdown first fails here almost
        // surely.
        for round in 0..3 {
            let subject = format!("c14s.{round}");
            let started = Arc::new(Mutex::new(0usize));
            let count = started.clone();
            // Concurrency 1: the slow delivery runs on the mount's task; the others stay
            // buffered.
            let app = start(&server, &ev, |a| {
                a.mount(
                    Mount::core_subject("core-stop-14", &subject).concurrency(std::num::NonZeroUsize::MIN),
                    move |_d: Delivery| {
                        *count.lock().unwrap() += 1;
                        async {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            Outcome::Ack
                        }
                    },
                )
            })
            .await;
            for _ in 0..20 {
                core_publish(&tc, &subject, HeaderMap::new(), b"slow").await;
            }
            eventually("the first handler to start", || (*started.lock().unwrap() > 0).then_some(())).await;
            let asked = Instant::now();
            let report = app.shutdown().await;
            assert!(asked.elapsed() < Duration::from_secs(1), "shutdown took {:?}", asked.elapsed());
            assert!(report.abandoned.is_empty(), "{report:?}");
            quiet(300).await;
            assert_eq!(*started.lock().unwrap(), 1, "round {round}: only the delivery in flight when shutdown began ran");
        }
        // The buffered ones are lost (Core cannot redeliver), and said so.
        logged(&["WARN", "mount=core-stop-14", "received but not handled when shutdown began"]).await;
        assert!(r.lock().unwrap().is_empty());
    });
}

#[test]
fn a_panicking_observer_is_logged_and_the_mount_goes_on() {
    run(async {
        let (server, tc, r, _) = core_case().await;
        capture_logs();
        let calls = Arc::new(Mutex::new(0usize));
        let seen = calls.clone();
        let app = App::new(&server.url())
            .on_settled(move |_| {
                let n = {
                    let mut n = seen.lock().unwrap();
                    *n += 1;
                    *n
                };
                if n == 1 {
                    panic!("observer bug");
                }
            })
            .mount(Mount::core_subject("observer-panics", "obs.in"), scripted(&r, |_, _| Outcome::Ack))
            .start()
            .await
            .expect("the app starts");
        for _ in 0..3 {
            core_publish(&tc, "obs.in", HeaderMap::new(), b"x").await;
        }
        eventually("three handler runs", || (r.lock().unwrap().len() == 3).then_some(())).await;
        eventually("three observer calls", || (*calls.lock().unwrap() == 3).then_some(())).await;
        logged(&["ERROR", "mount=observer-panics", "on_settled observer panicked", "observer bug"]).await;
        let report = app.shutdown().await;
        assert!(report.abandoned.is_empty(), "{report:?}");
    });
}

#[test]
fn rule_14_shutdown_with_idle_core_mounts_does_not_wait_for_the_grace_period() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(Mount::core_subject("core-idle-14", "c14i.in"), scripted(&r, |_, _| Outcome::Ack)).mount(
                Mount::core_wildcard("core-idle-wild-14", "c14w.*", "c14w.retry"),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        core_publish(&tc, "c14i.in", HeaderMap::new(), b"x").await;
        core_publish(&tc, "c14w.a", HeaderMap::new(), b"y").await;
        settled(&ev, 2).await;
        let asked = Instant::now();
        let report = app.shutdown().await;
        let took = asked.elapsed();
        // The grace period is 2 s (see `start`): idle mounts end at once.
        assert!(took < Duration::from_secs(1), "shutdown took {took:?}");
        assert!(report.abandoned.is_empty() && report.lost_copies.is_empty(), "{report:?}");
    });
}

#[test]
fn rule_14_shutdown_abandons_a_hung_handler_after_the_grace_period() {
    run(async {
        let server = NatsServer::start();
        let tc = core_setup(&server).await;
        let ev = events();
        let started = Arc::new(Mutex::new(false));
        let flag = started.clone();
        // Concurrency 1: the hung delivery runs on the mount's own loop.
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-hung-14", "c14h.in").concurrency(std::num::NonZeroUsize::MIN),
                move |_d: Delivery| {
                    let flag = flag.clone();
                    async move {
                        *flag.lock().unwrap() = true;
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        Outcome::Ack
                    }
                },
            )
        })
        .await;
        core_publish(&tc, "c14h.in", HeaderMap::new(), b"hangs").await;
        eventually("the handler to start", || (*started.lock().unwrap()).then_some(())).await;
        let began = Instant::now();
        let report = app.shutdown().await;
        let took = began.elapsed();
        assert!(took < Duration::from_secs(5), "shutdown took {took:?} with a 2 s grace period");
        assert_eq!(report.abandoned, [("core-hung-14".to_owned(), 1)]);
    });
}

#[test]
fn typed_handler_undecodable_payload_is_dead_lettered() {
    #[derive(serde::Deserialize)]
    struct Order {
        id: u32,
    }
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        let acks = Wire::watch(&tc.client, "$JS.ACK.ORDERS.>").await;
        let ids = Arc::new(Mutex::new(Vec::new()));
        let seen = ids.clone();
        let ev = events();
        let app = start(&server, &ev, |a| {
            a.mount_json(js_mount("js-json").max_attempts(5).dead_letter("dlq.json"), move |order: Order, _d: Delivery| {
                seen.lock().unwrap().push(order.id);
                async { Outcome::Ack }
            })
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"{\"id\":7}").await;
        tc.js_publish("orders.new", HeaderMap::new(), b"not json").await;
        acks.at_least(2).await;
        assert_eq!(acks.payloads(), ["+ACK", "+TERM"]);
        assert_eq!(*ids.lock().unwrap(), [7]);
        let stored = tc.stored("DLQ").await;
        assert_eq!(stored.len(), 1);
        assert_eq!(&stored[0].2[..], b"not json");
        // The observers see which ran: the handler did not, for the payload that did not decode.
        let seen: Vec<(bool, bool)> = settled(&ev, 2).await.iter().map(|s| (s.handler_ran, s.undecodable)).collect();
        assert_eq!(seen, [(true, false), (false, true)]);
        app.shutdown().await;
    });
}

#[test]
fn credentials_never_appear_in_errors_or_logs() {
    run(async {
        capture_logs();
        // Nothing listens on port 1: the connection fails, and says why without the secret.
        let options = adapter::async_nats::ConnectOptions::with_user_and_password("alice".into(), "s3cret-pw-1".into());
        let e = App::with_options("nats://127.0.0.1:1", options)
            .mount(Mount::core_subject("creds", "a"), |_: Delivery| async { Outcome::Ack })
            .start()
            .await
            .expect_err("nothing listens on port 1");
        assert!(matches!(e, StartError::Connect(_)), "{e}");
        let e = App::new("nats://bob:s3cret-pw-2@127.0.0.1:1")
            .mount(Mount::core_subject("creds", "a"), |_: Delivery| async { Outcome::Ack })
            .start()
            .await
            .expect_err("nothing listens on port 1");
        for secret in ["s3cret-pw-1", "s3cret-pw-2"] {
            assert!(!e.to_string().contains(secret), "{e}");
            assert!(ruststream_tests::log_lines(&[secret]).is_empty(), "a log line holds {secret}");
        }
        let app = App::with_options(
            "nats://127.0.0.1:1",
            adapter::async_nats::ConnectOptions::with_token("s3cret-token".into()),
        );
        assert!(!format!("{app:?}").contains("s3cret-token"));
    });
}

#[test]
fn core_mount_survives_a_server_restart() {
    run(async {
        let mut server = NatsServer::start();
        let (r, ev) = (runs(), events());
        let app = start(&server, &ev, |a| a.mount(Mount::core_subject("core-restart", "cr.in"), scripted(&r, |_, _| Outcome::Ack))).await;
        server.restart();
        // The app's client reconnects on its own; a fresh test client publishes once it is back.
        eventually("a message handled after the restart", || (!attempts(&r).is_empty()).then_some(()))
            .await_with_publisher(&server, "cr.in")
            .await;
        app.shutdown().await;
    });
}

#[test]
fn jetstream_mount_survives_a_server_restart() {
    run(async {
        let mut server = NatsServer::start();
        let tc = TestClient::connect(&server).await;
        tc.file_stream("DURABLE", &["durable.>"]).await;
        let (r, ev) = (runs(), events());
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::jetstream("js-restart", "DURABLE", "worker").ack_wait(Duration::from_secs(2)),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        // The pull request outstanding at the restart is forgotten by the server; the mount
        // must notice and pull again.
        server.restart();
        let tc = TestClient::connect(&server).await;
        tc.js_publish("durable.new", HeaderMap::new(), b"after-restart").await;
        eventually("the message published after the restart handled", || {
            r.lock().unwrap().iter().any(|run| run.1 == "after-restart").then_some(())
        })
        .await;
        let info = tc.consumer_info("DURABLE", "worker").await;
        assert_eq!(info.num_pending, 0);
        app.shutdown().await;
    });
}

/// Publishes to `subject` every 200 ms until the condition of an `eventually` holds.
trait PublishUntil {
    async fn await_with_publisher(self, server: &NatsServer, subject: &str);
}

impl<F: std::future::Future<Output = ()>> PublishUntil for F {
    async fn await_with_publisher(self, server: &NatsServer, subject: &str) {
        let tc = TestClient::connect(server).await;
        let subject = subject.to_owned();
        let publisher = async {
            loop {
                let _ = tc.client.publish(subject.clone(), "ping".into()).await;
                quiet(200).await;
            }
        };
        tokio::select! {
            _ = self => {}
            _ = publisher => {}
        }
    }
}

// ---------------------------------------------------- servers and URLs as users have them

fn secured(options: ServerOptions) -> NatsServer {
    NatsServer::start_with(options)
}

#[test]
fn a_url_with_user_and_password_reaches_a_secured_server_through_a_list() {
    run(async {
        let server = secured(ServerOptions {
            user_password: Some(("alice".into(), "s3cret-pw-4".into())),
            ..ServerOptions::default()
        });
        let tc = TestClient::connect(&server).await;
        let (r, ev) = (runs(), events());
        let noop = |_: Delivery| async { Outcome::Ack };

        let e = start_err(&server, |a| a.mount(Mount::core_subject("secured-anon", "sec.in"), noop)).await;
        assert!(matches!(e, StartError::Connect(_)), "no credentials, no connection: {e}");

        // The first server of the list is down: the client goes on to the next.
        let list = format!(" nats://127.0.0.1:1 , {}", server.url_with_credentials());
        let app = start_at(&list, &ev, |a| a.mount(Mount::core_subject("secured-up", "sec.in"), scripted(&r, |_, _| Outcome::Ack))).await;
        core_publish(&tc, "sec.in", HeaderMap::new(), b"hello").await;
        settled(&ev, 1).await;
        assert_eq!(attempts(&r), [1]);

        let port = server.url().rsplit(':').next().unwrap().to_owned();
        let e = App::new(&format!("nats://alice:wr0ng-pw-5@127.0.0.1:{port}"))
            .mount(Mount::core_subject("secured-wrong", "sec.in"), noop)
            .start()
            .await
            .expect_err("a wrong password is refused");
        assert!(matches!(e, StartError::Connect(_)), "{e}");
        assert!(e.to_string().contains("authorization"), "says why: {e}");
        for secret in ["s3cret-pw-4", "wr0ng-pw-5"] {
            assert!(!e.to_string().contains(secret), "{e}");
            assert!(ruststream_tests::log_lines(&[secret]).is_empty(), "a log line holds {secret}");
        }
        app.shutdown().await;
    });
}

#[test]
fn a_url_with_a_token_reaches_a_secured_server() {
    run(async {
        let server = secured(ServerOptions { token: Some("t0ken-6".into()), ..ServerOptions::default() });
        let tc = TestClient::connect(&server).await;
        let (r, ev) = (runs(), events());
        let app = start_at(&server.url_with_credentials(), &ev, |a| {
            a.mount(Mount::core_subject("token-up", "tok.in"), scripted(&r, |_, _| Outcome::Ack))
        })
        .await;
        core_publish(&tc, "tok.in", HeaderMap::new(), b"hello").await;
        settled(&ev, 1).await;
        assert_eq!(attempts(&r), [1]);
        assert!(ruststream_tests::log_lines(&["t0ken-6"]).is_empty(), "a log line holds the token");
        app.shutdown().await;
    });
}

#[test]
fn a_server_url_that_does_not_parse_names_the_entry_and_the_part() {
    run(async {
        capture_logs();
        let noop = |_: Delivery| async { Outcome::Ack };
        let cases = [
            ("nats://127.0.0.1:4222,,nats://127.0.0.1:4223", "server URL 2 of 3 is empty"),
            ("http://127.0.0.1:4222", "scheme"),
            ("nats://127.0.0.1:4222,nats://dave:pw-7@127.0.0.1:99999", "server URL 2 of 2"),
            ("nats://dave:pw-8@127.0.0.1:1,nats://erin:pw-9@127.0.0.1:2", "other credentials"),
        ];
        for (url, expected) in cases {
            let e = App::new(url).mount(Mount::core_subject("bad-url", "u.in"), noop).start().await.expect_err(url);
            assert!(matches!(e, StartError::ServerUrl(_)), "{url}: {e}");
            assert!(e.to_string().contains(expected), "{url}: {e}");
            for secret in ["pw-7", "pw-8", "pw-9"] {
                assert!(!e.to_string().contains(secret), "{e}");
            }
        }
    });
}

/// Whether the server this suite runs on accepts a `BackOff` list without `max_deliver`
/// (nats-server 2.10.14 and later; older ones require `max_deliver` above the list's length).
fn accepts_backoff_without_max_deliver(server: &NatsServer) -> bool {
    server.version() >= (2, 10, 14)
}

#[test]
fn rule_11_a_backoff_consumer_runs_with_a_warning_on_every_server() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let backoff = vec![Duration::from_millis(300), Duration::from_millis(600)];
        let config = |max_deliver| adapter::async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("worker".into()),
            ack_policy: adapter::async_nats::jetstream::consumer::AckPolicy::Explicit,
            backoff: backoff.clone(),
            max_deliver,
            ..Default::default()
        };
        let orders = tc.js.get_stream("ORDERS").await.unwrap();
        let unset = orders.create_consumer(config(-1)).await;
        if accepts_backoff_without_max_deliver(&server) {
            unset.expect("a current server takes BackOff without max_deliver");
        } else {
            let e = unset.expect_err("nats-server before 2.10.14 requires max_deliver with BackOff");
            assert!(e.to_string().contains("max deliver"), "{e}");
            orders.create_consumer(config(5)).await.expect("with max_deliver above the list and max_attempts");
        }
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::jetstream("backoff", "ORDERS", "worker").max_attempts(3),
                scripted(&r, |attempt, _| if attempt < 3 { Outcome::Retry } else { Outcome::Ack }),
            )
        })
        .await;
        logged(&["WARN", "backoff", "BackOff"]).await;
        tc.js_publish("orders.new", HeaderMap::new(), b"{}").await;
        acks.at_least(3).await;
        assert_eq!(acks.payloads(), ["-NAK", "-NAK", "+ACK"]);
        assert_eq!(attempts(&r), [1, 2, 3]);
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        app.shutdown().await;
    });
}

#[test]
fn rule_09_a_per_message_ttl_is_not_forwarded_to_a_dead_letter() {
    run(async {
        let server = NatsServer::start();
        let tc = TestClient::connect(&server).await;
        // Per-message TTLs came with nats-server 2.11; older servers store `Nats-TTL` as an
        // ordinary header, and the dead letter must drop it there too.
        tc.js
            .create_stream(adapter::async_nats::jetstream::stream::Config {
                name: "ORDERS".into(),
                subjects: vec!["orders.>".into()],
                storage: adapter::async_nats::jetstream::stream::StorageType::Memory,
                allow_message_ttl: server.version() >= (2, 11, 0),
                ..Default::default()
            })
            .await
            .unwrap();
        tc.stream("DLQ", &["dlq.>"]).await; // no per-message TTLs here
        let acks = Wire::watch(&tc.client, "$JS.ACK.ORDERS.>").await;
        let (r, ev) = (runs(), events());
        let app = start(&server, &ev, |a| {
            a.mount(js_mount("ttl-dlq").max_attempts(2).dead_letter("dlq.ttl"), scripted(&r, |_, _| Outcome::Retry))
        })
        .await;
        tc.js_publish("orders.new", headers(&[("Nats-TTL", "1h"), ("Trace-Id", "t-1")]), b"{}").await;
        acks.at_least(2).await;
        assert_eq!(acks.payloads(), ["-NAK", "+TERM"], "the dead letter was stored at the first try");
        let stored = tc.stored("DLQ").await;
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].1, [("Trace-Id".to_owned(), "t-1".to_owned())]);
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        app.shutdown().await;
    });
}

/// Whether the server this suite runs on can send the ack reply subject's v2 form (its
/// `js_ack_fc_v2` feature flag came with nats-server 2.14).
fn sends_v2_ack_replies(server_version: (u32, u32, u32)) -> bool {
    server_version >= (2, 14, 0)
}

#[test]
fn rule_01_the_v2_ack_reply_form_is_read_and_settled() {
    run(async {
        let version = ruststream_tests::nats_server_version();
        let v2 = sends_v2_ack_replies(version);
        let server = NatsServer::start_with(ServerOptions {
            config: v2.then(|| "feature_flags {\n  js_ack_fc_v2: true\n}\n".to_owned()),
            ..ServerOptions::default()
        });
        let tc = js_setup(&server).await;
        let acks = Wire::watch(&tc.client, "$JS.ACK.>").await;
        let seen: Arc<Mutex<Vec<(String, u64, u64)>>> = Arc::default();
        let sink = seen.clone();
        let ev = events();
        let app = start(&server, &ev, |a| {
            a.mount(js_mount("ack-v2").max_attempts(2).dead_letter("dlq.v2"), move |d: Delivery| {
                let js = d.jetstream.clone().expect("a JetStream delivery");
                let payload = String::from_utf8_lossy(&d.payload).into_owned();
                sink.lock().unwrap().push((format!("{}/{}", js.stream, js.consumer), js.delivered, js.stream_sequence));
                std::future::ready(match (payload.as_str(), d.attempt.get()) {
                    ("ok", _) => Outcome::Ack,
                    ("flaky", 1) => Outcome::RetryAfter(Duration::from_millis(50)),
                    ("flaky", _) => Outcome::Ack,
                    _ => Outcome::Retry,
                })
            })
        })
        .await;
        for payload in [&b"ok"[..], b"flaky", b"poison"] {
            tc.js_publish("orders.new", HeaderMap::new(), payload).await;
        }
        acks.at_least(5).await;
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        let replies: Vec<String> = acks.all().iter().map(|s| s.subject.clone()).collect();
        let tokens = if v2 { 11 } else { 9 };
        for reply in &replies {
            let parts: Vec<&str> = reply.split('.').collect();
            assert_eq!(parts.len(), tokens, "{reply} on nats-server {version:?}");
            if v2 {
                assert_eq!(parts[2], "_", "no JetStream domain: {reply}");
                assert_eq!(&parts[4..6], ["ORDERS", "worker"], "{reply}");
            }
        }
        let mut payloads = acks.payloads();
        payloads.sort();
        assert_eq!(payloads, ["+ACK", "+ACK", "+TERM", "-NAK", "-NAK {\"delay\": 50000000}"]);
        let seen = seen.lock().unwrap().clone();
        assert!(seen.iter().all(|(names, _, _)| names == "ORDERS/worker"), "{seen:?}");
        let mut delivered: Vec<(u64, u64)> = seen.iter().map(|(_, d, s)| (*s, *d)).collect();
        delivered.sort();
        assert_eq!(delivered, [(1, 1), (2, 1), (2, 2), (3, 1), (3, 2)], "(stream sequence, delivered)");
        assert_eq!(tc.stream_len("DLQ").await, 1);
        eprintln!("nats-server {version:?}: ack reply subjects of {tokens} tokens, e.g. {}", replies[0]);
        app.shutdown().await;
    });
}
