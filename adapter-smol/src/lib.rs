//! # ruststream-smol
//!
//! Runs message handlers over NATS on smol and settles every delivery as the contract
//! (`docs/settlement.md` in the repository; "rule N" below is its rule N) says:
//! on JetStream with `+ACK`, `-NAK`, `-NAK {"delay": ns}` or `+TERM` on the ack reply
//! subject; on Core NATS with copies carrying `x-ruststream-retry-count`, bounded by
//! `max_attempts`, and dead letters that are confirmed before anything is settled.
//!
//! The public API is `ruststream-tokio`'s, item for item, plus [`Compat`]: switching runtime
//! means changing the crate name and the executor, and wrapping the async-nats calls your own
//! code makes outside handlers in [`Compat`] (see below). Both crates give `ruststream-adapter` (the
//! execution code, generic over its `Runtime` trait) their runtime; this crate's is smol
//! (`runtime.rs`: spawn, timers, clock, signals, and the Tokio reactor), the only source file
//! besides this one.
//!
//! # The Tokio reactor, and where things run
//! async-nats runs its connection on Tokio, and some of its JetStream calls (request timeouts,
//! publish acknowledgements, pull requests) need a Tokio timer. Each app provides one
//! explicitly: [`App::start`] starts a small current-thread Tokio runtime on a thread of the
//! app's own (`ruststream-nats`, a [`NatsThread`](ruststream_adapter::NatsThread)), and the
//! app owns its lifetime: the end of [`Running::shutdown`] stops it. Every future that touches
//! async-nats (start and shutdown, each mount loop, each delivery and its handler) is polled
//! inside that runtime's context, so a handler never panics for lack of a Tokio context, and
//! may use Tokio types itself.
//!
//! - **The mount loops** run as tasks of a Tokio runtime too: a JetStream mount's on that
//!   thread, beside the connection, so that its message and its ack never cross threads; a
//!   Core mount's on a second thread of the app's own (`ruststream-core`, started with the
//!   first Core mount), so that the connection reads while it handles. A handler is first
//!   polled on its mount's loop; a delivery whose handler returns at once is planned and
//!   settled there too.
//! - **A delivery that waits** (a handler still pending at its first poll, or a dead letter
//!   waiting for its confirmation) moves to smol's global executor (`SMOL_THREADS` threads).
//!
//!   The cost of sharing the thread: a handler's code up to its first `.await` runs on its
//!   loop's thread, one handler at a time, and on the NATS thread the app's connection waits
//!   while it runs (as on a current-thread tokio runtime). Keep that part short; blocking or CPU-heavy work belongs in
//!   `smol::unblock`.
//! - **The delay queue's one timer, shutdown and signals** run on smol's global executor,
//!   async-io timers and async-signal. (The mount loops' own timers, such as a pull request's
//!   deadline, are their loop thread's Tokio timers, so that they stay on that thread.)
//!
//! When a shutdown's grace period ends with a handler still running on a mount's loop (a
//! Core mount whose slots were all taken), that handler stops where it is, with the app's
//! thread: it is not polled again, and its future is dropped with the thread's runtime. It is
//! reported in
//! [`ShutdownReport::abandoned`] like any other (as on tokio, whose apps have the same
//! thread). An abandoned handler on smol's executor goes on, but without the thread's Tokio
//! runtime: if it then arms a Tokio timer (or any async-nats call that needs one), that panics
//! ("A Tokio 1.x context was found, but it is being shutdown"), and the runtime logs it as a
//! panicked handler. Its delivery was already reported abandoned.
//!
//! If that thread ends under the app, [`Running::until_signal`] logs an error and returns at
//! once with an [`AppFailed`] error whose report's [`ShutdownReport::failure`] says so,
//! instead of hanging on a connection nobody drives. A future spawned outside any app (none of this crate's) falls back to
//! [async-compat](https://docs.rs/async-compat)'s Tokio context.
//!
//! # Your own async-nats client, and async-nats outside a handler
//! async-nats needs a Tokio context wherever it starts a task (`async_nats::connect`,
//! `ConnectOptions::connect`, `async_nats::jetstream::new`) or arms a timer (most JetStream
//! calls: `get_stream`,
//! `create_stream`, `publish(..).await` of a publish acknowledgement, requests). Inside an
//! app's handlers it has one. Anywhere else in a smol program (`main`, a task of your own),
//! wrap the future in [`Compat`] (re-exported from
//! [async-compat](https://docs.rs/async-compat)), which runs it inside a Tokio runtime
//! async-compat keeps on a thread of its own; without it async-nats panics with "there is no
//! reactor running":
//!
//! ```no_run
//! use ruststream_smol::{App, Compat, Delivery, Mount, Outcome, async_nats};
//!
//! smol::block_on(async {
//!     // The connection task runs on async-compat's Tokio runtime, for the client's life.
//!     let client = Compat::new(async_nats::connect("nats://127.0.0.1:4222")).await?;
//!     let js = Compat::new(async { async_nats::jetstream::new(client.clone()) }).await;
//!     Compat::new(js.get_or_create_stream(async_nats::jetstream::stream::Config {
//!         name: "ORDERS".into(),
//!         subjects: vec!["orders.>".into()],
//!         ..Default::default()
//!     }))
//!     .await?;
//!     let running = App::with_client(client.clone())
//!         .mount(Mount::jetstream("orders", "ORDERS", "worker"), |_: Delivery| async {
//!             Outcome::Ack
//!         })
//!         .start()
//!         .await?;
//!     // A Core publish needs no Tokio context; a JetStream one does, for its publish and for
//!     // the wait for the stream's acknowledgement (a timer): both inside one `Compat`.
//!     client.publish("greet.new", "hello".into()).await?;
//!     Compat::new(async { js.publish("orders.new", "{}".into()).await?.await }).await?;
//!     running.until_signal().await?;
//!     Ok::<_, Box<dyn std::error::Error>>(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`App::new`] and [`App::with_options`] need none of this: the app connects inside its own
//! reactor.
//!
//! # How to drive it
//! ```no_run
//! use ruststream_smol::{App, Delivery, Mount, Outcome};
//!
//! smol::block_on(async {
//!     let report = App::new("nats://127.0.0.1:4222")
//!         .mount(Mount::core_subject("greetings", "greet.new").max_attempts(3), |d: Delivery| async move {
//!             println!("attempt {}: {:?}", d.attempt, d.payload);
//!             Outcome::Ack
//!         })
//!         .run() // until SIGINT or SIGTERM
//!         .await?;
//!     Ok::<_, ruststream_smol::RunError>(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! See `ruststream-tokio`'s crate docs for the behaviour worth knowing; it is the same here.

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

/// Runs a future inside a Tokio context (async-compat's): what async-nats calls made outside
/// an app's handlers need on smol. See the crate docs.
pub use async_compat::Compat;

ruststream_adapter::reexport_api!();
