//! The app as a NATS service, by the micro protocol (ADR-32,
//! <https://github.com/nats-io/nats-architecture-and-design/blob/main/adr/ADR-32.md>): which of
//! its mounts are endpoints ([`mark_endpoints`]), and the responder that answers `$SRV.PING`,
//! `$SRV.INFO` and `$SRV.STATS` on the app's client ([`Discovery`]).
//!
//! The protocol is implemented here rather than with async-nats' `service` module, whose
//! endpoints own their subscriptions: a Core mount keeps its own subscription, loop and
//! settlement, and the responder only reads what the mount counts
//! ([`EndpointCounts`](crate::support::endpoint_counts::EndpointCounts)). Its wire format is
//! not settlement's, so it stays out of `ruststream-settlement`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_nats::{Client, ConnectOptions, Message, Subscriber};
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::SelectAll;
use ruststream_settlement::Descriptor;
use serde::Serialize;
use tokio::sync::watch;

use super::declarations::Declared;
use super::startup::{StartError, connect_url};
use crate::api::service::{DEFAULT_SERVICE_QUEUE_GROUP, Service, is_protocol_name};
use crate::runtime::Runtime;
use crate::state::record::MountRecord;
use crate::support::backoff::Backoff;
use crate::support::endpoint_counts::EndpointCounts;

/// The subjects' first token.
const PREFIX: &str = "$SRV";

/// How many requests each `$SRV` subscription of the responder's own client holds before
/// async-nats drops the next (its `subscription_capacity` on that client): a flood of `$SRV`
/// requests queues no further. The protocol's clients tolerate lost answers (a PING is
/// answered by whoever answers in time).
pub(crate) const PENDING: usize = 16;

/// How many `$SRV` requests the responder answers in one second at most; it drops the rest
/// (counted, and logged at warn at most once per [`DROPS_LOGGED_EVERY`]), so that a flood costs
/// the app's NATS thread a bounded share.
const ANSWERS_PER_SECOND: u32 = 500;

/// How often dropped `$SRV` requests are logged at most.
const DROPS_LOGGED_EVERY: Duration = Duration::from_secs(10);

/// How long connecting and subscribing a new client of the responder may take.
const PATIENCE: Duration = Duration::from_secs(5);

/// The three requests of the protocol, each on `$SRV.<VERB>`, `$SRV.<VERB>.<name>` and
/// `$SRV.<VERB>.<name>.<id>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Ping,
    Info,
    Stats,
}

impl Verb {
    const ALL: [Verb; 3] = [Verb::Ping, Verb::Info, Verb::Stats];

    fn token(self) -> &'static str {
        match self {
            Verb::Ping => "PING",
            Verb::Info => "INFO",
            Verb::Stats => "STATS",
        }
    }

    /// The verb of a request's subject (`$SRV.STATS.orders` is `Stats`).
    fn of(subject: &str) -> Option<Verb> {
        let token = subject.split('.').nth(1)?;
        Verb::ALL.into_iter().find(|verb| verb.token() == token)
    }
}

/// Decides which mounts are endpoints of the app's service, and gives those without a queue
/// group of their own the protocol's, [`DEFAULT_SERVICE_QUEUE_GROUP`]: every Core mount that
/// did not opt out ([`Mount::service_endpoint`](crate::api::mount::Mount::service_endpoint)),
/// in an app that declares a service. Every other mount's `service_endpoint` is turned off,
/// so that from here on it says whether the mount is an endpoint. Run after the declarations
/// are validated, before any mount subscribes (and so before the supervisor can subscribe one
/// again: it subscribes what this leaves, queue group and all).
///
/// # Errors
/// [`StartError::Service`] naming the first endpoint whose name breaks the protocol's rule for
/// endpoint names (`A-Z`, `a-z`, `0-9`, `-`, `_`, as async-nats' and Go micro's), and saying
/// how to mend it.
pub(crate) fn mark_endpoints(
    service: Option<&Service>,
    declared: &mut [Declared],
) -> Result<(), StartError> {
    for (mount, _, policy) in declared {
        let core = !matches!(policy.descriptor(), Descriptor::JetStream { .. });
        mount.service_endpoint &= service.is_some() && core;
        if mount.service_endpoint && !is_protocol_name(mount.name()) {
            return Err(StartError::Service(format!(
                "mount `{}` is an endpoint of service `{}`, and an endpoint's name must be one or more of A-Z, a-z, 0-9, `-` and `_` (the micro protocol's rule): rename the mount, or opt it out with Mount::service_endpoint(false)",
                mount.name(),
                service.map_or("", Service::name),
            )));
        }
        if mount.service_endpoint && mount.queue_group.is_none() {
            mount.queue_group = Some(DEFAULT_SERVICE_QUEUE_GROUP.to_owned());
        }
    }
    Ok(())
}

