//! The stream sequences a JetStream mount received lately (rule 20).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The stream sequences of the last [`Received::KEPT`] JetStream deliveries a mount received,
/// whatever its loop: what tells a message that never reached the mount (one that brought
/// the client down) from those that did (rule 20). One atomic add and store per delivery. A
/// Core mount keeps none.
pub(crate) struct Received {
    sequences: Box<[AtomicU64]>,
    next: AtomicUsize,
}

impl Received {
    /// How many sequences a JetStream mount keeps: 8,192 (64 KiB).
    pub(crate) const KEPT: usize = 8192;

    /// Keeps the last [`KEPT`](Self::KEPT) sequences when `jetstream`, none otherwise.
    pub(crate) fn new(jetstream: bool) -> Self {
        let kept = if jetstream { Self::KEPT } else { 0 };
        Self {
            sequences: (0..kept).map(|_| AtomicU64::new(0)).collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// Notes that the delivery of `stream_sequence` was received.
    pub(crate) fn note(&self, stream_sequence: u64) {
        let kept = self.sequences.len();
        if kept == 0 {
            return;
        }
        let at = self.next.fetch_add(1, Ordering::Relaxed) % kept;
        self.sequences[at].store(stream_sequence, Ordering::Relaxed);
    }

    /// The sequences kept.
    pub(crate) fn snapshot(&self) -> std::collections::HashSet<u64> {
        self.sequences
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&s| s != 0)
            .collect()
    }
}
