//! NATS services (issue 42, item 3): an app declared with `App::service` answers the micro
//! protocol's `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS` (ADR-32), its Core mounts its
//! endpoints. The responses are read with async-nats' own `service` types, an independent
//! reading of the protocol.

use super::common::*;
use adapter::Service;
use async_nats::service::{Info, PingResponse, Stats};
use futures_util::StreamExt;

/// The answer to one `$SRV` request on `subject`, decoded as `T`.
async fn ask<T: serde::de::DeserializeOwned>(tc: &TestClient, subject: &str) -> T {
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        tc.client.request(subject.to_owned(), bytes::Bytes::new()),
    )
    .await
    .unwrap_or_else(|_| panic!("no answer on {subject} within 5 s"))
    .unwrap_or_else(|e| panic!("no answer on {subject}: {e}"));
    serde_json::from_slice(&answer.payload).unwrap_or_else(|e| {
        panic!(
            "the answer on {subject} does not decode ({e}): {}",
            String::from_utf8_lossy(&answer.payload)
        )
    })
}

/// Every answer to one `$SRV` request on `subject` that comes within `ms`.
async fn answers(tc: &TestClient, subject: &str, ms: u64) -> Vec<PingResponse> {
    let inbox = tc.client.new_inbox();
    let mut replies = tc.client.subscribe(inbox.clone()).await.unwrap();
    tc.client
        .publish_with_reply(subject.to_owned(), inbox, bytes::Bytes::new())
        .await
        .unwrap();
    tc.client.flush().await.unwrap();
    let mut all = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(ms);
    while let Ok(Some(reply)) = tokio::time::timeout_at(deadline, replies.next()).await {
        // The server's "no responders" is a status, not an answer.
        if reply.status.is_none() {
            all.push(serde_json::from_slice(&reply.payload).unwrap());
        }
    }
    all
}

/// `$SRV.STATS.<name>`, read until `done` holds (at most 10 s).
async fn stats_until(tc: &TestClient, name: &str, done: impl Fn(&Stats) -> bool) -> Stats {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats: Stats = ask(tc, &format!("$SRV.STATS.{name}")).await;
        if done(&stats) {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "timed out; the last stats: {:?}",
            stats
                .endpoints
                .iter()
                .map(|e| (&e.name, e.requests, e.errors))
                .collect::<Vec<_>>()
        );
        quiet(20).await;
    }
}

fn service() -> Service {
    Service::new("orders", "1.2.0")
        .description("takes orders")
        .metadata("team", "payments")
}

