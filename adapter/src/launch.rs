//! Starting a mount's loop: its context built from its checked parts and the app's current
//! client, and its loop spawned. At start-up for every mount, and again by the supervisor for
//! a mount whose subscription or pull inbox ended (rule 20).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use async_nats::Client;
use ruststream_core::{Descriptor, PendingCopy};
use tokio::sync::{Semaphore, mpsc, watch};

use crate::LoopThread;
use crate::context::ContextShared;
use crate::core_loop::{core_loop, spawned_slots};
use crate::leases::{LeaseRoom, LeaseSettings};
use crate::metrics::MountMetrics;
use crate::mount_context::{Careful, InFlight, Losses, MountContext, Received, intern};
use crate::pull_loop::pull_loop;
use crate::report::Observer;
use crate::runtime::Runtime;
use crate::startup::{CheckedMount, Source, literal_subject};

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
    /// Whether it warned of a Core `retry` that does nothing (rule 22: once per mount).
    pub(crate) warned_retry: Arc<AtomicBool>,
    /// Its metrics, registered when the app starts.
    pub(crate) metrics: Arc<MountMetrics>,
}

impl MountRecord {
    /// A record for the mount `checked`, with its lease settings from its consumer.
    pub(crate) fn new(checked: &CheckedMount) -> Self {
        let name = intern(checked.mount.name());
        let metrics = Arc::new(MountMetrics::register(name));
        Self {
            name,
            in_flight: Arc::new(InFlight::new(metrics.clone())),
            losses: Arc::new(Losses::new(metrics.clone())),
            lease_settings: Arc::new(Mutex::new(lease_settings(checked))),
            received: Arc::new(Received::new(matches!(
                checked.source,
                Source::JetStream(_)
            ))),
            careful: Arc::default(),
            warned_retry: Arc::default(),
            metrics,
        }
    }
}

/// A mount's lease settings: its declaration's, and its consumer's `ack_wait` and `BackOff`.
pub(crate) fn lease_settings(checked: &CheckedMount) -> LeaseSettings {
    let consumer_config = match &checked.source {
        Source::JetStream(consumer) => Some(&consumer.cached_info().config),
        Source::Core(_) => None,
    };
    LeaseSettings {
        ack_wait: consumer_config.map(|c| c.ack_wait),
        backoff: consumer_config
            .map(|c| c.backoff.clone())
            .unwrap_or_default(),
        renew: checked.mount.leases,
        limit: checked.mount.handler_time_limit,
    }
}

/// A mount loop that ended while the app was not shutting down.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ended {
    /// The mount's index.
    pub(crate) index: usize,
    /// The client generation the loop ran on (see [`Launcher::generation`]).
    pub(crate) generation: u64,
}

/// What every mount's loop is started with.
pub(crate) struct Launcher<R: Runtime> {
    pub(crate) reactor: R::Reactor,
    pub(crate) delayed: mpsc::UnboundedSender<(PendingCopy, Instant)>,
    pub(crate) leases: Arc<LeaseRoom>,
    pub(crate) observer: Option<Observer>,
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Told the index of a mount whose loop ended while the app was not shutting down: its
    /// subscription or pull inbox ended under it.
    pub(crate) ended: mpsc::UnboundedSender<Ended>,
    /// How many times the app's client has been replaced: a loop is launched on that client
    /// generation, and says it when it ends.
    pub(crate) generation: Arc<AtomicU64>,
    /// Counts the connection's losses that async-nats got over by itself: a pull loop then
    /// takes back the slots of its outstanding requests, which the server has forgotten.
    pub(crate) reconnected: watch::Receiver<u64>,
    /// The app's current client.
    pub(crate) clients: watch::Receiver<Client>,
}

impl<R: Runtime> Launcher<R> {
    /// Starts the loop of mount `index` on `client`, counting into `record`.
    pub(crate) fn launch(
        &self,
        index: usize,
        checked: CheckedMount,
        client: &Client,
        record: &MountRecord,
    ) -> R::Task {
        let CheckedMount {
            mount,
            handler,
            policy,
            source,
            dead_letters,
        } = checked;
        let jetstream_names = match policy.descriptor() {
            Descriptor::JetStream { stream, consumer } => Some((intern(stream), intern(consumer))),
            Descriptor::CoreSubject(_) | Descriptor::CoreWildcard { .. } => None,
        };
        let ctx = Arc::new(MountContext {
            index,
            name: record.name,
            literal_subject: literal_subject(&policy),
            handler_context: ContextShared::new(
                record.name,
                policy.clone(),
                client,
                self.shutdown.clone(),
            ),
            policy,
            handler,
            client: client.clone(),
            clients: self.clients.clone(),
            dead_letters,
            delayed: self.delayed.clone(),
            jetstream_names,
            observer: self.observer.clone(),
            leases: self.leases.clone(),
            lease_settings: record.lease_settings.clone(),
            in_flight: record.in_flight.clone(),
            losses: record.losses.clone(),
            received: record.received.clone(),
            careful: record.careful.clone(),
            warned_retry: record.warned_retry.clone(),
            metrics: record.metrics.clone(),
            on_error: mount.on_error.clone(),
        });
        let shutdown = self.shutdown.clone();
        let ended = self.ended.clone();
        let generation = self.generation.load(Ordering::Acquire);
        let tell_if_ended = move || {
            if !*shutdown.borrow() {
                let _ = ended.send(Ended { index, generation });
            }
        };
        match source {
            Source::JetStream(consumer) => {
                let slots = Arc::new(Semaphore::new(mount.concurrency.get()));
                let pulling = pull_loop::<R>(
                    ctx,
                    *consumer,
                    slots,
                    mount.concurrency,
                    self.reconnected.clone(),
                    self.shutdown.clone(),
                );
                R::spawn_next_to(&self.reactor, LoopThread::Connection, async move {
                    pulling.await;
                    tell_if_ended();
                })
            }
            Source::Core(subscribers) => {
                let slots = Arc::new(Semaphore::new(spawned_slots(mount.concurrency)));
                let consuming = core_loop::<R>(
                    ctx,
                    subscribers,
                    slots,
                    mount.subscription_buffer_or_default(),
                    self.shutdown.clone(),
                );
                R::spawn_next_to(&self.reactor, LoopThread::Core, async move {
                    consuming.await;
                    tell_if_ended();
                })
            }
        }
    }
}

/// Replaces `record`'s lease settings.
pub(crate) fn update_lease_settings(record: &MountRecord, settings: LeaseSettings) {
    *record
        .lease_settings
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = settings;
}
