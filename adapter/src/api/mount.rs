//! Mount declarations: a descriptor, its limits, and how the runtime consumes it.

use std::num::NonZeroUsize;
use std::time::Duration;

use ruststream_settlement::{MountDeclaration, PriorityPolicy};

use super::error_policy::ErrorPolicy;
use super::keyed::Key;

/// The `ack_wait` given to a JetStream consumer the runtime creates for a mount with
/// [leases](Mount::leases) on (the default): 10 seconds.
///
/// `ack_wait` is how long a crashed instance's messages stay with it: the server delivers a
/// message again only when neither an acknowledgement nor a `+WPI` came within it. With leases
/// a handler that runs longer is renewed every half `ack_wait` (rule 16), so a short one costs
/// nothing in correctness: one `+WPI` every 5 s per delivery whose handler runs (or waits for a
/// slot) past 5 s, and none for one that finishes sooner. A crashed instance's messages then
/// come back within 10 s instead of the server's default 30 s.
pub const DEFAULT_ACK_WAIT: Duration = Duration::from_secs(10);

/// The `ack_wait` given to a JetStream consumer the runtime creates for a mount with leases
/// off: 30 seconds, the server's own default. Without renewals a handler that runs longer than
/// `ack_wait` has its message delivered again, so the longer default stays.
pub const DEFAULT_ACK_WAIT_WITHOUT_LEASES: Duration = Duration::from_secs(30);

/// The `priority_timeout` given to a consumer the runtime creates for a mount in a
/// [pinned](ruststream_settlement::PriorityPolicy::Pinned) priority group
/// ([`Mount::priority_group`]): 10 seconds.
///
/// It is how long the server waits for the pinned instance's next pull request before it pins
/// another: the failover time when the pinned instance dies. An instance that runs pulls
/// every [`PULL_EXPIRES`](ruststream_settlement::PULL_EXPIRES) (1 s) while it has a free
/// handler slot, so ten seconds is far above what a live one leaves between two requests,
/// and as long as the default [`DEFAULT_ACK_WAIT`], after which the dead instance's
/// deliveries come back anyway. The server's own default is 2 minutes.
pub const DEFAULT_PRIORITY_TIMEOUT: Duration = Duration::from_secs(10);

/// How many deliveries of one mount are handled at once, by default.
pub const DEFAULT_CONCURRENCY: usize = 64;

/// The most deliveries one mount may handle at once: `usize::MAX >> 3`, the most permits
/// Tokio's semaphore (the mount's handler slots) holds. A larger
/// [`Mount::concurrency`] is refused at start-up with [`StartError::Setting`](crate::StartError::Setting).
pub const MAX_CONCURRENCY: usize = tokio::sync::Semaphore::MAX_PERMITS;

/// How long a handler may run before it is cancelled, by default: 5 minutes (rule 16).
///
/// Finite, so that a handler that hangs cannot hold its slot, and on JetStream its lease, for
/// ever: its message comes back (JetStream) and the mount goes on. Five minutes is far above
/// what a handler that calls a database or a remote service takes, and short enough that a
/// stuck message is retried within minutes. A mount whose handlers legitimately run longer
/// says so with [`Mount::handler_time_limit`].
pub const DEFAULT_HANDLER_TIME_LIMIT: Duration = Duration::from_secs(5 * 60);

/// How many Core messages a mount holds while every handler slot is busy, by default: 65,536,
/// as many as async-nats buffers per subscription by default (rule 21). An app's
/// [`subscription_capacity`](crate::App::subscription_capacity) replaces it for its mounts.
pub const DEFAULT_SUBSCRIPTION_BUFFER: usize = 65_536;

/// [`DEFAULT_SUBSCRIPTION_BUFFER`], as the non-zero count it is.
pub(crate) const DEFAULT_SUBSCRIPTION_BUFFER_NONZERO: NonZeroUsize =
    match NonZeroUsize::new(DEFAULT_SUBSCRIPTION_BUFFER) {
        Some(n) => n,
        None => NonZeroUsize::MIN,
    };

