//! The app as an AsyncAPI 3.0 document: what it consumes and what it produces.
//!
//! - **servers**: one per server URL the app was given (without credentials); none for an app
//!   given its own client.
//! - **channels**: one per mount, addressed by its subject or wildcard, or, for a JetStream
//!   mount, by its `filter_subject`, else the subject of its stream when the app declares the
//!   stream with one (`null`, the address unknown here, otherwise); one per dead-letter subject; one per subject a mount
//!   says its handlers publish to ([`Mount::publishes`](crate::Mount::publishes)). A channel
//!   carries the mount's facts under `x-ruststream` (kind, stream and consumer, attempts,
//!   dead-letter subject).
//! - **operations**: `receive` for each mount, `send` for each dead-letter subject and each
//!   subject a mount publishes to.
//! - **messages**: a mount's payload schema when it gives one
//!   ([`Mount::payload_schema`](crate::Mount::payload_schema), or `payload::<T>()` with the
//!   cargo feature `asyncapi`), with its content type: a typed mount's codec's
//!   ([`Codec::content_type`](crate::Codec::content_type), given to
//!   [`App::mount_typed`](crate::App::mount_typed)), `application/json` for any other mount and
//!   for what a mount publishes; a dead letter carries its mount's payload (it is the delivery
//!   as it arrived).
//!
//! - **components.schemas**: each payload type's schema (titled) and the schemas it defines
//!   (nested types), every local `$ref` rewritten to point there; two different schemas of
//!   one name get a `-2` suffix.
//!
//! Channel and operation ids are the mount's name with a suffix (`orders`,
//! `orders.dead-letter`, `orders.publishes.0`), any character outside `[A-Za-z0-9._-]` as
//! `_`, made unique with a `-2`, `-3`… suffix when two would read alike.

use serde_json::{Map, Value, json};

use std::collections::BTreeSet;

use super::App;
use super::startup::StartError;
use crate::runtime::Runtime;
use crate::support::servers::ServerList;
use ruststream_settlement::{Descriptor, Subject};

/// The AsyncAPI version of the document: 3.0.0.
pub const ASYNCAPI_VERSION: &str = "3.0.0";

