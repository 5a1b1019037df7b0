//! What a handler can do besides returning an outcome: publish, publish to a stream, make a
//! request, answer a Core request, and read its mount.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::subject::ToSubject;
use async_nats::{Client, HeaderMap, Subject};
use bytes::Bytes;
use ruststream_settlement::MountPolicy;

use super::codec::{Codec, EncodeError, JsonCodec};
use super::delivery::Delivery;
use super::turns::HeldTurn;
use ruststream_settlement::LeasedDelivery;

/// What a mount's handlers publish with, built once per mount and client (at start-up, and
/// again when a lost client is replaced, rule 20).
pub(crate) struct ContextShared {
    pub(crate) mount: &'static str,
    pub(crate) policy: MountPolicy,
    pub(crate) client: Client,
    /// The JetStream context handlers publish to streams with, made at the first such
    /// publish ([`jetstream`](Self::jetstream)): async-nats spawns a task and a channel with
    /// each, which a mount that never publishes to a stream (most Core mounts) does without
    /// (about 1.8 KiB and a task per mount, measured with heaptrack on 1,000 Core mounts,
    /// issue 39).
    jetstream: std::sync::OnceLock<async_nats::jetstream::Context>,
    /// The Tokio runtime current where the mount was launched, on which async-nats spawns the
    /// context's task as it did when the context was made at launch (`None` when none was:
    /// the context is made at once then).
    runtime: Option<tokio::runtime::Handle>,
    /// The app's leases, which say whether a JetStream delivery still stands ([`Standing`]).
    pub(crate) stands: Arc<dyn Stands>,
    /// Whether the app's shutdown has begun: what a failure then is said to be.
    pub(crate) stopping: tokio::sync::watch::Receiver<bool>,
    /// Whether a JetStream delivery's context gives its JetStream publishes a `Nats-Msg-Id`
    /// ([`Mount::publish_ids`](crate::Mount::publish_ids)).
    publish_ids: bool,
}

impl ContextShared {
    pub(crate) fn new(
        mount: &'static str,
        policy: MountPolicy,
        client: &Client,
        stopping: tokio::sync::watch::Receiver<bool>,
        stands: Arc<dyn Stands>,
        publish_ids: bool,
    ) -> Arc<Self> {
        let runtime = tokio::runtime::Handle::try_current().ok();
        let jetstream = std::sync::OnceLock::new();
        if runtime.is_none() {
            let _ = jetstream.set(async_nats::jetstream::new(client.clone()));
        }
        Arc::new(Self {
            mount,
            policy,
            client: client.clone(),
            jetstream,
            runtime,
            stopping,
            stands,
            publish_ids,
        })
    }

    /// The mount's JetStream context, made at the first call on the runtime the mount was
    /// launched on.
    pub(crate) fn jetstream(&self) -> &async_nats::jetstream::Context {
        self.jetstream.get_or_init(|| {
            let _entered = self.runtime.as_ref().map(tokio::runtime::Handle::enter);
            async_nats::jetstream::new(self.client.clone())
        })
    }
}

/// Where a [`Handler`](crate::Handler) gets a [`Context`] for a delivery, if it wants one:
/// handlers that neither take a context nor return a [`Reply`](crate::Reply) never build one,
/// and pay nothing for it.
#[derive(Clone, Copy)]
pub struct ContextSource<'a> {
    shared: &'a Arc<ContextShared>,
    /// Where a delivery of a mount with strict order keeps its key's turn (rule 24).
    held: Option<&'a HeldTurn>,
    /// A JetStream delivery, which a run that waits to start asks about: does it still
    /// stand ([`Standing`])?
    leased: Option<LeasedDelivery>,
}

/// What says whether a JetStream delivery still stands: the app's leases (rule 16).
pub(crate) trait Stands: Send + Sync {
    /// Whether `delivery` still stands at `now`: not superseded by a later delivery of its
    /// message, its deadline not passed.
    fn is_current(&self, delivery: LeasedDelivery, now: std::time::Instant) -> bool;
}

