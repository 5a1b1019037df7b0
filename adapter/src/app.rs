//! The app: connection, mounts, start-up validation, and shutdown.

use std::collections::HashSet;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{AckPolicy as JsAckPolicy, pull};
use async_nats::jetstream::context::ConsumerInfoErrorKind;
use async_nats::{Client, ConnectOptions};
use futures_util::FutureExt;
use futures_util::future::FusedFuture;
use ruststream_core::{AckPolicy, ConsumerFacts, DeclarationError, Descriptor, MountPolicy};
use serde::de::DeserializeOwned;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};

use crate::exec::{DeadLetterSink, LiteralSubject, MountContext, Observer, Settled, intern};
use crate::handler::{Handler, Json};
use crate::mount::Mount;
use crate::runtime::{Reactor, Runtime};
use crate::servers::ServerList;
use crate::worker::{core_loop, delay_loop, jetstream_loop};
use ruststream_core::Outcome;

/// The longest a dead-letter publish waits for its stream's confirmation: async-nats' own
/// default for publish acks, 5 seconds.
const DEFAULT_CONFIRM: Duration = Duration::from_secs(5);

/// The shortest confirmation wait, for consumers with a very short `ack_wait`.
const MIN_CONFIRM: Duration = Duration::from_millis(50);

/// How long the final flush and drain of a shutdown may take.
const FINAL_FLUSH: Duration = Duration::from_secs(5);

/// How long a graceful shutdown lets in-flight handlers finish, by default: 10 seconds.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(10);

/// Why the app did not start. Every error about a mount names it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A declaration breaks a rule of SETTLEMENT.md (7, 10, 11, or the server-side ones).
    #[error(transparent)]
    Declaration(#[from] DeclarationError),
    /// Two mounts have the same name.
    #[error("two mounts are named `{0}`; mount names must be unique")]
    DuplicateMount(String),
    /// The server URL (or one of a comma-separated list) does not parse. The message names
    /// the entry and the part that is wrong, never the URL or a credential.
    #[error("bad server URL: {0}")]
    ServerUrl(String),
    /// The connection could not be made. The message never holds the URL or credentials.
    #[error("cannot connect to NATS: {0}")]
    Connect(String),
    /// The runtime the NATS connection needs could not be started (on smol: the app's Tokio
    /// reactor thread).
    #[error("cannot start the runtime: {0}")]
    Runtime(String),
    /// The server refused or lacks what a mount needs (its stream, its consumer, a
    /// subscription).
    #[error("mount `{mount}`: {reason}")]
    Server {
        /// The mount's name.
        mount: String,
        /// What went wrong.
        reason: String,
    },
}

fn server_error(mount: &str, reason: impl std::fmt::Display) -> StartError {
    StartError::Server {
        mount: mount.to_owned(),
        reason: reason.to_string(),
    }
}

enum Connect {
    Url {
        url: String,
        options: Box<ConnectOptions>,
    },
    Client(Client),
}

/// A set of mounts to run against one NATS connection, on the runtime `R`. See the crate docs
/// for an example; applications name it through their runtime crate's alias
/// (`ruststream_tokio::App`, `ruststream_smol::App`).
pub struct App<R> {
    connect: Connect,
    mounts: Vec<(Mount, Arc<dyn Handler>)>,
    grace: Duration,
    observer: Option<Observer>,
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
            grace: DEFAULT_GRACE_PERIOD,
            observer: None,
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
    pub fn with_options(url: &str, options: ConnectOptions) -> Self {
        Self::with_connect(Connect::Url {
            url: url.to_owned(),
            options: Box::new(options),
        })
    }

    /// An app on an existing client. Shutdown flushes it but does not drain it: the
    /// application owns it.
    pub fn with_client(client: Client) -> Self {
        Self::with_connect(Connect::Client(client))
    }

    /// Mounts `handler` on `mount`.
    #[must_use]
    pub fn mount(mut self, mount: Mount, handler: impl Handler) -> Self {
        self.mounts.push((mount, Arc::new(handler)));
        self
    }

