//! Throughput of the runtime against raw async-nats, in the same process and run.
//!
//! ```sh
//! cargo bench -p ruststream-tokio --bench throughput
//! ```
//!
//! Starts a private nats-server (from `NATS_SERVER_BIN` or `PATH`) and runs two scenarios on
//! 100,000 messages of 512 B, each through raw async-nats, through `ruststream-tokio`, and
//! through `ruststream-smol`. The load (the publisher, the waits, the server checks) is the
//! same for all three and runs on the bench's Tokio runtime; the smol app runs on a thread of
//! its own, outside any Tokio context (`smol::block_on`), as a smol application would, with
//! the app's own NATS thread.
//!
//! - **Core**: a subscriber on one subject whose handler acks. The publisher keeps at most
//!   8,192 messages in flight (when the window is full it flushes and sleeps 1 ms until the
//!   handler count catches up), so that no side drops messages as a slow consumer and each is
//!   measured end to end.
//! - **JetStream**: 100,000 messages stored in a memory stream first; then a durable pull
//!   consumer acks each one. Raw async-nats uses `consumer.messages()` and `ack()`; the
//!   runtime uses its own pull loop (fetch only for free slots) and plans every `+ACK`. Each
//!   side waits for its handler count first, then for the server to report every message
//!   acknowledged (asking the server during the run would load it unevenly).
//!
//! Each scenario runs `BENCH_ROUNDS` times (default 15), alternating raw, tokio and smol.
//! Prints each side's best round in msg/s with the ratios of those best rounds, runtime / raw
//! and smol / tokio; then the same ratios as the median of the per-round ratios (one round of
//! each side, run back to back). The median of paired rounds is the figure to go by: one
//! outlier round of either side moves the ratio of best rounds by several percent, while
//! rounds run back to back share the machine's state.
//! Environment: `BENCH_MESSAGES` overrides the count, `BENCH_ONLY=core` skips JetStream,
//! `BENCH_LEASES=off` turns the JetStream mount's leases off, `BENCH_HANDLER=yield` makes its
//! handler yield once before it acks (so that every delivery runs under a lease),
//! `BENCH_VERBOSE=1` prints every round, and `BENCH_SIDES` (a comma-separated subset of
//! `raw,tokio,smol`) runs those sides only, for profiling one alone.

#![allow(clippy::print_stdout, clippy::unwrap_used, missing_docs)]

#[path = "../../tests/src/server.rs"]
#[allow(dead_code, unreachable_pub)]
mod server;

#[path = "../../tests/src/paired.rs"]
#[allow(dead_code, unreachable_pub)]
mod paired;

use paired::paired;

use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use ruststream_tokio::async_nats::{self, jetstream};

