//! The JetStream API over the model: the `$JS.API.` requests async-nats makes for the runtime
//! and for a test's own client, answered in nats-server's JSON (the shapes async-nats reads).
//!
//! Answered: `STREAM.CREATE`, `STREAM.UPDATE` (to the same configuration only), `STREAM.INFO`,
//! `STREAM.DELETE`, `STREAM.NAMES` (with a subject filter), `STREAM.LIST`, `STREAM.MSG.GET`
//! (by sequence), `STREAM.MSG.DELETE` (by sequence), `CONSUMER.CREATE` and `CONSUMER.DURABLE.CREATE` (pull consumers),
//! `CONSUMER.INFO`, `CONSUMER.DELETE`, `CONSUMER.NAMES`, `CONSUMER.LIST`, `CONSUMER.PAUSE` and
//! `CONSUMER.UNPIN` (nats-server 2.11+; 2.9 answers neither: nothing comes back), and `INFO`
//! (the account). Every other request gets a JetStream error naming it as not modelled, never a
//! silent success (among them `STREAM.PURGE`, a get by subject).
//! `CONSUMER.MSG.NEXT`, the pull request, is the model's own ([`Server::publish`]); a direct
//! get (`DIRECT.GET`) is answered `503 No Responders`, as nats-server answers it for a stream
//! without `allow_direct`, which the model refuses.
//!
//! Here, the server's answers; how requests read and how errors are written, which needs no
//! server, is in `model/wire/api.rs`.

use async_nats::jetstream::consumer::{self, IntoConsumerConfig};
use async_nats::jetstream::{ErrorCode, stream};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::model::error::SimError;
use crate::model::server::{EPOCH_NANOS, Server, ServerVersion};
use crate::model::wire::api::{
    ApiError, ZERO_TIME, consumer_config, error_body, page, request, response_type, stream_config,
    unpin_group,
};

/// A wall time as nats-server writes one (RFC 3339, UTC).
fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| ZERO_TIME.to_owned())
}

/// The RFC 3339 time of a virtual instant: the model's clock starts at [`EPOCH_NANOS`].
pub(crate) fn wall_time(server: &Server, at: std::time::Instant) -> String {
    let since = at.saturating_duration_since(server.start);
    let nanos = i128::from(EPOCH_NANOS) + i128::try_from(since.as_nanos()).unwrap_or(i128::MAX);
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| ZERO_TIME.to_owned())
}

impl Server {
    /// Answers the JetStream API request on `subject` (after `$JS.API.`) with `payload`: the
    /// JSON body of the response.
    /// JSON body of the response, or `None` when the server sends none (nats-server 2.9 to
    /// the 2.11 requests `CONSUMER.PAUSE` and `CONSUMER.UNPIN`: its `$JS.API.>` listener takes
    /// them and answers nothing, so the client waits for its timeout, no `503`).
    pub(crate) fn answer_api(&mut self, subject: &str, payload: &[u8]) -> Option<Value> {
        let kind = response_type(subject);
        if self.version == ServerVersion::V2_9
            && matches!(kind, "consumer_pause" | "consumer_unpin")
        {
            return None;
        }
        let mut body = self.api(subject, payload).unwrap_or_else(|e| {
            let mut body = error_body(e);
            if kind == "consumer_pause" {
                // The server's pause answer keeps its fields beside the error.
                body["paused"] = Value::Bool(false);
                body["pause_until"] = Value::String(ZERO_TIME.to_owned());
            }
            body
        });
        if let Value::Object(map) = &mut body {
            map.insert(
                "type".to_owned(),
                Value::String(format!("io.nats.jetstream.api.v1.{kind}_response")),
            );
        }
        Some(body)
    }

