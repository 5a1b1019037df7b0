//! Start-up (rule 11): declarations refused naming the mount, before anything is consumed; what the server lacks.

use super::common::*;

#[test]
fn rule_11_bad_declarations_are_refused_naming_the_mount() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        let noop = |_: Delivery| async { Outcome::Ack };

        let e = start_err(&server, |a| {
            a.mount(Mount::core_subject("bad-core", "a.*"), noop)
        })
        .await;
        assert_refused(&e, "bad-core", |k| {
            matches!(k, DeclarationErrorKind::Subject { .. })
        });

        // Rule 18: a backoff whose delays would shrink.
        let e = start_err(&server, |a| {
            a.mount(
                Mount::core_subject("bad-backoff", "bb.in").backoff(
                    adapter::Backoff::exponential(Duration::from_secs(1), Duration::from_secs(9))
                        .factor(0.5),
                ),
                noop,
            )
        })
        .await;
        assert_refused(&e, "bad-backoff", |k| {
            matches!(k, DeclarationErrorKind::Backoff(_))
        });
        assert!(e.to_string().contains("backoff factor 0.500"), "{e}");

        let e = start_err(&server, |a| {
            a.mount(Mount::core_subject("bad-space", "a b"), noop)
        })
        .await;
        assert_refused(&e, "bad-space", |k| {
            matches!(k, DeclarationErrorKind::Subject { .. })
        });

        let e = start_err(&server, |a| {
            a.mount(Mount::core_subject("bad-token", "a..b"), noop)
        })
        .await;
        assert_refused(&e, "bad-token", |k| {
            matches!(k, DeclarationErrorKind::Subject { .. })
        });

        let e = start_err(&server, |a| {
            a.mount(Mount::core_wildcard("bad-copy", "w.*", "w.>"), noop)
        })
        .await;
        assert_refused(&e, "bad-copy", |k| {
            matches!(k, DeclarationErrorKind::Subject { .. })
        });

        let e = start_err(&server, |a| {
            a.mount(Mount::core_wildcard("no-copy", "w.*", ""), noop)
        })
        .await;
        assert_refused(&e, "no-copy", |k| {
            matches!(
                k,
                DeclarationErrorKind::Subject { .. } | DeclarationErrorKind::MissingCopySubject
            )
        });

        let e = start_err(&server, |a| {
            a.mount(
                Mount::core_subject("dlq-no-limit", "a").dead_letter("dlq.x"),
                noop,
            )
        })
        .await;
        assert_refused(&e, "dlq-no-limit", |k| {
            matches!(k, DeclarationErrorKind::DeadLetterWithoutLimit)
        });

        let e = start_err(&server, |a| {
            a.mount(
                Mount::core_subject("dlq-wild", "a")
                    .max_attempts(2)
                    .dead_letter("dlq.*"),
                noop,
            )
        })
        .await;
        assert_refused(&e, "dlq-wild", |k| {
            matches!(k, DeclarationErrorKind::Subject { .. })
        });

        let e = start_err(&server, |a| {
            a.mount(Mount::jetstream("no-stream", "NOPE", "w"), noop)
        })
        .await;
        assert!(
            matches!(&e, StartError::Server { mount, .. } if mount == "no-stream"),
            "{e}"
        );

        // A JetStream mount whose dead-letter subject no stream stores (rule 8).
        let e = start_err(&server, |a| {
            a.mount(
                js_mount("dlq-unstored")
                    .max_attempts(2)
                    .dead_letter("nowhere.x"),
                noop,
            )
        })
        .await;
        assert_refused(&e, "dlq-unstored", |k| {
            matches!(k, DeclarationErrorKind::DeadLetterNotStored(_))
        });

        // Dead letters that would come back to the mount: an endless loop, refused.
        let e = start_err(&server, |a| {
            a.mount(
                js_mount("dlq-loop")
                    .max_attempts(2)
                    .dead_letter("orders.dlq"),
                noop,
            )
        })
        .await;
        assert_refused(&e, "dlq-loop", |k| {
            matches!(k, DeclarationErrorKind::DeadLetterLoop(_))
        });
        // Both refusals came after the durable was created: it was removed again.
        let left = tc
            .js
            .get_stream("ORDERS")
            .await
            .expect("stream")
            .consumer_info("worker")
            .await;
        assert!(
            matches!(&left, Err(e) if e.kind() == adapter::async_nats::jetstream::context::ConsumerInfoErrorKind::NotFound),
            "a refused start-up left its durable behind: {left:?}"
        );
        let e = start_err(&server, |a| {
            a.mount(
                Mount::core_subject("core-loop", "loop.x")
                    .max_attempts(2)
                    .dead_letter("loop.x"),
                noop,
            )
        })
        .await;
        assert_refused(&e, "core-loop", |k| {
            matches!(k, DeclarationErrorKind::DeadLetterLoop(_))
        });

        // A mount name that would break `mount=<name>` in logs.
        let e = start_err(&server, |a| {
            a.mount(Mount::core_subject("my mount", "a"), noop)
        })
        .await;
        assert_refused(&e, "my mount", |k| {
            matches!(k, DeclarationErrorKind::MountName)
        });

        // A consumer whose ack policy is not explicit.
        let stream = tc.js.get_stream("ORDERS").await.expect("stream");
        stream
            .create_consumer(adapter::async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("none-ack".to_owned()),
                ack_policy: adapter::async_nats::jetstream::consumer::AckPolicy::None,
                ..Default::default()
            })
            .await
            .expect("consumer");
        let e = start_err(&server, |a| {
            a.mount(Mount::jetstream("ack-none", "ORDERS", "none-ack"), noop)
        })
        .await;
        assert_refused(&e, "ack-none", |k| {
            matches!(k, DeclarationErrorKind::AckPolicyNotExplicit(_))
        });

        // A consumer whose max_deliver is not above max_attempts.
        stream
            .create_consumer(adapter::async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("md3".to_owned()),
                max_deliver: 3,
                ..Default::default()
            })
            .await
            .expect("consumer");
        let e = start_err(&server, |a| {
            a.mount(
                Mount::jetstream("md-low", "ORDERS", "md3").max_attempts(3),
                noop,
            )
        })
        .await;
        assert_refused(&e, "md-low", |k| {
            matches!(k, DeclarationErrorKind::MaxDeliverTooLow { .. })
        });

        // Duplicate mount names.
        let e = start_err(&server, |a| {
            a.mount(Mount::core_subject("twice", "a"), noop)
                .mount(Mount::core_subject("twice", "b"), noop)
        })
        .await;
        assert!(
            matches!(e, StartError::DuplicateMount(ref m) if m == "twice"),
            "{e}"
        );

        // The runtime never changed the consumers it was refused on.
        assert_eq!(
            tc.consumer_info("ORDERS", "md3").await.config.max_deliver,
            3
        );
        // A consumer with BackOff is accepted, with a warning.
        stream
            .create_consumer(adapter::async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("backoff".to_owned()),
                max_deliver: 10,
                backoff: vec![Duration::from_millis(100), Duration::from_millis(200)],
                ..Default::default()
            })
            .await
            .expect("consumer");
        let ev = events();
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::jetstream("with-backoff", "ORDERS", "backoff").max_attempts(3),
                noop,
            )
        })
        .await;
        logged(&["WARN", "mount `with-backoff`", "BackOff"]).await;
        app.shutdown().await;
    });
}