/// A mount point as the application declares it: where a handler listens, `max_attempts`,
/// the dead-letter subject, and how the runtime consumes it.
///
/// Nothing is checked until [`App::start`](crate::App::start), which refuses a bad declaration
/// with an error naming the mount.
#[derive(Debug, Clone)]
pub struct Mount {
    pub(crate) declaration: MountDeclaration,
    pub(crate) queue_group: Option<String>,
    pub(crate) concurrency: NonZeroUsize,
    /// The `ack_wait` given, if any ([`ack_wait_or_default`](Self::ack_wait_or_default)).
    pub(crate) ack_wait: Option<Duration>,
    pub(crate) filter_subject: Option<String>,
    pub(crate) leases: bool,
    /// Whether a handler's JetStream publishes carry a `Nats-Msg-Id` made from the delivery
    /// ([`publish_ids`](Self::publish_ids)).
    pub(crate) publish_ids: bool,
    pub(crate) handler_time_limit: Duration,
    /// `None`: [`DEFAULT_SUBSCRIPTION_BUFFER`].
    pub(crate) subscription_buffer: Option<NonZeroUsize>,
    pub(crate) on_error: ErrorPolicy,
    /// `max` and `max_wait` of a batch mount ([`Mount::batch`]).
    pub(crate) batch: Option<(usize, Duration)>,
    /// Whether its handler takes batches (mounted with
    /// [`App::mount_batch`](crate::App::mount_batch),
    /// [`App::mount_typed_batch`](crate::App::mount_typed_batch) or
    /// [`App::mount_json_batch`](crate::App::mount_json_batch)).
    pub(crate) takes_batches: bool,
    /// What its deliveries are ordered by ([`Mount::key`]).
    pub(crate) key: Option<Key>,
    /// Whether a keyed delivery's retry runs again in place ([`Mount::strict_order`]).
    pub(crate) strict_order: bool,
    /// What the mount says of itself for its AsyncAPI document ([`Mount::payload_schema`],
    /// [`Mount::publishes`]).
    pub(crate) described: Described,
    /// Whether it is an endpoint of the app's service ([`Mount::service_endpoint`]); start-up
    /// turns it off for a mount that cannot be one (a JetStream mount, an app without a
    /// service), so that from then on it says whether the mount is one.
    pub(crate) service_endpoint: bool,
    /// Its priority group and policy ([`Mount::priority_group`]).
    pub(crate) priority: Option<(String, PriorityPolicy)>,
    /// The `priority_timeout` given, if any ([`Mount::priority_timeout`]).
    pub(crate) priority_timeout: Option<Duration>,
}

/// What a mount says of itself for the app's AsyncAPI document
/// ([`App::asyncapi`](crate::App::asyncapi)); nothing of it changes how the mount runs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Described {
    /// The JSON Schema of its deliveries' payloads.
    pub(crate) payload: Option<serde_json::Value>,
    /// The subjects its handlers publish to, each with its payloads' JSON Schema if given.
    pub(crate) publishes: Vec<(String, Option<serde_json::Value>)>,
    /// The content type of its deliveries' payloads: its codec's, for a typed mount
    /// ([`App::mount_typed`](crate::App::mount_typed)); `None` (said as JSON) otherwise.
    pub(crate) content_type: Option<&'static str>,
}

impl Mount {
    fn new(declaration: MountDeclaration) -> Self {
        Self {
            declaration,
            queue_group: None,
            concurrency: NonZeroUsize::new(DEFAULT_CONCURRENCY).unwrap_or(NonZeroUsize::MIN),
            ack_wait: None,
            filter_subject: None,
            leases: true,
            publish_ids: true,
            handler_time_limit: DEFAULT_HANDLER_TIME_LIMIT,
            subscription_buffer: None,
            on_error: ErrorPolicy::Retry,
            batch: None,
            takes_batches: false,
            key: None,
            strict_order: false,
            described: Described::default(),
            service_endpoint: true,
            priority: None,
            priority_timeout: None,
        }
    }

    /// A mount named `name` on the literal Core subject `subject`; copies go back to it.
    pub fn core_subject(name: &str, subject: &str) -> Self {
        Self::new(MountDeclaration::core_subject(name, subject))
    }

    /// A mount named `name` on the Core wildcard `wildcard`; copies go to the literal
    /// `copy_subject`. When the wildcard does not match `copy_subject`, the mount subscribes
    /// to it too, so each copy is handled once (rule 10).
    pub fn core_wildcard(name: &str, wildcard: &str, copy_subject: &str) -> Self {
        Self::new(MountDeclaration::core_wildcard(
            name,
            wildcard,
            Some(copy_subject),
        ))
    }

    /// A mount named `name` on the JetStream pull consumer `consumer` (a durable) of stream
    /// `stream`. If the durable exists it is bound as it is, never changed; otherwise it is
    /// created with explicit ack, [`ack_wait`](Self::ack_wait), and no `max_deliver`.
    pub fn jetstream(name: &str, stream: &str, consumer: &str) -> Self {
        Self::new(MountDeclaration::jetstream(name, stream, consumer))
    }

    /// Bounds the attempts (the first delivery is attempt 1). Must be at least 1.
    #[must_use]
    pub fn max_attempts(mut self, n: u32) -> Self {
        let n = match crate::support::deliberate::active(
            crate::support::deliberate::Bug::RetryPastLimit,
        ) {
            true => n.saturating_add(1),
            false => n,
        };
        self.declaration = self.declaration.max_attempts(n);
        self
    }

