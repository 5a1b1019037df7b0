//! The consumer features of nats-server 2.11 and later (issue 42): priority groups (pinned,
//! overflow) and pausing a consumer. On an older server each is refused, naming the server's
//! version; on 2.11+ the behaviour itself is checked. Every test asserts something on every
//! server: none is skipped.

use std::collections::BTreeMap;
use std::time::SystemTime;

use adapter::async_nats::jetstream::consumer::{PriorityPolicy as JsPriorityPolicy, pull};
use adapter::{MountState, PauseError, PriorityPolicy};

use super::common::*;

/// Whether the server has priority groups and consumer pause.
fn current(server: &NatsServer) -> bool {
    server.version() >= (2, 11, 0)
}

/// The version the server announces, as the refusals name it.
fn announced(server: &NatsServer) -> String {
    let (major, minor, patch) = server.version();
    format!("{major}.{minor}.{patch}")
}

/// A handler that records each payload it ran under `who`.
fn recorder(
    who: &'static str,
    seen: &Arc<Mutex<Vec<(&'static str, String)>>>,
) -> impl Fn(Delivery) -> std::future::Ready<Outcome> + Send + Sync + 'static {
    let seen = seen.clone();
    move |d: Delivery| {
        let payload = String::from_utf8_lossy(&d.payload).into_owned();
        seen.lock().unwrap().push((who, payload));
        std::future::ready(Outcome::Ack)
    }
}

/// How many payloads each instance ran, and whether any ran twice.
fn by_instance(
    seen: &Arc<Mutex<Vec<(&'static str, String)>>>,
) -> (BTreeMap<&'static str, usize>, usize) {
    let seen = seen.lock().unwrap();
    let mut counts = BTreeMap::new();
    let mut payloads = std::collections::BTreeSet::new();
    let mut twice = 0;
    for (who, payload) in seen.iter() {
        *counts.entry(*who).or_insert(0) += 1;
        if !payloads.insert(payload.clone()) {
            twice += 1;
        }
    }
    (counts, twice)
}

async fn publish_numbered(tc: &TestClient, from: usize, to: usize) {
    for i in from..to {
        tc.js
            .publish("orders.new", format!("{i}").into())
            .await
            .expect("publish")
            .await
            .expect("stored");
    }
}

#[test]
fn a_priority_group_is_refused_on_a_server_older_than_2_11_and_creates_its_consumer_on_a_current_one()
 {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        let mount = || js_mount("pinned").priority_group("workers", PriorityPolicy::Pinned);
        if !current(&server) {
            let e = start_err(&server, |a| {
                a.mount(mount(), |_: Delivery| async { Outcome::Ack })
            })
            .await;
            let text = e.to_string();
            assert!(
                matches!(e, StartError::Setting { ref mount, .. } if mount == "pinned"),
                "{e}"
            );
            assert!(
                text.contains("priority groups need nats-server 2.11 or later")
                    && text.contains(&format!("the server is {}", announced(&server))),
                "{text}"
            );
            // Nothing was created on the way.
            assert!(
                tc.js
                    .get_stream("ORDERS")
                    .await
                    .unwrap()
                    .consumer_info("worker")
                    .await
                    .is_err()
            );
            return;
        }
        let app = start(&server, &events(), |a| {
            a.mount(
                mount().priority_timeout(Duration::from_secs(3)),
                |_: Delivery| async { Outcome::Ack },
            )
        })
        .await;
        let info = tc.consumer_info("ORDERS", "worker").await;
        assert_eq!(info.config.priority_policy, JsPriorityPolicy::PinnedClient);
        assert_eq!(info.config.priority_groups, ["workers"]);
        assert_eq!(info.config.priority_timeout, Duration::from_secs(3));
        // The app pulls, and is pinned once a message comes.
        tc.js_publish("orders.new", HeaderMap::new(), b"1").await;
        let mut pinned = None;
        for _ in 0..50 {
            let info = tc.consumer_info("ORDERS", "worker").await;
            pinned = info
                .priority_groups
                .first()
                .and_then(|g| g.pinned_client_id.clone());
            if pinned.is_some() {
                break;
            }
            quiet(100).await;
        }
        assert!(
            pinned.is_some_and(|id| !id.is_empty()),
            "the app was never pinned"
        );
        app.shutdown().await;
    });
}

