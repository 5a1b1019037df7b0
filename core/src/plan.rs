//! The planner: one decision per event, as an ordered list of actions.
//!
//! [`plan`] takes a delivery's metadata, what just happened to it ([`Event`]), the mount's
//! policy and the current instant, and returns a [`Plan`]: at most [`MAX_ACTIONS`] actions,
//! which the adapter executes in order. It reads no clock, performs no I/O, cannot fail, and
//! allocates nothing.
//!
//! # Invariants of every plan
//! Checked by property tests (`core/tests/properties.rs`):
//! - at most one [`Action::Settle`], and when there is one it is the last action;
//! - every publish ([`Action::PublishCopy`], [`Action::PublishDeadLetter`]) comes before the
//!   settlement;
//! - a copy published after attempt `n` carries retry count `n`;
//! - a scheduled copy's deadline is never before `now`.
//!
//! # Adapter obligations
//! - An adapter MUST execute the actions in order, and MUST stop at the first publish that
//!   fails, send nothing after it, and ask for a new plan with [`Event::PublishFailed`].
//! - A dead-letter publish MUST be confirmed (a JetStream publish acknowledgement, or a flush
//!   for a plain publish) before the next action runs.
//! - Before running a handler, an adapter MUST plan [`Event::Arrived`] and run the handler
//!   only when [`Plan::runs_handler`] says so (rule 3).

use std::time::{Duration, Instant};

use arrayvec::ArrayVec;

use crate::ack::{AckError, Settlement};
use crate::delivery::{Attempt, Delivery, Model};
use crate::header::RetryCount;
use crate::policy::MountPolicy;
use crate::subject::Subject;

/// The most actions a plan holds.
pub const MAX_ACTIONS: usize = 3;

/// What a handler returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Done: JetStream `+ACK`; unsupported on Core.
    Ack,
    /// Process it again now: JetStream `-NAK`; on Core a copy at once when a limit is declared.
    Retry,
    /// Process it again after the delay: JetStream `-NAK {"delay": ns}`; on Core a copy after
    /// the delay.
    RetryAfter(Duration),
    /// Never again: JetStream `+TERM`; unsupported on Core.
    Drop,
    /// No outcome: nothing is sent. JetStream redelivers after `ack_wait`; a Core delivery is
    /// gone. A handler that panicked counts as this (rule 13).
    None,
    /// Poison: the at-limit path now, whatever the attempt (rule 17): dead-lettered when the
    /// mount declares a dead-letter subject (then `+TERM` on JetStream), otherwise `+TERM` on
    /// JetStream and let go, with a warning, on Core. A payload that does not decode for a
    /// typed handler takes the same path ([`Event::Undecodable`]).
    Reject,
}

/// What just happened to a delivery: the input of [`plan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// The delivery arrived and its handler has not run. The plan says whether to run it
    /// ([`Plan::runs_handler`]); a delivery past the limit is not run (rule 3).
    Arrived,
    /// The handler returned this outcome.
    Handled(Outcome),
    /// The payload could not be decoded for a typed handler: the delivery takes the at-limit
    /// path at once (dead-lettered if a dead-letter subject is declared, otherwise terminated
    /// on JetStream and let go on Core), whatever the attempt.
    Undecodable,
    /// A publish of the previous plan for this delivery failed, so that plan's settlement was
    /// not sent (rule 8).
    PublishFailed,
    /// The Core copy the previous plan publishes (or schedules) is larger than the server's
    /// `max_payload` (the copy adds its retry-count header to the delivery), so it was not
    /// published: the delivery takes the at-limit path instead (rule 21), whose dead letter
    /// is the delivery as it arrived, so it fits. JetStream publishes no copies; given this
    /// event, a JetStream delivery takes the at-limit path too.
    CopyTooLarge,
}

impl From<Outcome> for Event {
    fn from(outcome: Outcome) -> Self {
        Self::Handled(outcome)
    }
}

