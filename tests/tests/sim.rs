//! The conformance suite on the simulator: the same scenarios as `tokio.rs` and `smol.rs`, on
//! `ruststream-sim`'s app (the adapter on its virtual-time runtime) and its model of NATS and
//! JetStream, served on loopback. Every scenario's server is a [`SimServer`]; virtual time
//! makes the suite's waits free.
//!
//! Scenarios inside `on_real_server!` are not compiled here: each says why at its wrapper (a
//! subject that is not UTF-8, which the model's text subjects cannot hold; the app's own NATS
//! thread, which the simulator's runtime does not have). A header block async-nats cannot
//! read is played here: the model forwards it byte for byte ([`raw_publish`]).

#![allow(clippy::unwrap_used, missing_docs)]

use ruststream_sim as adapter;

/// Each scenario's server: the simulator's model.
use ruststream_tests::sim::SimServer as NatsServer;

/// A publish of bytes async-nats refuses to build: into the model, which forwards it as it is.
use ruststream_tests::sim::raw_publish;

/// Drives a scenario on the simulator's runtime: current-thread tokio, its clock paused.
fn run<F: std::future::Future<Output = ()>>(scenario: F) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread tokio runtime")
        .block_on(scenario);
}

/// Scenarios the model cannot play (each says why): not on the simulator.
macro_rules! on_real_server {
    ($($item:item)*) => {};
}

#[path = "../scenarios/mod.rs"]
mod scenarios;
