//! The second floor: leaf support that the floors above share, each file about one thing and
//! importing nothing above [`crate::runtime`]: the delivered message as the adapter keeps it,
//! metrics and a service endpoint's counts, trace context, server URLs, the stop signal a loop
//! reads, the pause between the runtime's own retries, the JetStream API requests it makes of
//! its own, telling a dead client from a live one, names kept once per process, and the text
//! of a caught panic.

pub(crate) mod backoff;
pub mod deliberate;
pub(crate) mod endpoint_counts;
pub(crate) mod incoming;
pub(crate) mod js_api;
pub(crate) mod liveness;
pub mod metrics;
pub(crate) mod names;
pub(crate) mod panics;
pub(crate) mod servers;
pub(crate) mod stop;
#[cfg(feature = "otel")]
pub(crate) mod trace;