    /// Where deliveries at the limit go, unchanged. Needs `max_attempts`. On a JetStream mount
    /// a stream must store this subject, and the publish waits for the stream's confirmation
    /// at most half the consumer's `ack_wait` (and at most 5 s), so that a slow or failed
    /// dead letter is answered with `-NAK` before the server redelivers on its own.
    #[must_use]
    pub fn dead_letter(mut self, subject: &str) -> Self {
        self.declaration = self.declaration.dead_letter(subject);
        self
    }

    /// Paces this mount's retries (rule 18): a handler's [`Outcome::Retry`](crate::Outcome)
    /// then means `retry_after` the backoff's delay for the attempt. On JetStream that is
    /// `-NAK {"delay": …}`; on Core a copy published after the delay (through the app's delay
    /// queue), so that a Core mount with a backoff copies even without `max_attempts` (set one
    /// to bound the attempts). `max_attempts` and the dead-letter subject apply unchanged, and
    /// `retry_after` keeps its own delay. The jitter tells deliveries apart by their stream,
    /// consumer and stream sequence on JetStream, by their subject and payload on Core.
    /// A Core mount with a backoff and no `max_attempts` is warned about at start-up. A
    /// backoff that cannot be used (a zero first delay, fixed or exponential; a base above its
    /// cap; a factor below 1; a jitter of 1 or more) stops start-up with [`DeclarationErrorKind::Backoff`](crate::DeclarationErrorKind).
    #[must_use]
    pub fn backoff(mut self, backoff: ruststream_settlement::Backoff) -> Self {
        self.declaration = self.declaration.backoff(backoff);
        self
    }

    /// Adds provenance headers to this mount's dead letters (rule 19): `Ruststream-Subject`,
    /// `-Mount`, `-Stream`, `-Consumer`, `-Stream-Sequence` (JetStream), `-Attempt`, and
    /// `-Reason` (`limit`, `rejected`, `undecodable`, `handler-error`), with
    /// the handler's error text in `Ruststream-Error` when an `Err` dead-lettered it. Appended
    /// after the delivery's own headers, which are kept as they arrived; a dead letter that
    /// would then be larger than the server's `max_payload` goes without them (logged), as
    /// the delivery arrived. Off by default: the dead letter is the delivery as it arrived.
    /// See `ruststream_settlement::Provenance`.
    #[must_use]
    pub fn provenance(mut self) -> Self {
        self.declaration = self.declaration.provenance(true);
        self
    }

    /// The JSON Schema of this mount's payloads, for the app's AsyncAPI document
    /// ([`App::asyncapi`](crate::App::asyncapi)); it changes nothing at run time. With the
    /// cargo feature `asyncapi`, `Mount::payload::<T>()` derives it from a type.
    #[must_use]
    pub fn payload_schema(mut self, schema: serde_json::Value) -> Self {
        self.described.payload = Some(schema);
        self
    }

    /// Declares that this mount's handlers publish to `subject`, with payloads of the JSON
    /// Schema `schema` if given, for the app's AsyncAPI document (a `send` operation); it
    /// changes nothing at run time. Its dead-letter subject is in the document without this.
    /// With the cargo feature `asyncapi`, `Mount::publishes_json::<T>()` derives the schema from a
    /// type.
    #[must_use]
    pub fn publishes(mut self, subject: &str, schema: Option<serde_json::Value>) -> Self {
        self.described.publishes.push((subject.to_owned(), schema));
        self
    }

    /// As [`payload_schema`](Self::payload_schema), with `T`'s JSON Schema (schemars).
    #[cfg(feature = "asyncapi")]
    #[must_use]
    pub fn payload<T: schemars::JsonSchema>(self) -> Self {
        self.payload_schema(schema_of::<T>())
    }

    /// As [`publishes`](Self::publishes), with `T`'s JSON Schema (schemars).
    #[cfg(feature = "asyncapi")]
    #[must_use]
    pub fn publishes_json<T: schemars::JsonSchema>(self, subject: &str) -> Self {
        self.publishes(subject, Some(schema_of::<T>()))
    }

    /// What a handler's `Err` stands for (default [`ErrorPolicy::Retry`](ErrorPolicy)):
    /// `Retry`, so that `max_attempts`, the backoff and the dead-letter subject apply;
    /// `Reject`, the at-limit path at once; or a function of the error's text. The error is
    /// logged at warning level first, with the mount, subject, attempt and the outcome chosen.
    #[must_use]
    pub fn on_error(mut self, policy: ErrorPolicy) -> Self {
        self.on_error = policy;
        self
    }

