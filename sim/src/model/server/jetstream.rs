//! JetStream in the modelled server: streams storing what they capture, acknowledgements,
//! pull requests, deliveries, and the stream and consumer API.

use std::collections::BTreeMap;
use std::time::Instant;

use async_nats::jetstream::consumer::{AckPolicy, pull};
use async_nats::jetstream::stream;
use ruststream_core::{ACK_PREFIX, AckReply, Subject};

use crate::model::consumer::{Consumer, ConsumerState, Send};
use crate::model::error::SimError;
use crate::model::error::WorkQueueRule;
use crate::model::ids::ConnectionId;
use crate::model::journal::{Publish, Record};
use crate::model::server::routing::has_interest;
use crate::model::server::{EPOCH_NANOS, Server, ServerVersion, StreamEntry};
use crate::model::stream::{PubAck, StoredMessage, Stream, StreamState, overlap};
use crate::model::wire::{AckKind, PullRequest};

impl Server {
    /// Reads an acknowledgement. Whether it was lost (by a fault) and so goes no further.
    pub(crate) fn acknowledge(&mut self, message: &Publish, at: Instant) -> bool {
        let Ok(reply) = AckReply::parse(message.subject.as_bytes()) else {
            return false;
        };
        let kind = AckKind::parse(&message.payload);
        let lost = self.faults.take_lost_ack();
        self.journal.push(Record::Acknowledged {
            at,
            stream: reply.stream.to_owned(),
            consumer: reply.consumer.to_owned(),
            stream_sequence: reply.stream_sequence,
            delivered: reply.delivered,
            kind,
            lost,
        });
        if lost {
            return true;
        }
        let Some(entry) = self.streams.get_mut(reply.stream) else {
            return false;
        };
        let Some(consumer) = entry.consumers.get_mut(reply.consumer) else {
            return false;
        };
        if consumer.handle_ack(reply.stream_sequence, kind, at)
            && entry.stream.removes_on_ack()
            && entry.stream.remove(reply.stream_sequence)
        {
            for other in entry.consumers.values_mut() {
                other.handle_removed(&[reply.stream_sequence]);
            }
        }
        false
    }

    /// Stores a message in the stream that captures its subject, if one does.
    pub(crate) fn capture(
        &mut self,
        subject: &Subject,
        message: &Publish,
        at: Instant,
    ) -> Result<Option<PubAck>, SimError> {
        let Some(entry) = self
            .streams
            .values_mut()
            .find(|e| e.stream.captures(subject))
        else {
            return Ok(None);
        };
        let (ack, removed) =
            entry
                .stream
                .store(subject, message.headers.as_ref(), &message.payload, at)?;
        for consumer in entry.consumers.values_mut() {
            consumer.handle_removed(&removed);
        }
        Ok(Some(ack))
    }

    pub(crate) fn pull_request(
        &mut self,
        connection: ConnectionId,
        names: &str,
        inbox: &str,
        payload: &[u8],
        at: Instant,
    ) {
        let Some((stream, consumer)) = names.split_once('.') else {
            return;
        };
        let request = if payload.trim_ascii().is_empty() {
            Ok(PullRequest {
                batch: 1,
                expires: None,
                no_wait: false,
                idle_heartbeat: None,
            })
        } else {
            serde_json::from_slice::<PullRequest>(payload)
        };
        let Ok(request) = request else {
            self.send_status(inbox, 400, "Bad Request", None);
            return;
        };
        let Some(entry) = self.streams.get_mut(stream) else {
            self.send_status(inbox, 404, "Stream Not Found", None);
            return;
        };
        let Some(c) = entry.consumers.get_mut(consumer) else {
            self.send_status(inbox, 404, "Consumer Not Found", None);
            return;
        };
        let mut out = Vec::new();
        c.handle_request(
            &entry.stream,
            connection,
            inbox.to_owned(),
            &request,
            at,
            &mut out,
        );
        let (stream, consumer) = (stream.to_owned(), consumer.to_owned());
        self.send(&stream, &consumer, out, at);
    }

