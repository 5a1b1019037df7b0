//! Starting a mount's loop: its context built from its checked parts and the app's current
//! client, and its loop spawned. At start-up for every mount, and again by the supervisor for
//! a mount whose subscription or pull inbox ended (rule 20).

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use async_nats::Client;
use futures_util::FutureExt;
use ruststream_settlement::{Descriptor, PendingCopy};
use tokio::sync::{Semaphore, mpsc, watch};

use super::core_loop::{core_loop, spawned_slots};
use super::pull_loop::pull_loop;
use crate::api::context::ContextShared;
use crate::api::health::HealthBoard;
use crate::api::reports::Observer;
use crate::runtime::{LoopThread, Runtime};
use crate::state::checked_mount::{CheckedMount, Source};
use crate::state::lease_room::LeaseRoom;
use crate::state::mount_context::{LiteralSubject, MountContext};
use crate::state::record::MountRecord;
use crate::support::names::intern;

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
    /// A Core mount's subscription buffer unless it sets its own: the app's subscription
    /// capacity.
    pub(crate) subscription_buffer: NonZeroUsize,
    /// Where the app's health is told (a pull loop whose requests the server refuses).
    pub(crate) health: HealthBoard,
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
            literal_subject: LiteralSubject::of(&policy),
            handler_context: ContextShared::new(
                record.name,
                policy.clone(),
                client,
                self.shutdown.clone(),
                self.leases.clone(),
                mount.publish_ids,
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
            unfit: record.unfit.clone(),
            warned_retry: record.warned_retry.clone(),
            metrics: record.metrics.clone(),
            on_error: mount.on_error.clone(),
            strict_order: mount.strict_order,
            batch_max: mount.batch.map_or(0, |(max, _)| max),
            beside_loop: {
                let reactor = self.reactor.clone();
                let thread = match source {
                    Source::JetStream(_) => LoopThread::Connection,
                    Source::Core(_) => LoopThread::Core,
                };
                Arc::new(move |task| drop(R::spawn_next_to(&reactor, thread, task)))
            },
            placement: record.placement.clone(),
            health: self.health.clone(),
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
                let slots = Arc::new(Semaphore::new(mount.slots().get()));
                let pulling = pull_loop::<R>(
                    ctx,
                    *consumer,
                    slots,
                    mount.slots(),
                    self.reconnected.clone(),
                    self.shutdown.clone(),
                    mount.priority.clone(),
                );
                // A combinator, not an `async` block awaiting the loop: such a block holds
                // the loop's future twice over (captured, and again while awaited).
                R::spawn_next_to(
                    &self.reactor,
                    LoopThread::Connection,
                    pulling.map(move |()| tell_if_ended()),
                )
            }
            Source::Core(subscribers) => {
                let slots = Arc::new(Semaphore::new(spawned_slots(mount.slots())));
                let consuming = core_loop::<R>(
                    ctx,
                    subscribers,
                    slots,
                    mount.subscription_buffer_or(self.subscription_buffer),
                    self.shutdown.clone(),
                );
                R::spawn_next_to(
                    &self.reactor,
                    LoopThread::Core,
                    consuming.map(move |()| tell_if_ended()),
                )
            }
        }
    }
}