#[test]
fn a_service_answers_ping_info_and_stats_on_each_subject_form() {
    run(async {
        let server = NatsServer::start();
        let tc = TestClient::connect(&server).await;
        tc.stream("SVCJS", &["svcjs.>"]).await;
        let (r, ev) = (runs(), events());
        let app = start(&server, &ev, |a| {
            a.service(service())
                .mount(
                    Mount::core_subject("take", "svc.take"),
                    scripted(&r, |_, _| Outcome::Ack),
                )
                .mount(
                    Mount::core_wildcard("any", "svc.any.*", "svc.copies"),
                    scripted(&r, |_, _| Outcome::Ack),
                )
                .mount(
                    Mount::core_subject("grouped", "svc.grouped").queue_group("workers"),
                    scripted(&r, |_, _| Outcome::Ack),
                )
                .mount(
                    Mount::core_subject("private", "svc.private").service_endpoint(false),
                    scripted(&r, |_, _| Outcome::Ack),
                )
                .mount(
                    Mount::jetstream("stored", "SVCJS", "svc-durable"),
                    scripted(&r, |_, _| Outcome::Ack),
                )
        })
        .await;

        let ping: PingResponse = ask(&tc, "$SRV.PING").await;
        assert_eq!(ping.kind, "io.nats.micro.v1.ping_response");
        assert_eq!(
            (ping.name.as_str(), ping.version.as_str()),
            ("orders", "1.2.0")
        );
        assert_eq!(
            ping.metadata.get("team").map(String::as_str),
            Some("payments")
        );
        assert!(!ping.id.is_empty());
        for subject in [
            "$SRV.PING.orders".to_owned(),
            format!("$SRV.PING.orders.{}", ping.id),
        ] {
            let again: PingResponse = ask(&tc, &subject).await;
            assert_eq!(again.id, ping.id, "{subject}");
        }
        // Another service's name or another instance's id is not this one's.
        assert!(answers(&tc, "$SRV.PING.other", 300).await.is_empty());
        assert!(
            answers(&tc, "$SRV.PING.orders.NOTANID", 300)
                .await
                .is_empty()
        );

        for subject in [
            "$SRV.INFO".to_owned(),
            "$SRV.INFO.orders".to_owned(),
            format!("$SRV.INFO.orders.{}", ping.id),
        ] {
            let info: Info = ask(&tc, &subject).await;
            assert_eq!(info.kind, "io.nats.micro.v1.info_response", "{subject}");
            assert_eq!(
                (info.name.as_str(), info.id.as_str()),
                ("orders", ping.id.as_str())
            );
            assert_eq!(info.description, "takes orders");
            // Exactly the Core mounts that did not opt out, in the order they were added.
            let endpoints: Vec<(&str, &str, &str)> = info
                .endpoints
                .iter()
                .map(|e| (e.name.as_str(), e.subject.as_str(), e.queue_group.as_str()))
                .collect();
            assert_eq!(
                endpoints,
                [
                    ("take", "svc.take", "q"),
                    ("any", "svc.any.*", "q"),
                    ("grouped", "svc.grouped", "workers"),
                ],
                "{subject}"
            );
        }
        for subject in [
            "$SRV.STATS".to_owned(),
            "$SRV.STATS.orders".to_owned(),
            format!("$SRV.STATS.orders.{}", ping.id),
        ] {
            let stats: Stats = ask(&tc, &subject).await;
            assert_eq!(stats.kind, "io.nats.micro.v1.stats_response", "{subject}");
            assert_eq!(stats.id, ping.id);
            assert_eq!(stats.endpoints.len(), 3, "{subject}");
            assert!(
                stats
                    .endpoints
                    .iter()
                    .all(|e| e.requests == 0 && e.errors == 0)
            );
        }
        app.shutdown().await;
        // Shutdown ends the service: nobody answers.
        assert!(answers(&tc, "$SRV.PING.orders", 300).await.is_empty());
    });
}

#[test]
fn a_service_s_stats_count_requests_errors_and_processing_time() {
    run(async {
        let (server, tc, _r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.service(service()).mount(
                Mount::core_subject("calc", "svc.calc"),
                |d: Delivery| async move {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    match &d.payload[..] {
                        b"reject" => Ok(Outcome::Reject),
                        b"ok" => Ok(Outcome::Ack),
                        other => Err(format!("bad input {}", String::from_utf8_lossy(other))),
                    }
                },
            )
        })
        .await;
        let inbox = tc.client.new_inbox();
        let send = |payload: &'static str| {
            let inbox = inbox.clone();
            let client = tc.client.clone();
            async move {
                client
                    .publish_with_reply("svc.calc", inbox, payload.into())
                    .await
                    .unwrap();
                client.flush().await.unwrap();
            }
        };
        for (sent, payload) in (1..).zip(["ok", "ok", "e1", "ok", "ok", "e2"]) {
            send(payload).await;
            // One at a time, so that the last error is known.
            stats_until(&tc, "orders", |s| s.endpoints[0].requests == sent).await;
        }
        let stats = stats_until(&tc, "orders", |s| s.endpoints[0].requests == 6).await;
        let calc = &stats.endpoints[0];
        assert_eq!(
            (calc.name.as_str(), calc.subject.as_str()),
            ("calc", "svc.calc")
        );
        assert_eq!((calc.requests, calc.errors), (6, 2));
        assert_eq!(
            calc.last_error.as_ref().map(|e| e.status.as_str()),
            Some("bad input e2")
        );
        assert!(
            calc.processing_time >= Duration::from_millis(30),
            "six runs of 5 ms or more: {:?}",
            calc.processing_time
        );
        assert_eq!(calc.average_processing_time, calc.processing_time / 6);

        send("reject").await;
        let stats = stats_until(&tc, "orders", |s| s.endpoints[0].requests == 7).await;
        let calc = &stats.endpoints[0];
        assert_eq!(calc.errors, 3, "a rejection is an error");
        assert_eq!(
            calc.last_error.as_ref().map(|e| e.status.as_str()),
            Some("rejected")
        );
        app.shutdown().await;
    });
}

