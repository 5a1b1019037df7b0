//! The conformance suite on the tokio adapter.

#![allow(clippy::unwrap_used, missing_docs)]

use ruststream_tokio as adapter;

/// Drives a scenario on a fresh multi-threaded tokio runtime.
fn run<F: std::future::Future<Output = ()>>(scenario: F) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(scenario);
}

/// Each scenario's server: a real nats-server.
use ruststream_tests::NatsServer;

/// Every scenario runs here, those that need a real server's process included.
macro_rules! on_real_server {
    ($($item:item)*) => { $($item)* };
}

#[path = "../scenarios/mod.rs"]
mod scenarios;