/// Whether a JetStream delivery that waits to start (for its key's turn, or its batch) still
/// stands: not superseded by a later delivery of its message, its deadline not passed (rule
/// 16, [`Stands`]).
#[derive(Clone)]
pub(crate) struct Standing {
    room: Arc<dyn Stands>,
    delivery: LeasedDelivery,
}

impl Standing {
    /// Whether the delivery still stands at `now`.
    pub(crate) fn holds(&self, now: std::time::Instant) -> bool {
        self.room.is_current(self.delivery, now)
    }
}

impl<'a> ContextSource<'a> {
    /// The source of a delivery of a mount with strict order, whose key's turn is kept in
    /// `held` for as long as the delivery lasts (rule 24).
    pub(crate) fn holding(shared: &'a Arc<ContextShared>, held: Option<&'a HeldTurn>) -> Self {
        Self {
            shared,
            held,
            leased: None,
        }
    }

    /// The same source, for a JetStream delivery, which the app's leases keep (see
    /// [`Standing`]).
    pub(crate) fn leased(self, delivery: LeasedDelivery) -> Self {
        Self {
            leased: Some(delivery),
            ..self
        }
    }

    /// Whether the delivery still stands, for a run that waits to start; `None` for a Core
    /// delivery (nothing redelivers it).
    pub(crate) fn standing(self) -> Option<Standing> {
        self.leased.map(|delivery| Standing {
            room: self.shared.stands.clone(),
            delivery,
        })
    }

    /// Where the delivery keeps its key's turn, on a mount with strict order.
    pub(crate) fn held(self) -> Option<&'a HeldTurn> {
        self.held
    }

    /// The context of `delivery`: one reference count and the delivery's reply subject.
    pub fn context(self, delivery: &Delivery) -> Context {
        Context {
            origin: match &delivery.jetstream {
                Some(js) if self.shared.publish_ids => Some(Arc::new(PublishOrigin {
                    stream: js.stream,
                    consumer: js.consumer,
                    stream_sequence: js.stream_sequence,
                    stored: js.timestamp,
                    next: AtomicU32::new(0),
                })),
                _ => None,
            },
            shared: self.shared.clone(),
            reply: match delivery.jetstream {
                // A JetStream delivery's reply subject is its ack reply subject: never answered
                // through the context.
                Some(_) => Reply::AckSubject,
                None => match &delivery.reply {
                    Some(reply) => Reply::Core(reply.clone()),
                    None => Reply::None,
                },
            },
        }
    }
}

impl ContextSource<'_> {
    /// A context that answers no request, for a whole batch (see
    /// [`Batch::context`](crate::Batch::context)).
    pub(crate) fn batch_context(self) -> Context {
        Context {
            shared: self.shared.clone(),
            reply: Reply::None,
            origin: None,
        }
    }
}

impl Context {
    /// Whether the app's shutdown has begun, as a watch.
    pub(crate) fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
        self.shared.stopping.clone()
    }
}

impl std::fmt::Debug for ContextSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextSource")
            .field("mount", &self.shared.mount)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Debug)]
enum Reply {
    Core(Subject),
    None,
    AckSubject,
}

