//! Servers as users run them: credentials and URLs, restarts, and what differs between nats-server 2.9 and 2.15.

use super::common::*;

#[test]
fn credentials_never_appear_in_errors_or_logs() {
    run(async {
        capture_logs();
        // Nothing listens on port 1: the connection fails, and says why without the secret.
        let options = adapter::async_nats::ConnectOptions::with_user_and_password(
            "alice".into(),
            "s3cret-pw-1".into(),
        );
        let e = App::with_options("nats://127.0.0.1:1", options)
            .mount(Mount::core_subject("creds", "a"), |_: Delivery| async {
                Outcome::Ack
            })
            .start()
            .await
            .expect_err("nothing listens on port 1");
        assert!(matches!(e, StartError::Connect(_)), "{e}");
        let e = App::new("nats://bob:s3cret-pw-2@127.0.0.1:1")
            .mount(Mount::core_subject("creds", "a"), |_: Delivery| async {
                Outcome::Ack
            })
            .start()
            .await
            .expect_err("nothing listens on port 1");
        for secret in ["s3cret-pw-1", "s3cret-pw-2"] {
            assert!(!e.to_string().contains(secret), "{e}");
            assert!(
                ruststream_tests::log_lines(&[secret]).is_empty(),
                "a log line holds {secret}"
            );
        }
        let app = App::with_options(
            "nats://127.0.0.1:1",
            adapter::async_nats::ConnectOptions::with_token("s3cret-token".into()),
        );
        assert!(!format!("{app:?}").contains("s3cret-token"));
    });
}

#[test]
fn core_mount_survives_a_server_restart() {
    run(async {
        let mut server = NatsServer::start();
        let (r, ev) = (runs(), events());
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-restart", "cr.in"),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        server.restart();
        // The app's client reconnects on its own; a fresh test client publishes once it is back.
        eventually("a message handled after the restart", || {
            (!attempts(&r).is_empty()).then_some(())
        })
        .await_with_publisher(&server, "cr.in")
        .await;
        app.shutdown().await;
    });
}

#[test]
fn jetstream_mount_survives_a_server_restart() {
    run(async {
        let mut server = NatsServer::start();
        let tc = TestClient::connect(&server).await;
        tc.file_stream("DURABLE", &["durable.>"]).await;
        let (r, ev) = (runs(), events());
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::jetstream("js-restart", "DURABLE", "worker")
                    .ack_wait(Duration::from_secs(2)),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        // The pull request outstanding at the restart is forgotten by the server; the mount
        // must notice and pull again.
        server.restart();
        let tc = TestClient::connect(&server).await;
        tc.js_publish("durable.new", HeaderMap::new(), b"after-restart")
            .await;
        eventually("the message published after the restart handled", || {
            r.lock()
                .unwrap()
                .iter()
                .any(|run| run.1 == "after-restart")
                .then_some(())
        })
        .await;
        let info = tc.consumer_info("DURABLE", "worker").await;
        assert_eq!(info.num_pending, 0);
        app.shutdown().await;
    });
}

/// Publishes to `subject` every 200 ms until the condition of an `eventually` holds.
trait PublishUntil {
    async fn await_with_publisher(self, server: &NatsServer, subject: &str);
}

impl<F: std::future::Future<Output = ()>> PublishUntil for F {
    async fn await_with_publisher(self, server: &NatsServer, subject: &str) {
        let tc = TestClient::connect(server).await;
        let subject = subject.to_owned();
        let publisher = async {
            loop {
                let _ = tc.client.publish(subject.clone(), "ping".into()).await;
                quiet(200).await;
            }
        };
        tokio::select! {
            _ = self => {}
            _ = publisher => {}
        }
    }
}

