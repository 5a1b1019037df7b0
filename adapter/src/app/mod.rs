//! The top floor: the app. Its builder ([`App`]) and start-up (declarations validated, the
//! connection made, every mount checked against the server, then the mount loops started);
//! the started app ([`running::Running`]) and its shutdown; and the supervisor that keeps it
//! consuming (rule 20). Imports from every floor below; nothing imports it.

pub(crate) mod asyncapi;
mod declarations;
mod discovery;
mod grace_period;
mod mount_checks;
#[cfg(feature = "ops")]
pub(crate) mod ops;
mod overlaps;
pub(crate) mod pause;
pub(crate) mod running;
pub(crate) mod startup;
mod streams;
pub(crate) mod supervisor;

use std::future::Future;
use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::{Client, ConnectOptions};
use tokio::sync::{mpsc, oneshot, watch};

use self::declarations::validate;
use self::mount_checks::{Overlaps, check_mounts};
use self::running::{DEFAULT_GRACE_PERIOD, Running};
use self::startup::{Connect, StartError, connect};
use self::streams::{check_all, declare};
use self::supervisor::{CONSUMER_REREAD, DEFAULT_DISCONNECTED_LIMIT, Supervisor};
use crate::api::batch::{self, Batch, BatchHandler, BatchTerms, Decode, IntoBatchHandled};
use crate::api::codec::{Codec, JsonCodec};
use crate::api::handler::Handler;
use crate::api::handler_fn::IntoHandler;
use crate::api::health::{HealthBoard, HealthWatch, MountState};
use crate::api::keyed::{KeyTerms, Keyed};
use crate::api::mount::Mount;
use crate::api::reports::{AppFailed, Observer, Settled, ShutdownReport};
use crate::api::service::Service;
use crate::api::timer::Timer;
use crate::api::typed::{IntoJsonHandler, IntoTypedHandler};
use crate::loops::delay_loop::delay_loop;
use crate::loops::launch::Launcher;
use crate::loops::lease_loop::lease_loop;
use crate::runtime::{LoopThread, Reactor, Runtime};
use crate::state::lease_room::LeaseRoom;
use crate::state::record::MountRecord;

/// A set of mounts to run against one NATS connection, on the runtime `R`. See the crate docs
/// for an example; applications name it through their runtime crate's alias
/// (`ruststream_tokio::App`, `ruststream_smol::App`).
pub struct App<R> {
    connect: Connect,
    mounts: Vec<(Mount, Arc<dyn Handler>)>,
    streams: Vec<async_nats::jetstream::stream::Config>,
    grace: Duration,
    observer: Option<Observer>,
    consumer_reread: Duration,
    disconnected_limit: Duration,
    subscription_capacity: Option<NonZeroUsize>,
    health: HealthBoard,
    /// The ops endpoint to serve, if any (feature `ops`).
    #[cfg(feature = "ops")]
    ops: Option<ops::OpsEndpoint>,
    /// The NATS service the app is, if declared ([`App::service`]).
    service: Option<Service>,
    runtime: PhantomData<fn() -> R>,
}

