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
use ruststream_sim::{Publish, Server};
use ruststream_tests::{NatsServer, TestClient};

/// How a delivery is answered, and how long after it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Ack,
    Nak,
    NakAfter(u64),
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
            Answer::Term => Some("+TERM".into()),
            Answer::ProgressThenAck(_) => Some("+WPI".into()),
            Answer::Nothing => None,
        }
    }
}

#[derive(Debug, Clone)]
struct Script {
    messages: u64,
    ack_wait_ms: u64,
    max_deliver: i64,
    backoff_ms: Vec<u64>,
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
            ..Default::default()
        }
    }
}

fn script() -> impl Strategy<Value = Script> {
    let answer = prop_oneof![
        3 => Just(Answer::Ack),
        2 => Just(Answer::Nak),
        2 => (150u64..400).prop_map(Answer::NakAfter),
        1 => Just(Answer::Term),
        1 => (150u64..300).prop_map(Answer::ProgressThenAck),
        2 => Just(Answer::Nothing),
    ];
    (
        1u64..4,
        prop_oneof![Just(300u64), Just(450)],
        prop_oneof![Just(-1i64), 2i64..5],
        prop_oneof![Just(vec![]), Just(vec![250u64, 500])],
        proptest::collection::btree_map((1u64..4, 1u64..4), (answer, 0u64..80), 0..8),
    )
        .prop_map(
            |(messages, ack_wait_ms, max_deliver, backoff_ms, answers)| {
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
    let mut server = Server::new(start);
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
/// BackOff, a delayed `-NAK`, progress), then drawn ones.
fn sample(drawn: usize) -> Vec<Script> {
    let mut scripts = vec![
        Script {
            messages: 2,
            ack_wait_ms: 300,
            max_deliver: 3,
            backoff_ms: vec![],
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
            answers: [
                ((1, 1), (Answer::Nothing, 0)),
                ((1, 2), (Answer::Nothing, 0)),
                ((1, 3), (Answer::ProgressThenAck(200), 50)),
            ]
            .into_iter()
            .collect(),
        },
    ];
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