    fn api(&mut self, subject: &str, payload: &[u8]) -> Result<Value, ApiError> {
        let tokens: Vec<&str> = subject.split('.').collect();
        match tokens.as_slice() {
            ["INFO"] => Ok(self.account_info()),
            ["STREAM", "CREATE", name] => {
                let config = stream_config(name, payload)?;
                self.create_stream(config)?;
                self.stream_info(name)
            }
            ["STREAM", "UPDATE", name] => {
                let config = stream_config(name, payload)?;
                if self.stream_config(name)? != self.create_stream_preview(config)? {
                    return Err(ApiError::not_modelled("changing a stream's configuration"));
                }
                self.stream_info(name)
            }
            ["STREAM", "INFO", name] => self.stream_info(name),
            ["STREAM", "DELETE", name] => {
                self.delete_stream(name)?;
                Ok(json!({"success": true}))
            }
            ["STREAM", "NAMES"] | ["STREAM", "LIST"] => {
                let filter = request(payload)?
                    .get("subject")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let names = self.stream_names(filter.as_deref());
                if tokens[1] == "NAMES" {
                    Ok(page("streams", json!(names), names.len()))
                } else {
                    let infos = names
                        .iter()
                        .map(|n| self.stream_info(n))
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok(page("streams", json!(infos), names.len()))
                }
            }
            ["STREAM", "MSG", "DELETE", name] => {
                let asked = request(payload)?;
                let Some(sequence) = asked.get("seq").and_then(Value::as_u64) else {
                    return Err(ApiError::bad_request("a STREAM.MSG.DELETE without `seq`"));
                };
                if !self.delete_message(name, sequence)? {
                    return Err(ApiError::new(
                        404,
                        ErrorCode::NO_MESSAGE_FOUND,
                        "no message found",
                    ));
                }
                Ok(json!({"success": true}))
            }
            ["STREAM", "MSG", "GET", name] => {
                let asked = request(payload)?;
                let Some(sequence) = asked.get("seq").and_then(Value::as_u64) else {
                    return Err(ApiError::not_modelled(
                        "a STREAM.MSG.GET by anything but `seq`",
                    ));
                };
                let Some(m) = self.stream_message(name, sequence)? else {
                    return Err(ApiError::new(
                        404,
                        ErrorCode::NO_MESSAGE_FOUND,
                        "no message found",
                    ));
                };
                let mut message = json!({
                    "subject": m.subject.as_str(),
                    "seq": m.sequence,
                    "data": STANDARD.encode(&m.payload),
                    "time": wall_time(self, m.stored_at),
                });
                if let Some(block) = &m.unreadable_headers {
                    message["hdrs"] = Value::String(STANDARD.encode(block));
                } else if let Some(headers) = &m.headers {
                    let block =
                        crate::model::wire::protocol::header_block(Some(headers), None, None);
                    message["hdrs"] = Value::String(STANDARD.encode(block));
                }
                Ok(json!({"message": message}))
            }
            ["CONSUMER", "CREATE", stream, ..] | ["CONSUMER", "DURABLE", "CREATE", stream, ..] => {
                let (config, action) = consumer_config(payload)?;
                let name = config.durable_name.clone().or_else(|| config.name.clone());
                let exists = name
                    .as_deref()
                    .is_some_and(|n| self.consumer_state(stream, n).is_ok());
                let state = match (action.as_str(), exists) {
                    ("update", false) => {
                        return Err(ApiError::new(
                            404,
                            ErrorCode(10149),
                            "consumer does not exist",
                        ));
                    }
                    ("update", true) | ("", true) => self.update_consumer(stream, config)?,
                    _ => self.create_consumer(stream, config)?,
                };
                self.consumer_info(stream, &state.name)
            }
            ["CONSUMER", "INFO", stream, name] => self.consumer_info(stream, name),
            ["CONSUMER", "PAUSE", stream, name] => self.pause_api(stream, name, payload),
            ["CONSUMER", "UNPIN", stream, name] => {
                let group = unpin_group(payload)?;
                self.unpin_consumer(stream, name, &group)?;
                Ok(json!({}))
            }
            ["CONSUMER", "DELETE", stream, name] => {
                self.delete_consumer(stream, name)?;
                Ok(json!({"success": true}))
            }
            ["CONSUMER", "NAMES", stream] => {
                let names = self.stream_state(stream)?.consumers;
                Ok(page("consumers", json!(names), names.len()))
            }
            ["CONSUMER", "LIST", stream] => {
                let names = self.stream_state(stream)?.consumers;
                let infos = names
                    .iter()
                    .map(|n| self.consumer_info(stream, n))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(page("consumers", json!(infos), names.len()))
            }
            _ => Err(ApiError::not_modelled(&format!("$JS.API.{subject}"))),
        }
    }

