//! The built-in ops endpoint (feature `ops`): `/metrics`, `/healthz`, `/readyz` and, when
//! asked, `/asyncapi.json`, over HTTP on an address the app is given ([`OpsEndpoint`]).
//!
//! It runs on a thread of its own (tiny_http, blocking), so it is the same on every runtime
//! and never waits on the app's executor: a probe is answered even while every handler slot is
//! busy. Each request is answered on a short-lived thread of its own (at most
//! [`MAX_ANSWERING`] at once), so a slow or stuck client holds one of them, not the endpoint.
//! It stops when the app's [`Running`](crate::Running) is dropped or shut down. It is meant
//! for probes and scrapers on a network you trust: it has no authentication and no limits
//! beyond tiny_http's own (bind it to an internal address).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::startup::StartError;
use crate::api::health::{ConnectionState, Health, HealthWatch};

/// The buckets of the handler-duration histogram `messaging.process.duration`, in seconds:
/// 0.5 ms to 10 s. A histogram with buckets (the exporter's default is a summary) can be
/// aggregated over instances, which the Grafana dashboard's percentiles need.
pub const DURATION_BUCKETS: [f64; 13] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// Where and what the app's ops endpoint serves; given to [`App::ops`](crate::App::ops).
///
/// | path | answer |
/// |---|---|
/// | `/metrics` | 200, Prometheus text format 0.0.4: every metric of [`metrics`](crate::metrics), `messaging.process.duration` as a histogram of [`DURATION_BUCKETS`] |
/// | `/healthz` | 200 while the app is live ([`Health::live`]), 503 otherwise; the health as JSON |
/// | `/readyz` | 200 while it is ready ([`Health::ready`]), 503 otherwise; the health as JSON |
/// | `/asyncapi.json` | with [`asyncapi`](Self::asyncapi): the app's AsyncAPI 3.0 document |
/// | anything else | 404, naming the paths served |
///
/// The health JSON: `{"ready":bool,"live":bool,"connection":"connecting"|"connected"|"down"|"closed","mounts":{"<mount>":"<state>",…},"pinned":["<mount>",…],"paused":["<mount>",…],"failure":string|null}`;
/// `pinned` names the mounts whose pinned priority group this instance is the active one of
/// ([`MountHealth::pinned`](crate::MountHealth::pinned));
/// `paused` names the mounts whose JetStream consumer is paused ([`MountHealth::paused_until`](crate::MountHealth::paused_until)),
/// which are still ready.
///
/// **Metrics.** The endpoint installs a Prometheus recorder (metrics-exporter-prometheus) as
/// the process's global `metrics` recorder when the first app with an ops endpoint starts; a
/// second app in the same process shares it. A process that installed a recorder of its own
/// before cannot have `/metrics` served here: start-up says so
/// ([`StartError::Ops`](crate::StartError::Ops)); serve your recorder yourself and leave the
/// ops endpoint out, or install none.
#[derive(Debug, Clone)]
pub struct OpsEndpoint {
    addr: String,
    asyncapi: Option<(String, String)>,
}

impl OpsEndpoint {
    /// An endpoint on `addr`, `host:port` (`0.0.0.0:9464` for every interface; port 0 for one
    /// the system chooses, read back with [`Running::ops_addr`](crate::Running::ops_addr)).
    /// It is bound when the app starts; an address that cannot be bound is a
    /// [`StartError::Ops`](crate::StartError::Ops).
    pub fn bind(addr: &str) -> Self {
        Self {
            addr: addr.to_owned(),
            asyncapi: None,
        }
    }

    /// Also serves the app's AsyncAPI document ([`App::asyncapi`](crate::App::asyncapi)
    /// with `title` and `version`) at `/asyncapi.json`.
    #[must_use]
    pub fn asyncapi(mut self, title: &str, version: &str) -> Self {
        self.asyncapi = Some((title.to_owned(), version.to_owned()));
        self
    }

    /// The AsyncAPI title and version asked for, if any.
    pub(crate) fn asyncapi_info(&self) -> Option<(&str, &str)> {
        self.asyncapi
            .as_ref()
            .map(|(title, version)| (title.as_str(), version.as_str()))
    }

