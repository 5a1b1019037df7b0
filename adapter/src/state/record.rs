//! What a mount keeps over its life, whatever loop runs it ([`MountRecord`]).

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};

use ruststream_settlement::Descriptor;

use super::careful::Careful;
use super::checked_mount::{CheckedMount, Source};
use super::in_flight::InFlight;
use super::lease_room::LeaseSettings;
use super::losses::Losses;
use super::placement::Placement;
use super::received::Received;
use crate::support::metrics::MountMetrics;
use crate::support::names::intern;

/// What a mount keeps over its life, whatever loop runs it: its name, its deliveries in
/// flight, its losses, and its lease settings (re-read from the consumer while it runs).
pub(crate) struct MountRecord {
    pub(crate) name: &'static str,
    /// Its deliveries still running.
    pub(crate) in_flight: Arc<InFlight>,
    /// Its Core losses (rule 21).
    pub(crate) losses: Arc<Losses>,
    /// How its leases are kept (rule 16).
    pub(crate) lease_settings: Arc<Mutex<LeaseSettings>>,
    /// The JetStream deliveries it received lately (rule 20).
    pub(crate) received: Arc<Received>,
    /// Until when it pulls one message at a time (rule 20).
    pub(crate) careful: Arc<Careful>,
    /// Whether its consumer no longer fits it (the supervisor's re-read): its pull loop sends
    /// no request meanwhile.
    pub(crate) unfit: Arc<std::sync::atomic::AtomicBool>,
    /// Whether it warned of a Core `retry` that does nothing (rule 22: once per mount).
    pub(crate) warned_retry: Arc<AtomicBool>,
    /// Its metrics, registered when the app starts.
    pub(crate) metrics: Arc<MountMetrics>,
    /// Where its JetStream deliveries that wait go on, over every run of its loop: a shutdown
    /// moves those of an earlier run too.
    pub(crate) placement: Arc<Placement>,
    /// A JetStream mount's stream and consumer; `None` for a Core mount.
    pub(crate) consumer: Option<(String, String)>,
}

impl MountRecord {
    /// A record for the mount `checked`, with its lease settings from its consumer; an
    /// endpoint of the app's service keeps its counts for `$SRV.STATS` in its metrics.
    pub(crate) fn new(checked: &CheckedMount) -> Self {
        let name = intern(checked.mount.name());
        let metrics = Arc::new(MountMetrics::register(name, checked.mount.service_endpoint));
        Self {
            name,
            in_flight: Arc::new(InFlight::new(metrics.clone())),
            losses: Arc::new(Losses::new(metrics.clone())),
            lease_settings: Arc::new(Mutex::new(checked.lease_settings())),
            received: Arc::new(Received::new(matches!(
                checked.source,
                Source::JetStream(_)
            ))),
            careful: Arc::default(),
            unfit: Arc::default(),
            warned_retry: Arc::default(),
            metrics,
            placement: Arc::new(Placement::new(name)),
            consumer: match checked.policy.descriptor() {
                Descriptor::JetStream { stream, consumer } => {
                    Some((stream.clone(), consumer.clone()))
                }
                Descriptor::CoreSubject(_) | Descriptor::CoreWildcard { .. } => None,
            },
        }
    }

    /// Replaces the mount's lease settings.
    pub(crate) fn set_lease_settings(&self, settings: LeaseSettings) {
        *self
            .lease_settings
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = settings;
    }
}
