//! The model: NATS and JetStream as a sans-io state machine. No async, no tokio, no socket, no
//! clock: every input takes the current instant, and what the server sends waits in an outbox.
//! Nothing here imports the endpoint's folder (`sim/src/endpoint/`); the endpoint imports the
//! model.
//!
//! - [`server`]: [`Server`](server::Server), the modelled server, with every `impl Server`
//!   in its folder (its core, Core routing, JetStream, the JetStream API's answers).
//! - [`stream`] and [`consumer`]: one stream and one pull consumer, each its own state machine,
//!   which the server holds and drives.
//! - [`wire`]: the vocabulary on the wire, stateless: acknowledgement payloads, pull requests
//!   and header sizes, and in [`wire::protocol`] the NATS client protocol's framing.
//! - [`journal`]: what clients publish, what the server delivers, and the journal of what it
//!   did; [`ids`] names connections and subscriptions; [`error`] says what the model
//!   refuses; [`faults`] makes it misbehave on purpose.

pub(crate) mod consumer;
pub(crate) mod error;
pub(crate) mod faults;
pub(crate) mod ids;
pub(crate) mod journal;
pub(crate) mod server;
pub(crate) mod stream;
pub(crate) mod wire;
