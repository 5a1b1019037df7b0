//! What the app hands its user about what happened: the report of a shutdown
//! ([`ShutdownReport`], with each mount's [`CoreLosses`] and the app's [`Recovery`]s), the
//! error of an app that stopped on its own ([`AppFailed`]), and each settled delivery as an
//! observer sees it ([`Settled`]).

use std::sync::Arc;

use ruststream_settlement::{Disposition, Outcome};

/// What a graceful shutdown left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Handlers still running at the end of the grace period, per mount: their JetStream
    /// deliveries come back after `ack_wait`; their Core deliveries are gone.
    pub abandoned: Vec<(String, usize)>,
    /// Delayed Core copies still waiting at the end of the grace period, per mount: lost, as
    /// SETTLEMENT.md says (rule 14).
    pub lost_copies: Vec<(String, usize)>,
    /// Core messages lost over the app's life, per mount, for the mounts that lost any (rule
    /// 21); delayed copies still waiting at the end are in [`lost_copies`](Self::lost_copies).
    pub core_losses: Vec<CoreLosses>,
    /// The recoveries the app made while it ran (rule 20), the last
    /// [`RECOVERIES_KEPT`](crate::RECOVERIES_KEPT): lost connections and ended
    /// subscriptions it noticed and got over.
    pub recoveries: Vec<Recovery>,
    /// Why the app stopped on its own, if it did: the runtime the NATS connection ran on
    /// ended under it (the app's NATS thread, [`NatsThread`](crate::NatsThread)), or its
    /// mounts could not be subscribed again (rule 20).
    pub failure: Option<String>,
}

/// One Core mount's losses over the app's life (rule 21): Core NATS cannot redeliver, so
/// these messages are gone, and each was logged when it was lost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoreLosses {
    /// The mount's name.
    pub mount: String,
    /// Messages dropped because the mount's subscription buffer was full
    /// ([`Mount::subscription_buffer`](crate::Mount::subscription_buffer)).
    pub slow_consumer: u64,
    /// Copies (rule 4) whose publish failed, at once or when their delay was over.
    pub unpublished_copies: u64,
    /// Dead letters whose publish failed.
    pub unpublished_dead_letters: u64,
    /// Messages received and not yet handed to a handler when shutdown began.
    pub unhandled_at_shutdown: u64,
}

impl CoreLosses {
    /// The sum of every kind of loss.
    pub fn total(&self) -> u64 {
        self.slow_consumer
            + self.unpublished_copies
            + self.unpublished_dead_letters
            + self.unhandled_at_shutdown
    }
}

/// A mount name in the report line: as it is when it holds only ASCII letters, digits, `-`,
/// `_` and `.`; quoted (`{:?}`) otherwise.
struct Name<'n>(&'n str);

impl std::fmt::Display for Name<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plain = !self.0.is_empty()
            && self
                .0
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        match plain {
            true => f.write_str(self.0),
            false => write!(f, "{:?}", self.0),
        }
    }
}

impl std::fmt::Display for ShutdownReport {
    /// The report on one line, every count named, for logs and scripts to read:
    ///
    /// `abandoned=[MOUNT:N ...] lost_copies=[MOUNT:N ...] core_losses=[MOUNT:slow_consumer=N,unpublished_copies=N,unpublished_dead_letters=N,unhandled_at_shutdown=N ...] recoveries=N failure=none|"WHY"`
    ///
    /// Lists are space-separated inside their brackets and empty (`[]`) when nothing was left or
    /// lost; the failure is quoted as a Rust string literal (`{:?}`). A mount name of anything but
    /// ASCII letters, digits, `-`, `_` and `.` is quoted the same way, so that the line stays
    /// unambiguous.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn counts(f: &mut std::fmt::Formatter<'_>, list: &[(String, usize)]) -> std::fmt::Result {
            let mut sep = "";
            for (mount, n) in list {
                write!(f, "{sep}{}:{n}", Name(mount))?;
                sep = " ";
            }
            Ok(())
        }
        write!(f, "abandoned=[")?;
        counts(f, &self.abandoned)?;
        write!(f, "] lost_copies=[")?;
        counts(f, &self.lost_copies)?;
        write!(f, "] core_losses=[")?;
        let mut sep = "";
        for l in &self.core_losses {
            write!(
                f,
                "{sep}{}:slow_consumer={},unpublished_copies={},unpublished_dead_letters={},unhandled_at_shutdown={}",
                Name(&l.mount),
                l.slow_consumer,
                l.unpublished_copies,
                l.unpublished_dead_letters,
                l.unhandled_at_shutdown
            )?;
            sep = " ";
        }
        write!(f, "] recoveries={} failure=", self.recoveries.len())?;
        match &self.failure {
            Some(why) => write!(f, "{why:?}"),
            None => write!(f, "none"),
        }
    }
}