/// Why a delivery takes the at-limit path: what a mount that asks for provenance headers says
/// in a dead letter's `Ruststream-Reason` (rule 19; see
/// [`Provenance`](crate::Provenance)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadLetterReason {
    /// Its attempts ran out: a `retry` at `max_attempts`, a Core `retry` on a mount that
    /// cannot copy, or an arrival past the limit (rule 3). `limit`.
    Limit,
    /// Its handler returned `reject` (rule 17). `rejected`.
    Rejected,
    /// Its payload did not decode for a typed handler (rule 17). `undecodable`.
    Undecodable,
    /// Its handler returned an error, which the mount's error policy settled with the
    /// at-limit path. The planner never gives it: the adapter knows the error, and says so in
    /// the [`Provenance`](crate::Provenance) it builds. `handler-error`.
    HandlerError,
    /// Its Core copy would have been larger than the server's `max_payload` (rule 21).
    /// `copy-too-large`.
    CopyTooLarge,
}

impl DeadLetterReason {
    /// Every reason, in the order of [`as_str`](Self::as_str)'s list.
    pub const ALL: [Self; 5] = [
        Self::Limit,
        Self::Rejected,
        Self::Undecodable,
        Self::HandlerError,
        Self::CopyTooLarge,
    ];

    /// The reason whose `Ruststream-Reason` value is `name` (exactly, as
    /// [`as_str`](Self::as_str) writes it); `None` for any other text.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// The reason a dead letter is given for, once it is known whether its handler returned an
    /// error (`errored`): [`HandlerError`](Self::HandlerError) for the planner's
    /// [`Limit`](Self::Limit) or [`Rejected`](Self::Rejected) after an error, whatever outcome
    /// the mount's error policy chose, since the error is why the delivery did not succeed;
    /// `self` otherwise (an arrival past the limit never ran the handler, an undecodable
    /// payload never reached it, and a copy too large is about size).
    ///
    /// The one vocabulary of rule 19: the provenance header `Ruststream-Reason`, the
    /// dead-letter log line and the metric `ruststream_dead_letters_total` all take their
    /// reason from here.
    #[must_use]
    pub fn with_error(self, errored: bool) -> Self {
        match (errored, self) {
            (true, Self::Limit | Self::Rejected) => Self::HandlerError,
            _ => self,
        }
    }

    /// The value of `Ruststream-Reason`: `limit`, `rejected`, `undecodable`, `handler-error`
    /// or `copy-too-large`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Limit => "limit",
            Self::Rejected => "rejected",
            Self::Undecodable => "undecodable",
            Self::HandlerError => "handler-error",
            Self::CopyTooLarge => "copy-too-large",
        }
    }
}

impl std::fmt::Display for DeadLetterReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Something to log, at the level the variant gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Log {
    /// A Core delivery was asked to settle: log the error. A healthy Core service produces one
    /// per `ack`, so adapters SHOULD log it at a low level (debug).
    Unsupported(AckError),
    /// Some values of the retry-count header were not digits and were ignored (rule 5).
    /// Warning.
    RetryCountIgnored {
        /// How many values were ignored.
        values: u32,
    },
    /// A Core delivery reached the limit with no dead-letter subject and is let go. Warning,
    /// naming the mount.
    LetGo,
    /// A Core delivery could not be published (its copy or dead letter failed) and is lost.
    /// Error, with its subject and size (rule 8).
    Lost,
}

/// One thing an adapter does. Adapters match on this exhaustively, so a new variant breaks
/// them at compile time, on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action<'p> {
    /// Publish [`Settlement::payload`] to the delivery's ack reply subject.
    Settle(Settlement),
    /// Publish a copy of the delivered message now: [`Message::copy`](crate::Message::copy)
    /// with this subject and retry count (headers rewritten per rules 4 and 9, payload and
    /// reply subject unchanged).
    PublishCopy {
        /// Where the copy goes: the mount's `CoreSubject`, or its `CoreWildcard`'s copy subject.
        subject: &'p Subject,
        /// The value of `x-ruststream-retry-count` on the copy: the attempt just made.
        retry_count: RetryCount,
    },
    /// Arm a timer: publish the copy described as in [`Action::PublishCopy`] at `at`, through
    /// the [`DelayQueue`](crate::DelayQueue).
    ScheduleCopy {
        /// Where the copy goes.
        subject: &'p Subject,
        /// The value of `x-ruststream-retry-count` on the copy.
        retry_count: RetryCount,
        /// When to publish it; never before the `now` the plan was made with.
        at: Instant,
    },
    /// Publish the delivered message as it arrived to the dead-letter subject:
    /// [`Message::dead_letter`](crate::Message::dead_letter) (payload and headers byte for
    /// byte, rule-9 directives aside), and wait for the publish to be confirmed (rule 8).
    PublishDeadLetter {
        /// The dead-letter subject.
        subject: &'p Subject,
        /// Why the delivery is dead-lettered: what a mount that asks for provenance headers
        /// says in `Ruststream-Reason` (rule 19).
        reason: DeadLetterReason,
    },
    /// Log this.
    Log(Log),
}