#[test]
fn a_mount_and_a_consumer_whose_priority_settings_differ_are_refused() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        if !current(&server) {
            // The consumer cannot be made with groups here; a mount that declares one is
            // refused before the consumer is looked at (above).
            let e = start_err(&server, |a| {
                a.mount(
                    js_mount("overflow")
                        .priority_group("g", PriorityPolicy::Overflow { min_pending: 5 }),
                    |_: Delivery| async { Outcome::Ack },
                )
            })
            .await;
            assert!(
                e.to_string()
                    .contains(&format!("the server is {}", announced(&server))),
                "{e}"
            );
            return;
        }
        tc.js
            .get_stream("ORDERS")
            .await
            .unwrap()
            .create_consumer(pull::Config {
                durable_name: Some("worker".into()),
                ack_policy: adapter::async_nats::jetstream::consumer::AckPolicy::Explicit,
                priority_policy: JsPriorityPolicy::PinnedClient,
                priority_groups: vec!["a".into()],
                priority_timeout: Duration::from_secs(5),
                ..Default::default()
            })
            .await
            .unwrap();
        let refused = |declared: Option<(&'static str, PriorityPolicy)>| {
            let server = &server;
            async move {
                let mut mount = js_mount("differs");
                if let Some((group, policy)) = declared {
                    mount = mount.priority_group(group, policy);
                }
                start_err(server, |a| {
                    a.mount(mount, |_: Delivery| async { Outcome::Ack })
                })
                .await
            }
        };
        let e = refused(Some(("b", PriorityPolicy::Pinned)))
            .await
            .to_string();
        assert!(
            e.contains("differs") && e.contains("not the mount's group `b`"),
            "{e}"
        );
        let e = refused(Some(("a", PriorityPolicy::Overflow { min_pending: 1 })))
            .await
            .to_string();
        assert!(
            e.contains("priority policy `pinned_client`") && e.contains("`overflow`"),
            "{e}"
        );
        let e = refused(None).await.to_string();
        assert!(e.contains("names no group"), "{e}");
        // The consumer the operator made is untouched.
        let info = tc.consumer_info("ORDERS", "worker").await;
        assert_eq!(info.config.priority_groups, ["a"]);
    });
}

#[test]
fn a_pinned_group_sends_everything_to_one_instance_and_another_takes_over_when_it_stops() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        if !current(&server) {
            let e = start_err(&server, |a| {
                a.mount(
                    js_mount("a").priority_group("workers", PriorityPolicy::Pinned),
                    |_: Delivery| async { Outcome::Ack },
                )
            })
            .await;
            assert!(
                e.to_string().contains("need nats-server 2.11 or later"),
                "{e}"
            );
            return;
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mount = |name: &str| {
            js_mount(name)
                .priority_group("workers", PriorityPolicy::Pinned)
                .priority_timeout(Duration::from_secs(4))
        };
        let a = start(&server, &events(), |app| {
            app.mount(mount("a"), recorder("a", &seen))
        })
        .await;
        let b = start(&server, &events(), |app| {
            app.mount(mount("b"), recorder("b", &seen))
        })
        .await;
        // Published over longer than the priority_timeout, one message every 100 ms: the
        // pinned instance keeps its pin by sending its pin id with every request, so each
        // message is handled at once (an instance that lost its pin would stand by, and
        // nothing would be handled until the pin expired).
        let mut slowest = Duration::ZERO;
        for i in 0..50 {
            let sent = Instant::now();
            publish_numbered(&tc, i, i + 1).await;
            eventually("handled", || (seen.lock().unwrap().len() > i).then_some(())).await;
            slowest = slowest.max(sent.elapsed());
            quiet(100).await;
        }
        assert!(
            slowest < Duration::from_secs(1),
            "a message waited {slowest:?}"
        );
        quiet(300).await;
        let (counts, twice) = by_instance(&seen);
        assert_eq!(twice, 0, "{counts:?}");
        assert_eq!(
            counts.len(),
            1,
            "one instance at a time receives: {counts:?}"
        );
        let (first, second, pinned) = match counts.keys().next() {
            Some(&"a") => (a, b, "b"),
            _ => (b, a, "a"),
        };
        // The health says which instance is the active one.
        assert!(first.health().get().mounts[0].pinned);
        assert!(!second.health().get().mounts[0].pinned);
        // The pinned instance stops (a graceful shutdown): it gives up its pin, and the other
        // is pinned at its next request, well within the priority_timeout (4 s) a killed
        // one would leave (found by a new user: a rolling restart stalled that long).
        first.shutdown().await;
        let stopped = Instant::now();
        publish_numbered(&tc, 50, 51).await;
        eventually("51 handled", || {
            (seen.lock().unwrap().len() >= 51).then_some(())
        })
        .await;
        let took = stopped.elapsed();
        assert!(
            took < Duration::from_millis(1500),
            "the standby took over {took:?} after the stop"
        );
        assert!(second.health().get().mounts[0].pinned);
        publish_numbered(&tc, 51, 70).await;
        eventually("70 handled", || {
            (seen.lock().unwrap().len() >= 70).then_some(())
        })
        .await;
        quiet(300).await;
        let (counts, twice) = by_instance(&seen);
        assert_eq!(twice, 0, "{counts:?}");
        assert_eq!(counts.get(pinned), Some(&20), "{counts:?}");
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        second.shutdown().await;
    });
}