#[test]
fn rule_11_refused_mount_consumes_nothing() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        tc.js_publish("orders.new", HeaderMap::new(), b"keep").await;
        let r = runs();
        let e = start_err(&server, |a| {
            a.mount(
                js_mount("good").max_attempts(2),
                scripted(&r, |_, _| Outcome::Ack),
            )
            .mount(
                Mount::core_subject("bad", "x.>"),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        assert_refused(&e, "bad", |k| {
            matches!(k, DeclarationErrorKind::Subject { .. })
        });
        quiet(300).await;
        assert!(attempts(&r).is_empty());
        assert_eq!(tc.stream_len("ORDERS").await, 1);
    });
}

#[test]
fn server_without_jetstream_refuses_a_jetstream_mount_saying_why_and_runs_core() {
    run(async {
        let server = NatsServer::start_without_jetstream();
        let r = runs();
        let e = start_err(&server, |a| {
            a.mount(js_mount("orders-js"), scripted(&r, |_, _| Outcome::Ack))
        })
        .await;
        let text = e.to_string();
        assert!(matches!(e, StartError::Server { .. }), "{e:?}");
        assert!(text.contains("mount `orders-js`"), "{text}");
        assert!(
            text.contains("JetStream is not enabled on the server"),
            "{text}"
        );
        assert!(attempts(&r).is_empty());

        // Core mounts need no JetStream: a dead-letter subject no stream can store falls
        // back to a flushed plain publish.
        let tc = TestClient::connect(&server).await;
        let dlq = Wire::watch(&tc.client, "nojs.dlq").await;
        let ev = events();
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("orders-core", "nojs.in")
                    .max_attempts(1)
                    .dead_letter("nojs.dlq"),
                scripted(&r, |_, _| Outcome::Retry),
            )
        })
        .await;
        core_publish(&tc, "nojs.in", HeaderMap::new(), b"p").await;
        assert_eq!(dlq.at_least(1).await[0].payload, b"p"[..]);
        assert_eq!(
            settled(&ev, 1).await[0].disposition,
            Disposition::DeadLettered
        );
        app.shutdown().await;
    });
}

