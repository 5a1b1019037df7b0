//! Metrics through the `metrics` facade: the application installs a recorder (a Prometheus
//! exporter, say) and every mount reports into it. An application calls nothing here: this
//! module updates them, and its docs list them.
//!
//! **Install the recorder before [`App::start`](crate::App::start)**: each mount registers its
//! metrics once, when it starts, and keeps the handles; a recorder installed later sees
//! nothing of a mount already running. Without a recorder every update is a branch and
//! nothing more, and handlers are not timed (no clock is read for them).
//!
//! Every metric has the label `mount` (the mount's name: bounded, never a subject of a
//! wildcard mount). Names follow the OpenTelemetry messaging semantic conventions (v1.27+)
//! where they have one, with `messaging.system="nats"`; the others use Prometheus naming
//! under `ruststream_`. A Prometheus exporter writes a dot as `_` (and may add a unit suffix).
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `messaging.client.consumed.messages` | counter | `mount`, `messaging.system` | deliveries a mount received (OTel) |
//! | `messaging.process.duration` | histogram, seconds | `mount`, `messaging.system` | how long each handler ran, from its call to its result (OTel) |
//! | `ruststream_handler_outcomes_total` | counter | `mount`, `outcome` | settled deliveries by what their handler gave: `ack`, `retry`, `retry_after`, `drop`, `reject`, `none` (no outcome, a panic, a time limit), `undecodable` (a typed handler's payload that did not decode), `not_run` (arrived past the limit) |
//! | `ruststream_handler_errors_total` | counter | `mount` | handlers that returned `Err` (then settled by the mount's error policy, counted again under its outcome) |
//! | `ruststream_wire_actions_total` | counter | `mount`, `action` | what went to the server: `ack` (`+ACK`), `nak` (`-NAK`), `nak_delay` (`-NAK {"delay": …}`), `term` (`+TERM`), `wpi` (`+WPI`), `copy` (a Core copy published, at once or when due), `dead_letter` (published and confirmed by its stream, or, where no stream stores its subject, flushed to the server) |
//! | `ruststream_dead_letters_total` | counter | `mount`, `reason` | dead letters published (confirmed by their stream, or flushed to the server where none stores them), by the reason its `Ruststream-Reason` provenance header gives (rule 19), whether or not the mount asks for provenance: `limit`, `rejected`, `undecodable`, `handler-error` (a handler's `Err`, whatever outcome its error policy chose; also counted in `ruststream_handler_errors_total`), `copy-too-large` |
//! | `ruststream_core_losses_total` | counter | `mount`, `cause` | Core messages lost (rule 21): `slow_consumer` (dropped, the subscription buffer full), `copy` (a copy not published), `dead_letter` (a dead letter not published), `unhandled_at_shutdown`, `copy_at_shutdown` (a delayed copy still waiting when the grace period ended) |
//! | `ruststream_late_results_total` | counter | `mount` | handler results discarded (rule 16): the delivery's deadline passed without a renewal, or the mount received the message again while it ran (its renewals lost on their way) |
//! | `ruststream_recoveries_total` | counter | `mount` | times the mount subscribed again after its connection or subscription died (rule 20) |
//! | `ruststream_handlers_waiting` | gauge | `mount` | deliveries whose handler (or dead letter) did not finish at its first poll and has not finished yet |
//! | `ruststream_batch_size` | histogram, members | `mount` | how many members each batch of a batch mount had when its handler ran (rule 23); members are counted one by one in every other metric, as single deliveries |
//! | `ruststream_delayed_copies` | gauge | `mount` | Core copies waiting in the delay queue for their `retry_after` delay |

use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};
use ruststream_settlement::{Action, DeadLetterReason, Event, Outcome, Plan, Settlement};

use super::endpoint_counts::EndpointCounts;

/// The histogram of a batch mount's batch sizes (`ruststream_batch_size`), registered at
/// the mount's first batch.
pub(crate) fn batch_sizes(mount: &'static str) -> Histogram {
    describe();
    histogram!("ruststream_batch_size", "mount" => mount)
}

