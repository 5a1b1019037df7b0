//! A handler's context (issue 14, item 1): publishing on Core and to JetStream, requests,
//! answering a Core request (`respond`, and a returned `Reply`), and reading the mount.

use super::common::*;
use adapter::{Context, ContextError, Reply};

#[derive(serde::Deserialize, serde::Serialize, Debug, PartialEq)]
struct Order {
    id: u64,
}

/// A JetStream handler publishes an event on Core (with a header) and one to a stream, whose
/// acknowledgement it awaits, and reads its mount's name and policy; the delivery is acked.
#[test]
fn context_publishes_on_core_and_to_jetstream() {
    run(async {
        let (server, tc, acks, _r, ev) = js_case().await;
        tc.stream("EVENTS", &["events.>"]).await;
        let audit = Wire::watch(&tc.client, "audit.>").await;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let app = start(&server, &ev, |a| {
            a.mount_json(
                js_mount("js-context").max_attempts(4),
                move |order: Order, _d: Delivery, cx: Context| {
                    let record = record.clone();
                    async move {
                        let mut h = HeaderMap::new();
                        h.insert("Order-Id", order.id.to_string().as_str());
                        cx.publish_with_headers("audit.accepted", h, "accepted")
                            .await?;
                        let ack = cx.jetstream_publish_json("events.accepted", &order).await?;
                        record.lock().unwrap().push((
                            cx.mount(),
                            cx.policy().max_attempts().map(|n| n.get()),
                            ack.stream,
                            ack.sequence,
                        ));
                        Ok::<_, ContextError>(Outcome::Ack)
                    }
                },
            )
        })
        .await;
        tc.js_publish("orders.new", HeaderMap::new(), b"{\"id\":7}")
            .await;
        assert_acks(&acks, &["+ACK"]).await;
        let core = audit.at_least(1).await;
        assert_eq!(core[0].subject, "audit.accepted");
        assert_eq!(&core[0].payload[..], b"accepted");
        assert!(
            core[0]
                .headers
                .contains(&("Order-Id".to_owned(), "7".to_owned())),
            "{:?}",
            core[0].headers
        );
        let stored = tc.stored("EVENTS").await;
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].0, "events.accepted");
        assert_eq!(&stored[0].2[..], b"{\"id\":7}");
        assert_eq!(
            *seen.lock().unwrap(),
            [("js-context", Some(4), "EVENTS".to_owned(), 1)]
        );
        assert_eq!(dispositions(&ev), [Disposition::Acked]);
        app.shutdown().await;
    });
}

/// A Core request is answered twice over: the mount `count` makes a request of its own to
/// the mount `stock`, whose typed handler returns a [`Reply`]; then `count` answers its
/// requester with `respond`. Both deliveries are acked.
#[test]
fn context_requests_and_responds_on_core() {
    run(async {
        let (server, tc, _r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.mount_json(
                Mount::core_subject("stock", "stock.check"),
                |order: Order, _d: Delivery| async move {
                    Reply(serde_json::json!({"id": order.id, "in_stock": order.id % 2 == 1}))
                },
            )
            .mount(
                Mount::core_subject("count", "orders.count"),
                |d: Delivery, cx: Context| async move {
                    assert!(cx.can_respond());
                    let stock = cx.request("stock.check", d.payload.clone()).await?;
                    let answer = format!("checked: {}", String::from_utf8_lossy(&stock.payload));
                    cx.respond(answer).await?;
                    Ok::<_, ContextError>(Outcome::Ack)
                },
            )
        })
        .await;
        let reply = tc
            .client
            .request("orders.count", "{\"id\":3}".into())
            .await
            .expect("the mount answers");
        assert_eq!(
            String::from_utf8_lossy(&reply.payload),
            "checked: {\"id\":3,\"in_stock\":true}"
        );
        settled(&ev, 2).await;
        assert_eq!(dispositions(&ev), [Disposition::Acked, Disposition::Acked]);
        app.shutdown().await;
    });
}