/// Whether the server this suite runs on accepts a `BackOff` list without `max_deliver`
/// (nats-server 2.10.14 and later; older ones require `max_deliver` above the list's length).
fn accepts_backoff_without_max_deliver(server: &NatsServer) -> bool {
    server.version() >= (2, 10, 14)
}

#[test]
fn rule_11_a_backoff_consumer_runs_with_a_warning_on_every_server() {
    run(async {
        let (server, tc, acks, r, ev) = js_case().await;
        let backoff = vec![Duration::from_millis(300), Duration::from_millis(600)];
        let config = |max_deliver| adapter::async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("worker".into()),
            ack_policy: adapter::async_nats::jetstream::consumer::AckPolicy::Explicit,
            backoff: backoff.clone(),
            max_deliver,
            ..Default::default()
        };
        let orders = tc.js.get_stream("ORDERS").await.unwrap();
        let unset = orders.create_consumer(config(-1)).await;
        if accepts_backoff_without_max_deliver(&server) {
            unset.expect("a current server takes BackOff without max_deliver");
        } else {
            let e =
                unset.expect_err("nats-server before 2.10.14 requires max_deliver with BackOff");
            assert!(e.to_string().contains("max deliver"), "{e}");
            orders
                .create_consumer(config(5))
                .await
                .expect("with max_deliver above the list and max_attempts");
        }
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::jetstream("backoff", "ORDERS", "worker").max_attempts(3),
                scripted(&r, |attempt, _| {
                    if attempt < 3 {
                        Outcome::Retry
                    } else {
                        Outcome::Ack
                    }
                }),
            )
        })
        .await;
        logged(&["WARN", "backoff", "BackOff"]).await;
        tc.js_publish("orders.new", HeaderMap::new(), b"{}").await;
        assert_acks(&acks, &["-NAK", "-NAK", "+ACK"]).await;
        assert_eq!(attempts(&r), [1, 2, 3]);
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        app.shutdown().await;
    });
}