#[test]
fn two_instances_of_a_service_each_answer_with_their_own_id_and_share_its_requests() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let build = |r: Runs| {
            move |a: App| {
                a.service(service()).mount(
                    Mount::core_subject("take", "svc.take"),
                    scripted(&r, |_, _| Outcome::Ack),
                )
            }
        };
        let first = start(&server, &ev, build(r.clone())).await;
        let second = start(&server, &ev, build(r.clone())).await;

        let pongs = answers(&tc, "$SRV.PING.orders", 500).await;
        assert_eq!(pongs.len(), 2, "one answer per instance");
        assert_ne!(pongs[0].id, pongs[1].id);
        assert!(pongs.iter().all(|p| p.name == "orders"));

        // Both subscribe in the queue group "q": each request is handled once.
        for _ in 0..10 {
            core_publish(&tc, "svc.take", HeaderMap::new(), b"x").await;
        }
        settled(&ev, 10).await;
        quiet(300).await;
        assert_eq!(r.lock().unwrap().len(), 10, "each request handled once");

        first.shutdown().await;
        let pongs = answers(&tc, "$SRV.PING.orders", 500).await;
        assert_eq!(pongs.len(), 1, "the instance left stops answering");
        second.shutdown().await;
    });
}

#[test]
fn a_service_answers_again_after_the_server_restarts() {
    run(async {
        let (mut server, _tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.service(service()).mount(
                Mount::core_subject("take", "svc.take"),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        server.restart();
        let tc = TestClient::connect(&server).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if !answers(&tc, "$SRV.PING.orders", 300).await.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "no answer after the restart");
        }
        app.shutdown().await;
    });
}

#[test]
fn a_service_with_a_bad_name_or_version_is_refused_at_start_up() {
    run(async {
        let server = NatsServer::start();
        for (service, names) in [
            (
                Service::new("orders.v2", "1.0.0"),
                ["`orders.v2`", "not a service name"],
            ),
            (Service::new("", "1.0.0"), ["``", "not a service name"]),
            (
                Service::new("orders", "1.0"),
                ["`1.0`", "not a semantic version"],
            ),
            (
                Service::new("orders", "v1.0.0"),
                ["`v1.0.0`", "not a semantic version"],
            ),
        ] {
            let e = start_err(&server, |a| {
                a.service(service).mount(
                    Mount::core_subject("take", "svc.take"),
                    |_d: Delivery| async { Outcome::Ack },
                )
            })
            .await;
            let text = e.to_string();
            assert!(matches!(e, StartError::Service(_)), "{e:?}");
            for name in names {
                assert!(text.contains(name), "{text:?} names {name}");
            }
        }
    });
}

#[test]
fn a_service_s_last_error_never_quotes_a_payload_and_stays_bounded() {
    run(async {
        let (server, tc, _r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.service(service())
                .mount_json(
                    Mount::core_subject("typed", "svc.typed"),
                    |_value: u32, _d: Delivery| async { Outcome::Ack },
                )
                .mount(
                    Mount::core_subject("errs", "svc.errs"),
                    |_d: Delivery| async {
                        // 1.1 MB of error text, with a two-byte character at the cut.
                        let mut text = "E".repeat(1023);
                        text.push_str(&"é".repeat(550_000));
                        Err::<Outcome, String>(text)
                    },
                )
        })
        .await;
        core_publish(
            &tc,
            "svc.typed",
            HeaderMap::new(),
            b"\"card 4111111111111111\"",
        )
        .await;
        core_publish(&tc, "svc.errs", HeaderMap::new(), b"x").await;
        let stats = stats_until(&tc, "orders", |s| s.endpoints.iter().all(|e| e.errors == 1)).await;
        let last = |name: &str| {
            let endpoint = stats.endpoints.iter().find(|e| e.name == name).unwrap();
            endpoint
                .last_error
                .as_ref()
                .map(|e| e.status.clone())
                .unwrap_or_default()
        };
        assert_eq!(
            last("typed"),
            "payload does not decode",
            "the payload stays out"
        );
        let errs = last("errs");
        assert_eq!(
            errs,
            format!("{}…", "E".repeat(1023)),
            "cut at 1024 bytes on a char"
        );
        // The full text stays in the log.
        logged(&["svc.typed", "card 4111111111111111"]).await;
        app.shutdown().await;
    });
}

