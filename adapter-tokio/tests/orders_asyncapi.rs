//! The orders service's AsyncAPI document (`App::asyncapi`): valid against the official
//! AsyncAPI 3.0 JSON Schema (vendored in `docs/asyncapi/`, its source named there), with every
//! mount, its dead-letter subject and what it publishes, and the payloads' schemas.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ruststream_tokio::{App, Delivery, Mount, Outcome};
use serde_json::Value;
use std::time::Duration;

#[path = "../examples/orders.rs"]
#[allow(dead_code, unreachable_pub)]
mod orders;

fn asyncapi_schema() -> Value {
    let text = include_str!("../../docs/asyncapi/asyncapi-3.0.0.schema.json");
    serde_json::from_str(text).expect("the vendored schema is JSON")
}

/// The errors `document` has against the AsyncAPI 3.0 schema, one line each, and every local
/// `$ref` that does not resolve within the document (which the schema does not check: an
/// AsyncAPI parser does).
fn errors(document: &Value) -> Vec<String> {
    let validator = jsonschema::draft7::new(&asyncapi_schema()).expect("the schema compiles");
    let mut errors: Vec<String> = validator
        .iter_errors(document)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    let mut refs = Vec::new();
    collect_refs(document, &mut refs);
    for r in refs {
        let resolves = match r.strip_prefix('#') {
            Some("") => false, // the whole document: never a schema
            Some(pointer) => document.pointer(pointer).is_some(),
            None => true, // not local
        };
        if !resolves {
            errors.push(format!("$ref {r} does not resolve in the document"));
        }
    }
    errors
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(o) => {
            for (k, v) in o {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r.clone()),
                    _ => collect_refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

#[test]
fn the_orders_services_document_is_valid_asyncapi_3_with_every_mount() {
    let app = orders::orders_service(App::new(
        "nats://user:secret@127.0.0.1:4222,tls://nats.internal:4443",
    ));
    let doc = app.asyncapi("orders", "1.0.0").expect("a document");
    let errors = errors(&doc);
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
    assert_eq!(doc["asyncapi"], "3.0.0");

    // Every mount, as a channel and a receive operation.
    for mount in app.mounts() {
        let name = mount.name();
        assert!(
            doc["channels"][name].is_object(),
            "{name} has no channel:\n{doc:#}"
        );
        assert_eq!(doc["operations"][name]["action"], "receive", "{name}");
    }
    let orders = &doc["channels"]["orders"];
    assert_eq!(
        orders["address"], "orders.new",
        "the declared stream's subject"
    );
    assert_eq!(orders["x-ruststream"]["stream"], "ORDERS");
    assert_eq!(orders["x-ruststream"]["consumer"], "worker");
    assert_eq!(orders["x-ruststream"]["maxAttempts"], 4);
    assert_eq!(doc["channels"]["orders-count"]["address"], "orders.count");
    // The dead-letter subject and what the handler publishes: send operations.
    assert_eq!(
        doc["channels"]["orders.dead-letter"]["address"],
        "dlq.orders"
    );
    assert_eq!(doc["operations"]["orders.dead-letter"]["action"], "send");
    assert_eq!(
        doc["channels"]["orders.publishes.0"]["address"],
        "order.accepted"
    );
    assert_eq!(doc["operations"]["orders.publishes.0"]["action"], "send");
    // The payloads' schemas, from the types (schemars).
    let payload = &doc["components"]["messages"]["orders.payload"]["payload"];
    assert_eq!(payload["$ref"], "#/components/schemas/Order");
    let payload = &doc["components"]["schemas"]["Order"];
    assert_eq!(payload["type"], "object");
    for field in ["id", "sku", "quantity"] {
        assert!(
            payload["properties"][field].is_object(),
            "{field}: {payload:#}"
        );
    }
    let event = &doc["components"]["schemas"]["Accepted"];
    assert!(event["properties"]["sku"].is_object(), "{event:#}");
    // Servers, without credentials.
    assert_eq!(doc["servers"]["nats-0"]["host"], "127.0.0.1:4222");
    assert_eq!(doc["servers"]["nats-1"]["host"], "nats.internal:4443");
    assert!(
        !doc.to_string().contains("secret"),
        "a credential in the document"
    );
}

#[test]
fn a_document_that_breaks_the_schema_is_caught() {
    // The check itself can fail: a document without `info` is refused.
    let app = orders::orders_service(App::new("nats://127.0.0.1:4222"));
    let mut doc = app.asyncapi("orders", "1.0.0").expect("a document");
    doc.as_object_mut().unwrap().remove("info");
    assert!(!errors(&doc).is_empty());
    let mut doc = app.asyncapi("orders", "1.0.0").expect("a document");
    doc["operations"]["orders"]["action"] = "listen".into();
    assert!(!errors(&doc).is_empty());
}

#[test]
fn a_mount_without_schemas_and_a_wildcard_are_described_too() {
    let app = App::new("nats://127.0.0.1:4222")
        .mount(
            Mount::core_wildcard("greet", "greet.*", "greet.retry"),
            |_d: Delivery| async { Outcome::Ack },
        )
        .mount(
            Mount::jetstream("audit", "AUDIT", "auditor"),
            |_d: Delivery| async { Outcome::Ack },
        );
    let doc = app.asyncapi("greeter", "0.1.0").expect("a document");
    let errors = errors(&doc);
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
    assert_eq!(doc["channels"]["greet"]["address"], "greet.*");
    assert_eq!(
        doc["channels"]["greet"]["x-ruststream"]["copySubject"],
        "greet.retry"
    );
    assert_eq!(
        doc["channels"]["audit"]["address"],
        Value::Null,
        "stream not declared here"
    );
    // A declaration start-up would refuse is refused here too.
    let bad = App::new("nats://127.0.0.1:4222").mount(
        Mount::core_subject("bad", "orders.*"),
        |_d: Delivery| async { Outcome::Ack },
    );
    assert!(bad.asyncapi("bad", "0").is_err());
}

/// A codec of the test's own, for a typed mount: what its content type is has to reach the
/// document.
struct Yaml;

impl ruststream_tokio::Codec for Yaml {
    fn name(&self) -> &'static str {
        "YAML"
    }

    fn content_type(&self) -> &'static str {
        "application/yaml"
    }

    fn decode<T: serde::de::DeserializeOwned>(
        &self,
        _payload: &[u8],
    ) -> Result<T, ruststream_tokio::DecodeError> {
        Err(ruststream_tokio::DecodeError::new(self.name(), "not here"))
    }

    fn encode<T: serde::Serialize + ?Sized>(
        &self,
        _value: &T,
    ) -> Result<Vec<u8>, ruststream_tokio::EncodeError> {
        Err(ruststream_tokio::EncodeError::new(self.name(), "not here"))
    }
}