    /// The delay of the `-NAK` sent when a JetStream dead-letter publish fails (default 5 s).
    #[must_use]
    pub fn dead_letter_retry_delay(mut self, delay: Duration) -> Self {
        self.declaration = self.declaration.dead_letter_retry_delay(delay);
        self
    }

    /// How many deliveries of this mount run at once (default [`DEFAULT_CONCURRENCY`]).
    ///
    /// A JetStream mount asks for as many messages as it has free slots, plus, while it
    /// handles them fast enough, a prefetch of at most 3 per slot (window up to 4 times the
    /// concurrency): at most what it finishes, at the rate measured over the last 10 to
    /// 100 ms, in a quarter of `ack_wait` (or of the smallest `BackOff` step); no request
    /// exceeds the consumer's `MaxRequestBatch`. A prefetched message that finds no free slot
    /// waits in order, renewed with `+WPI` at half its deadline, so it does not expire while
    /// it waits (one whose renewals could not be sent is not run: the server delivers it
    /// again). Nothing is prefetched with
    /// [leases](Self::leases) off, before a rate is measured, or at a rate too low (one slot,
    /// 1 s handlers, `ack_wait` 3 s: none).
    #[must_use]
    pub fn concurrency(mut self, n: NonZeroUsize) -> Self {
        self.concurrency = n;
        self
    }

    /// Makes this a batch mount (rule 23): its handler, mounted with
    /// [`App::mount_batch`](crate::App::mount_batch),
    /// [`App::mount_typed_batch`](crate::App::mount_typed_batch) or
    /// [`App::mount_json_batch`](crate::App::mount_json_batch), is given up to `max`
    /// deliveries at once, as soon as `max` have arrived or `max_wait` has passed since the
    /// first (or the app's shutdown has begun). Each member is settled as a single delivery
    /// with its outcome would be; see [`Batch`](crate::Batch) and `docs/settlement.md`, rule 23.
    ///
    /// With batches, [`concurrency`](Self::concurrency) is how many batches run at once: the
    /// mount holds up to `concurrency × max` deliveries (each in its handler slot, on
    /// JetStream each with its lease renewed), and a JetStream mount's pull window is counted
    /// in those slots, so it fetches for whole batches. The
    /// [handler time limit](Self::handler_time_limit) bounds each batch's run, counted from
    /// when the batch closes; a member's wait for its batch (at most `max_wait`, more while
    /// every batch place is taken) is not counted against it.
    ///
    /// With a [key](Self::key), a batch holds one delivery of each key at most: it fills with
    /// distinct keys, and otherwise closes at `max_wait`, so keep `max_wait` short on a keyed
    /// batch mount. On JetStream, a `max` above the consumer's `max_ack_pending` (1,000 on a
    /// consumer the runtime creates) can never fill: start-up warns, and each batch waits its
    /// `max_wait`.
    ///
    /// `max` must be from 1 to [`MAX_BATCH`](crate::MAX_BATCH), and `concurrency × max` at most
    /// [`MAX_CONCURRENCY`]; otherwise start-up stops with
    /// [`StartError::Setting`](crate::StartError::Setting). So does a batch mount whose handler
    /// takes single deliveries, and a batch handler on a mount without `batch`.
    #[must_use]
    pub fn batch(mut self, max: usize, max_wait: Duration) -> Self {
        self.batch = Some((max, max_wait));
        self
    }

