//! The supervisor (rule 20): one task per app that notices a mount whose subscription or pull
//! inbox ended while the app runs, reconnects and subscribes it again within a bounded time,
//! and ends the app with an error when that keeps failing, so that a process never stays up
//! consuming nothing.
//!
//! Every 500 ms it checks the client: a dead one (its connection task gone) is replaced at
//! once by a new client from the app's URL and options; a reconnection that async-nats made
//! by itself is logged, reported, and told to the pull loops; a connection down past the
//! app's limit ends the app. It logs each mount's new Core losses (rule 21).
//!
//! After every loss of the connection each JetStream mount's consumer is read for a suspect:
//! the first message after its ack floor that the mount never received, unless the mount
//! holds (in flight) as many messages as the consumer waits for, since then it waits for
//! none other (the server does not say which messages above the ack floor are acknowledged,
//! and one an earlier process acknowledged there was never received by this one). A message that
//! brings the client down every time it is delivered never reaches the mount and stays in
//! place; while it is suspected the mount pulls one message at a time, and after
//! [`SAME_SUSPECT_LIMIT`] losses in a row with the same one, the app ends with an error naming
//! its stream sequence, rather than let it be redelivered without bound (its delivery never
//! reaches a handler, so no `max_attempts` can end it). Where several processes share one
//! durable, a message in flight at another process was never received by this one either:
//! it can be taken for a suspect only if this process loses its connection three times in a
//! row while that message stays unacknowledged and first after the ack floor.
//!
//! Every [`CONSUMER_REREAD`] (by default) it reads each JetStream mount's consumer again, and
//! takes a changed `ack_wait` or `BackOff` into its lease settings (rule 16).

mod health;
mod losses;
mod reread;
mod suspects;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_nats::{Client, ConnectOptions};
use tokio::sync::{mpsc, watch};

pub use self::health::DEFAULT_DISCONNECTED_LIMIT;
pub use self::reread::CONSUMER_REREAD;
pub use self::suspects::SAME_SUSPECT_LIMIT;
use self::suspects::careful_span;
use super::declarations::Declared;
use super::mount_checks::{Overlaps, check_mounts};
use super::startup::connect_url;
use crate::api::health::{HealthBoard, MountState};
use crate::api::reports::{CoreLosses, Recovery};
use crate::loops::launch::{Ended, Launcher};
use crate::runtime::Runtime;
use crate::state::record::MountRecord;
use crate::support::backoff::Backoff;
use crate::support::liveness::{Liveness, liveness};

/// How long the supervisor waits, after a mount's subscription ended, for the others that end
/// with it (a dead connection ends them all), so that one recovery covers them.
const GATHER: Duration = Duration::from_millis(100);

/// How long a recovery may take: a new connection if the old one is dead, then every ended
/// mount checked and subscribed again. Past it, the app ends with an error.
pub const RECOVERY_LIMIT: Duration = Duration::from_secs(30);

/// How many recoveries [`RECOVERY_WINDOW`] may hold: one more, and the app ends with an error.
pub const MAX_RECOVERIES: usize = 5;

/// The window [`MAX_RECOVERIES`] counts in.
pub const RECOVERY_WINDOW: Duration = Duration::from_secs(300);

/// How often the supervisor looks at the connection's reconnect count.
const HEALTH_EVERY: Duration = Duration::from_millis(500);

/// How long a flush may take to tell a live client from a dead one, and a server request
/// (consumer info) may take.
const PATIENCE: Duration = Duration::from_secs(5);

/// How many recoveries an app keeps for its report (the most recent); older ones are only in
/// the log.
pub const RECOVERIES_KEPT: usize = 1000;

/// What the supervisor needs, built by the app at start-up.
pub(crate) struct Supervisor<R: Runtime> {
    pub(crate) launcher: Launcher<R>,
    /// How to connect again: `None` for an app on the application's own client.
    pub(crate) connect: Option<(String, ConnectOptions)>,
    pub(crate) clients: Arc<watch::Sender<Client>>,
    pub(crate) declared: Vec<Declared>,
    pub(crate) records: Arc<[MountRecord]>,
    pub(crate) tasks: Arc<Mutex<Vec<Option<R::Task>>>>,
    pub(crate) ended: mpsc::UnboundedReceiver<Ended>,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) failed: Arc<watch::Sender<Option<String>>>,
    pub(crate) recoveries: Arc<Mutex<Vec<Recovery>>>,
    /// How often the consumers are read again ([`CONSUMER_REREAD`] unless a test says).
    pub(crate) consumer_reread: Duration,
    /// Counts the reconnections async-nats made by itself, for the pull loops.
    pub(crate) reconnected: watch::Sender<u64>,
    /// How long the connection may stay down before the app ends.
    pub(crate) disconnected_limit: Duration,
    /// Where the mounts' and the connection's states are told.
    pub(crate) health: HealthBoard,
}

/// Why a try at subscribing again failed.
enum Retry {
    /// Worth another try (the server may come back).
    Later(String),
    /// Not: nothing can change it.
    Never(String),
}