#[test]
fn a_typed_mounts_messages_have_its_codecs_content_type() {
    #[derive(serde::Deserialize)]
    struct Order {}
    let app = App::new("nats://127.0.0.1:4222")
        .mount_typed(
            Mount::core_subject("yaml", "orders.yaml")
                .max_attempts(2)
                .dead_letter("dlq.yaml"),
            Yaml,
            |_o: Order, _d: Delivery| async { Outcome::Ack },
        )
        .mount_typed_batch(
            Mount::core_subject("yaml-batch", "orders.yaml-batch").batch(10, Duration::ZERO),
            Yaml,
            |_b: ruststream_tokio::Batch<Order>| async { Outcome::Ack },
        )
        .mount_json(
            Mount::core_subject("json", "orders.json").publishes("orders.out", None),
            |_o: Order, _d: Delivery| async { Outcome::Ack },
        )
        .mount(
            Mount::core_subject("raw", "orders.raw"),
            |_d: Delivery| async { Outcome::Ack },
        );
    let doc = app.asyncapi("codecs", "0.1.0").expect("a document");
    let errors = errors(&doc);
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
    let content_type =
        |message: &str| doc["components"]["messages"][message]["contentType"].clone();
    assert_eq!(content_type("yaml.payload"), "application/yaml");
    assert_eq!(
        doc["channels"]["yaml.dead-letter"]["messages"]["yaml.payload"]["$ref"],
        "#/components/messages/yaml.payload",
        "a dead letter is the delivery as it arrived: of its codec"
    );
    assert_eq!(content_type("yaml-batch.payload"), "application/yaml");
    assert_eq!(content_type("json.payload"), "application/json");
    assert_eq!(content_type("json.publishes.0.payload"), "application/json");
    assert_eq!(content_type("raw.payload"), "application/json");
    assert_eq!(doc["defaultContentType"], "application/json");
}

