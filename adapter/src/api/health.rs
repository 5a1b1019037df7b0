//! Health and readiness: what the app's connection and each of its mounts are doing, as a
//! value and as a watchable stream, for probes (`/readyz`, `/healthz`) and dashboards.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// How long a mount may stay [`MountState::Reconnecting`], or the connection down, before the
/// app is no longer [live](Health::live): 30 s. Recovery (rule 20) usually takes well under a
/// second; past this bound a supervisor (Kubernetes, systemd) should restart the process
/// rather than wait for the app's own limits (`App::disconnected_limit`, 2 minutes by
/// default; [`RECOVERY_LIMIT`](crate::RECOVERY_LIMIT) per recovery).
pub const LIVENESS_LIMIT: Duration = Duration::from_secs(30);

/// What a mount is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountState {
    /// Its app is starting: checking its declaration, binding its consumer, subscribing.
    Starting,
    /// It consumes: its subscription (Core) or pull loop (JetStream) is running.
    Consuming,
    /// Its subscription or connection ended; it is being subscribed again (rule 20).
    Reconnecting,
    /// The server refuses its pull requests (`400 Bad Request`): its consumer was changed
    /// under it (its priority groups, say) so that the mount's requests no longer fit, or it
    /// is a push consumer (`409`); or its consumer is gone (deleted, or its stream was), or
    /// no longer fits the mount (another filter subject, ack policy or priority group: what
    /// start-up refuses), as the supervisor's re-read of it finds (every
    /// [`CONSUMER_REREAD`](crate::CONSUMER_REREAD)). It asks again every 2 s (one that does not
    /// fit asks nothing, and leaves unhandled and unacknowledged what a request sent before
    /// brings), and consumes again once the server serves it (a consumer made again, and
    /// fitting); the error is logged at once and every 30 s meanwhile. Between a consumer
    /// made again unfit and the next re-read, its requests may bring messages it handles. Not ready, and not live after [`LIVENESS_LIMIT`]: a restart then
    /// meets start-up's checks (rule 11), which name what differs, or creates the missing
    /// consumer.
    Refused,
    /// Its app is shutting down.
    Stopping,
    /// It cannot consume: its app failed to start, or gave up (rule 20); see
    /// [`Health::failure`].
    Failed,
}

impl MountState {
    /// Its name in lower case: `starting`, `consuming`, `reconnecting`, `refused`, `stopping`,
    /// `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Consuming => "consuming",
            Self::Reconnecting => "reconnecting",
            Self::Refused => "refused",
            Self::Stopping => "stopping",
            Self::Failed => "failed",
        }
    }
}

/// One mount's state, and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountHealth {
    /// The mount's name.
    pub mount: String,
    /// What it is doing.
    pub state: MountState,
    /// Since when, by the runtime's clock (the system's; the simulator's virtual one).
    pub since: Instant,
    /// Until when its JetStream consumer is paused (nats-server 2.11+), by the runtime's
    /// clock; `None` when it is not. Set at once by [`Running::pause_until`](crate::Running::pause_until)
    /// and cleared by [`Running::resume`](crate::Running::resume); a pause or resume made
    /// elsewhere (`nats consumer pause`, another instance) shows within
    /// [`CONSUMER_REREAD`](crate::CONSUMER_REREAD), 5 s, as does the end of a pause that ran
    /// out. A paused mount is still [`Consuming`](MountState::Consuming): it is ready, and its
    /// pull requests wait on the server until the pause ends.
    pub paused_until: Option<Instant>,
    /// Whether this instance holds the pin of its consumer's pinned priority group
    /// ([`Mount::priority_group`](crate::Mount::priority_group) with
    /// [`PriorityPolicy::Pinned`](crate::PriorityPolicy::Pinned)): it is the active one, and
    /// receives the group's messages. Set when a delivery brings the pin, cleared when the
    /// server says another instance holds it and when the mount stops.
    pub pinned: bool,
}

impl MountHealth {
    /// Whether its consumer is paused.
    pub fn paused(&self) -> bool {
        self.paused_until.is_some()
    }
}

