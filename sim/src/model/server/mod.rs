//! The modelled server: its connections and subscriptions, virtual time, and what a publish
//! does. Every `impl Server` is in this folder, one concern a file: this one holds the type
//! and its core; Core routing is in `routing.rs`, what streams and consumers do with messages
//! (storing, acknowledgements, pull requests, deliveries) in `jetstream.rs`, creating,
//! reading and deleting them in `management.rs`, the JetStream API's answers in `api.rs`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ruststream_settlement::{ACK_PREFIX, Subject, Wildcard};

use crate::model::consumer::Consumer;
use crate::model::error::SimError;
use crate::model::faults::Faults;
use crate::model::ids::{ConnectionId, SubscriptionId};
use crate::model::journal::{Delivered, Publish, Published, Record};
use crate::model::stream::PubAck;
use crate::model::stream::Stream;

mod api;
mod jetstream;
mod management;
mod routing;

/// nats-server's `max_payload` by default: 1 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// The subject prefix of pull requests: `$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`.
pub const PULL_PREFIX: &str = "$JS.API.CONSUMER.MSG.NEXT.";

/// The Unix time, in nanoseconds, that the model's clock starts at (2026-01-01T00:00:00Z):
/// the timestamps in ack reply subjects count from it, so that every run gives the same.
pub const EPOCH_NANOS: u64 = 1_767_225_600_000_000_000;

/// The account hash token of the v2 ack reply subjects the model writes
/// ([`Server::with_ack_replies_v2`]): nats-server writes a hash of the account's name there;
/// the model has one account, and this fixed token.
pub const ACCOUNT_HASH: &str = "SIMACCT";

/// Which nats-server the model behaves as, where versions differ in what the runtime or a
/// test can see. Everything else is the same for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ServerVersion {
    /// 2.9 (Debian's 2.9.10): an `+ACK` that comes after its message went past `max_deliver`
    /// moves the ack floor to the last delivery when nothing else is pending; a partly
    /// filled `no_wait` request ends with `408` and the unfilled count. It knows neither
    /// pauses nor priority groups: their consumer settings and pull request fields are
    /// ignored (and not given back in the configuration), and `CONSUMER.PAUSE` and
    /// `CONSUMER.UNPIN` get no answer at all (the client's request times out; no `503`).
    V2_9,
    /// 2.10 and later (checked against 2.15.1): that late `+ACK` leaves the ack floor; a partly
    /// filled `no_wait` request ends with `404 No Messages`; consumer pauses and priority
    /// groups (2.11+) are followed.
    #[default]
    Current,
}

impl ServerVersion {
    /// The version `Sim`'s endpoint announces in its `INFO`: the nats-server release whose
    /// behaviour the model follows (the one the model-vs-server test checks it against),
    /// `2.9.10` or `2.15.1`.
    pub fn announced(self) -> &'static str {
        match self {
            ServerVersion::V2_9 => "2.9.10",
            ServerVersion::Current => "2.15.1",
        }
    }
}

pub(crate) struct Subscription {
    pub(crate) connection: ConnectionId,
    pub(crate) subject: Wildcard,
    pub(crate) queue: Option<String>,
}

pub(crate) struct StreamEntry {
    pub(crate) stream: Stream,
    pub(crate) consumers: BTreeMap<String, Consumer>,
}

/// The modelled NATS server with JetStream. Deterministic: the same calls with the same
/// instants give the same deliveries and the same journal.
///
/// Time is an argument (`now`, never read from a clock); it never goes back (an earlier
/// `now` counts as the latest seen). Outputs wait in an outbox: [`Server::poll_delivered`].
pub struct Server {
    pub(crate) version: ServerVersion,
    pub(crate) ack_replies_v2: bool,
    pub(crate) start: Instant,
    pub(crate) now: Instant,
    pub(crate) max_payload: usize,
    pub(crate) next_connection: u64,
    pub(crate) next_subscription: u64,
    pub(crate) next_ephemeral: u64,
    pub(crate) connections: BTreeMap<ConnectionId, BTreeSet<SubscriptionId>>,
    pub(crate) subscriptions: BTreeMap<SubscriptionId, Subscription>,
    pub(crate) queue_turns: BTreeMap<String, u64>,
    pub(crate) streams: BTreeMap<String, StreamEntry>,
    pub(crate) outbox: VecDeque<Delivered>,
    pub(crate) faults: Faults,
    pub(crate) journal: Vec<Record>,
}

impl Server {
    /// A server whose clock starts at `start`, with the default `max_payload` (1 MiB).
    pub fn new(start: Instant) -> Self {
        Self {
            version: ServerVersion::Current,
            ack_replies_v2: false,
            start,
            now: start,
            max_payload: DEFAULT_MAX_PAYLOAD,
            next_connection: 0,
            next_subscription: 0,
            next_ephemeral: 0,
            connections: BTreeMap::new(),
            subscriptions: BTreeMap::new(),
            queue_turns: BTreeMap::new(),
            streams: BTreeMap::new(),
            outbox: VecDeque::new(),
            faults: Faults::default(),
            journal: Vec::new(),
        }
    }