impl std::fmt::Display for Action<'_> {
    /// A one-line description of what goes on the wire, for logs and traces: the ack payload
    /// itself, or `copy to <subject> (x-ruststream-retry-count: <n>)` with ` armed` for a
    /// delayed one, `dead letter to <subject>`; logs are named as such
    /// (`no ack on Core NATS (AckError::Unsupported, debug)`, `warning: …`, `error: …`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Settle(s) => f.write_str(&String::from_utf8_lossy(s.payload().as_bytes())),
            Self::PublishCopy {
                subject,
                retry_count,
            } => {
                write!(
                    f,
                    "copy to {subject} ({}: {})",
                    crate::RETRY_COUNT_HEADER,
                    retry_count.0
                )
            }
            Self::ScheduleCopy {
                subject,
                retry_count,
                ..
            } => write!(
                f,
                "copy to {subject} ({}: {}) armed",
                crate::RETRY_COUNT_HEADER,
                retry_count.0
            ),
            Self::PublishDeadLetter { subject, .. } => write!(f, "dead letter to {subject}"),
            Self::Log(Log::Unsupported(AckError::Unsupported)) => {
                // A Core delivery's success: nothing is wrong, Core NATS has no acknowledgement.
                f.write_str("no ack on Core NATS (AckError::Unsupported, debug)")
            }
            Self::Log(Log::RetryCountIgnored { values }) => {
                write!(f, "warning: {values} retry-count value(s) ignored")
            }
            Self::Log(Log::LetGo) => {
                f.write_str("warning: let go (the at-limit path, no dead-letter subject)")
            }
            Self::Log(Log::Lost) => f.write_str("error: lost"),
        }
    }
}

impl std::fmt::Display for Plan<'_> {
    /// The actions' descriptions joined by `, `, or `nothing`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.actions.is_empty() {
            return f.write_str("nothing");
        }
        for (i, action) in self.actions.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{action}")?;
        }
        Ok(())
    }
}

/// What a plan amounts to, for traces and summaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// Run the handler (the plan of [`Event::Arrived`] below the limit).
    RunHandler,
    /// An `ack`: JetStream `+ACK`; on Core nothing to send (`AckError::Unsupported` at debug
    /// level), and the delivery counts as acked (rule 22).
    Acked,
    /// A `drop`: JetStream `+TERM`; on Core nothing to send, as for `ack`.
    Dropped,
    /// Asked to be processed again now: `-NAK`, or a Core copy now.
    Retried,
    /// Asked to be processed again after a delay: `-NAK` with a delay, or a Core copy armed.
    Delayed,
    /// At the limit (or undecodable) with a dead-letter subject: dead-lettered.
    DeadLettered,
    /// At the limit (or undecodable) without a dead-letter subject, on JetStream: `+TERM`.
    Terminated,
    /// At the limit (or undecodable) without a dead-letter subject, on Core: let go.
    LetGo,
    /// A Core `retry` on a mount with neither a limit nor a backoff: nothing to do, only logged
    /// (and warned about once per mount by the adapter, rule 22).
    Unsupported,
    /// No outcome: nothing sent.
    NoOutcome,
    /// A JetStream dead-letter publish failed: `-NAK` with a delay, to try again.
    DeadLetterRetry,
    /// A Core delivery's publish failed: it is lost.
    Lost,
}

impl Disposition {
    /// A short lower-case name: `run`, `acked`, `dropped`, `retried`, `delayed`,
    /// `dead-lettered`, `terminated`, `let-go`, `unsupported`, `no-outcome`,
    /// `dead-letter-retry`, `lost`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RunHandler => "run",
            Self::Acked => "acked",
            Self::Dropped => "dropped",
            Self::Retried => "retried",
            Self::Delayed => "delayed",
            Self::DeadLettered => "dead-lettered",
            Self::Terminated => "terminated",
            Self::LetGo => "let-go",
            Self::Unsupported => "unsupported",
            Self::NoOutcome => "no-outcome",
            Self::DeadLetterRetry => "dead-letter-retry",
            Self::Lost => "lost",
        }
    }
}