/// The supervisor's own bookkeeping.
struct Watch {
    /// When recent recoveries began.
    window: VecDeque<Instant>,
    /// Per JetStream mount: its consumer's oldest unacknowledged stream sequence at the last
    /// loss of the connection, and in how many losses in a row it was the same.
    suspects: HashMap<usize, (u64, u32)>,
    /// The client's connect count last seen.
    connects: u64,
    /// A dead client was replaced by the health check; the mounts it ended are still to be
    /// subscribed again on the new one.
    replaced: bool,
    /// Since when the connection has been down, while it is.
    down_since: Option<Instant>,
    /// When the last "still down" warning was logged.
    down_logged: Option<Instant>,
    /// Each mount's Core losses as last logged, and when.
    losses_logged: Vec<(CoreLosses, Option<Instant>)>,
    /// The JetStream mounts whose consumer is gone or does not fit them, when that was last
    /// logged, and whether it did not fit (`false`: gone).
    gone: HashMap<usize, (Instant, bool)>,
}

impl<R: Runtime> Supervisor<R> {
    /// Runs until shutdown begins, or until the app must end: then the reason is in `failed`.
    pub(crate) async fn run(mut self) {
        let mut watch = Watch {
            window: VecDeque::new(),
            suspects: HashMap::new(),
            connects: self.client().statistics().connects.load(ORDER),
            replaced: false,
            down_since: None,
            down_logged: None,
            losses_logged: self
                .records
                .iter()
                .map(|r| {
                    let none = CoreLosses {
                        mount: r.name.to_owned(),
                        ..Default::default()
                    };
                    (none, None)
                })
                .collect(),
            gone: HashMap::new(),
        };
        self.watch_until_stopped(&mut watch).await;
        self.log_losses(&mut watch, true);
    }

    /// [`run`](Self::run)'s loop.
    async fn watch_until_stopped(&mut self, watch: &mut Watch) {
        let mut health = R::now() + HEALTH_EVERY;
        let mut reread = ruststream_settlement::deadline(R::now(), self.consumer_reread);
        let mut stop = self.shutdown.clone();
        loop {
            if *stop.borrow_and_update() {
                return;
            }
            let work = async {
                tokio::select! {
                    biased;
                    Some(first) = self.ended.recv() => Some(self.recover(first, watch).await),
                    () = R::sleep_until(health) => {
                        health = R::now() + HEALTH_EVERY;
                        self.log_losses(watch, false);
                        Some(self.health(watch).await)
                    }
                    () = R::sleep_until(reread) => {
                        reread = ruststream_settlement::deadline(R::now(), self.consumer_reread);
                        self.reread_consumers(watch).await;
                        Some(Ok(()))
                    }
                    else => None,
                }
            };
            // Shutdown wins over whatever the supervisor is doing: it starts nothing after.
            let outcome = tokio::select! {
                biased;
                changed = stop.changed() => match changed {
                    Ok(()) => continue,
                    Err(_) => return,
                },
                outcome = work => outcome,
            };
            match outcome {
                Some(Ok(())) => {}
                None => return,
                Some(Err(reason)) => {
                    tracing::error!(reason = %reason, "the app cannot go on; stopping");
                    self.health.stopped(Some(reason.clone()));
                    self.failed.send_replace(Some(reason));
                    return;
                }
            }
        }
    }

    fn client(&self) -> Client {
        self.clients.borrow().clone()
    }

    fn names(&self, indices: &BTreeSet<usize>) -> Vec<String> {
        indices
            .iter()
            .map(|&i| self.records[i].name.to_owned())
            .collect()
    }

    /// Reconnects if need be, and subscribes again every mount whose loop ended (`first`,
    /// and those that end with it).
    async fn recover(&mut self, first: Ended, watch: &mut Watch) -> Result<(), String> {
        let mut ended = vec![first];
        self.health
            .mounts(Some(&[first.index]), MountState::Reconnecting);
        R::sleep_until(R::now() + GATHER).await;
        while let Ok(more) = self.ended.try_recv() {
            ended.push(more);
        }
        let indices: BTreeSet<usize> = ended.iter().map(|e| e.index).collect();
        let listed: Vec<usize> = indices.iter().copied().collect();
        self.health.mounts(Some(&listed), MountState::Reconnecting);
        let names = self.names(&indices);
        tracing::error!(mounts = ?names,
            "the subscriptions of these mounts ended while the app runs: reconnecting and subscribing them again");
        let started = R::now();
        // A loop that ran on a client replaced since ended because that client died: that loss
        // is counted already, once for all its mounts.
        let current = self
            .launcher
            .generation
            .load(std::sync::atomic::Ordering::Acquire);
        if ended.iter().any(|e| e.generation == current) {
            self.count_loss(watch, &names)?;
        }
        let deadline = started + RECOVERY_LIMIT;
        let mut backoff = Backoff::new(Duration::from_millis(100));
        let mut client_died = std::mem::take(&mut watch.replaced);
        loop {
            let pause = backoff.failed();
            match self.resubscribe(&indices, &mut client_died).await {
                Ok(()) => break,
                Err(Retry::Never(e)) => return Err(format!("mounts {names:?}: {e}")),
                Err(Retry::Later(e)) if R::now() + pause < deadline => {
                    tracing::warn!(mounts = ?names, error = %e, "subscribing again failed; trying again");
                    tokio::select! {
                        () = R::sleep_until(R::now() + pause) => {}
                        _ = self.shutdown.changed() => return Ok(()),
                    }
                }
                Err(Retry::Later(e)) => {
                    return Err(format!(
                        "mounts {names:?}: could not subscribe again within {} s: {e}",
                        RECOVERY_LIMIT.as_secs()
                    ));
                }
            }
        }
        let reason = match client_died {
            true => "the client's connection ended; a new client was connected",
            false => "the subscriptions ended on a live connection",
        };
        tracing::warn!(mounts = ?names, took = ?R::now().saturating_duration_since(started), reason,
            "mounts subscribed again");
        self.health.mounts(Some(&listed), MountState::Consuming);
        self.record(reason, names);
        if client_died {
            watch.connects = self.client().statistics().connects.load(ORDER);
            self.check_suspects(watch, "the client's connection ended")
                .await?;
        }
        Ok(())
    }