/// One endpoint, as `$SRV.INFO` and `$SRV.STATS` list it.
struct Endpoint {
    name: &'static str,
    /// The mount's subject, or its wildcard.
    subject: String,
    queue_group: String,
    counts: Arc<EndpointCounts>,
}

/// The endpoints among the app's mounts (those [`mark_endpoints`] left on), in the order the
/// mounts were added, with the counts their records keep.
fn endpoints(declared: &[Declared], records: &[MountRecord]) -> Vec<Endpoint> {
    declared
        .iter()
        .zip(records)
        .filter(|((mount, _, _), _)| mount.service_endpoint)
        .filter_map(|((mount, _, policy), record)| {
            let subject = match policy.descriptor() {
                Descriptor::CoreSubject(subject) => subject.to_string(),
                Descriptor::CoreWildcard { wildcard, .. } => wildcard.to_string(),
                Descriptor::JetStream { .. } => return None,
            };
            Some(Endpoint {
                name: record.name,
                subject,
                queue_group: mount
                    .queue_group
                    .clone()
                    .unwrap_or_else(|| DEFAULT_SERVICE_QUEUE_GROUP.to_owned()),
                counts: record.metrics.endpoint()?.clone(),
            })
        })
        .collect()
}

/// The `$SRV` subscriptions of one client, merged.
pub(crate) type Requests = SelectAll<Subscriber>;

/// Subscribes `client` to the nine subjects of service `name`, instance `id`: what the
/// responder answers; then waits for the server's round trip, so that once `start` returns
/// `$SRV` requests are answered.
///
/// # Errors
/// [`StartError::Service`] naming the subject that could not be subscribed to.
pub(crate) async fn subscribe(
    client: &Client,
    name: &str,
    id: &str,
) -> Result<Requests, StartError> {
    let mut requests = SelectAll::new();
    let refused = |subject: &str, e: &dyn std::fmt::Display| {
        StartError::Service(format!(
            "service `{name}`: cannot subscribe to `{subject}`: {e}"
        ))
    };
    for verb in Verb::ALL {
        let verb = verb.token();
        for subject in [
            format!("{PREFIX}.{verb}"),
            format!("{PREFIX}.{verb}.{name}"),
            format!("{PREFIX}.{verb}.{name}.{id}"),
        ] {
            let subscriber = client
                .subscribe(subject.clone())
                .await
                .map_err(|e| refused(&subject, &e))?;
            requests.push(subscriber);
        }
    }
    // The server has them once this returns (on a client of the responder's own, the app's
    // start-up round trip does not cover them).
    client
        .flush()
        .await
        .map_err(|e| refused(&format!("{PREFIX}.>"), &e))?;
    Ok(requests)
}

/// A fresh service instance id: a NUID, as the protocol's libraries make them.
pub(crate) fn instance_id() -> String {
    nuid::next().to_string()
}

/// The options of the responder's own client: the app's, with [`PENDING`] as its
/// subscription capacity.
pub(crate) fn own_options(options: ConnectOptions) -> ConnectOptions {
    options.subscription_capacity(PENDING)
}

/// The client the responder answers on.
pub(crate) enum Source {
    /// A client of its own, connected from the app's URL and options (with [`own_options`]),
    /// and connected again from them when it dies: a message on `$SRV` that brings a client
    /// down (a header value with a lone CR panics async-nats' connection task) costs only the
    /// responder a reconnection, never the app one of its recoveries (rule 20).
    Own {
        url: String,
        options: Box<ConnectOptions>,
        client: Client,
    },
    /// The app's client, as the supervisor replaces it: an app on the application's own
    /// client ([`App::with_client`](crate::App::with_client)), whose options are not known.
    Shared(watch::Receiver<Client>),
}

/// The responder of the app's service: answers `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS`
/// (each also with `.<name>` and `.<name>.<id>`) on its [`Source`], from the subscriptions
/// made at start-up, and again on each new client; a reconnection async-nats makes by itself
/// keeps them. It stops when the app's shutdown begins, and its subscriptions go with it.
pub(crate) struct Discovery {
    service: Service,
    id: String,
    /// When the app started, RFC 3339 in UTC.
    started: String,
    endpoints: Vec<Endpoint>,
    /// The PING and INFO answers, which never change.
    ping: Bytes,
    info: Bytes,
}

