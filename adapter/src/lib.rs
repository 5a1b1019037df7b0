//! # ruststream-adapter
//!
//! The part of ruststream's adapters that does not depend on the async runtime: the app and
//! its start-up checks, the mount loops, handlers, and the execution of `ruststream-settlement`'s
//! plans over async-nats. It is generic over a small [`Runtime`] trait (spawn, timers, the
//! clock, signals, and the Tokio [`Reactor`] async-nats needs), in the style of quinn's.
//!
//! Applications use a runtime crate instead, which implements the trait and fixes it:
//! `ruststream-tokio` or `ruststream-smol`. Each exports the same items under the same names
//! (its `App` and `Running` are aliases of [`App`] and [`Running`] on its runtime), so that
//! switching runtime means changing the crate name and the executor, nothing else. The crate
//! docs of `ruststream-tokio` describe the behaviour; it is the same on every runtime.
//!
//! The decisions are made by `ruststream-settlement`'s planner: this crate only executes its plans
//! over async-nats, with one `match` per action.

#![warn(missing_docs)]

// The floors, lowest first: runtime, support, api, state, handling, loops, app, tools. Each imports
// only from itself and the floors below it (checked by `tests/layers.rs`); the README's Layout
// says what each holds.
mod api;
mod app;
mod handling;
mod loops;
mod runtime;
mod state;
mod support;
mod tools;

pub use api::batch::{
    Batch, BatchHandled, BatchHandler, IntoBatchHandled, MAX_BATCH, Member, MemberOutcome,
};
pub use api::context::{Context, ContextError, ContextSource};
pub use api::delivery::{Delivery, JetStreamInfo};
pub use api::error_policy::ErrorPolicy;
pub use api::handled::{Handled, IntoHandled, OutcomeFuture, Reply, ReplyAs};
pub use api::handler::{HandledFuture, Handler, HandlerSlot};
pub use api::handler_fn::{ContextFn, DeliveryFn, IntoHandler};
pub use api::health::{
    ConnectionState, Health, HealthClosed, HealthWatch, LIVENESS_LIMIT, MountHealth, MountState,
};
pub use api::keyed::{Key, KeyFn};
pub use api::mount::{
    DEFAULT_ACK_WAIT, DEFAULT_ACK_WAIT_WITHOUT_LEASES, DEFAULT_CONCURRENCY,
    DEFAULT_HANDLER_TIME_LIMIT, DEFAULT_PRIORITY_TIMEOUT, DEFAULT_SUBSCRIPTION_BUFFER,
    MAX_CONCURRENCY, Mount,
};
pub use api::reports::{AppFailed, CoreLosses, Recovery, Settled, ShutdownReport};
pub use api::service::{
    DEFAULT_SERVICE_QUEUE_GROUP, MAX_SERVICE_DESCRIPTION_BYTES, MAX_SERVICE_METADATA_BYTES,
    MAX_SERVICE_NAME_BYTES, Service,
};
pub use api::typed::{IntoJsonHandler, IntoTypedHandler, Json, Typed};
pub use app::asyncapi::ASYNCAPI_VERSION;
pub use app::pause::{PauseError, PauseHandle, PauseState};
pub use app::running::{DEFAULT_GRACE_PERIOD, Running, ShutdownHandle};
pub use app::startup::{StartError, connect_url};
pub use app::supervisor::{
    CONSUMER_REREAD, DEFAULT_DISCONNECTED_LIMIT, MAX_RECOVERIES, RECOVERIES_KEPT, RECOVERY_LIMIT,
    RECOVERY_WINDOW, SAME_SUSPECT_LIMIT,
};
pub use app::{App, RunError};
pub use codec::*;
pub use runtime::{Entered, LoopThread, NatsThread, Reactor, Runtime, ThreadStopper};
pub use ruststream_settlement::{
    Attempt, Backoff, BackoffError, DEFAULT_BACKOFF_FACTOR, DEFAULT_BACKOFF_JITTER,
    DeclarationError, DeclarationErrorKind, Descriptor, Disposition, MountPolicy, Outcome,
    PriorityPolicy,
};
/// Deliberate bugs, for measuring the explorer: their names in every build, the switch that
/// turns one on only with the `deliberate-bugs` feature (never in a user's build).
pub use support::deliberate;
pub use support::endpoint_counts::MAX_LAST_ERROR_BYTES;

/// Dead-letter streams: list, show, replay and delete their dead letters, as `ruststream dlq`
/// does. The reading of provenance and the restoring of a dead letter as it was are the
/// core's ([`DeadLetterRecord`](dead_letters::DeadLetterRecord),
/// [`restored_headers`](dead_letters::restored_headers)).
///
/// These calls are async-nats JetStream calls, which need a Tokio context: on smol, wrap them
/// in `ruststream_smol::Compat`.
pub mod dead_letters {
    pub use crate::tools::dead_letters::{
        DeadLetter, DeadLetterError, DeadLetters, READ_STALL, Scanned,
    };
    pub use crate::tools::replay::{ReplayEvent, ReplayOptions, ReplaySummary, Sent};
    pub use ruststream_settlement::{
        DEAD_LETTER_MSG_ID_PREFIX, DeadLetterFilter, DeadLetterReason, DeadLetterRecord,
        REPLAY_MSG_ID_PREFIX, Subject, Wildcard, replay_msg_id, restored_headers, rfc3339,
    };
}
pub use support::metrics;

