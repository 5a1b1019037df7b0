//! The supervisor's health check of the client (rule 20): a dead client replaced, a
//! reconnection async-nats made by itself noticed and told, a connection down too long ending
//! the app.

use std::time::Duration;

use async_nats::Client;

use super::{ORDER, Retry, Supervisor, Watch};
use crate::runtime::Runtime;
use crate::support::liveness::{Liveness, liveness};
/// How long a flush may take to tell a dead client at a health check.
const DEAD_CHECK: Duration = Duration::from_millis(200);

/// How often a connection that stays down is logged.
const DOWN_WARN_EVERY: Duration = Duration::from_secs(10);

/// How long the connection to NATS may stay down, by default, before the app ends with an
/// error: 2 minutes, about as long as the Go client tries by default (60 reconnects, 2 s
/// apart) before it gives up. Long enough for a server restart or a cluster's failover; short
/// enough that a service cut off for good is restarted and seen.
pub const DEFAULT_DISCONNECTED_LIMIT: Duration = Duration::from_secs(120);

impl<R: Runtime> Supervisor<R> {
    /// Notices a reconnection async-nats made by itself (its subscriptions carry over).
    pub(super) async fn health(&mut self, watch: &mut Watch) -> Result<(), String> {
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
}
