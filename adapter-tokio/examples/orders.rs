//! The orders service: JSON orders from a stream, validated, a transient failure retried with
//! backoff, an `order.accepted` event published with the stream's confirmation, a Core request
//! `orders.count` answered, dead letters with provenance, and the ops endpoint at
//! `http://127.0.0.1:9465`: `/metrics`, `/healthz`, `/readyz` and its AsyncAPI document at
//! `/asyncapi.json` (`OPS_ADDR` to change it).
//!
//! `NATS_URL=nats://127.0.0.1:4222 cargo run -p ruststream-tokio --example orders`

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ruststream_tokio::async_nats::jetstream::stream;
use ruststream_tokio::{
    AnyRuntime, App, AppOn, Backoff, Context, Delivery, Mount, OpsEndpoint, Outcome, Reply,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An order, as clients publish it to `orders.new`.
#[derive(Deserialize, JsonSchema)]
pub struct Order {
    /// The order's id.
    pub id: u64,
    /// What is ordered.
    pub sku: String,
    /// How many.
    pub quantity: u32,
}

/// The event published for each accepted order.
#[derive(Serialize, JsonSchema)]
struct Accepted<'a> {
    id: u64,
    sku: &'a str,
    quantity: u32,
}

/// A stream that stores `subjects`.
fn stream(name: &str, subjects: &[&str]) -> stream::Config {
    stream::Config {
        name: name.to_owned(),
        subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    }
}

/// Whether the inventory service's outage for `stuck-` SKUs is over (the demo ends it, then
/// replays their dead letters with `ruststream_tokio::dead_letters`).
pub static INVENTORY_REPAIRED: AtomicBool = AtomicBool::new(false);

/// Stands in for a call to the inventory service: it times out twice for a `flaky-` SKU, and
/// for a `stuck-` one until [`INVENTORY_REPAIRED`].
async fn reserve(order: &Order, attempt: u64) -> Result<(), String> {
    let stuck = order.sku.starts_with("stuck-") && !INVENTORY_REPAIRED.load(Ordering::Relaxed);
    let times_out = stuck || (order.sku.starts_with("flaky-") && attempt < 3);
    match times_out {
        true => Err(format!("inventory timed out reserving {}", order.sku)),
        false => Ok(()),
    }
}

/// The service's streams and mounts, on `app`: an app on any runtime, so that a test can run
/// this same service on the simulator (`ruststream_sim::App`, see
/// `tests/orders_on_the_simulator.rs`); `main` runs it on tokio.
pub fn orders_service<R: AnyRuntime>(app: AppOn<R>) -> AppOn<R> {
    let accepted = Arc::new(AtomicU64::new(0));
    let counted = accepted.clone();
    app
        // Created when missing, checked when present, never changed.
        .stream(stream("ORDERS", &["orders.new"]))
        .stream(stream("EVENTS", &["order.>"]))
        .stream(stream("DLQ", &["dlq.orders"]))
        .mount_json(
            Mount::jetstream("orders", "ORDERS", "worker")
                .max_attempts(4)
                .backoff(Backoff::exponential(
                    Duration::from_millis(100),
                    Duration::from_secs(2),
                ))
                .dead_letter("dlq.orders")
                .provenance() // Ruststream-Reason, -Attempt, -Error… on each dead letter
                // For its AsyncAPI document (feature "asyncapi"): the JSON Schemas of what it
                // takes and what it publishes.
                .payload::<Order>()
                .publishes_json::<Accepted<'static>>("order.accepted"),
            move |order: Order, d: Delivery, cx: Context| {
                let accepted = accepted.clone();
                async move {
                    if order.quantity == 0 {
                        return Ok(Outcome::Reject); // poison: the dead-letter subject now
                    }
                    // An `Err` is a `retry`: -NAK {"delay": ~100 ms, ~200 ms, ~400 ms}, then
                    // the dead letter, with the error's text in Ruststream-Error.
                    reserve(&order, d.attempt.get()).await?;
                    let event = Accepted {
                        id: order.id,
                        sku: &order.sku,
                        quantity: order.quantity,
                    };
                    // Stored, or Err. A redelivery (its +ACK lost, the process killed after
                    // this line) publishes the event again: the Nats-Msg-Id the runtime gives
                    // it (made from the delivery) makes the EVENTS stream keep one within its
                    // duplicate window (2 min by default).
                    cx.jetstream_publish_json("order.accepted", &event).await?;
                    accepted.fetch_add(1, Ordering::Relaxed);
                    Ok::<_, Box<dyn Error + Send + Sync>>(Outcome::Ack)
                }
            },
        )
        // A Core request: the returned value is the reply, as JSON.
        .mount(
            Mount::core_subject("orders-count", "orders.count"),
            move |_d: Delivery| {
                let accepted = counted.load(Ordering::Relaxed);
                async move { Reply(serde_json::json!({ "accepted": accepted })) }
            },
        )
}

#[tokio::main]
async fn main() -> ExitCode {
    // Info and above unless `RUST_LOG` says otherwise: start-up, recoveries, dead letters.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned());
    let ops = std::env::var("OPS_ADDR").unwrap_or_else(|_| "127.0.0.1:9465".to_owned());
    let app =
        orders_service(App::new(&url)).ops(OpsEndpoint::bind(&ops).asyncapi("orders", "1.0.0"));
    match app.run().await {
        Ok(report) => {
            eprintln!("stopped: {report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
