//! # ruststream-sim
//!
//! The simulator: your app, mounts and handlers, unchanged, on a deterministic model of NATS
//! and JetStream with a virtual clock, for tests of retries and dead letters that need no
//! nats-server and no waiting.
//!
//! - [`Sim`]: the test API. [`Sim::run`] runs a test on a current-thread tokio runtime whose
//!   clock is paused; [`Sim::url`] is where [`App`] (the adapter's own, on this crate's
//!   virtual-time [`Runtime`]) or any async-nats client connects; then publish, advance,
//!   and read the journal, the streams and the consumers.
//! - The seam: the model is served on a loopback port in the NATS client protocol, with the
//!   JetStream API answered from it, so the app runs the same async-nats code as in
//!   production and nothing in the adapter's hot path changes.
//! - [`Server`]: the model itself, usable on its own as below.
//!
//! ```
//! use std::time::Duration;
//! use ruststream_sim::{App, Delivery, Mount, Outcome, Sim};
//!
//! let attempts = Sim::run(|sim| async move {
//!     let (seen, clock) = (std::sync::Arc::new(std::sync::Mutex::new(Vec::new())), sim.clone());
//!     let sink = seen.clone();
//!     let running = App::new(&sim.url())
//!         .mount(
//!             Mount::core_subject("greet", "greet").max_attempts(2),
//!             move |d: Delivery| {
//!                 sink.lock().unwrap().push((d.attempt.get(), clock.elapsed()));
//!                 async { Outcome::RetryAfter(Duration::from_secs(5)) }
//!             },
//!         )
//!         .start()
//!         .await
//!         .unwrap();
//!     sim.publish("greet", "hi").unwrap();
//!     sim.advance(Duration::from_secs(6)).await;
//!     running.shutdown().await;
//!     let attempts = seen.lock().unwrap().clone();
//!     attempts
//! });
//! // The Core copy came back 5 s (of virtual time) later.
//! assert_eq!(attempts, [(1, Duration::ZERO), (2, Duration::from_secs(5))]);
//! ```
//!
//! # The model
//!
//! A deterministic, in-memory model of what the ruststream runtime relies on in NATS and
//! JetStream, driven by virtual time: Core subjects with wildcards and queue groups, streams
//! (their duplicate window and `Nats-Msg-Id`, `max_messages`, `max_age`, work-queue
//! retention), and pull consumers (ack policies explicit, all and none; `ack_wait`,
//! `BackOff`, `max_deliver`, `max_ack_pending`, `+ACK`, `-NAK`, `-NAK {"delay": ns}`, `+TERM`,
//! `+WPI`, pull requests with their idle heartbeats and their `404`/`408`/`409` ends,
//! updates of a consumer's `ack_wait` and the like; nats-server 2.11's consumer pause
//! (`pause_until`, `CONSUMER.PAUSE`, [`Server::pause_consumer`]: requests wait, get their
//! heartbeats and expire, and the consumer resumes by itself) and priority groups
//! (`overflow` with `min_pending`/`min_ack_pending`; `pinned_client` with `Nats-Pin-Id`,
//! `423` for a stale id, standby requests, the pin released after `priority_timeout` or by
//! `CONSUMER.UNPIN`, [`Server::unpin_consumer`]), both checked against nats-server 2.15.1, and
//! ignored as 2.9 ignores them under [`ServerVersion::V2_9`]), and the publish directives
//! (`Nats-Expected-Stream`, `-Last-Sequence`, `-Last-Msg-Id`, `-Last-Subject-Sequence`);
//! `STREAM.MSG.DELETE`; ack reply subjects in their v1 form or, as nats-server 2.14+ writes
//! them with `js_ack_fc_v2`, their v2 form ([`Server::with_ack_replies_v2`]); and header
//! blocks no client can read, stored and forwarded byte for byte as nats-server does, which
//! bring down the async-nats client they reach ([`Publish::unreadable_headers`]): a poison
//! message.
//!
//! The model is sans-io in the way `ruststream-settlement` is: no async, no clock, no network.
//! Every input takes the current instant, [`Server::poll_timeout`] says when something next
//! falls due and [`Server::handle_timeout`] lets it happen, and what the server sends waits in
//! an outbox ([`Server::poll_delivered`]), as async-nats messages. The same inputs give the
//! same outputs and the same [`Server::journal`], every run.
//!
//! # How to drive it
//! 1. [`Server::new`] with the instant its clock starts at; [`Server::connect`] for each
//!    client; [`Server::create_stream`] and [`Server::create_consumer`] with async-nats'
//!    configuration types, as a service declares them. [`Server::with_version`] makes it
//!    behave as nats-server 2.9 where that differs from later versions ([`ServerVersion`]).
//! 2. [`Server::subscribe`], [`Server::publish`] (a pull request is a publish to
//!    `$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>` with an inbox as its reply subject, an
//!    acknowledgement a publish to the delivery's `$JS.ACK.` reply subject, as on the wire).
//! 3. Take what it sends with [`Server::poll_delivered`]; advance time to
//!    [`Server::poll_timeout`] and call [`Server::handle_timeout`].
//! 4. Read what happened: [`Server::journal`], [`Server::consumer_state`],
//!    [`Server::stream_messages`].
//! 5. Make things go wrong with [`Server::faults`] (lose acknowledgements, fail publishes)
//!    and [`Server::disconnect`].
//!
//! ```
//! use std::time::{Duration, Instant};
//! use async_nats::jetstream::{consumer::pull, stream};
//! use ruststream_sim::{Publish, Server};
//!
//! let start = Instant::now();
//! let mut server = Server::new(start);
//! server.create_stream(stream::Config {
//!     name: "ORDERS".into(),
//!     subjects: vec!["orders.>".into()],
//!     ..Default::default()
//! })?;
//! server.create_consumer("ORDERS", pull::Config {
//!     durable_name: Some("worker".into()),
//!     ack_wait: Duration::from_secs(2),
//!     ..Default::default()
//! })?;
//! let app = server.connect();
//! server.subscribe(app, "_INBOX.worker", None)?;
//! server.publish(app, Publish::new("orders.new", "{}"), start)?;
//! server.publish(
//!     app,
//!     Publish::new("$JS.API.CONSUMER.MSG.NEXT.ORDERS.worker", r#"{"batch":1}"#)
//!         .reply("_INBOX.worker"),
//!     start,
//! )?;
//! let delivered = server.poll_delivered().expect("the stored message");
//! let reply = delivered.message.reply.expect("an ack reply subject");
//! assert!(reply.starts_with("$JS.ACK.ORDERS.worker.1.1.1."));
//!
//! // Not acknowledged: due again 2 s later.
//! assert_eq!(server.poll_timeout(), Some(start + Duration::from_secs(2)));
//! # Ok::<(), ruststream_sim::SimError>(())
//! ```
//!
//! # What it does not model
//! Push consumers, interest retention, byte limits, `max_messages_per_subject` (and so the
//! KV store), direct get (and so the object store), mirrors and sources, clustering, flow
//! control, accounts and TLS; stream purges, message deletes, gets by subject and stream
//! updates that change anything: a configuration or request that asks for one is refused with
//! [`SimError::NotModelled`] naming the setting (on the wire, a JetStream API error naming
//! it), never silently ignored. Of the priority settings, nats-server 2.12's `prioritized`
//! policy and a `pinned_client` consumer with more than one group (the server keeps a single
//! pin for all of them) are refused that way; the pin ids are `SIMPIN` and a counter, not
//! random; a poison message (unreadable headers) goes to a pinned client without its
//! `Nats-Pin-Id`. An ephemeral consumer is not removed after its
//! `inactive_threshold`. Messages are async-nats messages, so bytes async-nats cannot read
//! cannot be stored. Health's `since` times are virtual: `Health::live` reads the system
//! clock, so a test asks `live_at(sim.now())`.
//!
//! # Where things are
//! Two folders, and imports run one way: `endpoint/` imports `model/`, never the reverse.
//! - `model/`: the sans-io model. No async, no tokio, no socket, no clock. `server/` holds
//!   [`Server`], every `impl Server` in it, one concern a file; `stream/` and `consumer/` the
//!   state machines it drives; `journal.rs` what clients and the server exchange ([`Publish`],
//!   [`Delivered`], [`Record`]); `faults.rs` [`Faults`]; `error.rs` [`SimError`]; `wire/` the
//!   vocabulary on the wire ([`AckKind`], [`PullRequest`], the NATS client protocol's framing,
//!   the JetStream API's JSON).
//! - `endpoint/`: the async side, lowest first: `runtime.rs`, the virtual clock and
//!   [`Runtime`]; the NATS protocol endpoint that serves the model on loopback (`mod.rs`,
//!   `access.rs` with [`Authorization`], `connection.rs`, `dispatch.rs`); `sim/`, the [`Sim`]
//!   handle a test holds, its waits ([`Sim::run_until`]) in `sim/wait.rs`.