    /// A stream configuration as the model would store it, without storing it: the same
    /// defaults filled in, so that an update to the same configuration is recognised.
    fn create_stream_preview(&self, config: stream::Config) -> Result<stream::Config, SimError> {
        Ok(crate::model::stream::Stream::new(config)?.config)
    }

    fn stream_info(&self, name: &str) -> Result<Value, ApiError> {
        let config = self.stream_config(name)?;
        let state = self.stream_state(name)?;
        let messages = self.stream_messages(name)?;
        let bytes: usize = messages
            .iter()
            .map(|m| {
                m.payload.len()
                    + m.subject.as_str().len()
                    + m.unreadable_headers.as_ref().map_or_else(
                        || {
                            m.headers
                                .as_ref()
                                .map_or(0, crate::model::wire::headers_len)
                        },
                        bytes::Bytes::len,
                    )
            })
            .sum();
        let ts = |m: Option<&crate::model::stream::StoredMessage>| {
            m.map_or_else(|| ZERO_TIME.to_owned(), |m| wall_time(self, m.stored_at))
        };
        Ok(json!({
            "config": serde_json::to_value(&config).map_err(ApiError::bad_request)?,
            "created": wall_time(self, self.start),
            "state": {
                "messages": state.messages,
                "bytes": bytes,
                "first_seq": state.first_sequence,
                "first_ts": ts(messages.first()),
                "last_seq": state.last_sequence,
                "last_ts": ts(messages.last()),
                "consumer_count": state.consumers.len(),
            },
            "ts": wall_time(self, self.now),
        }))
    }

    fn consumer_info(&self, stream: &str, name: &str) -> Result<Value, ApiError> {
        let state = self.consumer_state(stream, name)?;
        let config: consumer::Config = state.config.into_consumer_config();
        let sequences = |s: crate::model::consumer::Sequences| json!({"consumer_seq": s.consumer_sequence, "stream_seq": s.stream_sequence});
        let mut info = json!({
            "stream_name": stream,
            "name": name,
            "created": wall_time(self, self.start),
            "config": serde_json::to_value(&config).map_err(ApiError::bad_request)?,
            "delivered": sequences(state.delivered),
            "ack_floor": sequences(state.ack_floor),
            "num_ack_pending": state.num_ack_pending,
            "num_redelivered": state.num_redelivered,
            "num_waiting": state.num_waiting,
            "num_pending": state.num_pending,
            "ts": wall_time(self, self.now),
        });
        if state.paused {
            info["paused"] = Value::Bool(true);
        }
        if let Some(remaining) = state.pause_remaining {
            info["pause_remaining"] =
                json!(u64::try_from(remaining.as_nanos()).unwrap_or(u64::MAX));
        }
        if !state.priority_groups.is_empty() {
            let groups: Vec<Value> = state
                .priority_groups
                .iter()
                .map(|g| {
                    let mut group = json!({
                        "group": g.group,
                        "pinned_ts": g.pinned_at.map_or_else(|| ZERO_TIME.to_owned(), |at| wall_time(self, at)),
                    });
                    if let Some(id) = &g.pinned_client_id {
                        group["pinned_client_id"] = Value::String(id.clone());
                    }
                    group
                })
                .collect();
            info["priority_groups"] = Value::Array(groups);
        }
        Ok(info)
    }

