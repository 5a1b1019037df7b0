//! What every scenario shares: handlers that record their runs, app start-up, the server's
//! set-ups, and one assertion helper per shape (ack payloads, copies, dead letters, refusals).

pub(crate) use std::sync::{Arc, Mutex};
pub(crate) use std::time::Duration;
/// The runtime's clock: the system's on tokio and smol, the virtual one on the simulator.
pub(crate) use tokio::time::Instant;

/// The server each scenario starts: a real nats-server, or the simulator's model
/// (`tests/sim.rs`).
pub(crate) use crate::NatsServer;
pub(crate) use crate::adapter;
pub(crate) use crate::run;
pub(crate) use adapter::async_nats::HeaderMap;
pub(crate) use adapter::{
    App, DeclarationErrorKind, Delivery, Disposition, Mount, Outcome, Running, Settled, StartError,
};
pub(crate) use ruststream_tests::{
    ServerOptions, TestClient, Wire, capture_logs, eventually, logged,
};

/// Handler runs: (attempt, payload, when).
pub(crate) type Runs = Arc<Mutex<Vec<(u64, String, Instant)>>>;

/// Settlements the app reported.
pub(crate) type Events = Arc<Mutex<Vec<Settled>>>;

/// A handler that records each run and returns `script(attempt, payload)`.
pub(crate) fn scripted(
    runs: &Runs,
    script: impl Fn(u64, &str) -> Outcome + Send + Sync + 'static,
) -> impl Fn(Delivery) -> std::future::Ready<Outcome> + Send + Sync + 'static {
    let runs = runs.clone();
    move |d: Delivery| {
        let payload = String::from_utf8_lossy(&d.payload).into_owned();
        let outcome = script(d.attempt.get(), &payload);
        runs.lock()
            .unwrap()
            .push((d.attempt.get(), payload, Instant::now()));
        std::future::ready(outcome)
    }
}

pub(crate) fn runs() -> Runs {
    Arc::new(Mutex::new(Vec::new()))
}

pub(crate) fn attempts(runs: &Runs) -> Vec<u64> {
    runs.lock().unwrap().iter().map(|r| r.0).collect()
}

pub(crate) async fn start(
    server: &NatsServer,
    events: &Events,
    build: impl FnOnce(App) -> App,
) -> Running {
    start_at(&server.url(), events, build).await
}

/// As [`start`], connecting to `url` (one or several server URLs, credentials and all).
pub(crate) async fn start_at(
    url: &str,
    events: &Events,
    build: impl FnOnce(App) -> App,
) -> Running {
    capture_logs();
    // Before the app starts: its mounts register their metrics as they start.
    ruststream_tests::metrics::install_recorder();
    let sink = events.clone();
    let app = App::new(url)
        .grace_period(Duration::from_secs(2))
        .on_settled(move |s| sink.lock().unwrap().push(s.clone()));
    match build(app).start().await {
        Ok(running) => running,
        Err(e) => panic!("the app did not start: {e}"),
    }
}

pub(crate) fn events() -> Events {
    Arc::new(Mutex::new(Vec::new()))
}

pub(crate) async fn settled(events: &Events, n: usize) -> Vec<Settled> {
    eventually(&format!("{n} settlement(s)"), || {
        let all = events.lock().unwrap().clone();
        (all.len() >= n).then_some(all)
    })
    .await
}

pub(crate) fn dispositions(events: &Events) -> Vec<Disposition> {
    events
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.disposition)
        .collect()
}

pub(crate) async fn start_err(server: &NatsServer, build: impl FnOnce(App) -> App) -> StartError {
    capture_logs();
    let app = App::new(&server.url());
    build(app)
        .start()
        .await
        .expect_err("start-up must refuse this declaration")
}

pub(crate) fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in pairs {
        h.append(*n, *v);
    }
    h
}

/// A JetStream set-up: stream ORDERS on `orders.>`, stream DLQ on `dlq.>`.
pub(crate) async fn js_setup(server: &NatsServer) -> TestClient {
    let tc = TestClient::connect(server).await;
    tc.stream("ORDERS", &["orders.>"]).await;
    tc.stream("DLQ", &["dlq.>"]).await;
    tc
}

/// A JetStream test: its server, the set-up of [`js_setup`], a watch on the ack reply
/// subjects of ORDERS, and empty run and settlement records.
pub(crate) async fn js_case() -> (NatsServer, TestClient, Wire, Runs, Events) {
    let server = NatsServer::start();
    let tc = js_setup(&server).await;
    let acks = Wire::watch(&tc.client, "$JS.ACK.ORDERS.>").await;
    (server, tc, acks, runs(), events())
}

pub(crate) fn js_mount(name: &str) -> Mount {
    Mount::jetstream(name, "ORDERS", "worker").ack_wait(Duration::from_millis(700))
}