/// The app's connection to NATS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionState {
    /// Not connected yet (the app is starting).
    Connecting,
    /// Connected.
    Connected,
    /// Down since this instant: the client is reconnecting (or a new client is being made).
    Down {
        /// When it was first seen down (checked every 500 ms).
        since: Instant,
    },
    /// Closed: the app stopped.
    Closed,
}

/// The app's health: its connection, its mounts, and why it failed if it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// The connection to NATS.
    pub connection: ConnectionState,
    /// Each mount, in the order they were mounted.
    pub mounts: Vec<MountHealth>,
    /// Why the app failed (to start, or later: it cannot go on), if it did.
    pub failure: Option<String>,
}

impl Health {
    /// Ready to take work: connected, and every mount consuming. `false` while the app starts,
    /// while a mount is being subscribed again or the connection is down, and once it stops.
    pub fn ready(&self) -> bool {
        self.connection == ConnectionState::Connected
            && !self.mounts.is_empty()
            && self.mounts.iter().all(|m| m.state == MountState::Consuming)
    }

    /// Alive: no failure, no mount failed, and neither a mount reconnecting or refused nor the
    /// connection down for [`LIVENESS_LIMIT`] or longer (at `now`). A process that is not live should be
    /// restarted. Starting and stopping are live.
    pub fn live_at(&self, now: Instant) -> bool {
        let too_long = |since: Instant| now.saturating_duration_since(since) >= LIVENESS_LIMIT;
        self.failure.is_none()
            && self.mounts.iter().all(|m| match m.state {
                MountState::Failed => false,
                MountState::Reconnecting | MountState::Refused => !too_long(m.since),
                MountState::Starting | MountState::Consuming | MountState::Stopping => true,
            })
            && match self.connection {
                ConnectionState::Down { since } => !too_long(since),
                ConnectionState::Connecting
                | ConnectionState::Connected
                | ConnectionState::Closed => true,
            }
    }

    /// [`live_at`](Self::live_at) now, by the system clock. On the simulator, whose `since`
    /// times are virtual, ask [`live_at`](Self::live_at) with the simulation's `now`.
    pub fn live(&self) -> bool {
        self.live_at(Instant::now())
    }

    /// The state of mount `mount`, if the app has it.
    pub fn mount(&self, mount: &str) -> Option<MountState> {
        self.mounts
            .iter()
            .find(|m| m.mount == mount)
            .map(|m| m.state)
    }
}

/// A watch on an app's [`Health`]: the value now ([`get`](Self::get)), or the next change
/// ([`changed`](Self::changed)). Given by [`App::health`](crate::App::health) before the
/// app starts and by [`Running::health`](crate::Running::health); cheap to clone, and it
/// works on any runtime.
#[derive(Debug, Clone)]
pub struct HealthWatch(watch::Receiver<Health>);

impl HealthWatch {
    /// The health now.
    pub fn get(&self) -> Health {
        self.0.borrow().clone()
    }

    /// Waits until the health changes, and gives the new value.
    ///
    /// # Errors
    /// [`HealthClosed`] when the app is gone (dropped), and nothing will change any more.
    pub async fn changed(&mut self) -> Result<Health, HealthClosed> {
        self.0.changed().await.map_err(|_| HealthClosed)?;
        Ok(self.0.borrow_and_update().clone())
    }

    /// Waits until `check` holds for the health, and gives it.
    ///
    /// # Errors
    /// [`HealthClosed`] when the app is gone before it does.
    pub async fn wait_for(
        &mut self,
        mut check: impl FnMut(&Health) -> bool,
    ) -> Result<Health, HealthClosed> {
        self.0
            .wait_for(|h| check(h))
            .await
            .map(|h| h.clone())
            .map_err(|_| HealthClosed)
    }
}

/// The app behind a [`HealthWatch`] is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the app is gone: its health no longer changes")]
pub struct HealthClosed;

