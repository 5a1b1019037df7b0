//! The explorer on a user's service (`ruststream_sim::explore::service`): a service that
//! charges each order once passes every seed; one that charges again on a redelivery is caught,
//! with the seed that shows it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use ruststream_sim::async_nats::jetstream::stream;
use ruststream_sim::explore::service::{Draw, Explorer, Message, Service, ServiceRun};
use ruststream_sim::{App, Delivery, Mount, Outcome, Sim};

/// Orders on JetStream: each one charged, then acknowledged; every tenth one's handler fails
/// twice first. `idempotent`: a redelivered order already charged is not charged again.
struct Orders {
    idempotent: bool,
    charges: Arc<Mutex<Vec<u64>>>,
}

fn order_id(d: &Delivery) -> u64 {
    std::str::from_utf8(&d.payload)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX)
}

impl Service for Orders {
    fn app(&self, sim: &Sim) -> App {
        let (charges, idempotent) = (self.charges.clone(), self.idempotent);
        App::new(&sim.url())
            .stream(stream::Config {
                name: "ORDERS".into(),
                subjects: vec!["orders.>".into()],
                ..Default::default()
            })
            .stream(stream::Config {
                name: "DLQ".into(),
                subjects: vec!["dlq.orders".into()],
                ..Default::default()
            })
            .mount(
                Mount::jetstream("orders", "ORDERS", "worker")
                    .max_attempts(3)
                    .dead_letter("dlq.orders"),
                move |d: Delivery| {
                    let charges = charges.clone();
                    async move {
                        let id = order_id(&d);
                        if id.is_multiple_of(10) && d.attempt.get() < 3 {
                            return Outcome::Retry;
                        }
                        let mut charges = charges.lock().unwrap();
                        if !idempotent || !charges.contains(&id) {
                            charges.push(id);
                        }
                        Outcome::Ack
                    }
                },
            )
    }

    fn messages(&self, draw: &mut Draw) -> Vec<Message> {
        (0..5 + draw.below(20))
            .map(|id| Message::new("orders.new", id.to_string()))
            .collect()
    }

    fn check(&self, run: &ServiceRun) -> Result<(), String> {
        let charges = self.charges.lock().unwrap();
        for (i, _) in run.sent.iter().enumerate() {
            let n = charges.iter().filter(|&&c| c == i as u64).count();
            if n > 1 {
                return Err(format!("order {i} charged {n} times"));
            }
        }
        Ok(())
    }
}

#[test]
fn an_idempotent_service_passes_every_seed() {
    let explorer = Explorer::new(|| Orders {
        idempotent: true,
        charges: Arc::default(),
    })
    .seeds(0..60);
    explorer.run().assert_passed();
    // The runs did something: seed 3 sends 5 orders, loses acknowledgements twice, and every
    // order is settled, order 0 after two retries.
    let seed = explorer.check_seed(3);
    assert_eq!(seed.run.sent.len(), 5, "{:?}", seed.run.sent);
    assert!(seed.run.quiet);
    assert!(seed.run.settled.len() >= 7, "{:?}", seed.run.settled);
    assert_eq!(seed.run.consumers["orders"].num_ack_pending, 0);
}

#[test]
fn a_service_that_charges_again_on_a_redelivery_is_caught_with_its_seed() {
    let explored = Explorer::new(|| Orders {
        idempotent: false,
        charges: Arc::default(),
    })
    .seeds(0..60)
    .run();
    let first = explored
        .failures
        .first()
        .expect("a seed that charges twice");
    eprintln!(
        "{} of {} seeds charged an order twice; the first, seed {}: {:?}",
        explored.failures.len(),
        explored.seeds,
        first.seed,
        first.violations
    );
    assert!(
        first
            .violations
            .iter()
            .all(|v| v.invariant == "the service's check" && v.detail.contains("charged 2 times")),
        "{:?}",
        first.violations
    );
    let text = explored.failure_text().expect("a failure to say");
    assert!(
        text.contains(&format!("RUSTSTREAM_EXPLORE_SEED={}", first.seed)),
        "{text}"
    );
}