    /// Which nats-server it behaves as.
    pub fn version(&self) -> ServerVersion {
        self.version
    }

    /// With this `max_payload`, in bytes (payload and headers of one message).
    #[must_use]
    pub fn with_max_payload(mut self, max_payload: usize) -> Self {
        self.max_payload = max_payload;
        self
    }

    /// Behaving as this nats-server version where versions differ (see [`ServerVersion`]).
    /// Set it before creating consumers: each takes the version it is created under.
    #[must_use]
    pub fn with_version(mut self, version: ServerVersion) -> Self {
        self.version = version;
        self
    }

    /// Writing ack reply subjects in their v2 form, as nats-server 2.14 and later do with
    /// the `js_ack_fc_v2` feature flag: `$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.
    /// <delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>`, eleven tokens, the
    /// domain `_` (none configured) and the account hash [`ACCOUNT_HASH`] (the model has one
    /// account). Without it, the v1 form: `$JS.ACK.<stream>.<consumer>.…`, nine tokens.
    /// Acknowledgements are read in either form.
    #[must_use]
    pub fn with_ack_replies_v2(mut self) -> Self {
        self.ack_replies_v2 = true;
        self
    }

    /// The server's `max_payload`, in bytes.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// The latest instant the server has seen.
    pub fn now(&self) -> Instant {
        self.now
    }

    pub(crate) fn at(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.now
    }

    /// The switches that make things go wrong.
    pub fn faults(&mut self) -> &mut Faults {
        &mut self.faults
    }

    /// Everything the server did so far, in order.
    pub fn journal(&self) -> &[Record] {
        &self.journal
    }

    /// A new client connection.
    pub fn connect(&mut self) -> ConnectionId {
        self.next_connection += 1;
        let id = ConnectionId(self.next_connection);
        self.connections.insert(id, BTreeSet::new());
        id
    }

    /// Whether the connection is open.
    pub fn is_connected(&self, connection: ConnectionId) -> bool {
        self.connections.contains_key(&connection)
    }

    /// Closes a connection, as a network failure or a client's close would: its subscriptions
    /// end and its waiting pull requests are forgotten. Messages already in the outbox for it
    /// are dropped.
    ///
    /// # Errors
    /// [`SimError::NoConnection`] when it is not open.
    pub fn disconnect(&mut self, connection: ConnectionId, now: Instant) -> Result<(), SimError> {
        let at = self.at(now);
        let subscriptions = self
            .connections
            .remove(&connection)
            .ok_or(SimError::NoConnection(connection))?;
        for sid in subscriptions {
            self.subscriptions.remove(&sid);
        }
        for entry in self.streams.values_mut() {
            for consumer in entry.consumers.values_mut() {
                consumer.handle_disconnect(connection);
            }
        }
        self.outbox.retain(|d| d.connection != connection);
        self.journal.push(Record::Disconnected { at, connection });
        Ok(())
    }

    /// Subscribes `connection` to `subject` (a wildcard may be given), in a queue group when
    /// `queue` is given: each message then goes to one member of the group.
    ///
    /// # Errors
    /// [`SimError::NoConnection`], or [`SimError::Subject`] for a subject NATS refuses.
    pub fn subscribe(
        &mut self,
        connection: ConnectionId,
        subject: &str,
        queue: Option<&str>,
    ) -> Result<SubscriptionId, SimError> {
        let wildcard = Wildcard::new(subject).map_err(|e| SimError::Subject {
            subject: subject.to_owned(),
            reason: e.to_string(),
        })?;
        let subscriptions = self
            .connections
            .get_mut(&connection)
            .ok_or(SimError::NoConnection(connection))?;
        self.next_subscription += 1;
        let id = SubscriptionId(self.next_subscription);
        subscriptions.insert(id);
        self.subscriptions.insert(
            id,
            Subscription {
                connection,
                subject: wildcard,
                queue: queue.map(str::to_owned),
            },
        );
        Ok(id)
    }

    /// Ends a subscription; what the outbox holds for it is dropped.
    ///
    /// # Errors
    /// [`SimError::NoSubscription`] when it does not exist.
    pub fn unsubscribe(&mut self, subscription: SubscriptionId) -> Result<(), SimError> {
        let sub = self
            .subscriptions
            .remove(&subscription)
            .ok_or(SimError::NoSubscription(subscription))?;
        if let Some(subs) = self.connections.get_mut(&sub.connection) {
            subs.remove(&subscription);
        }
        self.outbox.retain(|d| d.subscription != subscription);
        Ok(())
    }

    /// The next message for a subscription, in the order the server sent them.
    pub fn poll_delivered(&mut self) -> Option<Delivered> {
        self.outbox.pop_front()
    }