/// An ordered list of at most [`MAX_ACTIONS`] actions, and what they amount to.
///
/// Borrows subjects from the [`MountPolicy`] it was planned with. See the module docs for the
/// invariants.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a plan does nothing until an adapter executes its actions"]
pub struct Plan<'p> {
    actions: ArrayVec<Action<'p>, MAX_ACTIONS>,
    disposition: Disposition,
}

impl<'p> Plan<'p> {
    #[inline]
    fn new(disposition: Disposition) -> Self {
        Self {
            actions: ArrayVec::new(),
            disposition,
        }
    }

    #[inline]
    fn with(mut self, action: Action<'p>) -> Self {
        // At most MAX_ACTIONS by construction: no plan below pushes more than three.
        self.actions.push(action);
        self
    }

    /// The actions, in the order they must run.
    #[inline]
    pub fn actions(&self) -> &[Action<'p>] {
        &self.actions
    }

    /// What the plan amounts to.
    #[inline]
    pub fn disposition(&self) -> Disposition {
        self.disposition
    }

    /// Whether the handler should run: true only for the plan of [`Event::Arrived`] below or
    /// at the limit.
    #[inline]
    pub fn runs_handler(&self) -> bool {
        self.disposition == Disposition::RunHandler
    }

    /// The settlement, if the plan has one (it is the last action).
    pub fn settlement(&self) -> Option<Settlement> {
        match self.actions.last() {
            Some(Action::Settle(s)) => Some(*s),
            _ => None,
        }
    }
}

impl<'a, 'p> IntoIterator for &'a Plan<'p> {
    type Item = &'a Action<'p>;
    type IntoIter = std::slice::Iter<'a, Action<'p>>;

    fn into_iter(self) -> Self::IntoIter {
        self.actions.iter()
    }
}

/// The instant `delay` after `now`, or the farthest instant after `now` that the platform can
/// represent when `now + delay` overflows (never before `now`): a delay of `Duration::MAX`
/// means "as late as can be", never a panic. Adapters use it for every deadline made from a
/// duration an application gives (a handler time limit, a grace period, a re-read interval).
pub fn deadline(now: Instant, delay: Duration) -> Instant {
    let mut delay = delay;
    loop {
        if let Some(at) = now.checked_add(delay) {
            return at;
        }
        delay /= 2;
    }
}

/// Where the delivery stands against the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    /// No limit declared, or `attempt < max_attempts`.
    Below,
    /// `attempt >= max_attempts` (rule 2).
    AtOrPast,
}

fn limit(attempt: Attempt, policy: &MountPolicy) -> Limit {
    match policy.max_attempts() {
        Some(max) if attempt.get() >= u64::from(max.get()) => Limit::AtOrPast,
        _ => Limit::Below,
    }
}

/// The at-limit path: dead letter if declared, then `+TERM` on JetStream; on Core the dead
/// letter alone, or a warning and nothing.
fn at_limit<'p>(
    jetstream: bool,
    policy: &'p MountPolicy,
    reason: DeadLetterReason,
    plan: Plan<'p>,
) -> Plan<'p> {
    match (policy.dead_letter(), jetstream) {
        (Some(subject), true) => {
            let plan = Plan {
                disposition: Disposition::DeadLettered,
                ..plan
            };
            plan.with(Action::PublishDeadLetter { subject, reason })
                .with(Action::Settle(Settlement::Term))
        }
        (Some(subject), false) => Plan {
            disposition: Disposition::DeadLettered,
            ..plan
        }
        .with(Action::PublishDeadLetter { subject, reason }),
        (None, true) => Plan {
            disposition: Disposition::Terminated,
            ..plan
        }
        .with(Action::Settle(Settlement::Term)),
        (None, false) => Plan {
            disposition: Disposition::LetGo,
            ..plan
        }
        .with(Action::Log(Log::LetGo)),
    }
}

