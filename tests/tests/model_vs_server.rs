//! The simulator's model against a real nats-server, at the wire: the same JetStream script
//! (a stream, a pull consumer, stored messages, a pull request, and a reply to each delivery
//! by its stream sequence and delivery count) runs on both, and the deliveries (which
//! message, which delivery count, when), the ends of pull requests and the consumer's final
//! state must agree. This keeps `ruststream-sim` honest: a behaviour the model gets wrong
//! fails here, on both servers the suite runs on.
//!
//! The scripts come from a proptest strategy, drawn with a fixed seed so that every run
//! checks the same sample (each case takes up to 3 s of real time on the server).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_nats::jetstream::{consumer::pull, stream};
use bytes::Bytes;
use futures_util::StreamExt;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use ruststream_sim::{Publish, Server, ServerVersion};
use ruststream_tests::{NatsServer, TestClient, nats_server_version};

/// How a delivery is answered, and how long after it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Ack,
    Nak,
    NakAfter(u64),
    /// `-NAK` with a Go duration (`-NAK 600ms`).
    NakDuration(u64),
    Term,
    /// `+WPI` now, `+ACK` after the given milliseconds.
    ProgressThenAck(u64),
    Nothing,
}

impl Answer {
    fn payload(self) -> Option<String> {
        match self {
            Answer::Ack => Some("+ACK".into()),
            Answer::Nak => Some("-NAK".into()),
            Answer::NakAfter(ms) => Some(format!(r#"-NAK {{"delay": {}}}"#, ms * 1_000_000)),
            Answer::NakDuration(ms) => Some(format!("-NAK {ms}ms")),
            Answer::Term => Some("+TERM".into()),
            Answer::ProgressThenAck(_) => Some("+WPI".into()),
            Answer::Nothing => None,
        }
    }
}

/// A delivery, by (stream sequence, delivery count), and its answer with how many
/// milliseconds after the delivery it goes.
type Reply = ((u64, u64), (Answer, u64));

#[derive(Debug, Clone)]
struct Script {
    messages: u64,
    ack_wait_ms: u64,
    max_deliver: i64,
    backoff_ms: Vec<u64>,
    /// 0: the server's default (1000).
    max_ack_pending: i64,
    /// Per (stream sequence, delivery count): the answer and how long after the delivery.
    answers: BTreeMap<(u64, u64), (Answer, u64)>,
}

impl Script {
    fn answer(&self, sequence: u64, delivered: u64) -> (Answer, u64) {
        self.answers
            .get(&(sequence, delivered))
            .copied()
            .unwrap_or((Answer::Ack, 0))
    }

    fn consumer(&self) -> pull::Config {
        pull::Config {
            durable_name: Some("worker".into()),
            ack_wait: Duration::from_millis(self.ack_wait_ms),
            max_deliver: self.max_deliver,
            backoff: self
                .backoff_ms
                .iter()
                .map(|ms| Duration::from_millis(*ms))
                .collect(),
            max_ack_pending: self.max_ack_pending,
            ..Default::default()
        }
    }
}

fn script() -> impl Strategy<Value = Script> {
    let answer = prop_oneof![
        3 => Just(Answer::Ack),
        2 => Just(Answer::Nak),
        2 => (150u64..400).prop_map(Answer::NakAfter),
        1 => (150u64..400).prop_map(Answer::NakDuration),
        1 => Just(Answer::Term),
        1 => (150u64..300).prop_map(Answer::ProgressThenAck),
        2 => Just(Answer::Nothing),
    ];
    (
        1u64..4,
        prop_oneof![Just(300u64), Just(450)],
        prop_oneof![Just(-1i64), 2i64..5],
        prop_oneof![Just(vec![]), Just(vec![250u64, 500])],
        prop_oneof![2 => Just(0i64), 1 => 1i64..3],
        proptest::collection::btree_map((1u64..4, 1u64..4), (answer, 0u64..80), 0..8),
    )
        .prop_map(
            |(messages, ack_wait_ms, max_deliver, backoff_ms, max_ack_pending, answers)| {
                // nats-server (2.9) wants max_deliver set and above the BackOff's length.
                let max_deliver = match (max_deliver, backoff_ms.len() as i64) {
                    (m, b) if b > 0 && (m == -1 || b >= m) => b + 1,
                    (m, _) => m,
                };
                Script {
                    messages,
                    ack_wait_ms,
                    max_deliver,
                    backoff_ms,
                    max_ack_pending,
                    answers,
                }
            },
        )
}

/// What a run saw: each delivery (stream sequence, delivery count, milliseconds after the
/// pull), the status codes that ended requests, and the consumer's final state.
#[derive(Debug)]
struct Seen {
    deliveries: Vec<(u64, u64, u64)>,
    final_state: (usize, usize, u64, u64, u64),
}

/// How long a script runs: long enough for every redelivery to have come and gone.
const HORIZON: Duration = Duration::from_millis(2_600);

/// Reads `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.…`.
fn counts(reply: &str) -> (u64, u64) {
    let tokens: Vec<&str> = reply.split('.').collect();
    (tokens[5].parse().unwrap(), tokens[4].parse().unwrap())
}

async fn on_server(server: &NatsServer, script: &Script, case: usize) -> Seen {
    let t = TestClient::connect(server).await;
    let name = format!("MODEL{case}");
    let subject = format!("model{case}.orders");
    t.stream(&name, &[&subject]).await;
    let s = t.js.get_stream(&name).await.unwrap();
    s.create_consumer(script.consumer()).await.unwrap();
    for i in 0..script.messages {
        t.js.publish(subject.clone(), Bytes::from(i.to_string()))
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let inbox = t.client.new_inbox();
    let mut replies = t.client.subscribe(inbox.clone()).await.unwrap();
    let start = Instant::now();
    t.client
        .publish_with_reply(
            format!("$JS.API.CONSUMER.MSG.NEXT.{name}.worker"),
            inbox,
            Bytes::from(r#"{"batch":100,"expires":10000000000}"#),
        )
        .await
        .unwrap();
    let mut deliveries = Vec::new();
    let deadline = tokio::time::Instant::from_std(start + HORIZON);
    while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, replies.next()).await {
        let Some(reply) = msg.reply.clone() else {
            continue;
        };
        let (sequence, delivered) = counts(&reply);
        let at = start.elapsed().as_millis() as u64;
        deliveries.push((sequence, delivered, at));
        let (answer, after) = script.answer(sequence, delivered);
        let client = t.client.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(after)).await;
            if let Some(payload) = answer.payload() {
                client.publish(reply.clone(), payload.into()).await.unwrap();
            }
            if let Answer::ProgressThenAck(ms) = answer {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                client.publish(reply, "+ACK".into()).await.unwrap();
            }
            client.flush().await.unwrap();
        });
    }
    let info = t.consumer_info(&name, "worker").await;
    Seen {
        deliveries,
        final_state: (
            info.num_ack_pending,
            info.num_redelivered,
            info.ack_floor.stream_sequence,
            info.delivered.stream_sequence,
            info.num_pending,
        ),
    }
}