impl ShutdownReport {
    /// `Ok(self)` after a shutdown that was asked for, `Err` after one the app made on its
    /// own ([`failure`](Self::failure) is set).
    ///
    /// # Errors
    /// [`AppFailed`] holding the report when [`failure`](Self::failure) is set.
    pub fn into_result(self) -> Result<Self, AppFailed> {
        match self.failure {
            Some(_) => Err(AppFailed { report: self }),
            None => Ok(self),
        }
    }
}

/// A running app that stopped on its own because it could not go on: the runtime its NATS
/// connection ran on ended, or its subscriptions could not be made again (rule 20). It shut
/// down as gracefully as it could; the process should exit non-zero.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the app stopped on its own: {}", .report.failure.as_deref().unwrap_or("no reason given"))]
pub struct AppFailed {
    /// The shutdown's report; its [`failure`](ShutdownReport::failure) says why.
    pub report: ShutdownReport,
}

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

/// A settled delivery, as [`App::on_settled`](crate::App::on_settled) observers see it.
#[derive(Debug, Clone)]
pub struct Settled {
    /// The mount's name (kept once per process: see [`Delivery::mount`](crate::Delivery::mount)).
    pub mount: &'static str,
    /// The subject the delivery came on.
    pub subject: async_nats::Subject,
    /// Its attempt number, from 1.
    pub attempt: u64,
    /// Its stream sequence, on JetStream.
    pub stream_sequence: Option<u64>,
    /// What the handler returned (`Some(Outcome::None)` when it panicked); `None` when it did
    /// not run.
    pub outcome: Option<Outcome>,
    /// Whether the handler ran: `false` when the delivery arrived past the limit (rule 3) or
    /// its payload did not decode for a typed handler (see [`undecodable`](Self::undecodable)).
    pub handler_ran: bool,
    /// Whether the payload did not decode for a typed handler, which then did not run
    /// (SETTLEMENT.md rule 17: the at-limit path).
    pub undecodable: bool,
    /// What the plan amounted to.
    pub disposition: Disposition,
    /// What went on the wire, as [`Plan`](ruststream_settlement::Plan)'s `Display` gives it; followed by
    /// `(settlement not sent)` when its settlement could not be sent (see
    /// [`settlement_sent`](Self::settlement_sent)).
    pub wire: String,
    /// Whether the plan's JetStream settlement (`+ACK`, `-NAK`, `+TERM`), if it has one, was
    /// handed to a client: `false` when the app's client refused it and no new client took
    /// it in time (a handler that finished after its app's shutdown), or when it is a `-NAK`
    /// decided while the connection was down, which is withheld (SETTLEMENT.md rule 16: sent
    /// late, it could hit a newer delivery); the server then delivers the message again after
    /// `ack_wait`. Always `true` on Core.
    pub settlement_sent: bool,
}

/// A callback told of every settlement ([`App::on_settled`](crate::App::on_settled)).
pub(crate) type Observer = Arc<dyn Fn(&Settled) + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_line_names_every_count_and_quotes_odd_mount_names() {
        let report = ShutdownReport {
            abandoned: vec![("orders".to_owned(), 2)],
            lost_copies: vec![("a]b:c=1,d".to_owned(), 1)],
            core_losses: vec![CoreLosses {
                mount: "greet.v2".to_owned(),
                slow_consumer: 3,
                unpublished_copies: 4,
                unpublished_dead_letters: 5,
                unhandled_at_shutdown: 6,
            }],
            recoveries: vec![],
            failure: Some("down \"for good\"".to_owned()),
        };
        assert_eq!(
            report.to_string(),
            r#"abandoned=[orders:2] lost_copies=["a]b:c=1,d":1] core_losses=[greet.v2:slow_consumer=3,unpublished_copies=4,unpublished_dead_letters=5,unhandled_at_shutdown=6] recoveries=0 failure="down \"for good\"""#
        );
        assert_eq!(
            ShutdownReport::default().to_string(),
            "abandoned=[] lost_copies=[] core_losses=[] recoveries=0 failure=none"
        );
    }
}
