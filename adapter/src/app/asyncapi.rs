//! The app as an AsyncAPI 3.0 document: what it consumes and what it produces.
//!
//! - **servers**: one per server URL the app was given (without credentials); none for an app
//!   given its own client.
//! - **channels**: one per mount, addressed by its subject or wildcard, or, for a JetStream
//!   mount, by the subjects of its stream when the app declares the stream (`null`, the
//!   address unknown here, otherwise); one per dead-letter subject; one per subject a mount
//!   says its handlers publish to ([`Mount::publishes`](crate::Mount::publishes)). A channel
//!   carries the mount's facts under `x-ruststream` (kind, stream and consumer, attempts,
//!   dead-letter subject).
//! - **operations**: `receive` for each mount, `send` for each dead-letter subject and each
//!   subject a mount publishes to.
//! - **messages**: a mount's payload schema when it gives one
//!   ([`Mount::payload_schema`](crate::Mount::payload_schema), or `payload::<T>()` with the
//!   cargo feature `asyncapi`), as `application/json`; a dead letter carries its mount's
//!   payload (it is the delivery as it arrived).
//!
//! Channel and operation ids are the mount's name with a suffix (`orders`,
//! `orders.dead-letter`, `orders.publishes.0`); mount names are unique in an app and have no
//! whitespace (rule 22).

use serde_json::{Map, Value, json};

use super::App;
use crate::runtime::Runtime;
use crate::support::servers::ServerList;
use ruststream_core::{DeclarationError, Descriptor};

/// The AsyncAPI version of the document: 3.0.0.
pub const ASYNCAPI_VERSION: &str = "3.0.0";

impl<R: Runtime> App<R> {
    /// The app as an AsyncAPI 3.0 document (JSON), titled `title` at version `version` (the
    /// service's own; see the module docs of `app::asyncapi` in the repository for what goes
    /// where). It reads only what the app declares: nothing is asked of the servers, and it
    /// may be made before [`start`](Self::start).
    ///
    /// # Errors
    /// The first mount whose declaration [`start`](Self::start) would refuse.
    pub fn asyncapi(&self, title: &str, version: &str) -> Result<Value, DeclarationError> {
        let mut channels = Map::new();
        let mut operations = Map::new();
        let mut messages = Map::new();
        for (mount, _) in &self.mounts {
            let policy = mount.declaration.validate()?;
            let name = id(policy.name());
            let payload = mount.described.payload.clone();
            let message_id = format!("{name}.payload");
            messages.insert(
                message_id.clone(),
                message(
                    &message_id,
                    &format!("mount {name}: its deliveries"),
                    payload,
                ),
            );
            let message_ref = json!({ message_id.clone(): { "$ref": format!("#/components/messages/{message_id}") } });
            let (address, facts) = match policy.descriptor() {
                Descriptor::CoreSubject(subject) => {
                    (json!(subject.as_str()), json!({ "kind": "core-subject" }))
                }
                Descriptor::CoreWildcard {
                    wildcard,
                    copy_subject,
                } => (
                    json!(wildcard.as_str()),
                    json!({ "kind": "core-wildcard", "copySubject": copy_subject.as_str() }),
                ),
                Descriptor::JetStream { stream, consumer } => (
                    self.stream_address(stream),
                    json!({ "kind": "jetstream", "stream": stream, "consumer": consumer }),
                ),
            };
            let mut facts = facts;
            if let Some(max) = policy.max_attempts() {
                facts["maxAttempts"] = json!(max.get());
            }
            if let Some(dead_letter) = policy.dead_letter() {
                facts["deadLetterSubject"] = json!(dead_letter.as_str());
            }
            channels.insert(
                name.clone(),
                json!({
                    "address": address,
                    "title": format!("mount {name}"),
                    "messages": message_ref,
                    "x-ruststream": facts,
                }),
            );
            operations.insert(
                name.clone(),
                json!({
                    "action": "receive",
                    "title": format!("{name} handles its deliveries"),
                    "channel": { "$ref": format!("#/channels/{name}") },
                    "messages": [{ "$ref": format!("#/channels/{name}/messages/{message_id}") }],
                }),
            );
            if let Some(dead_letter) = policy.dead_letter() {
                let id = format!("{name}.dead-letter");
                channels.insert(
                    id.clone(),
                    json!({
                        "address": dead_letter.as_str(),
                        "title": format!("dead letters of mount {name}"),
                        "description": "Deliveries at their attempt limit, or rejected, as they arrived (with provenance headers when the mount asks for them).",
                        "messages": message_ref,
                    }),
                );
                operations.insert(
                    id.clone(),
                    json!({
                        "action": "send",
                        "title": format!("{name} dead-letters what it cannot handle"),
                        "channel": { "$ref": format!("#/channels/{id}") },
                        "messages": [{ "$ref": format!("#/channels/{id}/messages/{message_id}") }],
                    }),
                );
            }
            for (i, (subject, schema)) in mount.described.publishes.iter().enumerate() {
                let id = format!("{name}.publishes.{i}");
                let published_id = format!("{id}.payload");
                messages.insert(
                    published_id.clone(),
                    message(
                        &published_id,
                        &format!("mount {name}: what it publishes to {subject}"),
                        schema.clone(),
                    ),
                );
                channels.insert(
                    id.clone(),
                    json!({
                        "address": subject,
                        "title": format!("published by mount {name}"),
                        "messages": { published_id.clone(): { "$ref": format!("#/components/messages/{published_id}") } },
                    }),
                );
                operations.insert(
                    id.clone(),
                    json!({
                        "action": "send",
                        "title": format!("{name} publishes to {subject}"),
                        "channel": { "$ref": format!("#/channels/{id}") },
                        "messages": [{ "$ref": format!("#/channels/{id}/messages/{published_id}") }],
                    }),
                );
            }
        }
        let mut document = json!({
            "asyncapi": ASYNCAPI_VERSION,
            "info": {
                "title": title,
                "version": version,
                "description": "Generated by ruststream from the app's mounts.",
            },
            "defaultContentType": "application/json",
            "channels": channels,
            "operations": operations,
            "components": { "messages": messages },
        });
        let servers = self.servers();
        if !servers.is_empty() {
            document["servers"] = Value::Object(servers);
        }
        Ok(document)
    }

