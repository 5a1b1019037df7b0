//! A modelled stream: the messages it stores, its duplicate window, its limits.
//!
//! Here, the stream: its configuration checked as nats-server checks it, its messages read,
//! removed and aged out (`max_age`). What a publish does to it (the duplicate window, the
//! publish directives, `max_message_size`, `max_messages` and the discard policy) is in
//! `store.rs`.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::stream::{Config, RetentionPolicy};
use bytes::Bytes;
use ruststream_settlement::{Subject, Wildcard};

use crate::model::error::SimError;

mod store;

/// nats-server's duplicate window when a stream sets none.
pub const DEFAULT_DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// A message a stream stores.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMessage {
    /// Its stream sequence, from 1.
    pub sequence: u64,
    /// The subject it was published to.
    pub subject: Subject,
    /// Its headers, as published.
    pub headers: Option<HeaderMap>,
    /// Its header block, when it was published with one no client can read
    /// ([`Publish::unreadable_headers`](crate::Publish::unreadable_headers)).
    pub unreadable_headers: Option<Bytes>,
    /// Its payload, as published.
    pub payload: Bytes,
    /// When it was stored (virtual time).
    pub stored_at: Instant,
}

/// What the server answers a publish that a stream stores: the `PubAck` of the JetStream
/// publish protocol (`{"stream": …, "seq": …, "duplicate": …}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PubAck {
    /// The stream that stored it.
    pub stream: String,
    /// Its stream sequence; for a duplicate, the sequence of the message it duplicates.
    pub sequence: u64,
    /// Whether its `Nats-Msg-Id` was seen within the stream's duplicate window: then nothing
    /// was stored.
    pub duplicate: bool,
}

/// A stream's state, as `STREAM.INFO` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamState {
    /// The stream's name.
    pub name: String,
    /// How many messages it stores.
    pub messages: u64,
    /// The sequence of its first stored message (the next one to store when empty).
    pub first_sequence: u64,
    /// The sequence of the last message it stored (0 before the first).
    pub last_sequence: u64,
    /// Its consumers' names, in order.
    pub consumers: Vec<String>,
}

/// One stream of the model.
pub(crate) struct Stream {
    pub(crate) config: Config,
    subjects: Vec<Wildcard>,
    messages: BTreeMap<u64, StoredMessage>,
    last_sequence: u64,
    /// The `Nats-Msg-Id` of the last message stored, for `Nats-Expected-Last-Msg-Id`.
    last_msg_id: Option<String>,
    /// `Nats-Msg-Id` to the sequence it stored and when.
    seen: HashMap<String, (u64, Instant)>,
}

