//! Trace context through headers (cargo feature `otel`): a delivery's W3C `traceparent` and
//! `tracestate` become the parent of its `tracing` span, and what a handler publishes through
//! its [`Context`](crate::Context) carries the current context.
//!
//! A Core copy, a JetStream redelivery and a dead letter keep the delivery's headers (rules 4
//! and 9), so every attempt of a message, and its dead letter, belong to its trace. The
//! headers are read case-insensitively (`traceparent`, `Traceparent`, `TRACEPARENT`):
//! async-nats' own lookup is case-sensitive, and publishers differ. Spans only carry an
//! OpenTelemetry context where the application's `tracing` subscriber has a
//! `tracing-opentelemetry` layer; without one, nothing is parented or injected.

use async_nats::HeaderMap;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// `traceparent`, the W3C Trace Context header.
const TRACEPARENT: &str = "traceparent";

/// Whether the header `name` is `key`, whatever the case.
fn is(name: &async_nats::HeaderName, key: &str) -> bool {
    AsRef::<str>::as_ref(name).eq_ignore_ascii_case(key)
}

struct Extract<'a>(&'a HeaderMap);

impl Extractor for Extract<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(name, _)| is(name, key))
            .and_then(|(_, values)| values.first())
            .map(|v| v.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .iter()
            .map(|(name, _)| AsRef::<str>::as_ref(name))
            .collect()
    }
}

struct Inject<'a>(&'a mut HeaderMap);

impl Injector for Inject<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value.as_str());
    }
}

/// Makes the delivery's trace context (its `traceparent`, and `tracestate`) the parent of
/// `span`. A delivery without one keeps the span as it is.
pub(crate) fn set_parent(span: &tracing::Span, headers: Option<&HeaderMap>) {
    let Some(headers) = headers else {
        return;
    };
    if !headers.iter().any(|(name, _)| is(name, TRACEPARENT)) {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&Extract(headers));
    if let Err(e) = span.set_parent(parent) {
        tracing::debug!(error = %e, "the delivery's trace context was not taken");
    }
}

/// Headers carrying the current span's trace context, added to `headers` (`None`: none yet),
/// or `headers` as they were when there is no context to carry.
pub(crate) fn inject(headers: Option<HeaderMap>) -> Option<HeaderMap> {
    let context = tracing::Span::current().context();
    let mut carried = HeaderMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut Inject(&mut carried));
    if carried.is_empty() {
        return headers;
    }
    let mut headers = headers.unwrap_or_default();
    for (name, values) in carried.iter() {
        for value in values {
            headers.insert(name.clone(), value.clone());
        }
    }
    Some(headers)
}