mod nested {
    //! Payload types whose schemas define others: nested structs, an enum, an `Option`, a
    //! recursive type, and a name two types share.
    #![allow(dead_code, unreachable_pub)]

    use schemars::JsonSchema;

    #[derive(JsonSchema)]
    pub struct Line {
        pub sku: String,
        pub quantity: u32,
    }

    #[derive(JsonSchema)]
    pub enum Status {
        Open,
        Held { reason: String },
    }

    #[derive(JsonSchema)]
    pub struct Order {
        pub lines: Vec<Line>,
        pub status: Status,
        pub note: Option<Line>,
    }

    /// Recursive: its children are categories too.
    #[derive(JsonSchema)]
    pub struct Category {
        pub name: String,
        pub children: Vec<Category>,
    }

    pub mod other {
        /// Another type named `Line`, of another shape.
        #[derive(schemars::JsonSchema)]
        pub struct Line {
            pub text: String,
        }

        #[derive(schemars::JsonSchema)]
        pub struct Note {
            pub line: Line,
        }
    }
}

#[test]
fn nested_recursive_and_same_named_types_are_components_every_reference_resolves() {
    let app = App::new("nats://[::1]:4222")
        .mount(
            Mount::jetstream("orders", "ORDERS", "worker")
                .payload::<nested::Order>()
                .publishes_json::<nested::other::Note>("notes.new"),
            |_d: Delivery| async { Outcome::Ack },
        )
        .mount(
            Mount::core_subject("categories", "categories.new").payload::<nested::Category>(),
            |_d: Delivery| async { Outcome::Ack },
        );
    let doc = app.asyncapi("nested", "1").expect("a document");
    let errors = errors(&doc);
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
    let schemas = &doc["components"]["schemas"];
    for name in ["Order", "Line", "Status", "Category", "Note", "Line-2"] {
        assert!(schemas[name].is_object(), "{name} missing: {schemas:#}");
    }
    assert_eq!(
        doc["components"]["messages"]["orders.payload"]["payload"]["$ref"],
        "#/components/schemas/Order"
    );
    // The recursive type's children point at it, not at the document.
    let children = &schemas["Category"]["properties"]["children"]["items"]["$ref"];
    assert_eq!(children, "#/components/schemas/Category", "{schemas:#}");
    assert_eq!(doc["servers"]["nats-0"]["host"], "[::1]:4222");
}

#[test]
fn mounts_whose_names_read_alike_as_ids_keep_a_channel_each() {
    let ack = |_d: Delivery| async { Outcome::Ack };
    let app = App::new("nats://127.0.0.1:4222")
        .mount(Mount::core_subject("a/b", "one"), ack)
        .mount(Mount::core_subject("a:b", "two"), ack)
        .mount(
            Mount::core_subject("x", "three")
                .max_attempts(1)
                .dead_letter("dlq.x"),
            ack,
        )
        .mount(Mount::core_subject("x.dead-letter", "four"), ack)
        .mount(
            Mount::jetstream("filtered", "MANY", "c").filter_subject("many.eu"),
            ack,
        );
    let doc = app.asyncapi("alike", "1").expect("a document");
    let errors = errors(&doc);
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
    let addresses: Vec<&str> = doc["channels"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|c| c["address"].as_str())
        .collect();
    for address in ["one", "two", "three", "dlq.x", "four", "many.eu"] {
        assert!(addresses.contains(&address), "{address} lost: {doc:#}");
    }
    assert_eq!(doc["operations"].as_object().unwrap().len(), 6);
    // What start refuses, this refuses too.
    let twice = App::new("nats://127.0.0.1:4222")
        .mount(Mount::core_subject("same", "one"), ack)
        .mount(Mount::core_subject("same", "two"), ack);
    assert!(twice.asyncapi("t", "1").is_err());
    let bad = App::new("nats://127.0.0.1:4222").mount(
        Mount::core_subject("p", "one").publishes("has space", None),
        ack,
    );
    assert!(bad.asyncapi("t", "1").is_err());
    let not_schema = App::new("nats://127.0.0.1:4222").mount(
        Mount::core_subject("p", "one").payload_schema(serde_json::json!("a string")),
        ack,
    );
    assert!(not_schema.asyncapi("t", "1").is_err());
}