#[test]
fn a_zero_ack_wait_is_refused_naming_the_mount() {
    run(async {
        let server = NatsServer::start();
        let tc = TestClient::connect(&server).await;
        tc.stream("ORDERS", &["orders.>"]).await;
        let e = start_err(&server, |a| {
            a.mount(
                Mount::jetstream("no-wait", "ORDERS", "worker").ack_wait(Duration::ZERO),
                |_d: Delivery| async { Outcome::Ack },
            )
        })
        .await;
        assert!(
            matches!(&e, StartError::Setting { mount, .. } if mount == "no-wait"),
            "{e}"
        );
        assert!(e.to_string().contains("ack_wait"), "{e}");
        // Refused before anything was created on the server.
        let mut consumers = tc.js.get_stream("ORDERS").await.unwrap().consumer_names();
        assert!(
            futures_util::StreamExt::next(&mut consumers)
                .await
                .is_none(),
            "a consumer was created"
        );
    });
}

#[test]
fn a_concurrency_above_the_maximum_is_refused_naming_the_mount() {
    run(async {
        let server = NatsServer::start();
        let e = start_err(&server, |a| {
            a.mount(
                Mount::core_subject("too-many", "tm.in").concurrency(std::num::NonZeroUsize::MAX),
                |_d: Delivery| async { Outcome::Ack },
            )
        })
        .await;
        assert!(
            matches!(&e, StartError::Setting { mount, .. } if mount == "too-many"),
            "{e}"
        );
        assert!(
            e.to_string().contains("above the most a mount can run"),
            "{e}"
        );
    });
}

#[test]
fn core_only_settings_on_a_jetstream_mount_are_warned_about() {
    run(async {
        let (server, _tc, _acks, r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("js-core-only")
                    .queue_group("g")
                    .subscription_buffer(std::num::NonZeroUsize::MIN),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        logged(&[
            "WARN",
            "mount=js-core-only",
            "a queue group is for Core mounts",
        ])
        .await;
        logged(&[
            "WARN",
            "mount=js-core-only",
            "a subscription buffer is for Core mounts",
        ])
        .await;
        app.shutdown().await;
    });
}

/// A mount that declares a filter subject its existing consumer does not have is refused,
/// naming both (an existing consumer is never changed, and it would deliver other messages
/// than the mount says); the same filter binds. Two mounts of one app on the same consumer
/// are refused too: each would take part of the other's messages.
#[test]
fn a_filter_the_consumer_does_not_have_and_a_shared_consumer_are_refused() {
    run(async {
        let (server, tc, _acks, _r, _ev) = js_case().await;
        let orders = tc.js.get_stream("ORDERS").await.unwrap();
        orders
            .create_consumer(adapter::async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("worker".into()),
                ack_policy: adapter::async_nats::jetstream::consumer::AckPolicy::Explicit,
                filter_subject: "orders.a".into(),
                ..Default::default()
            })
            .await
            .expect("the consumer");
        let noop = |_: Delivery| async { Outcome::Ack };
        let e = start_err(&server, |a| {
            a.mount(js_mount("filter-other").filter_subject("orders.b"), noop)
        })
        .await;
        match &e {
            StartError::Setting { mount, reason } => {
                assert_eq!(mount, "filter-other", "{e}");
                assert!(
                    reason.contains("`orders.a`") && reason.contains("`orders.b`"),
                    "{reason}"
                );
            }
            other => panic!("not refused for its filter: {other}"),
        }
        let app = start(&server, &events(), |a| {
            a.mount(js_mount("filter-same").filter_subject("orders.a"), noop)
        })
        .await;
        app.shutdown().await;
        let e = start_err(&server, |a| {
            a.mount(js_mount("share-1"), noop)
                .mount(js_mount("share-2"), noop)
        })
        .await;
        let text = e.to_string();
        assert!(
            matches!(e, StartError::SharedConsumer { .. })
                && text.contains("share-1")
                && text.contains("share-2")
                && text.contains("`worker`"),
            "{text}"
        );
    });
}