/// `messaging.system`'s value.
const SYSTEM: &str = "nats";

/// Why a Core message was lost (rule 21), as the `cause` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loss {
    SlowConsumer,
    Copy,
    DeadLetter,
    UnhandledAtShutdown,
    CopyAtShutdown,
}

impl Loss {
    const ALL: [Loss; 5] = [
        Loss::SlowConsumer,
        Loss::Copy,
        Loss::DeadLetter,
        Loss::UnhandledAtShutdown,
        Loss::CopyAtShutdown,
    ];

    fn label(self) -> &'static str {
        match self {
            Loss::SlowConsumer => "slow_consumer",
            Loss::Copy => "copy",
            Loss::DeadLetter => "dead_letter",
            Loss::UnhandledAtShutdown => "unhandled_at_shutdown",
            Loss::CopyAtShutdown => "copy_at_shutdown",
        }
    }
}

const OUTCOMES: [&str; 8] = [
    "ack",
    "retry",
    "retry_after",
    "drop",
    "reject",
    "none",
    "undecodable",
    "not_run",
];
const ACTIONS: [&str; 7] = [
    "ack",
    "nak",
    "nak_delay",
    "term",
    "wpi",
    "copy",
    "dead_letter",
];

/// A wire action, as the `action` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    Ack,
    Nak,
    NakDelay,
    Term,
    Wpi,
    Copy,
    DeadLetter,
}

/// One mount's metric handles, registered once when the app starts (kept across its
/// recoveries).
pub(crate) struct MountMetrics {
    consumed: Counter,
    duration: Histogram,
    outcomes: [Counter; OUTCOMES.len()],
    errors: Counter,
    wire: [Counter; ACTIONS.len()],
    dead_letters: [Counter; DeadLetterReason::ALL.len()],
    losses: [Counter; Loss::ALL.len()],
    late: Counter,
    recoveries: Counter,
    waiting: Gauge,
    delayed: Gauge,
    /// Whether handlers are timed (see [`timed`](Self::timed)).
    timed: bool,
    /// Its counts for `$SRV.STATS`, when it is an endpoint of the app's service.
    endpoint: Option<Arc<EndpointCounts>>,
}

impl MountMetrics {
    /// Registers the metrics of mount `mount` with the recorder installed now; an `endpoint`
    /// of the app's service also keeps its counts for `$SRV.STATS`.
    pub(crate) fn register(mount: &'static str, endpoint: bool) -> Self {
        describe();
        Self {
            consumed: counter!("messaging.client.consumed.messages", "mount" => mount, "messaging.system" => SYSTEM),
            duration: histogram!("messaging.process.duration", "mount" => mount, "messaging.system" => SYSTEM),
            outcomes: OUTCOMES.map(|outcome| {
                counter!("ruststream_handler_outcomes_total", "mount" => mount, "outcome" => outcome)
            }),
            errors: counter!("ruststream_handler_errors_total", "mount" => mount),
            wire: ACTIONS.map(|action| {
                counter!("ruststream_wire_actions_total", "mount" => mount, "action" => action)
            }),
            dead_letters: DeadLetterReason::ALL.map(|reason| {
                counter!("ruststream_dead_letters_total", "mount" => mount, "reason" => reason.as_str())
            }),
            losses: Loss::ALL.map(|loss| {
                counter!("ruststream_core_losses_total", "mount" => mount, "cause" => loss.label())
            }),
            late: counter!("ruststream_late_results_total", "mount" => mount),
            recoveries: counter!("ruststream_recoveries_total", "mount" => mount),
            waiting: gauge!("ruststream_handlers_waiting", "mount" => mount),
            delayed: gauge!("ruststream_delayed_copies", "mount" => mount),
            timed: endpoint || recording(),
            endpoint: endpoint.then(Arc::default),
        }
    }

    /// Its counts for `$SRV.STATS`, when it is an endpoint of the app's service.
    pub(crate) fn endpoint(&self) -> Option<&Arc<EndpointCounts>> {
        self.endpoint.as_ref()
    }

