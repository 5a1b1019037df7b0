//! The conformance suite on the smol adapter: the same scenarios as `tokio.rs`.

#![allow(clippy::unwrap_used, missing_docs)]

use ruststream_smol as adapter;

/// Drives a scenario on smol. The scenario's own test client (async-nats, Tokio timers) runs
/// inside async-compat's Tokio context; the app's tasks run on smol's executor.
fn run<F: std::future::Future<Output = ()>>(scenario: F) {
    smol::block_on(async_compat::Compat::new(scenario));
}

include!("../scenarios.rs");
