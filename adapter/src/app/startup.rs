//! Start-up: why an app did not start ([`StartError`]), and its connection to NATS.

use async_nats::{Client, ConnectOptions};
use ruststream_settlement::DeclarationError;

use crate::support::servers::ServerList;

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
    /// Two mounts bind the same JetStream consumer: each would take part of the other's
    /// messages. Give each mount a durable of its own.
    #[error(
        "mounts `{first}` and `{second}` both bind consumer `{consumer}` of stream `{stream}`: each would take part of the other's messages; give each mount its own durable"
    )]
    SharedConsumer {
        /// The stream.
        stream: String,
        /// The consumer.
        consumer: String,
        /// The first mount binding it.
        first: String,
        /// The second.
        second: String,
    },
    /// The server URL (or one of a comma-separated list) does not parse. The message names
    /// the entry and the part that is wrong, never the URL or a credential.
    #[error("bad server URL: {0}")]
    ServerUrl(String),
    /// The connection could not be made. The message never holds the URL or credentials.
    #[error("cannot connect to NATS: {0}")]
    Connect(String),
    /// The runtime the NATS connection needs could not be started (the app's NATS thread,
    /// [`NatsThread`](crate::NatsThread)), or, on tokio, `App::start` was awaited outside a
    /// Tokio runtime.
    #[error("cannot start the runtime: {0}")]
    Runtime(String),
    /// A mount's runtime setting cannot be used: its concurrency above
    /// [`MAX_CONCURRENCY`](crate::MAX_CONCURRENCY), a JetStream mount's
    /// [`ack_wait`](crate::Mount::ack_wait) of zero, a handler that returns a
    /// [`Reply`](crate::Reply) on a JetStream mount, a [batch](crate::Mount::batch) declared on
    /// the mount or its handler but not both, a batch `max` of 0 or above
    /// [`MAX_BATCH`](crate::MAX_BATCH) (or `concurrency × max` above `MAX_CONCURRENCY`), or
    /// [strict order](crate::Mount::strict_order) without a key, without `max_attempts`, or
    /// with leases off on a JetStream mount.
    #[error("mount `{mount}`: {reason}")]
    Setting {
        /// The mount's name.
        mount: String,
        /// What is wrong.
        reason: String,
    },
    /// A stream the app declares ([`App::stream`](crate::App::stream)) cannot be used: its
    /// declaration is bad, the stream there does not fit it (subjects, retention), or it could not
    /// be created. The message names the stream and what is wrong.
    #[error("stream `{stream}`: {reason}")]
    Stream {
        /// The stream's name.
        stream: String,
        /// What is wrong.
        reason: String,
    },
    /// A mount's subjects overlap a stream's, or another mount's, in a way that cannot work
    /// (issue 41): a Core mount that answers requests on a subject a stream stores, copies or
    /// dead letters that a stream and another mount of the app, or another Core mount, would
    /// take as new work. The message names the mount, the stream or other mount, and the
    /// subjects. Overlaps that only have side effects (a Core mount on a stored subject that
    /// does not reply, copies stored by a stream nobody consumes) are logged as warnings.
    #[error("mount `{mount}`: {reason}")]
    Overlap {
        /// The mount's name.
        mount: String,
        /// What overlaps, and what would go wrong.
        reason: String,
    },
    /// The service the app declares ([`App::service`](crate::App::service)) breaks the micro
    /// protocol's rules: its name is empty or holds anything but `A-Z`, `a-z`, `0-9`, `-` and
    /// `_`, or its version is not a semantic version (refused before the app connects); or its
    /// `$SRV` subscriptions could not be made. The message names the service, what is wrong,
    /// and the rule.
    #[error("{0}")]
    Service(String),
    /// The ops endpoint (`App::ops`, feature `ops`) cannot be served: its
    /// address cannot be bound, or the process installed a `metrics` recorder of its own.
    #[error("ops endpoint: {0}")]
    Ops(String),
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

pub(crate) fn server_error(mount: &str, reason: impl std::fmt::Display) -> StartError {
    StartError::Server {
        mount: mount.to_owned(),
        reason: reason.to_string(),
    }
}

/// How the app reaches NATS.
pub(crate) enum Connect {
    Url {
        url: String,
        options: Box<ConnectOptions>,
    },
    Client(Client),
}

/// Connects as `connect` says: the client, and whether the app owns it (and drains it at
/// shutdown).
pub(crate) async fn connect(connect: Connect) -> Result<(Client, bool), StartError> {
    match connect {
        Connect::Client(client) => Ok((client, false)),
        Connect::Url { url, options } => Ok((connect_url(&url, *options).await?, true)),
    }
}

/// Connects to `url` with `options`, the URL read as [`App::new`](crate::App::new) reads it:
/// one server URL or several separated by commas, credentials in them handed to async-nats as
/// options. For a client of your own beside an app, or for tools, that takes the same URLs the
/// app does (async-nats' own `connect` would ignore the credentials). On smol, call it inside
/// `Compat` (see `ruststream-smol`'s docs): async-nats starts its connection on Tokio.
///
/// # Errors
/// [`StartError::ServerUrl`] for a URL that does not parse, naming the entry and the part;
/// [`StartError::Connect`] when no server could be reached or the server refused the
/// credentials. Neither message ever holds a URL or a credential.
pub async fn connect_url(url: &str, options: ConnectOptions) -> Result<Client, StartError> {
    let servers = ServerList::parse(url).map_err(StartError::ServerUrl)?;
    let options = servers.apply(options);
    options.connect(servers.addresses).await.map_err(|e| {
        use async_nats::ConnectErrorKind as K;
        let detail = match e.kind() {
            // These sources name no address or credential (a TLS one names the certificate
            // file's or the handshake's trouble).
            K::Io | K::TimedOut | K::Dns | K::Tls => std::error::Error::source(&e)
                .map(|s| format!("{}: {s}", e.kind()))
                .unwrap_or_else(|| e.kind().to_string()),
            other => other.to_string(),
        };
        StartError::Connect(detail)
    })
}