    /// Whether handlers are timed for `messaging.process.duration` (and an endpoint's
    /// `processing_time`): only when a recorder was installed when the app started, or the
    /// mount is an endpoint of the app's service, so that an app without either reads no clock
    /// for it.
    #[inline]
    pub(crate) fn timed(&self) -> bool {
        self.timed
    }

    /// A delivery was received.
    #[inline]
    pub(crate) fn consumed(&self) {
        self.consumed.increment(1);
    }

    /// A handler ran for `took`.
    #[inline]
    pub(crate) fn handled_in(&self, took: Duration) {
        self.duration.record(took.as_secs_f64());
        if let Some(endpoint) = &self.endpoint {
            endpoint.processed(took);
        }
    }

    /// A handler run ended with `outcome`, its own (not an error's, which
    /// [`run_failed`](Self::run_failed) counts): for an endpoint, one request, and an error
    /// when the outcome is `Reject` or none.
    #[inline]
    pub(crate) fn run_ended(&self, outcome: Outcome) {
        if let Some(endpoint) = &self.endpoint {
            endpoint.request();
            match outcome {
                Outcome::Reject => endpoint.failed("rejected"),
                Outcome::None => endpoint.failed("no outcome"),
                Outcome::Ack | Outcome::Retry | Outcome::RetryAfter(_) | Outcome::Drop => {}
            }
        }
    }

    /// A handler run ended in error (an `Err`, a panic, the time limit), or the delivery could
    /// not be given to its handler (a payload that does not decode): for an endpoint, one
    /// request and one error, with this text (cut to
    /// [`MAX_LAST_ERROR_BYTES`](crate::MAX_LAST_ERROR_BYTES) for `last_error`).
    #[cold]
    pub(crate) fn run_failed(&self, error: &dyn std::fmt::Display) {
        if let Some(endpoint) = &self.endpoint {
            endpoint.request();
            // Written no further than the cut needs: an error's text may be megabytes.
            let mut text = Prefix(String::new());
            let _ = std::fmt::Write::write_fmt(&mut text, format_args!("{error}"));
            endpoint.failed(&text.0);
        }
    }

    /// A handler returned `Err`.
    pub(crate) fn handler_error(&self) {
        self.errors.increment(1);
    }

    /// A dead letter was published and confirmed (or flushed, where no stream stores its
    /// subject), for `reason` as its provenance header says it
    /// ([`DeadLetterReason::with_error`]).
    pub(crate) fn dead_lettered(&self, reason: DeadLetterReason) {
        let at = DeadLetterReason::ALL.iter().position(|r| *r == reason);
        self.dead_letters[at.unwrap_or(0)].increment(1);
    }

    /// A wire action went out (one not counted by [`settled`](Self::settled)).
    pub(crate) fn wire(&self, action: Wire) {
        self.wire[action as usize].increment(1);
    }

    /// Core messages lost for `loss`.
    pub(crate) fn lost(&self, loss: Loss, n: u64) {
        self.losses[loss as usize].increment(n);
    }

    /// A late result was discarded.
    pub(crate) fn late(&self) {
        self.late.increment(1);
    }

    /// The mount subscribed again.
    pub(crate) fn recovered(&self) {
        self.recoveries.increment(1);
    }

    /// A delivery began or stopped waiting.
    pub(crate) fn waiting(&self, delta: f64) {
        self.waiting.increment(delta);
    }

    /// A copy entered or left the delay queue.
    pub(crate) fn delayed(&self, delta: f64) {
        self.delayed.increment(delta);
    }

