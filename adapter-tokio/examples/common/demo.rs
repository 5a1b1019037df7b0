//! The smol demo's body (`adapter-smol/examples/smol_demo.rs`), written against `crate::adapter`:
//! three mounts (a Core subject, a Core wildcard with its copy subject, a JetStream consumer with
//! a dead-letter subject), a scripted batch of orders, one line per delivery, and a summary
//! checked against what the server reports (consumer info, the dead-letter stream, a wire tap
//! on the Core subjects, which counts the copies). The tokio demo is the orders service
//! (`adapter-tokio/examples/demo.rs`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::adapter::async_nats::{self, jetstream};
use crate::adapter::{App, Delivery, Disposition, Mount, Outcome, Settled};

const ORDERS: &[(&str, &str)] = &[
    // (subject, kind)
    ("demo.core.orders", "ok"),
    ("demo.core.orders", "flaky"),
    ("demo.core.orders", "poison"),
    ("demo.core.orders", "slow"),
    ("demo.core.orders", "drop"),
    ("demo.region.eu", "ok"),
    ("demo.region.us", "flaky"),
    ("demo.region.apac", "slow"),
    ("demo.js.orders", "ok"),
    ("demo.js.orders", "ok"),
    ("demo.js.orders", "flaky"),
    ("demo.js.orders", "poison"),
    ("demo.js.orders", "drop"),
    ("demo.js.orders", "slow"),
];

#[derive(serde::Deserialize)]
struct Order {
    id: usize,
    kind: String,
}

/// What each order's handler returns, by kind and attempt.
fn decide(order: Order, d: Delivery) -> std::future::Ready<Outcome> {
    let first = d.attempt.get() == 1;
    let _ = order.id;
    std::future::ready(match order.kind.as_str() {
        "ok" => Outcome::Ack,
        "flaky" if first => Outcome::Retry,
        "flaky" => Outcome::Ack,
        "poison" => Outcome::Retry,
        "drop" => Outcome::Drop,
        "slow" if first => Outcome::RetryAfter(Duration::from_millis(200)),
        _ => Outcome::Ack,
    })
}

/// How many handler runs (settlements) the script produces: on Core, `poison` runs 3 times
/// (the third is let go), `flaky` and `slow` twice; on JetStream the same, and `poison` is
/// dead-lettered on its third attempt.
fn expected_settlements() -> usize {
    ORDERS
        .iter()
        .map(|(_, kind)| match *kind {
            "poison" => 3,
            "flaky" | "slow" => 2,
            _ => 1,
        })
        .sum()
}

