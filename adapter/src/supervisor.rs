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

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::pull;
use async_nats::{Client, ConnectOptions};
use ruststream_core::{Descriptor, MountPolicy};
use tokio::sync::{mpsc, watch};

use crate::handler::Handler;
use crate::health::MountState;
use crate::launch::{Ended, Launcher, MountRecord, lease_settings, update_lease_settings};
use crate::leases::LeaseSettings;
use crate::mount::Mount;
use crate::runtime::Runtime;
use crate::startup::{check_mounts, connect_url};

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

/// After this many losses of the connection in a row while a JetStream consumer's oldest
/// unacknowledged message stays the same, the app ends with an error naming it.
pub const SAME_SUSPECT_LIMIT: u32 = 3;

/// How many sequences after a consumer's ack floor are searched for the message that
/// brought the client down.
const SUSPECT_SCAN: u64 = 64;

/// How long a flush may take to tell a dead client at a health check.
const DEAD_CHECK: Duration = Duration::from_millis(200);

/// What a flush says of a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// It answered: connected and working.
    Alive,
    /// It failed at once: its connection task is gone, and nothing sent through it arrives.
    Dead,
    /// No answer within the time given: reconnecting, or a slow server. No verdict.
    NoAnswer,
}

/// Flushes `client`, waiting at most `within`, to tell a dead client from a live one.
pub(crate) async fn liveness<R: Runtime>(client: &Client, within: Duration) -> Liveness {
    match R::timeout(within, client.flush()).await {
        Some(Ok(())) => Liveness::Alive,
        Some(Err(_)) => Liveness::Dead,
        None => Liveness::NoAnswer,
    }
}

/// The info of the consumer `consumer` of `stream`: one request, at most [`PATIENCE`].
async fn consumer_info<R: Runtime>(
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

/// How often a connection that stays down is logged.
const DOWN_WARN_EVERY: Duration = Duration::from_secs(10);

/// How long the connection to NATS may stay down, by default, before the app ends with an
/// error: 2 minutes, about as long as the Go client tries by default (60 reconnects, 2 s
/// apart) before it gives up. Long enough for a server restart or a cluster's failover; short
/// enough that a service cut off for good is restarted and seen.
pub const DEFAULT_DISCONNECTED_LIMIT: Duration = Duration::from_secs(120);

/// How often, at most, a mount's Core losses are logged.
const LOSSES_LOG_EVERY: Duration = Duration::from_secs(5);

/// How often the supervisor looks at the connection's reconnect count.
const HEALTH_EVERY: Duration = Duration::from_millis(500);

/// How often each JetStream mount's consumer is read again for its `ack_wait` and `BackOff`.
pub const CONSUMER_REREAD: Duration = Duration::from_secs(5);

/// How long a flush may take to tell a live client from a dead one, and a server request
/// (consumer info) may take.
const PATIENCE: Duration = Duration::from_secs(5);

/// How many recoveries an app keeps for its report (the most recent); older ones are only in
/// the log.
pub const RECOVERIES_KEPT: usize = 1000;

/// One recovery the supervisor made while the app ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// What happened: the client's connection ended and a new client was made, the
    /// subscriptions ended on a live connection, or async-nats reconnected by itself.
    pub reason: String,
    /// The mounts subscribed again (none when async-nats reconnected by itself: its
    /// subscriptions carry over).
    pub mounts: Vec<String>,
}

