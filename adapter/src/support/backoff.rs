//! The pause between the runtime's own tries of something that failed or went unanswered (a
//! pull request, a mount's subscriptions made again, the service's client made again): short
//! at first, doubling after each failure up to [`LONGEST_PAUSE`], and short again after a
//! success. One place for the growth, so that every retry of the runtime's paces alike.

use std::time::Duration;

/// The longest pause between two tries: 2 s, so that a server that comes back is found
/// within 2 s, and one that stays down is asked about at most twice a second.
pub(crate) const LONGEST_PAUSE: Duration = Duration::from_secs(2);

/// The pause before each next try, after failures in a row (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    first: Duration,
    next: Duration,
    failures: u32,
}

impl Backoff {
    /// A backoff whose first pause is `first` (at most [`LONGEST_PAUSE`] is ever paused).
    pub(crate) const fn new(first: Duration) -> Self {
        Self {
            first,
            next: first,
            failures: 0,
        }
    }

    /// One more failure: the pause before the next try. The one after it is twice as long, up
    /// to [`LONGEST_PAUSE`].
    pub(crate) fn failed(&mut self) -> Duration {
        let pause = self.next.min(LONGEST_PAUSE);
        self.next = pause.saturating_mul(2).min(LONGEST_PAUSE);
        self.failures = self.failures.saturating_add(1);
        pause
    }

    /// A try succeeded: the next failure pauses for the first pause again. Whether failures
    /// had come before it (none: this success changes nothing).
    pub(crate) fn succeeded(&mut self) -> bool {
        let had_failed = self.failures > 0;
        self.next = self.first;
        self.failures = 0;
        had_failed
    }

    /// Whether no try has failed since the start or the last success.
    pub(crate) fn is_clear(&self) -> bool {
        self.failures == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_doubles_up_to_the_longest_and_a_success_starts_it_again() {
        let mut backoff = Backoff::new(Duration::from_millis(100));
        assert!(backoff.is_clear());
        let pauses: Vec<u64> = (0..7)
            .map(|_| backoff.failed().as_millis() as u64)
            .collect();
        assert_eq!(pauses, [100, 200, 400, 800, 1600, 2000, 2000]);
        assert!(!backoff.is_clear());
        assert!(backoff.succeeded());
        assert!(backoff.is_clear());
        assert!(!backoff.succeeded());
        assert_eq!(backoff.failed(), Duration::from_millis(100));
    }

    #[test]
    fn a_first_pause_above_the_longest_is_the_longest() {
        let mut backoff = Backoff::new(Duration::from_secs(10));
        assert_eq!(backoff.failed(), LONGEST_PAUSE);
        assert_eq!(backoff.failed(), LONGEST_PAUSE);
    }
}