/// A pinned instance whose one handler slot stays busy past the priority_timeout makes no
/// pull request, and the server pins the other. The first settles what it holds (its lease
/// renewed meanwhile), is told at its next request that the pin moved (`423`), and stands
/// by: nothing is lost or run twice.
#[test]
fn a_pinned_instance_that_loses_its_pin_settles_what_it_holds_and_stands_by() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        if !current(&server) {
            let e = start_err(&server, |a| {
                a.mount(
                    js_mount("a").priority_group("workers", PriorityPolicy::Pinned),
                    |_: Delivery| async { Outcome::Ack },
                )
            })
            .await;
            assert!(
                e.to_string().contains("need nats-server 2.11 or later"),
                "{e}"
            );
            return;
        }
        let acks = Wire::watch(&tc.client, "$JS.ACK.ORDERS.>").await;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let slow = {
            let seen = seen.clone();
            move |d: Delivery| {
                let seen = seen.clone();
                async move {
                    let payload = String::from_utf8_lossy(&d.payload).into_owned();
                    if payload == "slow" {
                        tokio::time::sleep(Duration::from_millis(3500)).await;
                    }
                    seen.lock().unwrap().push(("a", payload));
                    Outcome::Ack
                }
            }
        };
        let mount = |name: &str| {
            Mount::jetstream(name, "ORDERS", "worker")
                .ack_wait(Duration::from_secs(2))
                .priority_group("workers", PriorityPolicy::Pinned)
                .priority_timeout(Duration::from_millis(1500))
                .concurrency(std::num::NonZeroUsize::MIN)
        };
        let a = start(&server, &events(), |app| app.mount(mount("busy-a"), slow)).await;
        // `a` is pinned by its first message, then holds the slow one.
        publish_numbered(&tc, 0, 1).await;
        eventually("a pinned", || {
            (seen.lock().unwrap().len() == 1).then_some(())
        })
        .await;
        tc.js
            .publish("orders.new", "slow".into())
            .await
            .unwrap()
            .await
            .unwrap();
        quiet(200).await;
        let b = start(&server, &events(), |app| {
            app.mount(mount("busy-b"), recorder("b", &seen))
        })
        .await;
        // While `a`'s slot is busy past the priority_timeout, the pin moves to `b`.
        publish_numbered(&tc, 1, 6).await;
        eventually("b handles", || {
            (seen
                .lock()
                .unwrap()
                .iter()
                .filter(|(who, _)| *who == "b")
                .count()
                == 5)
                .then_some(())
        })
        .await;
        eventually("the slow one settled", || {
            seen.lock()
                .unwrap()
                .iter()
                .any(|(_, p)| p == "slow")
                .then_some(())
        })
        .await;
        logged(&["mount=busy-a", "the server pinned another instance"]).await;
        publish_numbered(&tc, 6, 10).await;
        eventually("10 handled", || {
            (seen.lock().unwrap().len() >= 11).then_some(())
        })
        .await;
        quiet(500).await;
        let (counts, twice) = by_instance(&seen);
        assert_eq!(twice, 0, "{counts:?}");
        assert_eq!(counts.values().sum::<usize>(), 11, "{counts:?}");
        assert_eq!(
            counts.get("a"),
            Some(&2),
            "a stands by after the slow one: {counts:?}"
        );
        assert!(
            acks.payloads().iter().all(|p| p == "+ACK" || p == "+WPI"),
            "{:?}",
            acks.payloads()
        );
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        a.shutdown().await;
        b.shutdown().await;
    });
}

