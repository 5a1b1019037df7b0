//! Many mounts in one app against raw async-nats with as many subscriptions or consumers
//! (issue 39's *scale* scenario): start-up time, resident memory per idle mount, and the rate
//! of traffic spread over them.
//!
//! ```sh
//! CARGO_TARGET_DIR=target cargo bench --manifest-path bench/Cargo.toml --bench scale
//! ```
//!
//! Starts a private nats-server (from `NATS_SERVER_BIN` or `PATH`), then, for each round and
//! each side, runs the side in a process of its own (this binary again, with
//! `BENCH_SCALE_CHILD` set), so that its resident memory is its own:
//!
//! - **raw**: one async-nats client; on Core, `subscribe` to each of N subjects and a task per
//!   subscription decoding and counting its messages; on JetStream, N durable pull consumers
//!   on one stream (a filter subject each) created one after the other, and a task per
//!   consumer over `consumer.messages()`, decoding, counting and `ack()`ing each;
//! - **tokio**: one `ruststream-tokio` app with N mounts (`Mount::core_subject` on each
//!   subject, or `Mount::jetstream` with a filter subject each), each with `mount_json` and a
//!   handler that decodes, counts and returns `Outcome::Ack`, every setting at its default;
//! - **smol**: the same app on `ruststream-smol`, on a thread of its own (`smol::block_on`).
//!
//! The child measures how long it takes to start consuming (raw: from connecting to the last
//! subscription flushed or consumer's `messages()` opened; ours: `App::start`, which connects
//! too), and its resident memory (`VmRSS`) just before and 500 ms after; then the parent
//! publishes 100 orders (512-byte JSON) to each subject, round-robin, and times from its first
//! publish to the child's report that every order was handled (on JetStream, published to the
//! stream and acknowledged by it first; the timed window is the consumers'). The kinds:
//! `core-1000` (1,000 Core subjects), `core-100` and `js-100` (100 consumers).
//!
//! The headline is, per kind, the median over rounds of each measure and the median of paired
//! rounds of the rate against raw. Targets (issue 39): 1,000 Core mounts start within twice
//! raw's time; each idle mount holds under 8 KiB beyond raw's per subscription; the rate is at
//! least 0.95 of raw's on every kind. Environment: `BENCH_ROUNDS` (default 5), `BENCH_SIDES`
//! (`raw,tokio,smol`), `BENCH_KINDS` (`core-1000,core-100,js-100`).

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

#[path = "../../tests/src/server.rs"]
#[allow(dead_code, unreachable_pub)]
mod server;

#[path = "../../tests/src/paired.rs"]
#[allow(unreachable_pub)]
mod paired;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures_util::StreamExt;
use paired::{median, paired};
use ruststream_peer_bench::{Order, order_payload};

/// Messages published to each subject.
const PER_SUBJECT: usize = 100;
/// The JetStream kind's stream.
const STREAM: &str = "BENCH_SCALE";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Core1000,
    Core100,
    Js100,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Core1000, Kind::Core100, Kind::Js100];

    fn name(self) -> &'static str {
        match self {
            Kind::Core1000 => "core-1000",
            Kind::Core100 => "core-100",
            Kind::Js100 => "js-100",
        }
    }

    fn mounts(self) -> usize {
        match self {
            Kind::Core1000 => 1_000,
            Kind::Core100 | Kind::Js100 => 100,
        }
    }

    fn subject(self, i: usize) -> String {
        match self {
            Kind::Js100 => format!("bench.scale.js.{i}"),
            Kind::Core1000 | Kind::Core100 => format!("bench.scale.core.{i}"),
        }
    }

    fn of(name: &str) -> Kind {
        *Kind::ALL
            .iter()
            .find(|k| k.name() == name)
            .unwrap_or_else(|| panic!("no kind {name:?}: expected core-1000, core-100 or js-100"))
    }
}

const SIDES: [&str; 3] = ["raw", "tokio", "smol"];

/// Messages handled in the child.
static HANDLED: AtomicUsize = AtomicUsize::new(0);

fn handle(payload: &[u8]) {
    let order: Order = serde_json::from_slice(payload).unwrap();
    std::hint::black_box(order.id);
    HANDLED.fetch_add(1, Ordering::Relaxed);
}

/// The process's resident memory, in KiB (`VmRSS` of `/proc/self/status`).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// What a child reports once it consumes: start-up time and resident memory before and after.
struct Started {
    start: Duration,
    rss_before: u64,
    rss_after: u64,
}

