//! Support for the conformance suite: a private nats-server per test, a capture of the log,
//! and helpers to observe the wire and the server's state.
//!
//! The scenarios themselves live in `tests/scenarios/` (a file per subject), written once and
//! compiled once per instantiation: `tests/tests/tokio.rs` declares them with
//! `use ruststream_tokio as adapter` and `tests/tests/smol.rs` with `ruststream_smol`, each on a
//! real nats-server; `tests/tests/sim.rs` with `ruststream_sim`, on the simulator's model.
//! `tests/scenarios/mod.rs` says what an instantiation provides.
//!
//! The other test files of `tests/tests/`:
//! - `app_vs_server.rs`: the app on the simulator against the app on a real nats-server, on
//!   scenarios a proptest draws with a fixed seed: the handler's runs and what reaches the
//!   wire must agree.
//! - `model_vs_server.rs`: the simulator's model against a real nats-server at the wire, on
//!   JetStream scripts a proptest draws with a fixed seed: deliveries, the ends of pull
//!   requests and the consumer's final state must agree.
//! - `faults.rs`: faults under load (a service killed and started again, a nats-server
//!   restarted under a running app, a cluster node that dies), and nothing lost.
//! - `scripted.rs`: the `scripted` example run as a user runs it, on both runtimes, against a
//!   secured server.
//! - `signals.rs`: shutdown on SIGTERM and SIGINT on both adapters, one test in its binary
//!   (a signal goes to the whole process).
//! - `demo.rs`: the demos run as a new user runs them (`cargo run --example demo`).
//! - `examples.rs`: the README's batch and order-per-key services (`payments_batch`,
//!   `accounts_ordered`) run as processes, each checked by what its server shows.
//!
//! What this crate gives them:
//! - here: the log's capture ([`capture_logs`], [`log_lines`], [`logged`]), [`eventually`]
//!   and [`PATIENCE`], the wire ([`Wire`], [`round_trip`], [`headers_of`]), [`TestClient`],
//!   [`Endpoint`] (what a test client connects to), [`example_bin`] and [`build_examples`];
//! - `server.rs`, re-exported here: [`NatsServer`], [`ServerOptions`], [`nats_server_bin`],
//!   [`nats_server_version`];
//! - [`sim`]: [`SimServer`](sim::SimServer), the simulator where the scenarios have a
//!   `NatsServer`;
//! - [`cluster`]: [`NatsCluster`](cluster::NatsCluster), a few nats-server nodes for the fault
//!   tests;
//! - [`process`]: [`Scripted`](process::Scripted), the `scripted` example as a process;
//! - [`raw`]: a raw TCP publisher, for bytes async-nats refuses to build;
//! - [`metrics`]: a recorder that keeps every metric the runtime registers;
//! - [`paired`]: medians for the benches' interleaved rounds (the benches include it by path).

#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::time::Instant;

/// How long any eventual assertion waits before it fails.
pub const PATIENCE: Duration = Duration::from_secs(10);

pub mod cluster;
pub mod metrics;
pub mod paired;
pub mod process;
pub mod raw;
mod server;
pub mod sim;

pub use server::{NatsServer, ServerOptions, nats_server_bin, nats_server_version};

/// Everything logged by the process, captured once for all tests (they run in parallel, so
/// assertions filter by a mount name unique to the test).
fn log_buffer() -> &'static Arc<Mutex<Vec<u8>>> {
    static BUFFER: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    BUFFER.get_or_init(|| {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_subscriber::Layer as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = buffer.clone();
        let filter = tracing_subscriber::EnvFilter::try_from_env("RUSTSTREAM_TEST_LOG")
            .unwrap_or_else(
                // A target prefix: `ruststream::settlement` and every `ruststream_*` crate.
                |_| "ruststream=debug".into(),
            );
        let log = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || Capture(writer.clone()))
            .with_filter(filter);
        // Every span also carries an OpenTelemetry context (sampled, exported nowhere), so
        // that the `otel` feature's trace propagation can be seen from a handler.
        let tracer = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .build()
            .tracer("ruststream-tests");
        let _ = tracing_subscriber::registry()
            .with(log)
            .with(tracing_opentelemetry::layer().with_tracer(tracer))
            .try_init();
        buffer
    })
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Starts capturing the log (idempotent). Call before starting an app.
pub fn capture_logs() {
    log_buffer();
}

/// The trace id of the current span's OpenTelemetry context, in hex (all zeros without one).
pub fn current_trace_id() -> String {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    tracing::Span::current()
        .context()
        .span()
        .span_context()
        .trace_id()
        .to_string()
}

