//! The ruststream demo: the orders service of the README (`examples/orders.rs`) against a
//! real nats-server, a scripted batch of orders, one line per delivery, and a summary checked
//! against what the server reports.
//!
//! ```sh
//! cargo run -p ruststream-tokio --example demo
//! ```
//!
//! Uses `NATS_URL` if set (the server needs JetStream, and must not have streams named
//! `ORDERS`, `EVENTS` or `DLQ`: the demo refuses to touch them, and deletes the ones it
//! creates at the end); otherwise starts a private nats-server (from `NATS_SERVER_BIN` or
//! `PATH`) on a free port with a temporary store, and stops it at the end. Exits 0 when the
//! summary agrees with the server, 1 when it does not, 2 when the demo could not run.
//!
//! The batch, published to `orders.new` and stored by `ORDERS`:
//! - `apple`, `pear`: accepted at once (an `order.accepted` event each);
//! - `flaky-plum`: the inventory times out twice; retried after the backoff's delays, then
//!   accepted on attempt 3;
//! - `kiwi` with quantity 0: rejected, dead-lettered at once (`Ruststream-Reason: rejected`);
//! - `stuck-fig`: the inventory always times out; dead-lettered at attempt 4
//!   (`handler-error`, with the error's text);
//! - `not an order`: does not decode; dead-lettered at once (`undecodable`).
//!
//! Then a Core request to `orders.count` is answered with the number of accepted orders.
//!
//! **Dead letters, redriven.** The demo then lists the dead letters with
//! `ruststream_tokio::dead_letters` (what `ruststream dlq list DLQ` prints), repairs the
//! inventory, and replays the `handler-error` one (`stuck-fig`) to `orders.new` with its
//! dead letter deleted once the stream confirms it (`ruststream dlq replay DLQ --reason
//! handler-error --delete`): the service accepts it on its first attempt.
//!
//! **Operating it.** The app serves the built-in ops endpoint (`App::ops`, feature `ops`):
//! `/metrics`, `/healthz`, `/readyz` and `/asyncapi.json` over HTTP, on `--metrics-addr ADDR`
//! (or `DEMO_METRICS_ADDR`), by default on a port of the system's choosing on 127.0.0.1. The
//! demo reads them as a scraper and a probe would: `/readyz` and `/healthz` answer 200 once
//! every mount consumes, the scraped counters must agree with the summary and the server, and
//! the endpoint is gone once the app is. Given an address, the
//! service keeps running once the batch is handled, until Ctrl-C, for `curl` (the checks
//! follow):
//!
//! ```sh
//! cargo run -p ruststream-tokio --example demo -- --metrics-addr 127.0.0.1:9464
//! curl -s 127.0.0.1:9464/metrics | grep ruststream_handler_outcomes_total
//! curl -s 127.0.0.1:9464/readyz
//! ```

#![allow(clippy::print_stdout, clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ruststream_tokio::async_nats::{self, jetstream};
use ruststream_tokio::dead_letters::{
    DeadLetterFilter, DeadLetterReason, DeadLetters, ReplayOptions, ReplaySummary,
};
use ruststream_tokio::{App, Disposition, OpsEndpoint, Settled};

#[path = "../../tests/src/server.rs"]
#[allow(dead_code, unreachable_pub)]
mod server;

#[path = "orders.rs"]
#[allow(dead_code, unreachable_pub)]
mod orders;

#[path = "common/logging.rs"]
mod logging;

#[path = "common/ops.rs"]
mod ops;

