//! The stream sequences a JetStream mount received lately (rule 20).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The stream sequences of the last [`Received::KEPT`] JetStream deliveries a mount received,
/// whatever its loop: what tells a message that never reached the mount (one that brought
/// the client down) from those that did (rule 20). One atomic add and store per delivery. A
/// Core mount keeps none; a JetStream mount makes its 64 KiB at its first delivery, so that an
/// idle one holds nothing (100 idle JetStream mounts held 6.4 MiB of them, heaptrack, issue
/// 39).
pub(crate) struct Received {
    /// Whether the mount keeps sequences (JetStream).
    keeps: bool,
    sequences: OnceLock<Box<[AtomicU64]>>,
    next: AtomicUsize,
}

impl Received {
    /// How many sequences a JetStream mount keeps: 8,192 (64 KiB).
    pub(crate) const KEPT: usize = 8192;

    /// Keeps the last [`KEPT`](Self::KEPT) sequences when `jetstream`, none otherwise.
    pub(crate) fn new(jetstream: bool) -> Self {
        Self {
            keeps: jetstream,
            sequences: OnceLock::new(),
            next: AtomicUsize::new(0),
        }
    }

    /// Notes that the delivery of `stream_sequence` was received.
    pub(crate) fn note(&self, stream_sequence: u64) {
        if !self.keeps {
            return;
        }
        let sequences = self
            .sequences
            .get_or_init(|| (0..Self::KEPT).map(|_| AtomicU64::new(0)).collect());
        let at = self.next.fetch_add(1, Ordering::Relaxed) % sequences.len();
        sequences[at].store(stream_sequence, Ordering::Relaxed);
    }

    /// The sequences kept.
    pub(crate) fn snapshot(&self) -> std::collections::HashSet<u64> {
        self.sequences
            .get()
            .into_iter()
            .flat_map(|s| s.iter())
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&s| s != 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Received;

    #[test]
    fn a_jetstream_mount_keeps_the_last_sequences_from_its_first_delivery_on() {
        let received = Received::new(true);
        assert!(
            received.sequences.get().is_none(),
            "nothing made while idle"
        );
        assert!(received.snapshot().is_empty());
        for sequence in 1..=(Received::KEPT as u64 + 5) {
            received.note(sequence);
        }
        let kept = received.snapshot();
        assert_eq!(kept.len(), Received::KEPT);
        assert!(!kept.contains(&5) && kept.contains(&6));
        assert!(kept.contains(&(Received::KEPT as u64 + 5)));
    }

    #[test]
    fn a_core_mount_keeps_none() {
        let received = Received::new(false);
        received.note(7);
        assert!(received.snapshot().is_empty());
        assert!(received.sequences.get().is_none());
    }
}