/// Waits until the child has handled `n` messages (or 60 s pass, which fails the bench).
async fn handled_all(n: usize) {
    let since = Instant::now();
    while HANDLED.load(Ordering::Relaxed) < n {
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "handled {} of {n} after 60 s",
            HANDLED.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

/// The ruststream app of `kind`, for one adapter crate.
macro_rules! app {
    ($adapter:ident) => {{
        use $adapter::{App, Delivery, Mount, Outcome};
        |url: &str, kind: Kind| -> App {
            let acking = |order: Order, _d: Delivery| {
                std::hint::black_box(order.id);
                HANDLED.fetch_add(1, Ordering::Relaxed);
                std::future::ready(Outcome::Ack)
            };
            let mut app = App::new(url);
            for i in 0..kind.mounts() {
                let name = format!("m{i}");
                let mount = match kind {
                    Kind::Js100 => {
                        Mount::jetstream(&name, STREAM, &name).filter_subject(&kind.subject(i))
                    }
                    Kind::Core1000 | Kind::Core100 => Mount::core_subject(&name, &kind.subject(i)),
                };
                app = app.mount_json(mount, acking);
            }
            app
        }
    }};
}

/// The child: runs `side` on `kind`, says `READY <start µs> <rss before> <rss after>` on its
/// stdout, then `DONE` once every message is handled, and exits.
fn child(spec: &str, url: &str) {
    let mut parts = spec.split(':');
    let (side, kind) = (
        parts.next().unwrap().to_owned(),
        Kind::of(parts.next().unwrap()),
    );
    let total = kind.mounts() * PER_SUBJECT;
    let report = |started: Started| {
        println!(
            "READY {} {} {}",
            started.start.as_micros(),
            started.rss_before,
            started.rss_after
        );
        std::io::stdout().flush().unwrap();
    };
    let done = || {
        println!("DONE");
        std::io::stdout().flush().unwrap();
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    match side.as_str() {
        "raw" => rt.block_on(async {
            let rss_before = rss_kib();
            let since = Instant::now();
            let client = async_nats::connect(url).await.unwrap();
            match kind {
                Kind::Core1000 | Kind::Core100 => {
                    for i in 0..kind.mounts() {
                        let mut sub = client.subscribe(kind.subject(i)).await.unwrap();
                        tokio::spawn(async move {
                            while let Some(m) = sub.next().await {
                                handle(&m.payload);
                            }
                        });
                    }
                    client.flush().await.unwrap();
                }
                Kind::Js100 => {
                    let stream = jetstream::new(client.clone())
                        .get_stream(STREAM)
                        .await
                        .unwrap();
                    for i in 0..kind.mounts() {
                        let consumer = stream
                            .create_consumer(jetstream::consumer::pull::Config {
                                durable_name: Some(format!("m{i}")),
                                filter_subject: kind.subject(i),
                                ..Default::default()
                            })
                            .await
                            .unwrap();
                        let mut messages = consumer.messages().await.unwrap();
                        tokio::spawn(async move {
                            while let Some(m) = messages.next().await {
                                let Ok(m) = m else { continue };
                                handle(&m.payload);
                                m.ack().await.unwrap();
                            }
                        });
                    }
                }
            }
            let start = since.elapsed();
            tokio::time::sleep(Duration::from_millis(500)).await;
            report(Started {
                start,
                rss_before,
                rss_after: rss_kib(),
            });
            handled_all(total).await;
            client.flush().await.unwrap();
            done();
        }),
        "tokio" => rt.block_on(async {
            let app = (app!(ruststream_tokio))(url, kind);
            let rss_before = rss_kib();
            let since = Instant::now();
            let running = app.start().await.unwrap();
            let start = since.elapsed();
            tokio::time::sleep(Duration::from_millis(500)).await;
            report(Started {
                start,
                rss_before,
                rss_after: rss_kib(),
            });
            handled_all(total).await;
            done();
            running.shutdown().await;
        }),
        "smol" => {
            let url = url.to_owned();
            std::thread::spawn(move || {
                smol::block_on(async move {
                    let app = (app!(ruststream_smol))(&url, kind);
                    let rss_before = rss_kib();
                    let since = Instant::now();
                    let running = app.start().await.unwrap();
                    let start = since.elapsed();
                    smol::Timer::after(Duration::from_millis(500)).await;
                    report(Started {
                        start,
                        rss_before,
                        rss_after: rss_kib(),
                    });
                    while HANDLED.load(Ordering::Relaxed) < total {
                        smol::Timer::after(Duration::from_micros(200)).await;
                    }
                    done();
                    running.shutdown().await;
                })
            })
            .join()
            .unwrap();
        }
        other => panic!("no side {other:?}"),
    }
}

/// One round of `side` on `kind`: (start-up, KiB per idle mount, rate in msg/s).
async fn round(
    url: &str,
    side: &str,
    kind: Kind,
    publisher: &async_nats::Client,
    payload: &bytes::Bytes,
) -> (Duration, f64, f64) {
    let js = jetstream::new(publisher.clone());
    if kind == Kind::Js100 {
        let _ = js.delete_stream(STREAM).await;
        js.create_stream(jetstream::stream::Config {
            name: STREAM.to_owned(),
            subjects: vec!["bench.scale.js.>".to_owned()],
            storage: jetstream::stream::StorageType::Memory,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env("BENCH_SCALE_CHILD", format!("{side}:{}", kind.name()))
        .env("BENCH_SCALE_URL", url)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let ready = lines.recv().await.expect("the child says READY");
    let numbers: Vec<u64> = ready
        .strip_prefix("READY ")
        .unwrap_or_else(|| panic!("expected READY, got {ready:?}"))
        .split(' ')
        .map(|n| n.parse().unwrap())
        .collect();
    let start = Duration::from_micros(numbers[0]);
    let per_mount = (numbers[2].saturating_sub(numbers[1])) as f64 / kind.mounts() as f64;
    let since = Instant::now();
    let mut acks = Vec::new();
    for k in 0..PER_SUBJECT {
        for i in 0..kind.mounts() {
            if kind == Kind::Js100 {
                acks.push(js.publish(kind.subject(i), payload.clone()).await.unwrap());
            } else {
                publisher
                    .publish(kind.subject(i), payload.clone())
                    .await
                    .unwrap();
            }
        }
        for ack in acks.drain(..) {
            ack.await.unwrap();
        }
        if k % 10 == 9 {
            publisher.flush().await.unwrap();
        }
    }
    publisher.flush().await.unwrap();
    let done = lines.recv().await;
    assert_eq!(done.as_deref(), Some("DONE"), "{side} on {}", kind.name());
    let rate = (kind.mounts() * PER_SUBJECT) as f64 / since.elapsed().as_secs_f64();
    let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    (start, per_mount, rate)
}

fn main() {
    if let Ok(spec) = std::env::var("BENCH_SCALE_CHILD") {
        let url = std::env::var("BENCH_SCALE_URL").expect("BENCH_SCALE_URL with the child");
        return child(&spec, &url);
    }
    let rounds: usize = std::env::var("BENCH_ROUNDS").map_or(5, |v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("BENCH_ROUNDS={v:?}: a number"))
    });
    let list = |var: &str, all: &[&'static str]| -> Vec<&'static str> {
        match std::env::var(var) {
            Err(_) => all.to_vec(),
            Ok(v) => v
                .split(',')
                .map(|s| {
                    *all.iter()
                        .find(|a| **a == s.trim())
                        .unwrap_or_else(|| panic!("{var}: no {s:?}; expected some of {all:?}"))
                })
                .collect(),
        }
    };
    let sides = list("BENCH_SIDES", &SIDES);
    let kinds: Vec<Kind> = list("BENCH_KINDS", &Kind::ALL.map(Kind::name))
        .into_iter()
        .map(Kind::of)
        .collect();
    let server = server::NatsServer::try_start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let (major, minor, patch) = server.version();
    println!("scale: nats-server {major}.{minor}.{patch}, {rounds} rounds, sides {sides:?}");
    let payload = order_payload(7, 512);
    let mut missed = 0;
    rt.block_on(async {
        let publisher = async_nats::connect(&url).await.unwrap();
        for kind in kinds {
            // Per side: start-up (s), KiB per idle mount, rate.
            let mut seen: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> =
                sides.iter().map(|_| Default::default()).collect();
            for r in 0..rounds {
                // Each round in another order, so that no side always follows the same one.
                for k in 0..sides.len() {
                    let s = (k + r) % sides.len();
                    let (start, per_mount, rate) =
                        round(&url, sides[s], kind, &publisher, &payload).await;
                    seen[s].0.push(start.as_secs_f64());
                    seen[s].1.push(per_mount);
                    seen[s].2.push(rate);
                }
            }
            println!(
                "{} ({} mounts, {PER_SUBJECT} orders each): medians over rounds",
                kind.name(),
                kind.mounts()
            );
            let raw = sides.iter().position(|s| *s == "raw");
            for (s, side) in sides.iter().enumerate() {
                let (start, mem, rate) = &seen[s];
                let against = raw
                    .map(|r| format!("  [{:.3} of raw's rate]", paired(rate, &seen[r].2)))
                    .unwrap_or_default();
                println!(
                    "  {side:<6} start {:>7.1} ms  {:>6.1} KiB per idle mount  {:>9.0} msg/s{against}",
                    median(start.clone()) * 1_000.0,
                    median(mem.clone()),
                    median(rate.clone())
                );
            }
            if let Some(r) = raw {
                for (s, side) in sides.iter().enumerate().filter(|(s, _)| *s != r) {
                    let start = median(seen[s].0.clone()) / median(seen[r].0.clone());
                    let beyond = median(seen[s].1.clone()) - median(seen[r].1.clone());
                    let rate = paired(&seen[s].2, &seen[r].2);
                    let mut checks = vec![
                        (format!("rate / raw {rate:.3} (≥ 0.95)"), rate >= 0.95),
                        (format!("{beyond:.1} KiB per idle mount beyond raw (< 8)"), beyond < 8.0),
                    ];
                    if kind == Kind::Core1000 {
                        checks.push((format!("start-up / raw {start:.2} (≤ 2)"), start <= 2.0));
                    }
                    for (what, met) in checks {
                        missed += usize::from(!met);
                        println!(
                            "  {:<6} {}: {side} {what}",
                            if met { "met" } else { "MISSED" },
                            kind.name()
                        );
                    }
                }
            }
        }
    });
    println!("targets missed: {missed}");
}
