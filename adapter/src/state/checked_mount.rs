//! A mount that passed every start-up check, subscribed or bound, ready to consume: what
//! start-up hands the loop that runs it.

use std::sync::Arc;

use ruststream_settlement::MountPolicy;

use super::lease_room::LeaseSettings;
use super::mount_context::DeadLetterSink;
use crate::api::handler::Handler;
use crate::api::mount::Mount;

/// Where a checked mount's messages come from.
pub(crate) enum Source {
    /// A Core mount's subscriptions: its subject or wildcard, and perhaps its copy subject
    /// (rule 10).
    Core(Vec<async_nats::Subscriber>),
    /// A JetStream mount's bound durable.
    JetStream(Box<async_nats::jetstream::consumer::PullConsumer>),
}

/// A mount that passed every check, subscribed or bound, ready to consume.
pub(crate) struct CheckedMount {
    pub(crate) mount: Mount,
    pub(crate) handler: Arc<dyn Handler>,
    pub(crate) policy: MountPolicy,
    pub(crate) source: Source,
    pub(crate) dead_letters: DeadLetterSink,
}

impl CheckedMount {
    /// The mount's lease settings: its declaration's, and its consumer's `ack_wait` and
    /// `BackOff`.
    pub(crate) fn lease_settings(&self) -> LeaseSettings {
        let consumer_config = match &self.source {
            Source::JetStream(consumer) => Some(&consumer.cached_info().config),
            Source::Core(_) => None,
        };
        LeaseSettings {
            ack_wait: consumer_config.map(|c| c.ack_wait),
            backoff: consumer_config
                .map(|c| c.backoff.clone())
                .unwrap_or_default(),
            renew: self.mount.leases,
            limit: self.mount.run_limit(),
        }
    }
}