    /// One try at subscribing `indices` again: a new client first if the current one is dead.
    async fn resubscribe(
        &mut self,
        indices: &BTreeSet<usize>,
        client_died: &mut bool,
    ) -> Result<(), Retry> {
        let mut client = self.client();
        match liveness::<R>(&client, PATIENCE).await {
            Liveness::Alive => {}
            Liveness::Dead => {
                *client_died = true;
                client = self.replace_client().await?;
            }
            Liveness::NoAnswer => {
                return Err(Retry::Later(
                    "the connection to NATS does not answer".to_owned(),
                ));
            }
        }
        let declared = indices.iter().map(|&i| self.declared[i].clone()).collect();
        let checked = check_mounts::<R>(&client, declared, Overlaps::Skip)
            .await
            .map_err(|e| Retry::Later(e.to_string()))?;
        for (&index, checked) in indices.iter().zip(checked) {
            let record = &self.records[index];
            record.set_lease_settings(checked.lease_settings());
            if *client_died {
                // Until the suspects are read: the message that brought the client down may
                // come back in a batch and take the others down with it.
                record.careful.until(R::now() + careful_span(record));
            }
            let task = self.launcher.launch(index, checked, &client, record);
            record.metrics.recovered();
            // The old loop has ended: its handle goes.
            self.tasks.lock().unwrap_or_else(PoisonError::into_inner)[index] = Some(task);
        }
        Ok(())
    }

    /// Counts one loss of the client or of subscriptions in the window: past
    /// [`MAX_RECOVERIES`] within [`RECOVERY_WINDOW`], the app cannot go on.
    fn count_loss(&self, watch: &mut Watch, names: &[String]) -> Result<(), String> {
        let now = R::now();
        watch
            .window
            .retain(|at| now.saturating_duration_since(*at) < RECOVERY_WINDOW);
        watch.window.push_back(now);
        if watch.window.len() > MAX_RECOVERIES {
            return Err(format!(
                "mounts {names:?}: the client or its subscriptions were lost {} times within {} s; \
                 not trying again. The likeliest cause is a message that brings the client down, \
                 published again and again on a subject a mount receives (a header value with a \
                 lone CR, a subject that is not UTF-8): the log's recoveries say when; find its \
                 publisher",
                watch.window.len(),
                RECOVERY_WINDOW.as_secs()
            ));
        }
        Ok(())
    }

    /// Connects a new client in place of the dead one, from the app's URL and options, and
    /// makes it the app's client (its settlements, renewals, copies and the mounts subscribed
    /// from now on use it).
    async fn replace_client(&self) -> Result<Client, Retry> {
        let Some((url, options)) = &self.connect else {
            return Err(Retry::Never(
                "the application's own NATS client stopped working, and an app made with \
                 App::with_client cannot connect a new one"
                    .to_owned(),
            ));
        };
        tracing::error!("the NATS client stopped working: connecting a new one");
        let client = match R::timeout(PATIENCE, connect_url(url, options.clone())).await {
            Some(Ok(client)) => client,
            Some(Err(e)) => return Err(Retry::Later(e.to_string())),
            None => {
                return Err(Retry::Later("connecting a new client timed out".to_owned()));
            }
        };
        self.launcher
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.clients.send_replace(client.clone());
        Ok(client)
    }

    /// Keeps a recovery for the report: the last [`RECOVERIES_KEPT`].
    fn record(&self, reason: &str, mounts: Vec<String>) {
        let mut kept = self
            .recoveries
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if kept.len() == RECOVERIES_KEPT {
            kept.remove(0);
        }
        kept.push(Recovery {
            reason: reason.to_owned(),
            mounts,
        });
    }
}

/// Reading a counter another task writes: no ordering is needed beyond the value itself.
const ORDER: std::sync::atomic::Ordering = std::sync::atomic::Ordering::Relaxed;
