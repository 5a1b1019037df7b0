//! The model against what nats-server does, one behaviour a test: Core routing, streams,
//! pull consumers and their acknowledgements, faults, and determinism.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::StatusCode;
use async_nats::jetstream::consumer::{AckPolicy, pull};
use async_nats::jetstream::stream::{self, DiscardPolicy, RetentionPolicy};
use proptest::prelude::*;
use ruststream_sim::{
    AckKind, ConnectionId, Delivered, Publish, Record, Server, ServerVersion, SimError,
};

const INBOX: &str = "_INBOX.app";
const NEXT: &str = "$JS.API.CONSUMER.MSG.NEXT.ORDERS.worker";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

struct World {
    start: Instant,
    server: Server,
    app: ConnectionId,
}

impl World {
    fn new() -> Self {
        Self::starting(Instant::now())
    }

    fn starting(start: Instant) -> Self {
        let mut server = Server::new(start);
        let app = server.connect();
        Self { start, server, app }
    }

    /// A world with stream ORDERS on `orders.>` and consumer `worker`, the app subscribed to
    /// its inbox.
    fn jetstream(consumer: pull::Config) -> Self {
        Self::jetstream_at(Instant::now(), consumer)
    }

    fn jetstream_at(start: Instant, consumer: pull::Config) -> Self {
        Self::jetstream_on(Server::new(start), start, consumer)
    }

    /// [`World::jetstream`] on this server, whose clock starts at `start`.
    fn jetstream_on(server: Server, start: Instant, consumer: pull::Config) -> Self {
        let mut w = Self::starting(start);
        w.server = server;
        w.app = w.server.connect();
        w.server
            .create_stream(stream::Config {
                name: "ORDERS".into(),
                subjects: vec!["orders.>".into()],
                ..Default::default()
            })
            .unwrap();
        w.server
            .create_consumer(
                "ORDERS",
                pull::Config {
                    durable_name: Some("worker".into()),
                    ..consumer
                },
            )
            .unwrap();
        w.server.subscribe(w.app, INBOX, None).unwrap();
        w
    }

    fn at(&self, millis: u64) -> Instant {
        self.start + ms(millis)
    }

    fn publish(&mut self, subject: &str, payload: &str, millis: u64) {
        let at = self.at(millis);
        self.server
            .publish(self.app, Publish::new(subject, payload.to_owned()), at)
            .unwrap();
    }

    fn pull(&mut self, request: &str, millis: u64) {
        let at = self.at(millis);
        self.server
            .publish(
                self.app,
                Publish::new(NEXT, request.to_owned()).reply(INBOX),
                at,
            )
            .unwrap();
    }

    fn ack(&mut self, reply: &str, payload: &str, millis: u64) {
        let at = self.at(millis);
        self.server
            .publish(self.app, Publish::new(reply, payload.to_owned()), at)
            .unwrap();
    }

    fn drain(&mut self) -> Vec<Delivered> {
        std::iter::from_fn(|| self.server.poll_delivered()).collect()
    }

    /// Advances the clock to `millis`, letting everything due on the way happen.
    fn advance(&mut self, millis: u64) {
        let until = self.at(millis);
        while let Some(due) = self.server.poll_timeout() {
            if due > until {
                break;
            }
            self.server.handle_timeout(due);
        }
        self.server.handle_timeout(until);
    }
}

fn reply_of(d: &Delivered) -> String {
    d.message
        .reply
        .as_ref()
        .expect("an ack reply subject")
        .to_string()
}

/// The delivered count and stream sequence an ack reply subject carries.
fn counts(reply: &str) -> (u64, u64) {
    let tokens: Vec<&str> = reply.split('.').collect();
    (tokens[4].parse().unwrap(), tokens[5].parse().unwrap())
}

#[test]
fn core_messages_reach_every_matching_subscription_and_one_of_each_queue_group() {
    let mut w = World::new();
    let other = w.server.connect();
    let exact = w.server.subscribe(w.app, "orders.new", None).unwrap();
    let star = w.server.subscribe(other, "orders.*", None).unwrap();
    let tail = w.server.subscribe(other, "orders.>", None).unwrap();
    let q1 = w
        .server
        .subscribe(w.app, "orders.*", Some("workers"))
        .unwrap();
    let q2 = w
        .server
        .subscribe(other, "orders.*", Some("workers"))
        .unwrap();
    let _unrelated = w.server.subscribe(w.app, "payments.*", None).unwrap();

    w.publish("orders.new", "1", 0);
    w.publish("orders.new", "2", 0);
    let got: Vec<_> = w.drain().iter().map(|d| d.subscription).collect();
    assert_eq!(got, vec![exact, star, tail, q1, exact, star, tail, q2]);

    w.publish("orders.eu.new", "3", 0);
    let got: Vec<_> = w.drain().iter().map(|d| d.subscription).collect();
    assert_eq!(got, vec![tail], "only `>` matches two tokens");
}

#[test]
fn a_request_nobody_receives_gets_no_responders() {
    let mut w = World::new();
    w.server.subscribe(w.app, "_INBOX.r", None).unwrap();
    let at = w.at(0);
    w.server
        .publish(
            w.app,
            Publish::new("nobody.home", "?").reply("_INBOX.r"),
            at,
        )
        .unwrap();
    let got = w.drain();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].message.status, Some(StatusCode::NO_RESPONDERS));
}

