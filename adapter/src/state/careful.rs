//! Pulling one message at a time while a message is suspected of bringing the client down
//! (rule 20).

use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// Until when a JetStream mount pulls one message at a time: set by the supervisor while a
/// stored message seems to bring the client down, so that it comes alone and the messages
/// around it are received, handled and acknowledged, instead of being lost with the client
/// and redelivered until their attempts run out (rule 20).
#[derive(Default)]
pub(crate) struct Careful(Mutex<Option<Instant>>);

impl Careful {
    /// Pull one at a time until `until`.
    pub(crate) fn until(&self, until: Instant) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(until);
    }

    /// Back to whole batches.
    pub(crate) fn clear(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Whether to pull one at a time at `now`.
    pub(crate) fn at(&self, now: Instant) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|until| now < until)
    }
}
