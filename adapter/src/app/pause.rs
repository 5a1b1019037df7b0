//! Pausing a JetStream mount's consumer, and resuming it (nats-server 2.11+):
//! [`PauseHandle`] (and [`Running::pause_until`], [`Running::resume`]), through the consumer pause API
//! (`$JS.API.CONSUMER.PAUSE.<stream>.<consumer>`).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::Client;
use ruststream_settlement::{ServerFeature, check_server_has, rfc3339};
use tokio::sync::watch;

use super::running::Running;
use crate::api::health::HealthBoard;
use crate::runtime::{Reactor, Runtime};
use crate::state::record::MountRecord;
use crate::support::js_api::api_request;

/// How long a pause or resume request waits for the server's answer.
const PAUSE_PATIENCE: Duration = Duration::from_secs(5);

/// Why a mount's consumer could not be paused or resumed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PauseError {
    /// The app has no mount of that name.
    #[error("the app has no mount `{0}`")]
    UnknownMount(String),
    /// The mount is a Core mount: only a JetStream consumer can be paused (a Core mount is
    /// stopped by shutting its app down).
    #[error("mount `{0}` is a Core mount: only a JetStream mount's consumer can be paused")]
    NotJetStream(String),
    /// The server has no consumer pause: older than 2.11. Names the server's version.
    #[error("mount `{mount}`: {reason}")]
    Unsupported {
        /// The mount.
        mount: String,
        /// Which version is needed, and the server's.
        reason: String,
    },
    /// The server refused, or did not answer within 5 s.
    #[error("mount `{mount}`: the consumer could not be paused or resumed: {reason}")]
    Server {
        /// The mount.
        mount: String,
        /// The server's error, or that it did not answer.
        reason: String,
    },
}

/// What the server says of a consumer's pause after a pause or resume request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PauseState {
    /// Whether the consumer is paused.
    pub paused: bool,
    /// How long it stays paused, by the server's clock (zero when it is not).
    pub remaining: Duration,
}

/// The server's answer to `CONSUMER.PAUSE`.
#[derive(serde::Deserialize)]
struct PauseAnswer {
    #[serde(default)]
    paused: bool,
    /// Nanoseconds.
    #[serde(default)]
    pause_remaining: u64,
}

/// A handle that pauses and resumes a running app's JetStream consumers (nats-server 2.11+),
/// from anywhere: given by [`Running::pause_handle`], cheap to clone, usable while the app
/// runs under [`Running::until_signal`] or `App::run` (which take the [`Running`] itself).
/// See [`pause_until`](Self::pause_until).
pub struct PauseHandle<R: Runtime> {
    reactor: R::Reactor,
    clients: Arc<watch::Sender<Client>>,
    mounts: Arc<[MountRecord]>,
    health: HealthBoard,
}

impl<R: Runtime> Clone for PauseHandle<R> {
    fn clone(&self) -> Self {
        Self {
            reactor: self.reactor.clone(),
            clients: self.clients.clone(),
            mounts: self.mounts.clone(),
            health: self.health.clone(),
        }
    }
}

impl<R: Runtime> std::fmt::Debug for PauseHandle<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PauseHandle").finish_non_exhaustive()
    }
}

impl<R: Runtime> Running<R> {
    /// A handle that pauses and resumes the app's JetStream consumers from elsewhere (a signal
    /// handler, an admin endpoint of the app's own) while this [`Running`] waits in
    /// [`until_signal`](Self::until_signal).
    pub fn pause_handle(&self) -> PauseHandle<R> {
        PauseHandle {
            reactor: self.reactor.clone(),
            clients: self.clients.clone(),
            mounts: self.mounts.clone(),
            health: self.health.clone(),
        }
    }

    /// [`PauseHandle::pause_until`] on this app.
    ///
    /// # Errors
    /// As [`PauseHandle::pause_until`].
    pub async fn pause_until(
        &self,
        mount: &str,
        until: SystemTime,
    ) -> Result<PauseState, PauseError> {
        self.pause_handle().pause_until(mount, until).await
    }

