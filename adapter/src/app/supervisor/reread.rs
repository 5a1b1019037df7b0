//! Each JetStream mount's consumer read again, and its `ack_wait` and `BackOff` taken into the
//! mount's lease settings (rule 16), and its pause into the app's health.

use std::sync::PoisonError;
use std::time::Duration;

use async_nats::jetstream::consumer::pull;
use ruststream_settlement::Descriptor;

use super::{PATIENCE, Supervisor};
use crate::app::pause::paused_until;
use crate::runtime::Runtime;
use crate::state::lease_room::LeaseSettings;
/// How often each JetStream mount's consumer is read again for its `ack_wait` and `BackOff`.
pub const CONSUMER_REREAD: Duration = Duration::from_secs(5);

/// The info of the consumer `consumer` of `stream`: one request, at most [`PATIENCE`].
pub(super) async fn consumer_info<R: Runtime>(
    js: &async_nats::jetstream::Context,
    stream: &str,
    consumer: &str,
) -> Result<async_nats::jetstream::consumer::Info, String> {
    let bound = js.get_consumer_from_stream::<pull::Config, _, _>(consumer, stream);
    match R::timeout(PATIENCE, bound).await {
        // Binding reads the info: no second request for it.
        Some(Ok(bound)) => Ok(bound.cached_info().clone()),
        Some(Err(e)) => Err(e.to_string()),
        None => Err(format!("no answer within {} s", PATIENCE.as_secs())),
    }
}

impl<R: Runtime> Supervisor<R> {
    /// Reads each JetStream mount's consumer again, and takes a changed `ack_wait` or
    /// `BackOff` into the mount's lease settings.
    pub(super) async fn reread_consumers(&self) {
        let js = async_nats::jetstream::new(self.client());
        for (index, (_, _, policy)) in self.declared.iter().enumerate() {
            let Descriptor::JetStream { stream, consumer } = policy.descriptor() else {
                continue;
            };
            let record = &self.records[index];
            let config = match consumer_info::<R>(&js, stream, consumer).await {
                Ok(info) => {
                    // A pause made here or elsewhere, or one that ran out.
                    let remaining = info.pause_remaining.unwrap_or_default();
                    self.health
                        .paused(index, paused_until::<R>(info.paused, remaining));
                    info.config
                }
                Err(e) => {
                    tracing::debug!(mount = %record.name, error = %e, "cannot read the consumer again; its lease settings stay");
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