/// A handler's way to the NATS connection its mount consumes from: publish on Core (with
/// headers), publish to a stream and await its acknowledgement, make a request, answer the
/// delivery's Core request ([`respond`](Self::respond)), and read the mount's name and policy.
///
/// A handler takes it as an argument after the delivery (`|d: Delivery, cx: Context|`, or
/// `|order: Order, d: Delivery, cx: Context|` for a typed handler). It costs a reference count
/// per delivery, and only for handlers that take it. It is `Clone` and `'static`, so a handler
/// may move it into tasks of its own.
///
/// With the cargo feature `otel`, everything it publishes or requests carries the current
/// span's W3C trace context (`traceparent`, `tracestate`), added to the headers given.
///
/// Everything goes through the app's client: its connection, credentials and reconnects.
/// After a client was lost and replaced (rule 20), the contexts of deliveries still running
/// on the lost one fail with [`ContextError`]; new deliveries get the new client.
#[derive(Clone)]
pub struct Context {
    shared: Arc<ContextShared>,
    reply: Reply,
    /// A JetStream delivery's identity, for the ids of its JetStream publishes; `None` for a
    /// Core delivery, a batch, or a mount with [`publish_ids`](crate::Mount::publish_ids)
    /// off. Shared by the context's clones, so that each publish takes its own place.
    origin: Option<Arc<PublishOrigin>>,
}

/// What the `Nats-Msg-Id` of a JetStream delivery's publishes is made from
/// ([`publish_msg_id`](ruststream_settlement::publish_msg_id)), and the next publish's place.
#[derive(Debug)]
struct PublishOrigin {
    stream: &'static str,
    consumer: &'static str,
    stream_sequence: u64,
    stored: u64,
    next: AtomicU32,
}

impl PublishOrigin {
    /// The id of the next JetStream publish, of `payload` to `subject`.
    fn next_id(&self, subject: &Subject, payload: &[u8]) -> String {
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        ruststream_settlement::publish_msg_id(
            self.stream,
            self.consumer,
            self.stream_sequence,
            self.stored,
            index,
            subject.as_bytes(),
            payload,
        )
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("mount", &self.shared.mount)
            .field("reply", &self.reply)
            .finish_non_exhaustive()
    }
}

/// Why a [`Context`] call failed.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// The client could not take a Core publish (it was closed).
    #[error("publish failed: {0}")]
    Publish(#[from] async_nats::PublishError),
    /// The call failed after the app's shutdown began, which closes its connection once the
    /// grace period is over: a handler still running then (abandoned) cannot publish any
    /// more. `error` is async-nats' own.
    #[error(
        "mount `{mount}`: the app is shutting down and its connection is closed or closing ({error})"
    )]
    AppStopping {
        /// The mount's name.
        mount: &'static str,
        /// What async-nats said.
        error: String,
    },
    /// A JetStream publish was refused, or its acknowledgement did not come (no stream stores
    /// the subject, a duplicate window refused it, or the request timed out).
    #[error("JetStream publish failed: {0}")]
    JetStreamPublish(#[from] async_nats::jetstream::context::PublishError),
    /// A request got no reply: no one answers the subject, or none in time.
    #[error("request failed: {0}")]
    Request(#[from] async_nats::RequestError),
    /// A value to send does not encode with the codec it was given (JSON for the `*_json`
    /// calls): `does not encode as <codec>: …`. `?` on an [`EncodeError`] (a
    /// [`Codec::encode`] of your own) gives this variant, and so does `?` on a
    /// `serde_json::Error`, as the JSON codec's.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// [`Context::respond`] on a Core delivery that was published without a reply subject: it
    /// was not a request, and there is no one to answer.
    #[error("mount `{mount}`: the delivery has no reply subject (it was not a request)")]
    NoReplySubject {
        /// The mount's name.
        mount: &'static str,
    },
    /// [`Context::respond`] on a JetStream delivery: its reply subject is its ack reply
    /// subject, which the runtime answers with the settlement. Publish a reply to a subject
    /// of your own instead.
    #[error(
        "mount `{mount}`: a JetStream delivery's reply subject is its ack reply subject; the runtime settles it, and a handler cannot respond on it"
    )]
    RespondOnJetStream {
        /// The mount's name.
        mount: &'static str,
    },
}

/// A serde_json error as [`ContextError::Encode`], the JSON codec's [`EncodeError`]: `?` on
/// `serde_json::to_vec` in a handler that returns `Result<_, ContextError>`.
impl From<serde_json::Error> for ContextError {
    fn from(error: serde_json::Error) -> Self {
        Self::Encode(error.into())
    }
}