    /// Delivers what every consumer can deliver now.
    pub(crate) fn pump(&mut self, at: Instant) {
        let names: Vec<(String, String)> = self
            .streams
            .iter()
            .flat_map(|(s, e)| e.consumers.keys().map(move |c| (s.clone(), c.clone())))
            .collect();
        for (stream, consumer) in names {
            let mut out = Vec::new();
            let subscriptions = &self.subscriptions;
            let Some(entry) = self.streams.get_mut(&stream) else {
                continue;
            };
            let Some(c) = entry.consumers.get_mut(&consumer) else {
                continue;
            };
            c.deliver(
                &entry.stream,
                at,
                &mut |_, inbox| has_interest(subscriptions, inbox),
                &mut out,
            );
            self.send(&stream, &consumer, out, at);
        }
    }

    /// Sends what a consumer gave out, after journalling the messages it found past
    /// `max_deliver` meanwhile.
    pub(crate) fn send(&mut self, stream: &str, consumer: &str, out: Vec<Send>, at: Instant) {
        let exceeded = self
            .streams
            .get_mut(stream)
            .and_then(|e| e.consumers.get_mut(consumer))
            .map(Consumer::take_exceeded)
            .unwrap_or_default();
        for (stream_sequence, delivered) in exceeded {
            self.journal.push(Record::MaxDeliveries {
                at,
                stream: stream.to_owned(),
                consumer: consumer.to_owned(),
                stream_sequence,
                delivered,
            });
        }
        for send in out {
            match send {
                Send::Message {
                    inbox,
                    sequence,
                    delivered,
                    consumer_sequence,
                    pending,
                    ..
                } => {
                    let Some(stored) = self
                        .streams
                        .get(stream)
                        .and_then(|e| e.stream.get(sequence))
                        .cloned()
                    else {
                        continue;
                    };
                    let elapsed = stored.stored_at.saturating_duration_since(self.start);
                    let timestamp =
                        EPOCH_NANOS + u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
                    let reply = format!(
                        "{ACK_PREFIX}{stream}.{consumer}.{delivered}.{sequence}.{consumer_sequence}.{timestamp}.{pending}"
                    );
                    self.journal.push(Record::Delivered {
                        at,
                        stream: stream.to_owned(),
                        consumer: consumer.to_owned(),
                        stream_sequence: sequence,
                        delivered,
                    });
                    // Sent through the request's inbox, under the message's own subject, as
                    // the server delivers a pull consumer's messages.
                    let subject = async_nats::Subject::from(stored.subject.as_str());
                    self.route_with(
                        &inbox,
                        Some(&reply),
                        stored.headers.as_ref(),
                        &stored.payload,
                        |m| m.subject = subject.clone(),
                    );
                }
                Send::Status {
                    inbox,
                    code,
                    description,
                    pending_messages,
                    ..
                } => self.send_status(&inbox, code, &description, pending_messages),
            }
        }
    }

    /// Creates a stream, as `STREAM.CREATE` does (the same configuration again is no change).
    ///
    /// # Errors
    /// [`SimError::StreamExists`] with another configuration, [`SimError::SubjectsOverlap`],
    /// [`SimError::Subject`], [`SimError::InvalidConfig`], or [`SimError::NotModelled`] for
    /// a setting the model does not implement (interest retention, byte limits, mirrors).
    pub fn create_stream(&mut self, config: stream::Config) -> Result<StreamState, SimError> {
        let stream = Stream::new(config)?;
        if let Some(existing) = self.streams.get(stream.name()) {
            if existing.stream.config == stream.config {
                return self.stream_state(stream.name());
            }
            return Err(SimError::StreamExists(stream.name().to_owned()));
        }
        for other in self.streams.values() {
            for mine in stream.subjects() {
                if other.stream.subjects().iter().any(|s| overlap(s, mine)) {
                    return Err(SimError::SubjectsOverlap {
                        stream: stream.name().to_owned(),
                        subject: mine.as_str().to_owned(),
                        other: other.stream.name().to_owned(),
                    });
                }
            }
        }
        let name = stream.name().to_owned();
        self.streams.insert(
            name.clone(),
            StreamEntry {
                stream,
                consumers: BTreeMap::new(),
            },
        );
        self.stream_state(&name)
    }