/// The captured log lines that contain every one of `needles`.
pub fn log_lines(needles: &[&str]) -> Vec<String> {
    let text = String::from_utf8_lossy(&log_buffer().lock().unwrap()).into_owned();
    text.lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .map(str::to_owned)
        .collect()
}

/// Waits until `check` returns `Some`, polling every 20 ms, for at most [`PATIENCE`].
///
/// # Panics
/// With `what` when time runs out.
pub async fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the captured log has a line with every one of `needles`.
pub async fn logged(needles: &[&str]) -> String {
    eventually(&format!("a log line with {needles:?}"), || {
        log_lines(needles).into_iter().next()
    })
    .await
}

/// One message seen on the wire by a test subscriber.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Its subject.
    pub subject: String,
    /// Its reply subject.
    pub reply: Option<String>,
    /// Its headers as (name, value) pairs, sorted.
    pub headers: Vec<(String, String)>,
    /// Its payload.
    pub payload: Bytes,
    /// When it was seen.
    pub at: Instant,
}

/// Records every message on a subject (wildcards allowed), from a separate test client.
#[derive(Clone)]
pub struct Wire(Arc<Mutex<Vec<Seen>>>);

impl Wire {
    /// Subscribes `client` to `subject` and records from now on.
    pub async fn watch(client: &async_nats::Client, subject: &str) -> Self {
        let mut sub = client
            .subscribe(subject.to_owned())
            .await
            .expect("subscribe");
        client.flush().await.expect("flush");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                sink.lock().unwrap().push(seen_from(&m));
            }
        });
        Self(seen)
    }

    /// Everything seen so far.
    pub fn all(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }

    /// The payloads seen so far, as text.
    pub fn payloads(&self) -> Vec<String> {
        self.all()
            .iter()
            .map(|s| String::from_utf8_lossy(&s.payload).into_owned())
            .collect()
    }

    /// Waits until at least `n` messages were seen; returns them.
    pub async fn at_least(&self, n: usize) -> Vec<Seen> {
        eventually(&format!("{n} message(s) on the wire"), || {
            let all = self.all();
            (all.len() >= n).then_some(all)
        })
        .await
    }
}

/// What a test client connects to: a real nats-server ([`NatsServer`]) or the simulator
/// ([`sim::SimServer`]).
pub trait Endpoint {
    /// The URL to connect to.
    fn url(&self) -> String;
    /// How the server was set up (credentials a client must give).
    fn options(&self) -> &ServerOptions;
}

impl Endpoint for NatsServer {
    fn url(&self) -> String {
        NatsServer::url(self)
    }

    fn options(&self) -> &ServerOptions {
        NatsServer::options(self)
    }
}

/// Waits until the server has processed everything `client` sent so far (a `flush` only
/// empties the client's buffer): a message to the client's own inbox comes back only after
/// every earlier `SUB` took effect.
pub async fn round_trip(client: &async_nats::Client) {
    let inbox = client.new_inbox();
    let mut echo = client.subscribe(inbox.clone()).await.expect("subscribe");
    client.publish(inbox, Bytes::new()).await.expect("publish");
    client.flush().await.expect("flush");
    let came_back = tokio::time::timeout(PATIENCE, echo.next()).await;
    assert!(
        matches!(came_back, Ok(Some(_))),
        "no round trip with the server"
    );
}

/// Sorted header pairs of a message.
pub fn headers_of(m: &async_nats::Message) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = m
        .headers
        .iter()
        .flat_map(|h| {
            h.iter()
                .flat_map(|(n, vs)| vs.iter().map(move |v| (n.to_string(), v.to_string())))
        })
        .collect();
    pairs.sort();
    pairs
}

fn seen_from(m: &async_nats::Message) -> Seen {
    Seen {
        subject: m.subject.to_string(),
        reply: m.reply.as_ref().map(ToString::to_string),
        headers: headers_of(m),
        payload: m.payload.clone(),
        at: Instant::now(),
    }
}

/// A test client and its JetStream context.
pub struct TestClient {
    /// The client.
    pub client: async_nats::Client,
    /// JetStream on it.
    pub js: jetstream::Context,
}

impl TestClient {
    /// Connects to `server`, with its credentials if it requires any.
    pub async fn connect(server: &impl Endpoint) -> Self {
        let setup = server.options();
        let mut options = async_nats::ConnectOptions::new();
        if let Some((user, password)) = &setup.user_password {
            options = options.user_and_password(user.clone(), password.clone());
        }
        if let Some(token) = &setup.token {
            options = options.token(token.clone());
        }
        let client = options
            .connect(server.url())
            .await
            .expect("test client connects");
        let js = jetstream::new(client.clone());
        Self { client, js }
    }