    /// Installs (or takes) the Prometheus recorder and serves the endpoint on a thread of its
    /// own, with the app's `health` and its AsyncAPI `document` if asked for.
    ///
    /// # Errors
    /// [`StartError::Ops`] when another metrics recorder is installed, or the address cannot
    /// be bound.
    pub(crate) fn serve(
        &self,
        health: HealthWatch,
        document: Option<String>,
    ) -> Result<OpsServer, StartError> {
        let metrics = prometheus()?;
        let server = tiny_http::Server::http(&self.addr)
            .map_err(|e| StartError::Ops(format!("cannot listen on {}: {e}", self.addr)))?;
        let addr = server.server_addr().to_ip().ok_or_else(|| {
            StartError::Ops(format!("{} is not an IP address and port", self.addr))
        })?;
        let server = Arc::new(server);
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Answers {
            metrics,
            health,
            document: document.map(Arc::from),
            answering: Arc::default(),
        };
        let (serving, stopping) = (server.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("ruststream-ops".to_owned())
            .spawn(move || answers.serve(&serving, &stopping))
            .map_err(|e| StartError::Ops(format!("cannot start its thread: {e}")))?;
        tracing::info!(%addr, "ops endpoint serving /metrics, /healthz, /readyz");
        Ok(OpsServer {
            server: Some(server),
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

/// The ops endpoint of a running app: it stops serving when dropped.
pub(crate) struct OpsServer {
    /// The server, dropped (its listening socket closed) by [`Drop`].
    server: Option<Arc<tiny_http::Server>>,
    addr: SocketAddr,
    /// Tells the endpoint's thread to end.
    stop: Arc<AtomicBool>,
    /// The thread that takes the requests, waited for on drop.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OpsServer {
    /// The address it listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// How long dropping an [`OpsServer`] waits for its thread to end, then for its address to
/// refuse connections: what a probe or scrape that is being answered takes, at most. A thread
/// that does not end by then is left to end on its own.
const STOP_PATIENCE: Duration = Duration::from_secs(2);

impl Drop for OpsServer {
    /// Ends the endpoint: its thread takes no more requests, the server is dropped (tiny_http
    /// then closes its listening socket), and this waits, at most [`STOP_PATIENCE`] each,
    /// for the thread to end and for the address to refuse connections, so that an app
    /// started again at once can bind it. Requests being answered finish on their own
    /// threads.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let Some(server) = self.server.take() else {
            return;
        };
        server.unblock();
        let deadline = Instant::now() + STOP_PATIENCE;
        if let Some(thread) = self.thread.take() {
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            match thread.is_finished() {
                true => {
                    if thread.join().is_err() {
                        tracing::warn!("the ops endpoint's thread panicked");
                    }
                }
                false => tracing::warn!(addr = %self.addr,
                    "the ops endpoint's thread did not end in time: left to end on its own"),
            }
        }
        drop(server);
        // tiny_http closes the socket on a thread of its own: wait until nothing listens.
        let local = match self.addr.ip().is_unspecified() {
            true => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), self.addr.port()),
            false => self.addr,
        };
        let deadline = Instant::now() + STOP_PATIENCE;
        while Instant::now() < deadline
            && std::net::TcpStream::connect_timeout(&local, Duration::from_millis(50)).is_ok()
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The process's Prometheus recorder: installed by the first ops endpoint, shared by later
/// ones; an error when the process installed a recorder of its own first.
fn prometheus() -> Result<PrometheusHandle, StartError> {
    static INSTALLED: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("messaging.process.duration".to_owned()),
                    &DURATION_BUCKETS,
                )
                .map_err(|e| e.to_string())?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).map_err(|_| {
                "the process has a metrics recorder of its own installed already, and /metrics can only be served from the endpoint's Prometheus recorder: serve your recorder yourself and leave the ops endpoint out, or install none".to_owned()
            })?;
            Ok(handle)
        })
        .clone()
        .map_err(StartError::Ops)
}

/// How often the Prometheus recorder's upkeep runs (it drains histogram samples; without it
/// they pile up while nobody scrapes `/metrics`): the exporter's own default.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The most requests answered at once, each on a thread of its own: a client that sends a
/// request slowly, or does not read its answer, holds one thread, not the endpoint. Past it a
/// request is answered 503 on the endpoint's thread.
const MAX_ANSWERING: usize = 32;

/// What the endpoint answers with.
#[derive(Clone)]
struct Answers {
    metrics: PrometheusHandle,
    health: HealthWatch,
    document: Option<Arc<str>>,
    /// How many requests are being answered.
    answering: Arc<AtomicUsize>,
}

