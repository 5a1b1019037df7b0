//! Streams and consumers in the modelled server, managed as the JetStream API's `STREAM.*` and
//! `CONSUMER.*` requests manage them: created (with nats-server's checks), read, updated and
//! deleted. What they do with messages is in `jetstream.rs`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{AckPolicy, pull};
use async_nats::jetstream::stream;
use ruststream_settlement::Subject;

use crate::model::consumer::{Consumer, ConsumerState};
use crate::model::error::{PriorityRule, SimError, WorkQueueRule};
use crate::model::server::{EPOCH_NANOS, Server, ServerVersion, StreamEntry};
use crate::model::stream::{StoredMessage, Stream, StreamState};

impl Server {
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
                if other.stream.subjects().iter().any(|s| s.overlaps(mine)) {
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

    /// Deletes one stored message, as `STREAM.MSG.DELETE` (`nats stream rmm`) does: the stream
    /// no longer holds it, and a consumer that has it pending forgets it (nats-server moves
    /// the consumer's ack floor past it). Whether it was stored.
    ///
    /// # Errors
    /// [`SimError::StreamNotFound`].
    pub fn delete_message(&mut self, stream: &str, sequence: u64) -> Result<bool, SimError> {
        let entry = self
            .streams
            .get_mut(stream)
            .ok_or_else(|| SimError::StreamNotFound(stream.to_owned()))?;
        if !entry.stream.remove(sequence) {
            return Ok(false);
        }
        for consumer in entry.consumers.values_mut() {
            consumer.handle_removed(&[sequence]);
        }
        Ok(true)
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
                self.apply_pause(stream, &name);
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
        let paused_before = existing.config.pause_until;
        existing.update(updated)?;
        if existing.config.pause_until != paused_before {
            self.apply_pause(stream, &name);
        }
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
        Ok(c.state(&entry.stream, self.now))
    }

    /// Pauses a consumer until `until` (on the model's clock), as `CONSUMER.PAUSE` does on
    /// nats-server 2.11+: it delivers nothing before then, and resumes by itself at `until`.
    /// `None`, or an instant not after [`now`](Self::now), resumes it at once. The consumer's
    /// `pause_until` is set to the wall time of `until` ([`Server::wall_clock`]).
    ///
    /// # Errors
    /// [`SimError::StreamNotFound`], [`SimError::ConsumerNotFound`]; on
    /// [`ServerVersion::V2_9`], which has no pause, [`SimError::NotModelled`].
    pub fn pause_consumer(
        &mut self,
        stream: &str,
        consumer: &str,
        until: Option<Instant>,
    ) -> Result<ConsumerState, SimError> {
        let until = until.map(|at| self.wall_clock(at));
        self.pause_consumer_until(stream, consumer, until)?;
        self.consumer_state(stream, consumer)
    }

    /// Sets `pause_until` (a wall time; `None` resumes) and the pause it means.
    pub(crate) fn pause_consumer_until(
        &mut self,
        stream: &str,
        consumer: &str,
        until: Option<async_nats::datetime::DateTime>,
    ) -> Result<(), SimError> {
        if self.version == ServerVersion::V2_9 {
            return Err(SimError::NotModelled {
                what: format!("consumer `{consumer}` on stream `{stream}`"),
                setting: "a pause on nats-server 2.9, which has none".to_owned(),
            });
        }
        self.consumer_mut(stream, consumer)?.config.pause_until = until;
        self.apply_pause(stream, consumer);
        let at = self.now;
        self.pump(at);
        Ok(())
    }

    /// Releases a pinned-client consumer's pin in `group`, as `CONSUMER.UNPIN` does on
    /// nats-server 2.11+: the next request served is pinned anew (a consumer of another
    /// policy with that group: nothing to release).
    ///
    /// # Errors
    /// [`SimError::StreamNotFound`], [`SimError::ConsumerNotFound`],
    /// [`SimError::Priority`] with [`PriorityRule::UnknownGroup`] for a group the consumer does
    /// not have; on [`ServerVersion::V2_9`], [`SimError::NotModelled`].
    pub fn unpin_consumer(
        &mut self,
        stream: &str,
        consumer: &str,
        group: &str,
    ) -> Result<(), SimError> {
        if self.version == ServerVersion::V2_9 {
            return Err(SimError::NotModelled {
                what: format!("consumer `{consumer}` on stream `{stream}`"),
                setting: "an unpin on nats-server 2.9, which has no priority groups".to_owned(),
            });
        }
        let c = self.consumer_mut(stream, consumer)?;
        if !c.config.priority_groups.iter().any(|g| g == group) {
            return Err(SimError::Priority {
                stream: stream.to_owned(),
                consumer: consumer.to_owned(),
                rule: PriorityRule::UnknownGroup,
            });
        }
        c.unpin();
        let at = self.now;
        self.pump(at);
        Ok(())
    }

    /// The wall time (UTC) of an instant of the model's clock, which starts at
    /// [`EPOCH_NANOS`](crate::EPOCH_NANOS): what the server writes for it, and what a
    /// `pause_until` for it says.
    pub fn wall_clock(&self, at: Instant) -> async_nats::datetime::DateTime {
        let since = at.saturating_duration_since(self.start);
        let nanos = i128::from(EPOCH_NANOS) + i128::try_from(since.as_nanos()).unwrap_or(i128::MAX);
        time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
    }

    /// The instant of the model's clock a wall time is; one before the clock's start is its
    /// start.
    pub(crate) fn instant_of(&self, wall: async_nats::datetime::DateTime) -> Instant {
        let since = wall.unix_timestamp_nanos() - i128::from(EPOCH_NANOS);
        let since = u64::try_from(since.max(0)).unwrap_or(u64::MAX);
        self.start + Duration::from_nanos(since)
    }

    /// Sets a consumer's pause from its `pause_until`.
    fn apply_pause(&mut self, stream: &str, consumer: &str) {
        let now = self.now;
        let Ok(until) = self
            .consumer_mut(stream, consumer)
            .map(|c| c.config.pause_until)
        else {
            return;
        };
        let resume_at = until.map(|wall| self.instant_of(wall));
        if let Ok(c) = self.consumer_mut(stream, consumer) {
            c.set_pause(resume_at, now);
        }
    }

    fn consumer_mut(&mut self, stream: &str, consumer: &str) -> Result<&mut Consumer, SimError> {
        self.streams
            .get_mut(stream)
            .ok_or_else(|| SimError::StreamNotFound(stream.to_owned()))?
            .consumers
            .get_mut(consumer)
            .ok_or_else(|| SimError::ConsumerNotFound {
                stream: stream.to_owned(),
                consumer: consumer.to_owned(),
            })
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
            .any(|mine| other.filters().iter().any(|theirs| mine.overlaps(theirs)))
        {
            return Err(broken(WorkQueueRule::NotUnique));
        }
    }
    Ok(())
}
