//! Streams declared where the mounts are (issue 14, item 7): created when missing, checked
//! when present, never changed, and refused by name when they do not fit.

use super::common::*;
use adapter::async_nats::jetstream::stream::{Config, RetentionPolicy};

fn stream(name: &str, subjects: &[&str]) -> Config {
    Config {
        name: name.to_owned(),
        subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    }
}

async fn config_of(tc: &TestClient, name: &str) -> Config {
    tc.js
        .get_stream(name)
        .await
        .expect("the stream")
        .info()
        .await
        .expect("its info")
        .config
        .clone()
}

/// Missing streams are created before the mounts are checked: the JetStream mount binds to
/// the one, and dead-letters into the other.
#[test]
fn declared_streams_are_created_when_missing() {
    run(async {
        let server = NatsServer::start();
        let tc = TestClient::connect(&server).await;
        let (r, ev) = (runs(), events());
        let app = start(&server, &ev, |a| {
            a.stream(stream("ORDERS", &["orders.>"]))
                .stream(stream("DLQ", &["dlq.>"]))
                .mount(
                    js_mount("js-declared")
                        .max_attempts(1)
                        .dead_letter("dlq.orders"),
                    scripted(&r, |_, _| Outcome::Reject),
                )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"{\"id\":1}")
            .await;
        assert_dead_letters(&tc, "DLQ", &[("dlq.orders", b"{\"id\":1}")]).await;
        assert_eq!(config_of(&tc, "ORDERS").await.subjects, ["orders.>"]);
        logged(&["INFO", "stream=\"ORDERS\"", "declared stream created"]).await;
        app.shutdown().await;
    });
}

/// A stream that is there and stores the declared subjects (here through a wildcard of its
/// own) is used as it is: its settings are not touched.
#[test]
fn a_declared_stream_that_fits_is_never_changed() {
    run(async {
        let server = NatsServer::start();
        let tc = TestClient::connect(&server).await;
        tc.js
            .create_stream(Config {
                max_messages: 10,
                ..stream("ORDERS", &["orders.>"])
            })
            .await
            .expect("stream");
        let ev = events();
        let app = start(&server, &ev, |a| {
            a.stream(stream("ORDERS", &["orders.new"]))
                .mount(js_mount("js-fits"), |_d: Delivery| async { Outcome::Ack })
        })
        .await;
        let config = config_of(&tc, "ORDERS").await;
        assert_eq!(config.subjects, ["orders.>"]);
        assert_eq!(config.max_messages, 10);
        app.shutdown().await;
    });
}

/// A stream that is there and does not fit (a subject it does not store, another retention),
/// and one that cannot be created (its subjects overlap another stream's), stop start-up
/// with an error naming the stream; nothing is changed.
#[test]
fn a_declared_stream_that_does_not_fit_is_refused_naming_it() {
    run(async {
        let server = NatsServer::start();
        let tc = TestClient::connect(&server).await;
        tc.stream("ORDERS", &["orders.new"]).await;
        let err = start_err(&server, |a| a.stream(stream("ORDERS", &["orders.>"]))).await;
        let text = err.to_string();
        assert!(
            matches!(&err, StartError::Stream { stream, .. } if stream == "ORDERS"),
            "{err}"
        );
        assert!(text.contains("does not store `orders.>`"), "{text}");

        let err = start_err(&server, |a| {
            a.stream(Config {
                retention: RetentionPolicy::WorkQueue,
                ..stream("ORDERS", &["orders.new"])
            })
        })
        .await;
        assert!(err.to_string().contains("retention Limits"), "{err}");

        let err = start_err(&server, |a| a.stream(stream("SHADOW", &["orders.*"]))).await;
        let text = err.to_string();
        assert!(
            matches!(&err, StartError::Stream { stream, .. } if stream == "SHADOW"),
            "{err}"
        );
        assert!(text.contains("cannot create it"), "{text}");
        assert_eq!(config_of(&tc, "ORDERS").await.subjects, ["orders.new"]);

        let err = start_err(&server, |a| {
            a.stream(stream("TWICE", &["t.a"]))
                .stream(stream("TWICE", &["t.b"]))
        })
        .await;
        assert!(err.to_string().contains("declared twice"), "{err}");
    });
}