/// Sleeps a little to show that nothing more happens.
pub(crate) async fn quiet(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Waits until the consumer's info satisfies `ok`.
pub(crate) async fn eventually_info(
    tc: &TestClient,
    ok: impl Fn(&adapter::async_nats::jetstream::consumer::Info) -> bool,
) -> adapter::async_nats::jetstream::consumer::Info {
    eventually_info_of(tc, "ORDERS", ok).await
}

/// As [`eventually_info`], for the consumer `worker` of `stream`.
pub(crate) async fn eventually_info_of(
    tc: &TestClient,
    stream: &str,
    ok: impl Fn(&adapter::async_nats::jetstream::consumer::Info) -> bool,
) -> adapter::async_nats::jetstream::consumer::Info {
    let deadline = Instant::now() + ruststream_tests::PATIENCE;
    loop {
        let info = tc.consumer_info(stream, "worker").await;
        if ok(&info) {
            return info;
        }
        assert!(
            Instant::now() < deadline,
            "consumer info never matched: {info:?}"
        );
        quiet(50).await;
    }
}

pub(crate) async fn core_setup(server: &NatsServer) -> TestClient {
    TestClient::connect(server).await
}

/// A Core test: its server, a test client, and empty run and settlement records.
pub(crate) async fn core_case() -> (NatsServer, TestClient, Runs, Events) {
    let server = NatsServer::start();
    let tc = core_setup(&server).await;
    (server, tc, runs(), events())
}

pub(crate) async fn core_publish(
    tc: &TestClient,
    subject: &str,
    headers: HeaderMap,
    payload: &'static [u8],
) {
    tc.client
        .publish_with_headers(
            subject.to_owned(),
            headers,
            bytes::Bytes::from_static(payload),
        )
        .await
        .expect("publish");
    tc.client.flush().await.expect("flush");
}

pub(crate) fn log_lines_for(mount: &str, text: &str) -> Vec<String> {
    ruststream_tests::log_lines(&[&format!("mount={mount}"), text])
}

pub(crate) fn secured(options: ServerOptions) -> NatsServer {
    NatsServer::start_with(options)
}

/// Waits until `wire` has seen as many ack payloads as `expected` holds, then asserts they are
/// exactly those, in order.
pub(crate) async fn assert_acks(wire: &Wire, expected: &[&str]) {
    wire.at_least(expected.len()).await;
    assert_eq!(wire.payloads(), expected, "ack payloads on the wire");
}

/// Asserts that `stream` stores exactly the dead letters `expected`: (subject, payload), in
/// order; returns what is stored, headers included. Waits (at most [`PATIENCE`]) until the
/// stream holds as many: a dead letter is published after its delivery arrived, and may not
/// be stored yet when the test asks.
///
/// [`PATIENCE`]: ruststream_tests::PATIENCE
pub(crate) async fn assert_dead_letters(
    tc: &TestClient,
    stream: &str,
    expected: &[(&str, &[u8])],
) -> Vec<(String, Vec<(String, String)>, bytes::Bytes)> {
    let deadline = Instant::now() + ruststream_tests::PATIENCE;
    while tc.stream_len(stream).await < expected.len() as u64 && Instant::now() < deadline {
        quiet(20).await;
    }
    let stored = tc.stored(stream).await;
    let got: Vec<(&str, &[u8])> = stored
        .iter()
        .map(|(s, _, p)| (s.as_str(), &p[..]))
        .collect();
    assert_eq!(got, expected, "dead letters stored by {stream}");
    stored
}

/// Waits until `wire` has seen as many Core copies as `expected` holds, then asserts each:
/// (subject, payload, `x-ruststream-retry-count` value), in order.
pub(crate) async fn assert_copies(wire: &Wire, expected: &[(&str, &str, &str)]) {
    let seen = wire.at_least(expected.len()).await;
    let got: Vec<(String, String, String)> = seen
        .iter()
        .map(|m| {
            let count = m
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("x-ruststream-retry-count"))
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            (
                m.subject.clone(),
                String::from_utf8_lossy(&m.payload).into_owned(),
                count,
            )
        })
        .collect();
    let want: Vec<(String, String, String)> = expected
        .iter()
        .map(|(s, p, c)| ((*s).to_owned(), (*p).to_owned(), (*c).to_owned()))
        .collect();
    assert_eq!(got, want, "copies on the wire");
}

/// Asserts that start-up refused a declaration of `mount`, of the kind `kind` accepts.
pub(crate) fn assert_refused(
    err: &StartError,
    mount: &str,
    kind: impl Fn(&DeclarationErrorKind) -> bool,
) {
    match err {
        StartError::Declaration(e) => {
            assert_eq!(e.mount, mount, "{err}");
            assert!(kind(&e.kind), "refused for another reason: {err}");
        }
        other => panic!("not a declaration refusal: {other}"),
    }
}

/// `headers` with the stored-time part of a runtime-made dead-letter id cut off
/// (`ruststream.dead-letter.<stream>.<consumer>.<seq>.<stored ns>` becomes
/// `…<consumer>.<seq>`), so that tests can compare ids exactly; asserts that the part is there
/// and is a number.
pub(crate) fn without_stored_time(headers: &[(String, String)]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(
            |(name, value)| match value.strip_prefix("ruststream.dead-letter.") {
                Some(_) if name == "Nats-Msg-Id" => {
                    let (id, stored) = value.rsplit_once('.').expect("a stored time");
                    assert!(
                        !stored.is_empty() && stored.bytes().all(|b| b.is_ascii_digit()),
                        "{value}"
                    );
                    (name.clone(), id.to_owned())
                }
                _ => (name.clone(), value.clone()),
            },
        )
        .collect()
}

/// A handler that records each run, sleeps `sleep(attempt)`, then returns `outcome(attempt)`.
pub(crate) fn slow(
    runs: &Runs,
    sleep: impl Fn(u64) -> Duration + Send + Sync + 'static,
    outcome: impl Fn(u64) -> Outcome + Send + Sync + 'static,
) -> impl Fn(Delivery) -> std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send>>
+ Send
+ Sync
+ 'static {
    let runs = runs.clone();
    let (sleep, outcome) = (Arc::new(sleep), Arc::new(outcome));
    move |d: Delivery| {
        let attempt = d.attempt.get();
        runs.lock()
            .unwrap()
            .push((attempt, String::new(), Instant::now()));
        let (sleep, outcome) = (sleep.clone(), outcome.clone());
        Box::pin(async move {
            tokio::time::sleep(sleep(attempt)).await;
            outcome(attempt)
        })
    }
}