    /// Orders this mount's deliveries by `key` (rule 24): deliveries with one key run one at a
    /// time, started in the order the mount received them; different keys run concurrently, up
    /// to the mount's [`concurrency`](Self::concurrency). A delivery without a key (see
    /// [`Key`](crate::Key)) is not ordered.
    ///
    /// **What order means under retries.** A retried delivery goes back to NATS as Part A says
    /// (`-NAK`, or a Core copy) and ends its turn: the key's next delivery runs, and the retry
    /// comes back after it, in the order the server delivers it again. Order per key holds for
    /// first attempts and for whatever the server delivers in order, not across a retry. With
    /// [`strict_order`](Self::strict_order) a retry runs again in place instead, its key's
    /// later deliveries waiting, so that order holds across retries too.
    ///
    /// A delivery waiting for its key holds a handler slot (on JetStream with its lease renewed
    /// by `+WPI`, rule 16), so the mount holds at most `concurrency` deliveries, running or
    /// waiting (`concurrency × max` on a [batch mount](Self::batch), whose batches never hold
    /// two deliveries of one key). Beyond that a JetStream mount stops fetching and a Core
    /// mount's [subscription buffer](Self::subscription_buffer) holds, then drops and counts,
    /// what arrives (rule 21). The [handler time limit](Self::handler_time_limit) is counted
    /// from a delivery's turn, not from its arrival.
    ///
    /// Refused at start-up ([`StartError::Setting`](crate::StartError::Setting)), since they
    /// cannot keep the order:
    /// - **a [`Key::SubjectToken`](crate::Key::SubjectToken) on a Core wildcard whose retries
    ///   make copies** (`max_attempts` or a backoff, without strict order): a copy comes back on
    ///   the copy subject, whose token is not the original's key. Key such a mount by a header
    ///   or a function of the payload, or use strict order, which makes no copies;
    /// - **a key with [leases](Self::leases) off on JetStream**: a delivery waiting for its key
    ///   past its deadline would be delivered again meanwhile, and run twice.
    ///
    /// Also worth knowing:
    /// - The handler is *called* when the delivery arrives; only its *future* waits for the
    ///   turn. A handler that does work in the call itself (`|d| { work(&d); async { … } }`,
    ///   `std::future::ready(work(d))`) does that work unordered: put it inside the future.
    /// - One busy key can take every slot: its waiting deliveries hold slots, and a delivery of
    ///   another key that arrives after them waits for a free slot. Raise the concurrency for a
    ///   mount where one key may burst.
    /// - A run that ends with no outcome (a panic, the time limit, `Outcome::None`) ends its
    ///   key's turn, also with strict order: JetStream delivers it again after `ack_wait`, after
    ///   the key's later deliveries.
    #[must_use]
    pub fn key(mut self, key: Key) -> Self {
        self.key = Some(key);
        self
    }

    /// Strict order per key (rule 24; off by default): a `retry` or `retry_after` of a keyed
    /// delivery below `max_attempts` is not sent back to NATS but run again in place after its
    /// delay (the [backoff](Self::backoff)'s for `retry`, none without one), while the later
    /// deliveries of its key wait: on JetStream with no `-NAK` and its lease renewed by `+WPI`
    /// through the delay, on Core with no copy. Each run counts as an attempt
    /// ([`Delivery::attempt`](crate::Delivery) grows by one); at `max_attempts` the delivery
    /// takes the at-limit path (dead letter, then `+TERM` on JetStream) and the key goes on.
    /// The handler time limit applies to each run. The key is held until the delivery is
    /// settled, or its run ends with no outcome (a panic, the time limit, `Outcome::None`:
    /// JetStream then delivers it again after `ack_wait`, after the key's later deliveries).
    ///
    /// Needs a [`key`](Self::key) and `max_attempts`, and on JetStream [leases](Self::leases)
    /// on (start-up refuses it otherwise with
    /// [`StartError::Setting`](crate::StartError::Setting): without a limit one poison delivery
    /// would hold its key for ever; without renewals a retry waiting past `ack_wait` would be
    /// delivered again, out of order). A delivery without a key is not ordered and retries as
    /// usual. Runs in place are the process's own: if it stops mid-way, JetStream delivers the
    /// message again with the server's count (`delivered`), which does not include them, so the
    /// attempts start again from there; a Core delivery is gone, as any Core delivery in flight.
    #[must_use]
    pub fn strict_order(mut self, on: bool) -> Self {
        self.strict_order = on;
        self
    }

    /// How many deliveries the mount holds in handler slots at once: its concurrency, times
    /// its batch `max` for a batch mount (at most [`MAX_CONCURRENCY`]).
    pub(crate) fn slots(&self) -> NonZeroUsize {
        match self.batch {
            Some((max, _)) => NonZeroUsize::new(
                self.concurrency
                    .get()
                    .saturating_mul(max)
                    .min(MAX_CONCURRENCY),
            )
            .unwrap_or(NonZeroUsize::MIN),
            None => self.concurrency,
        }
    }

    /// The time limit the lease loop applies to each delivery's run: for a batch mount none
    /// (`Duration::MAX`), since a member's run begins when it joins its batch and the batch
    /// handler applies the limit to the batch's own run; every member's wait is then bounded
    /// by `max_wait` and by the runs of the batches ahead of it, each bounded by the limit.
    ///
    /// The same for a mount with a key: a delivery's run begins when it arrives, and the time
    /// limit is applied from its key's turn by the keyed handler.
    pub(crate) fn run_limit(&self) -> Duration {
        match (&self.batch, &self.key) {
            (None, None) => self.handler_time_limit,
            _ => Duration::MAX,
        }
    }

    /// Subscribes a Core mount in this queue group, so that each message goes to one member.
    /// Ignored by JetStream mounts.
    #[must_use]
    pub fn queue_group(mut self, group: &str) -> Self {
        self.queue_group = Some(group.to_owned());
        self
    }