    /// Creates a stream `name` on `subjects` with the given storage.
    pub async fn stream_stored(
        &self,
        name: &str,
        subjects: &[&str],
        storage: jetstream::stream::StorageType,
    ) -> jetstream::stream::Stream {
        self.js
            .create_stream(jetstream::stream::Config {
                name: name.to_owned(),
                subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
                storage,
                ..Default::default()
            })
            .await
            .expect("create stream")
    }

    /// Creates a memory stream `name` on `subjects`.
    pub async fn stream(&self, name: &str, subjects: &[&str]) -> jetstream::stream::Stream {
        self.stream_stored(name, subjects, jetstream::stream::StorageType::Memory)
            .await
    }

    /// Creates a stream `name` on `subjects` stored in files, so that it survives a server
    /// restart.
    pub async fn file_stream(&self, name: &str, subjects: &[&str]) -> jetstream::stream::Stream {
        self.stream_stored(name, subjects, jetstream::stream::StorageType::File)
            .await
    }

    /// Publishes to a stream and waits for the stream's acknowledgement.
    pub async fn js_publish(
        &self,
        subject: &str,
        headers: async_nats::HeaderMap,
        payload: &'static [u8],
    ) {
        self.js
            .publish_with_headers(subject.to_owned(), headers, Bytes::from_static(payload))
            .await
            .expect("publish")
            .await
            .expect("stream ack");
    }

    /// Every message stored in `stream`, in order: (subject, sorted headers, payload). Read
    /// through an ephemeral consumer, so repeated headers arrive as the server stores them.
    pub async fn stored(&self, stream: &str) -> Vec<(String, Vec<(String, String)>, Bytes)> {
        let s = self.js.get_stream(stream).await.expect("stream");
        let n = self.stream_len(stream).await;
        if n == 0 {
            return Vec::new();
        }
        let reader = s
            .create_consumer(jetstream::consumer::pull::Config {
                ack_policy: jetstream::consumer::AckPolicy::None,
                inactive_threshold: Duration::from_secs(5),
                ..Default::default()
            })
            .await
            .expect("ephemeral reader");
        let mut batch = reader
            .fetch()
            .max_messages(usize::try_from(n).expect("small"))
            .messages()
            .await
            .expect("fetch");
        let mut out = Vec::new();
        while let Some(m) = batch.next().await {
            let m = m.expect("stored message");
            out.push((
                m.subject.to_string(),
                headers_of(&m.message),
                m.payload.clone(),
            ));
        }
        out
    }

    /// How many messages `stream` holds.
    pub async fn stream_len(&self, stream: &str) -> u64 {
        let mut s = self.js.get_stream(stream).await.expect("stream");
        s.info().await.expect("stream info").state.messages
    }

    /// The consumer's info.
    pub async fn consumer_info(&self, stream: &str, consumer: &str) -> jetstream::consumer::Info {
        let s = self.js.get_stream(stream).await.expect("stream");
        s.consumer_info(consumer).await.expect("consumer info")
    }
}

/// Builds the examples `names` of this workspace (`cargo build --workspace --example …`, in
/// the running test binary's profile) and gives their paths ([`example_bin`]), so that a test
/// runs the examples of the source it was built from: `cargo test -p ruststream-tests` builds
/// no example, and an example built before may be stale. It runs the cargo that runs the test
/// (`CARGO`, else `cargo` on `PATH`) with the whole workspace's features, as
/// `cargo test --workspace` has them, so that nothing else is rebuilt; once built, a check
/// takes a second or two.
///
/// # Panics
/// When cargo fails, with what it printed.
pub fn build_examples<const N: usize>(names: [&str; N]) -> [std::path::PathBuf; N] {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe
        .parent()
        .and_then(std::path::Path::parent)
        .and_then(std::path::Path::file_name)
        .and_then(std::ffi::OsStr::to_str)
        .expect("the test binary lives in target/<profile>/deps");
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command
        .current_dir(workspace)
        .args(["build", "--quiet", "--workspace"]);
    if profile != "debug" {
        command.args(["--profile", profile]);
    }
    for name in names {
        command.args(["--example", name]);
    }
    let out = command.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "building the examples {names:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    names.map(example_bin)
}

/// The path of an example binary of this workspace (`cargo test --workspace` builds every
/// example before it runs a test): `target/<profile>/examples/<name>`, beside the test
/// binary's own `deps/` folder.
///
/// # Panics
/// When it is not there, saying how to build it: a test fails loudly, it never skips.
pub fn example_bin(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("the test binary lives in target/<profile>/deps");
    let bin = profile_dir.join("examples").join(name);
    assert!(
        bin.is_file(),
        "{} is not built: run `cargo build --workspace --examples` (`cargo test --workspace` \
         builds it)",
        bin.display()
    );
    bin
}