    /// Publishes a message from `connection`, as the server receives it: a stream that
    /// stores the subject stores it (and answers the reply subject with its `PubAck`), an
    /// ack reply subject settles the delivery it names, a pull request subject
    /// (`$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`) asks for messages, and every
    /// matching subscription receives it. A request (a reply subject) that nothing receives
    /// gets `503 No Responders`.
    ///
    /// # Errors
    /// [`SimError::NoConnection`]; [`SimError::Subject`] for a subject that is not literal;
    /// [`SimError::MaxPayload`] for a message over `max_payload`; [`SimError::PublishFailed`]
    /// by a fault; [`SimError::StreamFull`] from a stream that discards new messages.
    pub fn publish(
        &mut self,
        connection: ConnectionId,
        message: Publish,
        now: Instant,
    ) -> Result<Published, SimError> {
        let at = self.at(now);
        if !self.connections.contains_key(&connection) {
            return Err(SimError::NoConnection(connection));
        }
        let subject = Subject::new(&message.subject).map_err(|e| SimError::Subject {
            subject: message.subject.clone(),
            reason: e.to_string(),
        })?;
        if let Some(reply) = &message.reply {
            Subject::new(reply).map_err(|e| SimError::Subject {
                subject: reply.clone(),
                reason: e.to_string(),
            })?;
        }
        let size = message.size();
        if size > self.max_payload {
            return Err(SimError::MaxPayload {
                size,
                max_payload: self.max_payload,
            });
        }
        let record = |stored: Option<PubAck>, failed: bool| Record::Published {
            at,
            connection,
            subject: message.subject.clone(),
            headers: message.headers.clone(),
            payload: message.payload.clone(),
            stored,
            failed,
        };
        if self.faults.take_publish_failure(&subject) {
            self.journal.push(record(None, true));
            return Err(SimError::PublishFailed {
                subject: message.subject.clone(),
            });
        }
        if message.subject.starts_with(ACK_PREFIX) && self.acknowledge(&message, at) {
            // Lost on its way: nobody sees it.
            return Ok(Published::default());
        }
        let stored = match self.capture(&subject, &message, at) {
            Ok(stored) => stored,
            Err(e) => {
                self.journal.push(record(None, false));
                return Err(e);
            }
        };
        self.journal.push(record(stored.clone(), false));
        let receivers = self.route_with(
            &message.subject,
            message.reply.as_deref(),
            routing::Headers::of(&message),
            &message.payload,
            |_| {},
        );
        if let Some(rest) = message.subject.strip_prefix(PULL_PREFIX)
            && let Some(reply) = &message.reply
        {
            self.pull_request(connection, rest, reply, &message.payload, at);
        }
        let answers = stored.as_ref().is_some_and(|ack| {
            self.streams
                .get(&ack.stream)
                .is_some_and(|e| !e.stream.config.no_ack)
        });
        if let (Some(ack), Some(reply), true) = (&stored, &message.reply, answers) {
            let mut body = serde_json::json!({"stream": ack.stream, "seq": ack.sequence});
            if ack.duplicate {
                body["duplicate"] = serde_json::Value::Bool(true);
            }
            let payload = Bytes::from(body.to_string());
            self.route(reply, None, None, &payload);
        } else if let Some(reply) = &message.reply
            && receivers == 0
            && stored.is_none()
            && !message.subject.starts_with(PULL_PREFIX)
        {
            self.no_responders(reply);
        }
        self.pump(at);
        Ok(Published { receivers, stored })
    }

    /// When something next falls due: a delivery's deadline, a pull request's expiry, a
    /// message aging out of a stream. `None` when nothing will without a new input.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.streams
            .values()
            .flat_map(|e| {
                std::iter::once(e.stream.poll_timeout())
                    .chain(e.consumers.values().map(Consumer::poll_timeout))
            })
            .flatten()
            .min()
    }

    /// Lets what is due at `now` happen: redeliveries queued (and delivered to waiting
    /// requests), requests expired, messages aged out.
    pub fn handle_timeout(&mut self, now: Instant) {
        let at = self.at(now);
        let names: Vec<String> = self.streams.keys().cloned().collect();
        for name in names {
            let Some(entry) = self.streams.get_mut(&name) else {
                continue;
            };
            let removed = entry.stream.handle_timeout(at);
            let mut sends = Vec::new();
            for (consumer_name, consumer) in &mut entry.consumers {
                consumer.handle_removed(&removed);
                let mut out = Vec::new();
                consumer.handle_timeout(at, &mut out);
                sends.push((consumer_name.clone(), out));
            }
            for (consumer, out) in sends {
                self.send(&name, &consumer, out, at);
            }
        }
        self.pump(at);
    }

    /// How long since the server's clock started.
    pub fn elapsed(&self) -> Duration {
        self.now.saturating_duration_since(self.start)
    }
}