impl<R: Runtime> App<R> {
    /// The app as an AsyncAPI 3.0 document (JSON), titled `title` at version `version` (the
    /// service's own; see the module docs of `app::asyncapi` in the repository for what goes
    /// where). It reads only what the app declares: nothing is asked of the servers, and it
    /// may be made before [`start`](Self::start).
    ///
    /// # Errors
    /// What [`start`](Self::start) would refuse of the mounts: a declaration that breaks a rule
    /// ([`StartError::Declaration`]), two mounts of one name ([`StartError::DuplicateMount`]);
    /// and [`StartError::Setting`] for a subject given to [`Mount::publishes`](crate::Mount::publishes)
    /// that is not a literal subject, or a payload schema that is neither a JSON object nor a
    /// boolean.
    pub fn asyncapi(&self, title: &str, version: &str) -> Result<Value, StartError> {
        let mut channels = Map::new();
        let mut operations = Map::new();
        let mut messages = Map::new();
        let mut schemas = Map::new();
        let mut names = BTreeSet::new();
        let mut ids = Ids::default();
        for (mount, _) in &self.mounts {
            let policy = mount.declaration.validate()?;
            if !names.insert(policy.name().to_owned()) {
                return Err(StartError::DuplicateMount(policy.name().to_owned()));
            }
            let name = ids.unique(&id(policy.name()));
            let setting = |reason: String| StartError::Setting {
                mount: policy.name().to_owned(),
                reason,
            };
            let payload = match mount.described.payload.clone() {
                Some(schema) => Some(
                    components(schema, &mut schemas)
                        .map_err(|e| setting(format!("its payload schema {e}")))?,
                ),
                None => None,
            };
            let message_id = ids.unique(&format!("{name}.payload"));
            messages.insert(
                message_id.clone(),
                message(
                    &message_id,
                    &format!("mount {name}: its deliveries"),
                    mount.described.content_type.unwrap_or(JSON),
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
                    match &mount.filter_subject {
                        Some(filter) => json!(filter),
                        None => self.stream_address(stream),
                    },
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
                let id = ids.unique(&format!("{name}.dead-letter"));
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
                if let Err(e) = Subject::new(subject) {
                    return Err(setting(format!("it publishes to `{subject}`: {e}")));
                }
                let schema = match schema.clone() {
                    Some(schema) => Some(components(schema, &mut schemas).map_err(|e| {
                        setting(format!(
                            "the schema of what it publishes to `{subject}` {e}"
                        ))
                    })?),
                    None => None,
                };
                let id = ids.unique(&format!("{name}.publishes.{i}"));
                let published_id = ids.unique(&format!("{id}.payload"));
                messages.insert(
                    published_id.clone(),
                    message(
                        &published_id,
                        &format!("mount {name}: what it publishes to {subject}"),
                        JSON,
                        schema,
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
            "defaultContentType": JSON,
            "channels": channels,
            "operations": operations,
            "components": { "messages": messages, "schemas": schemas },
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
            let host = match server.host().contains(':') {
                // An IPv6 address, bracketed as in a URL.
                true => format!("[{}]:{}", server.host(), server.port()),
                false => format!("{}:{}", server.host(), server.port()),
            };
            let mut entry = json!({
                "host": host,
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

/// The content type of a mount's payloads when nothing says otherwise, and the document's
/// default.
const JSON: &str = "application/json";

/// The message `name`, titled `title`, of `content_type`, its payload's schema if known.
fn message(name: &str, title: &str, content_type: &str, payload: Option<Value>) -> Value {
    let mut m = json!({
        "name": name,
        "title": title,
        "contentType": content_type,
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

/// The ids given so far: each new one made unique with a `-2`, `-3`… suffix, so that mounts
/// whose names read alike as ids (`a/b` and `a:b`), or a mount named like another's channel
/// (`x.dead-letter`), each keep their own.
#[derive(Default)]
struct Ids(BTreeSet<String>);

impl Ids {
    fn unique(&mut self, wanted: &str) -> String {
        let mut candidate = wanted.to_owned();
        let mut n = 2;
        while !self.0.insert(candidate.clone()) {
            candidate = format!("{wanted}-{n}");
            n += 1;
        }
        candidate
    }
}

/// Moves what a payload schema defines (`definitions`, schemars' draft-07 output, or
/// `$defs`) into the document's `components.schemas`, and the schema itself there too when it
/// has a `title`, with every local reference rewritten to point there: in an AsyncAPI
/// document, `#/definitions/X` and `#` would point into the document, not the schema.
/// Returns what the message's `payload` holds: the schema, or a reference to it. A definition
/// whose name is taken by a different schema gets a `-2`, `-3`… suffix.
///
/// # Errors
/// A schema that is neither a JSON object nor a boolean (said as "is not a JSON Schema…").
fn components(mut schema: Value, schemas: &mut Map<String, Value>) -> Result<Value, String> {
    let object = match &mut schema {
        Value::Bool(_) => return Ok(schema),
        Value::Object(object) => object,
        _ => return Err("is not a JSON Schema (an object or a boolean)".to_owned()),
    };
    let mut defined = Map::new();
    for key in ["definitions", "$defs"] {
        if let Some(Value::Object(defs)) = object.remove(key) {
            for (name, def) in defs {
                defined.insert(format!("#/{key}/{name}"), json!([name, def]));
            }
        }
    }
    // Where each local reference goes: a name of its own in `components.schemas`.
    let mut renamed: Vec<(String, String)> = Vec::new();
    let mut placed: Vec<(String, Value)> = Vec::new();
    for (pointer, pair) in defined {
        let (Some(name), Some(def)) = (pair[0].as_str(), pair.get(1)) else {
            continue;
        };
        let name = free_name(schemas, &placed, name, def);
        renamed.push((pointer, format!("#/components/schemas/{name}")));
        placed.push((name, def.clone()));
    }
    let title = object.get("title").and_then(Value::as_str).map(id);
    let root = title.map(|t| {
        let name = free_name(schemas, &placed, &t, &schema);
        (name.clone(), format!("#/components/schemas/{name}"))
    });
    let root_ref = root.as_ref().map(|(_, r)| r.clone());
    let rewrite = |v: &mut Value| rewrite_refs(v, &renamed, root_ref.as_deref());
    let mut schema = schema;
    rewrite(&mut schema);
    for (name, mut def) in placed {
        rewrite(&mut def);
        schemas.insert(name, def);
    }
    match root {
        Some((name, reference)) => {
            schemas.insert(name, schema);
            Ok(json!({ "$ref": reference }))
        }
        None => Ok(schema),
    }
}

/// A name for `def` in `components.schemas`: `wanted` (as an id) if free or holding the same
/// schema, else `wanted-2`, `wanted-3`…
fn free_name(
    schemas: &Map<String, Value>,
    placed: &[(String, Value)],
    wanted: &str,
    def: &Value,
) -> String {
    let wanted = id(wanted);
    let mut candidate = wanted.clone();
    let mut n = 2;
    loop {
        let taken = schemas
            .get(&candidate)
            .or_else(|| placed.iter().find(|(n, _)| *n == candidate).map(|(_, v)| v));
        match taken {
            None => return candidate,
            Some(existing) if existing == def => return candidate,
            Some(_) => {
                candidate = format!("{wanted}-{n}");
                n += 1;
            }
        }
    }
}

/// Rewrites every `$ref` in `value`: those in `renamed` to their new place, `#` (the schema's
/// own root) to `root` when it has one.
fn rewrite_refs(value: &mut Value, renamed: &[(String, String)], root: Option<&str>) {
    match value {
        Value::Object(object) => {
            for (key, v) in object.iter_mut() {
                if key == "$ref"
                    && let Value::String(r) = v
                {
                    if let Some((_, new)) = renamed.iter().find(|(old, _)| old == r) {
                        *r = new.clone();
                    } else if r == "#"
                        && let Some(root) = root
                    {
                        *r = root.to_owned();
                    }
                } else {
                    rewrite_refs(v, renamed, root);
                }
            }
        }
        Value::Array(items) => {
            for v in items {
                rewrite_refs(v, renamed, root);
            }
        }
        _ => {}
    }
}
