//! The ruststream demo on smol: three mounts, a scripted batch of orders, one line per delivery, and a
//! summary checked against what the server reports.
//!
//! ```sh
//! cargo run -p ruststream-smol --example smol_demo
//! ```
//!
//! Uses `NATS_URL` if set (the server needs JetStream); otherwise starts a private nats-server
//! (from `NATS_SERVER_BIN` or `PATH`) on a free port with a temporary store, and stops it at
//! the end. Exits 0 when the summary agrees with the server, 1 otherwise.
//!
//! Mounts:
//! - `orders-core`: the Core subject `demo.core.orders`, `max_attempts` 3;
//! - `orders-region`: the Core wildcard `demo.region.*`, copies to `demo.region.retry`,
//!   `max_attempts` 3;
//! - `orders-js`: the JetStream consumer `demo-worker` on stream `DEMO_ORDERS`,
//!   `max_attempts` 3, dead letters to `demo.dlq.orders`, stored by stream `DEMO_DLQ`.
//!
//! Each order's `kind` decides its handler's outcome: `ok` acks; `flaky` retries once, then
//! acks; `poison` always retries; `drop` drops; `slow` asks `retry_after(200 ms)` once, then
//! acks.

#![allow(clippy::print_stdout, clippy::unwrap_used, missing_docs)]

use ruststream_smol as adapter;

#[path = "../../tests/src/server.rs"]
#[allow(dead_code, unreachable_pub)]
mod server;

#[path = "../../adapter-tokio/examples/common/demo.rs"]
mod demo;

#[path = "../../adapter-tokio/examples/common/logging.rs"]
mod logging;

fn main() -> std::process::ExitCode {
    logging::init();
    // The demo's own client (async-nats) needs a Tokio context: async-compat gives it one,
    // as the app does for its own tasks.
    logging::exit_code(smol::block_on(async_compat::Compat::new(demo::demo())))
}