/// `respond` where there is no one to answer is a clear error, never a publish: on a Core
/// delivery that was published without a reply subject, and on a JetStream delivery, whose
/// reply subject is its ack reply subject (only the `+ACK` goes there).
#[test]
fn context_respond_without_a_requester_is_an_error() {
    run(async {
        let (server, tc, acks, _r, ev) = js_case().await;
        let errors = Arc::new(Mutex::new(Vec::new()));
        let (core_errors, js_errors) = (errors.clone(), errors.clone());
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-respond", "cresp.in"),
                move |_d: Delivery, cx: Context| {
                    let errors = core_errors.clone();
                    async move {
                        let e = cx.respond("nobody").await.expect_err("no reply subject");
                        assert!(matches!(
                            e,
                            ContextError::NoReplySubject {
                                mount: "core-respond"
                            }
                        ));
                        errors.lock().unwrap().push(e.to_string());
                        Outcome::Ack
                    }
                },
            )
            .mount(js_mount("js-respond"), move |_d: Delivery, cx: Context| {
                let errors = js_errors.clone();
                async move {
                    assert!(!cx.can_respond());
                    let e = cx.respond("+ACK").await.expect_err("JetStream");
                    assert!(matches!(
                        e,
                        ContextError::RespondOnJetStream {
                            mount: "js-respond"
                        }
                    ));
                    errors.lock().unwrap().push(e.to_string());
                    Outcome::Drop
                }
            })
        })
        .await;
        core_publish(&tc, "cresp.in", HeaderMap::new(), b"x").await;
        settled(&ev, 1).await;
        tc.js_publish("orders.new", HeaderMap::new(), b"y").await;
        // The handler's `drop` is what reaches the ack reply subject, nothing before it.
        assert_acks(&acks, &["+TERM"]).await;
        let errors = errors.lock().unwrap().clone();
        assert!(errors[0].contains("no reply subject"), "{errors:?}");
        assert!(errors[1].contains("ack reply subject"), "{errors:?}");
        app.shutdown().await;
    });
}

/// A returned [`Reply`] to a Core delivery that was not a request is acked and not sent; a
/// `Reply` that cannot be sent is an error the mount's policy settles.
#[test]
fn reply_without_a_requester_is_acked_and_not_sent() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let runs = r.clone();
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-reply", "creply.in"),
                move |d: Delivery| {
                    runs.lock()
                        .unwrap()
                        .push((d.attempt.get(), String::new(), Instant::now()));
                    async move { Ok::<_, String>(Reply("pong")) }
                },
            )
        })
        .await;
        core_publish(&tc, "creply.in", HeaderMap::new(), b"ping").await;
        settled(&ev, 1).await;
        assert_eq!(dispositions(&ev), [Disposition::Acked]);
        let reply = tc
            .client
            .request("creply.in", "ping".into())
            .await
            .expect("answered");
        assert_eq!(&reply.payload[..], b"\"pong\"");
        settled(&ev, 2).await;
        assert_eq!(attempts(&r), [1, 1]);
        app.shutdown().await;
    });
}

/// A handler that returns a [`Reply`] on a JetStream mount is refused at start-up, naming the
/// mount: its reply subject is the ack reply subject.
#[test]
fn reply_on_a_jetstream_mount_is_refused_at_start_up() {
    run(async {
        let server = NatsServer::start();
        let _tc = js_setup(&server).await;
        let err = start_err(&server, |a| {
            a.mount_json(
                js_mount("js-reply"),
                |order: Order, _d: Delivery| async move { Reply(order) },
            )
        })
        .await;
        match &err {
            StartError::Setting { mount, reason } => {
                assert_eq!(mount, "js-reply");
                assert!(reason.contains("ack reply subject"), "{reason}");
            }
            other => panic!("refused for another reason: {other}"),
        }
    });
}

/// A handler still running when its app's grace period ends (abandoned) cannot publish any
/// more; its `Context` says the app is shutting down, instead of async-nats' bare "channel
/// closed". (On smol the app's Tokio reactor stops with it, and such a handler does not get
/// as far as its publish: nothing is recorded there.)
#[test]
fn context_says_when_the_app_is_shutting_down() {
    run(async {
        let (server, tc, _r, ev) = core_case().await;
        let errors = Arc::new(Mutex::new(Vec::new()));
        let seen = errors.clone();
        let started = Arc::new(Mutex::new(false));
        let flag = started.clone();
        let app = start(&server, &ev, |a| {
            a.grace_period(Duration::from_millis(200)).mount(
                Mount::core_subject("core-stopping", "cstop.in"),
                move |_d: Delivery, cx: Context| {
                    let (seen, flag) = (seen.clone(), flag.clone());
                    async move {
                        *flag.lock().unwrap() = true;
                        tokio::time::sleep(Duration::from_millis(1000)).await;
                        let said = match cx.publish("cstop.after", "late").await {
                            Ok(()) => "published".to_owned(),
                            Err(e) => e.to_string(),
                        };
                        seen.lock().unwrap().push(said);
                        Outcome::Ack
                    }
                },
            )
        })
        .await;
        core_publish(&tc, "cstop.in", HeaderMap::new(), b"x").await;
        eventually("the handler to start", || {
            (*started.lock().unwrap()).then_some(())
        })
        .await;
        let report = app.shutdown().await;
        assert_eq!(
            report.abandoned,
            [("core-stopping".to_owned(), 1)],
            "{report:?}"
        );
        quiet(1500).await;
        let errors = errors.lock().unwrap().clone();
        if std::any::type_name::<App>().contains("ruststream_tokio") {
            assert_eq!(errors.len(), 1, "the handler reached its publish on tokio");
        }
        for e in &errors {
            assert!(
                e.contains("mount `core-stopping`: the app is shutting down"),
                "{e}"
            );
        }
    });
}