/// The sending side, kept by the app, its supervisor and its running handle. Its `since`
/// times come from `clock`, the runtime's (`Runtime::now`): the system clock on tokio and smol,
/// the virtual one on the simulator.
#[derive(Clone)]
pub(crate) struct HealthBoard(
    Arc<watch::Sender<Health>>,
    fn() -> Instant,
    /// Per mount, who says it is refused (a mask of [`Refusal`]s).
    Arc<std::sync::Mutex<Vec<u8>>>,
);

/// Who says a mount is [`MountState::Refused`]: it stays refused while either does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The server refuses its pull requests (the pull loop: `400`, or a push consumer's `409`).
    Requests = 1,
    /// Its consumer is gone, or no longer fits the mount (the supervisor's re-read).
    Consumer = 2,
}

impl HealthBoard {
    pub(crate) fn new(clock: fn() -> Instant) -> Self {
        Self(
            Arc::new(watch::Sender::new(Health {
                connection: ConnectionState::Connecting,
                mounts: Vec::new(),
                failure: None,
            })),
            clock,
            Arc::default(),
        )
    }

    pub(crate) fn watch(&self) -> HealthWatch {
        HealthWatch(self.0.subscribe())
    }

    /// The app starts with these mounts.
    pub(crate) fn starting(&self, mounts: impl IntoIterator<Item = String>) {
        let now = (self.1)();
        self.0.send_modify(|h| {
            h.mounts = mounts
                .into_iter()
                .map(|mount| MountHealth {
                    mount,
                    state: MountState::Starting,
                    since: now,
                    paused_until: None,
                    pinned: false,
                })
                .collect();
        });
    }

    /// Mounts `mounts` (by index; all when `None`) are now in `state`.
    pub(crate) fn mounts(&self, mounts: Option<&[usize]>, state: MountState) {
        self.0
            .send_if_modified(|h| set_states(h, mounts, state, (self.1)()));
    }

    /// Mount `index`'s consumer is paused until `until` (`None`: not paused). A new end
    /// within a second of the one shown is no change: the supervisor reads the pause again
    /// every few seconds, and its remaining time, taken from the runtime's clock, moves a
    /// little each time.
    pub(crate) fn paused(&self, index: usize, until: Option<Instant>) {
        self.0.send_if_modified(|h| {
            let Some(m) = h.mounts.get_mut(index) else {
                return false;
            };
            let same = match (m.paused_until, until) {
                (None, None) => true,
                (Some(a), Some(b)) => a.max(b) - a.min(b) < Duration::from_secs(1),
                _ => false,
            };
            if !same {
                m.paused_until = until;
            }
            !same
        });
    }

    /// `by` says mount `index` is refused (`true`), or no longer (`false`): it goes from
    /// consuming to [`MountState::Refused`] when one says so, back once none does, and from
    /// no other state. One clearing its refusal does not undo the other's (the pull loop's
    /// `400`s and the supervisor's re-read of the consumer each say what they see).
    pub(crate) fn refused(&self, index: usize, by: Refusal, refused: bool) {
        let any = {
            let mut masks = self
                .2
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if masks.len() <= index {
                masks.resize(index + 1, 0);
            }
            match refused {
                true => masks[index] |= by as u8,
                false => masks[index] &= !(by as u8),
            }
            masks[index] != 0
        };
        let (from, to) = match any {
            true => (MountState::Consuming, MountState::Refused),
            false => (MountState::Refused, MountState::Consuming),
        };
        let now = (self.1)();
        self.0.send_if_modified(|h| match h.mounts.get_mut(index) {
            Some(m) if m.state == from => {
                m.state = to;
                m.since = now;
                true
            }
            _ => false,
        });
    }

    /// Whether this instance holds mount `index`'s pin.
    pub(crate) fn pinned(&self, index: usize, pinned: bool) {
        self.0.send_if_modified(|h| match h.mounts.get_mut(index) {
            Some(m) if m.pinned != pinned => {
                m.pinned = pinned;
                true
            }
            _ => false,
        });
    }