impl<R> std::fmt::Debug for App<R> {
    /// Shows the mounts, never the connection options (they may hold credentials).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field(
                "mounts",
                &self
                    .mounts
                    .iter()
                    .map(|(m, _)| m.name())
                    .collect::<Vec<_>>(),
            )
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> App<R> {
    fn with_connect(connect: Connect) -> Self {
        Self {
            connect,
            mounts: Vec::new(),
            streams: Vec::new(),
            grace: DEFAULT_GRACE_PERIOD,
            observer: None,
            consumer_reread: CONSUMER_REREAD,
            disconnected_limit: DEFAULT_DISCONNECTED_LIMIT,
            subscription_capacity: None,
            health: HealthBoard::new(R::now),
            #[cfg(feature = "ops")]
            ops: None,
            service: None,
            runtime: PhantomData,
        }
    }

    /// An app that connects to `url` with default options.
    ///
    /// `url` is one server URL or several separated by commas (the client picks one and fails
    /// over to the others): `nats://host:4222`, `tls://host:4222`, `ws://…`, `wss://…`, or a
    /// bare `host:port`. Credentials may stand in a URL: `nats://user:password@host:4222`
    /// (percent-encode `:`, `@` and `/` in them) or `nats://token@host:4222`; every entry
    /// that carries credentials must carry the same. They are taken out of the URLs and
    /// handed to async-nats as [`ConnectOptions`], and never appear in a log line or error.
    ///
    /// Nothing is read until [`start`](Self::start), which refuses a URL that does not parse
    /// with [`StartError::ServerUrl`].
    pub fn new(url: &str) -> Self {
        Self::with_options(url, ConnectOptions::new())
    }

    /// An app that connects to `url` (as in [`new`](Self::new)) with `options`: credentials,
    /// credentials files, tokens, TLS and the rest pass through to async-nats untouched, and
    /// never appear in a log line. Credentials in `url` replace those of the same kind in
    /// `options` (a user and password, or a token).
    ///
    /// One option is better set on the app: async-nats keeps the
    /// `ConnectOptions::subscription_capacity` it is given to itself, so the Core mounts'
    /// buffers cannot follow it. Set it with [`subscription_capacity`](Self::subscription_capacity)
    /// instead, which sets both.
    pub fn with_options(url: &str, options: ConnectOptions) -> Self {
        Self::with_connect(Connect::Url {
            url: url.to_owned(),
            options: Box::new(options),
        })
    }

    /// An app on an existing client. Shutdown flushes it but does not drain it: the
    /// application owns it. If that client was built with a raised
    /// `ConnectOptions::subscription_capacity`, say so with
    /// [`subscription_capacity`](Self::subscription_capacity), so that the Core mounts'
    /// buffers follow it (async-nats does not tell).
    pub fn with_client(client: Client) -> Self {
        Self::with_connect(Connect::Client(client))
    }

    /// Declares a stream the app needs (its mounts' streams, its dead-letter streams, the
    /// streams its handlers publish to), in async-nats' [`stream::Config`]: at start-up,
    /// before any mount is checked, it is created when the server has none of that name, and
    /// otherwise checked: it must store every declared subject (a wildcard of its own may
    /// cover them) and have the declared retention. A stream that is there is never changed;
    /// its limits, storage and replicas are the operator's and are not compared. Streams are
    /// declared in the order given; one the app creates stays when start-up is refused later.
    ///
    /// A declaration that cannot work (a bad name, no subjects, a bad subject), a stream that
    /// does not fit, or one that cannot be created (its subjects overlap another stream's)
    /// stops start-up with [`StartError::Stream`], naming the stream.
    ///
    /// [`stream::Config`]: async_nats::jetstream::stream::Config
    #[must_use]
    pub fn stream(mut self, config: async_nats::jetstream::stream::Config) -> Self {
        self.streams.push(config);
        self
    }

    /// Mounts `handler` on `mount`: an async function of the delivery (`|d: Delivery|`), or of
    /// the delivery and its [`Context`](crate::Context) (`|d: Delivery, cx: Context|`), that
    /// returns an [`Outcome`](crate::Outcome), a [`Reply`](crate::Reply), or a `Result` of
    /// either; or any [`Handler`]. See [`IntoHandler`].
    #[must_use]
    pub fn mount<Args>(self, mount: Mount, handler: impl IntoHandler<Args>) -> Self {
        let limit = Some(mount.handler_time_limit);
        self.push(mount, Arc::new(handler.into_handler()), limit)
    }

    /// Adds `handler` on `mount`, behind its key's turns when the mount declares a key (rule
    /// 24); `limit` is the time limit the keyed handler applies to each run (`None` where the
    /// handler bounds its runs itself).
    fn push(mut self, mount: Mount, handler: Arc<dyn Handler>, limit: Option<Duration>) -> Self {
        let handler: Arc<dyn Handler> = match &mount.key {
            Some(key) => {
                let terms = KeyTerms {
                    mount: crate::support::names::intern(mount.name()),
                    limit,
                    timer: Timer::of::<R>(),
                };
                Arc::new(Keyed::new(handler, key.clone(), terms))
            }
            None => handler,
        };
        self.mounts.push((mount, handler));
        self
    }

    /// Mounts a typed handler: the payload is decoded as JSON into `T`. A payload that does not
    /// decode goes straight to the at-limit path (dead-lettered if the mount has a dead-letter
    /// subject, otherwise `+TERM` on JetStream and let go on Core); see [`Json`](crate::Json).
    /// It is [`mount_typed`](Self::mount_typed) with [`JsonCodec`](crate::JsonCodec).
    ///
    /// `handler` is `|value: T, d: Delivery|` or `|value: T, d: Delivery, cx: Context|` (see
    /// [`IntoJsonHandler`]).
    #[must_use]
    pub fn mount_json<T, Args>(
        self,
        mut mount: Mount,
        handler: impl IntoJsonHandler<T, Args>,
    ) -> Self {
        mount.described.content_type = Some(JsonCodec.content_type());
        self.mount(mount, handler.into_json_handler())
    }

    /// Mounts a typed handler whose payloads are decoded into `T` with `codec`
    /// (`app.mount_typed(mount, MessagePack, |order: Order, d: Delivery| async move { … })`,
    /// with the cargo feature `msgpack`; [`Codec`](crate::Codec) lists the codecs). A payload
    /// that does not decode goes straight to the at-limit path, as with
    /// [`mount_json`](Self::mount_json): dead-lettered if the mount has a dead-letter subject
    /// (`Ruststream-Reason: undecodable`), otherwise `+TERM` on JetStream and let go on Core,
    /// whatever the attempt; see [`Typed`](crate::Typed). The app's AsyncAPI document gives
    /// the mount's messages the codec's content type.
    ///
    /// `handler` is `|value: T, d: Delivery|` or `|value: T, d: Delivery, cx: Context|` (see
    /// [`IntoTypedHandler`]). What it publishes through its [`Context`](crate::Context) and
    /// replies is encoded as it says there, not with the mount's codec:
    /// [`Context::publish_encoded`](crate::Context::publish_encoded) and
    /// [`ReplyAs`](crate::ReplyAs) take a codec.
    #[must_use]
    pub fn mount_typed<C: Codec, T, Args>(
        self,
        mut mount: Mount,
        codec: C,
        handler: impl IntoTypedHandler<C, T, Args>,
    ) -> Self {
        mount.described.content_type = Some(codec.content_type());
        self.mount(mount, handler.into_typed_handler(codec))
    }

    /// Mounts a batch handler on a batch mount (one that declares [`Mount::batch`]): `handler`
    /// is an async function of a [`Batch`](crate::Batch) of raw members
    /// (`|batch: Batch| async move { … }`, each member's value its payload), returning one
    /// outcome for every member or one per member (see [`IntoBatchHandled`]). Each member is
    /// settled as a single delivery with its outcome would be (rule 23).
    #[must_use]
    pub fn mount_batch<F, Fut>(self, mount: Mount, handler: F) -> Self
    where
        F: Fn(Batch) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: IntoBatchHandled,
    {
        self.batch_handler(mount, handler, batch::raw())
    }

    /// Mounts a typed batch handler on a batch mount (one that declares [`Mount::batch`]):
    /// each member's payload is decoded as JSON into `T` (`|batch: Batch<Payment>| async move {
    /// … }`). A member whose payload does not decode never joins a batch: it takes the at-limit
    /// path alone (rule 17), and the rest go on. See [`mount_batch`](Self::mount_batch). It is
    /// [`mount_typed_batch`](Self::mount_typed_batch) with [`JsonCodec`](crate::JsonCodec).
    #[must_use]
    pub fn mount_json_batch<T, F, Fut>(self, mount: Mount, handler: F) -> Self
    where
        T: serde::de::DeserializeOwned + Send + 'static,
        F: Fn(Batch<T>) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: IntoBatchHandled,
    {
        self.mount_typed_batch(mount, JsonCodec, handler)
    }

    /// Mounts a typed batch handler on a batch mount (one that declares [`Mount::batch`]):
    /// each member's payload is decoded into `T` with `codec`, as in
    /// [`mount_typed`](Self::mount_typed) (`app.mount_typed_batch(mount, Cbor, |batch:
    /// Batch<Payment>| async move { … })`, with the cargo feature `cbor`). A member whose
    /// payload does not decode never joins a batch: it takes the at-limit path alone (rule
    /// 17), and the rest go on. See [`mount_batch`](Self::mount_batch).
    #[must_use]
    pub fn mount_typed_batch<C, T, F, Fut>(self, mut mount: Mount, codec: C, handler: F) -> Self
    where
        C: Codec,
        T: serde::de::DeserializeOwned + Send + 'static,
        F: Fn(Batch<T>) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: IntoBatchHandled,
    {
        mount.described.content_type = Some(codec.content_type());
        self.batch_handler(mount, handler, batch::typed(codec))
    }

    /// Mounts `handler` as a [`BatchHandler`] whose members are decoded by `decode`.
    fn batch_handler<T, F, Fut>(self, mut mount: Mount, handler: F, decode: Decode<T>) -> Self
    where
        T: Send + 'static,
        F: Fn(Batch<T>) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: IntoBatchHandled,
    {
        mount.takes_batches = true;
        let (max, max_wait) = mount.batch.unwrap_or((1, Duration::ZERO));
        let terms = BatchTerms {
            mount: crate::support::names::intern(mount.name()),
            max,
            max_wait,
            concurrency: mount.concurrency.get(),
            limit: mount.handler_time_limit,
            timer: Timer::of::<R>(),
        };
        let handler = BatchHandler::new(handler, decode, terms);
        self.push(mount, Arc::new(handler), None)
    }

    /// How long a graceful shutdown lets in-flight handlers finish and delayed Core copies
    /// fall due (default [`DEFAULT_GRACE_PERIOD`]). `Duration::MAX` waits for them however long
    /// they take.
    #[must_use]
    pub fn grace_period(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How often each JetStream mount's consumer is read again for a changed `ack_wait` or
    /// `BackOff`, which its leases then follow (default [`CONSUMER_REREAD`], 5 s; rule 16).
    /// Each read is one request per JetStream mount. Until a shortened `ack_wait` is read, a
    /// handler running longer than the new `ack_wait` may be redelivered and run again.
    /// `Duration::MAX` never reads them again.
    #[must_use]
    pub fn consumer_reread(mut self, every: Duration) -> Self {
        self.consumer_reread = every;
        self
    }

    /// How many messages each subscription holds, received and not yet handled: async-nats'
    /// own channel per subscription (its `ConnectOptions::subscription_capacity`, set on the
    /// app's connection) and, unless a Core mount sets its own
    /// [`subscription_buffer`](Mount::subscription_buffer), each Core mount's buffer (rule
    /// 21). Default [`DEFAULT_SUBSCRIPTION_BUFFER`](crate::DEFAULT_SUBSCRIPTION_BUFFER),
    /// 65,536, async-nats' own default, for both.
    ///
    /// Raise it for bursts a Core mount must absorb: a mount's buffer that stayed at the
    /// default below a raised client capacity would drop (counted, logged) what the client
    /// held. On an app made [`with_client`](Self::with_client), the client's capacity is
    /// whatever it was built with: this sets the mounts' buffers only, so give it the value
    /// the client was built with. JetStream mounts have no use for it: they fetch what their
    /// handler slots and prefetch take.
    #[must_use]
    pub fn subscription_capacity(mut self, messages: NonZeroUsize) -> Self {
        self.subscription_capacity = Some(messages);
        self
    }

    /// How long the connection to NATS may stay down before the app ends with an error
    /// (default [`DEFAULT_DISCONNECTED_LIMIT`], 2 minutes; rule 20). While it is down no
    /// mount consumes: a warning names the mounts every 10 s, and past the limit
    /// [`Running::until_signal`] returns [`AppFailed`], so that whatever runs the process
    /// restarts it and shows the outage. Raise it to ride out longer maintenance;
    /// `Duration::MAX` never ends the app for it.
    #[must_use]
    pub fn disconnected_limit(mut self, limit: Duration) -> Self {
        self.disconnected_limit = limit;
        self
    }

    /// Calls `observer` after every settlement, from the task that settled it. Keep it quick.
    /// A panic in it is caught and logged as an error; the delivery stays settled and the
    /// mount goes on.
    ///
    /// Each call adds an observer (metrics beside a test's record, say); they are called in
    /// the order they were added, and a panic in one still lets the ones after it run before
    /// it is logged.
    #[must_use]
    pub fn on_settled(mut self, observer: impl Fn(&Settled) + Send + Sync + 'static) -> Self {
        self.observer = Some(match self.observer.take() {
            None => Arc::new(observer),
            Some(before) => Arc::new(move |settled: &Settled| {
                let first =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| before(settled)));
                observer(settled);
                if let Err(panic) = first {
                    std::panic::resume_unwind(panic);
                }
            }),
        });
        self
    }

    /// Declares the app a NATS service (the micro protocol): from start-up until its shutdown
    /// begins it answers `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS`, so that `nats micro ls`,
    /// `nats micro info` and `nats micro stats` (or any client of the protocol) see it, its
    /// endpoints and their counts. Every Core mount is an endpoint, named as the mount, unless
    /// it says [`Mount::service_endpoint`]`(false)`; JetStream mounts are not. An endpoint
    /// without a [`queue_group`](Mount::queue_group) of its own subscribes in
    /// [`DEFAULT_SERVICE_QUEUE_GROUP`](crate::DEFAULT_SERVICE_QUEUE_GROUP) (`"q"`), as the
    /// protocol's endpoints do, so that the instances of one service share its requests. See
    /// [`Service`] for the responses and [`Mount::service_endpoint`] for what the stats count.
    /// A second call replaces the first.
    ///
    /// ```no_run
    /// # use ruststream_adapter::{App, Service};
    /// # fn as_service<R: ruststream_adapter::Runtime>(app: App<R>) -> App<R> {
    /// app.service(Service::new("orders", "1.2.0").description("takes orders"))
    /// # }
    /// ```
    ///
    /// The responder answers on a second client of its own (made from the app's URL and
    /// options), so that a message on `$SRV.>` that brings a client down (async-nats 0.51
    /// panics on a header value with a lone CR; `$SRV.PING` reaches every service instance of
    /// the account) costs only that client a reconnection and never counts toward the app's
    /// recoveries. An app made [`with_client`](Self::with_client) answers on that client, and
    /// keeps that exposure: such a message costs it a recovery, as one on a mount's subject
    /// does. `$SRV` floods are bounded (see [`Service`]).
    ///
    /// [`start`](Self::start) refuses with [`StartError::Service`], before it connects, a
    /// service whose name or version breaks the protocol's rules, one past
    /// [`MAX_SERVICE_NAME_BYTES`](crate::MAX_SERVICE_NAME_BYTES),
    /// [`MAX_SERVICE_DESCRIPTION_BYTES`](crate::MAX_SERVICE_DESCRIPTION_BYTES) or
    /// [`MAX_SERVICE_METADATA_BYTES`](crate::MAX_SERVICE_METADATA_BYTES), and an endpoint
    /// whose mount name breaks the protocol's rule for endpoint names.
    #[must_use]
    pub fn service(mut self, service: Service) -> Self {
        self.service = Some(service);
        self
    }

    /// The mounts, in the order they were added (what start-up will check and consume from;
    /// [`Mount::policy`] reads a mount's settings back).
    pub fn mounts(&self) -> impl Iterator<Item = &Mount> {
        self.mounts.iter().map(|(mount, _)| mount)
    }

    /// Validates every mount, connects, checks the server side, and starts consuming.
    ///
    /// Nothing is consumed until every mount has passed: the pure rules first (before connecting),
    /// then the server-side ones (the stream and consumer, the consumer's ack policy and
    /// `max_deliver`, whether a stream stores each dead-letter subject). Warnings (a consumer
    /// `BackOff`, a Core dead-letter subject no stream stores) are logged.
    ///
    /// # Errors
    /// [`StartError::Runtime`] when the app's NATS thread cannot be started (or, on tokio, `start`
    /// is awaited outside a Tokio runtime), [`StartError::Declaration`] or
    /// [`StartError::DuplicateMount`] for a bad declaration, [`StartError::Service`] for a
    /// service whose name or version breaks the micro protocol's rules (or whose `$SRV`
    /// subscriptions cannot be made), [`StartError::Setting`] for a
    /// concurrency out of range, [`StartError::ServerUrl`] for a URL that does not parse,
    /// [`StartError::Connect`], and [`StartError::Server`] when the server lacks or refuses what a
    /// mount needs.
    pub async fn start(self) -> Result<Running<R>, StartError> {
        let health = self.health.clone();
        health.starting(self.mounts.iter().map(|(m, _)| m.name().to_owned()));
        let started = match R::Reactor::start().map_err(StartError::Runtime) {
            Ok(reactor) => {
                let started = reactor.enter(self.start_here(reactor.clone())).await;
                if started.is_err() {
                    reactor.stop();
                }
                started
            }
            Err(e) => Err(e),
        };
        match &started {
            Ok(_) => {
                health.connection(true);
                health.mounts(None, MountState::Consuming);
            }
            Err(e) => health.stopped(Some(e.to_string())),
        }
        started
    }

    /// A watch on the app's [`Health`](crate::Health), from now on: while it starts (every
    /// mount [`MountState::Starting`], not ready), once it consumes (ready), through
    /// recoveries (rule 20: the mounts concerned reconnecting, not ready), and after it stops
    /// or fails. For readiness and liveness probes: see [`Health::ready`](crate::Health::ready)
    /// and [`Health::live`](crate::Health::live).
    pub fn health(&self) -> HealthWatch {
        self.health.watch()
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` (and `/asyncapi.json` when asked) on the
    /// endpoint's address from the start of [`start`](Self::start) until the app's
    /// [`Running`] is shut down or dropped: a readiness probe sees 503 while the app starts. See
    /// [`OpsEndpoint`](crate::OpsEndpoint) for what each path answers.
    ///
    /// ```no_run
    /// # use ruststream_adapter::{App, OpsEndpoint};
    /// # fn with_ops<R: ruststream_adapter::Runtime>(app: App<R>) -> App<R> {
    /// app.ops(OpsEndpoint::bind("0.0.0.0:9464"))
    /// # }
    /// ```
    ///
    /// Start-up fails with [`StartError::Ops`] when the address cannot be bound, or the
    /// process installed a `metrics` recorder of its own (the endpoint installs a Prometheus
    /// one, shared by every app of the process that has an endpoint).
    #[cfg(feature = "ops")]
    #[must_use]
    pub fn ops(mut self, endpoint: ops::OpsEndpoint) -> Self {
        self.ops = Some(endpoint);
        self
    }

    async fn start_here(mut self, reactor: R::Reactor) -> Result<Running<R>, StartError> {
        // First, so that probes see the app start, and the recorder is there before any
        // mount registers its metrics.
        #[cfg(feature = "ops")]
        let ops = match self.ops.take() {
            Some(endpoint) => {
                let document = match endpoint.asyncapi_info() {
                    Some((title, version)) => Some(self.asyncapi(title, version)?.to_string()),
                    None => None,
                };
                Some(endpoint.serve(self.health.watch(), document)?)
            }
            None => None,
        };
        if let Some(problem) = self.service.as_ref().and_then(Service::problem) {
            return Err(StartError::Service(problem));
        }
        let mut declared = validate(self.mounts)?;
        discovery::mark_endpoints(self.service.as_ref(), &mut declared)?;
        if let (Some(capacity), Connect::Url { options, .. }) =
            (self.subscription_capacity, &mut self.connect)
        {
            **options = std::mem::take(&mut **options).subscription_capacity(capacity.get());
        }
        // How to connect again when the client dies (rule 20): the application's own client
        // cannot be made again.
        let reconnect = match &self.connect {
            Connect::Url { url, options } => Some((url.clone(), (**options).clone())),
            Connect::Client(_) => None,
        };
        check_all(&self.streams)?;
        let (client, owns_client) = connect(self.connect).await?;
        if !self.streams.is_empty() {
            let js = async_nats::jetstream::new(client.clone());
            for stream in &self.streams {
                declare(&js, stream).await?;
            }
        }
        // Before the mounts subscribe; `subscribe` waits for the server's round trip, so that
        // once `start` returns `$SRV` requests are answered. The responder answers on a client of its own when the app can make one (see
        // `discovery::Source`), so that `$SRV` traffic never costs the mounts their client.
        let service = match self.service.take() {
            Some(service) => {
                let id = discovery::instance_id();
                let own = match &reconnect {
                    Some((url, options)) => {
                        let options = discovery::own_options(options.clone());
                        let own = startup::connect_url(url, options.clone()).await?;
                        Some((url.clone(), options, own))
                    }
                    None => None,
                };
                let answering = own.as_ref().map_or(&client, |(_, _, own)| own);
                let requests = discovery::subscribe(answering, service.name(), &id).await?;
                Some((service, id, requests, own))
            }
            None => None,
        };
        let checked = check_mounts::<R>(&client, declared.clone(), Overlaps::Check).await?;

        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (finish_tx, finish_rx) = watch::channel(None);
        let (delay_tx, delay_rx) = mpsc::unbounded_channel();
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        let (reconnected_tx, reconnected_rx) = watch::channel(0);
        let clients = Arc::new(watch::Sender::new(client.clone()));
        let launcher = Launcher::<R> {
            reactor: reactor.clone(),
            delayed: delay_tx,
            leases: Arc::new(LeaseRoom::default()),
            observer: self.observer,
            shutdown: shutdown_rx.clone(),
            ended: ended_tx,
            generation: Arc::default(),
            reconnected: reconnected_rx,
            clients: clients.subscribe(),
            subscription_buffer: self
                .subscription_capacity
                .unwrap_or(crate::api::mount::DEFAULT_SUBSCRIPTION_BUFFER_NONZERO),
            health: self.health.clone(),
        };
        let records: Arc<[MountRecord]> = checked.iter().map(MountRecord::new).collect();
        let tasks: Vec<Option<R::Task>> = checked
            .into_iter()
            .enumerate()
            .map(|(index, checked)| Some(launcher.launch(index, checked, &client, &records[index])))
            .collect();
        let tasks = Arc::new(Mutex::new(tasks));
        let failed = Arc::new(watch::Sender::new(None));
        let recoveries = Arc::default();

        let lease_task = R::spawn(lease_loop::<R>(
            launcher.leases.clone(),
            clients.subscribe(),
            finish_rx.clone(),
        ));
        let (lost_tx, lost_rx) = oneshot::channel();
        let losses = records.iter().map(|m| m.losses.clone()).collect();
        let delay_clients = clients.subscribe();
        let copy_subjects = declared
            .iter()
            .map(|(_, _, policy)| policy.copy_subject().cloned())
            .collect();
        let names = records.iter().map(|m| m.name).collect();
        let delay_task = R::spawn(async move {
            let lost = delay_loop::<R>(
                delay_clients,
                delay_rx,
                finish_rx,
                losses,
                copy_subjects,
                names,
            )
            .await;
            let _ = lost_tx.send(lost);
        });
        if let Some((service, id, requests, own)) = service {
            let discovery = discovery::Discovery::new(service, id, &declared, &records);
            let source = match own {
                Some((url, options, client)) => discovery::Source::Own {
                    url,
                    options: Box::new(options),
                    client,
                },
                None => discovery::Source::Shared(clients.subscribe()),
            };
            // Detached: it ends when shutdown begins (or the app is dropped).
            let _ = R::spawn_next_to(
                &reactor,
                LoopThread::Connection,
                discovery.serve::<R>(requests, source, shutdown_rx.clone()),
            );
        }
        let supervisor = Supervisor::<R> {
            launcher,
            connect: reconnect,
            clients: clients.clone(),
            declared,
            records: records.clone(),
            tasks: tasks.clone(),
            ended: ended_rx,
            shutdown: shutdown_rx,
            failed: failed.clone(),
            recoveries: Arc::clone(&recoveries),
            consumer_reread: self.consumer_reread,
            reconnected: reconnected_tx,
            disconnected_limit: self.disconnected_limit,
            health: self.health.clone(),
        };
        let supervisor = R::spawn_next_to(&reactor, LoopThread::Connection, supervisor.run());
        tracing::info!(mounts = records.len(), "ruststream started");

        Ok(Running {
            reactor,
            clients,
            owns_client,
            shutdown: Arc::new(shutdown_tx),
            finish: finish_tx,
            mounts: records,
            tasks,
            supervisor,
            failed,
            recoveries,
            delay_task,
            lease_task,
            lost: lost_rx,
            grace: self.grace,
            health: self.health.clone(),
            #[cfg(feature = "ops")]
            ops,
        })
    }

    /// Starts the app and runs it until SIGINT or SIGTERM, then shuts down gracefully; a
    /// second signal ends the grace period at once (see [`Running::until_signal`]).
    ///
    /// # Errors
    /// [`RunError::Start`] as [`start`](Self::start); [`RunError::Failed`] when the app
    /// stopped on its own (see [`Running::until_signal`]): the process should then exit
    /// non-zero.
    pub async fn run(self) -> Result<ShutdownReport, RunError> {
        Ok(self.start().await?.until_signal().await?)
    }
}

/// Why [`App::run`] ended with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The app did not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The app started, then could not go on and stopped on its own.
    #[error(transparent)]
    Failed(#[from] AppFailed),
}
