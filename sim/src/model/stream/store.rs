//! What a publish does to a stream: its size checked against `max_message_size`, its
//! `Nats-Msg-Id` against the duplicate window, its publish directives (`Nats-Expected-…`)
//! against the stream, and room made (or refused) under `max_messages`; then it is stored
//! under the next sequence.

use std::time::Instant;

use async_nats::HeaderMap;
use async_nats::jetstream::stream::DiscardPolicy;
use ruststream_settlement::{MSG_ID_HEADER, Subject};

use crate::model::error::SimError;
use crate::model::journal::Publish;
use crate::model::stream::{PubAck, StoredMessage, Stream};

impl Stream {
    /// The publish directives nats-server checks before it stores a message:
    /// `Nats-Expected-Stream`, `Nats-Expected-Last-Sequence`, `Nats-Expected-Last-Msg-Id` and
    /// `Nats-Expected-Last-Subject-Sequence`. A message that fails one is not stored.
    fn check_expectations(&self, subject: &Subject, headers: &HeaderMap) -> Result<(), SimError> {
        let wrong = |header: &'static str, problem: String| SimError::WrongExpectation {
            stream: self.config.name.clone(),
            header,
            problem,
        };
        let value = |name: &str| headers.get(name).map(|v| v.as_str().to_owned());
        let number = |header: &'static str| -> Result<Option<u64>, SimError> {
            value(header)
                .map(|v| {
                    v.parse::<u64>()
                        .map_err(|_| wrong(header, format!("`{v}` is not a sequence")))
                })
                .transpose()
        };
        if let Some(expected) = value("Nats-Expected-Stream")
            && expected != self.config.name
        {
            return Err(wrong(
                "Nats-Expected-Stream",
                "expected stream does not match".to_owned(),
            ));
        }
        if let Some(expected) = number("Nats-Expected-Last-Sequence")?
            && expected != self.last_sequence
        {
            return Err(wrong(
                "Nats-Expected-Last-Sequence",
                format!("wrong last sequence: {}", self.last_sequence),
            ));
        }
        if let Some(expected) = value("Nats-Expected-Last-Msg-Id")
            && Some(&expected) != self.last_msg_id.as_ref()
        {
            return Err(wrong(
                "Nats-Expected-Last-Msg-Id",
                format!(
                    "wrong last msg ID: {}",
                    self.last_msg_id.as_deref().unwrap_or_default()
                ),
            ));
        }
        if let Some(expected) = number("Nats-Expected-Last-Subject-Sequence")? {
            let last = self
                .messages
                .values()
                .rev()
                .find(|m| m.subject == *subject)
                .map_or(0, |m| m.sequence);
            if expected != last {
                return Err(wrong(
                    "Nats-Expected-Last-Subject-Sequence",
                    format!("wrong last sequence: {last}"),
                ));
            }
        }
        Ok(())
    }

    /// Stores a message (or finds it a duplicate). Gives the `PubAck` and the sequences it
    /// removed to make room (`DiscardPolicy::Old`).
    pub(crate) fn store(
        &mut self,
        subject: &Subject,
        message: &Publish,
        now: Instant,
    ) -> Result<(PubAck, Vec<u64>), SimError> {
        let (headers, payload) = (message.headers.as_ref(), &message.payload);
        let size = message.size();
        let max = self.config.max_message_size;
        if max > 0 && size as i64 > i64::from(max) {
            return Err(SimError::MessageTooLarge {
                stream: self.config.name.clone(),
                size,
                max_message_size: max,
            });
        }
        let window = self.config.duplicate_window;
        self.seen
            .retain(|_, (_, at)| now.saturating_duration_since(*at) < window);
        let msg_id = headers
            .and_then(|h| h.get(MSG_ID_HEADER))
            .map(|v| v.as_str().to_owned())
            .filter(|id| !id.is_empty());
        if let Some(id) = &msg_id
            && let Some((sequence, _)) = self.seen.get(id)
        {
            return Ok((
                PubAck {
                    stream: self.config.name.clone(),
                    sequence: *sequence,
                    duplicate: true,
                },
                Vec::new(),
            ));
        }
        if let Some(headers) = headers {
            self.check_expectations(subject, headers)?;
        }
        let max = u64::try_from(self.config.max_messages)
            .ok()
            .filter(|m| *m > 0);
        let mut removed = Vec::new();
        if let Some(max) = max
            && self.messages.len() as u64 >= max
        {
            match self.config.discard {
                DiscardPolicy::New => return Err(SimError::StreamFull(self.config.name.clone())),
                DiscardPolicy::Old => {
                    while self.messages.len() as u64 >= max {
                        if let Some((seq, _)) = self.messages.pop_first() {
                            removed.push(seq);
                        }
                    }
                }
            }
        }
        self.last_sequence += 1;
        let sequence = self.last_sequence;
        self.messages.insert(
            sequence,
            StoredMessage {
                sequence,
                subject: subject.clone(),
                headers: headers.cloned(),
                unreadable_headers: message.unreadable_headers.clone(),
                payload: payload.clone(),
                stored_at: now,
            },
        );
        if let Some(id) = &msg_id {
            self.seen.insert(id.clone(), (sequence, now));
        }
        self.last_msg_id = msg_id;
        Ok((
            PubAck {
                stream: self.config.name.clone(),
                sequence,
                duplicate: false,
            },
            removed,
        ))
    }
}