/// What the responder may answer in the current second, and what it dropped.
struct Budget {
    window: std::time::Instant,
    answered: u32,
    dropped: u64,
    logged: Option<std::time::Instant>,
}

impl Budget {
    /// Whether a request that came at `now` is answered; if not, it is counted, and logged
    /// at warn when [`DROPS_LOGGED_EVERY`] has passed since the last such line.
    fn take(&mut self, now: std::time::Instant, service: &str) -> bool {
        if now.saturating_duration_since(self.window) >= Duration::from_secs(1) {
            self.window = now;
            self.answered = 0;
        }
        if self.answered < ANSWERS_PER_SECOND {
            self.answered += 1;
            return true;
        }
        self.dropped += 1;
        if self
            .logged
            .is_none_or(|at| now.saturating_duration_since(at) >= DROPS_LOGGED_EVERY)
        {
            tracing::warn!(
                service,
                dropped = self.dropped,
                per_second = ANSWERS_PER_SECOND,
                "$SRV requests are coming faster than the service answers them: dropped (a flood of $SRV requests?)"
            );
            self.logged = Some(now);
            self.dropped = 0;
        }
        false
    }
}

impl Discovery {
    /// The responder of `service`, instance `id`, whose endpoints are the mounts of
    /// `declared` that [`mark_endpoints`] left on, counted in their `records`.
    pub(crate) fn new(
        service: Service,
        id: String,
        declared: &[Declared],
        records: &[MountRecord],
    ) -> Self {
        let since_epoch = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let endpoints = endpoints(declared, records);
        tracing::info!(service = %service.name(), version = %service.version(), id = %id,
            endpoints = ?endpoints.iter().map(|e| e.name).collect::<Vec<_>>(),
            "answering $SRV requests as a NATS service");
        Self {
            service,
            id,
            started: ruststream_settlement::rfc3339(
                u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX),
            ),
            endpoints,
            ping: Bytes::new(),
            info: Bytes::new(),
        }
        .cached()
    }

    /// With its PING and INFO answers written once.
    fn cached(mut self) -> Self {
        let write = |verb| match self.response(verb) {
            Ok(body) => Bytes::from(body),
            Err(e) => {
                tracing::warn!(error = %e, "a $SRV response could not be written");
                Bytes::new()
            }
        };
        (self.ping, self.info) = (write(Verb::Ping), write(Verb::Info));
        self
    }

    /// Answers the `$SRV` requests that come on `requests` (made at start-up on the client
    /// `source` gives), and on the subscriptions it makes on each new client, until `shutdown`
    /// is set or its sender is gone.
    pub(crate) async fn serve<R: Runtime>(
        self,
        requests: Requests,
        mut source: Source,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut client = match &mut source {
            Source::Own { client, .. } => client.clone(),
            Source::Shared(clients) => clients.borrow_and_update().clone(),
        };
        let mut requests = Some(requests);
        let mut budget = Budget {
            window: R::now(),
            answered: 0,
            dropped: 0,
            logged: None,
        };
        let name = self.service.name();
        loop {
            if *shutdown.borrow_and_update() {
                return;
            }
            tokio::select! {
                biased;
                changed = shutdown.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                changed = shared_changed(&mut source) => {
                    let Some(clients) = changed else {
                        return;
                    };
                    client = clients;
                    // The old client's subscriptions go first.
                    requests = None;
                    match subscribe(&client, name, &self.id).await {
                        Ok(subscribed) => requests = Some(subscribed),
                        Err(e) => tracing::warn!(error = %e,
                            "the service's $SRV subscriptions could not be made on the new client: it is not discoverable until the next one"),
                    }
                }
                request = next(&mut requests) => match request {
                    Some(request) => {
                        if budget.take(R::now(), name) {
                            self.answer(&client, request).await;
                        }
                    }
                    // The client died. The app's: its successor subscribes again.
                    None => {
                        requests = None;
                        if let Source::Own { url, options, .. } = &source {
                            tracing::warn!(service = name,
                                "the client answering $SRV requests stopped working (a message on `$SRV` may have brought it down): connecting a new one; the app's mounts are not concerned");
                            match self.reconnect::<R>(url, options, &mut shutdown).await {
                                Some((new, subscribed)) => {
                                    client = new;
                                    requests = Some(subscribed);
                                }
                                None => return,
                            }
                        }
                    }
                },
            }
        }
    }

    /// Connects and subscribes a new client of the responder's own, trying again (every 100 ms
    /// at first, then up to every 2 s) until it can, or until shutdown begins (then `None`).
    async fn reconnect<R: Runtime>(
        &self,
        url: &str,
        options: &ConnectOptions,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<(Client, Requests)> {
        let name = self.service.name();
        let mut backoff = Backoff::new(Duration::from_millis(100));
        loop {
            let made = R::timeout(PATIENCE, async {
                let client = connect_url(url, options.clone()).await?;
                let requests = subscribe(&client, name, &self.id).await?;
                Ok::<_, StartError>((client, requests))
            })
            .await;
            match made {
                Some(Ok(made)) => {
                    tracing::warn!(service = name, "a new client answers $SRV requests");
                    return Some(made);
                }
                Some(Err(e)) => tracing::warn!(service = name, error = %e,
                    "a new client for $SRV requests could not be made; trying again"),
                None => tracing::warn!(
                    service = name,
                    "a new client for $SRV requests could not be made in time; trying again"
                ),
            }
            tokio::select! {
                () = R::sleep_until(R::now() + backoff.failed()) => {}
                _ = shutdown.changed() => return None,
            }
            if *shutdown.borrow() {
                return None;
            }
        }
    }

    /// Sends the answer to one request, to its reply subject (a request without one is left).
    async fn answer(&self, client: &Client, request: Message) {
        let (Some(reply), Some(verb)) = (request.reply, Verb::of(&request.subject)) else {
            return;
        };
        let body = match verb {
            Verb::Ping => self.ping.clone(),
            Verb::Info => self.info.clone(),
            Verb::Stats => match self.response(verb) {
                Ok(body) => Bytes::from(body),
                Err(e) => {
                    tracing::warn!(error = %e, "a $SRV response could not be written");
                    return;
                }
            },
        };
        if let Err(e) = client.publish(reply, body).await {
            tracing::warn!(service = self.service.name(), error = %e,
                "a $SRV response was not sent");
        }
    }

    /// The JSON response to `verb`, as ADR-32 gives it.
    fn response(&self, verb: Verb) -> serde_json::Result<Vec<u8>> {
        let service = &self.service;
        let head = Head {
            name: service.name(),
            id: &self.id,
            version: service.version(),
            metadata: &service.metadata,
        };
        match verb {
            Verb::Ping => serde_json::to_vec(&Ping {
                kind: "io.nats.micro.v1.ping_response",
                head,
            }),
            Verb::Info => serde_json::to_vec(&Info {
                kind: "io.nats.micro.v1.info_response",
                head,
                description: &service.description,
                endpoints: self
                    .endpoints
                    .iter()
                    .map(|e| EndpointInfo {
                        name: e.name,
                        subject: &e.subject,
                        queue_group: &e.queue_group,
                        metadata: &NO_METADATA,
                    })
                    .collect(),
            }),
            Verb::Stats => serde_json::to_vec(&Stats {
                kind: "io.nats.micro.v1.stats_response",
                head,
                started: &self.started,
                endpoints: self
                    .endpoints
                    .iter()
                    .map(|e| {
                        let totals = e.counts.totals();
                        EndpointStats {
                            name: e.name,
                            subject: &e.subject,
                            queue_group: &e.queue_group,
                            num_requests: totals.requests,
                            num_errors: totals.errors,
                            last_error: totals.last_error.as_deref().unwrap_or("").to_owned(),
                            processing_time: nanos(totals.processing),
                            average_processing_time: nanos(totals.average()),
                        }
                    })
                    .collect(),
            }),
        }
    }
}