fn on_model(script: &Script) -> Seen {
    let start = Instant::now();
    let mut server = Server::new(start).with_version(model_version());
    let app = server.connect();
    server
        .create_stream(stream::Config {
            name: "MODEL".into(),
            subjects: vec!["model.orders".into()],
            ..Default::default()
        })
        .unwrap();
    server.create_consumer("MODEL", script.consumer()).unwrap();
    for i in 0..script.messages {
        server
            .publish(app, Publish::new("model.orders", i.to_string()), start)
            .unwrap();
    }
    server.subscribe(app, "_INBOX.model", None).unwrap();
    server
        .publish(
            app,
            Publish::new(
                "$JS.API.CONSUMER.MSG.NEXT.MODEL.worker",
                r#"{"batch":100,"expires":10000000000}"#,
            )
            .reply("_INBOX.model"),
            start,
        )
        .unwrap();
    // Acknowledgements to send: (when, order) -> (reply subject, payload).
    let mut due: BTreeMap<(Instant, u64), (String, String)> = BTreeMap::new();
    let mut order = 0;
    let mut deliveries = Vec::new();
    let mut now = start;
    loop {
        while let Some(d) = server.poll_delivered() {
            let Some(reply) = d.message.reply.map(|r| r.to_string()) else {
                continue;
            };
            let (sequence, delivered) = counts(&reply);
            deliveries.push((sequence, delivered, (now - start).as_millis() as u64));
            let (answer, after) = script.answer(sequence, delivered);
            let at = now + Duration::from_millis(after);
            if let Some(payload) = answer.payload() {
                order += 1;
                due.insert((at, order), (reply.clone(), payload));
            }
            if let Answer::ProgressThenAck(ms) = answer {
                order += 1;
                due.insert(
                    (at + Duration::from_millis(ms), order),
                    (reply, "+ACK".into()),
                );
            }
        }
        let next_ack = due.keys().next().map(|(at, _)| *at);
        let next = [next_ack, server.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(at) if at <= start + HORIZON => {
                now = at;
                if next_ack == Some(at) {
                    let (key, (reply, payload)) = due.pop_first().expect("due");
                    server
                        .publish(app, Publish::new(reply, payload), key.0)
                        .unwrap();
                } else {
                    server.handle_timeout(at);
                }
            }
            _ => break,
        }
    }
    let state = server.consumer_state("MODEL", "worker").unwrap();
    Seen {
        deliveries,
        final_state: (
            state.num_ack_pending,
            state.num_redelivered,
            state.ack_floor.stream_sequence,
            state.delivered.stream_sequence,
            state.num_pending,
        ),
    }
}

/// The model behaves as the server the suite runs on, where versions differ.
fn model_version() -> ServerVersion {
    match nats_server_version() {
        (2, minor, _) if minor < 10 => ServerVersion::V2_9,
        _ => ServerVersion::Current,
    }
}

/// How far apart the same delivery may come on the server and in the model: the server's
/// timers, the network and the test's own scheduling on a busy machine.
const TOLERANCE_MS: u64 = 150;