impl Answers {
    /// Takes requests until `stop`, each answered on a thread of its own, and runs the
    /// recorder's upkeep every [`UPKEEP_EVERY`].
    fn serve(&self, server: &tiny_http::Server, stop: &AtomicBool) {
        let mut upkeep = Instant::now();
        while !stop.load(Ordering::Acquire) {
            match server.recv_timeout(UPKEEP_EVERY) {
                Ok(Some(request)) => self.dispatch(request),
                Ok(None) => {}
                Err(e) => tracing::debug!(error = %e, "ops endpoint: a connection failed"),
            }
            if upkeep.elapsed() >= UPKEEP_EVERY {
                self.metrics.run_upkeep();
                upkeep = Instant::now();
            }
        }
    }

    /// Answers `request` on a thread of its own, or 503 here past [`MAX_ANSWERING`].
    fn dispatch(&self, request: tiny_http::Request) {
        if self.answering.fetch_add(1, Ordering::AcqRel) >= MAX_ANSWERING {
            self.answering.fetch_sub(1, Ordering::AcqRel);
            send(
                request,
                503,
                "text/plain",
                "busy: too many requests at once\n".to_owned(),
            );
            return;
        }
        let answers = self.clone();
        let spawned = std::thread::Builder::new()
            .name("ruststream-ops-answer".to_owned())
            .stack_size(256 * 1024)
            .spawn(move || {
                answers.answer(request);
                answers.answering.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            self.answering.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(error = %e, "ops endpoint: no thread to answer a request");
        }
    }

    /// Answers one request: `GET` (or `HEAD`) of a path served, 404 for another path, 405 for
    /// another method.
    fn answer(&self, request: tiny_http::Request) {
        if !matches!(
            request.method(),
            tiny_http::Method::Get | tiny_http::Method::Head
        ) {
            return send(request, 405, "text/plain", "only GET and HEAD\n".to_owned());
        }
        let path = request.url().split('?').next().unwrap_or_default();
        let (status, content_type, body) = match (path, &self.document) {
            ("/metrics", _) => {
                self.metrics.run_upkeep();
                (200, "text/plain; version=0.0.4", self.metrics.render())
            }
            ("/healthz", _) => probe(&self.health.get(), Health::live),
            ("/readyz", _) => probe(&self.health.get(), Health::ready),
            ("/asyncapi.json", Some(document)) => (200, "application/json", document.to_string()),
            _ => (404, "text/plain", not_found(self.document.is_some())),
        };
        send(request, status, content_type, body);
    }
}

/// Sends the answer to `request`.
fn send(request: tiny_http::Request, status: u16, content_type: &str, body: String) {
    let response = tiny_http::Response::from_string(body).with_status_code(status);
    let response = match tiny_http::Header::from_bytes("Content-Type", content_type) {
        Ok(header) => response.with_header(header),
        Err(()) => response,
    };
    if let Err(e) = request.respond(response) {
        tracing::debug!(error = %e, "ops endpoint: the response was not sent");
    }
}

/// The 404 body: the paths served.
fn not_found(asyncapi: bool) -> String {
    match asyncapi {
        true => "not found: /metrics, /healthz, /readyz, /asyncapi.json\n".to_owned(),
        false => "not found: /metrics, /healthz, /readyz\n".to_owned(),
    }
}

/// A probe's answer: 200 when `check` holds, 503 when not, with the health as JSON.
fn probe(health: &Health, check: fn(&Health) -> bool) -> (u16, &'static str, String) {
    let status = if check(health) { 200 } else { 503 };
    (status, "application/json", health_json(health))
}

/// The health as JSON (see [`OpsEndpoint`]).
fn health_json(health: &Health) -> String {
    let connection = match health.connection {
        ConnectionState::Connecting => "connecting",
        ConnectionState::Connected => "connected",
        ConnectionState::Down { .. } => "down",
        ConnectionState::Closed => "closed",
    };
    let mounts: serde_json::Map<String, serde_json::Value> = health
        .mounts
        .iter()
        .map(|m| (m.mount.clone(), m.state.as_str().into()))
        .collect();
    let pinned: Vec<&str> = health
        .mounts
        .iter()
        .filter(|m| m.pinned)
        .map(|m| m.mount.as_str())
        .collect();
    let paused: Vec<&str> = health
        .mounts
        .iter()
        .filter(|m| m.paused())
        .map(|m| m.mount.as_str())
        .collect();
    serde_json::json!({
        "ready": health.ready(),
        "live": health.live(),
        "connection": connection,
        "mounts": mounts,
        "pinned": pinned,
        "paused": paused,
        "failure": health.failure,
    })
    .to_string()
}