/// The app's next client, when the responder follows it (`None` once the app is gone); never
/// for a client of the responder's own.
async fn shared_changed(source: &mut Source) -> Option<Client> {
    match source {
        Source::Shared(clients) => match clients.changed().await {
            Ok(()) => Some(clients.borrow_and_update().clone()),
            Err(_) => None,
        },
        Source::Own { .. } => std::future::pending().await,
    }
}

/// The next request, or never while there are no subscriptions.
async fn next(requests: &mut Option<Requests>) -> Option<Message> {
    match requests {
        Some(requests) => requests.next().await,
        None => std::future::pending().await,
    }
}

/// A duration in nanoseconds, as the protocol's times are on the wire.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// An endpoint's metadata: none (the protocol's `metadata` is an object).
static NO_METADATA: BTreeMap<String, String> = BTreeMap::new();

/// What every response begins with.
#[derive(Serialize)]
struct Head<'a> {
    name: &'a str,
    id: &'a str,
    version: &'a str,
    metadata: &'a BTreeMap<String, String>,
}

/// `io.nats.micro.v1.ping_response`.
#[derive(Serialize)]
struct Ping<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    head: Head<'a>,
}

/// `io.nats.micro.v1.info_response`.
#[derive(Serialize)]
struct Info<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    head: Head<'a>,
    description: &'a str,
    endpoints: Vec<EndpointInfo<'a>>,
}