    /// The connection is connected (`true`) or down (`false`).
    pub(crate) fn connection(&self, up: bool) {
        self.0.send_if_modified(|h| {
            let next = match (up, h.connection) {
                (true, ConnectionState::Connected) => return false,
                (true, _) => ConnectionState::Connected,
                (false, ConnectionState::Down { .. }) => return false,
                (false, _) => ConnectionState::Down { since: (self.1)() },
            };
            h.connection = next;
            true
        });
    }

    /// The app stopped (`failure`: because it could not go on, or could not start).
    pub(crate) fn stopped(&self, failure: Option<String>) {
        // One change, so that a watcher never sees the failure without the mounts' states.
        self.0.send_modify(|h| {
            h.connection = ConnectionState::Closed;
            if let Some(failure) = failure {
                h.failure = Some(failure);
            }
            let state = match h.failure {
                Some(_) => MountState::Failed,
                None => MountState::Stopping,
            };
            set_states(h, None, state, (self.1)());
        });
    }
}

/// Puts mounts `mounts` of `health` (by index; all when `None`) in `state` since `now`, those
/// not in it already; whether any changed.
fn set_states(
    health: &mut Health,
    mounts: Option<&[usize]>,
    state: MountState,
    now: Instant,
) -> bool {
    let mut changed = false;
    for (i, m) in health.mounts.iter_mut().enumerate() {
        if mounts.is_none_or(|set| set.contains(&i)) && m.state != state {
            m.state = state;
            m.since = now;
            changed = true;
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(states: &[MountState], connection: ConnectionState) -> Health {
        let since = match connection {
            ConnectionState::Down { since } => since,
            _ => Instant::now(),
        };
        Health {
            connection,
            mounts: states
                .iter()
                .enumerate()
                .map(|(i, &state)| MountHealth {
                    mount: format!("m{i}"),
                    state,
                    since,
                    paused_until: None,
                    pinned: false,
                })
                .collect(),
            failure: None,
        }
    }

    #[test]
    fn ready_only_when_connected_and_every_mount_consumes() {
        use MountState::*;
        let up = ConnectionState::Connected;
        assert!(health(&[Consuming, Consuming], up).ready());
        assert!(!health(&[Consuming, Starting], up).ready());
        assert!(!health(&[Consuming, Reconnecting], up).ready());
        assert!(!health(&[], up).ready());
        let down = ConnectionState::Down {
            since: Instant::now(),
        };
        assert!(!health(&[Consuming], down).ready());
    }

    #[test]
    fn not_live_when_failed_or_down_or_reconnecting_too_long() {
        use MountState::*;
        let now = Instant::now();
        let up = ConnectionState::Connected;
        let down = ConnectionState::Down { since: now };
        assert!(health(&[Starting, Reconnecting], down).live_at(now));
        assert!(!health(&[Failed], up).live_at(now));
        let later = now + LIVENESS_LIMIT;
        let reconnecting = health(&[Reconnecting], down);
        assert!(
            !Health {
                connection: up,
                ..reconnecting
            }
            .live_at(later)
        );
        assert!(health(&[Consuming], down).live_at(now));
        assert!(!health(&[Consuming], down).live_at(later));
        let mut failed = health(&[Consuming], up);
        failed.failure = Some("gave up".to_owned());
        assert!(!failed.live_at(now));
    }

    #[test]
    fn a_mount_stays_refused_while_either_the_pull_loop_or_the_supervisor_says_so() {
        let board = HealthBoard::new(Instant::now);
        board.starting(["m".to_owned()]);
        board.mounts(None, MountState::Consuming);
        let state = || board.watch().get().mount("m");
        board.refused(0, Refusal::Requests, true);
        assert_eq!(state(), Some(MountState::Refused));
        board.refused(0, Refusal::Consumer, true);
        // The supervisor finds the consumer fits again: the server still refuses the requests.
        board.refused(0, Refusal::Consumer, false);
        assert_eq!(state(), Some(MountState::Refused));
        board.refused(0, Refusal::Requests, false);
        assert_eq!(state(), Some(MountState::Consuming));
        // Clearing what was never set changes nothing.
        board.refused(0, Refusal::Consumer, false);
        assert_eq!(state(), Some(MountState::Consuming));
    }
}