    /// `CONSUMER.PAUSE`: `{"pause_until": <RFC 3339>}` pauses until then; no body, `null`,
    /// or a time passed resumes.
    fn pause_api(&mut self, stream: &str, name: &str, payload: &[u8]) -> Result<Value, ApiError> {
        let text = payload.trim_ascii();
        let until = if text.first().is_some_and(|b| *b == b'{' || *b == b'[') {
            let asked: Value = serde_json::from_slice(text)
                .map_err(|e| ApiError::new(400, ErrorCode(10025), format!("invalid JSON: {e}")))?;
            match asked.get("pause_until").and_then(Value::as_str) {
                Some(t) => Some(
                    time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                        .map_err(|e| {
                            ApiError::new(400, ErrorCode(10025), format!("invalid JSON: {e}"))
                        })?
                        .to_offset(time::UtcOffset::UTC),
                ),
                None => None,
            }
        } else {
            None
        };
        // Go's zero time is no pause.
        let until = until.filter(|t| t.year() > 1);
        self.pause_consumer_until(stream, name, until)?;
        let resume_at = until.map(|t| self.instant_of(t));
        let mut body = json!({
            "paused": false,
            "pause_until": until.map_or_else(|| ZERO_TIME.to_owned(), rfc3339),
        });
        if let Some(at) = resume_at.filter(|at| *at > self.now) {
            body["paused"] = Value::Bool(true);
            body["pause_remaining"] =
                json!(u64::try_from((at - self.now).as_nanos()).unwrap_or(u64::MAX));
        }
        Ok(body)
    }

    fn account_info(&self) -> Value {
        let consumers: usize = self.streams.values().map(|e| e.consumers.len()).sum();
        json!({
            "memory": 0,
            "storage": 0,
            "reserved_memory": 0,
            "reserved_storage": 0,
            "streams": self.streams.len(),
            "consumers": consumers,
            "limits": {
                "max_memory": -1,
                "max_storage": -1,
                "max_streams": -1,
                "max_consumers": -1,
                "max_ack_pending": -1,
                "memory_max_stream_bytes": -1,
                "storage_max_stream_bytes": -1,
                "max_bytes_required": false,
            },
            "api": {"total": 0, "errors": 0},
        })
    }

