//! What a mount that is an endpoint of the app's NATS service counts for `$SRV.STATS`
//! ([`EndpointCounts`]), and the copy of them a response is made from ([`EndpointTotals`]).

use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How much of an endpoint's last error `$SRV.STATS` shows, in bytes: 1024. A longer text
/// is cut on a character boundary, with `…` after it; the log keeps the whole. For a payload
/// that does not decode it is `payload does not decode`, without the codec's message, which
/// can quote the payload (the log line has it).
pub const MAX_LAST_ERROR_BYTES: usize = 1024;

/// One endpoint's counts since the app started: relaxed atomics on the path of every delivery,
/// and a lock only on the error path (its last error's text).
#[derive(Debug, Default)]
pub(crate) struct EndpointCounts {
    requests: AtomicU64,
    errors: AtomicU64,
    /// The handlers' total run time, in nanoseconds (saturating).
    nanos: AtomicU64,
    last_error: Mutex<Option<Box<str>>>,
}

/// An endpoint's counts at one moment, for a `$SRV.STATS` response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EndpointTotals {
    /// Handler runs that ended.
    pub(crate) requests: u64,
    /// Those that ended in error.
    pub(crate) errors: u64,
    /// The last error's text, if any.
    pub(crate) last_error: Option<Box<str>>,
    /// The handlers' total run time.
    pub(crate) processing: Duration,
}

impl EndpointTotals {
    /// The mean run time: `processing` over `requests` (zero without requests).
    pub(crate) fn average(&self) -> Duration {
        match u32::try_from(self.requests) {
            Ok(0) => Duration::ZERO,
            Ok(n) => self.processing / n,
            Err(_) => Duration::from_nanos(
                u64::try_from(self.processing.as_nanos() / u128::from(self.requests))
                    .unwrap_or(u64::MAX),
            ),
        }
    }
}

impl EndpointCounts {
    /// A handler run ended (or a delivery could not be given to its handler).
    #[inline]
    pub(crate) fn request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// A handler ran for `took`.
    #[inline]
    pub(crate) fn processed(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        // Saturating: a counter that wrapped would say the endpoint got faster.
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |total| {
                Some(total.saturating_add(nanos))
            });
    }

    /// A run counted by [`request`](Self::request) ended in error, with this text: kept cut
    /// to [`MAX_LAST_ERROR_BYTES`](crate::MAX_LAST_ERROR_BYTES) ([`bounded`]).
    #[cold]
    pub(crate) fn failed(&self, error: &str) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(bounded(error));
    }

    /// The counts now. Each is read on its own: a run ending meanwhile may be in one and not
    /// yet in another.
    pub(crate) fn totals(&self) -> EndpointTotals {
        EndpointTotals {
            requests: self.requests.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            processing: Duration::from_nanos(self.nanos.load(Ordering::Relaxed)),
        }
    }
}

/// `error`, cut to its first [`MAX_LAST_ERROR_BYTES`](crate::MAX_LAST_ERROR_BYTES) bytes on
/// a character boundary with `…` after it when it is longer.
pub(crate) fn bounded(error: &str) -> Box<str> {
    let max = MAX_LAST_ERROR_BYTES;
    if error.len() <= max {
        return Box::from(error);
    }
    let mut cut = max;
    while !error.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &error[..cut]).into_boxed_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_last_error_is_cut_on_a_character_boundary() {
        let max = MAX_LAST_ERROR_BYTES;
        assert_eq!(&*bounded("short"), "short");
        let exact = "a".repeat(max);
        assert_eq!(*bounded(&exact), *exact);
        let long = "a".repeat(max + 1);
        assert_eq!(*bounded(&long), format!("{}…", "a".repeat(max)));
        // A two-byte character across the limit is left out whole.
        let across = format!("{}é", "a".repeat(max - 1));
        assert_eq!(*bounded(&across), format!("{}…", "a".repeat(max - 1)));
        let counts = EndpointCounts::default();
        counts.failed(&"x".repeat(1_000_000));
        assert_eq!(
            counts.totals().last_error.map(|e| e.len()),
            Some(max + "…".len())
        );
    }

    #[test]
    fn counts_add_up_and_keep_the_last_error() {
        let counts = EndpointCounts::default();
        assert_eq!(counts.totals(), EndpointTotals::default());
        assert_eq!(counts.totals().average(), Duration::ZERO);
        for ms in [10, 20, 30] {
            counts.request();
            counts.processed(Duration::from_millis(ms));
        }
        counts.failed("first");
        counts.failed("second");
        let totals = counts.totals();
        assert_eq!(totals.requests, 3);
        assert_eq!(totals.errors, 2);
        assert_eq!(totals.last_error.as_deref(), Some("second"));
        assert_eq!(totals.processing, Duration::from_millis(60));
        assert_eq!(totals.average(), Duration::from_millis(20));
        counts.processed(Duration::MAX);
        assert_eq!(counts.totals().processing, Duration::from_nanos(u64::MAX));
    }
}
