//! Deliberate bugs, for showing what the explorer (`ruststream_sim::explore`) finds: each one
//! breaks one rule of the contract at one place in the runtime, and only while it is switched
//! on with `switch_on` (which exists with the `deliberate-bugs` feature alone, and nothing
//! but the explorer's own measurement turns that on): without it the runtime's check is a
//! constant `false` and every check below folds away.
//!
//! The switch is process-wide (one bug at a time, for every app in the process), read where
//! each bug lives: set it before the apps it is meant for start.

/// A deliberate bug, named after what it does wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Bug {
    /// Rule 8: a JetStream delivery at the limit is settled (`+TERM`) before its dead letter
    /// is published and confirmed.
    SettleBeforeDeadLetter = 1,
    /// Rule 16: every lease renewal (`+WPI`) is dropped, while the lease counts it as sent.
    DropLeaseRenewal = 2,
    /// Rule 21: a Core message the mount's full buffer drops is not counted.
    ForgetCoreDrop = 3,
    /// Rule 3: a mount's `max_attempts` lets one attempt more run.
    RetryPastLimit = 4,
    /// Rule 21: every third delayed Core copy that falls due is dropped, uncounted.
    LoseDelayedCopy = 5,
    /// Rule 16: a late result (its deadline passed, or its message was delivered again) is
    /// settled instead of discarded.
    SettleLateResult = 6,
    /// Rule 24: a keyed delivery takes its key's turn at once, though another delivery of its
    /// key runs or waits (strict order still holds a turn through the runs in place).
    KeyTurnSkipped = 7,
}

impl Bug {
    /// Every bug, in order.
    pub const ALL: [Bug; 7] = [
        Bug::SettleBeforeDeadLetter,
        Bug::DropLeaseRenewal,
        Bug::ForgetCoreDrop,
        Bug::RetryPastLimit,
        Bug::LoseDelayedCopy,
        Bug::SettleLateResult,
        Bug::KeyTurnSkipped,
    ];

    /// Its name on the command line: `settle-before-dead-letter`, `drop-lease-renewal`,
    /// `forget-core-drop`, `retry-past-limit`, `lose-delayed-copy`, `settle-late-result`,
    /// `key-turn-skipped`.
    pub fn name(self) -> &'static str {
        match self {
            Bug::SettleBeforeDeadLetter => "settle-before-dead-letter",
            Bug::DropLeaseRenewal => "drop-lease-renewal",
            Bug::ForgetCoreDrop => "forget-core-drop",
            Bug::RetryPastLimit => "retry-past-limit",
            Bug::LoseDelayedCopy => "lose-delayed-copy",
            Bug::SettleLateResult => "settle-late-result",
            Bug::KeyTurnSkipped => "key-turn-skipped",
        }
    }

    /// The bug named `name` (see [`name`](Self::name)), if there is one.
    pub fn named(name: &str) -> Option<Bug> {
        Bug::ALL.into_iter().find(|b| b.name() == name)
    }
}

#[cfg(feature = "deliberate-bugs")]
static ACTIVE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Switches `bug` on for the whole process, or every bug off (`None`).
#[cfg(feature = "deliberate-bugs")]
pub fn switch_on(bug: Option<Bug>) {
    ACTIVE.store(
        bug.map_or(0, |b| b as u8),
        std::sync::atomic::Ordering::SeqCst,
    );
}

/// Whether `bug` is switched on: always `false` without the `deliberate-bugs` feature.
#[inline(always)]
pub(crate) fn active(bug: Bug) -> bool {
    #[cfg(feature = "deliberate-bugs")]
    {
        ACTIVE.load(std::sync::atomic::Ordering::Relaxed) == bug as u8
    }
    #[cfg(not(feature = "deliberate-bugs"))]
    {
        let _ = bug;
        false
    }
}
