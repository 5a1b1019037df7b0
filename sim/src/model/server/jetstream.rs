//! JetStream in the modelled server: streams storing what they capture, acknowledgements,
//! pull requests and deliveries. Creating, reading and deleting streams and consumers is in
//! `management.rs`.

use std::time::Instant;

use ruststream_settlement::{ACK_PREFIX, AckReply, Subject};

use crate::model::consumer::{Consumer, Send};
use crate::model::error::SimError;
use crate::model::ids::ConnectionId;
use crate::model::journal::{Publish, Record};
use crate::model::server::routing::{Headers, has_interest};
use crate::model::server::{ACCOUNT_HASH, EPOCH_NANOS, Server};
use crate::model::stream::PubAck;
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
        let (ack, removed) = entry.stream.store(subject, message, at)?;
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
                priority: None,
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
                    pin_id,
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
                    let account = if self.ack_replies_v2 {
                        format!("_.{ACCOUNT_HASH}.")
                    } else {
                        String::new()
                    };
                    let reply = format!(
                        "{ACK_PREFIX}{account}{stream}.{consumer}.{delivered}.{sequence}.{consumer_sequence}.{timestamp}.{pending}"
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
                    // A pinned-client consumer's deliveries carry the pin (readable headers
                    // only: an unreadable block goes on byte for byte).
                    let pinned = pin_id
                        .filter(|_| stored.unreadable_headers.is_none())
                        .map(|id| {
                            let mut headers = stored.headers.clone().unwrap_or_default();
                            headers.insert("Nats-Pin-Id", id.as_str());
                            headers
                        });
                    let headers = match &pinned {
                        Some(map) => Headers::map(Some(map)),
                        None => Headers::of_stored(&stored),
                    };
                    self.route_with(&inbox, Some(&reply), headers, &stored.payload, |m| {
                        m.subject = subject.clone()
                    });
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
}
