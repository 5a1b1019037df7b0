//! Core NATS routing: a message to every matching subscription and to one member of each
//! queue group, and the status messages the server sends.

use std::collections::BTreeMap;

use async_nats::{HeaderMap, StatusCode};
use bytes::Bytes;
use ruststream_settlement::Subject;

use crate::model::ids::SubscriptionId;
use crate::model::journal::{Delivered, Publish};
use crate::model::server::{Server, Subscription};
use crate::model::stream::StoredMessage;
use crate::model::wire::headers_len;

/// The headers a routed message carries: readable ones, or a block no client can read
/// ([`Publish::unreadable_headers`]), which is sent instead.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Headers<'a> {
    map: Option<&'a HeaderMap>,
    unreadable: Option<&'a Bytes>,
}

impl<'a> Headers<'a> {
    /// Readable headers, or none.
    pub(crate) fn map(map: Option<&'a HeaderMap>) -> Self {
        Self {
            map,
            unreadable: None,
        }
    }

    /// What a publish carries.
    pub(crate) fn of(message: &'a Publish) -> Self {
        Self {
            map: message.headers.as_ref(),
            unreadable: message.unreadable_headers.as_ref(),
        }
    }

    /// What a stored message carries.
    pub(crate) fn of_stored(message: &'a StoredMessage) -> Self {
        Self {
            map: message.headers.as_ref(),
            unreadable: message.unreadable_headers.as_ref(),
        }
    }

    fn len(&self) -> usize {
        self.unreadable
            .map_or_else(|| self.map.map_or(0, headers_len), Bytes::len)
    }
}

impl Server {
    /// Sends a status message (a pull request's end, `503 No Responders`) to `inbox`.
    pub(crate) fn send_status(
        &mut self,
        inbox: &str,
        code: u16,
        description: &str,
        pending_messages: Option<usize>,
    ) {
        let headers = pending_messages.map(|n| {
            let mut h = HeaderMap::new();
            h.insert("Nats-Pending-Messages", n.to_string().as_str());
            h.insert("Nats-Pending-Bytes", "0");
            h
        });
        let status = StatusCode::from_u16(code).ok();
        self.route_with(
            inbox,
            None,
            Headers::map(headers.as_ref()),
            &Bytes::new(),
            |m| {
                m.status = status;
                m.description = Some(description.to_owned());
            },
        );
    }

    /// Answers a request nothing receives: `503 No Responders` to its reply subject.
    pub(crate) fn no_responders(&mut self, reply: &str) {
        self.send_status(reply, 503, "No Responders", None);
    }

    /// Answers a request: `payload` to its reply subject's subscriptions, as a responder's
    /// publish would reach them (the JetStream API's answers).
    pub(crate) fn respond(&mut self, reply: &str, payload: Bytes) {
        self.route(reply, None, None, &payload);
    }

    /// Sends a message to every subscription on `subject`: each plain subscription, and one
    /// member of each queue group, taken in turn. How many received it.
    pub(crate) fn route(
        &mut self,
        subject: &str,
        reply: Option<&str>,
        headers: Option<&HeaderMap>,
        payload: &Bytes,
    ) -> usize {
        self.route_with(subject, reply, Headers::map(headers), payload, |_| {})
    }

    pub(crate) fn route_with(
        &mut self,
        subject: &str,
        reply: Option<&str>,
        headers: Headers<'_>,
        payload: &Bytes,
        shape: impl Fn(&mut async_nats::Message),
    ) -> usize {
        let Ok(literal) = Subject::new(subject) else {
            return 0;
        };
        let mut plain = Vec::new();
        let mut groups: BTreeMap<&str, Vec<SubscriptionId>> = BTreeMap::new();
        for (sid, sub) in &self.subscriptions {
            if !sub.subject.matches(&literal) {
                continue;
            }
            match &sub.queue {
                None => plain.push(*sid),
                Some(queue) => groups.entry(queue).or_default().push(*sid),
            }
        }
        let mut chosen = plain;
        for (queue, members) in groups {
            let turn = self.queue_turns.entry(queue.to_owned()).or_insert(0);
            let index = usize::try_from(*turn % members.len() as u64).unwrap_or(0);
            *turn += 1;
            chosen.push(members[index]);
        }
        chosen.sort();
        let length = subject.len() + reply.map_or(0, str::len) + payload.len() + headers.len();
        for sid in &chosen {
            let Some(sub) = self.subscriptions.get(sid) else {
                continue;
            };
            let mut message = async_nats::Message {
                subject: subject.into(),
                reply: reply.map(Into::into),
                payload: payload.clone(),
                headers: headers.map.cloned(),
                status: None,
                description: None,
                length,
            };
            shape(&mut message);
            self.outbox.push_back(Delivered {
                connection: sub.connection,
                subscription: *sid,
                message,
                unreadable_headers: headers.unreadable.cloned(),
            });
        }
        chosen.len()
    }
}

pub(crate) fn has_interest(
    subscriptions: &BTreeMap<SubscriptionId, Subscription>,
    inbox: &str,
) -> bool {
    let Ok(subject) = Subject::new(inbox) else {
        return false;
    };
    subscriptions.values().any(|s| s.subject.matches(&subject))
}