const PAYLOAD: usize = 512;
const WINDOW: usize = 8_192;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Publishes `n` Core messages to `subject`, keeping at most [`WINDOW`] ahead of `handled`,
/// and returns when all are handled.
async fn publish_core(client: &async_nats::Client, subject: &str, n: usize, handled: &AtomicUsize) {
    let payload = Bytes::from(vec![b'x'; PAYLOAD]);
    for i in 0..n {
        if i >= handled.load(Ordering::Relaxed) + WINDOW {
            // The window is full: let the consumer drain it. A short sleep, not a spin, so
            // the publisher does not take CPU from the side being measured; the window holds
            // ~10 ms of messages, so the consumer never runs dry in 1 ms.
            client.flush().await.unwrap();
            while i >= handled.load(Ordering::Relaxed) + WINDOW {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        client
            .publish(subject.to_owned(), payload.clone())
            .await
            .unwrap();
    }
    client.flush().await.unwrap();
    while handled.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

async fn core_raw(url: &str, n: usize, round: usize) -> f64 {
    let client = async_nats::connect(url).await.unwrap();
    let subject = format!("bench.core.raw.{round}");
    let mut sub = client.subscribe(subject.clone()).await.unwrap();
    client.flush().await.unwrap();
    let handled = Arc::new(AtomicUsize::new(0));
    let counter = handled.clone();
    let consumer = tokio::spawn(async move {
        while let Some(_m) = sub.next().await {
            if counter.fetch_add(1, Ordering::Relaxed) + 1 == n {
                break;
            }
        }
    });
    let publisher = async_nats::connect(url).await.unwrap();
    let start = Instant::now();
    publish_core(&publisher, &subject, n, &handled).await;
    let secs = start.elapsed().as_secs_f64();
    consumer.await.unwrap();
    n as f64 / secs
}

async fn fill_stream(js: &jetstream::Context, n: usize) {
    let _ = js.delete_stream("BENCH").await;
    js.create_stream(jetstream::stream::Config {
        name: "BENCH".to_owned(),
        subjects: vec!["bench.js".to_owned()],
        storage: jetstream::stream::StorageType::Memory,
        ..Default::default()
    })
    .await
    .unwrap();
    let payload = Bytes::from(vec![b'x'; PAYLOAD]);
    let mut acks = Vec::with_capacity(1024);
    for _ in 0..n {
        acks.push(js.publish("bench.js", payload.clone()).await.unwrap());
        if acks.len() == 1024 {
            for a in acks.drain(..) {
                a.await.unwrap();
            }
        }
    }
    for a in acks {
        a.await.unwrap();
    }
}

/// Waits until the durable has every one of `n` messages acknowledged.
async fn all_acked(js: &jetstream::Context, durable: &str, n: usize) {
    let stream = js.get_stream("BENCH").await.unwrap();
    loop {
        let info = stream.consumer_info(durable).await.unwrap();
        if info.ack_floor.stream_sequence as usize >= n && info.num_ack_pending == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn durable_config(name: &str) -> jetstream::consumer::pull::Config {
    jetstream::consumer::pull::Config {
        durable_name: Some(name.to_owned()),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: Duration::from_secs(30),
        ..Default::default()
    }
}

async fn js_raw(url: &str, n: usize, round: usize) -> f64 {
    let client = async_nats::connect(url).await.unwrap();
    let js = jetstream::new(client);
    let name = format!("raw{round}");
    let consumer = js
        .get_stream("BENCH")
        .await
        .unwrap()
        .create_consumer(durable_config(&name))
        .await
        .unwrap();
    let start = Instant::now();
    let mut messages = consumer.messages().await.unwrap();
    let mut seen = 0;
    while let Some(m) = messages.next().await {
        // async-nats reports a missed idle heartbeat when a loaded machine delays one, and
        // goes on: count it against raw async-nats' round, not as a failure.
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                eprintln!("raw async-nats pull stream: {e}; going on");
                continue;
            }
        };
        m.ack().await.unwrap();
        seen += 1;
        if seen == n {
            break;
        }
    }
    all_acked(&js, &name, n).await;
    n as f64 / start.elapsed().as_secs_f64()
}

/// How each runtime's app is started, for one adapter crate: the same mounts and handler.
macro_rules! apps {
    ($module:ident, $adapter:ident) => {
        mod $module {
            use super::*;
            use $adapter as adapter;

            /// A handler that counts each delivery and acks it.
            fn acking(
                counter: Arc<AtomicUsize>,
            ) -> impl Fn(adapter::Delivery) -> std::future::Ready<adapter::Outcome> + Send + Sync + 'static {
                move |_d| {
                    counter.fetch_add(1, Ordering::Relaxed);
                    std::future::ready(adapter::Outcome::Ack)
                }
            }

            /// An app with one Core subject mount on `subject` whose handler acks.
            pub(crate) async fn core_app(url: String, subject: String, counter: Arc<AtomicUsize>) -> adapter::Running {
                adapter::App::new(&url)
                    .mount(adapter::Mount::core_subject("bench-core", &subject), acking(counter))
                    .start()
                    .await
                    .unwrap()
            }

            /// A handler that counts each delivery and acks after one yield, as a handler
            /// that awaits anything does: it is still running after its first poll, so it
            /// runs on a task of its own, under a lease (rule 16).
            fn acking_after_a_yield(
                counter: Arc<AtomicUsize>,
            ) -> impl Fn(adapter::Delivery) -> adapter::OutcomeFuture + Send + Sync + 'static {
                move |_d| {
                    counter.fetch_add(1, Ordering::Relaxed);
                    Box::pin(async {
                        let mut yielded = false;
                        std::future::poll_fn(|cx| {
                            if std::mem::replace(&mut yielded, true) {
                                std::task::Poll::Ready(())
                            } else {
                                cx.waker().wake_by_ref();
                                std::task::Poll::Pending
                            }
                        })
                        .await;
                        adapter::Outcome::Ack
                    })
                }
            }

            /// An app with one JetStream mount on the durable `name` of `BENCH`, acking each
            /// message, 512 handler slots; `BENCH_LEASES=off` turns its leases off, and
            /// `BENCH_HANDLER=yield` makes its handler yield once before it acks.
            pub(crate) async fn js_app(url: String, name: String, counter: Arc<AtomicUsize>) -> adapter::Running {
                let leases = std::env::var("BENCH_LEASES").map_or(true, |v| v != "off");
                let mount = adapter::Mount::jetstream("bench-js", "BENCH", &name)
                    .ack_wait(Duration::from_secs(30))
                    .concurrency(NonZeroUsize::new(512).unwrap())
                    .leases(leases);
                let app = adapter::App::new(&url);
                let app = match std::env::var("BENCH_HANDLER").as_deref() {
                    Ok("yield") => app.mount(mount, acking_after_a_yield(counter)),
                    _ => app.mount(mount, acking(counter)),
                };
                app.start().await.unwrap()
            }
        }
    };
}

apps!(on_tokio, ruststream_tokio);
apps!(on_smol, ruststream_smol);

/// Which runtime the app under test runs on. The load (the publisher, the waits, the server
/// checks) is the same for both: it runs on the bench's Tokio runtime.
#[derive(Clone, Copy)]
enum Side {
    Tokio,
    Smol,
}

/// Runs `load` while the app `start_*` gives runs: on this Tokio runtime, or, for smol, on a
/// thread of its own outside any Tokio context (`smol::block_on`), as a smol application
/// would, with the app's own NATS thread. Shuts the app down after `load`.
async fn with_app<L: Future<Output = f64>>(
    side: Side,
    url: &str,
    what: String,
    counter: Arc<AtomicUsize>,
    core: bool,
    load: L,
) -> f64 {
    let url = url.to_owned();
    match side {
        Side::Tokio => {
            let running = if core {
                on_tokio::core_app(url, what, counter).await
            } else {
                on_tokio::js_app(url, what, counter).await
            };
            let rate = load.await;
            running.shutdown().await;
            rate
        }
        Side::Smol => {
            let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            let app = std::thread::spawn(move || {
                smol::block_on(async move {
                    let running = if core {
                        on_smol::core_app(url, what, counter).await
                    } else {
                        on_smol::js_app(url, what, counter).await
                    };
                    ready_tx.send(()).unwrap();
                    let _ = stop_rx.await;
                    running.shutdown().await;
                })
            });
            ready_rx.await.unwrap();
            let rate = load.await;
            stop_tx.send(()).unwrap();
            tokio::task::spawn_blocking(move || app.join().unwrap())
                .await
                .unwrap();
            rate
        }
    }
}

/// Core through the runtime: the app's handler acks; the publisher is the one raw async-nats
/// gets.
async fn core_runtime(side: Side, url: &str, n: usize, round: usize) -> f64 {
    let subject = format!("bench.core.rt.{round}");
    let handled = Arc::new(AtomicUsize::new(0));
    let load = async {
        let publisher = async_nats::connect(url).await.unwrap();
        let start = Instant::now();
        publish_core(&publisher, &subject, n, &handled).await;
        n as f64 / start.elapsed().as_secs_f64()
    };
    with_app(side, url, subject.clone(), handled.clone(), true, load).await
}

/// JetStream through the runtime, timed from the app's start (it creates the durable) to the
/// server reporting every message acknowledged, as for raw async-nats.
async fn js_runtime(side: Side, url: &str, n: usize, round: usize) -> f64 {
    let js = jetstream::new(async_nats::connect(url).await.unwrap());
    let name = format!("rt{round}");
    let handled = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let load = async {
        // Wait until the handler saw every message (a local counter), then until the server
        // reports every one acknowledged.
        while handled.load(Ordering::Relaxed) < n {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        all_acked(&js, &name, n).await;
        n as f64 / start.elapsed().as_secs_f64()
    };
    with_app(side, url, name.clone(), handled.clone(), false, load).await
}

/// Whether `BENCH_SIDES` (a comma-separated subset of `raw,tokio,smol`; all when unset) runs
/// this side. For profiling one side alone.
fn side(name: &str) -> bool {
    std::env::var("BENCH_SIDES").map_or(true, |sides| sides.split(',').any(|s| s.trim() == name))
}

fn best(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

/// Runs `rounds` rounds of one scenario, alternating the sides `BENCH_SIDES` selects (the smol
/// app's rounds are numbered from 1000, so no subject or durable is shared), and prints its
/// line.
async fn scenario(
    what: &str,
    rounds: usize,
    raw: impl AsyncFn(usize) -> f64,
    runtime: impl AsyncFn(Side, usize) -> f64,
) {
    let (mut on_raw, mut on_tokio, mut on_smol) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        if side("raw") {
            on_raw.push(raw(round).await);
        }
        if side("tokio") {
            on_tokio.push(runtime(Side::Tokio, round).await);
        }
        if side("smol") {
            on_smol.push(runtime(Side::Smol, 1000 + round).await);
        }
        verbose_round(round, &on_raw, &on_tokio, &on_smol);
    }
    report(what, &on_raw, &on_tokio, &on_smol);
}

/// With `BENCH_VERBOSE`, prints one round of each side (0 for a side not run).
fn verbose_round(round: usize, raw: &[f64], tokio: &[f64], smol: &[f64]) {
    if std::env::var_os("BENCH_VERBOSE").is_some() {
        let at = |v: &[f64]| v.get(round).copied().unwrap_or(0.0);
        println!(
            "  round {round}: raw {:.0}, tokio {:.0}, smol {:.0} msg/s",
            at(raw),
            at(tokio),
            at(smol)
        );
    }
}

/// Prints one scenario's lines: each side's best round, runtime / raw, and smol / tokio; then
/// the same ratios as medians of paired rounds.
fn report(what: &str, raw: &[f64], tokio: &[f64], smol: &[f64]) {
    let (paired_tokio, paired_smol, paired_smol_tokio) =
        (paired(tokio, raw), paired(smol, raw), paired(smol, tokio));
    let (raw, tokio, smol) = (best(raw), best(tokio), best(smol));
    println!(
        "{what} raw async-nats {raw:>9.0} msg/s | ruststream-tokio {tokio:>9.0} msg/s (ratio {:.3}) | ruststream-smol {smol:>9.0} msg/s (ratio {:.3}, smol/tokio {:.3})",
        tokio / raw,
        smol / raw,
        smol / tokio
    );
    println!(
        "{what} median of paired rounds: ratio {paired_tokio:.3} | smol ratio {paired_smol:.3}, smol/tokio {paired_smol_tokio:.3}"
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported by this binary.
    let n = env_usize("BENCH_MESSAGES", 100_000);
    let rounds = env_usize("BENCH_ROUNDS", 15);
    let server = server::NatsServer::try_start().unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        println!("throughput: {n} messages of {PAYLOAD} B, {rounds} rounds; ratio = runtime / raw async-nats");
        let url = url.as_str();
        scenario(
            "core ack:     ",
            rounds,
            async |round| core_raw(url, n, round).await,
            async |on, round| core_runtime(on, url, n, round).await,
        )
        .await;

        if std::env::var("BENCH_ONLY").is_ok_and(|only| only == "core") {
            return;
        }
        let js = jetstream::new(async_nats::connect(url).await.unwrap());
        fill_stream(&js, n).await;
        scenario(
            "jetstream ack:",
            rounds,
            async |round| js_raw(url, n, round).await,
            async |on, round| js_runtime(on, url, n, round).await,
        )
        .await;
    });
}