/// Decides what to do about `event` for `delivery` on the mount `policy`, at `now`.
///
/// Follows SETTLEMENT.md Part C row by row; `core/tests/decision_table.rs` has one test per
/// row. In short:
///
/// - [`Event::Arrived`]: run the handler, unless the attempt is past `max_attempts` (rule 3),
///   in which case the at-limit plan. On Core, ignored retry-count values are logged first.
/// - [`Event::Handled`] on JetStream: `ack` → `+ACK`, `drop` → `+TERM`, none → nothing;
///   `retry`/`retry_after` below the limit → `-NAK` (with the delay), at the limit → dead
///   letter then `+TERM`, or `+TERM` alone.
/// - [`Event::Handled`] on Core: `ack`/`drop` → log `AckError::Unsupported` (disposition
///   [`Disposition::Acked`] / [`Disposition::Dropped`]); `retry` without a limit → the same
///   log ([`Disposition::Unsupported`]); `retry` below the limit → that log, then a copy now; `retry_after(d)`
///   without a limit or below it → a copy armed for `now + d` (a copy now when `d` is zero);
///   at the limit → the dead letter, or a warning and nothing.
/// - [`Event::Undecodable`], [`Event::CopyTooLarge`] and a `reject` ([`Outcome::Reject`],
///   rule 17), on either model: the at-limit plan, whatever the attempt.
/// - [`Event::PublishFailed`]: JetStream `-NAK` with the policy's dead-letter retry delay, so
///   the delivery comes back past the limit and the dead letter is tried again; on Core, a
///   `Lost` log.
///
/// On a mount with a [`Backoff`](crate::Backoff) (rule 18), `retry` is planned as
/// `retry_after` the backoff's delay for the delivery's [`key`](Delivery::key) and attempt.
///
/// A Core delivery on a JetStream mount (an adapter bug: there is no subject to copy to) takes
/// the at-limit path where it would have been copied.
pub fn plan<'p>(
    delivery: &Delivery<'_>,
    event: Event,
    policy: &'p MountPolicy,
    now: Instant,
) -> Plan<'p> {
    plan_with_clock(delivery, event, policy, || now)
}

/// Rule 24's strict order: whether a keyed delivery whose handler returned `outcome` runs
/// again in place (its key held, nothing sent to NATS), and after what delay.
///
/// `Some(delay)` for a `retry` or `retry_after(d)` below the limit (rule 2): `d`, or for
/// `retry` the backoff's delay for the delivery's key and attempt (rule 18), or zero without
/// a backoff. `None` for every other outcome, and at or past the limit: the delivery is then
/// planned with [`plan`] as it would be otherwise (so a retry at the limit takes the at-limit
/// path). The adapter plans each later run with
/// [`Delivery::after_runs_in_place`](crate::Delivery::after_runs_in_place), so that its
/// attempt counts the runs in place.
pub fn retry_in_place(
    delivery: &Delivery<'_>,
    outcome: Outcome,
    policy: &MountPolicy,
) -> Option<Duration> {
    let attempt = delivery.attempt();
    if limit(attempt, policy) == Limit::AtOrPast {
        return None;
    }
    match (outcome, policy.backoff()) {
        (Outcome::RetryAfter(delay), _) => Some(delay),
        (Outcome::Retry, Some(backoff)) => Some(backoff.delay(delivery.key(), attempt)),
        (Outcome::Retry, None) => Some(Duration::ZERO),
        (Outcome::Ack | Outcome::Drop | Outcome::None | Outcome::Reject, _) => None,
    }
}

