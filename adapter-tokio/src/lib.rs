//! # ruststream-tokio
//!
//! Runs message handlers over NATS on tokio and settles every delivery as the contract
//! (`docs/settlement.md` in the repository; "rule N" below is its rule N) says:
//! on JetStream with `+ACK`, `-NAK`, `-NAK {"delay": ns}` or `+TERM` on the ack reply
//! subject; on Core NATS with copies carrying `x-ruststream-retry-count`, bounded by
//! `max_attempts`, and dead letters that are confirmed before anything is settled.
//!
//! # How to drive it
//! 1. Declare mounts: [`Mount::core_subject`], [`Mount::core_wildcard`] (with the subject its
//!    copies go to) or [`Mount::jetstream`] (a durable pull consumer), with
//!    [`Mount::max_attempts`] and [`Mount::dead_letter`].
//! 2. Put a handler on each: an async function of the [`Delivery`] (and, if it publishes,
//!    replies or makes requests, of its [`Context`]) with [`App::mount`], or a typed one
//!    with [`App::mount_json`]. It returns an [`Outcome`], a [`Reply`] to a Core request, or a
//!    `Result` of either (an `Err` is settled by the mount's [`ErrorPolicy`]).
//!    [`Mount::backoff`] paces retries, [`Mount::provenance`] marks dead letters with where
//!    they came from and why, and [`App::stream`] declares the streams the app needs.
//! 3. [`App::start`] validates everything (errors name the mount) and starts consuming;
//!    [`App::run`] also waits for SIGINT/SIGTERM and shuts down gracefully.
//!
//! ```no_run
//! use ruststream_tokio::{App, Delivery, Mount, Outcome};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let report = App::new("nats://127.0.0.1:4222")
//!     .mount(Mount::core_subject("greetings", "greet.new").max_attempts(3), |d: Delivery| async move {
//!         println!("attempt {}: {:?}", d.attempt, d.payload);
//!         Outcome::Ack
//!     })
//!     .run() // until SIGINT or SIGTERM
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! The decisions are made by `ruststream-settlement`'s planner; `ruststream-adapter` executes its
//! plans over async-nats, with one `match` per action. This crate gives it its runtime: tokio
//! (`runtime.rs`, the only source file besides this one).
//!
//! # Behaviour worth knowing
//! - `AckError::Unsupported` is logged for a Core delivery whose outcome JetStream would
//!   have answered on the wire: `ack`, `drop`, and `retry` below the limit (before its copy)
//!   or without one; not for `retry_after`, which only arms a copy, nor at the limit. It is
//!   at **debug** level: a healthy Core service acks every message, and a warning per
//!   message would flood its logs. The settlement trace is at debug level under the target
//!   `ruststream::settlement`; a dead letter published and confirmed, and a Core delivery
//!   let go at the limit, are warnings. Every log target starts with `ruststream` (the
//!   runtime's own come from `ruststream_adapter`): `RUST_LOG=ruststream=debug` shows them
//!   all.
//! - A handler that panics is logged at error level and counts as no outcome (rule 13).
//! - Each app runs its NATS connection and its JetStream mount loops on a thread of its own
//!   (`ruststream-nats`), so that a JetStream message is read, handled and acknowledged on
//!   one thread, and its Core mount loops on a second (`ruststream-core`, started with the
//!   first Core mount), so that the connection reads while they handle; everything else is on
//!   your runtime. A handler is first polled on its mount's loop, with your runtime entered
//!   (what it spawns, and its timers, are your runtime's); one still pending moves to a task
//!   on your runtime, where slow handlers run in parallel. Its code up to its first `.await`
//!   that waits runs on its loop's thread, which all of the app's mounts of that kind share,
//!   one handler at a time (on the NATS thread it holds up the app's connection while it
//!   runs): blocking or CPU-heavy work belongs in `tokio::task::spawn_blocking`
//!   (`block_in_place` panics on those threads, and the handler counts as panicked). The end
//!   of a shutdown stops both threads; a handler still running on a loop then is dropped with
//!   it, reported abandoned.
//! - A JetStream mount pulls as many messages as it has free handler slots, plus a prefetch
//!   sized from its handling rate so that a prefetched message waits a small share of
//!   `ack_wait`, renewed with `+WPI` while it waits ([`Mount::concurrency`]).
//! - Delayed Core copies wait in one in-process queue driven by one timer. A shutdown
//!   publishes those that fall due within its grace period; those still waiting when it ends
//!   are lost and reported.

#![warn(missing_docs)]

mod runtime;

pub use runtime::Runtime;

/// A set of mounts to run against one NATS connection, on this crate's runtime.
pub type App = ruststream_adapter::App<Runtime>;

/// A started app, on this crate's runtime.
pub type Running = ruststream_adapter::Running<Runtime>;

/// Pauses and resumes a running app's JetStream consumers from anywhere
/// (`Running::pause_handle`), on this crate's runtime.
pub type PauseHandle = ruststream_adapter::PauseHandle<Runtime>;

ruststream_adapter::reexport_api!();

/// The README's Rust examples, compiled as doctests so that they cannot drift from the API.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