/// The overlap a new user met (issue 41): a Core mount answering requests on a subject a
/// stream stores. The requester would get the stream's publish acknowledgement as its reply,
/// and the request would be stored and consumed as an order. Refused, naming the mount, the
/// stream and both subjects; a Core mount there that does not reply is warned about, and a
/// subject no stream stores is fine.
#[test]
fn a_core_mount_under_a_stream_is_refused_when_it_replies_and_warned_about_otherwise() {
    run(async {
        let (server, tc, _acks, _r, ev) = js_case().await;
        tc.stream("PAYMENTS", &["payments.*"]).await;
        let status = |_d: Delivery| async { adapter::Reply("ok") };
        let e = start_err(&server, |a| {
            a.mount(Mount::core_subject("status", "payments.status"), status)
        })
        .await;
        match &e {
            StartError::Overlap { mount, reason } => {
                assert_eq!(mount, "status", "{e}");
                for part in [
                    "`payments.status`",
                    "`PAYMENTS`",
                    "`payments.*`",
                    "acknowledgement",
                ] {
                    assert!(reason.contains(part), "{part}: {reason}");
                }
            }
            other => panic!("not refused for the overlap: {other}"),
        }
        let app = start(&server, &ev, |a| {
            a.mount(Mount::core_subject("status", "status.payments"), status)
                .mount(
                    Mount::core_wildcard("tap", "payments.*", "tap.retry"),
                    |_d: Delivery| async { Outcome::Ack },
                )
        })
        .await;
        logged(&[
            "WARN",
            "mount=tap",
            "`PAYMENTS`",
            "`payments.*`",
            "also stored",
        ])
        .await;
        assert!(
            ruststream_tests::log_lines(&["WARN", "mount=status"]).is_empty(),
            "a subject no stream stores"
        );
        app.shutdown().await;
    });
}

/// Dead letters or Core copies that another mount of the app would take as new work are
/// refused at start-up (issue 41): dead letters to a subject a stream stores and another
/// JetStream mount consumes, copies to a subject another Core mount receives, and copies to
/// a subject a stream stores and a JetStream mount consumes.
#[test]
fn dead_letters_and_copies_another_mount_would_take_as_work_are_refused() {
    run(async {
        let (server, tc, _acks, _r, _ev) = js_case().await;
        tc.stream("EVENTS", &["events.>"]).await;
        let noop = |_: Delivery| async { Outcome::Ack };
        let e = start_err(&server, |a| {
            a.mount(
                js_mount("orders")
                    .max_attempts(2)
                    .dead_letter("events.dead"),
                noop,
            )
            .mount(Mount::jetstream("events", "EVENTS", "e"), noop)
        })
        .await;
        let text = e.to_string();
        assert!(
            matches!(&e, StartError::Overlap { mount, .. } if mount == "orders")
                && text.contains("`events.dead`")
                && text.contains("JetStream mount `events`")
                && text.contains("`EVENTS`"),
            "{text}"
        );
        let e = start_err(&server, |a| {
            a.mount(
                Mount::core_wildcard("region", "region.*", "shared.retry").max_attempts(2),
                noop,
            )
            .mount(Mount::core_subject("other", "shared.retry"), noop)
        })
        .await;
        let text = e.to_string();
        assert!(
            matches!(&e, StartError::Overlap { mount, .. } if mount == "region")
                && text.contains("`shared.retry`")
                && text.contains("Core mount `other`"),
            "{text}"
        );
        let e = start_err(&server, |a| {
            a.mount(
                Mount::core_wildcard("region", "region.*", "events.retry").max_attempts(2),
                noop,
            )
            .mount(Mount::jetstream("events", "EVENTS", "e"), noop)
        })
        .await;
        let text = e.to_string();
        assert!(
            matches!(&e, StartError::Overlap { mount, .. } if mount == "region")
                && text.contains("`events.retry`")
                && text.contains("JetStream mount `events`"),
            "{text}"
        );
        // Nothing the refusals created is left: the consumers they made are removed.
        let names: Vec<String> = {
            use futures_util::StreamExt;
            let events = tc.js.get_stream("EVENTS").await.expect("EVENTS");
            events
                .consumer_names()
                .map(|n| n.expect("name"))
                .collect()
                .await
        };
        assert!(names.is_empty(), "{names:?}");
    });
}

