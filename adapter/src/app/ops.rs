//! The built-in ops endpoint (feature `ops`): `/metrics`, `/healthz`, `/readyz` and, when
//! asked, `/asyncapi.json`, over HTTP on an address the app is given ([`OpsEndpoint`]).
//!
//! It runs on a thread of its own (tiny_http, blocking), so it is the same on every runtime
//! and never waits on the app's executor: a probe is answered even while every handler slot is
//! busy. It stops when the app's [`Running`](crate::Running) is dropped or shut down.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

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
/// The health JSON: `{"ready":bool,"live":bool,"connection":"connecting"|"connected"|"down"|"closed","mounts":{"<mount>":"<state>",…},"failure":string|null}`.
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
        let serving = server.clone();
        let thread = std::thread::Builder::new()
            .name("ruststream-ops".to_owned())
            .spawn(move || answer_all(&serving, &metrics, &health, document.as_deref()))
            .map_err(|e| StartError::Ops(format!("cannot start its thread: {e}")))?;
        tracing::info!(%addr, "ops endpoint serving /metrics, /healthz, /readyz");
        Ok(OpsServer {
            server,
            addr,
            thread: Some(thread),
        })
    }
}

/// The ops endpoint of a running app: it stops serving when dropped.
pub(crate) struct OpsServer {
    server: Arc<tiny_http::Server>,
    addr: SocketAddr,
    /// The thread that answers, joined on drop.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OpsServer {
    /// The address it listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for OpsServer {
    /// Ends `incoming_requests` on the endpoint's thread and waits for it (at most the answer
    /// it is writing), so that the listening socket is closed once this returns: the server
    /// is dropped here, its last holder.
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::warn!("the ops endpoint's thread panicked");
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

/// Answers every request until the server is unblocked.
fn answer_all(
    server: &tiny_http::Server,
    metrics: &PrometheusHandle,
    health: &HealthWatch,
    document: Option<&str>,
) {
    for request in server.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or_default();
        let (status, content_type, body) = match path {
            "/metrics" => {
                metrics.run_upkeep();
                (200, "text/plain; version=0.0.4", metrics.render())
            }
            "/healthz" => probe(&health.get(), Health::live),
            "/readyz" => probe(&health.get(), Health::ready),
            "/asyncapi.json" if document.is_some() => (
                200,
                "application/json",
                document.unwrap_or_default().to_owned(),
            ),
            _ => (404, "text/plain", not_found(document.is_some())),
        };
        let response = tiny_http::Response::from_string(body).with_status_code(status);
        let response = match tiny_http::Header::from_bytes("Content-Type", content_type) {
            Ok(header) => response.with_header(header),
            Err(()) => response,
        };
        if let Err(e) = request.respond(response) {
            tracing::debug!(error = %e, "ops endpoint: the response was not sent");
        }
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
    serde_json::json!({
        "ready": health.ready(),
        "live": health.live(),
        "connection": connection,
        "mounts": mounts,
        "failure": health.failure,
    })
    .to_string()
}