#[test]
fn bad_input_is_refused_naming_what_is_wrong() {
    let mut w = World::new();
    let at = w.at(0);
    let err = w
        .server
        .publish(w.app, Publish::new("orders.*", "x"), at)
        .unwrap_err();
    assert!(
        matches!(err, SimError::Subject { ref subject, .. } if subject == "orders.*"),
        "{err}"
    );
    let err = w.server.subscribe(w.app, "orders..new", None).unwrap_err();
    assert!(err.to_string().contains("orders..new"), "{err}");
    let mut small = Server::new(at).with_max_payload(8);
    let c = small.connect();
    let err = small
        .publish(c, Publish::new("a", "123456789"), at)
        .unwrap_err();
    assert_eq!(
        err,
        SimError::MaxPayload {
            size: 9,
            max_payload: 8
        }
    );
    let err = w
        .server
        .create_stream(stream::Config {
            name: "I".into(),
            retention: RetentionPolicy::Interest,
            ..Default::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("retention `interest`"), "{err}");
    w.server
        .create_stream(stream::Config {
            name: "A".into(),
            subjects: vec!["a.>".into()],
            ..Default::default()
        })
        .unwrap();
    let err = w
        .server
        .create_stream(stream::Config {
            name: "B".into(),
            subjects: vec!["a.*".into()],
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(err, SimError::SubjectsOverlap { .. }), "{err}");
    let err = w
        .server
        .create_consumer(
            "A",
            pull::Config {
                durable_name: Some("last".into()),
                deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::Last,
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(err.to_string().contains("deliver_policy"), "{err}");
    let err = w
        .server
        .create_consumer(
            "A",
            pull::Config {
                durable_name: Some("short".into()),
                max_deliver: 2,
                backoff: vec![ms(10), ms(20), ms(30)],
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(err.to_string().contains("max deliver"), "{err}");
}

#[test]
fn a_stream_stores_what_it_captures_and_answers_with_its_pub_ack() {
    let mut w = World::jetstream(pull::Config::default());
    w.server.subscribe(w.app, "_INBOX.pub", None).unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", "order-1");
    for millis in [0, 10] {
        let at = w.at(millis);
        w.server
            .publish(
                w.app,
                Publish::new("orders.new", "a")
                    .reply("_INBOX.pub")
                    .headers(headers.clone()),
                at,
            )
            .unwrap();
    }
    let acks: Vec<String> = w
        .drain()
        .iter()
        .map(|d| String::from_utf8(d.message.payload.to_vec()).unwrap())
        .collect();
    assert_eq!(
        acks,
        vec![
            r#"{"seq":1,"stream":"ORDERS"}"#.to_owned(),
            r#"{"duplicate":true,"seq":1,"stream":"ORDERS"}"#.to_owned()
        ]
    );
    // Past the duplicate window (2 minutes by default) the same id is stored again.
    let at = w.at(121_000);
    let again = w
        .server
        .publish(w.app, Publish::new("orders.new", "a").headers(headers), at)
        .unwrap();
    assert_eq!(
        again.stored.map(|a| (a.sequence, a.duplicate)),
        Some((2, false))
    );
    assert_eq!(w.server.stream_state("ORDERS").unwrap().messages, 2);
}

#[test]
fn a_pull_request_delivers_through_the_inbox_with_the_ack_reply_subject() {
    let mut w = World::jetstream(pull::Config::default());
    w.publish("orders.new", "a", 0);
    w.publish("orders.eu", "b", 0);
    w.publish("orders.us", "c", 0);
    w.pull(r#"{"batch":2}"#, 5);
    let got = w.drain();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].message.subject.as_str(), "orders.new");
    let reply = reply_of(&got[0]);
    let tokens: Vec<&str> = reply.split('.').collect();
    // $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>
    assert_eq!(
        &tokens[..7],
        ["$JS", "ACK", "ORDERS", "worker", "1", "1", "1"]
    );
    assert_eq!(tokens[8], "2", "two left to deliver after the first");
    assert_eq!(counts(&reply_of(&got[1])), (1, 2));
    let state = w.server.consumer_state("ORDERS", "worker").unwrap();
    assert_eq!(
        (state.num_ack_pending, state.num_pending, state.num_waiting),
        (2, 1, 0)
    );

    w.ack(&reply_of(&got[1]), "+ACK", 10);
    w.ack(&reply_of(&got[0]), "", 10);
    let state = w.server.consumer_state("ORDERS", "worker").unwrap();
    assert_eq!(state.num_ack_pending, 0);
    assert_eq!(state.ack_floor.stream_sequence, 2);
    assert_eq!(
        state.config.ack_wait,
        Duration::from_secs(30),
        "the server's default"
    );
}

#[test]
fn a_request_ends_with_408_at_its_expiry_and_404_when_no_wait_finds_nothing() {
    let mut w = World::jetstream(pull::Config {
        max_batch: 5,
        ..Default::default()
    });
    w.publish("orders.new", "a", 0);
    w.pull(r#"{"batch":3,"expires":1000000000}"#, 0);
    assert_eq!(w.drain().len(), 1);
    assert_eq!(w.server.poll_timeout(), Some(w.at(1_000)));
    w.advance(1_000);
    let end = w.drain();
    assert_eq!(end.len(), 1);
    assert_eq!(end[0].message.status, Some(StatusCode::TIMEOUT));
    let pending = end[0]
        .message
        .headers
        .as_ref()
        .unwrap()
        .get("Nats-Pending-Messages");
    assert_eq!(pending.map(|v| v.as_str()), Some("2"));

    w.pull(r#"{"batch":1,"no_wait":true}"#, 1_100);
    let end = w.drain();
    assert_eq!(end[0].message.status, Some(StatusCode::NOT_FOUND));

    // no_wait with one message there and two asked for: the message, then 404 without a
    // pending count (as 2.10+ end it).
    w.publish("orders.new", "b", 1_150);
    w.pull(r#"{"batch":2,"no_wait":true}"#, 1_150);
    let got = w.drain();
    assert_eq!(got.len(), 2);
    assert!(got[0].message.reply.is_some());
    assert_eq!(got[1].message.status, Some(StatusCode::NOT_FOUND));
    assert!(got[1].message.headers.is_none());

    w.pull(r#"{"batch":6}"#, 1_200);
    let end = w.drain();
    assert_eq!(end[0].message.status, Some(StatusCode::REQUEST_TERMINATED));
    assert_eq!(
        end[0].message.description.as_deref(),
        Some("Exceeded MaxRequestBatch of 5")
    );
}

#[test]
fn an_unacknowledged_delivery_comes_again_after_ack_wait_with_its_count_one_higher() {
    let mut w = World::jetstream(pull::Config {
        ack_wait: ms(500),
        ..Default::default()
    });
    w.publish("orders.new", "a", 0);
    w.pull(r#"{"batch":1}"#, 0);
    assert_eq!(counts(&reply_of(&w.drain()[0])), (1, 1));
    w.pull(r#"{"batch":1}"#, 10);
    w.advance(499);
    assert!(w.drain().is_empty(), "not before its deadline");
    w.advance(500);
    let again = w.drain();
    assert_eq!(counts(&reply_of(&again[0])), (2, 1));
    let state = w.server.consumer_state("ORDERS", "worker").unwrap();
    assert_eq!((state.num_ack_pending, state.num_redelivered), (1, 1));
}

#[test]
fn progress_holds_a_delivery_and_nak_brings_it_back_at_once_or_after_its_delay() {
    let mut w = World::jetstream(pull::Config {
        ack_wait: ms(500),
        ..Default::default()
    });
    w.publish("orders.new", "a", 0);
    w.pull(r#"{"batch":4}"#, 0);
    let first = reply_of(&w.drain()[0]);
    // +WPI at 400 ms: the deadline moves to 900 ms.
    w.ack(&first, "+WPI", 400);
    w.advance(899);
    assert!(w.drain().is_empty());
    // -NAK: at once, to the waiting request.
    w.ack(&first, "-NAK", 899);
    let second = w.drain();
    assert_eq!(counts(&reply_of(&second[0])), (2, 1));
    // -NAK with a delay of 300 ms: not before.
    w.ack(&reply_of(&second[0]), r#"-NAK {"delay": 300000000}"#, 900);
    w.advance(1_199);
    assert!(w.drain().is_empty());
    w.advance(1_200);
    let third = w.drain();
    assert_eq!(counts(&reply_of(&third[0])), (3, 1));
    // +TERM: never again.
    w.ack(&reply_of(&third[0]), "+TERM", 1_210);
    w.advance(10_000);
    assert!(w.drain().is_empty());
    let kinds: Vec<AckKind> = w
        .server
        .journal()
        .iter()
        .filter_map(|r| match r {
            Record::Acknowledged { kind, .. } => Some(*kind),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            AckKind::Progress,
            AckKind::Nak(None),
            AckKind::Nak(Some(ms(300))),
            AckKind::Term
        ]
    );
}

#[test]
fn backoff_spaces_redeliveries_and_max_deliver_ends_them() {
    let mut w = World::jetstream(pull::Config {
        max_deliver: 3,
        backoff: vec![ms(100), ms(300)],
        ..Default::default()
    });
    w.publish("orders.new", "a", 0);
    w.pull(r#"{"batch":10}"#, 0);
    let mut times = Vec::new();
    for millis in (0..=2_000).step_by(10) {
        w.advance(millis);
        for d in w.drain() {
            times.push((millis, counts(&reply_of(&d)).0));
        }
    }
    // Delivered at 0; ack_wait is the first step, 100 ms; then 300 ms, the last step repeating.
    assert_eq!(times, vec![(0, 1), (100, 2), (400, 3)]);
    let state = w.server.consumer_state("ORDERS", "worker").unwrap();
    assert_eq!(state.config.ack_wait, ms(100));
    assert_eq!(
        state.num_ack_pending, 0,
        "gone from the pending set after its last deadline"
    );
    assert_eq!(
        state.ack_floor.stream_sequence, 0,
        "never acknowledged: the floor stays below it"
    );
    assert_eq!(state.num_redelivered, 1);
    let last = w.server.journal().iter().rev().find_map(|r| match r {
        Record::MaxDeliveries { delivered, at, .. } => Some((*delivered, *at)),
        _ => None,
    });
    assert_eq!(last, Some((3, w.at(700))));
}

#[test]
fn max_ack_pending_holds_back_new_messages_but_not_redeliveries() {
    let mut w = World::jetstream(pull::Config {
        max_ack_pending: 2,
        ack_wait: ms(1_000),
        ..Default::default()
    });
    for i in 0..4 {
        w.publish("orders.new", &i.to_string(), 0);
    }
    w.pull(r#"{"batch":4}"#, 0);
    let first = w.drain();
    assert_eq!(first.len(), 2);
    w.ack(&reply_of(&first[0]), "-NAK", 10);
    let again = w.drain();
    assert_eq!(
        counts(&reply_of(&again[0])),
        (2, 1),
        "the redelivery still goes"
    );
    w.ack(&reply_of(&again[0]), "+ACK", 20);
    let third = w.drain();
    assert_eq!(
        counts(&reply_of(&third[0])),
        (1, 3),
        "one slot freed, one new message"
    );
}

#[test]
fn a_lost_ack_leaves_the_delivery_to_come_again() {
    let mut w = World::jetstream(pull::Config {
        ack_wait: ms(200),
        ..Default::default()
    });
    w.publish("orders.new", "a", 0);
    w.pull(r#"{"batch":2}"#, 0);
    let first = reply_of(&w.drain()[0]);
    w.server.faults().lose_acks(1);
    w.ack(&first, "+ACK", 50);
    w.advance(200);
    let again = w.drain();
    assert_eq!(counts(&reply_of(&again[0])), (2, 1));
    assert!(
        w.server
            .journal()
            .iter()
            .any(|r| matches!(r, Record::Acknowledged { lost: true, .. }))
    );
}

#[test]
fn failed_publishes_and_a_dropped_connection() {
    let mut w = World::jetstream(pull::Config::default());
    w.server.faults().fail_publishes("dlq.>", 1).unwrap();
    let at = w.at(0);
    let err = w
        .server
        .publish(w.app, Publish::new("dlq.orders", "x"), at)
        .unwrap_err();
    assert_eq!(
        err,
        SimError::PublishFailed {
            subject: "dlq.orders".into()
        }
    );
    w.server
        .publish(w.app, Publish::new("dlq.orders", "x"), at)
        .unwrap();

    // A pull request waits; its connection drops; the message published later stays
    // undelivered until a new connection asks.
    w.pull(r#"{"batch":1}"#, 0);
    w.server.disconnect(w.app, at).unwrap();
    let other = w.server.connect();
    w.server
        .publish(other, Publish::new("orders.new", "a"), at)
        .unwrap();
    assert!(w.drain().is_empty());
    assert_eq!(
        w.server
            .consumer_state("ORDERS", "worker")
            .unwrap()
            .num_pending,
        1
    );
    let err = w
        .server
        .publish(w.app, Publish::new("x", "y"), at)
        .unwrap_err();
    assert_eq!(err, SimError::NoConnection(w.app));
}

#[test]
fn work_queue_acks_remove_messages_and_limits_discard_the_oldest() {
    let mut w = World::new();
    w.server
        .create_stream(stream::Config {
            name: "WQ".into(),
            subjects: vec!["jobs.*".into()],
            retention: RetentionPolicy::WorkQueue,
            ..Default::default()
        })
        .unwrap();
    w.server
        .create_consumer(
            "WQ",
            pull::Config {
                durable_name: Some("w".into()),
                ..Default::default()
            },
        )
        .unwrap();
    w.server.subscribe(w.app, INBOX, None).unwrap();
    w.publish("jobs.a", "1", 0);
    let at = w.at(0);
    w.server
        .publish(
            w.app,
            Publish::new("$JS.API.CONSUMER.MSG.NEXT.WQ.w", "").reply(INBOX),
            at,
        )
        .unwrap();
    let reply = reply_of(&w.drain()[0]);
    w.ack(&reply, "+ACK", 1);
    assert_eq!(w.server.stream_state("WQ").unwrap().messages, 0);

    w.server
        .create_stream(stream::Config {
            name: "CAPPED".into(),
            subjects: vec!["capped".into()],
            max_messages: 2,
            discard: DiscardPolicy::Old,
            max_age: Duration::from_secs(10),
            duplicate_window: Duration::from_secs(1),
            ..Default::default()
        })
        .unwrap();
    for i in 0..3 {
        w.publish("capped", &i.to_string(), i * 1_000);
    }
    let kept: Vec<u64> = w
        .server
        .stream_messages("CAPPED")
        .unwrap()
        .iter()
        .map(|m| m.sequence)
        .collect();
    assert_eq!(kept, vec![2, 3]);
    w.advance(11_000);
    assert_eq!(
        w.server.stream_state("CAPPED").unwrap().messages,
        1,
        "seq 2 aged out at 11 s"
    );
}

/// One step of a random script against the model.
#[derive(Debug, Clone)]
enum Step {
    Publish,
    Pull(usize),
    Settle(usize, u8),
    Advance(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::Publish),
        (1usize..5).prop_map(Step::Pull),
        (0usize..8, 0u8..5).prop_map(|(i, k)| Step::Settle(i, k)),
        (1u64..400).prop_map(Step::Advance),
    ]
}

/// Runs a script; the journal, and the invariants checked after every step.
fn run(start: Instant, steps: &[Step]) -> Vec<Record> {
    let mut w = World::jetstream_at(
        start,
        pull::Config {
            ack_wait: ms(150),
            max_deliver: 4,
            max_ack_pending: 3,
            ..Default::default()
        },
    );
    let mut now = 0;
    let mut replies: Vec<String> = Vec::new();
    for s in steps {
        match s {
            Step::Publish => w.publish("orders.new", "x", now),
            Step::Pull(n) => w.pull(&format!(r#"{{"batch":{n},"expires":300000000}}"#), now),
            Step::Settle(i, kind) => {
                if let Some(reply) = replies.get(*i).cloned() {
                    let payload = [
                        "+ACK",
                        "-NAK",
                        "+WPI",
                        "+TERM",
                        r#"-NAK {"delay":50000000}"#,
                    ][usize::from(*kind)];
                    w.ack(&reply, payload, now);
                }
            }
            Step::Advance(d) => {
                now += d;
                w.advance(now);
            }
        }
        for d in w.drain() {
            if let Some(reply) = d.message.reply {
                replies.push(reply.to_string());
            }
        }
        let state = w.server.consumer_state("ORDERS", "worker").unwrap();
        assert!(state.num_ack_pending <= 3, "max_ack_pending holds");
        assert!(state.ack_floor.stream_sequence <= state.delivered.stream_sequence);
    }
    // No message is delivered more than max_deliver times.
    let mut deliveries = std::collections::BTreeMap::<u64, u64>::new();
    for r in w.server.journal() {
        if let Record::Delivered {
            stream_sequence,
            delivered,
            ..
        } = r
        {
            let seen = deliveries.entry(*stream_sequence).or_default();
            *seen += 1;
            assert_eq!(*seen, *delivered, "delivery counts go up by one");
            assert!(*delivered <= 4);
        }
    }
    w.server.journal().to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The same script from the same start gives the same journal, record for record.
    #[test]
    fn the_model_is_deterministic(steps in proptest::collection::vec(step(), 1..60)) {
        let start = Instant::now();
        prop_assert_eq!(run(start, &steps), run(start, &steps));
    }
}

#[test]
fn a_nak_with_a_go_duration_delays_the_redelivery() {
    let mut w = World::jetstream(pull::Config {
        ack_wait: ms(1_000),
        ..Default::default()
    });
    w.publish("orders.new", "1", 0);
    w.pull(r#"{"batch":10,"expires":10000000000}"#, 0);
    let reply = reply_of(&w.drain()[0]);
    w.ack(&reply, "-NAK 600ms", 0);
    assert!(w.drain().is_empty(), "not at once");
    w.advance(599);
    assert!(w.drain().is_empty());
    w.advance(600);
    assert_eq!(counts(&reply_of(&w.drain()[0])), (2, 1));
}

/// A message delivered twice (`max_deliver` 2) and never answered in time, then acked at
/// 750 ms, after it went past `max_deliver`: the world after that late `+ACK`.
fn late_ack_after_max_deliver(server: Server, start: Instant) -> World {
    let mut w = World::jetstream_on(
        server,
        start,
        pull::Config {
            ack_wait: ms(300),
            max_deliver: 2,
            ..Default::default()
        },
    );
    w.publish("orders.new", "1", 0);
    w.pull(r#"{"batch":10,"expires":10000000000}"#, 0);
    w.drain();
    w.advance(300);
    let second = w.drain();
    w.advance(600);
    let before = w.server.consumer_state("ORDERS", "worker").unwrap();
    assert_eq!(before.num_redelivered, 1);
    w.ack(&reply_of(&second[0]), "+ACK", 750);
    w
}

#[test]
fn a_late_ack_after_max_deliver_ends_the_redelivered_count() {
    let start = Instant::now();
    let w = late_ack_after_max_deliver(Server::new(start), start);
    let state = w.server.consumer_state("ORDERS", "worker").unwrap();
    assert_eq!(state.num_redelivered, 0);
    assert_eq!(state.ack_floor.stream_sequence, 0, "as 2.10+ leave it");
}

#[test]
fn the_ack_floor_moves_only_from_the_delivery_right_above_it() {
    let mut w = World::jetstream(pull::Config {
        ack_wait: ms(5_000),
        ..Default::default()
    });
    for i in 0..3 {
        w.publish("orders.new", &i.to_string(), 0);
    }
    w.pull(r#"{"batch":3}"#, 0);
    let got: Vec<String> = w.drain().iter().map(reply_of).collect();
    let floor = |w: &World| {
        w.server
            .consumer_state("ORDERS", "worker")
            .unwrap()
            .ack_floor
            .stream_sequence
    };
    w.ack(&got[1], "+ACK", 10);
    assert_eq!(
        floor(&w),
        0,
        "2 acked out of order: 1 still pending below it"
    );
    w.ack(&got[0], "+ACK", 20);
    assert_eq!(
        floor(&w),
        2,
        "1 acked: up to just below 3, the next pending"
    );
    w.ack(&got[2], "+ACK", 30);
    assert_eq!(floor(&w), 3);
}

#[test]
fn a_no_wait_request_with_an_expiry_waits_it_out_when_nothing_is_there() {
    let mut w = World::jetstream(pull::Config::default());
    w.pull(r#"{"batch":1,"no_wait":true,"expires":300000000}"#, 0);
    assert!(w.drain().is_empty());
    w.advance(300);
    let end = w.drain();
    assert_eq!(end[0].message.status, Some(StatusCode::TIMEOUT));
}

#[test]
fn a_work_queue_takes_a_second_consumer_only_on_a_subject_of_its_own() {
    let mut server = Server::new(Instant::now());
    server
        .create_stream(stream::Config {
            name: "WQ".into(),
            subjects: vec!["wq.>".into()],
            retention: RetentionPolicy::WorkQueue,
            ..Default::default()
        })
        .unwrap();
    let consumer = |name: &str, filter: &str| pull::Config {
        durable_name: Some(name.into()),
        filter_subject: filter.into(),
        ..Default::default()
    };
    server.create_consumer("WQ", consumer("a", "wq.a")).unwrap();
    server.create_consumer("WQ", consumer("b", "wq.b")).unwrap();
    let rule = |e: SimError| match e {
        SimError::WorkQueue { rule, .. } => rule,
        other => panic!("not a work-queue rule: {other}"),
    };
    let err = server.create_consumer("WQ", consumer("c", "")).unwrap_err();
    assert!(err.to_string().contains("non-filtered"), "{err}");
    assert_eq!(rule(err).err_code(), 10099);
    let err = server
        .create_consumer("WQ", consumer("d", "wq.*"))
        .unwrap_err();
    assert!(err.to_string().contains("not unique"), "{err}");
    assert_eq!(rule(err).err_code(), 10100);
    let err = server
        .create_consumer(
            "WQ",
            pull::Config {
                ack_policy: AckPolicy::None,
                ..consumer("e", "wq.e")
            },
        )
        .unwrap_err();
    assert_eq!(
        rule(err),
        ruststream_sim::WorkQueueRule::RequiresExplicitAck
    );
    assert_eq!(
        server.stream_state("WQ").unwrap().first_sequence,
        0,
        "never stored"
    );
}

#[test]
fn as_2_9_a_late_ack_moves_the_floor_and_a_partly_filled_no_wait_request_times_out() {
    let start = Instant::now();
    let server = Server::new(start).with_version(ServerVersion::V2_9);
    let mut w = late_ack_after_max_deliver(server, start);
    let state = w.server.consumer_state("ORDERS", "worker").unwrap();
    assert_eq!(state.ack_floor.stream_sequence, 1, "2.9 moves it");

    // The first request runs out at 10 s; then a no_wait request finds one message of three.
    w.advance(10_000);
    w.drain();
    w.publish("orders.new", "2", 10_100);
    w.pull(r#"{"batch":3,"no_wait":true}"#, 10_100);
    let got = w.drain();
    let end = got.last().unwrap();
    assert_eq!(end.message.status, Some(StatusCode::TIMEOUT));
    let pending = end
        .message
        .headers
        .as_ref()
        .unwrap()
        .get("Nats-Pending-Messages");
    assert_eq!(pending.map(|v| v.as_str()), Some("2"));
}

/// Ack policy none: a delivery is done once sent (nothing pending, the floor follows it);
/// ack policy all: an `+ACK` acknowledges every delivery up to it.
#[test]
fn ack_policies_none_and_all() {
    let mut w = World::jetstream(pull::Config {
        ack_policy: AckPolicy::None,
        ..Default::default()
    });
    w.publish("orders.a", "1", 0);
    w.publish("orders.b", "2", 0);
    w.pull(r#"{"batch":2}"#, 0);
    assert_eq!(w.drain().len(), 2);
    let state = w.server.consumer_state("ORDERS", "worker").unwrap();
    assert_eq!(state.num_ack_pending, 0);
    assert_eq!(state.ack_floor.stream_sequence, 2);
    assert_eq!(w.server.poll_timeout(), None, "nothing will be redelivered");

    let mut w = World::jetstream(pull::Config {
        ack_policy: AckPolicy::All,
        ..Default::default()
    });
    for n in 0..3 {
        w.publish("orders.a", &n.to_string(), 0);
    }
    w.pull(r#"{"batch":3}"#, 0);
    let got = w.drain();
    let second = got[1].message.reply.clone().unwrap();
    w.ack(&second, "+ACK", 10);
    let state = w.server.consumer_state("ORDERS", "worker").unwrap();
    assert_eq!(
        state.num_ack_pending, 1,
        "the first two acknowledged, the third pending"
    );
    assert_eq!(state.ack_floor.stream_sequence, 2);
}

/// A consumer with no name is ephemeral and gets one from the model, the same every run.
#[test]
fn an_ephemeral_consumer_is_named_by_the_model() {
    let mut w = World::jetstream(pull::Config::default());
    let state = w
        .server
        .create_consumer("ORDERS", pull::Config::default())
        .unwrap();
    assert_eq!(state.name, "EPHEMERAL000001");
    let again = w
        .server
        .create_consumer("ORDERS", pull::Config::default())
        .unwrap();
    assert_eq!(again.name, "EPHEMERAL000002");
}

/// An update may change `ack_wait` (a pending delivery takes the new wait from its delivery
/// time), but not what the model does not follow, such as the filter.
#[test]
fn a_consumer_update_changes_ack_wait_and_refuses_the_rest() {
    let mut w = World::jetstream(pull::Config {
        ack_wait: ms(10_000),
        ..Default::default()
    });
    w.publish("orders.a", "1", 0);
    w.pull(r#"{"batch":1}"#, 0);
    assert_eq!(w.drain().len(), 1);
    assert_eq!(w.server.poll_timeout(), Some(w.at(10_000)));
    let shorter = pull::Config {
        durable_name: Some("worker".into()),
        ack_wait: ms(1_000),
        ..Default::default()
    };
    let state = w.server.update_consumer("ORDERS", shorter.clone()).unwrap();
    assert_eq!(state.config.ack_wait, ms(1_000));
    assert_eq!(
        w.server.poll_timeout(),
        Some(w.at(1_000)),
        "due 1 s after its delivery"
    );
    let err = w
        .server
        .update_consumer(
            "ORDERS",
            pull::Config {
                filter_subject: "orders.b".into(),
                ..shorter.clone()
            },
        )
        .unwrap_err();
    assert!(matches!(err, SimError::NotModelled { .. }), "{err}");
    let err = w
        .server
        .update_consumer(
            "ORDERS",
            pull::Config {
                durable_name: Some("nobody".into()),
                ..shorter
            },
        )
        .unwrap_err();
    assert!(matches!(err, SimError::ConsumerNotFound { .. }), "{err}");
}

/// A `BackOff` without `max_deliver`: current servers take it, 2.9 refuses it.
#[test]
fn backoff_without_max_deliver_by_version() {
    let config = pull::Config {
        durable_name: Some("backoff".into()),
        backoff: vec![ms(100), ms(200)],
        ..Default::default()
    };
    let orders = || stream::Config {
        name: "ORDERS".into(),
        subjects: vec!["orders.>".into()],
        ..Default::default()
    };
    let mut current = Server::new(Instant::now());
    current.create_stream(orders()).unwrap();
    current.create_consumer("ORDERS", config.clone()).unwrap();
    let mut old = Server::new(Instant::now()).with_version(ServerVersion::V2_9);
    old.create_stream(orders()).unwrap();
    let err = old.create_consumer("ORDERS", config).unwrap_err();
    assert!(err.to_string().contains("max deliver"), "{err}");
}

/// A stream with a `max_age` under the default duplicate window (2 min) and none of its own:
/// nats-server takes it and shortens the window to `max_age`.
#[test]
fn a_short_max_age_shortens_the_default_duplicate_window() {
    let mut server = Server::new(Instant::now());
    server
        .create_stream(stream::Config {
            name: "SHORT".into(),
            subjects: vec!["short".into()],
            max_age: ms(10_000),
            ..Default::default()
        })
        .expect("taken, as nats-server takes it");
    assert_eq!(
        server.stream_config("SHORT").unwrap().duplicate_window,
        ms(10_000)
    );
}

/// Settings the model does not follow are refused, naming them, never taken and ignored;
/// names and subjects nats-server refuses are refused.
#[test]
fn settings_the_model_does_not_follow_are_refused() {
    let mut server = Server::new(Instant::now());
    let base = || stream::Config {
        name: "S".into(),
        subjects: vec!["s.>".into()],
        ..Default::default()
    };
    for (config, named) in [
        (
            stream::Config {
                num_replicas: 3,
                ..base()
            },
            "num_replicas",
        ),
        (
            stream::Config {
                subjects: vec!["$JS.API.>".into()],
                ..base()
            },
            "JetStream API",
        ),
        (
            stream::Config {
                allow_direct: true,
                ..base()
            },
            "allow_direct",
        ),
    ] {
        let err = server.create_stream(config).unwrap_err();
        assert!(err.to_string().contains(named), "{named}: {err}");
    }
    server.create_stream(base()).unwrap();
    for (config, named) in [
        (
            pull::Config {
                durable_name: Some("h".into()),
                headers_only: true,
                ..Default::default()
            },
            "headers_only",
        ),
        (
            pull::Config {
                durable_name: Some("r".into()),
                rate_limit: 1000,
                ..Default::default()
            },
            "rate_limit",
        ),
        (
            pull::Config {
                durable_name: Some("o".into()),
                replay_policy: async_nats::jetstream::consumer::ReplayPolicy::Original,
                ..Default::default()
            },
            "replay_policy",
        ),
        (
            pull::Config {
                durable_name: Some("bad.name".into()),
                ..Default::default()
            },
            "name",
        ),
    ] {
        let err = server.create_consumer("S", config).unwrap_err();
        assert!(err.to_string().contains(named), "{named}: {err}");
    }
    let app = server.connect();
    let err = server
        .publish(
            app,
            Publish::new("s.a", "x").reply("foo bar"),
            Instant::now(),
        )
        .unwrap_err();
    assert!(matches!(err, SimError::Subject { .. }), "{err}");
}

/// `max_message_size` refuses a larger message (nats-server answers the JetStream publish
/// with an error); `no_ack` stores without answering.
#[test]
fn a_streams_max_message_size_and_no_ack() {
    let mut w = World::new();
    w.server
        .create_stream(stream::Config {
            name: "SMALL".into(),
            subjects: vec!["small".into()],
            max_message_size: 10,
            ..Default::default()
        })
        .unwrap();
    w.server
        .create_stream(stream::Config {
            name: "QUIET".into(),
            subjects: vec!["quiet".into()],
            no_ack: true,
            ..Default::default()
        })
        .unwrap();
    w.server.subscribe(w.app, INBOX, None).unwrap();
    let err = w
        .server
        .publish(
            w.app,
            Publish::new("small", "x".repeat(100)).reply(INBOX),
            w.at(0),
        )
        .unwrap_err();
    assert!(err.to_string().contains("max_message_size"), "{err}");
    assert!(w.server.stream_messages("SMALL").unwrap().is_empty());
    let published = w
        .server
        .publish(w.app, Publish::new("quiet", "x").reply(INBOX), w.at(0))
        .unwrap();
    assert!(published.stored.is_some(), "stored");
    assert!(w.drain().is_empty(), "no PubAck for a no_ack stream");
}

/// A pull request with `idle_heartbeat` gets `100 Idle Heartbeat` every interval while it
/// waits with nothing to deliver, as nats-server sends it (async-nats' `messages()` fails a
/// request that misses two).
#[test]
fn a_waiting_pull_request_gets_idle_heartbeats() {
    let mut w = World::jetstream(pull::Config::default());
    w.pull(
        r#"{"batch":5,"expires":30000000000,"idle_heartbeat":5000000000}"#,
        0,
    );
    assert!(w.drain().is_empty());
    assert_eq!(w.server.poll_timeout(), Some(w.at(5_000)));
    w.advance(5_000);
    let beats = w.drain();
    assert_eq!(beats.len(), 1, "{beats:?}");
    assert_eq!(beats[0].message.status.map(|s| s.as_u16()), Some(100));
    assert_eq!(
        beats[0].message.description.as_deref(),
        Some("Idle Heartbeat")
    );
    // A delivery puts the next heartbeat off.
    w.publish("orders.a", "1", 7_000);
    assert_eq!(w.drain().len(), 1);
    assert_eq!(w.server.poll_timeout(), Some(w.at(12_000)));
}

/// The publish directives: a message whose `Nats-Expected-…` header the stream does not meet
/// is refused and not stored, as nats-server refuses it.
#[test]
fn publish_directives_are_checked_before_storing() {
    let mut w = World::jetstream(pull::Config::default());
    let publish = |w: &mut World, subject: &str, pairs: &[(&str, &str)]| {
        let mut headers = HeaderMap::new();
        for (n, v) in pairs {
            headers.insert(*n, *v);
        }
        let at = w.at(0);
        w.server
            .publish(w.app, Publish::new(subject, "x").headers(headers), at)
    };
    publish(&mut w, "orders.a", &[("Nats-Msg-Id", "one")]).unwrap();
    publish(&mut w, "orders.b", &[]).unwrap();
    for (pairs, says) in [
        (
            vec![("Nats-Expected-Stream", "OTHER")],
            "expected stream does not match",
        ),
        (
            vec![("Nats-Expected-Last-Sequence", "1")],
            "wrong last sequence: 2",
        ),
        (
            vec![("Nats-Expected-Last-Msg-Id", "one")],
            "wrong last msg ID: ",
        ),
        (
            vec![("Nats-Expected-Last-Subject-Sequence", "2")],
            "wrong last sequence: 1",
        ),
    ] {
        let err = publish(&mut w, "orders.a", &pairs).unwrap_err();
        assert!(
            matches!(err, SimError::WrongExpectation { .. }) && err.to_string().contains(says),
            "{pairs:?}: {err}"
        );
    }
    assert_eq!(w.server.stream_state("ORDERS").unwrap().last_sequence, 2);
    let ok = publish(
        &mut w,
        "orders.a",
        &[
            ("Nats-Expected-Stream", "ORDERS"),
            ("Nats-Expected-Last-Sequence", "2"),
            ("Nats-Expected-Last-Subject-Sequence", "1"),
        ],
    )
    .unwrap();
    assert_eq!(ok.stored.unwrap().sequence, 3);
}

/// nats-server stores and forwards a header block without reading it: a block no client can
/// read is kept byte for byte, sent in place of headers (to a Core subscriber and through a
/// pull consumer), counted in the message's size, and read by the model as no headers.
#[test]
fn a_header_block_no_client_can_read_is_stored_and_forwarded_as_it_is() {
    const BLOCK: &[u8] = b"NATS/1.0\r\nX-Poison: a\rb\r\n\r\n";
    let mut w = World::jetstream(pull::Config::default());
    let watcher = w.server.connect();
    w.server.subscribe(watcher, "orders.>", None).unwrap();
    let poison = Publish::new("orders.bad", "p").unreadable_headers(BLOCK);
    assert!(poison.headers.is_none());
    w.server.publish(w.app, poison, w.at(0)).unwrap();
    let core = w.drain();
    assert_eq!(core.len(), 1);
    assert_eq!(core[0].unreadable_headers.as_deref(), Some(BLOCK));
    assert!(core[0].message.headers.is_none());
    let stored = w.server.stream_message("ORDERS", 1).unwrap().unwrap();
    assert_eq!(stored.unreadable_headers.as_deref(), Some(BLOCK));
    w.pull(r#"{"batch":1}"#, 5);
    let pulled = w.drain();
    assert_eq!(pulled.len(), 1);
    assert_eq!(pulled[0].unreadable_headers.as_deref(), Some(BLOCK));
    assert_eq!(pulled[0].message.subject.as_str(), "orders.bad");
    // Its size counts the block: a max_payload below block + payload refuses it.
    let mut small = Server::new(Instant::now()).with_max_payload(BLOCK.len());
    let c = small.connect();
    let refused = small.publish(
        c,
        Publish::new("x", "p").unreadable_headers(BLOCK),
        Instant::now(),
    );
    assert!(
        matches!(refused, Err(SimError::MaxPayload { .. })),
        "{refused:?}"
    );
}

/// `STREAM.MSG.DELETE` (`nats stream rmm`): the stream no longer holds the message and the
/// consumer that had it pending forgets it; the ones behind it are delivered; a second
/// delete finds nothing.
#[test]
fn a_deleted_message_leaves_the_stream_and_the_consumer_s_pending() {
    let mut w = World::jetstream(pull::Config {
        ack_wait: ms(1_000),
        ..Default::default()
    });
    w.publish("orders.new", "poison", 0);
    w.publish("orders.new", "good", 0);
    w.pull(r#"{"batch":1}"#, 0);
    assert_eq!(w.drain().len(), 1);
    assert_eq!(
        w.server
            .consumer_state("ORDERS", "worker")
            .unwrap()
            .num_ack_pending,
        1
    );
    assert_eq!(w.server.delete_message("ORDERS", 1), Ok(true));
    assert_eq!(w.server.delete_message("ORDERS", 1), Ok(false));
    assert!(w.server.stream_message("ORDERS", 1).unwrap().is_none());
    let state = w.server.consumer_state("ORDERS", "worker").unwrap();
    assert_eq!(state.num_ack_pending, 0, "{state:?}");
    w.pull(r#"{"batch":5,"expires":500000000}"#, 10);
    let got = w.drain();
    assert_eq!(got.iter().filter(|d| d.message.status.is_none()).count(), 1);
    assert_eq!(got[0].message.payload.as_ref(), b"good");
    // After its ack_wait, the deleted one is not delivered again.
    w.ack(&reply_of(&got[0]), "+ACK", 20);
    w.advance(3_000);
    w.pull(r#"{"batch":5,"no_wait":true}"#, 3_000);
    let after = w.drain();
    assert!(
        after.iter().all(|d| d.message.status.is_some()),
        "{after:?}"
    );
    let state = w.server.consumer_state("ORDERS", "worker").unwrap();
    assert_eq!(
        (state.num_ack_pending, state.num_pending),
        (0, 0),
        "{state:?}"
    );
    assert!(matches!(
        w.server.delete_message("NOPE", 1),
        Err(SimError::StreamNotFound(_))
    ));
}

/// With v2 ack replies (nats-server 2.14+, `js_ack_fc_v2`): eleven tokens, the domain `_`
/// and the account hash before the stream; an acknowledgement through one settles.
#[test]
fn v2_ack_reply_subjects_carry_the_domain_and_account_and_settle() {
    let start = Instant::now();
    let mut w = World::jetstream_on(
        Server::new(start).with_ack_replies_v2(),
        start,
        pull::Config::default(),
    );
    w.publish("orders.new", "a", 0);
    w.pull(r#"{"batch":1}"#, 0);
    let got = w.drain();
    let reply = reply_of(&got[0]);
    let tokens: Vec<&str> = reply.split('.').collect();
    assert_eq!(tokens.len(), 11, "{reply}");
    assert_eq!(
        &tokens[..9],
        [
            "$JS",
            "ACK",
            "_",
            ruststream_sim::ACCOUNT_HASH,
            "ORDERS",
            "worker",
            "1",
            "1",
            "1"
        ]
    );
    w.ack(&reply, "+ACK", 5);
    let state = w.server.consumer_state("ORDERS", "worker").unwrap();
    assert_eq!(
        (state.num_ack_pending, state.ack_floor.stream_sequence),
        (0, 1)
    );
}