/// A consumer with several filter subjects (nats-server 2.10+) is checked against each: dead
/// letters to one of them are refused, to a subject outside them are not. (nats-server 2.9
/// ignores `filter_subjects` and makes a consumer of every subject, which takes both.)
#[test]
fn dead_letters_into_one_of_a_consumers_several_filters_are_refused() {
    run(async {
        let (server, tc, _acks, _r, _ev) = js_case().await;
        let stream = tc.stream("EVENTS", &["events.>"]).await;
        stream
            .create_consumer(adapter::async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("e".into()),
                ack_policy: adapter::async_nats::jetstream::consumer::AckPolicy::Explicit,
                filter_subjects: vec!["events.a".into(), "events.dead".into()],
                ..Default::default()
            })
            .await
            .expect("consumer e");
        let noop = |_: Delivery| async { Outcome::Ack };
        let with_dead_letters = |subject: &'static str| {
            move |a: App| {
                a.mount(
                    js_mount("orders").max_attempts(2).dead_letter(subject),
                    noop,
                )
                .mount(Mount::jetstream("events", "EVENTS", "e"), noop)
            }
        };
        let e = start_err(&server, with_dead_letters("events.dead")).await;
        assert!(
            matches!(&e, StartError::Overlap { mount, .. } if mount == "orders")
                && e.to_string().contains("JetStream mount `events`"),
            "{e}"
        );
        if server.version() >= (2, 10, 0) {
            let app = start(&server, &events(), with_dead_letters("events.other")).await;
            app.shutdown().await;
        } else {
            let e = start_err(&server, with_dead_letters("events.other")).await;
            assert!(matches!(&e, StartError::Overlap { .. }), "{e}");
        }
    });
}

/// A stream with `no_ack` stores without answering (issue 41, found by a breaker): a Core
/// mount that replies under it gets its requests answered by itself, so it starts, warned
/// about the storing; dead letters to it would never be confirmed (rule 8) and go round for
/// ever, so a mount that sends its dead letters there is refused.
#[test]
fn a_stream_without_acknowledgements_warns_a_replying_mount_and_refuses_dead_letters() {
    run(async {
        let (server, tc, _acks, _r, ev) = js_case().await;
        tc.js
            .create_stream(adapter::async_nats::jetstream::stream::Config {
                name: "AUDIT".to_owned(),
                subjects: vec!["audit.>".to_owned()],
                no_ack: true,
                storage: adapter::async_nats::jetstream::stream::StorageType::Memory,
                ..Default::default()
            })
            .await
            .expect("the AUDIT stream");
        let status = |_d: Delivery| async { adapter::Reply("ok") };
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("audited-status", "audit.status"),
                status,
            )
        })
        .await;
        logged(&["WARN", "mount=audited-status", "`AUDIT`", "no_ack"]).await;
        let reply = tc
            .client
            .request("audit.status", bytes::Bytes::new())
            .await
            .expect("the mount answers");
        assert_eq!(&reply.payload[..], b"\"ok\"");
        app.shutdown().await;
        let e = start_err(&server, |a| {
            a.mount(
                js_mount("to-audit")
                    .max_attempts(2)
                    .dead_letter("audit.dead"),
                |_: Delivery| async { Outcome::Ack },
            )
        })
        .await;
        let text = e.to_string();
        assert!(
            matches!(&e, StartError::Overlap { mount, .. } if mount == "to-audit")
                && text.contains("`audit.dead`")
                && text.contains("no_ack"),
            "{text}"
        );
    });
}
