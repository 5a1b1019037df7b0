//! The conformance scenarios, written once and compiled once per adapter: `tests/tokio.rs` and
//! `tests/smol.rs` each name the crate under test `adapter` and say how to `run` a future on
//! its runtime, then declare this module. Test names follow SETTLEMENT.md (see
//! `docs/settlement.md`): `row_NN_*` for Part C rows, `rule_NN_*` for Part B.
//!
//! Every test starts its own nats-server (a free port, a temporary store) and its own app.
//! Assertions wait for eventual outcomes with generous deadlines; delays are in milliseconds.

mod common;
mod connection;
mod context;
mod core_nats;
mod health;
mod jetstream;
mod leases;
mod losses;
mod metrics;
mod provenance;
mod rules;
mod servers;
mod shutdown;
mod startup;
mod streams;
mod trace;