#[test]
fn a_url_with_user_and_password_reaches_a_secured_server_through_a_list() {
    run(async {
        let server = secured(ServerOptions {
            user_password: Some(("alice".into(), "s3cret-pw-4".into())),
            ..ServerOptions::default()
        });
        let tc = TestClient::connect(&server).await;
        let (r, ev) = (runs(), events());
        let noop = |_: Delivery| async { Outcome::Ack };

        let e = start_err(&server, |a| {
            a.mount(Mount::core_subject("secured-anon", "sec.in"), noop)
        })
        .await;
        assert!(
            matches!(e, StartError::Connect(_)),
            "no credentials, no connection: {e}"
        );

        // The first server of the list is down: the client goes on to the next.
        let list = format!(" nats://127.0.0.1:1 , {}", server.url_with_credentials());
        let app = start_at(&list, &ev, |a| {
            a.mount(
                Mount::core_subject("secured-up", "sec.in"),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        core_publish(&tc, "sec.in", HeaderMap::new(), b"hello").await;
        settled(&ev, 1).await;
        assert_eq!(attempts(&r), [1]);

        let port = server.url().rsplit(':').next().unwrap().to_owned();
        let e = App::new(&format!("nats://alice:wr0ng-pw-5@127.0.0.1:{port}"))
            .mount(Mount::core_subject("secured-wrong", "sec.in"), noop)
            .start()
            .await
            .expect_err("a wrong password is refused");
        assert!(matches!(e, StartError::Connect(_)), "{e}");
        assert!(e.to_string().contains("authorization"), "says why: {e}");
        for secret in ["s3cret-pw-4", "wr0ng-pw-5"] {
            assert!(!e.to_string().contains(secret), "{e}");
            assert!(
                ruststream_tests::log_lines(&[secret]).is_empty(),
                "a log line holds {secret}"
            );
        }
        app.shutdown().await;
    });
}

#[test]
fn a_url_with_a_token_reaches_a_secured_server() {
    run(async {
        let server = secured(ServerOptions {
            token: Some("t0ken-6".into()),
            ..ServerOptions::default()
        });
        let tc = TestClient::connect(&server).await;
        let (r, ev) = (runs(), events());
        let app = start_at(&server.url_with_credentials(), &ev, |a| {
            a.mount(
                Mount::core_subject("token-up", "tok.in"),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        core_publish(&tc, "tok.in", HeaderMap::new(), b"hello").await;
        settled(&ev, 1).await;
        assert_eq!(attempts(&r), [1]);
        assert!(
            ruststream_tests::log_lines(&["t0ken-6"]).is_empty(),
            "a log line holds the token"
        );
        app.shutdown().await;
    });
}

#[test]
fn a_server_url_that_does_not_parse_names_the_entry_and_the_part() {
    run(async {
        capture_logs();
        let noop = |_: Delivery| async { Outcome::Ack };
        let cases = [
            (
                "nats://127.0.0.1:4222,,nats://127.0.0.1:4223",
                "server URL 2 of 3 is empty",
            ),
            ("http://127.0.0.1:4222", "scheme"),
            (
                "nats://127.0.0.1:4222,nats://dave:pw-7@127.0.0.1:99999",
                "server URL 2 of 2",
            ),
            (
                "nats://dave:pw-8@127.0.0.1:1,nats://erin:pw-9@127.0.0.1:2",
                "other credentials",
            ),
        ];
        for (url, expected) in cases {
            let e = App::new(url)
                .mount(Mount::core_subject("bad-url", "u.in"), noop)
                .start()
                .await
                .expect_err(url);
            assert!(matches!(e, StartError::ServerUrl(_)), "{url}: {e}");
            assert!(e.to_string().contains(expected), "{url}: {e}");
            for secret in ["pw-7", "pw-8", "pw-9"] {
                assert!(!e.to_string().contains(secret), "{e}");
            }
        }
    });
}

#[test]
fn rule_09_a_per_message_ttl_is_not_forwarded_to_a_dead_letter() {
    run(async {
        let server = NatsServer::start();
        let tc = TestClient::connect(&server).await;
        // Per-message TTLs came with nats-server 2.11; older servers store `Nats-TTL` as an
        // ordinary header, and the dead letter must drop it there too.
        tc.js
            .create_stream(adapter::async_nats::jetstream::stream::Config {
                name: "ORDERS".into(),
                subjects: vec!["orders.>".into()],
                storage: adapter::async_nats::jetstream::stream::StorageType::Memory,
                allow_message_ttl: server.version() >= (2, 11, 0),
                ..Default::default()
            })
            .await
            .unwrap();
        tc.stream("DLQ", &["dlq.>"]).await; // no per-message TTLs here
        let acks = Wire::watch(&tc.client, "$JS.ACK.ORDERS.>").await;
        let (r, ev) = (runs(), events());
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("ttl-dlq").max_attempts(2).dead_letter("dlq.ttl"),
                scripted(&r, |_, _| Outcome::Retry),
            )
        })
        .await;
        tc.js_publish(
            "orders.new",
            headers(&[("Nats-TTL", "1h"), ("Trace-Id", "t-1")]),
            b"{}",
        )
        .await;
        acks.at_least(2).await;
        assert_eq!(
            acks.payloads(),
            ["-NAK", "+TERM"],
            "the dead letter was stored at the first try"
        );
        let stored = assert_dead_letters(&tc, "DLQ", &[("dlq.ttl", b"{}")]).await;
        assert_eq!(
            without_stored_time(&stored[0].1),
            [
                (
                    "Nats-Msg-Id".to_owned(),
                    "ruststream.dead-letter.ORDERS.worker.1".to_owned()
                ),
                ("Trace-Id".to_owned(), "t-1".to_owned())
            ]
        );
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        app.shutdown().await;
    });
}

/// Whether the server this suite runs on can send the ack reply subject's v2 form (its
/// `js_ack_fc_v2` feature flag came with nats-server 2.14; the simulator's model follows 2.15).
fn sends_v2_ack_replies(server_version: (u32, u32, u32)) -> bool {
    server_version >= (2, 14, 0)
}

#[test]
fn rule_01_the_v2_ack_reply_form_is_read_and_settled() {
    run(async {
        let server = NatsServer::start_with(ServerOptions {
            ack_replies_v2: true,
            ..ServerOptions::default()
        });
        let version = server.version();
        let v2 = sends_v2_ack_replies(version);
        let tc = js_setup(&server).await;
        let acks = Wire::watch(&tc.client, "$JS.ACK.>").await;
        let seen: Arc<Mutex<Vec<(String, u64, u64)>>> = Arc::default();
        let sink = seen.clone();
        let ev = events();
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("ack-v2").max_attempts(2).dead_letter("dlq.v2"),
                move |d: Delivery| {
                    let js = d.jetstream.clone().expect("a JetStream delivery");
                    let payload = String::from_utf8_lossy(&d.payload).into_owned();
                    sink.lock().unwrap().push((
                        format!("{}/{}", js.stream, js.consumer),
                        js.delivered,
                        js.stream_sequence,
                    ));
                    std::future::ready(match (payload.as_str(), d.attempt.get()) {
                        ("ok", _) => Outcome::Ack,
                        ("flaky", 1) => Outcome::RetryAfter(Duration::from_millis(50)),
                        ("flaky", _) => Outcome::Ack,
                        _ => Outcome::Retry,
                    })
                },
            )
        })
        .await;
        for payload in [&b"ok"[..], b"flaky", b"poison"] {
            tc.js_publish("orders.new", HeaderMap::new(), payload).await;
        }
        acks.at_least(5).await;
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        let replies: Vec<String> = acks.all().iter().map(|s| s.subject.clone()).collect();
        let tokens = if v2 { 11 } else { 9 };
        for reply in &replies {
            let parts: Vec<&str> = reply.split('.').collect();
            assert_eq!(parts.len(), tokens, "{reply} on nats-server {version:?}");
            if v2 {
                assert_eq!(parts[2], "_", "no JetStream domain: {reply}");
                assert_eq!(&parts[4..6], ["ORDERS", "worker"], "{reply}");
            }
        }
        let mut payloads = acks.payloads();
        payloads.sort();
        assert_eq!(
            payloads,
            [
                "+ACK",
                "+ACK",
                "+TERM",
                "-NAK",
                "-NAK {\"delay\": 50000000}"
            ]
        );
        let seen = seen.lock().unwrap().clone();
        assert!(
            seen.iter().all(|(names, _, _)| names == "ORDERS/worker"),
            "{seen:?}"
        );
        let mut delivered: Vec<(u64, u64)> = seen.iter().map(|(_, d, s)| (*s, *d)).collect();
        delivered.sort();
        assert_eq!(
            delivered,
            [(1, 1), (2, 1), (2, 2), (3, 1), (3, 2)],
            "(stream sequence, delivered)"
        );
        assert_eq!(tc.stream_len("DLQ").await, 1);
        eprintln!(
            "nats-server {version:?}: ack reply subjects of {tokens} tokens, e.g. {}",
            replies[0]
        );
        app.shutdown().await;
    });
}