/// What the supervisor needs, built by the app at start-up.
pub(crate) struct Supervisor<R: Runtime> {
    pub(crate) launcher: Launcher<R>,
    /// How to connect again: `None` for an app on the application's own client.
    pub(crate) connect: Option<(String, ConnectOptions)>,
    pub(crate) clients: Arc<watch::Sender<Client>>,
    pub(crate) declared: Vec<(Mount, Arc<dyn Handler>, MountPolicy)>,
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
    pub(crate) health: crate::health::HealthBoard,
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
    losses_logged: Vec<(crate::CoreLosses, Option<Instant>)>,
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
                    let none = crate::CoreLosses {
                        mount: r.name.to_owned(),
                        ..Default::default()
                    };
                    (none, None)
                })
                .collect(),
        };
        self.watch_until_stopped(&mut watch).await;
        self.log_losses(&mut watch, true);
    }

    /// [`run`](Self::run)'s loop.
    async fn watch_until_stopped(&mut self, watch: &mut Watch) {
        let mut health = R::now() + HEALTH_EVERY;
        let mut reread = R::now() + self.consumer_reread;
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
                        reread = R::now() + self.consumer_reread;
                        self.reread_consumers().await;
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
        let mut pause = Duration::from_millis(100);
        let mut client_died = std::mem::take(&mut watch.replaced);
        loop {
            match self.resubscribe(&indices, &mut client_died).await {
                Ok(()) => break,
                Err(Retry::Never(e)) => return Err(format!("mounts {names:?}: {e}")),
                Err(Retry::Later(e)) if R::now() + pause < deadline => {
                    tracing::warn!(mounts = ?names, error = %e, "subscribing again failed; trying again");
                    tokio::select! {
                        () = R::sleep_until(R::now() + pause) => {}
                        _ = self.shutdown.changed() => return Ok(()),
                    }
                    pause = (pause * 2).min(Duration::from_secs(2));
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
        let checked = check_mounts::<R>(&client, declared)
            .await
            .map_err(|e| Retry::Later(e.to_string()))?;
        for (&index, checked) in indices.iter().zip(checked) {
            let record = &self.records[index];
            update_lease_settings(record, lease_settings(&checked));
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

    /// Keeps a recovery for the report: the last [`RECOVERIES_KEPT`].
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

    /// Notices a reconnection async-nats made by itself (its subscriptions carry over).
    async fn health(&mut self, watch: &mut Watch) -> Result<(), String> {
        let client = self.client();
        if liveness::<R>(&client, DEAD_CHECK).await == Liveness::Dead {
            match self.replace_client().await {
                Ok(_) => {
                    watch.replaced = true;
                    let all: Vec<String> = self.records.iter().map(|r| r.name.to_owned()).collect();
                    self.count_loss(watch, &all)?;
                }
                Err(Retry::Never(why)) => return Err(why),
                // Tried again at the next check; the mounts' own recovery bounds it.
                Err(Retry::Later(why)) => {
                    tracing::warn!(error = %why, "connecting a new client failed; trying again");
                }
            }
            return Ok(());
        }
        self.watch_down(watch, &client)?;
        let connects = client.statistics().connects.load(ORDER);
        if connects <= watch.connects {
            return Ok(());
        }
        let times = connects - watch.connects;
        watch.connects = connects;
        self.reconnected.send_modify(|n| *n += times);
        tracing::warn!(
            times,
            "the connection to NATS was lost and made again by the client"
        );
        self.record(
            "the connection to NATS was lost; the client reconnected",
            Vec::new(),
        );
        self.check_suspects(watch, "the connection to NATS was lost")
            .await
    }

    /// While the connection is down, warns every [`DOWN_WARN_EVERY`] that no mount consumes;
    /// past the app's limit (`App::disconnected_limit`), ends the app.
    fn watch_down(&self, watch: &mut Watch, client: &Client) -> Result<(), String> {
        use async_nats::connection::State;
        let now = R::now();
        let up = client.connection_state() == State::Connected;
        self.health.connection(up);
        if up {
            if let Some(since) = watch.down_since.take() {
                tracing::info!(down_for = ?now.saturating_duration_since(since), "the connection to NATS is back");
            }
            watch.down_logged = None;
            return Ok(());
        }
        let since = *watch.down_since.get_or_insert(now);
        let down_for = now.saturating_duration_since(since);
        if down_for >= self.disconnected_limit {
            return Err(format!(
                "the connection to NATS has been down for {} s (the app's disconnected limit): \
                 no mount could consume. Check that the servers are up and reachable",
                down_for.as_secs()
            ));
        }
        let warn = watch
            .down_logged
            .is_none_or(|at| now.saturating_duration_since(at) >= DOWN_WARN_EVERY);
        if warn && down_for >= DOWN_WARN_EVERY {
            let mounts: Vec<&str> = self.records.iter().map(|r| r.name).collect();
            tracing::warn!(?down_for, limit = ?self.disconnected_limit, ?mounts,
                "the connection to NATS is down: no mount consumes; the client keeps reconnecting");
            watch.down_logged = Some(now);
        }
        Ok(())
    }

    /// After a loss of the connection: each JetStream mount's consumer's oldest unacknowledged
    /// message, logged; the same one at [`SAME_SUSPECT_LIMIT`] losses in a row ends the app.
    async fn check_suspects(&self, watch: &mut Watch, what: &str) -> Result<(), String> {
        let js = async_nats::jetstream::new(self.client());
        for (index, (_, _, policy)) in self.declared.iter().enumerate() {
            let Descriptor::JetStream { stream, consumer } = policy.descriptor() else {
                continue;
            };
            let name = self.records[index].name;
            let info = match consumer_info::<R>(&js, stream, consumer).await {
                Ok(info) => info,
                Err(e) => {
                    tracing::warn!(mount = %name, error = %e, "cannot read the consumer's info after the connection loss");
                    continue;
                }
            };
            // Nothing waited for, or every message the consumer waits for is one this mount
            // holds (handled, waiting for a slot, or for its dead letter's confirmation; each
            // unacknowledged): none brought the client down. The server does not list which messages above the ack
            // floor are acknowledged, so without this count a message an earlier process (or
            // another one sharing the durable) acknowledged there, which this process never
            // received, would be taken for one.
            if info.num_ack_pending <= self.records[index].in_flight.count() {
                watch.suspects.remove(&index);
                self.records[index].careful.clear();
                continue;
            }
            let Some(sequence) = self.suspect(&js, index, stream, &info).await else {
                // Every message it waits for reached the mount: none brought the client down.
                watch.suspects.remove(&index);
                self.records[index].careful.clear();
                continue;
            };
            let record = &self.records[index];
            record.careful.until(R::now() + careful_span(record));
            let times = match watch.suspects.get(&index) {
                Some(&(seen, n)) if seen == sequence => n + 1,
                _ => 1,
            };
            watch.suspects.insert(index, (sequence, times));
            tracing::warn!(mount = %name, stream, consumer, stream_sequence = sequence, times,
                ack_pending = info.num_ack_pending, redelivered = info.num_redelivered,
                "{what} while this consumer waits for the acknowledgement of the message at this stream sequence, which never reached the mount; it pulls one message at a time meanwhile");
            if times >= SAME_SUSPECT_LIMIT {
                return Err(format!(
                    "mount `{name}`: the connection to NATS was lost {times} times in a row while \
                     consumer `{consumer}` of stream `{stream}` waited for the message at stream \
                     sequence {sequence}, which probably brings the client down every time it is \
                     delivered. Look at it (`nats stream get {stream} {sequence}`), remove it \
                     (`nats stream rmm {stream} {sequence}`) or move it aside, then start the \
                     service again"
                ));
            }
        }
        Ok(())
    }

    /// The message most likely to have brought the client down: the first one after the
    /// consumer's ack floor, up to the last it delivered (at most [`SUSPECT_SCAN`] of them),
    /// that the mount never received (a message the client cannot read never reaches it) and
    /// that the consumer would deliver (still stored, on its filter subject). `None` when every
    /// such message reached the mount: a handler still running, say, is no suspect.
    async fn suspect(
        &self,
        js: &async_nats::jetstream::Context,
        index: usize,
        stream: &str,
        info: &async_nats::jetstream::consumer::Info,
    ) -> Option<u64> {
        let first = info.ack_floor.stream_sequence + 1;
        let last = info
            .delivered
            .stream_sequence
            .min(first.saturating_add(SUSPECT_SCAN - 1));
        let received = self.records[index].received.snapshot();
        let filter = match info.config.filter_subject.as_str() {
            "" => None,
            f => ruststream_core::Wildcard::new(f).ok(),
        };
        let Some(Ok(stream)) = R::timeout(PATIENCE, js.get_stream(stream)).await else {
            return None;
        };
        for sequence in first..=last {
            if received.contains(&sequence) {
                continue;
            }
            // The stored message, as JSON (its headers base64-encoded): reading it cannot
            // bring the client down, though it may fail to decode.
            use async_nats::jetstream::stream::RawMessageErrorKind;
            let stored = match R::timeout(PATIENCE, stream.get_raw_message(sequence)).await {
                Some(Ok(stored)) => stored,
                Some(Err(e)) if e.kind() == RawMessageErrorKind::NoMessageFound => continue,
                // Stored, and async-nats cannot read it either: the likeliest culprit.
                Some(Err(_)) => return Some(sequence),
                None => continue,
            };
            let on_filter = match (&filter, ruststream_core::Subject::new(&stored.subject)) {
                (None, _) => true,
                (Some(filter), Ok(subject)) => filter.matches(&subject),
                (Some(_), Err(_)) => true,
            };
            if on_filter {
                return Some(sequence);
            }
        }
        None
    }

    /// Logs each mount's Core losses since the last log (rule 21), with what was lost since
    /// and in all: the first at once, then at most one warning per mount every
    /// [`LOSSES_LOG_EVERY`] (`finally`: now, whenever the last was).
    fn log_losses(&self, watch: &mut Watch, finally: bool) {
        let at = R::now();
        for (record, (logged, logged_at)) in self.records.iter().zip(&mut watch.losses_logged) {
            let now = crate::CoreLosses::read(record.name, &record.losses);
            let due = finally
                || logged_at.is_none_or(|t| at.saturating_duration_since(t) >= LOSSES_LOG_EVERY);
            if now.total() == logged.total() || !due {
                continue;
            }
            let dropped = now.slow_consumer - logged.slow_consumer;
            let copies = now.unpublished_copies - logged.unpublished_copies;
            let dead_letters = now.unpublished_dead_letters - logged.unpublished_dead_letters;
            if dropped > 0 {
                tracing::warn!(mount = %record.name, dropped, total = now.slow_consumer,
                    "Core messages dropped: every handler slot was busy and the mount's subscription buffer was full (Core NATS cannot redeliver them)");
            }
            if copies + dead_letters > 0 {
                tracing::warn!(mount = %record.name, copies, dead_letters,
                    total_copies = now.unpublished_copies, total_dead_letters = now.unpublished_dead_letters,
                    "Core copies and dead letters lost: not published (a failed publish, or a copy over max_payload without a dead-letter subject)");
            }
            *logged = now;
            *logged_at = Some(at);
        }
    }

    /// Reads each JetStream mount's consumer again, and takes a changed `ack_wait` or
    /// `BackOff` into the mount's lease settings.
    async fn reread_consumers(&self) {
        let js = async_nats::jetstream::new(self.client());
        for (index, (_, _, policy)) in self.declared.iter().enumerate() {
            let Descriptor::JetStream { stream, consumer } = policy.descriptor() else {
                continue;
            };
            let record = &self.records[index];
            let config = match consumer_info::<R>(&js, stream, consumer).await {
                Ok(info) => info.config,
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

/// How long a JetStream mount pulls one message at a time once a message is suspected of
/// bringing the client down: twice its consumer's `ack_wait` (the suspect comes back after
/// one), between 1 s and 2 minutes.
fn careful_span(record: &MountRecord) -> Duration {
    let ack_wait = record
        .lease_settings
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .ack_wait
        .unwrap_or(Duration::from_secs(30));
    (ack_wait * 2).clamp(Duration::from_secs(1), Duration::from_secs(120))
}

/// Reading a counter another task writes: no ordering is needed beyond the value itself.
const ORDER: std::sync::atomic::Ordering = std::sync::atomic::Ordering::Relaxed;