/// An operator changes the consumer under a running mount so that the server refuses its
/// pull requests (`400`, a group the consumer no longer has): the mount's health says so
/// (refused: not ready), and once the consumer fits again it consumes, losing nothing (found
/// by a breaker: the mount stayed "consuming" and ready while nothing reached it).
#[test]
fn a_mount_whose_requests_the_server_refuses_is_not_ready_until_they_are_served_again() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        if !current(&server) {
            let e = start_err(&server, |a| {
                a.mount(
                    js_mount("refused").priority_group("workers", PriorityPolicy::Pinned),
                    |_: Delivery| async { Outcome::Ack },
                )
            })
            .await;
            assert!(
                e.to_string().contains("need nats-server 2.11 or later"),
                "{e}"
            );
            return;
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let app = start(&server, &events(), |a| {
            a.mount(
                js_mount("refused").priority_group("workers", PriorityPolicy::Pinned),
                recorder("app", &seen),
            )
        })
        .await;
        publish_numbered(&tc, 0, 1).await;
        eventually("one handled", || {
            (seen.lock().unwrap().len() == 1).then_some(())
        })
        .await;
        let stream = tc.js.get_stream("ORDERS").await.unwrap();
        let consumer = |group: &str| pull::Config {
            durable_name: Some("worker".into()),
            ack_policy: adapter::async_nats::jetstream::consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_millis(700),
            priority_policy: JsPriorityPolicy::PinnedClient,
            priority_groups: vec![group.into()],
            ..Default::default()
        };
        stream.delete_consumer("worker").await.unwrap();
        stream.create_consumer(consumer("other")).await.unwrap();
        publish_numbered(&tc, 1, 4).await;
        let mut health = app.health();
        let refused = tokio::time::timeout(
            Duration::from_secs(10),
            health.wait_for(|h| h.mount("refused") == Some(MountState::Refused)),
        )
        .await
        .expect("the mount is refused")
        .unwrap();
        assert!(!refused.ready(), "{refused:?}");
        logged(&[
            "mount=refused",
            "the server refuses the mount's pull requests",
        ])
        .await;
        assert_eq!(seen.lock().unwrap().len(), 1);
        stream.delete_consumer("worker").await.unwrap();
        stream.create_consumer(consumer("workers")).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), health.wait_for(|h| h.ready()))
            .await
            .expect("ready again")
            .unwrap();
        // The new consumer delivers the stream from its start: the first message again, then
        // the three published while the mount was refused.
        eventually("the rest handled", || {
            (seen.lock().unwrap().len() >= 5).then_some(())
        })
        .await;
        quiet(300).await;
        let payloads: Vec<String> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|(_, p)| p.clone())
            .collect();
        assert_eq!(payloads, ["0", "0", "1", "2", "3"]);
        app.shutdown().await;
    });
}