    /// The servers of the app's URLs, without credentials.
    fn servers(&self) -> Map<String, Value> {
        let mut servers = Map::new();
        let super::startup::Connect::Url { url, .. } = &self.connect else {
            return servers;
        };
        let Ok(list) = ServerList::parse(url) else {
            return servers;
        };
        for (i, server) in list.addresses.iter().enumerate() {
            let protocol = match server.scheme() {
                "tls" => "nats",
                "ws" => "ws",
                "wss" => "wss",
                _ => "nats",
            };
            let mut entry = json!({
                "host": format!("{}:{}", server.host(), server.port()),
                "protocol": protocol,
            });
            if server.tls_required() || server.scheme() == "tls" {
                entry["description"] = json!("TLS required");
            }
            servers.insert(format!("nats-{i}"), entry);
        }
        servers
    }

    /// A JetStream mount's address: its stream's subjects when the app declares the stream
    /// and it has exactly one; `null` otherwise (AsyncAPI's "not known").
    fn stream_address(&self, stream: &str) -> Value {
        match self.streams.iter().find(|c| c.name == stream) {
            Some(config) if config.subjects.len() == 1 => json!(config.subjects[0]),
            _ => Value::Null,
        }
    }
}

/// The message `name`, titled `title`, its payload's schema if known.
fn message(name: &str, title: &str, payload: Option<Value>) -> Value {
    let mut m = json!({
        "name": name,
        "title": title,
        "contentType": "application/json",
    });
    if let Some(schema) = payload {
        m["payload"] = schema;
    }
    m
}

/// `name` as an AsyncAPI id (`[A-Za-z0-9._-]+`): any other character becomes `_`.
fn id(name: &str) -> String {
    name.chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                true => c,
                false => '_',
            },
        )
        .collect()
}