    /// Deletes a stream and its consumers.
    ///
    /// # Errors
    /// [`SimError::StreamNotFound`].
    pub fn delete_stream(&mut self, name: &str) -> Result<(), SimError> {
        self.streams
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| SimError::StreamNotFound(name.to_owned()))
    }

    /// A stream's configuration, with the server's defaults filled in.
    ///
    /// # Errors
    /// [`SimError::StreamNotFound`].
    pub fn stream_config(&self, name: &str) -> Result<stream::Config, SimError> {
        self.entry(name).map(|e| e.stream.config.clone())
    }

    /// A stream's state.
    ///
    /// # Errors
    /// [`SimError::StreamNotFound`].
    pub fn stream_state(&self, name: &str) -> Result<StreamState, SimError> {
        let entry = self.entry(name)?;
        Ok(StreamState {
            name: name.to_owned(),
            messages: entry.stream.len(),
            first_sequence: entry.stream.first_sequence(),
            last_sequence: entry.stream.last_sequence(),
            consumers: entry.consumers.keys().cloned().collect(),
        })
    }

    /// The stream that stores `subject`, if one does.
    pub fn stream_for(&self, subject: &str) -> Option<String> {
        let subject = Subject::new(subject).ok()?;
        self.streams
            .values()
            .find(|e| e.stream.captures(&subject))
            .map(|e| e.stream.name().to_owned())
    }

    /// A stored message, as `STREAM.MSG.GET` gives it; `None` when it is not stored.
    ///
    /// # Errors
    /// [`SimError::StreamNotFound`].
    pub fn stream_message(
        &self,
        stream: &str,
        sequence: u64,
    ) -> Result<Option<StoredMessage>, SimError> {
        Ok(self.entry(stream)?.stream.get(sequence).cloned())
    }

    /// Every message a stream stores, in order.
    ///
    /// # Errors
    /// [`SimError::StreamNotFound`].
    pub fn stream_messages(&self, stream: &str) -> Result<Vec<StoredMessage>, SimError> {
        let entry = self.entry(stream)?;
        let mut all = Vec::new();
        let mut next = entry.stream.first_sequence();
        while let Some(m) = entry.stream.next_matching(next, &[]) {
            next = m.sequence + 1;
            all.push(m.clone());
        }
        Ok(all)
    }

    /// Creates a pull consumer, as `CONSUMER.CREATE` with the create action does (the same
    /// configuration again is no change). Ack policies explicit, all and none are modelled;
    /// a consumer with neither `durable_name` nor `name` is ephemeral and named by the model
    /// (`EPHEMERAL000001`, …; it is not removed after `inactive_threshold`).
    ///
    /// # Errors
    /// [`SimError::StreamNotFound`], [`SimError::ConsumerExists`] with another configuration,
    /// [`SimError::InvalidConfig`] (no name, a filter outside the stream, a `BackOff` longer
    /// than `max_deliver`, a second consumer of a work queue that is not filtered or whose
    /// filter overlaps another's), or [`SimError::NotModelled`] (another ack policy, a deliver
    /// policy other than all, new or by start sequence).
    ///
    /// nats-server 2.10.14 and later take a `BackOff` with no `max_deliver`, or one at least
    /// its length; 2.9 ([`ServerVersion::V2_9`]) needs `max_deliver` above its length.
    pub fn create_consumer(
        &mut self,
        stream: &str,
        mut config: pull::Config,
    ) -> Result<ConsumerState, SimError> {
        let v2_9 = self.version == ServerVersion::V2_9;
        if config.durable_name.is_none() && config.name.is_none() {
            // An ephemeral consumer: the server names it (deterministically here).
            self.next_ephemeral += 1;
            config.name = Some(format!("EPHEMERAL{:06}", self.next_ephemeral));
        }
        let entry = self
            .streams
            .get_mut(stream)
            .ok_or_else(|| SimError::StreamNotFound(stream.to_owned()))?;
        let consumer = Consumer::new(&entry.stream, config.clone(), v2_9)?;
        let name = consumer.name.clone();
        match entry.consumers.get(&name) {
            Some(existing) if existing.same_config(&entry.stream, &config) => {}
            Some(_) => {
                return Err(SimError::ConsumerExists {
                    stream: stream.to_owned(),
                    consumer: name,
                });
            }
            None => {
                if entry.stream.removes_on_ack() {
                    check_work_queue(stream, &consumer, entry.consumers.values())?;
                }
                entry.consumers.insert(name.clone(), consumer);
            }
        }
        self.consumer_state(stream, &name)
    }

    /// Changes an existing consumer, as `CONSUMER.CREATE` with the update action does: only
    /// `ack_wait`, `BackOff`, `max_deliver`, `max_ack_pending`, `max_waiting`, the
    /// description and `inactive_threshold` may change; deliveries pending take the
    /// new wait from their delivery time.
    ///
    /// # Errors
    /// [`SimError::StreamNotFound`], [`SimError::ConsumerNotFound`], what
    /// [`create_consumer`](Self::create_consumer) refuses in a configuration, and
    /// [`SimError::NotModelled`] for a change of any other setting.
    pub fn update_consumer(
        &mut self,
        stream: &str,
        config: pull::Config,
    ) -> Result<ConsumerState, SimError> {
        let v2_9 = self.version == ServerVersion::V2_9;
        let entry = self
            .streams
            .get_mut(stream)
            .ok_or_else(|| SimError::StreamNotFound(stream.to_owned()))?;
        let updated = Consumer::new(&entry.stream, config, v2_9)?;
        let name = updated.name.clone();
        let existing =
            entry
                .consumers
                .get_mut(&name)
                .ok_or_else(|| SimError::ConsumerNotFound {
                    stream: stream.to_owned(),
                    consumer: name.clone(),
                })?;
        existing.update(updated)?;
        self.consumer_state(stream, &name)
    }

    /// Deletes a consumer.
    ///
    /// # Errors
    /// [`SimError::StreamNotFound`], [`SimError::ConsumerNotFound`].
    pub fn delete_consumer(&mut self, stream: &str, consumer: &str) -> Result<(), SimError> {
        let entry = self
            .streams
            .get_mut(stream)
            .ok_or_else(|| SimError::StreamNotFound(stream.to_owned()))?;
        entry
            .consumers
            .remove(consumer)
            .map(|_| ())
            .ok_or_else(|| SimError::ConsumerNotFound {
                stream: stream.to_owned(),
                consumer: consumer.to_owned(),
            })
    }

    /// A consumer's state, as `CONSUMER.INFO` gives it.
    ///
    /// # Errors
    /// [`SimError::StreamNotFound`], [`SimError::ConsumerNotFound`].
    pub fn consumer_state(&self, stream: &str, consumer: &str) -> Result<ConsumerState, SimError> {
        let entry = self.entry(stream)?;
        let c = entry
            .consumers
            .get(consumer)
            .ok_or_else(|| SimError::ConsumerNotFound {
                stream: stream.to_owned(),
                consumer: consumer.to_owned(),
            })?;
        Ok(c.state(&entry.stream))
    }

    pub(crate) fn entry(&self, name: &str) -> Result<&StreamEntry, SimError> {
        self.streams
            .get(name)
            .ok_or_else(|| SimError::StreamNotFound(name.to_owned()))
    }
}

/// A work queue delivers each message to one consumer: nats-server refuses a second consumer
/// without a filter, or one whose filter overlaps another consumer's.
fn check_work_queue<'c>(
    stream: &str,
    consumer: &Consumer,
    others: impl Iterator<Item = &'c Consumer>,
) -> Result<(), SimError> {
    let broken = |rule| SimError::WorkQueue {
        stream: stream.to_owned(),
        consumer: consumer.name.clone(),
        rule,
    };
    if consumer.config.ack_policy != AckPolicy::Explicit {
        return Err(broken(WorkQueueRule::RequiresExplicitAck));
    }
    for other in others {
        if consumer.filters().is_empty() || other.filters().is_empty() {
            return Err(broken(WorkQueueRule::MultipleUnfiltered));
        }
        if consumer
            .filters()
            .iter()
            .any(|mine| other.filters().iter().any(|theirs| overlap(mine, theirs)))
        {
            return Err(broken(WorkQueueRule::NotUnique));
        }
    }
    Ok(())
}
