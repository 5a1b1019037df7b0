//! The model: NATS and JetStream as a sans-io state machine. No async, no tokio, no socket, no
//! clock: every input takes the current instant, and what the server sends waits in an outbox.
//! Nothing here imports the endpoint's folder (`sim/src/endpoint/`); the endpoint imports the
//! model.
//!
//! - [`server`]: [`Server`](server::Server), the modelled server. Every `impl Server` is in its
//!   folder, one concern a file: its core (connections, subscriptions, publish, time), Core
//!   routing, what streams and consumers do with messages, their management, and the answers
//!   to the JetStream API.
//! - [`stream`] and [`consumer`]: one stream and one pull consumer, each a state machine of its
//!   own that the server holds and drives, each a folder: a stream's publish path is in
//!   `stream/store.rs`; a consumer's configuration, pull requests and acknowledgements are in
//!   `consumer/config.rs`, `consumer/pull.rs` and `consumer/ack.rs`.
//! - [`wire`]: the vocabulary on the wire, stateless: acknowledgement payloads, pull requests
//!   and header sizes; in [`wire::protocol`] the NATS client protocol's framing, which the
//!   endpoint reads and writes with; in [`wire::api`] the JetStream API's JSON.
//! - [`journal`]: what clients publish, what the server delivers, and the journal of what it
//!   did; [`ids`] names connections and subscriptions; [`error`] says what the model
//!   refuses; [`faults`] makes it misbehave on purpose.
//!
//! Imports inside the model point down as well: [`ids`], [`error`], [`faults`] and [`wire`] at
//! the bottom; [`stream`] above them; [`consumer`] and [`journal`] above the stream; [`server`]
//! at the top. A folder's files import its `mod.rs`, which imports none of them,
//! and each other only downwards (`server/jetstream.rs` uses `server/routing.rs`).

pub(crate) mod consumer;
pub(crate) mod error;
pub(crate) mod faults;
pub(crate) mod ids;
pub(crate) mod journal;
pub(crate) mod server;
pub(crate) mod stream;
pub(crate) mod wire;