/// The batch: (payload, what becomes of it).
const BATCH: &[(&str, &str)] = &[
    (r#"{"id":1,"sku":"apple","quantity":2}"#, "accepted"),
    (r#"{"id":2,"sku":"pear","quantity":1}"#, "accepted"),
    (r#"{"id":3,"sku":"flaky-plum","quantity":3}"#, "accepted"),
    (r#"{"id":4,"sku":"kiwi","quantity":0}"#, "rejected"),
    (
        r#"{"id":5,"sku":"stuck-fig","quantity":1}"#,
        "handler-error",
    ),
    ("not an order", "undecodable"),
];

/// Handler runs (settlements) the batch makes: `flaky-plum` 3, `stuck-fig` 4, the others 1;
/// and the `orders.count` request, 1.
const SETTLEMENTS: usize = 1 + 1 + 3 + 1 + 4 + 1 + 1;

const STREAMS: [&str; 3] = ["ORDERS", "EVENTS", "DLQ"];

fn main() -> std::process::ExitCode {
    logging::init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    logging::exit_code(runtime.block_on(demo()))
}

/// `--metrics-addr ADDR`, or `DEMO_METRICS_ADDR`: where to serve the operator's endpoints,
/// and whether to keep serving after the checks (only when one is given).
fn metrics_addr() -> Result<(String, bool), String> {
    let mut args = std::env::args().skip(1);
    let mut addr = std::env::var("DEMO_METRICS_ADDR").ok();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--metrics-addr" => {
                addr = Some(
                    args.next()
                        .ok_or("--metrics-addr needs an address, such as 127.0.0.1:9464")?,
                );
            }
            other => {
                return Err(format!(
                    "unknown argument {other}; the demo takes --metrics-addr ADDR"
                ));
            }
        }
    }
    Ok(match addr {
        Some(addr) => (addr, true),
        None => ("127.0.0.1:0".to_owned(), false),
    })
}

async fn demo() -> Result<bool, Box<dyn std::error::Error>> {
    let (metrics_addr, hold) = metrics_addr()?;
    let (_server, url) = logging::nats_server()?;
    let client = ruststream_tokio::connect_url(&url, async_nats::ConnectOptions::new()).await?;
    let js = jetstream::new(client.clone());
    for name in STREAMS {
        if js.get_stream(name).await.is_ok() {
            return Err(format!("the server already has a stream `{name}`: the demo leaves it alone; use a server without ORDERS, EVENTS and DLQ, or unset NATS_URL").into());
        }
    }
    let result = run(&url, &client, &js, &metrics_addr, hold).await;
    for name in STREAMS {
        let _ = js.delete_stream(name).await;
    }
    result
}

async fn run(
    url: &str,
    client: &async_nats::Client,
    js: &jetstream::Context,
    metrics_addr: &str,
    hold: bool,
) -> Result<bool, Box<dyn std::error::Error>> {
    let settled: Arc<Mutex<Vec<(Settled, Instant)>>> = Arc::default();
    let sink = settled.clone();
    let app = App::new(url)
        .grace_period(Duration::from_secs(2))
        .on_settled(move |s| {
            let outcome = logging::outcome_text(s);
            println!(
                "{:<13} {:<13} seq {:<5} attempt {}  outcome {:<9} wire: {}",
                s.mount,
                s.subject.as_str(),
                s.stream_sequence.map_or("-".to_owned(), |q| q.to_string()),
                s.attempt,
                outcome,
                s.wire
            );
            sink.lock().unwrap().push((s.clone(), Instant::now()));
        });
    // The built-in ops endpoint (feature `ops`): /metrics, /healthz, /readyz, /asyncapi.json.
    let app = orders::orders_service(app)
        .ops(OpsEndpoint::bind(metrics_addr).asyncapi("orders", "1.0.0"));
    let running = app.start().await?;
    let ops_addr = running.ops_addr().ok_or("the app serves no ops endpoint")?;
    println!("serving /metrics, /healthz and /readyz on http://{ops_addr}");
    let ready_after = ops::get(ops_addr, "/readyz")?.0;
    let live_after = ops::get(ops_addr, "/healthz")?.0;

    for (payload, _) in BATCH {
        js.publish("orders.new", (*payload).into()).await?.await?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let js_runs = SETTLEMENTS - 1;
    while settled.lock().unwrap().len() < js_runs && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reply = client.request("orders.count", "".into()).await?;
    let count: serde_json::Value = serde_json::from_slice(&reply.payload)?;
    println!("orders.count answered: {count}");
    while settled.lock().unwrap().len() < SETTLEMENTS && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (listed, redriven) = redrive(client).await?;
    while settled.lock().unwrap().len() < SETTLEMENTS + 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let asyncapi = ops::get(ops_addr, "/asyncapi.json")?;
    if hold {
        println!(
            "the service runs: http://{ops_addr}/metrics, /healthz and /readyz; Ctrl-C to stop it and check the summary"
        );
        tokio::signal::ctrl_c().await?;
    }
    let (scrape_status, scrape) = ops::get(ops_addr, "/metrics")?;
    let report = running.shutdown().await;
    // The endpoint ends with the app.
    let endpoint_gone = ops::get(ops_addr, "/healthz").is_err();
    let settled = settled.lock().unwrap().clone();

    let mut summary: BTreeMap<&str, usize> = BTreeMap::new();
    for name in ["acked", "delayed", "dead-lettered"] {
        summary.insert(name, 0);
    }
    for (s, _) in &settled {
        *summary.entry(s.disposition.as_str()).or_default() += 1;
    }
    println!();
    println!(
        "summary: {}",
        summary
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );

    // What the server says.
    let info = js
        .get_stream("ORDERS")
        .await?
        .consumer_info("worker")
        .await?;
    let events = stream_len(js, "EVENTS").await?;
    let mut dead_letters = dead_letter_reasons(js).await?;
    dead_letters.sort();
    let mut want_reasons: Vec<String> = BATCH
        .iter()
        .filter(|(_, fate)| *fate != "accepted")
        .map(|(_, fate)| match *fate {
            "handler-error" => "handler-error: inventory timed out reserving stuck-fig".to_owned(),
            fate => fate.to_owned(),
        })
        .collect();
    want_reasons.sort();
    // The handler-error dead letter was replayed and deleted: the stream keeps the others.
    want_reasons.retain(|r| !r.starts_with("handler-error"));
    let accepted = BATCH.iter().filter(|(_, fate)| *fate == "accepted").count();
    let replayed_acked = settled
        .iter()
        .filter(|(s, _)| {
            s.mount == "orders"
                && s.stream_sequence == Some(BATCH.len() as u64 + 1)
                && s.disposition == Disposition::Acked
        })
        .count();
    let asyncapi_doc: serde_json::Value =
        serde_json::from_str(&asyncapi.1).unwrap_or(serde_json::Value::Null);
    let js_settled = settled.iter().filter(|(s, _)| s.mount == "orders").count() as u64;
    let acked_js = settled
        .iter()
        .filter(|(s, _)| s.mount == "orders" && s.disposition == Disposition::Acked)
        .count();
    // The backoff: `flaky-plum`'s attempts at least the base delay (less its jitter) apart,
    // then at least twice that.
    let plum: Vec<Instant> = settled
        .iter()
        .filter(|(s, _)| s.mount == "orders" && s.stream_sequence == Some(3))
        .map(|(_, at)| *at)
        .collect();
    let gaps: Vec<Duration> = plum.windows(2).map(|w| w[1] - w[0]).collect();
    // The `orders` mount's counters, as Prometheus scraped them.
    let metric = |name: &str, label: Option<(&str, &str)>| {
        let mut labels = vec![("mount", "orders")];
        labels.extend(label);
        ops::scraped(&scrape, name, &labels)
    };
    let checks = [
        (
            "every delivery settled, the replayed one included",
            settled.len() == SETTLEMENTS + 1,
            format!("{} of {}", settled.len(), SETTLEMENTS + 1),
        ),
        (
            "JetStream deliveries = the consumer's delivered sequence",
            info.delivered.consumer_sequence == js_settled,
            format!(
                "server {}, runtime {js_settled}",
                info.delivered.consumer_sequence
            ),
        ),
        (
            "nothing pending or unacknowledged",
            info.num_pending == 0 && info.num_ack_pending == 0,
            format!(
                "pending {}, ack pending {}",
                info.num_pending, info.num_ack_pending
            ),
        ),
        (
            "events stored by EVENTS = orders acked = orders.count's answer (+1 replayed)",
            events == accepted as u64 + 1
                && acked_js == accepted + 1
                && count["accepted"] == accepted,
            format!("stream {events}, acked {acked_js}, answer {count}, batch {accepted}"),
        ),
        (
            "dead letters listed (3), the handler-error one replayed, stored, deleted and acked",
            listed.len() == 3
                && redriven.selected == 1
                && redriven.stored == 1
                && redriven.deleted == 1
                && redriven.stopped_at.is_none()
                && replayed_acked == 1,
            format!("listed {listed:?}, replay {redriven:?}, acked {replayed_acked}"),
        ),
        (
            "dead letters left in DLQ, with their provenance reasons",
            dead_letters == want_reasons && summary["dead-lettered"] == want_reasons.len() + 1,
            format!(
                "stream {dead_letters:?}, summary {}",
                summary["dead-lettered"]
            ),
        ),
        (
            "flaky-plum retried after the backoff's delays",
            gaps.len() == 2
                && gaps[0] >= Duration::from_millis(80)
                && gaps[1] >= Duration::from_millis(160),
            format!("{gaps:?}"),
        ),
        (
            "/readyz and /healthz: 200 once consuming; the endpoint gone with the app",
            (ready_after, live_after, endpoint_gone) == (200, 200, true),
            format!("{ready_after}, {live_after}; gone: {endpoint_gone}"),
        ),
        (
            "scraped /metrics: consumed, outcomes, +ACKs and dead letters = the summary",
            scrape_status == 200
                && metric("messaging_client_consumed_messages", None) == js_settled
                && metric(
                    "ruststream_handler_outcomes_total",
                    Some(("outcome", "ack")),
                ) == acked_js as u64
                && metric("ruststream_wire_actions_total", Some(("action", "ack")))
                    == acked_js as u64
                && metric(
                    "ruststream_wire_actions_total",
                    Some(("action", "nak_delay")),
                ) == summary["delayed"] as u64
                && metric(
                    "ruststream_wire_actions_total",
                    Some(("action", "dead_letter")),
                ) == summary["dead-lettered"] as u64,
            format!(
                "consumed {}, ack outcomes {}, +ACK {}, delayed -NAK {}, dead letters {}",
                metric("messaging_client_consumed_messages", None),
                metric(
                    "ruststream_handler_outcomes_total",
                    Some(("outcome", "ack"))
                ),
                metric("ruststream_wire_actions_total", Some(("action", "ack"))),
                metric(
                    "ruststream_wire_actions_total",
                    Some(("action", "nak_delay"))
                ),
                metric(
                    "ruststream_wire_actions_total",
                    Some(("action", "dead_letter"))
                ),
            ),
        ),
        (
            "/asyncapi.json: an AsyncAPI 3.0 document with both mounts",
            asyncapi.0 == 200
                && asyncapi_doc["asyncapi"] == "3.0.0"
                && asyncapi_doc["operations"]["orders"]["action"] == "receive"
                && asyncapi_doc["operations"]["orders-count"]["action"] == "receive",
            format!("{}, {} bytes", asyncapi.0, asyncapi.1.len()),
        ),
        (
            "nothing abandoned at shutdown",
            report.abandoned.is_empty() && report.lost_copies.is_empty(),
            format!("{report:?}"),
        ),
    ];
    Ok(logging::print_checks(&checks))
}

/// Lists the dead letters (one line each, as `ruststream dlq list DLQ` does), repairs the
/// inventory, and replays the `handler-error` one with its dead letter deleted once the
/// stream has it. Returns the listed lines and the replay's summary.
async fn redrive(
    client: &async_nats::Client,
) -> Result<(Vec<String>, ReplaySummary), Box<dyn std::error::Error>> {
    let dlq = DeadLetters::open(client.clone(), "DLQ").await?;
    let mut listed = Vec::new();
    println!();
    println!("dead letters in DLQ:");
    dlq.each(&DeadLetterFilter::default(), false, |dead| {
        let r = &dead.record;
        let line = format!(
            "  {}  from {} (ORDERS#{}), attempt {}, {}{}",
            dead.sequence,
            r.subject.as_deref().unwrap_or("-"),
            r.stream_sequence.map_or("-".to_owned(), |s| s.to_string()),
            r.attempt.map_or("-".to_owned(), |a| a.to_string()),
            r.reason.as_deref().unwrap_or("-"),
            r.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default(),
        );
        println!("{line}");
        listed.push(line);
    })
    .await?;
    orders::INVENTORY_REPAIRED.store(true, std::sync::atomic::Ordering::Relaxed);
    println!("the inventory is repaired: replaying the handler-error dead letter");
    let options = ReplayOptions {
        filter: DeadLetterFilter {
            reasons: vec![DeadLetterReason::HandlerError],
            ..DeadLetterFilter::default()
        },
        delete: true,
        ..ReplayOptions::default()
    };
    let summary = dlq.replay(&options, |_| {}, |_| {}).await?;
    println!(
        "replayed: {} stored, {} deleted",
        summary.stored, summary.deleted
    );
    println!();
    Ok((listed, summary))
}

async fn stream_len(
    js: &jetstream::Context,
    name: &str,
) -> Result<u64, Box<dyn std::error::Error>> {
    Ok(js.get_stream(name).await?.info().await?.state.messages)
}

/// Each stored dead letter's `Ruststream-Reason` (and `: Ruststream-Error`, if it has one), in
/// stream order (read as `ruststream dlq list` reads them: sequences a replay deleted are gaps).
async fn dead_letter_reasons(
    js: &jetstream::Context,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let dlq = DeadLetters::open(js.client(), "DLQ").await?;
    let mut reasons = Vec::new();
    dlq.each(&DeadLetterFilter::default(), true, |dead| {
        let reason = dead.record.reason.unwrap_or_else(|| "(none)".to_owned());
        reasons.push(match dead.record.error {
            Some(error) => format!("{reason}: {error}"),
            None => reason,
        });
    })
    .await?;
    Ok(reasons)
}