/// An endpoint in an info response.
#[derive(Serialize)]
struct EndpointInfo<'a> {
    name: &'a str,
    subject: &'a str,
    queue_group: &'a str,
    metadata: &'a BTreeMap<String, String>,
}

/// `io.nats.micro.v1.stats_response`.
#[derive(Serialize)]
struct Stats<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    head: Head<'a>,
    /// RFC 3339.
    started: &'a str,
    endpoints: Vec<EndpointStats<'a>>,
}

/// An endpoint in a stats response; times in nanoseconds, `last_error` empty when none.
#[derive(Serialize)]
struct EndpointStats<'a> {
    name: &'a str,
    subject: &'a str,
    queue_group: &'a str,
    num_requests: u64,
    num_errors: u64,
    last_error: String,
    processing_time: u64,
    average_processing_time: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_told_apart_by_their_second_token() {
        assert_eq!(Verb::of("$SRV.PING"), Some(Verb::Ping));
        assert_eq!(Verb::of("$SRV.INFO.orders"), Some(Verb::Info));
        assert_eq!(Verb::of("$SRV.STATS.orders.ABC"), Some(Verb::Stats));
        assert_eq!(Verb::of("$SRV.OTHER"), None);
        assert_eq!(Verb::of("$SRV"), None);
    }

    #[test]
    fn responses_have_the_protocol_s_fields() {
        let discovery = Discovery {
            service: Service::new("orders", "1.2.0")
                .description("takes orders")
                .metadata("team", "payments"),
            id: "ID1".to_owned(),
            started: "2026-01-02T03:04:05.006Z".to_owned(),
            endpoints: vec![Endpoint {
                name: "take",
                subject: "orders.take".to_owned(),
                queue_group: "q".to_owned(),
                counts: Arc::default(),
            }],
            ping: Bytes::new(),
            info: Bytes::new(),
        }
        .cached();
        discovery.endpoints[0].counts.request();
        discovery.endpoints[0]
            .counts
            .processed(Duration::from_nanos(1500));
        discovery.endpoints[0].counts.request();
        discovery.endpoints[0].counts.failed("boom");
        let read = |verb| -> serde_json::Value {
            serde_json::from_slice(&discovery.response(verb).unwrap_or_default())
                .unwrap_or_default()
        };
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&discovery.ping).unwrap_or_default(),
            read(Verb::Ping)
        );
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&discovery.info).unwrap_or_default(),
            read(Verb::Info)
        );
        assert_eq!(
            read(Verb::Ping),
            serde_json::json!({"type": "io.nats.micro.v1.ping_response", "name": "orders",
                "id": "ID1", "version": "1.2.0", "metadata": {"team": "payments"}})
        );
        assert_eq!(
            read(Verb::Info),
            serde_json::json!({"type": "io.nats.micro.v1.info_response", "name": "orders",
                "id": "ID1", "version": "1.2.0", "metadata": {"team": "payments"},
                "description": "takes orders",
                "endpoints": [{"name": "take", "subject": "orders.take", "queue_group": "q",
                    "metadata": {}}]})
        );
        assert_eq!(
            read(Verb::Stats),
            serde_json::json!({"type": "io.nats.micro.v1.stats_response", "name": "orders",
                "id": "ID1", "version": "1.2.0", "metadata": {"team": "payments"},
                "started": "2026-01-02T03:04:05.006Z",
                "endpoints": [{"name": "take", "subject": "orders.take", "queue_group": "q",
                    "num_requests": 2, "num_errors": 1, "last_error": "boom",
                    "processing_time": 1500, "average_processing_time": 750}]})
        );
    }
}