/// The built-in ops endpoint (cargo feature `ops`): `OpsEndpoint`, given to `App::ops`, serves
/// `/metrics`, `/healthz`, `/readyz` and, when asked, `/asyncapi.json`. Empty without the
/// feature. Also at the crate's root, and at the root of each runtime crate.
pub mod ops {
    #[cfg(feature = "ops")]
    pub use crate::app::ops::{DURATION_BUCKETS, OpsEndpoint};
}
// Empty without the feature.
#[allow(unused_imports, unreachable_pub)]
pub use ops::*;

/// The codecs typed handlers decode with and handlers publish and reply with ([`Codec`]):
/// [`JsonCodec`] always; `MessagePack` with the cargo feature `msgpack` (rmp-serde), `Cbor` with
/// the cargo feature `cbor` (ciborium); and their errors. Also at the crate's root, and at the
/// root of each runtime crate (`ruststream_tokio::MessagePack`), which re-exports this module's
/// items whatever features this crate was built with.
pub mod codec {
    #[cfg(feature = "cbor")]
    pub use crate::api::codec::Cbor;
    #[cfg(feature = "msgpack")]
    pub use crate::api::codec::MessagePack;
    pub use crate::api::codec::{Codec, DecodeError, EncodeError, JsonCodec};
}

/// Re-exported so applications can build [`App::with_options`] and read headers without
/// naming async-nats themselves.
pub use async_nats;

/// Re-exports, where it is called, everything a runtime crate (`ruststream-tokio`,
/// `ruststream-smol`) gives its applications as it is, in one list: each calls it beside its
/// own `App`, `Running` and `Runtime`, so the two crates cannot drift apart.
#[macro_export]
macro_rules! reexport_api {
    () => {
        /// The app on any runtime: `AppOn<R>` is this crate's `App` when `R` is its
        /// `Runtime`, and `ruststream_sim::App` when `R` is the simulator's. A service's
        /// set-up written once as `fn service<R: AnyRuntime>(app: AppOn<R>) -> AppOn<R>`
        /// runs in production and in tests on the simulator alike.
        pub use $crate::App as AppOn;
        /// What a runtime gives the app (`ruststream-adapter`'s `Runtime` trait), for the
        /// bound of [`AppOn`]: implemented by `ruststream-tokio`'s, `ruststream-smol`'s and
        /// `ruststream-sim`'s `Runtime`.
        pub use $crate::Runtime as AnyRuntime;
        /// The codecs: `Codec`, `JsonCodec`, their errors, and `MessagePack` and `Cbor` when
        /// `ruststream-adapter` is built with its `msgpack` and `cbor` features (this crate's
        /// features of those names turn them on).
        pub use $crate::codec::*;
        /// The built-in ops endpoint (`OpsEndpoint`, for `App::ops`) when `ruststream-adapter`
        /// is built with its `ops` feature (this crate's feature of that name turns it on).
        #[allow(unused_imports, unreachable_pub)]
        pub use $crate::ops::*;
        pub use $crate::{
            ASYNCAPI_VERSION, AppFailed, Attempt, Backoff, BackoffError, Batch, BatchHandled,
            BatchHandler, CONSUMER_REREAD, ConnectionState, Context, ContextError, ContextFn,
            ContextSource, CoreLosses, DEFAULT_ACK_WAIT, DEFAULT_ACK_WAIT_WITHOUT_LEASES,
            DEFAULT_BACKOFF_FACTOR, DEFAULT_BACKOFF_JITTER, DEFAULT_CONCURRENCY,
            DEFAULT_DISCONNECTED_LIMIT, DEFAULT_GRACE_PERIOD, DEFAULT_HANDLER_TIME_LIMIT,
            DEFAULT_PRIORITY_TIMEOUT, DEFAULT_SUBSCRIPTION_BUFFER, DeclarationError,
            DeclarationErrorKind, DecodeError, Delivery, DeliveryFn, Descriptor, Disposition,
            ErrorPolicy, Handled, HandledFuture, Handler, HandlerSlot, Health, HealthClosed,
            HealthWatch, IntoBatchHandled, IntoHandled, IntoHandler, IntoJsonHandler,
            IntoTypedHandler, JetStreamInfo, Json, Key, KeyFn, LIVENESS_LIMIT, MAX_BATCH,
            MAX_CONCURRENCY, MAX_RECOVERIES, Member, MemberOutcome, Mount, MountHealth,
            MountPolicy, MountState, Outcome, OutcomeFuture, PauseError, PauseState,
            PriorityPolicy, RECOVERIES_KEPT, RECOVERY_LIMIT, RECOVERY_WINDOW, Recovery, Reply,
            ReplyAs, RunError, SAME_SUSPECT_LIMIT, Settled, ShutdownHandle, ShutdownReport,
            StartError, Typed, async_nats, connect_url, dead_letters,
        };
        /// An app declared as a NATS service (the micro protocol), the queue group its
        /// endpoints subscribe in by default, and the limits start-up keeps it to.
        pub use $crate::{
            DEFAULT_SERVICE_QUEUE_GROUP, MAX_LAST_ERROR_BYTES, MAX_SERVICE_DESCRIPTION_BYTES,
            MAX_SERVICE_METADATA_BYTES, MAX_SERVICE_NAME_BYTES, Service,
        };
    };
}