    /// Whether this Core mount is an endpoint of the app's [service](crate::Service) (default
    /// on; see [`App::service`](crate::App::service)). It changes nothing in an app that
    /// declares no service, nor on a JetStream mount, which is never an endpoint.
    ///
    /// An endpoint is named as the mount, its subject is the mount's subject (a
    /// [wildcard](Self::core_wildcard) mount's wildcard; its copy subject is not listed), and
    /// its queue group is the mount's [`queue_group`](Self::queue_group), else
    /// [`DEFAULT_SERVICE_QUEUE_GROUP`](crate::DEFAULT_SERVICE_QUEUE_GROUP) (`"q"`), which it then
    /// subscribes in. Its `$SRV.STATS` counts, from the app's start:
    /// - `num_requests`: handler runs that ended (a delivery retried in place by
    ///   [strict order](Self::strict_order) counts each run; one whose payload did not decode
    ///   for a typed handler counts once, without a run);
    /// - `num_errors` and `last_error`: the runs that ended in error, and the last one's text:
    ///   a handler's `Err` (its text, whatever the [error policy](Self::on_error) makes of
    ///   it), a panic (`panicked: …`), the [time limit](Self::handler_time_limit), an outcome of
    ///   [`Reject`](crate::Outcome::Reject) (`rejected`) or of no outcome
    ///   ([`Outcome::None`](crate::Outcome::None), also how a keyed or batch mount reports a
    ///   time limit: `no outcome`), and a payload that does not decode. `Ack`, `Retry`,
    ///   `RetryAfter` and `Drop` are not errors: the handler decided them;
    /// - `processing_time`: the handlers' total run time, each from its call to its result (for
    ///   a keyed mount that includes the wait for its key's turn, for a batch mount each
    ///   member's wait for its batch). Endpoints are timed whether or not a `metrics` recorder
    ///   is installed: two clock reads per delivery.
    ///
    /// Off, the mount subscribes as it would in an app without a service, and is not listed.
    #[must_use]
    pub fn service_endpoint(mut self, on: bool) -> Self {
        self.service_endpoint = on;
        self
    }

    /// The `ack_wait` of a consumer the runtime creates (default [`DEFAULT_ACK_WAIT`], 10 s,
    /// with leases on; [`DEFAULT_ACK_WAIT_WITHOUT_LEASES`], 30 s, with them off); an existing
    /// consumer keeps its own (rule 11). It is how long a crashed instance's messages wait
    /// before the server delivers them again. Zero is refused at start-up
    /// ([`StartError::Setting`](crate::StartError::Setting)): nats-server would take it as
    /// unset and use its own default.
    #[must_use]
    pub fn ack_wait(mut self, ack_wait: Duration) -> Self {
        self.ack_wait = Some(ack_wait);
        self
    }

    /// The `ack_wait` a consumer the runtime creates for this mount gets: the one given, or
    /// the default for its leases ([`DEFAULT_ACK_WAIT`] or
    /// [`DEFAULT_ACK_WAIT_WITHOUT_LEASES`]).
    pub(crate) fn ack_wait_or_default(&self) -> Duration {
        match (self.ack_wait, self.leases) {
            (Some(given), _) => given,
            (None, true) => DEFAULT_ACK_WAIT,
            (None, false) => DEFAULT_ACK_WAIT_WITHOUT_LEASES,
        }
    }

    /// The filter subject of a consumer the runtime creates. An existing consumer keeps its
    /// own, and must have this one: start-up refuses the mount
    /// ([`StartError::Setting`](crate::StartError::Setting)) when it has another, none, or
    /// several.
    #[must_use]
    pub fn filter_subject(mut self, subject: &str) -> Self {
        self.filter_subject = Some(subject.to_owned());
        self
    }