    /// Mounts a typed handler: the payload is decoded as JSON into `T`. A payload that does
    /// not decode goes straight to the at-limit path (dead-lettered if the mount has a
    /// dead-letter subject, otherwise `+TERM` on JetStream and let go on Core); see [`Json`].
    #[must_use]
    pub fn mount_json<T, F, Fut>(self, mount: Mount, handler: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(T, crate::Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        self.mount(mount, Json::new(handler))
    }

    /// How long a graceful shutdown lets in-flight handlers finish and delayed Core copies
    /// fall due (default [`DEFAULT_GRACE_PERIOD`]).
    #[must_use]
    pub fn grace_period(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Calls `observer` after every settlement, from the task that settled it. Keep it quick.
    /// A panic in it is caught and logged as an error; the delivery stays settled and the
    /// mount goes on.
    #[must_use]
    pub fn on_settled(mut self, observer: impl Fn(&Settled) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// Validates every mount, connects, checks the server side, and starts consuming.
    ///
    /// Nothing is consumed until every mount has passed: the pure rules first (before
    /// connecting), then the server-side ones (the stream and consumer, the consumer's ack
    /// policy and `max_deliver`, whether a stream stores each dead-letter subject).
    /// Warnings (a consumer `BackOff`, a Core dead-letter subject no stream stores) are logged.
    ///
    /// # Errors
    /// [`StartError::Declaration`] or [`StartError::DuplicateMount`] for a bad declaration,
    /// [`StartError::ServerUrl`] for a URL that does not parse, [`StartError::Connect`], and [`StartError::Server`] when the server lacks or refuses
    /// what a mount needs.
    pub async fn start(self) -> Result<Running<R>, StartError> {
        let reactor = R::Reactor::start().map_err(StartError::Runtime)?;
        let started = reactor.enter(self.start_here(reactor.clone())).await;
        if started.is_err() {
            reactor.stop();
        }
        started
    }

    async fn start_here(self, reactor: R::Reactor) -> Result<Running<R>, StartError> {
        let mut names = HashSet::new();
        let mut policies = Vec::with_capacity(self.mounts.len());
        for (mount, _) in &self.mounts {
            if !names.insert(mount.name().to_owned()) {
                return Err(StartError::DuplicateMount(mount.name().to_owned()));
            }
            policies.push(mount.declaration.validate()?);
        }

        let (client, owns_client) = match self.connect {
            Connect::Client(client) => (client, false),
            Connect::Url { url, options } => {
                let servers = ServerList::parse(&url).map_err(StartError::ServerUrl)?;
                let options = servers.apply(*options);
                let client = options.connect(servers.addresses).await.map_err(|e| {
                    use async_nats::ConnectErrorKind as K;
                    let detail = match e.kind() {
                        // These sources name no address or credential.
                        K::Io | K::TimedOut | K::Dns => std::error::Error::source(&e)
                            .map(|s| format!("{}: {s}", e.kind()))
                            .unwrap_or_else(|| e.kind().to_string()),
                        other => other.to_string(),
                    };
                    StartError::Connect(detail)
                })?;
                (client, true)
            }
        };
        let js = async_nats::jetstream::new(client.clone());

        // Server-side checks, for every mount, before anything is consumed. The durables
        // created on the way are removed again if start-up is refused.
        let mut created = Vec::new();
        let checked = async {
            let mut prepared = Vec::with_capacity(self.mounts.len());
            for ((mount, handler), policy) in self.mounts.into_iter().zip(policies) {
                let name = mount.name().to_owned();
                let consumer = match policy.descriptor() {
                    Descriptor::JetStream { stream, consumer } => Some(
                        bind_consumer(&js, &mount, &policy, stream, consumer, &mut created).await?,
                    ),
                    Descriptor::CoreSubject(_) | Descriptor::CoreWildcard { .. } => None,
                };
                let config = consumer.as_ref().map(|c| &c.cached_info().config);
                let filter = config.map(|c| c.filter_subject.as_str());
                // A dead-letter publish on a JetStream mount must fail before the server
                // gives the delivery to another attempt: its confirmation waits at most half
                // `ack_wait`.
                let confirm_within =
                    config.map(|c| (c.ack_wait / 2).clamp(MIN_CONFIRM, DEFAULT_CONFIRM));
                let dead_letters = dead_letter_sink(&js, &policy, filter, confirm_within).await?;
                tracing::debug!(mount = %name, "mount checked");
                prepared.push((mount, handler, policy, consumer, dead_letters));
            }

            // Subscribe every Core mount before any loop starts, so that a refused
            // subscription stops start-up with nothing consumed.
            let mut subscriptions = Vec::with_capacity(prepared.len());
            for (mount, _, policy, _, _) in &prepared {
                subscriptions.push(subscribe(&client, mount, policy).await?);
            }
            // Once `start` returns, the server has processed every subscription: a message
            // published after that reaches the mounts.
            round_trip::<R>(&client).await?;
            Ok::<_, StartError>((prepared, subscriptions))
        }
        .await;
        let (prepared, subscriptions) = match checked {
            Ok(checked) => checked,
            Err(refused) => {
                remove_created(&created).await;
                return Err(refused);
            }
        };

        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (finish_tx, finish_rx) = watch::channel(None);
        let (delay_tx, delay_rx) = mpsc::unbounded_channel();
        let mut loops = Vec::new();
        let mut slots = Vec::new();
        let mount_count = prepared.len();

        for (index, ((mount, handler, policy, consumer, dead_letters), subscribers)) in
            prepared.into_iter().zip(subscriptions).enumerate()
        {
            let jetstream_names = match policy.descriptor() {
                Descriptor::JetStream { stream, consumer } => {
                    Some((intern(stream), intern(consumer)))
                }
                _ => None,
            };
            let literal_subject = literal_subject(&policy);
            let ctx = Arc::new(MountContext {
                index,
                name: intern(mount.name()),
                policy,
                handler,
                client: client.clone(),
                dead_letters,
                delayed: delay_tx.clone(),
                jetstream_names,
                literal_subject,
                observer: self.observer.clone(),
            });
            // A Core mount runs one delivery on its own task besides those holding a slot.
            let permits = match consumer {
                Some(_) => mount.concurrency.get(),
                None => mount.concurrency.get() - 1,
            };
            let semaphore = Arc::new(Semaphore::new(permits));
            slots.push((ctx.name, semaphore.clone(), permits));
            let task = match consumer {
                Some(consumer) => R::spawn_next_to(
                    &reactor,
                    jetstream_loop::<R>(
                        ctx,
                        consumer,
                        semaphore,
                        mount.concurrency,
                        shutdown_rx.clone(),
                    ),
                ),
                None => R::spawn_next_to(
                    &reactor,
                    core_loop::<R>(ctx, subscribers, semaphore, shutdown_rx.clone()),
                ),
            };
            loops.push(task);
        }
        drop(delay_tx);

        let (lost_tx, lost_rx) = oneshot::channel();
        let delay_client = client.clone();
        let delay_task = R::spawn(async move {
            let lost = delay_loop::<R>(delay_client, delay_rx, finish_rx, mount_count).await;
            let _ = lost_tx.send(lost);
        });
        tracing::info!(mounts = mount_count, "ruststream started");

        Ok(Running {
            reactor,
            client,
            owns_client,
            shutdown: Arc::new(shutdown_tx),
            finish: finish_tx,
            loops,
            delay_task,
            lost: lost_rx,
            slots,
            grace: self.grace,
        })
    }

    /// Starts the app and runs it until SIGINT or SIGTERM, then shuts down gracefully; a
    /// second signal ends the grace period at once (see [`Running::until_signal`]).
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn run(self) -> Result<ShutdownReport, StartError> {
        Ok(self.start().await?.until_signal().await)
    }
}

/// An error of the server's JetStream API, said plainly when nothing answered it: a server
/// without JetStream enabled has no responder for `$JS.API` (async-nats then says "requested
/// JetStream resource does not exist", which reads as a missing stream).
fn jetstream_error(e: &(dyn std::error::Error + 'static)) -> String {
    use async_nats::jetstream::context::{RequestError, RequestErrorKind};
    let no_responders = std::iter::successors(Some(e), |e| e.source())
        .filter_map(|e| e.downcast_ref::<RequestError>())
        .any(|r| r.kind() == RequestErrorKind::NoResponders);
    if no_responders {
        "JetStream is not enabled on the server: nothing answers its API (start nats-server with `-js`)"
            .to_owned()
    } else {
        e.to_string()
    }
}

/// Removes the durables a refused start-up created, so that a refusal leaves the server as
/// it found it. One that cannot be removed is logged.
async fn remove_created(created: &[(async_nats::jetstream::stream::Stream, String)]) {
    for (stream, consumer) in created {
        match stream.delete_consumer(consumer).await {
            Ok(_) => {
                tracing::info!(%consumer, "start-up refused: the durable it created is removed")
            }
            Err(e) => {
                tracing::warn!(%consumer, error = %e, "start-up refused: the durable it created could not be removed")
            }
        }
    }
}

/// Binds the mount's durable, or creates it (explicit ack, the mount's `ack_wait`, no
/// `max_deliver`; recorded in `created`), and checks it against rule 11. An existing
/// consumer is never changed.
async fn bind_consumer(
    js: &async_nats::jetstream::Context,
    mount: &Mount,
    policy: &MountPolicy,
    stream: &str,
    consumer: &str,
    created: &mut Vec<(async_nats::jetstream::stream::Stream, String)>,
) -> Result<async_nats::jetstream::consumer::PullConsumer, StartError> {
    let name = mount.name();
    let stream_handle = js
        .get_stream(stream)
        .await
        .map_err(|e| server_error(name, format!("stream `{stream}`: {}", jetstream_error(&e))))?;
    let config = pull::Config {
        durable_name: Some(consumer.to_owned()),
        ack_policy: JsAckPolicy::Explicit,
        ack_wait: mount.ack_wait,
        max_deliver: -1,
        filter_subject: mount.filter_subject.clone().unwrap_or_default(),
        ..Default::default()
    };
    let refused = |e: &(dyn std::error::Error + 'static)| {
        server_error(
            name,
            format!(
                "consumer `{consumer}` on stream `{stream}`: {}",
                jetstream_error(e)
            ),
        )
    };
    let bound = match stream_handle.consumer_info(consumer).await {
        Ok(_) => stream_handle
            .get_consumer::<pull::Config>(consumer)
            .await
            .map_err(|e| refused(&*e))?,
        Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => {
            let bound = stream_handle
                .create_consumer(config)
                .await
                .map_err(|e| refused(&e))?;
            created.push((stream_handle, consumer.to_owned()));
            bound
        }
        Err(e) => return Err(refused(&e)),
    };
    let info = &bound.cached_info().config;
    let facts = ConsumerFacts {
        ack_policy: ack_policy(info.ack_policy),
        max_deliver: info.max_deliver,
        backoff: !info.backoff.is_empty(),
    };
    for warning in policy.check_consumer(&facts)? {
        tracing::warn!("{warning}");
    }
    Ok(bound)
}

/// The core's view of an async-nats ack policy, through its JSON name. async-nats' enum grows
/// variants behind its `server_2_*` features (`FlowControl` with `server_2_14`, on by
/// default), which a `match` here could not name without breaking the build for users with
/// other features; a name the core does not know is [`AckPolicy::Unknown`], refused as not
/// explicit.
fn ack_policy(policy: JsAckPolicy) -> AckPolicy {
    match serde_json::to_value(policy) {
        Ok(serde_json::Value::String(name)) => AckPolicy::from_name(&name),
        _ => AckPolicy::Unknown,
    }
}

/// Decides where the mount's dead letters go (rule 8): a JetStream publish where a stream
/// stores the subject; otherwise a refusal for a JetStream mount, a plain publish with a
/// warning for a Core mount. A JetStream mount whose dead letters would come back to it
/// through its own stream and filter is refused.
async fn dead_letter_sink(
    js: &async_nats::jetstream::Context,
    policy: &MountPolicy,
    consumer_filter: Option<&str>,
    confirm_within: Option<Duration>,
) -> Result<DeadLetterSink, StartError> {
    let Some(subject) = policy.dead_letter() else {
        return Ok(DeadLetterSink::Plain);
    };
    let stored_by = match js.stream_by_subject(subject.as_str()).await {
        Ok(stream) => Some(stream),
        Err(e) => {
            tracing::debug!(mount = policy.name(), %subject, error = %e, "no stream found for the dead-letter subject");
            None
        }
    };
    if let Some(warning) =
        policy.check_dead_letter_storage(stored_by.as_deref(), consumer_filter)?
    {
        tracing::warn!("{warning}");
    }
    Ok(match stored_by {
        Some(stream) => {
            tracing::debug!(mount = policy.name(), %subject, %stream, "dead letters stored by a stream");
            let mut js = js.clone();
            if let Some(limit) = confirm_within {
                js.set_timeout(limit);
            }
            DeadLetterSink::JetStream(Box::new(js))
        }
        None => DeadLetterSink::Plain,
    })
}

/// The literal subject a mount's deliveries come on (a Core subject, or a wildcard's copy
/// subject), kept once per process like the names, so that every delivery on it shares it
/// for free.
fn literal_subject(policy: &MountPolicy) -> LiteralSubject {
    let kept = |s: &ruststream_core::Subject| async_nats::Subject::from_static(intern(s.as_str()));
    match policy.descriptor() {
        Descriptor::CoreSubject(s) => LiteralSubject::Every(kept(s)),
        Descriptor::CoreWildcard { copy_subject, .. } => LiteralSubject::Some(kept(copy_subject)),
        Descriptor::JetStream { .. } => LiteralSubject::None,
    }
}

/// The Core subscriptions of a mount: its subject or wildcard, in its queue group if any,
/// and for a wildcard that does not match its copy subject, the copy subject too (rule 10).
/// None for a JetStream mount.
async fn subscribe(
    client: &Client,
    mount: &Mount,
    policy: &MountPolicy,
) -> Result<Vec<async_nats::Subscriber>, StartError> {
    let subjects: Vec<String> = match policy.descriptor() {
        Descriptor::CoreSubject(s) => vec![s.to_string()],
        Descriptor::CoreWildcard { wildcard, .. } => std::iter::once(wildcard.to_string())
            .chain(policy.extra_subscription().map(ToString::to_string))
            .collect(),
        Descriptor::JetStream { .. } => Vec::new(),
    };
    let mut subscribers = Vec::with_capacity(subjects.len());
    for subject in subjects {
        let subscriber = match &mount.queue_group {
            Some(group) => client.queue_subscribe(subject.clone(), group.clone()).await,
            None => client.subscribe(subject.clone()).await,
        }
        .map_err(|e| server_error(mount.name(), format!("subscribe to `{subject}`: {e}")))?;
        subscribers.push(subscriber);
    }
    Ok(subscribers)
}

/// How long the start-up round trip with the server may take.
const ROUND_TRIP_TIMEOUT: Duration = Duration::from_secs(10);

/// Waits until the server has processed everything this client sent so far.
///
/// async-nats' `flush` only writes the client's buffer to the socket; it does not wait for the
/// server. The server handles one connection's operations in order, so a message the client
/// publishes to itself comes back only after every earlier `SUB` took effect.
async fn round_trip<R: Runtime>(client: &Client) -> Result<(), StartError> {
    use futures_util::StreamExt;
    let failed = |what: &str| StartError::Connect(format!("no round trip with the server: {what}"));
    let inbox = client.new_inbox();
    let mut echo = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| failed(&e.to_string()))?;
    client
        .publish(inbox, bytes::Bytes::new())
        .await
        .map_err(|e| failed(&e.to_string()))?;
    client
        .flush()
        .await
        .map_err(|e| failed(&e.kind().to_string()))?;
    match R::timeout(ROUND_TRIP_TIMEOUT, echo.next()).await {
        Some(Some(_)) => Ok(()),
        Some(None) => Err(failed("the subscription closed")),
        None => Err(failed("timed out")),
    }
}

/// A handle that asks a running app to shut down gracefully. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ShutdownHandle(Arc<watch::Sender<bool>>);

impl ShutdownHandle {
    /// Asks the app to stop: it stops consuming, and [`Running::until_signal`] returns after
    /// the graceful shutdown.
    pub fn shutdown(&self) {
        self.0.send_replace(true);
    }
}

/// What a graceful shutdown left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Handlers still running at the end of the grace period, per mount: their JetStream
    /// deliveries come back after `ack_wait`; their Core deliveries are gone.
    pub abandoned: Vec<(String, usize)>,
    /// Delayed Core copies still waiting at the end of the grace period, per mount: lost, as
    /// SETTLEMENT.md says (rule 14).
    pub lost_copies: Vec<(String, usize)>,
    /// Why the app stopped on its own, if it did: the runtime the NATS connection ran on
    /// ended under it (only possible on smol, whose app owns a Tokio reactor thread).
    pub failure: Option<String>,
}

/// A started app, on the runtime `R` (named through the runtime crate's alias).
pub struct Running<R: Runtime> {
    reactor: R::Reactor,
    client: Client,
    owns_client: bool,
    shutdown: Arc<watch::Sender<bool>>,
    finish: watch::Sender<Option<Instant>>,
    loops: Vec<R::Task>,
    delay_task: R::Task,
    lost: oneshot::Receiver<Vec<usize>>,
    slots: Vec<(&'static str, Arc<Semaphore>, usize)>,
    grace: Duration,
}

impl<R: Runtime> std::fmt::Debug for Running<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field(
                "mounts",
                &self.slots.iter().map(|(n, _, _)| n).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> Running<R> {
    /// The NATS client the app runs on.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A handle to ask for shutdown from elsewhere.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.shutdown.clone())
    }

    /// Waits for SIGINT, SIGTERM, or a [`ShutdownHandle::shutdown`], then shuts down
    /// gracefully. A second SIGINT or SIGTERM during the shutdown ends its grace period at
    /// once: handlers still running are abandoned and delayed Core copies not yet due are
    /// lost, both reported as when the grace period runs out.
    ///
    /// Also returns if the runtime the NATS connection runs on ends under the app (on smol,
    /// its Tokio reactor thread): that is logged as an error and reported in
    /// [`ShutdownReport::failure`], and the app stops without waiting on the dead connection.
    pub async fn until_signal(self) -> ShutdownReport {
        let reactor = self.reactor.clone();
        reactor.enter(self.until_signal_here()).await
    }

    async fn until_signal_here(self) -> ShutdownReport {
        let mut asked = self.shutdown.subscribe();
        let failure = tokio::select! {
            signal = R::termination_signal() => {
                match signal {
                    Ok(name) => tracing::info!(signal = name, "shutting down"),
                    Err(e) => tracing::error!(error = %e, "cannot listen for signals; shutting down"),
                }
                None
            }
            _ = asked.wait_for(|stop| *stop) => {
                tracing::info!("shutdown requested");
                None
            }
            why = self.reactor.failed() => {
                tracing::error!(error = %why, "the app cannot go on; stopping");
                Some(why)
            }
        };
        let again = async {
            match R::termination_signal().await {
                Ok(name) => {
                    tracing::warn!(signal = name, "signalled again: the grace period ends now");
                }
                // Nothing to listen to: the grace period runs its course.
                Err(_) => std::future::pending().await,
            }
        };
        self.shutdown_here(failure, again).await
    }

    /// Stops the runtime the NATS connection runs on, as if it had died: on smol, the app's
    /// Tokio reactor thread; nothing on tokio. For tests of what follows that loss.
    #[doc(hidden)]
    pub fn stop_reactor(&self) {
        self.reactor.stop();
    }

    /// Shuts down gracefully (rule 14): stops consuming (no new pulls; Core subscriptions
    /// end; Core messages already received and not yet given to a handler are lost, as Core
    /// NATS cannot redeliver them, and their count is logged as a warning per mount), lets
    /// in-flight handlers finish and settle within the grace period, publishes
    /// delayed copies that fall due within it, flushes, and drains the connection if the app
    /// opened it. Logs what was left behind, and returns it.
    pub async fn shutdown(self) -> ShutdownReport {
        let reactor = self.reactor.clone();
        reactor
            .enter(self.shutdown_here(None, std::future::pending()))
            .await
    }

    /// The shutdown: `cut`, when it ends first, ends the grace period there.
    async fn shutdown_here(
        self,
        failure: Option<String>,
        cut: impl Future<Output = ()> + Send,
    ) -> ShutdownReport {
        // With the reactor gone, nothing that runs next to it can end: no grace period.
        let grace = if failure.is_some() {
            Duration::ZERO
        } else {
            self.grace
        };
        let mut grace_period = GracePeriod {
            deadline: R::now() + grace,
            cut: std::pin::pin!(cut.fuse()),
        };
        self.shutdown.send_replace(true);
        let mut report = ShutdownReport {
            failure,
            ..ShutdownReport::default()
        };
        // A mount loop ends once its current delivery does: a Core delivery that waits with
        // every slot taken runs on the loop itself. Past the grace period it is abandoned, as
        // are handlers still holding a slot.
        let mut loop_stuck = Vec::with_capacity(self.loops.len());
        for task in self.loops {
            loop_stuck.push(grace_period.within::<R, _>(R::join(task)).await.is_none());
        }
        for ((name, semaphore, total), stuck) in self.slots.iter().zip(loop_stuck) {
            let all = u32::try_from(*total).unwrap_or(u32::MAX);
            let done = grace_period
                .within::<R, _>(semaphore.acquire_many(all))
                .await;
            let running = match done {
                Some(_) => 0,
                None => total - semaphore.available_permits(),
            } + usize::from(stuck);
            if running > 0 {
                tracing::warn!(mount = %name, handlers = running, "grace period over with handlers still running");
                report.abandoned.push((name.to_string(), running));
            }
        }
        self.finish.send_replace(Some(grace_period.deadline));
        R::join(self.delay_task).await;
        if let Ok(lost) = self.lost.await {
            for ((name, _, _), n) in self.slots.iter().zip(lost) {
                if n > 0 {
                    tracing::warn!(mount = %name, copies = n, "delayed Core copies lost at shutdown");
                    report.lost_copies.push((name.to_string(), n));
                }
            }
        }
        // Nothing can reach the server once its connection's runtime is gone.
        if report.failure.is_none() {
            match R::timeout(FINAL_FLUSH, self.client.flush()).await {
                Some(Ok(())) => {}
                Some(Err(e)) => tracing::warn!(error = %e, "flush at shutdown failed"),
                None => tracing::warn!("flush at shutdown timed out"),
            }
            if self.owns_client {
                match R::timeout(FINAL_FLUSH, self.client.drain()).await {
                    Some(Ok(())) => {}
                    Some(Err(e)) => tracing::warn!(error = %e, "drain at shutdown failed"),
                    None => tracing::warn!("drain at shutdown timed out"),
                }
            }
        }
        self.reactor.stop();
        tracing::info!("ruststream stopped");
        report
    }
}

/// A shutdown's grace period: it ends at `deadline`, or earlier when `cut` ends (a second
/// signal).
struct GracePeriod<'c, F> {
    deadline: Instant,
    cut: Pin<&'c mut F>,
}

impl<F: FusedFuture<Output = ()>> GracePeriod<'_, F> {
    /// `wait`'s output if it ends within the grace period; `None` once the period is over,
    /// when it is cut short (from then on the deadline is now).
    async fn within<R: Runtime, T>(&mut self, wait: impl Future<Output = T> + Send) -> Option<T> {
        let left = self.deadline.saturating_duration_since(R::now());
        let cut = &mut self.cut;
        tokio::select! {
            biased;
            result = R::timeout(left, wait) => result,
            () = cut, if !cut.is_terminated() => {
                self.deadline = R::now();
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_policies_map_by_name_whatever_async_nats_features_are_on() {
        for name in ["none", "all", "explicit", "flow_control"] {
            // `flow_control` parses only where async-nats' `server_2_14` feature is on.
            if let Ok(policy) = serde_json::from_str::<JsAckPolicy>(&format!("\"{name}\"")) {
                assert_eq!(ack_policy(policy).name(), name);
            }
        }
        assert_eq!(ack_policy(JsAckPolicy::Explicit), AckPolicy::Explicit);
    }
}