    /// A delivery was settled with `event` (its handler's, or `None` when it did not run) and
    /// the executed plan `plan`: its outcome, and what the plan put on the wire (its
    /// settlement only if `sent`).
    #[inline]
    pub(crate) fn settled(&self, event: Option<Event>, plan: &Plan<'_>, sent: bool) {
        let outcome = match event {
            Some(Event::Handled(Outcome::Ack)) => 0,
            Some(Event::Handled(Outcome::Retry)) => 1,
            Some(Event::Handled(Outcome::RetryAfter(_))) => 2,
            Some(Event::Handled(Outcome::Drop)) => 3,
            Some(Event::Handled(Outcome::Reject)) => 4,
            Some(Event::Handled(Outcome::None)) => 5,
            Some(Event::Undecodable) => 6,
            Some(Event::Arrived | Event::PublishFailed | Event::CopyTooLarge) | None => 7,
        };
        self.outcomes[outcome].increment(1);
        for action in plan {
            if !sent && matches!(action, Action::Settle(_)) {
                continue;
            }
            match action {
                Action::Settle(Settlement::Ack) => self.wire(Wire::Ack),
                Action::Settle(Settlement::Nak) => self.wire(Wire::Nak),
                Action::Settle(Settlement::NakWithDelay(_)) => self.wire(Wire::NakDelay),
                Action::Settle(Settlement::Term) => self.wire(Wire::Term),
                Action::PublishCopy { .. } => self.wire(Wire::Copy),
                // Its reason is counted when it is confirmed, by
                // [`dead_lettered`](Self::dead_lettered): only the executor knows whether the
                // handler returned an error.
                Action::PublishDeadLetter { .. } => self.wire(Wire::DeadLetter),
                // Counted when the delay loop publishes it.
                Action::ScheduleCopy { .. } | Action::Log(_) => {}
            }
        }
    }
}

/// Whether a recorder is installed. The `metrics` facade does not say; its no-op recorder is
/// the only one without state (a zero-sized type), while every exporter holds some (its
/// registry, a connection). A stateless recorder of an application's own is taken for none:
/// it gets every counter and gauge, but no handler durations.
fn recording() -> bool {
    metrics::with_recorder(|recorder| std::mem::size_of_val(recorder) != 0)
}

/// Describes every metric (units and help text) to the recorder installed now, once per
/// process.
fn describe() {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
        describe_counter!("messaging.client.consumed.messages", Unit::Count, "Deliveries a mount received.");
        describe_histogram!("messaging.process.duration", Unit::Seconds, "How long each handler ran, from its call to its result.");
        describe_counter!("ruststream_handler_outcomes_total", Unit::Count, "Settled deliveries by what their handler gave.");
        describe_counter!("ruststream_handler_errors_total", Unit::Count, "Handlers that returned Err.");
        describe_counter!("ruststream_wire_actions_total", Unit::Count, "Acknowledgements, copies and dead letters sent to the server.");
        describe_counter!("ruststream_dead_letters_total", Unit::Count, "Dead letters published and confirmed, by reason.");
        describe_counter!("ruststream_core_losses_total", Unit::Count, "Core messages lost, by cause (rule 21).");
        describe_counter!("ruststream_late_results_total", Unit::Count, "Handler results discarded: the delivery's deadline passed without a renewal, or the message was delivered again while it ran.");
        describe_counter!("ruststream_recoveries_total", Unit::Count, "Times a mount subscribed again after its connection or subscription died.");
        describe_gauge!("ruststream_handlers_waiting", Unit::Count, "Deliveries whose handler or dead letter did not finish at its first poll, still running.");
        describe_gauge!("ruststream_delayed_copies", Unit::Count, "Core copies waiting for their retry_after delay.");
        describe_histogram!("ruststream_batch_size", Unit::Count, "Members of each batch a batch mount's handler ran on.");
    });
}

/// A text that keeps what is written to it up to a little past
/// [`MAX_LAST_ERROR_BYTES`](crate::MAX_LAST_ERROR_BYTES) (enough for the cut and its `…`), and
/// drops the rest.
struct Prefix(String);

impl std::fmt::Write for Prefix {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let room = (super::endpoint_counts::MAX_LAST_ERROR_BYTES + 4).saturating_sub(self.0.len());
        if room == 0 {
            return Ok(());
        }
        let mut end = s.len().min(room);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        // At least MAX + 1 bytes are kept of a longer text (a char is at most 4 bytes): enough
        // to tell that it was cut.
        self.0.push_str(&s[..end]);
        Ok(())
    }
}
