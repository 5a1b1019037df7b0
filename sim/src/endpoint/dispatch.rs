//! A client's operations applied to the model: `CONNECT` checked against the endpoint's
//! access, `PING` answered, `SUB` and `UNSUB` kept as routes from the model's subscriptions to
//! the client's sids, and each `PUB` served as nats-server serves it: a JetStream API request
//! answered from the model, a direct get or a request to a server without JetStream answered
//! `503 No Responders`, anything else published to the model, whose refusals become `-ERR` or
//! a JetStream error answer.

use bytes::Bytes;

use crate::endpoint::runtime::now;
use crate::endpoint::{Inner, Route};
use crate::model::error::SimError;
use crate::model::ids::ConnectionId;
use crate::model::journal::Publish;
use crate::model::server::PULL_PREFIX;
use crate::model::wire::api::API_PREFIX;
use crate::model::wire::protocol::ClientOp;

/// Direct gets: `$JS.API.DIRECT.GET.<stream>`.
const DIRECT_GET_PREFIX: &str = "$JS.API.DIRECT.GET.";

impl Inner {
    /// Applies one operation of `connection`. `Err` closes the connection after its `-ERR`.
    pub(super) fn apply(&mut self, connection: ConnectionId, op: ClientOp) -> Result<(), ()> {
        let admitted = self.clients.get(&connection).is_some_and(|c| c.admitted);
        match op {
            ClientOp::Connect(options) => {
                let admits = self
                    .access
                    .authorization
                    .as_ref()
                    .is_none_or(|a| a.admits(&options));
                if !admits {
                    self.send(connection, &b"-ERR 'Authorization Violation'\r\n"[..]);
                    return Err(());
                }
                if let Some(client) = self.clients.get_mut(&connection) {
                    client.admitted = true;
                }
                return Ok(());
            }
            ClientOp::Pong => return Ok(()),
            ClientOp::Ping if admitted => {
                self.send(connection, &b"PONG\r\n"[..]);
                return Ok(());
            }
            _ if !admitted => {
                // nats-server wants `CONNECT` first where it requires authorization.
                self.send(connection, &b"-ERR 'Authorization Violation'\r\n"[..]);
                return Err(());
            }
            _ => {}
        }
        match op {
            ClientOp::Connect(_) | ClientOp::Pong => {}
            ClientOp::Ping => self.send(connection, &b"PONG\r\n"[..]),
            ClientOp::Sub {
                subject,
                queue,
                sid,
            } => match self
                .server
                .subscribe(connection, &subject, queue.as_deref())
            {
                Ok(id) => {
                    if let Some(client) = self.clients.get_mut(&connection) {
                        client.sids.insert(sid.clone(), id);
                    }
                    self.routes.insert(
                        id,
                        Route {
                            connection,
                            sid,
                            delivered: 0,
                            max: None,
                        },
                    );
                }
                Err(_) => self.send(connection, &b"-ERR 'Invalid Subject'\r\n"[..]),
            },
            ClientOp::Unsub { sid, max } => {
                let id = self
                    .clients
                    .get(&connection)
                    .and_then(|c| c.sids.get(&sid).copied());
                if let Some(id) = id {
                    match (max, self.routes.get_mut(&id)) {
                        (Some(max), Some(route)) if route.delivered < max => route.max = Some(max),
                        _ => self.end_subscription(id),
                    }
                }
            }
            ClientOp::Pub {
                subject,
                reply,
                headers,
                unreadable_headers,
                payload,
            } => {
                let message = Publish {
                    subject,
                    reply,
                    headers,
                    unreadable_headers,
                    payload,
                };
                return self.publish(connection, message);
            }
        }
        Ok(())
    }

    fn publish(&mut self, connection: ConnectionId, message: Publish) -> Result<(), ()> {
        let (subject, reply, payload) = (&message.subject, message.reply.clone(), &message.payload);
        if subject.starts_with(API_PREFIX) && !self.access.jetstream {
            // A server without JetStream has no responder for its API, pull requests
            // included.
            if let Some(reply) = reply {
                self.server.no_responders(&reply);
            }
            return Ok(());
        }
        if subject.starts_with(DIRECT_GET_PREFIX) {
            // A stream without `allow_direct` (the model refuses it) has no direct-get
            // responder: nats-server answers `503 No Responders`.
            if let Some(reply) = reply {
                self.server.no_responders(&reply);
            }
            return Ok(());
        }
        if let Some(api) = subject.strip_prefix(API_PREFIX)
            && !subject.starts_with(PULL_PREFIX)
        {
            let body = self.server.answer_api(api, payload);
            if let (Some(reply), Some(body)) = (reply, body) {
                self.respond(&reply, body.to_string());
            }
            return Ok(());
        }
        match self.server.publish(connection, message.clone(), now()) {
            Ok(_) => Ok(()),
            Err(SimError::MaxPayload { .. }) => {
                self.send(connection, &b"-ERR 'Maximum Payload Violation'\r\n"[..]);
                Err(())
            }
            Err(SimError::Subject { .. }) => {
                self.send(connection, &b"-ERR 'Invalid Publish Subject'\r\n"[..]);
                Ok(())
            }
            // A refused JetStream publish (a fault, a full stream) is answered as
            // nats-server answers one: a JetStream error to the reply subject.
            Err(e) => {
                if let Some(reply) = reply {
                    self.respond(&reply, crate::model::wire::api::error_body(e).to_string());
                }
                Ok(())
            }
        }
    }

    fn respond(&mut self, reply: &str, body: String) {
        self.server.respond(reply, Bytes::from(body));
    }
}