/// Runs the demo; `Ok(true)` when the summary agrees with the server.
pub(crate) async fn demo() -> Result<bool, Box<dyn std::error::Error>> {
    let (_server, url) = crate::logging::nats_server()?;

    // The streams the JetStream mount needs; the demo owns them and starts clean.
    // Read as the app reads it: a list, credentials and all.
    let client = crate::adapter::connect_url(&url, async_nats::ConnectOptions::new()).await?;
    let js = jetstream::new(client.clone());
    for (name, subjects) in [("DEMO_ORDERS", "demo.js.>"), ("DEMO_DLQ", "demo.dlq.>")] {
        let _ = js.delete_stream(name).await;
        js.create_stream(jetstream::stream::Config {
            name: name.to_owned(),
            subjects: vec![subjects.to_owned()],
            storage: jetstream::stream::StorageType::Memory,
            ..Default::default()
        })
        .await?;
    }
    // A wire tap on the Core subjects, to count what the server carried.
    let mut tap = client.subscribe("demo.core.orders").await?;
    let mut tap_region = client.subscribe("demo.region.>").await?;
    // `flush` only empties the client's buffer; a message to our own inbox comes back once the
    // server has processed the taps' subscriptions too.
    let inbox = client.new_inbox();
    let mut echo = client.subscribe(inbox.clone()).await?;
    client.publish(inbox, "".into()).await?;
    client.flush().await?;
    futures_util::StreamExt::next(&mut echo).await;

    let settled: Arc<Mutex<Vec<Settled>>> = Arc::default();
    let sink = settled.clone();
    let running = App::new(&url)
        .grace_period(Duration::from_secs(2))
        .on_settled(move |s| {
            println!(
                "{:<14} {:<18} attempt {}  outcome {:<26} wire: {}",
                s.mount,
                s.subject.as_str(),
                s.attempt,
                crate::logging::outcome_text(s),
                s.wire
            );
            sink.lock().unwrap().push(s.clone());
        })
        .mount_json(
            Mount::core_subject("orders-core", "demo.core.orders").max_attempts(3),
            decide,
        )
        .mount_json(
            Mount::core_wildcard("orders-region", "demo.region.*", "demo.region.retry")
                .max_attempts(3),
            decide,
        )
        .mount_json(
            Mount::jetstream("orders-js", "DEMO_ORDERS", "demo-worker")
                .max_attempts(3)
                .dead_letter("demo.dlq.orders")
                .ack_wait(Duration::from_secs(5)),
            decide,
        )
        .start()
        .await?;

    for (id, (subject, kind)) in ORDERS.iter().enumerate() {
        let payload = format!(r#"{{"id":{id},"kind":"{kind}"}}"#);
        if subject.starts_with("demo.js.") {
            js.publish(*subject, payload.into()).await?.await?;
        } else {
            client.publish(*subject, payload.into()).await?;
        }
    }
    client.flush().await?;

    let want = expected_settlements();
    let deadline = Instant::now() + Duration::from_secs(20);
    while settled.lock().unwrap().len() < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = running.shutdown().await;
    let settled = settled.lock().unwrap().clone();

    // The summary, from the runtime's own settlements.
    let mut summary: BTreeMap<&str, usize> = BTreeMap::new();
    for name in [
        "acked",
        "retried",
        "delayed",
        "dead-lettered",
        "dropped",
        "unsupported",
    ] {
        summary.insert(name, 0);
    }
    for s in &settled {
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
    let count = |d: Disposition, mount: &str| {
        settled
            .iter()
            .filter(|s| s.disposition == d && s.mount == mount)
            .count()
    };
    let js_settled = settled.iter().filter(|s| s.mount == "orders-js").count() as u64;
    let info = js
        .get_stream("DEMO_ORDERS")
        .await?
        .consumer_info("demo-worker")
        .await?;
    let dlq = js
        .get_stream("DEMO_DLQ")
        .await?
        .info()
        .await?
        .state
        .messages;
    let core_seen = drain_count(&mut tap).await;
    let region_seen = drain_count(&mut tap_region).await;
    let originals = |prefix: &str| ORDERS.iter().filter(|(s, _)| s.starts_with(prefix)).count();
    let core_copies =
        count(Disposition::Retried, "orders-core") + count(Disposition::Delayed, "orders-core");
    let region_copies =
        count(Disposition::Retried, "orders-region") + count(Disposition::Delayed, "orders-region");
    let checks = [
        (
            "every scripted delivery settled",
            settled.len() == want,
            format!("{} of {want}", settled.len()),
        ),
        (
            "dead letters stored by DEMO_DLQ",
            dlq == summary["dead-lettered"] as u64,
            format!("stream {dlq}, summary {}", summary["dead-lettered"]),
        ),
        (
            "JetStream deliveries = consumer's delivered sequence",
            info.delivered.consumer_sequence == js_settled,
            format!(
                "server {}, runtime {js_settled}",
                info.delivered.consumer_sequence
            ),
        ),
        (
            "JetStream: nothing pending or unacknowledged",
            info.num_pending == 0 && info.num_ack_pending == 0,
            format!(
                "pending {}, ack pending {}",
                info.num_pending, info.num_ack_pending
            ),
        ),
        (
            "Core subject: originals + copies on the wire",
            core_seen == originals("demo.core.") + core_copies,
            format!(
                "wire {core_seen}, runtime {} + {core_copies}",
                originals("demo.core.")
            ),
        ),
        (
            "Core wildcard: originals + copies on the wire",
            region_seen == originals("demo.region.") + region_copies,
            format!(
                "wire {region_seen}, runtime {} + {region_copies}",
                originals("demo.region.")
            ),
        ),
        (
            "no copy lost at shutdown",
            report.lost_copies.is_empty() && report.abandoned.is_empty(),
            format!("{report:?}"),
        ),
    ];
    Ok(crate::logging::print_checks(&checks))
}

/// How many messages a wire tap holds: it reads until none comes for 100 ms.
async fn drain_count(tap: &mut async_nats::Subscriber) -> usize {
    let mut seen = 0;
    while let Ok(Some(_)) = tokio::time::timeout(
        Duration::from_millis(100),
        futures_util::StreamExt::next(tap),
    )
    .await
    {
        seen += 1;
    }
    seen
}
