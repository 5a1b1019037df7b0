//! What the runtime knows about one delivery before its handler runs.

use std::fmt;
use std::num::NonZeroU64;

use crate::header::{RetryCount, RetryCountReading};
use crate::reply::AckReply;

/// A 1-based attempt number: the first delivery of a message is attempt 1 (rule 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Attempt(NonZeroU64);

impl Attempt {
    /// The first attempt.
    pub const FIRST: Self = Self(NonZeroU64::MIN);

    /// Attempt `n`, or `None` for 0.
    pub fn new(n: u64) -> Option<Self> {
        NonZeroU64::new(n).map(Self)
    }

    /// The attempt after `count` earlier ones: `count + 1`, saturating at `u64::MAX`.
    pub fn after(count: RetryCount) -> Self {
        Self(NonZeroU64::MIN.saturating_add(count.0))
    }

    /// The attempt number, at least 1.
    pub fn get(self) -> u64 {
        self.0.get()
    }

    /// The retry count a copy published after this attempt carries: the attempt number
    /// itself (rule 4).
    pub fn as_retry_count(self) -> RetryCount {
        RetryCount(self.0.get())
    }
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Which NATS model a delivery came through, with what that model says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model<'a> {
    /// Core NATS: the runtime's own retry-count header is the only record of earlier attempts.
    Core(RetryCountReading),
    /// JetStream: the ack reply subject's metadata; `delivered` is the attempt.
    JetStream(AckReply<'a>),
}

/// The metadata of one delivery: its subject and its model. Borrows from the message; building
/// one allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery<'a> {
    /// The subject the message was delivered on.
    pub subject: &'a str,
    /// The model and its metadata.
    pub model: Model<'a>,
    /// The key an adapter gave ([`with_key`](Self::with_key)); otherwise [`key`](Self::key)
    /// derives one when asked (only a mount with a backoff asks).
    key: Option<u64>,
    /// How many times it ran before in place, its key held (rule 24's strict order): added to
    /// the attempt the server or the retry-count header gives.
    in_place: u64,
}

impl<'a> Delivery<'a> {
    /// A Core NATS delivery on `subject` whose headers gave `retry_count`
    /// (see [`RetryCountReading::read`]).
    #[inline]
    pub fn core(subject: &'a str, retry_count: RetryCountReading) -> Self {
        Self {
            subject,
            model: Model::Core(retry_count),
            key: None,
            in_place: 0,
        }
    }

    /// A JetStream delivery on `subject` with the metadata of its ack reply subject
    /// (see [`AckReply::parse`]).
    #[inline]
    pub fn jetstream(subject: &'a str, reply: AckReply<'a>) -> Self {
        Self {
            subject,
            model: Model::JetStream(reply),
            key: None,
            in_place: 0,
        }
    }

    /// The same delivery with `key` as its [`key`](Self::key): how an adapter makes a Core
    /// delivery's key tell messages on one subject apart (a hash of the payload, with
    /// [`key_of`](crate::key_of)).
    #[must_use]
    #[inline]
    pub fn with_key(self, key: u64) -> Self {
        Self {
            key: Some(key),
            ..self
        }
    }

    /// The same delivery keyed by its [`key`](Self::key) and `payload` as well: how an adapter
    /// tells Core messages on one subject apart (a Core message carries no identity of its
    /// own, and its copies carry the same payload).
    #[must_use]
    pub fn keyed_by_payload(self, payload: &[u8]) -> Self {
        let key = crate::key_of(self.key(), payload);
        self.with_key(key)
    }

    /// What identifies the message across its attempts, for a [`Backoff`](crate::Backoff)'s
    /// jitter (rule 18): on JetStream a hash of the stream, the consumer and the stream
    /// sequence; on Core a hash of the subject unless the adapter gave one with
    /// [`with_key`](Self::with_key) (a Core message carries no identity of its own).
    pub fn key(&self) -> u64 {
        if let Some(key) = self.key {
            return key;
        }
        match self.model {
            Model::JetStream(reply) => [
                reply.stream.as_bytes(),
                reply.consumer.as_bytes(),
                &reply.stream_sequence.to_le_bytes(),
            ]
            .iter()
            .fold(crate::KEY_SEED, |key, bytes| crate::key_of(key, bytes)),
            Model::Core(_) => crate::key_of(crate::KEY_SEED, self.subject.as_bytes()),
        }
    }

    /// The same delivery after it ran `runs` times in place, its key held (rule 24's strict
    /// order: a retry run again without going back to NATS): its [`attempt`](Self::attempt)
    /// is that many more.
    #[must_use]
    #[inline]
    pub fn after_runs_in_place(self, runs: u64) -> Self {
        Self {
            in_place: runs,
            ..self
        }
    }

    /// The attempt number (rule 1): `delivered` on JetStream (a parsed reply never has 0; a
    /// hand-built 0 counts as 1), retry count + 1 on Core; plus the runs in place before it
    /// ([`after_runs_in_place`](Self::after_runs_in_place), rule 24), saturating.
    #[inline]
    pub fn attempt(&self) -> Attempt {
        let attempt = match self.model {
            Model::Core(reading) => Attempt::after(reading.count_or_zero()),
            Model::JetStream(reply) => Attempt::new(reply.delivered).unwrap_or(Attempt::FIRST),
        };
        match self.in_place {
            0 => attempt,
            runs => Attempt::new(attempt.get().saturating_add(runs)).unwrap_or(attempt),
        }
    }
}