    /// The streams, in name order; with `filter`, those storing a subject it matches.
    fn stream_names(&self, filter: Option<&str>) -> Vec<String> {
        let filter = filter.and_then(|f| ruststream_settlement::Wildcard::new(f).ok());
        self.streams
            .iter()
            .filter(|(_, e)| {
                filter
                    .as_ref()
                    .is_none_or(|f| e.stream.subjects().iter().any(|s| s.overlaps(f)))
            })
            .map(|(name, _)| name.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A hand-written request that leaves out what nats-server defaults is taken, the
    /// defaults filled in; an error names the API and what is wrong.
    #[test]
    fn minimal_requests_take_the_servers_defaults() {
        let mut server = Server::new(std::time::Instant::now());
        let created = server
            .answer_api(
                "STREAM.CREATE.MIN",
                br#"{"name":"MIN","subjects":["min.>"]}"#,
            )
            .unwrap();
        assert!(created.get("error").is_none(), "{created}");
        assert_eq!(
            created["type"],
            "io.nats.jetstream.api.v1.stream_create_response"
        );
        let consumer = server
            .answer_api(
                "CONSUMER.CREATE.MIN.w",
                br#"{"stream_name":"MIN","config":{"durable_name":"w","ack_policy":"explicit"}}"#,
            )
            .unwrap();
        assert!(consumer.get("error").is_none(), "{consumer}");
        assert_eq!(consumer["config"]["ack_wait"], 30_000_000_000u64);
        let listed = server.answer_api("CONSUMER.LIST.MIN", b"").unwrap();
        assert_eq!(listed["consumers"][0]["name"], "w", "{listed}");
        let refused = server.answer_api("STREAM.PURGE.MIN", b"").unwrap();
        assert_eq!(refused["error"]["code"], 400);
        assert!(
            refused["error"]["description"]
                .as_str()
                .unwrap()
                .contains("$JS.API.STREAM.PURGE.MIN is not modelled"),
            "{refused}"
        );
    }

    /// The sans-io side of pauses and pins: a paused consumer delivers at its end; a pinned
    /// client's deliveries carry `Nats-Pin-Id`, a request without a body waits on standby,
    /// and the pin moves on after `priority_timeout`.
    #[test]
    fn pauses_and_pins_on_the_model() {
        use async_nats::jetstream::consumer::{PriorityPolicy, pull};
        use std::time::{Duration, Instant};

        use crate::model::journal::Publish;

        let start = Instant::now();
        let mut server = Server::new(start);
        server
            .create_stream(stream::Config {
                name: "P".into(),
                subjects: vec!["p.>".into()],
                ..Default::default()
            })
            .unwrap();
        server
            .create_consumer(
                "P",
                pull::Config {
                    durable_name: Some("pin".into()),
                    filter_subject: "p.pin".into(),
                    priority_policy: PriorityPolicy::PinnedClient,
                    priority_groups: vec!["g".into()],
                    priority_timeout: Duration::from_secs(1),
                    ..Default::default()
                },
            )
            .unwrap();
        server
            .create_consumer(
                "P",
                pull::Config {
                    durable_name: Some("pz".into()),
                    filter_subject: "p.pz".into(),
                    ..Default::default()
                },
            )
            .unwrap();
        let app = server.connect();
        server.subscribe(app, "_INBOX.>", None).unwrap();
        let pull = |server: &mut Server, consumer: &str, inbox: &str, body: &str, at| {
            let subject = format!("$JS.API.CONSUMER.MSG.NEXT.P.{consumer}");
            server
                .publish(app, Publish::new(subject, body.to_owned()).reply(inbox), at)
                .unwrap();
        };
        let next = |server: &mut Server| {
            let d = server.poll_delivered()?;
            let pin = d
                .message
                .headers
                .as_ref()
                .and_then(|h| h.get("Nats-Pin-Id"))
                .map(|v| v.as_str().to_owned());
            Some((
                d.message.subject.to_string(),
                pin,
                d.message.status.map(u16::from),
            ))
        };

        // Paused for 2 s: the request waits, and is filled when the pause ends.
        let state = server
            .pause_consumer("P", "pz", Some(start + Duration::from_secs(2)))
            .unwrap();
        assert!(state.paused);
        assert_eq!(state.pause_remaining, Some(Duration::from_secs(2)));
        server
            .publish(app, Publish::new("p.pz", "x"), start)
            .unwrap();
        pull(&mut server, "pz", "_INBOX.pz", r#"{"batch":1}"#, start);
        assert_eq!(next(&mut server), None);
        let resume = server.poll_timeout().unwrap();
        assert_eq!(resume, start + Duration::from_secs(2));
        server.handle_timeout(resume);
        assert_eq!(next(&mut server), Some(("p.pz".into(), None, None)));

        // Pinned: the first request is pinned; one without a body waits on standby.
        let pin = "SIMPIN0000000000000001".to_owned();
        server
            .publish(app, Publish::new("p.pin", "1"), resume)
            .unwrap();
        // As async-nats writes it: the fields it leaves unset are `null`.
        let written =
            r#"{"batch":1,"max_bytes":0,"min_pending":null,"min_ack_pending":null,"group":"g"}"#;
        pull(&mut server, "pin", "_INBOX.a", written, resume);
        assert_eq!(
            next(&mut server),
            Some(("p.pin".into(), Some(pin.clone()), None))
        );
        pull(&mut server, "pin", "_INBOX.b", "", resume);
        pull(
            &mut server,
            "pin",
            "_INBOX.c",
            r#"{"group":"g","expires":60000000000}"#,
            resume,
        );
        server
            .publish(app, Publish::new("p.pin", "2"), resume)
            .unwrap();
        assert_eq!(next(&mut server), None);
        let state = server.consumer_state("P", "pin").unwrap();
        assert_eq!(state.priority_groups[0].pinned_client_id, Some(pin));
        // No request with the pin for 1 s: released. The request without a body, first in
        // line, is served without being pinned (an empty `Nats-Pin-Id`, as nats-server 2.15.1
        // sends it); the next message pins the one that names the group.
        let released = server.poll_timeout().unwrap();
        assert_eq!(released, resume + Duration::from_secs(1));
        server.handle_timeout(released);
        assert_eq!(
            next(&mut server),
            Some(("p.pin".into(), Some(String::new()), None))
        );
        server
            .publish(app, Publish::new("p.pin", "3"), released)
            .unwrap();
        let second = "SIMPIN0000000000000002".to_owned();
        assert_eq!(
            next(&mut server),
            Some(("p.pin".into(), Some(second), None))
        );
        assert_eq!(server.consumer_state("P", "pin").unwrap().num_waiting, 0);
        server.unpin_consumer("P", "pin", "g").unwrap();
        assert!(server.unpin_consumer("P", "pin", "h").is_err());
    }
}
