//! The operator's endpoints of the examples, over HTTP (tiny_http, on a thread of its own, so
//! that it runs beside any async runtime): `/metrics` (Prometheus text, from
//! metrics-exporter-prometheus), `/healthz` (200 while the app is live, 503 otherwise) and
//! `/readyz` (200 while it is ready, 503 otherwise), each with the health as JSON, and
//! `/asyncapi.json` (the app's AsyncAPI document, `App::asyncapi`).

use std::net::SocketAddr;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use ruststream_tokio::{Health, HealthWatch};

/// The buckets of the handler-duration histogram, in seconds: 0.5 ms to 10 s, so that
/// `histogram_quantile` (the dashboard's percentiles) can be taken over any set of instances.
const DURATION_BUCKETS: [f64; 13] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// Installs a Prometheus recorder as the global metrics recorder, with
/// `messaging.process.duration` as a histogram of [`DURATION_BUCKETS`] (the exporter's default
/// is a summary, which cannot be aggregated). Call it before the app starts: its mounts
/// register their metrics as they start.
///
/// # Errors
/// When another global recorder is installed already.
pub(crate) fn install_prometheus() -> Result<PrometheusHandle, Box<dyn std::error::Error>> {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("messaging.process.duration".to_owned()),
            &DURATION_BUCKETS,
        )?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| format!("metrics recorder: {e}"))?;
    Ok(handle)
}

/// Serves `/metrics`, `/healthz`, `/readyz` and `/asyncapi.json` (the document `asyncapi`)
/// on `addr` (port 0: one the system chooses) on a thread of its own, for the life of the
/// process; gives the address it listens on.
///
/// # Errors
/// When `addr` cannot be bound.
pub(crate) fn serve(
    addr: &str,
    metrics: PrometheusHandle,
    health: HealthWatch,
    asyncapi: serde_json::Value,
) -> Result<SocketAddr, Box<dyn std::error::Error>> {
    let asyncapi = asyncapi.to_string();
    let server =
        tiny_http::Server::http(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or("the metrics address is not an IP address")?;
    std::thread::spawn(move || {
        for request in server.incoming_requests() {
            let (status, content_type, body) = match request.url() {
                "/metrics" => {
                    metrics.run_upkeep();
                    (200, "text/plain; version=0.0.4", metrics.render())
                }
                "/healthz" => probe(&health.get(), Health::live),
                "/readyz" => probe(&health.get(), Health::ready),
                "/asyncapi.json" => (200, "application/json", asyncapi.clone()),
                _ => (
                    404,
                    "text/plain",
                    "not found: /metrics, /healthz, /readyz, /asyncapi.json\n".to_owned(),
                ),
            };
            let header = tiny_http::Header::from_bytes("Content-Type", content_type)
                .expect("a valid header");
            let response = tiny_http::Response::from_string(body)
                .with_status_code(status)
                .with_header(header);
            if let Err(e) = request.respond(response) {
                tracing::debug!(error = %e, "ops endpoint: the response was not sent");
            }
        }
    });
    Ok(bound)
}

/// A probe's answer: 200 when `check` holds, 503 when not, with the health as JSON.
fn probe(health: &Health, check: fn(&Health) -> bool) -> (u16, &'static str, String) {
    let status = if check(health) { 200 } else { 503 };
    (status, "application/json", health_json(health))
}

/// The health as JSON: `{"ready":…,"live":…,"connection":"…","mounts":{"name":"state",…},"failure":…}`.
pub(crate) fn health_json(health: &Health) -> String {
    let connection = match health.connection {
        ruststream_tokio::ConnectionState::Connecting => "connecting",
        ruststream_tokio::ConnectionState::Connected => "connected",
        ruststream_tokio::ConnectionState::Down { .. } => "down",
        ruststream_tokio::ConnectionState::Closed => "closed",
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

/// `GET path` on `addr`: the status code and the body (a plain HTTP/1.0 request, enough for
/// the demo to read its own endpoints as a scraper would).
///
/// # Errors
/// When the endpoint cannot be reached or answers something that is not HTTP.
pub(crate) fn get(
    addr: SocketAddr,
    path: &str,
) -> Result<(u16, String), Box<dyn std::error::Error>> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or("an HTTP response without a body")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("an HTTP response without a status")?;
    Ok((status, body.to_owned()))
}

/// The value of the counter `name` with every label of `labels` in Prometheus text `text`
/// (0 when there is none).
pub(crate) fn scraped(text: &str, name: &str, labels: &[(&str, &str)]) -> u64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .filter(|(series, _)| {
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            metric == name
                && labels
                    .iter()
                    .all(|(l, v)| rest.contains(&format!("{l}=\"{v}\"")))
        })
        .filter_map(|(_, value)| value.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}