impl Context {
    /// `error`, or [`ContextError::AppStopping`] once the app's shutdown has begun.
    fn failed(&self, error: impl Into<ContextError>) -> ContextError {
        let error = error.into();
        if *self.shared.stopping.borrow() {
            return ContextError::AppStopping {
                mount: self.shared.mount,
                error: error.to_string(),
            };
        }
        error
    }

    /// The mount's name.
    pub fn mount(&self) -> &'static str {
        self.shared.mount
    }

    /// The mount's settlement policy: its subject or consumer, `max_attempts`, dead-letter
    /// subject, backoff.
    pub fn policy(&self) -> &MountPolicy {
        &self.shared.policy
    }

    /// The app's client, for what the context does not offer (subscriptions, key-value
    /// stores, stream management). It shares the app's connection.
    pub fn client(&self) -> &Client {
        &self.shared.client
    }

    /// Publishes `payload` on `subject` (Core NATS: at most once, no confirmation). The message
    /// is handed to the client, which sends it with its next write.
    ///
    /// # Errors
    /// [`ContextError::Publish`] when the client is closed.
    pub async fn publish(
        &self,
        subject: impl ToSubject,
        payload: impl Into<Bytes>,
    ) -> Result<(), ContextError> {
        #[cfg(feature = "otel")]
        if let Some(headers) = crate::support::trace::inject(None) {
            return self
                .shared
                .client
                .publish_with_headers(subject, headers, payload.into())
                .await
                .map_err(|e| self.failed(e));
        }
        self.shared
            .client
            .publish(subject, payload.into())
            .await
            .map_err(|e| self.failed(e))
    }

    /// [`publish`](Self::publish) with headers.
    ///
    /// # Errors
    /// As [`publish`](Self::publish).
    pub async fn publish_with_headers(
        &self,
        subject: impl ToSubject,
        headers: HeaderMap,
        payload: impl Into<Bytes>,
    ) -> Result<(), ContextError> {
        #[cfg(feature = "otel")]
        let headers = crate::support::trace::inject(Some(headers)).unwrap_or_default();
        self.shared
            .client
            .publish_with_headers(subject, headers, payload.into())
            .await
            .map_err(|e| self.failed(e))
    }

    /// [`publish`](Self::publish) of `value` as JSON: [`publish_encoded`](Self::publish_encoded)
    /// with [`JsonCodec`].
    ///
    /// # Errors
    /// [`ContextError::Encode`] when `value` does not encode; as [`publish`](Self::publish).
    pub async fn publish_json<T: serde::Serialize + ?Sized>(
        &self,
        subject: impl ToSubject,
        value: &T,
    ) -> Result<(), ContextError> {
        self.publish_encoded(subject, &JsonCodec, value).await
    }

    /// [`publish`](Self::publish) of `value` encoded with `codec`
    /// (`cx.publish_encoded("orders.accepted", &MessagePack, &order)`, with the cargo feature
    /// `msgpack`). With headers (a `Content-Type` of your own, say), encode first:
    /// `cx.publish_with_headers(subject, headers, codec.encode(&value)?)`.
    ///
    /// # Errors
    /// [`ContextError::Encode`] when `value` does not encode (naming the codec); as
    /// [`publish`](Self::publish).
    pub async fn publish_encoded<C: Codec, T: serde::Serialize + ?Sized>(
        &self,
        subject: impl ToSubject,
        codec: &C,
        value: &T,
    ) -> Result<(), ContextError> {
        self.publish(subject, codec.encode(value)?).await
    }

    /// Publishes `payload` to the stream that stores `subject`, and waits for the stream's
    /// acknowledgement (its sequence, and whether it was a duplicate): when this returns `Ok`,
    /// the message is stored. Within the client's request timeout (10 s by default).
    ///
    /// **Effectively once.** From a JetStream delivery's handler it carries a `Nats-Msg-Id`
    /// made from the delivery, its place among the run's JetStream publishes and what it
    /// publishes ([`Mount::publish_ids`](crate::Mount::publish_ids), on by default): a run of
    /// a redelivered message that publishes it again is dropped by the stream within its
    /// duplicate window (the acknowledgement then says `duplicate`), so an event published
    /// before a crash and before the `+ACK` is stored once.
    ///
    /// # Errors
    /// [`ContextError::JetStreamPublish`] when no stream stores `subject`, the stream refused
    /// it, or the acknowledgement did not come in time.
    pub async fn jetstream_publish(
        &self,
        subject: impl ToSubject,
        payload: impl Into<Bytes>,
    ) -> Result<async_nats::jetstream::publish::PublishAck, ContextError> {
        #[cfg(feature = "otel")]
        let traced = true;
        #[cfg(not(feature = "otel"))]
        let traced = false;
        if traced || self.origin.is_some() {
            return self
                .jetstream_publish_with_headers(subject, HeaderMap::new(), payload)
                .await;
        }
        let ack: PublishAckFuture = self
            .shared
            .jetstream()
            .publish(subject, payload.into())
            .await
            .map_err(|e| self.failed(e))?;
        ack.await.map_err(|e| self.failed(e))
    }

    /// [`jetstream_publish`](Self::jetstream_publish) with headers. A `Nats-Msg-Id` among them
    /// makes the stream drop a duplicate within its window, and is kept as given; without one,
    /// a JetStream delivery's publish gets the runtime's own
    /// ([`Mount::publish_ids`](crate::Mount::publish_ids)).
    ///
    /// # Errors
    /// As [`jetstream_publish`](Self::jetstream_publish).
    pub async fn jetstream_publish_with_headers(
        &self,
        subject: impl ToSubject,
        headers: HeaderMap,
        payload: impl Into<Bytes>,
    ) -> Result<async_nats::jetstream::publish::PublishAck, ContextError> {
        #[cfg(feature = "otel")]
        let headers = crate::support::trace::inject(Some(headers)).unwrap_or_default();
        let (subject, payload) = (subject.to_subject(), payload.into());
        let mut headers = headers;
        let mut own_id = None;
        if let Some(origin) = &self.origin {
            let id = origin.next_id(&subject, &payload);
            if headers.get(NATS_MESSAGE_ID).is_none() {
                headers.insert(NATS_MESSAGE_ID, id.as_str());
                own_id = Some(id);
            }
        }
        let ack = self
            .shared
            .jetstream()
            .publish_with_headers(subject, headers, payload)
            .await
            .map_err(|e| self.failed(e))?;
        let ack = ack.await.map_err(|e| self.failed(e))?;
        if ack.duplicate
            && let Some(id) = own_id
        {
            tracing::debug!(mount = self.shared.mount, stream = %ack.stream, sequence = ack.sequence, %id,
                "published already by an earlier run of this delivery: the stream kept the first");
        }
        Ok(ack)
    }

    /// [`jetstream_publish`](Self::jetstream_publish) of `value` as JSON:
    /// [`jetstream_publish_encoded`](Self::jetstream_publish_encoded) with [`JsonCodec`].
    ///
    /// # Errors
    /// [`ContextError::Encode`] when `value` does not encode; as
    /// [`jetstream_publish`](Self::jetstream_publish).
    pub async fn jetstream_publish_json<T: serde::Serialize + ?Sized>(
        &self,
        subject: impl ToSubject,
        value: &T,
    ) -> Result<async_nats::jetstream::publish::PublishAck, ContextError> {
        self.jetstream_publish_encoded(subject, &JsonCodec, value)
            .await
    }

    /// [`jetstream_publish`](Self::jetstream_publish) of `value` encoded with `codec`
    /// (`cx.jetstream_publish_encoded("events.accepted", &Cbor, &event)`, with the cargo
    /// feature `cbor`).
    ///
    /// # Errors
    /// [`ContextError::Encode`] when `value` does not encode (naming the codec); as
    /// [`jetstream_publish`](Self::jetstream_publish).
    pub async fn jetstream_publish_encoded<C: Codec, T: serde::Serialize + ?Sized>(
        &self,
        subject: impl ToSubject,
        codec: &C,
        value: &T,
    ) -> Result<async_nats::jetstream::publish::PublishAck, ContextError> {
        self.jetstream_publish(subject, codec.encode(value)?).await
    }

    /// Sends a request and waits for its reply, within the client's request timeout (10 s by
    /// default).
    ///
    /// # Errors
    /// [`ContextError::Request`] when no one answers `subject`, or not in time.
    pub async fn request(
        &self,
        subject: impl ToSubject,
        payload: impl Into<Bytes>,
    ) -> Result<async_nats::Message, ContextError> {
        #[cfg(feature = "otel")]
        if let Some(headers) = crate::support::trace::inject(None) {
            return self.request_with_headers(subject, headers, payload).await;
        }
        self.shared
            .client
            .request(subject, payload.into())
            .await
            .map_err(|e| self.failed(e))
    }

    /// [`request`](Self::request) with headers.
    ///
    /// # Errors
    /// As [`request`](Self::request).
    pub async fn request_with_headers(
        &self,
        subject: impl ToSubject,
        headers: HeaderMap,
        payload: impl Into<Bytes>,
    ) -> Result<async_nats::Message, ContextError> {
        #[cfg(feature = "otel")]
        let headers = crate::support::trace::inject(Some(headers)).unwrap_or_default();
        self.shared
            .client
            .request_with_headers(subject, headers, payload.into())
            .await
            .map_err(|e| self.failed(e))
    }

    /// Answers the delivery's Core request: publishes `payload` to its reply subject. The
    /// settlement is still the handler's outcome; a handler may also return a
    /// [`Reply`](crate::Reply) instead, which is answered for it.
    ///
    /// # Errors
    /// [`ContextError::NoReplySubject`] when the delivery was published without a reply
    /// subject; [`ContextError::RespondOnJetStream`] on a JetStream mount (its reply subject
    /// is the ack reply subject); as [`publish`](Self::publish).
    pub async fn respond(&self, payload: impl Into<Bytes>) -> Result<(), ContextError> {
        match &self.reply {
            Reply::Core(reply) => self.publish(reply.clone(), payload).await,
            Reply::None => Err(ContextError::NoReplySubject {
                mount: self.shared.mount,
            }),
            Reply::AckSubject => Err(ContextError::RespondOnJetStream {
                mount: self.shared.mount,
            }),
        }
    }

    /// [`respond`](Self::respond) with `value` as JSON: [`respond_encoded`](Self::respond_encoded)
    /// with [`JsonCodec`].
    ///
    /// # Errors
    /// [`ContextError::Encode`] when `value` does not encode; as [`respond`](Self::respond).
    pub async fn respond_json<T: serde::Serialize + ?Sized>(
        &self,
        value: &T,
    ) -> Result<(), ContextError> {
        self.respond_encoded(&JsonCodec, value).await
    }

    /// [`respond`](Self::respond) with `value` encoded with `codec`.
    ///
    /// # Errors
    /// [`ContextError::Encode`] when `value` does not encode (naming the codec), before
    /// anything is sent; as [`respond`](Self::respond).
    pub async fn respond_encoded<C: Codec, T: serde::Serialize + ?Sized>(
        &self,
        codec: &C,
        value: &T,
    ) -> Result<(), ContextError> {
        self.respond(codec.encode(value)?).await
    }

    /// Whether the delivery can be answered: a Core delivery with a reply subject.
    pub fn can_respond(&self) -> bool {
        matches!(self.reply, Reply::Core(_))
    }
}
