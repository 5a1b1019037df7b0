//! The conformance scenarios, written once and compiled once per instantiation:
//! `tests/tests/tokio.rs` (the tokio adapter on a real nats-server), `tests/tests/smol.rs` (the
//! smol adapter on a real nats-server) and `tests/tests/sim.rs` (`ruststream-sim`'s app on the
//! simulator's model). Test names follow SETTLEMENT.md (see `docs/settlement.md`): `row_NN_*`
//! for Part C rows, `rule_NN_*` for Part B.
//!
//! Every test starts its own server (a nats-server on a free port with a temporary store, or on
//! the simulator a model of its own) and its own app. Assertions wait for eventual outcomes
//! with generous deadlines; delays are in milliseconds.
//!
//! # What an instantiation provides
//!
//! An instantiation is a test target of this crate (a file in `tests/tests/`) that defines four
//! names at its root and then declares this module:
//! `#[path = "../scenarios/mod.rs"] mod scenarios;`. The scenarios reach the first three as
//! `crate::adapter`, `crate::run` and `crate::NatsServer` (through `common.rs`, which every
//! scenario file imports with `use super::common::*`), and the macro by textual scope: it MUST
//! be defined above the `mod scenarios` line.
//!
//! - `adapter`: the crate under test, as a path (`use ruststream_tokio as adapter;`). It MUST
//!   have the public API every runtime crate of ruststream has: what
//!   `ruststream_adapter::reexport_api!()` re-exports (`Mount`, `Delivery`, `Outcome`,
//!   `StartError`, `Backoff`, `async_nats`, `connect_url`, ...) and its own `App` and
//!   `Running`. The crate MUST be a dev-dependency of `tests/Cargo.toml`, and its adapter
//!   built with the `otel` feature (`trace.rs` reads a handler's trace context) and the
//!   `msgpack` and `cbor` features (`codecs.rs` uses `MessagePack` and `Cbor`): the tokio and
//!   smol crates turn them on there, and the simulator's adapter has `otel` through them, as the
//!   workspace builds one `ruststream-adapter` for all three.
//! - `run`: `fn run<F: std::future::Future<Output = ()>>(scenario: F)`. It drives one
//!   scenario's future to its end on the adapter's runtime, blocking the calling thread (the
//!   test's), and returns when the future completes; a panic in it fails the test. It MUST take
//!   futures that are neither `Send` nor `'static`, and MUST run them inside a Tokio context
//!   with timers enabled: the scenarios' own clients are async-nats, and their clock is
//!   `tokio::time::Instant` (the system's on tokio and smol, the paused virtual clock on the
//!   simulator). Each `#[test]` calls it once.
//! - `NatsServer`: the type of each scenario's server, a new one per test, owned by the test:
//!   `ruststream_tests::NatsServer` (a nats-server process), `ruststream_tests::sim::SimServer`
//!   (the simulator), or another type with the same items:
//!   - `start()`, `start_with(ServerOptions)` and `start_without_jetstream()`, each returning
//!     `Self`; the scenarios call them inside `run`'s future;
//!   - `url()` and `url_with_credentials()`, each `-> String` (`nats://host:port`, the second
//!     with the user and password or the token that `ServerOptions` required);
//!   - `version() -> (u32, u32, u32)`: the nats-server version it is, or behaves as;
//!   - `stop(&mut self)`: down, as a killed process, and staying down; `restart(&mut self)`:
//!     down and up again at the same URL, its streams and consumers kept (a server on its file
//!     store), so that every client is disconnected and reconnects;
//!   - an impl of `ruststream_tests::Endpoint`, which `TestClient::connect` takes.
//! - `on_real_server!`: a `macro_rules!` macro over items, `($($item:item)*)`. It wraps the
//!   scenarios (and their `use` lines) that need a real nats-server's process, each wrapper
//!   saying above it why. It MUST expand to the items where `NatsServer` is a real server
//!   (`=> { $($item)* }`), and to nothing where it is not (`=> {}`).
//!
//! The three instantiations also allow `clippy::unwrap_used` and `missing_docs` at their root,
//! as a new one should (the scenarios unwrap). Tests of one instantiation only (tokio's
//! threads, smol's `Compat`) go in its own file, below the `mod scenarios` line.
//!
//! The tokio instantiation, in short:
//!
//! ```ignore
//! //! The conformance suite on the tokio adapter.
//!
//! #![allow(clippy::unwrap_used, missing_docs)]
//!
//! use ruststream_tokio as adapter;
//!
//! /// Drives a scenario on a fresh multi-threaded tokio runtime.
//! fn run<F: std::future::Future<Output = ()>>(scenario: F) {
//!     tokio::runtime::Builder::new_multi_thread()
//!         .worker_threads(2)
//!         .enable_all()
//!         .build()
//!         .expect("a tokio runtime")
//!         .block_on(scenario);
//! }
//!
//! /// Each scenario's server: a real nats-server.
//! use ruststream_tests::NatsServer;
//!
//! /// Every scenario runs here, those that need a real server's process included.
//! macro_rules! on_real_server {
//!     ($($item:item)*) => { $($item)* };
//! }
//!
//! #[path = "../scenarios/mod.rs"]
//! mod scenarios;
//! ```
//!
//! The simulator's differs where it must: `use ruststream_sim as adapter;`,
//! `use ruststream_tests::sim::SimServer as NatsServer;`, a `run` on a current-thread tokio
//! runtime built with `.start_paused(true)`, and an `on_real_server!` that expands to nothing.

mod batches;
mod codecs;
pub(crate) mod common;
mod connection;
mod context;
mod core_nats;
mod health;
mod jetstream;
pub(crate) mod keys;
mod leases;
mod losses;
mod metrics;
mod placement;
mod priority;
mod provenance;
mod rules;
mod servers;
mod services;
mod shutdown;
mod startup;
mod streams;
mod trace;
