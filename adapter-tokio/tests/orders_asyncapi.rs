//! The orders service's AsyncAPI document (`App::asyncapi`): valid against the official
//! AsyncAPI 3.0 JSON Schema (vendored in `docs/asyncapi/`, its source named there), with every
//! mount, its dead-letter subject and what it publishes, and the payloads' schemas.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ruststream_tokio::{App, Delivery, Mount, Outcome};
use serde_json::Value;

#[path = "../examples/orders.rs"]
#[allow(dead_code, unreachable_pub)]
mod orders;

fn asyncapi_schema() -> Value {
    let text = include_str!("../../docs/asyncapi/asyncapi-3.0.0.schema.json");
    serde_json::from_str(text).expect("the vendored schema is JSON")
}

/// The errors `document` has against the AsyncAPI 3.0 schema, one line each.
fn errors(document: &Value) -> Vec<String> {
    let validator = jsonschema::draft7::new(&asyncapi_schema()).expect("the schema compiles");
    validator
        .iter_errors(document)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect()
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
    assert_eq!(payload["type"], "object");
    for field in ["id", "sku", "quantity"] {
        assert!(
            payload["properties"][field].is_object(),
            "{field}: {payload:#}"
        );
    }
    let event = &doc["components"]["messages"]["orders.publishes.0.payload"]["payload"];
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
