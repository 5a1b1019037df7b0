//! Each JetStream mount's consumer read again, and its `ack_wait` and `BackOff` taken into the
//! mount's lease settings (rule 16), and its pause into the app's health.

use std::sync::PoisonError;
use std::time::Duration;

use async_nats::jetstream::consumer::pull;
use ruststream_settlement::Descriptor;

use super::{PATIENCE, Supervisor, Watch};
use crate::api::health::Refusal;
use crate::app::mount_checks::check_consumer_fits;
use crate::app::pause::paused_until;
use crate::runtime::Runtime;
use crate::state::lease_room::LeaseSettings;
/// How often each JetStream mount's consumer is read again for its `ack_wait` and `BackOff`.
pub const CONSUMER_REREAD: Duration = Duration::from_secs(5);

/// How often a mount whose consumer is gone says so again at error level: every 30 s.
const GONE_LOGGED_EVERY: Duration = Duration::from_secs(30);

/// Why a consumer's info could not be read.
#[derive(Debug)]
pub(super) enum InfoError {
    /// The server says the consumer, or its stream, does not exist (JetStream error codes
    /// 10014 and 10059): deleted under the running mount.
    Gone(String),
    /// It exists, but no longer fits the mount (changed, or made again, under it): what
    /// start-up would refuse, or a push consumer under the mount's name.
    Unfit(String),
    /// Anything else (no answer, JetStream off, a request that failed): it may come back.
    Other(String),
}

impl std::fmt::Display for InfoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Gone(e) | Self::Unfit(e) | Self::Other(e) => f.write_str(e),
        }
    }
}

/// The info of the consumer `consumer` of `stream`: one request, at most [`PATIENCE`].
pub(super) async fn consumer_info<R: Runtime>(
    js: &async_nats::jetstream::Context,
    stream: &str,
    consumer: &str,
) -> Result<async_nats::jetstream::consumer::Info, InfoError> {
    use async_nats::jetstream::ErrorCode;
    use async_nats::jetstream::stream::ConsumerErrorKind;
    let bound = js.get_consumer_from_stream::<pull::Config, _, _>(consumer, stream);
    match R::timeout(PATIENCE, bound).await {
        // Binding reads the info: no second request for it.
        Some(Ok(bound)) => Ok(bound.cached_info().clone()),
        Some(Err(e)) => Err(match e.kind() {
            ConsumerErrorKind::JetStream(j)
                if j.error_code() == ErrorCode::CONSUMER_NOT_FOUND
                    || j.error_code() == ErrorCode::STREAM_NOT_FOUND =>
            {
                InfoError::Gone(e.to_string())
            }
            // A push consumer made under the mount's name (its deliver subject set).
            ConsumerErrorKind::InvalidConsumerType => InfoError::Unfit(e.to_string()),
            _ => InfoError::Other(e.to_string()),
        }),
        None => Err(InfoError::Other(format!(
            "no answer within {} s",
            PATIENCE.as_secs()
        ))),
    }
}

impl<R: Runtime> Supervisor<R> {
    /// Reads each JetStream mount's consumer again, and takes a changed `ack_wait` or
    /// `BackOff` into the mount's lease settings.
    ///
    /// A consumer the server says is gone (deleted, or its stream was) puts its mount in
    /// [`MountState::Refused`](crate::MountState::Refused): nothing can be delivered to it, so
    /// it is not ready, and not live after [`LIVENESS_LIMIT`](crate::LIVENESS_LIMIT); a
    /// restart then creates the consumer again, as start-up does for a missing one. Logged at
    /// error level at once and every 30 s. Once the consumer is back (made again by hand),
    /// the mount consumes again, and says so.
    pub(super) async fn reread_consumers(&self, watch: &mut Watch) {
        let js = async_nats::jetstream::new(self.client());
        for (index, (mount, _, policy)) in self.declared.iter().enumerate() {
            let Descriptor::JetStream { stream, consumer } = policy.descriptor() else {
                continue;
            };
            let record = &self.records[index];
            let read = consumer_info::<R>(&js, stream, consumer)
                .await
                .and_then(|info| {
                    match check_consumer_fits(mount, policy, stream, consumer, &info.config) {
                        Ok(_) => Ok(info),
                        Err(e) => Err(InfoError::Unfit(e.to_string())),
                    }
                });
            let config = match read {
                Ok(info) => {
                    record
                        .unfit
                        .store(false, std::sync::atomic::Ordering::Release);
                    if watch.gone.remove(&index).is_some() {
                        self.health.refused(index, Refusal::Consumer, false);
                        tracing::warn!(mount = %record.name, stream, consumer,
                            "the mount's consumer exists again and fits the mount: the mount consumes again");
                    }
                    // A pause made here or elsewhere, or one that ran out.
                    let remaining = info.pause_remaining.unwrap_or_default();
                    self.health
                        .paused(index, paused_until::<R>(info.paused, remaining));
                    info.config
                }
                Err(InfoError::Other(e)) => {
                    tracing::debug!(mount = %record.name, error = %e, "cannot read the consumer again; its lease settings stay");
                    continue;
                }
                Err(refusal) => {
                    self.health.refused(index, Refusal::Consumer, true);
                    // Gone: its requests go unanswered, and it consumes again once the consumer
                    // is made again. Unfit: it must not pull what it does not declare.
                    let unfit = matches!(refusal, InfoError::Unfit(_));
                    record
                        .unfit
                        .store(unfit, std::sync::atomic::Ordering::Release);
                    let now = R::now();
                    // At once, when the reason changes (gone, then made again unfit), and every
                    // 30 s.
                    let due = watch.gone.get(&index).is_none_or(|(logged, was_unfit)| {
                        *was_unfit != unfit
                            || now.saturating_duration_since(*logged) >= GONE_LOGGED_EVERY
                    });
                    if due {
                        watch.gone.insert(index, (now, unfit));
                        match refusal {
                            InfoError::Gone(e) => {
                                tracing::error!(mount = %record.name, stream, consumer, error = %e,
                                "the mount's consumer no longer exists (deleted, or its stream was): nothing is delivered to the mount, which is not ready, and not live after LIVENESS_LIMIT; a restart creates the consumer again (and its stream, if the app declares it; if not, start-up names the missing stream), or make it again by hand")
                            }
                            _ => {
                                tracing::error!(mount = %record.name, stream, consumer, reason = %refusal,
                                "the mount's consumer was changed or made again so that it no longer fits the mount (start-up would refuse it): the mount is not ready, and not live after LIVENESS_LIMIT; a restart names what differs; make the consumer fit again, or change the mount")
                            }
                        }
                    }
                    continue;
                }
            };
            let changed = {
                let mut settings = record
                    .lease_settings
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let changed = settings.ack_wait != Some(config.ack_wait)
                    || settings.backoff != config.backoff;
                if changed {
                    *settings = LeaseSettings {
                        ack_wait: Some(config.ack_wait),
                        backoff: config.backoff.clone(),
                        ..settings.clone()
                    };
                }
                changed
            };
            if changed {
                tracing::info!(mount = %record.name, ack_wait = ?config.ack_wait, backoff = ?config.backoff,
                    "the consumer's ack_wait or BackOff changed: leases follow it");
            }
        }
    }
}