impl Stream {
    /// A stream of `config`, checked as nats-server checks it, with its defaults filled in.
    pub(crate) fn new(mut config: Config) -> Result<Self, SimError> {
        let what = format!("stream `{}`", config.name);
        let invalid = |problem: &str| SimError::InvalidConfig {
            what: what.clone(),
            problem: problem.to_owned(),
        };
        if config.name.is_empty()
            || config
                .name
                .contains(|c: char| c == '.' || c == '*' || c == '>' || c.is_whitespace())
        {
            return Err(invalid(
                "a stream name must be non-empty, without `.`, `*`, `>` or whitespace",
            ));
        }
        if config.subjects.is_empty() {
            // nats-server takes the stream's name as its subject.
            config.subjects = vec![config.name.clone()];
        }
        let subjects = config
            .subjects
            .iter()
            .map(|s| {
                Wildcard::new(s).map_err(|e| SimError::Subject {
                    subject: s.clone(),
                    reason: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let not_modelled = |setting: String| SimError::NotModelled {
            what: what.clone(),
            setting,
        };
        if config.retention == RetentionPolicy::Interest {
            return Err(not_modelled("retention `interest`".to_owned()));
        }
        if config.max_bytes > 0 {
            return Err(not_modelled(format!("max_bytes {}", config.max_bytes)));
        }
        if config.max_messages_per_subject > 0 {
            return Err(not_modelled(format!(
                "max_messages_per_subject {}",
                config.max_messages_per_subject
            )));
        }
        if config.mirror.is_some() || config.sources.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(not_modelled("a mirror or sources".to_owned()));
        }
        if config.allow_direct || config.mirror_direct {
            return Err(not_modelled("allow_direct (direct get)".to_owned()));
        }
        if config.num_replicas > 1 {
            return Err(not_modelled(format!(
                "num_replicas {} (clustering)",
                config.num_replicas
            )));
        }
        let api = Wildcard::new("$JS.API.>").map_err(|e| invalid(&e.to_string()))?;
        if subjects.iter().any(|s| s.overlaps(&api)) {
            return Err(invalid(
                "subjects overlap with the JetStream API (`$JS.API.>`)",
            ));
        }
        if config.duplicate_window.is_zero() {
            // nats-server shortens its default window to a shorter `max_age`.
            config.duplicate_window = match config.max_age {
                age if !age.is_zero() && age < DEFAULT_DUPLICATE_WINDOW => age,
                _ => DEFAULT_DUPLICATE_WINDOW,
            };
        }
        if !config.max_age.is_zero() && config.duplicate_window > config.max_age {
            return Err(invalid("duplicate_window can not be larger than max_age"));
        }
        Ok(Self {
            config,
            subjects,
            messages: BTreeMap::new(),
            last_sequence: 0,
            last_msg_id: None,
            seen: HashMap::new(),
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// The stream's subjects.
    pub(crate) fn subjects(&self) -> &[Wildcard] {
        &self.subjects
    }

    /// Whether it stores messages published to `subject`.
    pub(crate) fn captures(&self, subject: &Subject) -> bool {
        self.subjects.iter().any(|w| w.matches(subject))
    }

    pub(crate) fn get(&self, sequence: u64) -> Option<&StoredMessage> {
        self.messages.get(&sequence)
    }

    /// The first stored message at or after `from` whose subject one of `filters` matches
    /// (every message when `filters` is empty).
    pub(crate) fn next_matching(&self, from: u64, filters: &[Wildcard]) -> Option<&StoredMessage> {
        self.messages
            .range(from..)
            .map(|(_, m)| m)
            .find(|m| filters.is_empty() || filters.iter().any(|f| f.matches(&m.subject)))
    }

    /// How many stored messages at or after `from` match `filters`.
    pub(crate) fn count_matching(&self, from: u64, filters: &[Wildcard]) -> u64 {
        self.messages
            .range(from..)
            .filter(|(_, m)| filters.is_empty() || filters.iter().any(|f| f.matches(&m.subject)))
            .count() as u64
    }

    /// Removes a message (a work queue's acknowledged message). Whether it was stored.
    pub(crate) fn remove(&mut self, sequence: u64) -> bool {
        self.messages.remove(&sequence).is_some()
    }

    /// Whether an acknowledgement removes the message (work-queue retention).
    pub(crate) fn removes_on_ack(&self) -> bool {
        self.config.retention == RetentionPolicy::WorkQueue
    }

    /// The sequence of the first stored message; when it is empty, the next to store, or 0
    /// when it never stored one (what nats-server reports).
    pub(crate) fn first_sequence(&self) -> u64 {
        match self.messages.first_key_value() {
            Some((seq, _)) => *seq,
            None if self.last_sequence == 0 => 0,
            None => self.last_sequence + 1,
        }
    }

    pub(crate) fn last_sequence(&self) -> u64 {
        self.last_sequence
    }

    pub(crate) fn len(&self) -> u64 {
        self.messages.len() as u64
    }

    /// When the oldest message ages out (`max_age`), if the stream has a limit and a message.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        if self.config.max_age.is_zero() {
            return None;
        }
        self.messages
            .first_key_value()
            .map(|(_, m)| m.stored_at + self.config.max_age)
    }

    /// Removes the messages that have aged out at `now`; gives their sequences.
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Vec<u64> {
        let max_age = self.config.max_age;
        if max_age.is_zero() {
            return Vec::new();
        }
        let mut removed = Vec::new();
        while let Some((seq, m)) = self.messages.first_key_value() {
            if m.stored_at + max_age > now {
                break;
            }
            removed.push(*seq);
            self.messages.pop_first();
        }
        removed
    }
}
