//! Exploring your service: the orders service of `examples/orders.rs`, unchanged, on the
//! simulator under random faults (`ruststream_sim::explore::service`): lost acknowledgements,
//! failing dead letters, dropped connections, the server down, JetStream off, the app
//! restarted or killed. Each seed draws a batch of orders and a few faults; after the run the
//! contract's invariants are checked, then the service's own: every order ends accepted (its
//! `order.accepted` event stored once) or dead-lettered, never lost.
//!
//! It found that the example published a second `order.accepted` event when an order came
//! again after its `+ACK` was lost (22 of 100 seeds); the event now carries a `Nats-Msg-Id`.
//! It also shows what at-least-once delivery means at the limit: an order whose four `+ACK`s
//! were all lost comes a fifth time and is dead-lettered without running (rule 3), though it
//! was accepted (seed 334).
//!
//! ```sh
//! cargo test -p ruststream-tokio --test orders_explored -- --nocapture
//! RUSTSTREAM_EXPLORE_SEED=17 cargo test -p ruststream-tokio --test orders_explored  # one seed
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::time::Instant;

use ruststream_sim::explore::service::{Draw, Explorer, Message, SentMessage, Service, ServiceRun};
use ruststream_sim::{AckKind, App, Record, Sim};

#[path = "../examples/orders.rs"]
#[allow(dead_code, unreachable_pub)]
mod orders;

/// What each order should come to: accepted, or dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Accepted,
    DeadLettered,
}

struct OrdersService;

/// Whether a `+ACK` of the message `sent` reached the server.
fn acked(run: &ServiceRun, sent: &SentMessage) -> bool {
    let Some((stream, sequence)) = &sent.stored else {
        return false;
    };
    run.journal.iter().any(|r| {
        matches!(r, Record::Acknowledged { stream: s, stream_sequence, kind: AckKind::Ack, lost: false, .. }
            if s == stream && stream_sequence == sequence)
    })
}

impl Service for OrdersService {
    fn app(&self, sim: &Sim) -> App {
        orders::orders_service(App::new(&sim.url()))
    }

    fn messages(&self, draw: &mut Draw) -> Vec<Message> {
        (0..1 + draw.below(12))
            .map(|id| {
                let sku = *draw
                    .pick(&["gear", "gear", "gear", "flaky-gear", "stuck-bolt"])
                    .unwrap();
                let quantity = draw.below(3);
                let payload = match draw.chance(0.05) {
                    true => format!("not an order {id}"),
                    false => format!(r#"{{"id":{id},"sku":"{sku}","quantity":{quantity}}}"#),
                };
                Message::new("orders.new", payload)
            })
            .collect()
    }

    fn check(&self, run: &ServiceRun) -> Result<(), String> {
        let mut events: BTreeMap<u64, usize> = BTreeMap::new();
        for m in run.streams.get("EVENTS").into_iter().flatten() {
            let event: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
            *events.entry(event["id"].as_u64().unwrap()).or_default() += 1;
        }
        for sent in &run.sent {
            let payload = &sent.message.payload;
            let letters = run
                .streams
                .get("DLQ")
                .into_iter()
                .flatten()
                .filter(|m| m.payload == *payload)
                .count();
            let order: Option<serde_json::Value> = serde_json::from_slice(payload).ok();
            let (accepted, expect) = match &order {
                Some(o) => {
                    let good = o["quantity"] != 0
                        && !o["sku"].as_str().unwrap_or("").starts_with("stuck-");
                    let id = o["id"].as_u64().unwrap();
                    let expect = match good {
                        true => Expect::Accepted,
                        false => Expect::DeadLettered,
                    };
                    (events.get(&id).copied().unwrap_or(0), expect)
                }
                None => (0, Expect::DeadLettered),
            };
            let fine = match expect {
                // An accepted order is dead-lettered too only when none of its +ACKs reached
                // the server: redelivered past max_attempts, it is dead-lettered without
                // running (rule 3), as the server's delivery count says.
                Expect::Accepted => accepted == 1 && (letters == 0 || !acked(run, sent)),
                Expect::DeadLettered => accepted == 0 && letters >= 1,
            };
            if !fine {
                return Err(format!(
                    "{} should be {expect:?}: {accepted} order.accepted events, {letters} dead letters",
                    String::from_utf8_lossy(payload)
                ));
            }
        }
        Ok(())
    }
}

#[test]
fn every_order_ends_accepted_once_or_dead_lettered_whatever_fails() {
    let started = Instant::now();
    let explored = Explorer::new(|| OrdersService).seeds(0..150).run();
    eprintln!(
        "{} seeds in {:?}, {} failed",
        explored.seeds,
        started.elapsed(),
        explored.failures.len()
    );
    explored.assert_passed();
}