    /// Pulls the JetStream mount's consumer through priority group `group` with `policy`
    /// (nats-server 2.11+): how the app's instances that run this mount share its consumer.
    ///
    /// - [`PriorityPolicy::Pinned`]: one instance at a time receives the messages
    ///   (active/standby). The server pins the first instance that pulls and gives it a pin
    ///   id, which the mount sends with every pull request; the others' requests wait on
    ///   standby. When the pinned instance makes no request for the consumer's
    ///   [`priority_timeout`](Self::priority_timeout) (it was killed, or lost its
    ///   connection) the server pins another; one that stops gracefully gives its pin up
    ///   (`$JS.API.CONSUMER.UNPIN`) once it has stopped pulling, so that a standby takes over
    ///   at its next request. [`MountHealth::pinned`](crate::MountHealth::pinned) says which
    ///   instance is the active one. An instance whose pin was taken is told so
    ///   (`423 Nats-Pin-Id mismatch`) at its next request, and stands by from then on: what
    ///   it already received is handled and settled as usual, through each delivery's own
    ///   reply subject, so nothing is lost or run twice by the change (a delivery not settled
    ///   within `ack_wait` comes back, as always).
    /// - [`PriorityPolicy::Overflow`]: the instance's requests are served only while the
    ///   consumer has at least `min_pending` messages not yet delivered: a standby that helps
    ///   under a backlog, beside instances that pull without a threshold (`min_pending` 0, or
    ///   [`PriorityPolicy::Overflow`] with 0).
    ///
    /// A consumer the runtime creates gets the policy and the group. An existing one is never
    /// changed (rule 11): start-up refuses the mount ([`StartError::Setting`](crate::StartError::Setting))
    /// when its policy is another or its groups do not hold `group`, and refuses a mount
    /// without a group on a consumer that has a policy (the server refuses pull requests
    /// without a group there). Start-up also refuses a group on a server older than 2.11,
    /// naming the server's version, and on a Core mount.
    ///
    /// Several groups on one consumer, and the `prioritized` policy of 2.12, are left to
    /// consumers an operator creates; a mount pulls through one group.
    #[must_use]
    pub fn priority_group(mut self, group: &str, policy: PriorityPolicy) -> Self {
        self.priority = Some((group.to_owned(), policy));
        self
    }

    /// The `priority_timeout` of a pinned consumer the runtime creates (default
    /// [`DEFAULT_PRIORITY_TIMEOUT`], 10 s): how long the server waits for the pinned
    /// instance's next pull request before it pins another. An existing consumer keeps its
    /// own. Only with a [pinned](PriorityPolicy::Pinned) [`priority_group`](Self::priority_group):
    /// start-up refuses it otherwise, and refuses zero (the server would take it as unset,
    /// 2 minutes).
    ///
    /// Keep it well above [`PULL_EXPIRES`](ruststream_settlement::PULL_EXPIRES) (1 s): a
    /// pinned instance whose handler slots are all busy makes no request, and loses its pin
    /// after this long (a handover, not a loss: it settles what it holds).
    #[must_use]
    pub fn priority_timeout(mut self, timeout: Duration) -> Self {
        self.priority_timeout = Some(timeout);
        self
    }

    /// The `priority_timeout` a pinned consumer the runtime creates gets.
    pub(crate) fn priority_timeout_or_default(&self) -> Duration {
        self.priority_timeout.unwrap_or(DEFAULT_PRIORITY_TIMEOUT)
    }

    /// Whether a JetStream handler's lease is renewed with `+WPI` while it runs (default on,
    /// rule 16), and a prefetched message's while it waits for a slot. Renewals cost nothing
    /// for a handler that finishes at its first poll, and one publish per half `ack_wait` for
    /// one that runs (or waits) longer.
    ///
    /// Turn them off where a delivery must come back after `ack_wait` even while its handler
    /// runs: a consumer shared with other services whose `ack_wait` is the operator's
    /// failover time, say. A result that comes after the deadline is then not sent (the server
    /// has redelivered, or will), and is logged as late: a handler that always takes longer
    /// than `ack_wait` then never has its result sent, and the message goes round until
    /// `max_attempts` dead-letters it. The time limit applies either way. With leases off the
    /// mount prefetches nothing beyond its free slots (see [`concurrency`](Self::concurrency)),
    /// since nothing would renew a message that waits.
    #[must_use]
    pub fn leases(mut self, on: bool) -> Self {
        self.leases = on;
        self
    }

    /// Whether what a handler of this JetStream mount publishes to a stream through its
    /// [`Context`](crate::Context) (`jetstream_publish` and its `_json`, `_encoded` and
    /// `_with_headers` forms) carries a `Nats-Msg-Id` made from the delivery (default on):
    /// effectively-once publishes.
    ///
    /// The id ([`publish_msg_id`](ruststream_settlement::publish_msg_id)) names the delivery's
    /// stream, consumer, stream sequence and stored time, the publish's place among the run's
    /// JetStream publishes (0, 1, …), and a hash of its subject and payload. A handler that
    /// published, then crashed or lost its connection before its `+ACK`, runs again on the
    /// redelivery, and what it publishes again, the same at the same place, gets the same id:
    /// the stream drops it as a duplicate within its duplicate window (2 minutes by default;
    /// the acknowledgement says `duplicate`), so the event is stored once.
    ///
    /// What it does not promise:
    /// - a payload that differs from run to run (the time of the run in it, a random id) is
    ///   stored again, as without an id: take times from the delivery
    ///   ([`JetStreamInfo::timestamp`](crate::JetStreamInfo)), not the clock, to have it
    ///   dropped. A different subject or payload at the same place is never dropped: an id
    ///   never makes a stream drop what it did not store before;
    /// - a redelivery after the duplicate window is stored again;
    /// - publishes made concurrently (from tasks of the handler's own) take their places in
    ///   the order they are made, which may differ between runs;
    /// - a `Nats-Msg-Id` the handler gives (`jetstream_publish_with_headers`) is kept as it
    ///   is, and counts as a place;
    /// - Core publishes (`publish`), a Core delivery's context and a batch's context
    ///   ([`Batch::context`](crate::Batch::context), whose members differ between runs) carry
    ///   no id.
    ///
    /// Off: a handler's publishes carry only what it gives.
    #[must_use]
    pub fn publish_ids(mut self, on: bool) -> Self {
        self.publish_ids = on;
        self
    }