    /// [`PauseHandle::resume`] on this app.
    ///
    /// # Errors
    /// As [`PauseHandle::pause_until`].
    pub async fn resume(&self, mount: &str) -> Result<PauseState, PauseError> {
        self.pause_handle().resume(mount).await
    }
}

impl<R: Runtime> PauseHandle<R> {
    /// Pauses mount `mount`'s JetStream consumer until `until` (nats-server 2.11+): the
    /// server delivers none of its messages to any instance until then, or until
    /// [`resume`](Self::resume). The app keeps running: its pull requests wait on the server,
    /// its other mounts go on, and its health shows the mount as paused
    /// ([`MountHealth::paused_until`](crate::MountHealth::paused_until)) and still ready.
    ///
    /// Deliveries the mount received before the pause began are handled and settled as
    /// usual (their handlers run, their results and renewals are sent): a pause stops new
    /// deliveries, not the ones in hand. A time already past resumes. The pause is the
    /// consumer's, on the server: it holds for every instance that pulls the consumer, and
    /// lasts past this app's restart until `until`.
    ///
    /// # Errors
    /// [`PauseError::UnknownMount`], [`PauseError::NotJetStream`], [`PauseError::Unsupported`]
    /// on a server older than 2.11 (naming its version), and [`PauseError::Server`] when the
    /// server refuses or does not answer within 5 s.
    pub async fn pause_until(
        &self,
        mount: &str,
        until: SystemTime,
    ) -> Result<PauseState, PauseError> {
        self.pause_request(mount, Some(until)).await
    }

    /// Resumes mount `mount`'s JetStream consumer, paused by
    /// [`pause_until`](Self::pause_until) or elsewhere (`nats consumer pause`): the server
    /// delivers again at once, to the instances' waiting pull requests. Resuming a consumer
    /// that is not paused does nothing.
    ///
    /// # Errors
    /// As [`pause_until`](Self::pause_until).
    pub async fn resume(&self, mount: &str) -> Result<PauseState, PauseError> {
        self.pause_request(mount, None).await
    }

    /// Sends the pause request (`until`; `None` resumes) and shows the answer in the health.
    async fn pause_request(
        &self,
        mount: &str,
        until: Option<SystemTime>,
    ) -> Result<PauseState, PauseError> {
        let (index, record) = self
            .mounts
            .iter()
            .enumerate()
            .find(|(_, m)| m.name == mount)
            .ok_or_else(|| PauseError::UnknownMount(mount.to_owned()))?;
        let (stream, consumer) = record
            .consumer
            .clone()
            .ok_or_else(|| PauseError::NotJetStream(mount.to_owned()))?;
        let client = self.clients.borrow().clone();
        check_server_has(&client.server_info().version, ServerFeature::ConsumerPause).map_err(
            |reason| PauseError::Unsupported {
                mount: mount.to_owned(),
                reason,
            },
        )?;
        let server = |reason: String| PauseError::Server {
            mount: mount.to_owned(),
            reason,
        };
        let body = match until {
            Some(until) => {
                let nanos = until
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
                serde_json::json!({ "pause_until": rfc3339(nanos) })
            }
            None => serde_json::json!({}),
        };
        let subject = format!("CONSUMER.PAUSE.{stream}.{consumer}");
        let answer: PauseAnswer = self
            .reactor
            .enter(api_request::<R, _>(client, subject, body, PAUSE_PATIENCE))
            .await
            .map_err(|e| server(e.to_string()))?;
        let state = PauseState {
            paused: answer.paused,
            remaining: Duration::from_nanos(answer.pause_remaining),
        };
        self.health
            .paused(index, paused_until::<R>(state.paused, state.remaining));
        tracing::info!(mount = %mount, paused = state.paused, remaining = ?state.remaining,
            "the mount's consumer was {}", if state.paused { "paused" } else { "resumed" });
        Ok(state)
    }
}

/// Until when, by the runtime's clock, a consumer that is `paused` for `remaining` is.
pub(crate) fn paused_until<R: Runtime>(paused: bool, remaining: Duration) -> Option<Instant> {
    paused.then(|| R::now() + remaining)
}