#[test]
fn an_overflow_instance_receives_only_under_a_backlog() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        let overflow = PriorityPolicy::Overflow { min_pending: 10 };
        if !current(&server) {
            let e = start_err(&server, |a| {
                a.mount(
                    js_mount("standby").priority_group("g", overflow),
                    |_: Delivery| async { Outcome::Ack },
                )
            })
            .await;
            assert!(
                e.to_string()
                    .contains(&format!("the server is {}", announced(&server))),
                "{e}"
            );
            return;
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let standby = start(&server, &events(), |a| {
            a.mount(
                js_mount("standby").priority_group("g", overflow),
                recorder("standby", &seen),
            )
        })
        .await;
        // Five pending: below the threshold, the standby receives nothing.
        publish_numbered(&tc, 0, 5).await;
        quiet(1500).await;
        assert!(
            seen.lock().unwrap().is_empty(),
            "{:?}",
            seen.lock().unwrap()
        );
        // Thirty pending: it helps, until fewer than ten are left.
        publish_numbered(&tc, 5, 30).await;
        eventually("the standby helps", || {
            (!seen.lock().unwrap().is_empty()).then_some(())
        })
        .await;
        quiet(1500).await;
        let helped = seen.lock().unwrap().len();
        let info = tc.consumer_info("ORDERS", "worker").await;
        assert!(
            helped <= 21 && info.num_pending >= 9,
            "the standby stops near the threshold: it ran {helped}, {} pending",
            info.num_pending
        );
        // An instance without a threshold takes the rest.
        let main = start(&server, &events(), |a| {
            a.mount(
                Mount::jetstream("main", "ORDERS", "worker")
                    .ack_wait(Duration::from_millis(700))
                    .priority_group("g", PriorityPolicy::Overflow { min_pending: 0 }),
                recorder("main", &seen),
            )
        })
        .await;
        eventually("30 handled", || {
            (seen.lock().unwrap().len() >= 30).then_some(())
        })
        .await;
        quiet(300).await;
        let (counts, twice) = by_instance(&seen);
        assert_eq!(twice, 0, "{counts:?}");
        assert_eq!(counts.values().sum::<usize>(), 30, "{counts:?}");
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        standby.shutdown().await;
        main.shutdown().await;
    });
}

#[test]
fn a_paused_mount_receives_nothing_until_resumed_and_settles_what_it_holds() {
    run(async {
        let server = NatsServer::start();
        let (tc, acks) = {
            let tc = js_setup(&server).await;
            let acks = Wire::watch(&tc.client, "$JS.ACK.ORDERS.>").await;
            (tc, acks)
        };
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (release, released) = tokio::sync::watch::channel(false);
        let started = Arc::new(Mutex::new(false));
        let handler = {
            let (seen, started) = (seen.clone(), started.clone());
            move |d: Delivery| {
                let (seen, started) = (seen.clone(), started.clone());
                let mut released = released.clone();
                async move {
                    let payload = String::from_utf8_lossy(&d.payload).into_owned();
                    if payload == "slow" {
                        *started.lock().unwrap() = true;
                        let _ = released.wait_for(|r| *r).await;
                    }
                    seen.lock().unwrap().push(("app", payload));
                    Outcome::Ack
                }
            }
        };
        let app = start(&server, &events(), |a| {
            a.mount(js_mount("pausable"), handler)
        })
        .await;
        let until = SystemTime::now() + Duration::from_secs(60);
        if !current(&server) {
            let e = app.pause_until("pausable", until).await.unwrap_err();
            assert!(matches!(e, PauseError::Unsupported { .. }), "{e}");
            assert!(
                e.to_string().contains(&format!(
                    "consumer pause needs nats-server 2.11 or later; the server is {}",
                    announced(&server)
                )),
                "{e}"
            );
            app.shutdown().await;
            return;
        }
        assert!(matches!(
            app.pause_until("nope", until).await,
            Err(PauseError::UnknownMount(_))
        ));
        // A delivery in hand when the pause begins is handled and settled.
        tc.js_publish("orders.new", HeaderMap::new(), b"slow").await;
        eventually("the slow one runs", || {
            started.lock().unwrap().then_some(())
        })
        .await;
        let state = app.pause_until("pausable", until).await.unwrap();
        assert!(
            state.paused && state.remaining > Duration::from_secs(50),
            "{state:?}"
        );
        let health = app.health().get();
        let mount = &health.mounts[0];
        assert!(
            mount.paused() && mount.state == MountState::Consuming && health.ready(),
            "{health:?}"
        );
        release.send_replace(true);
        acks.at_least(1).await;
        assert_eq!(acks.payloads(), ["+ACK"]);
        // Paused: nothing new is delivered.
        publish_numbered(&tc, 0, 10).await;
        quiet(1500).await;
        assert_eq!(seen.lock().unwrap().len(), 1, "{:?}", seen.lock().unwrap());
        let info = tc.consumer_info("ORDERS", "worker").await;
        assert!(info.paused && info.num_pending == 10, "{info:?}");
        // Resumed: everything comes, once.
        let state = app.resume("pausable").await.unwrap();
        assert!(!state.paused, "{state:?}");
        assert!(!app.health().get().mounts[0].paused());
        eventually("11 handled", || {
            (seen.lock().unwrap().len() >= 11).then_some(())
        })
        .await;
        let (_, twice) = by_instance(&seen);
        assert_eq!(twice, 0);
        eventually_info(&tc, |i| i.num_ack_pending == 0 && i.num_pending == 0).await;
        app.shutdown().await;
    });
}