fn agree(script: &Script, server: &Seen, model: &Seen) -> Result<(), String> {
    let key = |d: &(u64, u64, u64)| (d.0, d.1);
    let mut on_server: Vec<_> = server.deliveries.clone();
    let mut in_model: Vec<_> = model.deliveries.clone();
    on_server.sort_by_key(key);
    in_model.sort_by_key(key);
    let which = |v: &[(u64, u64, u64)]| v.iter().map(key).collect::<Vec<_>>();
    if which(&on_server) != which(&in_model) {
        return Err(format!(
            "different deliveries for {script:?}:\n server {:?}\n model  {:?}",
            server.deliveries, model.deliveries
        ));
    }
    for (s, m) in on_server.iter().zip(&in_model) {
        if s.2.abs_diff(m.2) > TOLERANCE_MS {
            return Err(format!(
                "delivery {:?} at {} ms on the server, {} ms in the model, for {script:?}",
                key(s),
                s.2,
                m.2
            ));
        }
    }
    if server.final_state != model.final_state {
        return Err(format!(
            "final consumer state (ack pending, redelivered, ack floor, delivered, pending): server {:?}, model {:?}, for {script:?}",
            server.final_state, model.final_state
        ));
    }
    Ok(())
}

/// The sample: a few scripts written out (a delivery left unanswered to `max_deliver`, a
/// BackOff, a delayed `-NAK`, progress, `max_ack_pending` 1), then drawn ones.
fn sample(drawn: usize) -> Vec<Script> {
    let mut scripts = vec![
        Script {
            messages: 2,
            ack_wait_ms: 300,
            max_deliver: 3,
            backoff_ms: vec![],
            max_ack_pending: 0,
            answers: [
                ((1, 1), (Answer::Nothing, 0)),
                ((1, 2), (Answer::Nothing, 0)),
            ]
            .into_iter()
            .chain([
                ((1, 3), (Answer::Nothing, 0)),
                ((2, 1), (Answer::NakAfter(300), 10)),
            ])
            .collect(),
        },
        Script {
            messages: 1,
            ack_wait_ms: 300,
            max_deliver: 4,
            backoff_ms: vec![250, 500],
            max_ack_pending: 0,
            answers: [
                ((1, 1), (Answer::Nothing, 0)),
                ((1, 2), (Answer::Nothing, 0)),
                ((1, 3), (Answer::ProgressThenAck(200), 50)),
            ]
            .into_iter()
            .collect(),
        },
    ];
    scripts.push(Script {
        messages: 3,
        ack_wait_ms: 300,
        max_deliver: -1,
        backoff_ms: vec![],
        max_ack_pending: 1,
        answers: [
            ((1, 1), (Answer::Nothing, 0)),
            ((2, 1), (Answer::Nak, 20)),
            ((2, 2), (Answer::NakAfter(200), 0)),
        ]
        .into_iter()
        .collect(),
    });
    // Found by a review: a Go-duration -NAK, an +ACK after max_deliver, and the ack floor
    // after an out-of-order ack below a message past max_deliver.
    let written = |messages, ack_wait_ms, max_deliver, answers: &[Reply]| Script {
        messages,
        ack_wait_ms,
        max_deliver,
        backoff_ms: vec![],
        max_ack_pending: 0,
        answers: answers.iter().copied().collect(),
    };
    scripts.push(written(
        1,
        1_000,
        -1,
        &[((1, 1), (Answer::NakDuration(600), 0))],
    ));
    scripts.push(written(
        1,
        300,
        2,
        &[((1, 1), (Answer::Nothing, 0)), ((1, 2), (Answer::Ack, 450))],
    ));
    scripts.push(written(
        3,
        500,
        2,
        &[
            ((1, 1), (Answer::Nothing, 0)),
            ((1, 2), (Answer::Nothing, 0)),
            ((2, 1), (Answer::NakAfter(1_000), 0)),
            ((2, 2), (Answer::Nothing, 0)),
            ((3, 1), (Answer::NakAfter(900), 0)),
            ((3, 2), (Answer::Ack, 300)),
        ],
    ));
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let strategy = script();
    for _ in 0..drawn {
        scripts.push(strategy.new_tree(&mut runner).expect("a script").current());
    }
    scripts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_agrees_with_nats_server_on_pull_consumers() {
    let server = NatsServer::start();
    let scripts = sample(8);
    let mut failures = Vec::new();
    for (case, script) in scripts.iter().enumerate() {
        let real = on_server(&server, script, case).await;
        let model = on_model(script);
        if let Err(e) = agree(script, &real, &model) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scripts disagree:\n{}",
        failures.len(),
        scripts.len(),
        failures.join("\n")
    );
}

/// One step of the stream and request script below, the same on both sides.
#[derive(Debug, Clone)]
enum Op {
    /// Publish to a subject, with a `Nats-Msg-Id` when given, after waiting this long.
    Publish(&'static str, Option<&'static str>, u64),
    /// Send a pull request with this JSON to the consumer `worker` of the stream.
    Pull(&'static str, &'static str),
    /// Acknowledge every delivery received so far on the stream's requests.
    AckAll,
    /// Let this many milliseconds pass.
    Wait(u64),
}

/// The streams of [`requests_and_streams`]: name, subjects, retention, max_messages,
/// discard new, duplicate window (ms).
const STREAMS: [(&str, &str, stream::RetentionPolicy, i64, bool, u64); 5] = [
    ("REQ", "req.>", stream::RetentionPolicy::Limits, 0, false, 0),
    (
        "DEDUP",
        "dedup.>",
        stream::RetentionPolicy::Limits,
        0,
        false,
        500,
    ),
    (
        "CAPPED",
        "capped.>",
        stream::RetentionPolicy::Limits,
        2,
        false,
        0,
    ),
    (
        "WQ",
        "wq.>",
        stream::RetentionPolicy::WorkQueue,
        0,
        false,
        0,
    ),
    (
        "FULL",
        "full.>",
        stream::RetentionPolicy::Limits,
        1,
        true,
        0,
    ),
];

fn stream_config(i: usize) -> stream::Config {
    let (name, subject, retention, max_messages, discard_new, window) = STREAMS[i];
    stream::Config {
        name: name.into(),
        subjects: vec![subject.into()],
        retention,
        max_messages,
        discard: if discard_new {
            stream::DiscardPolicy::New
        } else {
            stream::DiscardPolicy::Old
        },
        duplicate_window: Duration::from_millis(window),
        ..Default::default()
    }
}

fn worker() -> pull::Config {
    pull::Config {
        durable_name: Some("worker".into()),
        ack_wait: Duration::from_secs(5),
        max_batch: 5,
        ..Default::default()
    }
}

/// The script: pull requests that end by expiry (408 with the unfilled count), by finding
/// nothing (`no_wait`: 404) and by asking too much (409); a duplicate window; a capped stream;
/// one that refuses what comes once it is full; a work queue emptied by its acknowledgements.
fn requests_and_streams() -> Vec<Op> {
    vec![
        Op::Publish("req.a", None, 0),
        Op::Publish("req.b", None, 0),
        Op::Pull("REQ", r#"{"batch":3,"expires":300000000}"#),
        Op::Wait(450),
        Op::Pull("REQ", r#"{"batch":1,"no_wait":true}"#),
        Op::Pull("REQ", r#"{"batch":6}"#),
        Op::Pull("REQ", r#"{"batch":1,"no_wait":true,"expires":300000000}"#),
        Op::Wait(400),
        Op::Publish("dedup.a", Some("id-1"), 0),
        Op::Publish("dedup.a", Some("id-1"), 100),
        Op::Publish("dedup.b", Some("id-2"), 0),
        Op::Publish("dedup.a", Some("id-1"), 600),
        Op::Publish("capped.a", None, 0),
        Op::Publish("capped.b", None, 0),
        Op::Publish("capped.c", None, 0),
        Op::Publish("full.a", None, 0),
        Op::Publish("full.b", None, 0),
        Op::Publish("wq.a", None, 0),
        Op::Publish("wq.b", None, 0),
        Op::Pull("WQ", r#"{"batch":2}"#),
        Op::Wait(100),
        Op::AckAll,
        Op::Wait(100),
    ]
}

/// What a side saw, one line per observation: stream acks, statuses with their pending
/// count, deliveries, and each stream's stored sequences at the end.
async fn requests_on_server(server: &NatsServer) -> Vec<String> {
    let t = TestClient::connect(server).await;
    for i in 0..STREAMS.len() {
        let s = t.js.create_stream(stream_config(i)).await.unwrap();
        s.create_consumer(worker()).await.unwrap();
    }
    let inbox = t.client.new_inbox();
    let mut replies = t.client.subscribe(inbox.clone()).await.unwrap();
    let mut seen = Vec::new();
    let mut to_ack = Vec::new();
    for op in requests_and_streams() {
        match op {
            Op::Publish(subject, id, after) => {
                tokio::time::sleep(Duration::from_millis(after)).await;
                let mut headers = async_nats::HeaderMap::new();
                if let Some(id) = id {
                    headers.insert("Nats-Msg-Id", id);
                }
                let ack = match t
                    .js
                    .publish_with_headers(subject, headers, Bytes::from_static(b"x"))
                    .await
                {
                    Ok(f) => f.await.map(|a| (a.sequence, a.duplicate)),
                    Err(e) => Err(e),
                };
                seen.push(match ack {
                    Ok((seq, duplicate)) => {
                        format!("stored {subject} seq {seq} duplicate {duplicate}")
                    }
                    Err(_) => format!("refused {subject}"),
                });
            }
            Op::Pull(stream, request) => {
                t.client
                    .publish_with_reply(
                        format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.worker"),
                        inbox.clone(),
                        Bytes::from_static(request.as_bytes()),
                    )
                    .await
                    .unwrap();
                collect(
                    &mut replies,
                    &mut seen,
                    &mut to_ack,
                    Duration::from_millis(100),
                )
                .await;
            }
            Op::AckAll => {
                for reply in to_ack.drain(..) {
                    t.client.publish(reply, "+ACK".into()).await.unwrap();
                }
                t.client.flush().await.unwrap();
            }
            Op::Wait(ms) => {
                collect(
                    &mut replies,
                    &mut seen,
                    &mut to_ack,
                    Duration::from_millis(ms),
                )
                .await;
            }
        }
    }
    for (name, ..) in STREAMS {
        let mut s = t.js.get_stream(name).await.unwrap();
        let state = s.info().await.unwrap().state.clone();
        seen.push(format!(
            "{name}: {} messages, first {} last {}",
            state.messages, state.first_sequence, state.last_sequence
        ));
    }
    seen
}

fn requests_on_model() -> Vec<String> {
    let start = Instant::now();
    let mut now = start;
    let mut server = Server::new(start).with_version(model_version());
    let app = server.connect();
    for (i, (name, ..)) in STREAMS.iter().enumerate() {
        server.create_stream(stream_config(i)).unwrap();
        server.create_consumer(name, worker()).unwrap();
    }
    let inbox = "_INBOX.model";
    server.subscribe(app, inbox, None).unwrap();
    let mut seen = Vec::new();
    let mut to_ack = Vec::new();
    let advance = |server: &mut Server, now: &mut Instant, by: Duration| {
        let until = *now + by;
        while let Some(due) = server.poll_timeout().filter(|d| *d <= until) {
            server.handle_timeout(due);
        }
        server.handle_timeout(until);
        *now = until;
    };
    let drain = |server: &mut Server, seen: &mut Vec<String>, to_ack: &mut Vec<String>| {
        while let Some(d) = server.poll_delivered() {
            if d.message.subject.starts_with("_INBOX.pub") {
                continue;
            }
            seen.push(observe(&d.message));
            if let Some(reply) = d.message.reply {
                to_ack.push(reply.to_string());
            }
        }
    };
    for op in requests_and_streams() {
        match op {
            Op::Publish(subject, id, after) => {
                advance(&mut server, &mut now, Duration::from_millis(after));
                drain(&mut server, &mut seen, &mut to_ack);
                let mut message = Publish::new(subject, Bytes::from_static(b"x"));
                if let Some(id) = id {
                    let mut headers = async_nats::HeaderMap::new();
                    headers.insert("Nats-Msg-Id", id);
                    message = message.headers(headers);
                }
                seen.push(match server.publish(app, message, now) {
                    Ok(p) => {
                        let ack = p.stored.expect("a stream stores it");
                        format!(
                            "stored {subject} seq {} duplicate {}",
                            ack.sequence, ack.duplicate
                        )
                    }
                    Err(_) => format!("refused {subject}"),
                });
            }
            Op::Pull(stream, request) => {
                let next = format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.worker");
                server
                    .publish(app, Publish::new(next, request).reply(inbox), now)
                    .unwrap();
                drain(&mut server, &mut seen, &mut to_ack);
                advance(&mut server, &mut now, Duration::from_millis(100));
                drain(&mut server, &mut seen, &mut to_ack);
            }
            Op::AckAll => {
                for reply in to_ack.drain(..) {
                    server
                        .publish(app, Publish::new(reply, "+ACK"), now)
                        .unwrap();
                }
            }
            Op::Wait(ms) => {
                advance(&mut server, &mut now, Duration::from_millis(ms));
                drain(&mut server, &mut seen, &mut to_ack);
            }
        }
    }
    for (name, ..) in STREAMS {
        let state = server.stream_state(name).unwrap();
        seen.push(format!(
            "{name}: {} messages, first {} last {}",
            state.messages, state.first_sequence, state.last_sequence
        ));
    }
    seen
}

/// Takes what arrives on the inbox for `wait`: each observed, each delivery's reply subject
/// kept to acknowledge.
async fn collect(
    replies: &mut async_nats::Subscriber,
    seen: &mut Vec<String>,
    to_ack: &mut Vec<String>,
    wait: Duration,
) {
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(Some(m)) = tokio::time::timeout_at(deadline, replies.next()).await {
        seen.push(observe(&m));
        if let Some(reply) = m.reply {
            to_ack.push(reply.to_string());
        }
    }
}

/// A message on the requests' inbox, as one line: a delivery by its subject and counts, or
/// a status with its description and unfilled count.
fn observe(m: &async_nats::Message) -> String {
    match (&m.reply, m.status) {
        (Some(reply), _) => {
            let (sequence, delivered) = counts(reply);
            format!("delivered {} seq {sequence} count {delivered}", m.subject)
        }
        (None, status) => {
            let pending = m
                .headers
                .as_ref()
                .and_then(|h| h.get("Nats-Pending-Messages"))
                .map(|v| v.as_str().to_owned());
            format!(
                "status {:?} {:?} pending {pending:?}",
                status.map(u16::from),
                m.description
            )
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_agrees_with_nats_server_on_request_ends_and_streams() {
    let server = NatsServer::start();
    let real = requests_on_server(&server).await;
    let model = requests_on_model();
    assert_eq!(real, model, "server (left) and model (right) disagree");
}

/// What a priority-group and pause script saw, one line per observation, pin ids named in
/// the order they appeared (`pin A`, `pin B`, …), as they are random on the server.
#[derive(Default)]
struct Lines {
    lines: Vec<String>,
    pins: Vec<String>,
}

impl Lines {
    fn push(&mut self, line: String) {
        // Idle heartbeats come on timers: one line for a run of them.
        if self.lines.last() != Some(&line) || !line.contains("Idle Heartbeat") {
            self.lines.push(line);
        }
    }

    fn pin(&mut self, id: &str) -> String {
        if id.is_empty() {
            return "pin (empty)".into();
        }
        let index = match self.pins.iter().position(|p| p == id) {
            Some(i) => i,
            None => {
                self.pins.push(id.to_owned());
                self.pins.len() - 1
            }
        };
        format!("pin {}", (b'A' + index as u8) as char)
    }
}

/// The JetStream API request, its answer as one line: the error's codes, or the fields
/// named; `no answer` when nothing comes within a second (nats-server 2.9 to
/// `CONSUMER.PAUSE`).
async fn api(
    client: &async_nats::Client,
    subject: &str,
    body: &str,
    fields: &[&str],
    seen: &mut Lines,
) -> Option<serde_json::Value> {
    let asked = client.request(format!("$JS.API.{subject}"), Bytes::from(body.to_owned()));
    let line = match tokio::time::timeout(Duration::from_secs(1), asked).await {
        Err(_) => {
            seen.push(format!("{subject}: no answer"));
            return None;
        }
        Ok(Err(e)) => format!("{subject}: request failed: {:?}", e.kind()),
        Ok(Ok(m)) => {
            let json: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
            let line = match json.get("error") {
                Some(e) => format!(
                    "{subject}: error {} {} {}",
                    e["code"], e["err_code"], e["description"]
                ),
                None => {
                    let mut line = format!("{subject}: {}", json["type"]);
                    for field in fields {
                        let value =
                            field
                                .split('.')
                                .fold(&json, |v, key| match key.parse::<usize>() {
                                    Ok(i) => &v[i],
                                    Err(_) => &v[key],
                                });
                        let value = match value {
                            serde_json::Value::String(s)
                                if s.len() == 22 && field.ends_with("pinned_client_id") =>
                            {
                                seen.pin(s)
                            }
                            // A remaining time: within the pause of 700 ms asked (the
                            // server's clock has moved on a little since).
                            serde_json::Value::Number(n) if field.ends_with("remaining") => {
                                let n = n.as_u64().unwrap();
                                match n > 0 && n <= 700_000_000 {
                                    true => "0 < r <= 700 ms".to_owned(),
                                    false => format!("{n} ns"),
                                }
                            }
                            other => other.to_string(),
                        };
                        line.push_str(&format!(" {field}={value}"));
                    }
                    line
                }
            };
            seen.push(line);
            return Some(json);
        }
    };
    seen.push(line);
    None
}

/// The script's inboxes (`_INBOX.pri.<name>`), merged: what arrives, by the inbox's name.
type Inboxes = futures_util::stream::SelectAll<
    std::pin::Pin<Box<dyn futures_util::Stream<Item = (String, async_nats::Message)> + Send>>,
>;

/// Takes what arrives on the script's inboxes for `wait`: deliveries by inbox, subject,
/// stream sequence and pin; statuses by inbox, code and description.
async fn take(replies: &mut Inboxes, seen: &mut Lines, wait: Duration) {
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(Some((inbox, m))) = tokio::time::timeout_at(deadline, replies.next()).await {
        let line = match (&m.reply, m.status) {
            (Some(reply), _) => {
                let (sequence, _) = counts(reply);
                let pin = m
                    .headers
                    .as_ref()
                    .and_then(|h| h.get("Nats-Pin-Id"))
                    .map(|v| v.as_str().to_owned());
                let pin = match pin {
                    Some(id) => format!(" {}", seen.pin(&id)),
                    None => String::new(),
                };
                format!("{inbox}: delivered {} seq {sequence}{pin}", m.subject)
            }
            (None, status) => {
                let pending = m
                    .headers
                    .as_ref()
                    .and_then(|h| h.get("Nats-Pending-Messages"))
                    .map(|v| v.as_str().to_owned());
                format!(
                    "{inbox}: status {:?} {:?} pending {pending:?}",
                    status.map(u16::from),
                    m.description
                )
            }
        };
        seen.push(line);
    }
}

/// The script of pauses and priority groups, the same on a real server and on the model (a
/// [`Sim`](ruststream_sim::Sim) serving it, on its virtual clock): `wall_now` is the server's
/// wall time (the model's starts at 2026-01-01).
async fn pause_and_priority(
    client: async_nats::Client,
    wall_now: impl Fn() -> async_nats::datetime::DateTime,
) -> Vec<String> {
    let mut seen = Lines::default();
    let s = &mut seen;
    let js = async_nats::jetstream::new(client.clone());
    js.create_stream(stream::Config {
        name: "PRI".into(),
        subjects: vec!["pri.>".into()],
        storage: stream::StorageType::Memory,
        ..Default::default()
    })
    .await
    .unwrap();
    let publish = |subject: &'static str| {
        let js = js.clone();
        async move {
            js.publish(subject, "x".into())
                .await
                .unwrap()
                .await
                .unwrap()
        }
    };
    let pull = |stream_consumer: &str, inbox: &str, body: &str| {
        let client = client.clone();
        let subject = format!("$JS.API.CONSUMER.MSG.NEXT.{stream_consumer}");
        let inbox = format!("_INBOX.pri.{inbox}");
        let body = Bytes::from(body.to_owned());
        async move {
            client
                .publish_with_reply(subject, inbox, body)
                .await
                .unwrap();
            client.flush().await.unwrap();
        }
    };
    let create = |name: &str, extra: &str| {
        format!(
            r#"{{"stream_name":"PRI","config":{{"durable_name":"{name}","ack_policy":"explicit","filter_subject":"pri.{name}"{extra}}}}}"#
        )
    };
    let mut replies = Inboxes::new();
    for name in [
        "pz1", "pz2", "ov1", "ov2", "ov3", "ov4", "ov5", "ov6", "ov7", "pn1", "pn2", "pn3", "pn4",
    ] {
        let inbox = client
            .subscribe(format!("_INBOX.pri.{name}"))
            .await
            .unwrap();
        replies.push(Box::pin(inbox.map(move |m| (name.to_owned(), m))));
    }
    let short = Duration::from_millis(100);

    // Pause: requests wait (heartbeats, no_wait ends), delivery at the pause's end.
    api(
        &client,
        "CONSUMER.CREATE.PRI.pz",
        &create("pz", ""),
        &["paused"],
        s,
    )
    .await;
    publish("pri.pz").await;
    let until = wall_now() + Duration::from_millis(700);
    let until = serde_json::to_value(pull::Config {
        pause_until: Some(until),
        ..Default::default()
    })
    .unwrap()["pause_until"]
        .clone();
    let body = serde_json::json!({ "pause_until": until }).to_string();
    api(
        &client,
        "CONSUMER.PAUSE.PRI.pz",
        &body,
        &["paused", "pause_remaining"],
        s,
    )
    .await;
    api(
        &client,
        "CONSUMER.INFO.PRI.pz",
        "",
        &["paused", "pause_remaining", "num_pending"],
        s,
    )
    .await;
    pull(
        "PRI.pz",
        "pz1",
        r#"{"batch":1,"expires":3000000000,"idle_heartbeat":150000000}"#,
    )
    .await;
    pull("PRI.pz", "pz2", r#"{"batch":1,"no_wait":true}"#).await;
    take(&mut replies, s, Duration::from_millis(400)).await;
    s.push("-- the pause ends".into());
    take(&mut replies, s, Duration::from_millis(600)).await;
    api(
        &client,
        "CONSUMER.INFO.PRI.pz",
        "",
        &["paused", "pause_remaining", "num_pending"],
        s,
    )
    .await;
    let far = r#"{"pause_until":"2099-01-01T00:00:00Z"}"#;
    api(
        &client,
        "CONSUMER.PAUSE.PRI.pz",
        far,
        &["paused", "pause_until"],
        s,
    )
    .await;
    api(
        &client,
        "CONSUMER.PAUSE.PRI.pz",
        "",
        &["paused", "pause_until", "pause_remaining"],
        s,
    )
    .await;
    let past = r#"{"pause_until":"2001-01-01T00:00:00Z"}"#;
    api(
        &client,
        "CONSUMER.PAUSE.PRI.pz",
        past,
        &["paused", "pause_until"],
        s,
    )
    .await;
    api(&client, "CONSUMER.PAUSE.PRI.nope", "", &[], s).await;
    let created_paused = create("pc", r#","pause_until":"2099-01-01T00:00:00Z""#);
    api(
        &client,
        "CONSUMER.CREATE.PRI.pc",
        &created_paused,
        &["paused", "config.pause_until"],
        s,
    )
    .await;

    // Configurations refused.
    for (name, extra) in [
        ("b1", r#","priority_policy":"overflow""#),
        ("b2", r#","priority_groups":["g"]"#),
        ("b3", r#","priority_timeout":1000000000"#),
        (
            "b4",
            r#","priority_policy":"overflow","priority_groups":["not valid"]"#,
        ),
    ] {
        api(
            &client,
            &format!("CONSUMER.CREATE.PRI.{name}"),
            &create(name, extra),
            &["config.priority_policy"],
            s,
        )
        .await;
    }

    // Overflow: a request with min_pending waits until that many are pending.
    let overflow = r#","priority_policy":"overflow","priority_groups":["g"]"#;
    api(
        &client,
        "CONSUMER.CREATE.PRI.ov",
        &create("ov", overflow),
        &[
            "config.priority_policy",
            "config.priority_groups",
            "priority_groups",
        ],
        s,
    )
    .await;
    pull("PRI.ov", "ov1", r#"{"batch":1,"expires":30000000000}"#).await;
    pull(
        "PRI.ov",
        "ov2",
        r#"{"batch":1,"expires":30000000000,"group":"h"}"#,
    )
    .await;
    pull(
        "PRI.ov",
        "ov3",
        r#"{"batch":1,"expires":30000000000,"group":"g","id":"x"}"#,
    )
    .await;
    pull(
        "PRI.ov",
        "ov4",
        r#"{"batch":1,"expires":30000000000,"group":"g","priority":10}"#,
    )
    .await;
    take(&mut replies, s, short).await;
    publish("pri.ov").await;
    publish("pri.ov").await;
    pull(
        "PRI.ov",
        "ov5",
        r#"{"batch":1,"expires":30000000000,"group":"g","min_pending":3}"#,
    )
    .await;
    take(&mut replies, s, Duration::from_millis(200)).await;
    s.push("-- a third message".into());
    publish("pri.ov").await;
    take(&mut replies, s, short).await;
    pull(
        "PRI.ov",
        "ov6",
        r#"{"batch":1,"expires":30000000000,"group":"g","min_ack_pending":2}"#,
    )
    .await;
    take(&mut replies, s, short).await;
    pull(
        "PRI.ov",
        "ov7",
        r#"{"batch":1,"expires":30000000000,"group":"g","min_ack_pending":1}"#,
    )
    .await;
    take(&mut replies, s, short).await;

    // Pinned client: pinned, standby, a stale id, failover after priority_timeout, unpin.
    let pinned = r#","priority_policy":"pinned_client","priority_groups":["g"],"priority_timeout":600000000"#;
    api(
        &client,
        "CONSUMER.CREATE.PRI.pn",
        &create("pn", pinned),
        &["config.priority_timeout", "priority_groups"],
        s,
    )
    .await;
    publish("pri.pn").await;
    pull(
        "PRI.pn",
        "pn1",
        r#"{"batch":1,"expires":30000000000,"group":"g"}"#,
    )
    .await;
    take(&mut replies, s, short).await;
    let pin_a = s.pins.first().cloned().unwrap_or_default();
    api(
        &client,
        "CONSUMER.INFO.PRI.pn",
        "",
        &[
            "priority_groups.0.group",
            "priority_groups.0.pinned_client_id",
        ],
        s,
    )
    .await;
    pull(
        "PRI.pn",
        "pn2",
        r#"{"batch":1,"expires":30000000000,"group":"g"}"#,
    )
    .await;
    publish("pri.pn").await;
    take(&mut replies, s, Duration::from_millis(150)).await;
    pull(
        "PRI.pn",
        "pn3",
        r#"{"batch":1,"expires":30000000000,"group":"g","id":"stale"}"#,
    )
    .await;
    take(&mut replies, s, short).await;
    let with_a = format!(r#"{{"batch":1,"expires":30000000000,"group":"g","id":"{pin_a}"}}"#);
    pull("PRI.pn", "pn1", &with_a).await;
    take(&mut replies, s, short).await;
    publish("pri.pn").await;
    take(&mut replies, s, Duration::from_millis(150)).await;
    s.push("-- priority_timeout passes".into());
    take(&mut replies, s, Duration::from_millis(700)).await;
    pull("PRI.pn", "pn1", &with_a).await;
    take(&mut replies, s, short).await;
    let pin_b = s.pins.get(1).cloned().unwrap_or_default();
    api(&client, "CONSUMER.UNPIN.PRI.pn", r#"{"group":"g"}"#, &[], s).await;
    api(
        &client,
        "CONSUMER.INFO.PRI.pn",
        "",
        &["priority_groups.0.pinned_client_id"],
        s,
    )
    .await;
    let with_b = format!(r#"{{"batch":1,"expires":30000000000,"group":"g","id":"{pin_b}"}}"#);
    pull("PRI.pn", "pn2", &with_b).await;
    pull(
        "PRI.pn",
        "pn4",
        r#"{"batch":1,"expires":30000000000,"group":"g"}"#,
    )
    .await;
    take(&mut replies, s, short).await;
    publish("pri.pn").await;
    take(&mut replies, s, short).await;
    api(
        &client,
        "CONSUMER.INFO.PRI.pn",
        "",
        &["priority_groups.0.pinned_client_id", "num_waiting"],
        s,
    )
    .await;
    api(&client, "CONSUMER.UNPIN.PRI.pn", r#"{"group":"h"}"#, &[], s).await;
    api(&client, "CONSUMER.UNPIN.PRI.pn", "", &[], s).await;
    api(
        &client,
        "CONSUMER.UNPIN.PRI.nope",
        r#"{"group":"g"}"#,
        &[],
        s,
    )
    .await;
    take(&mut replies, s, short).await;
    seen.lines
}

/// Pauses and priority groups (nats-server 2.11+), and how 2.9 ignores them: the same
/// client script on the real server and on the model behind `Sim`, observed line by line.
#[test]
fn the_model_agrees_with_nats_server_on_pauses_and_priority_groups() {
    let server = NatsServer::start();
    let url = ruststream_tests::Endpoint::url(&server);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let real = runtime.block_on(async {
        let client = async_nats::connect(url).await.unwrap();
        pause_and_priority(client, async_nats::datetime::DateTime::now_utc).await
    });
    drop(runtime);
    let model = ruststream_sim::Sim::run_with(
        |start| Server::new(start).with_version(model_version()),
        |sim| async move {
            let client = async_nats::connect(sim.url()).await.unwrap();
            let clock = sim.clone();
            pause_and_priority(client, move || clock.with(|s| s.wall_clock(s.now()))).await
        },
    );
    let width = real.iter().map(String::len).max().unwrap_or(0);
    let side_by_side: Vec<String> = real
        .iter()
        .map(Some)
        .chain(std::iter::repeat(None))
        .zip(model.iter().map(Some).chain(std::iter::repeat(None)))
        .take(real.len().max(model.len()))
        .map(|(r, m)| {
            let (r, m) = (r.map_or("", |s| s.as_str()), m.map_or("", |s| s.as_str()));
            format!("{} {r:width$} | {m}", if r == m { ' ' } else { '!' })
        })
        .collect();
    assert_eq!(
        real,
        model,
        "server (left) and model (right):\n{}",
        side_by_side.join("\n")
    );
}
