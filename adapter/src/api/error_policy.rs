//! What a mount does with a handler's `Err`.

use ruststream_settlement::Outcome;

/// What a mount does with a handler's `Err` (see [`IntoHandled`](crate::IntoHandled)): the outcome
/// it stands for. The error is logged at warning level with the mount, subject and attempt first.
#[derive(Clone, Default)]
pub enum ErrorPolicy {
    /// [`Outcome::Retry`]: `max_attempts`, the backoff and the dead-letter subject apply.
    #[default]
    Retry,
    /// [`Outcome::Reject`]: the at-limit path at once (rule 17).
    Reject,
    /// The outcome this function gives for the error's text. It runs on the mount's task: a
    /// panic in it is caught, logged, and counts as [`Outcome::None`].
    Decide(std::sync::Arc<dyn Fn(&str) -> Outcome + Send + Sync>),
}

impl ErrorPolicy {
    /// A policy that asks `decide` for the outcome of each error (given its `Display` text).
    pub fn decide(decide: impl Fn(&str) -> Outcome + Send + Sync + 'static) -> Self {
        Self::Decide(std::sync::Arc::new(decide))
    }

    /// The outcome an error stands for.
    pub fn outcome(&self, error: &str) -> Outcome {
        match self {
            Self::Retry => Outcome::Retry,
            Self::Reject => Outcome::Reject,
            Self::Decide(decide) => decide(error),
        }
    }
}

impl std::fmt::Debug for ErrorPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Retry => f.write_str("Retry"),
            Self::Reject => f.write_str("Reject"),
            Self::Decide(_) => f.write_str("Decide(..)"),
        }
    }
}