    /// How long a handler may run before it is cancelled (default
    /// [`DEFAULT_HANDLER_TIME_LIMIT`]). A cancelled handler is logged at error level with the
    /// mount, subject, attempt and how long it ran, and counts as no outcome: JetStream
    /// redelivers after `ack_wait` (rule 3 ends the loop at the limit); a Core delivery is
    /// gone. Only a handler still running after its first poll can reach it;
    /// `Duration::ZERO` cancels every such handler at once, and `Duration::MAX` never cancels
    /// one.
    #[must_use]
    pub fn handler_time_limit(mut self, limit: Duration) -> Self {
        self.handler_time_limit = limit;
        self
    }

    /// How many Core messages the mount holds, received and not yet handled, while every
    /// handler slot is busy (default: the app's
    /// [`subscription_capacity`](crate::App::subscription_capacity), itself
    /// [`DEFAULT_SUBSCRIPTION_BUFFER`] by default). Messages that arrive
    /// while it is full are dropped: Core NATS cannot hold them back. Each is counted for the
    /// mount, logged (a warning at most every 5 seconds, with the count), and in
    /// [`ShutdownReport::core_losses`](crate::ShutdownReport::core_losses) (rule 21).
    ///
    /// A smaller buffer bounds the memory and the delay of a slow mount; a larger one absorbs
    /// longer bursts. JetStream mounts have no use for it (start-up warns when one sets it):
    /// they fetch only as many messages as their slots and prefetch take (see
    /// [`concurrency`](Self::concurrency)), and the stream holds the rest.
    ///
    /// The mount's loop moves messages from async-nats' own subscription channel into this
    /// buffer whenever it waits for a handler slot, so async-nats' channel (its
    /// `ConnectOptions::subscription_capacity`, set with
    /// [`App::subscription_capacity`](crate::App::subscription_capacity), 65,536 by default)
    /// fills only if the mount's
    /// task gets no CPU time while that many messages arrive. async-nats drops those itself,
    /// and reports them only with its `Event::SlowConsumer` event, which names no mount.
    #[must_use]
    pub fn subscription_buffer(mut self, messages: NonZeroUsize) -> Self {
        self.subscription_buffer = Some(messages);
        self
    }

    /// The subscription buffer of a Core mount: the one set, or the app's `default`.
    pub(crate) fn subscription_buffer_or(&self, default: NonZeroUsize) -> NonZeroUsize {
        self.subscription_buffer.unwrap_or(default)
    }

    /// The mount's name.
    pub fn name(&self) -> &str {
        self.declaration.name()
    }

    /// The mount's settlement settings, validated as start-up validates them: its source
    /// ([`Descriptor`](ruststream_settlement::Descriptor)), `max_attempts`, dead-letter subject,
    /// backoff and provenance.
    ///
    /// # Errors
    /// The [`DeclarationError`](ruststream_settlement::DeclarationError) that
    /// [`App::start`](crate::App::start) would refuse the mount with.
    pub fn policy(
        &self,
    ) -> Result<ruststream_settlement::MountPolicy, ruststream_settlement::DeclarationError> {
        self.declaration.validate()
    }

    /// Whether the mount renews its JetStream deliveries' leases (rule 16; on by default).
    pub fn leases_on(&self) -> bool {
        self.leases
    }
}

/// `T`'s JSON Schema, as schemars writes it for JSON Schema draft-07 (what AsyncAPI 3.0's
/// default schema format builds on), without its `$schema` keyword.
#[cfg(feature = "asyncapi")]
fn schema_of<T: schemars::JsonSchema>() -> serde_json::Value {
    let schema = schemars::generate::SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<T>();
    let mut value = serde_json::Value::from(schema);
    if let Some(object) = value.as_object_mut() {
        object.remove("$schema");
    }
    value
}