mod endpoint;
pub mod explore;
mod model;

pub use model::consumer::{
    ConsumerState, DEFAULT_MAX_ACK_PENDING, DEFAULT_MAX_WAITING, SERVER_DEFAULT_ACK_WAIT, Sequences,
};
pub use model::error::{PriorityRule, SimError, WorkQueueRule};
pub use model::faults::Faults;
pub use model::ids::{ConnectionId, SubscriptionId};
pub use model::journal::{Delivered, Publish, Published, Record};
pub use model::server::{
    ACCOUNT_HASH, DEFAULT_MAX_PAYLOAD, EPOCH_NANOS, PULL_PREFIX, Server, ServerVersion,
};
pub use model::stream::{DEFAULT_DUPLICATE_WINDOW, PubAck, StoredMessage, StreamState};
pub use model::wire::{AckKind, PullPriority, PullRequest};

pub use endpoint::access::Authorization;
pub use endpoint::runtime::Runtime;
pub use endpoint::sim::{MAX_STEP, STEP, Sim, TimedOut};

/// The app on the simulator: `ruststream-adapter`'s [`App`](ruststream_adapter::App) on the
/// virtual-time [`Runtime`], the same builder, mounts and handlers as `ruststream-tokio`'s.
pub type App = ruststream_adapter::App<Runtime>;

/// A started [`App`] on the simulator.
pub type Running = ruststream_adapter::Running<Runtime>;

/// Pauses and resumes a running app's JetStream consumers from anywhere
/// (`Running::pause_handle`), on this crate's runtime.
pub type PauseHandle = ruststream_adapter::PauseHandle<Runtime>;

ruststream_adapter::reexport_api!();