#[test]
fn a_pause_made_elsewhere_shows_in_health_and_a_core_mount_cannot_be_paused() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        let app = start(&server, &events(), |a| {
            a.mount(js_mount("watched"), |_: Delivery| async { Outcome::Ack })
                .mount(
                    Mount::core_subject("core", "core.in"),
                    |_: Delivery| async { Outcome::Ack },
                )
        })
        .await;
        assert!(matches!(
            app.resume("core").await,
            Err(PauseError::NotJetStream(ref m)) if m == "core"
        ));
        if !current(&server) {
            assert!(matches!(
                app.resume("watched").await,
                Err(PauseError::Unsupported { .. })
            ));
            app.shutdown().await;
            return;
        }
        // An operator pauses the consumer (as `nats consumer pause` does).
        let stream = tc.js.get_stream("ORDERS").await.unwrap();
        let until = adapter::async_nats::datetime::DateTime::from(
            SystemTime::now() + Duration::from_secs(30),
        );
        stream.pause_consumer("worker", until).await.unwrap();
        // Within the supervisor's next reading of the consumer (every 5 s).
        let mut health = app.health();
        let within = adapter::CONSUMER_REREAD * 3;
        let seen = tokio::time::timeout(
            within,
            health.wait_for(|h| h.mounts.iter().any(|m| m.mount == "watched" && m.paused())),
        )
        .await
        .expect("the pause shows in the health")
        .unwrap();
        assert!(seen.ready(), "{seen:?}");
        stream.resume_consumer("worker").await.unwrap();
        tokio::time::timeout(
            within,
            health.wait_for(|h| h.mounts.iter().all(|m| !m.paused())),
        )
        .await
        .expect("the resume shows in the health")
        .unwrap();
        app.shutdown().await;
    });
}

/// Priority settings that cannot work are refused at start-up, naming the mount, on every
/// server (found by a breaker: a threshold or timeout the server cannot read was accepted,
/// and a group name the server refuses came back as a server error).
#[test]
fn priority_settings_that_cannot_work_are_refused_naming_the_mount() {
    run(async {
        let server = NatsServer::start();
        let _tc = js_setup(&server).await;
        let pinned = PriorityPolicy::Pinned;
        let cases: Vec<(Mount, &str)> = vec![
            (
                js_mount("bad").priority_group("a.b", pinned),
                "1 to 16 characters",
            ),
            (
                js_mount("bad").priority_group("0123456789abcdefg", pinned),
                "1 to 16 characters",
            ),
            (
                js_mount("bad").priority_group(
                    "g",
                    PriorityPolicy::Overflow {
                        min_pending: u64::MAX,
                    },
                ),
                "above the largest the server reads",
            ),
            (
                js_mount("bad")
                    .priority_group("g", pinned)
                    .priority_timeout(Duration::MAX),
                "above what the server reads",
            ),
            (
                js_mount("bad")
                    .priority_group("g", pinned)
                    .priority_timeout(Duration::ZERO),
                "priority_timeout is zero",
            ),
            (
                js_mount("bad")
                    .priority_group("g", PriorityPolicy::Overflow { min_pending: 1 })
                    .priority_timeout(Duration::from_secs(5)),
                "a priority_timeout is for a pinned priority group",
            ),
            (
                Mount::core_subject("bad", "core.in").priority_group("g", pinned),
                "a priority group is for JetStream mounts",
            ),
        ];
        for (mount, reason) in cases {
            let e = start_err(&server, |a| {
                a.mount(mount, |_: Delivery| async { Outcome::Ack })
            })
            .await;
            assert!(
                matches!(&e, StartError::Setting { mount, .. } if mount == "bad")
                    && e.to_string().contains(reason),
                "{reason}: {e}"
            );
        }
    });
}