/// [`plan`], reading the clock only when the plan needs it.
///
/// The one decision that depends on the time is the deadline of a Core copy armed for
/// `retry_after(d)` with `d > 0` ([`Action::ScheduleCopy`]): `clock` is called once for that
/// plan, and never for any other. An adapter passes its clock here so that the common plans
/// (every settlement, every arrival) cost no clock read. The result is the plan
/// [`plan`] gives with `now = clock()`.
pub fn plan_with_clock<'p>(
    delivery: &Delivery<'_>,
    event: Event,
    policy: &'p MountPolicy,
    clock: impl FnOnce() -> Instant,
) -> Plan<'p> {
    let attempt = delivery.attempt();
    let limit = limit(attempt, policy);
    let jetstream = matches!(delivery.model, Model::JetStream(_));
    // Rule 18: with a backoff, `retry` is `retry_after` the backoff's delay for this attempt.
    let event = match (event, policy.backoff()) {
        (Event::Handled(Outcome::Retry), Some(backoff)) => {
            Event::Handled(Outcome::RetryAfter(backoff.delay(delivery.key(), attempt)))
        }
        (event, _) => event,
    };
    match event {
        Event::Arrived => {
            let mut plan = Plan::new(Disposition::RunHandler);
            if let Model::Core(reading) = delivery.model
                && reading.ignored > 0
            {
                plan = plan.with(Action::Log(Log::RetryCountIgnored {
                    values: reading.ignored,
                }));
            }
            let past = policy
                .max_attempts()
                .is_some_and(|max| attempt.get() > u64::from(max.get()));
            if past {
                at_limit(jetstream, policy, DeadLetterReason::Limit, plan)
            } else {
                plan
            }
        }
        Event::Undecodable => at_limit(
            jetstream,
            policy,
            DeadLetterReason::Undecodable,
            Plan::new(Disposition::LetGo),
        ),
        Event::CopyTooLarge => at_limit(
            jetstream,
            policy,
            DeadLetterReason::CopyTooLarge,
            Plan::new(Disposition::LetGo),
        ),
        Event::PublishFailed if jetstream => Plan::new(Disposition::DeadLetterRetry).with(
            Action::Settle(Settlement::nak(policy.dead_letter_retry_delay())),
        ),
        Event::PublishFailed => Plan::new(Disposition::Lost).with(Action::Log(Log::Lost)),
        Event::Handled(outcome) if jetstream => match (outcome, limit) {
            (Outcome::Ack, _) => {
                Plan::new(Disposition::Acked).with(Action::Settle(Settlement::Ack))
            }
            (Outcome::Drop, _) => {
                Plan::new(Disposition::Dropped).with(Action::Settle(Settlement::Term))
            }
            (Outcome::None, _) => Plan::new(Disposition::NoOutcome),
            (Outcome::Reject, _) => at_limit(
                true,
                policy,
                DeadLetterReason::Rejected,
                Plan::new(Disposition::Terminated),
            ),
            (Outcome::Retry | Outcome::RetryAfter(_), Limit::AtOrPast) => at_limit(
                true,
                policy,
                DeadLetterReason::Limit,
                Plan::new(Disposition::Terminated),
            ),
            (Outcome::Retry, Limit::Below) => {
                Plan::new(Disposition::Retried).with(Action::Settle(Settlement::Nak))
            }
            (Outcome::RetryAfter(delay), Limit::Below) => {
                let settlement = Settlement::nak(delay);
                let disposition = match settlement {
                    Settlement::Nak => Disposition::Retried,
                    _ => Disposition::Delayed,
                };
                Plan::new(disposition).with(Action::Settle(settlement))
            }
        },
        Event::Handled(outcome) => {
            let unsupported = Action::Log(Log::Unsupported(AckError::Unsupported));
            let retry_count = attempt.as_retry_count();
            match (outcome, limit, policy.copy_subject()) {
                // Rule 22: `AckError::Unsupported` is logged, and the plan records the
                // handler's outcome, so that a successful Core delivery counts as acked.
                (Outcome::Ack, _, _) => Plan::new(Disposition::Acked).with(unsupported),
                (Outcome::Drop, _, _) => Plan::new(Disposition::Dropped).with(unsupported),
                (Outcome::None, _, _) => Plan::new(Disposition::NoOutcome),
                (Outcome::Reject, _, _) => at_limit(
                    false,
                    policy,
                    DeadLetterReason::Rejected,
                    Plan::new(Disposition::LetGo),
                ),
                (Outcome::Retry, _, _) if policy.max_attempts().is_none() => {
                    Plan::new(Disposition::Unsupported).with(unsupported)
                }
                (Outcome::Retry | Outcome::RetryAfter(_), Limit::AtOrPast, _)
                | (Outcome::Retry | Outcome::RetryAfter(_), Limit::Below, None) => at_limit(
                    false,
                    policy,
                    DeadLetterReason::Limit,
                    Plan::new(Disposition::LetGo),
                ),
                (Outcome::Retry, Limit::Below, Some(subject)) => Plan::new(Disposition::Retried)
                    .with(unsupported)
                    .with(Action::PublishCopy {
                        subject,
                        retry_count,
                    }),
                (Outcome::RetryAfter(delay), Limit::Below, Some(subject)) if delay.is_zero() => {
                    Plan::new(Disposition::Retried).with(Action::PublishCopy {
                        subject,
                        retry_count,
                    })
                }
                (Outcome::RetryAfter(delay), Limit::Below, Some(subject)) => {
                    Plan::new(Disposition::Delayed).with(Action::ScheduleCopy {
                        subject,
                        retry_count,
                        at: deadline(clock(), delay),
                    })
                }
            }
        }
    }
}