/// Effectively-once publishes (issue 41): a handler publishes its events to a stream, then
/// settles nothing, as a process killed between its publishes and its `+ACK` would; the
/// message comes back after `ack_wait` and the handler runs again, publishing the same
/// events. With the runtime's publish ids (the default) the stream keeps each event once, and
/// the second run's acknowledgements say `duplicate`; an event whose payload differs between
/// the runs is stored again (an id never drops what was not stored); with `publish_ids(false)`
/// every event is stored twice, as without ids.
#[test]
fn context_jetstream_publishes_of_a_redelivered_run_are_stored_once() {
    run(async {
        let (server, tc, acks, _r, ev) = js_case().await;
        tc.stream("EVENTS", &["events.>"]).await;
        let duplicates = Arc::new(Mutex::new(Vec::new()));
        let app = start(&server, &ev, |a| {
            let seen = duplicates.clone();
            let with_ids = move |order: Order, d: Delivery, cx: Context| {
                let seen = seen.clone();
                async move {
                    let attempt = d.attempt.get();
                    let first = cx.jetstream_publish_json("events.accepted", &order).await?;
                    let second = cx.jetstream_publish_json("events.reserved", &order).await?;
                    // The run's own time in the payload: a different event each run.
                    let timed = cx
                        .jetstream_publish("events.timed", format!("run {attempt}"))
                        .await?;
                    seen.lock().unwrap().push((
                        d.mount,
                        attempt,
                        [first.duplicate, second.duplicate, timed.duplicate],
                    ));
                    Ok::<_, ContextError>(match attempt {
                        // A crash before the +ACK: nothing settled, redelivered.
                        1 => Outcome::None,
                        _ => Outcome::Ack,
                    })
                }
            };
            a.mount_json(
                js_mount("ids-on").filter_subject("orders.on"),
                with_ids.clone(),
            )
            .mount_json(
                Mount::jetstream("ids-off", "ORDERS", "off")
                    .ack_wait(Duration::from_millis(700))
                    .filter_subject("orders.off")
                    .publish_ids(false),
                with_ids,
            )
        })
        .await;
        tc.js_publish("orders.on", HeaderMap::new(), b"{\"id\":1}")
            .await;
        let acked = |ev: &Events| {
            dispositions(ev)
                .iter()
                .filter(|d| **d == Disposition::Acked)
                .count()
        };
        eventually("both runs of ids-on", || (acked(&ev) == 1).then_some(())).await;
        let stored = tc.stored("EVENTS").await;
        let subjects: Vec<&str> = stored.iter().map(|(s, _, _)| s.as_str()).collect();
        assert_eq!(
            subjects,
            [
                "events.accepted",
                "events.reserved",
                "events.timed",
                "events.timed"
            ],
            "each event once; the timed one, different each run, twice"
        );
        assert_eq!(
            *duplicates.lock().unwrap(),
            [
                ("ids-on", 1, [false, false, false]),
                ("ids-on", 2, [true, true, false])
            ]
        );
        let ids: Vec<String> = stored
            .iter()
            .map(|(_, h, _)| {
                h.iter()
                    .find(|(n, _)| n == "Nats-Msg-Id")
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            })
            .collect();
        assert!(
            ids[0].starts_with("ruststream.publish.ORDERS.worker.1.") && ids[0].contains(".0."),
            "{ids:?}"
        );
        assert!(ids[1].contains(".1."), "{ids:?}");
        tc.js_publish("orders.off", HeaderMap::new(), b"{\"id\":2}")
            .await;
        eventually("both runs of ids-off", || (acked(&ev) == 2).then_some(())).await;
        assert_eq!(
            tc.stored("EVENTS").await.len(),
            4 + 6,
            "without ids, each run's three events are stored"
        );
        drop(acks);
        app.shutdown().await;
    });
}