#[test]
fn a_service_whose_answers_would_not_fit_is_refused_at_start_up() {
    run(async {
        let server = NatsServer::start();
        let long_name = "n".repeat(257);
        let mut metadata = Service::new("orders", "1.0.0");
        for i in 0..70 {
            metadata = metadata.metadata(&format!("k{i}"), &"v".repeat(1000));
        }
        for (service, names) in [
            (Service::new(&long_name, "1.0.0"), vec!["257 bytes", "256"]),
            (
                Service::new("orders", "1.0.0").description(&"d".repeat(4097)),
                vec!["description", "4097 bytes", "4096"],
            ),
            (metadata, vec!["metadata", "65536"]),
        ] {
            let e = start_err(&server, |a| {
                a.service(service).mount(
                    Mount::core_subject("take", "svc.take"),
                    |_d: Delivery| async { Outcome::Ack },
                )
            })
            .await;
            let text = e.to_string();
            assert!(matches!(e, StartError::Service(_)), "{e:?}");
            for name in names {
                assert!(text.contains(name), "{text:?} names {name}");
            }
        }
    });
}

#[test]
fn an_endpoint_whose_name_breaks_the_protocol_s_rule_is_refused_at_start_up() {
    run(async {
        let server = NatsServer::start();
        let e = start_err(&server, |a| {
            a.service(service()).mount(
                Mount::core_subject("dot.name", "svc.take"),
                |_d: Delivery| async { Outcome::Ack },
            )
        })
        .await;
        let text = e.to_string();
        assert!(matches!(e, StartError::Service(_)), "{e:?}");
        for name in ["`dot.name`", "rename", "service_endpoint(false)"] {
            assert!(text.contains(name), "{text:?} names {name}");
        }
        // Opted out, or without a service, the name is free.
        let ev = events();
        let app = start(&server, &ev, |a| {
            a.service(service()).mount(
                Mount::core_subject("dot.name", "svc.take").service_endpoint(false),
                |_d: Delivery| async { Outcome::Ack },
            )
        })
        .await;
        app.shutdown().await;
    });
}

#[test]
fn a_poison_message_on_srv_costs_the_responder_a_reconnect_and_never_the_app() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let app = start(&server, &ev, |a| {
            a.service(service()).mount(
                Mount::core_subject("take", "svc.take"),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        let ping: PingResponse = ask(&tc, "$SRV.PING.orders").await;
        for _ in 0..3 {
            crate::raw_publish(
                &server,
                "$SRV.PING",
                ruststream_tests::raw::LONE_CR,
                b"poison",
            );
            // The responder answers again, on a client of its own.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                quiet(200).await;
                let pongs = answers(&tc, "$SRV.PING.orders", 300).await;
                if !pongs.is_empty() {
                    assert_eq!(pongs.len(), 1, "one answer");
                    assert_eq!(pongs[0].id, ping.id, "the same instance");
                    break;
                }
                assert!(Instant::now() < deadline, "no answer after the poison");
            }
        }
        logged(&["WARN", "$SRV"]).await;
        assert!(app.recoveries().is_empty(), "{:?}", app.recoveries());
        core_publish(&tc, "svc.take", HeaderMap::new(), b"x").await;
        settled(&ev, 1).await;
        app.shutdown().await;
    });
}
