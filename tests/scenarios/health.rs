//! Health and readiness (issue 15, item 3): ready only once every mount consumes; not ready
//! while a mount is subscribed again; not live once the app gives up.

use super::common::*;
use crate::raw_publish;
use adapter::{ConnectionState, HealthWatch, MountState};
use ruststream_tests::raw::LONE_CR;

/// Starts the app `build` makes, keeping a watch on its health taken before the start.
async fn start_watched(
    server: &NatsServer,
    events: &Events,
    build: impl FnOnce(App) -> App,
) -> (Running, HealthWatch, HealthWatch) {
    let before = Arc::new(Mutex::new(None));
    let keep = before.clone();
    let app = start(server, events, move |a| {
        let a = build(a);
        let watch = a.health();
        // Before the start: no mount consumes yet.
        assert!(!watch.get().ready(), "{:?}", watch.get());
        assert!(watch.get().live());
        assert_eq!(watch.get().connection, ConnectionState::Connecting);
        *keep.lock().unwrap() = Some(watch);
        a
    })
    .await;
    let before = before.lock().unwrap().take().expect("the watch");
    let running = app.health();
    (app, before, running)
}

/// Ready once `start` returns (every mount subscribed: a message published then is handled),
/// live throughout, and not ready once the shutdown begins.
#[test]
fn health_is_ready_once_every_mount_consumes() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        tc.stream("ORDERS", &["orders.>"]).await;
        let (app, before, running) = start_watched(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("health-core", "hc.in"),
                scripted(&r, |_, _| Outcome::Ack),
            )
            .mount(js_mount("health-js"), scripted(&r, |_, _| Outcome::Ack))
        })
        .await;
        for watch in [&before, &running] {
            let h = watch.get();
            assert!(h.ready() && h.live(), "{h:?}");
            assert_eq!(h.connection, ConnectionState::Connected);
            assert_eq!(h.mount("health-core"), Some(MountState::Consuming));
            assert_eq!(h.mount("health-js"), Some(MountState::Consuming));
        }
        core_publish(&tc, "hc.in", HeaderMap::new(), b"x").await;
        settled(&ev, 1).await;
        app.shutdown().await;
        let h = before.get();
        assert!(!h.ready(), "{h:?}");
        assert!(h.live(), "a clean stop is no failure: {h:?}");
        assert_eq!(h.connection, ConnectionState::Closed);
        assert_eq!(h.mount("health-core"), Some(MountState::Stopping));
        assert_eq!(h.failure, None);
    });
}

/// A start-up that is refused leaves the app failed: not live, the reason given.
#[test]
fn health_is_not_live_when_the_start_is_refused() {
    run(async {
        let server = NatsServer::start();
        let app = App::new(&server.url()).mount(
            Mount::jetstream("health-missing", "NO_SUCH_STREAM", "worker"),
            |_d: Delivery| async { Outcome::Ack },
        );
        let watch = app.health();
        app.start().await.expect_err("no such stream");
        let h = watch.get();
        assert!(!h.live() && !h.ready(), "{h:?}");
        assert_eq!(h.mount("health-missing"), Some(MountState::Failed));
        assert!(
            h.failure
                .as_deref()
                .is_some_and(|f| f.contains("NO_SUCH_STREAM")),
            "{h:?}"
        );
    });
}

/// A subscription that dies takes the mount to `reconnecting` (not ready, still live) until
/// it is subscribed again (ready); when the subscriptions keep dying and the app gives up, it
/// is no longer live, and says why.
#[test]
fn health_follows_a_dying_subscription_and_an_app_that_gives_up() {
    run(async {
        let (server, _tc, _r, ev) = core_case().await;
        let (app, mut watch, _) = start_watched(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("health-again", "ha.in"),
                |_d: Delivery| async { Outcome::Ack },
            )
        })
        .await;
        raw_publish(&server, "ha.in", LONE_CR, b"poison");
        let h = tokio::time::timeout(
            Duration::from_secs(10),
            watch.wait_for(|h| h.mount("health-again") == Some(MountState::Reconnecting)),
        )
        .await
        .expect("reconnecting in time")
        .expect("the app is there");
        assert!(!h.ready() && h.live(), "{h:?}");
        let h = tokio::time::timeout(Duration::from_secs(10), watch.wait_for(|h| h.ready()))
            .await
            .expect("consuming again in time")
            .expect("the app is there");
        assert_eq!(h.mount("health-again"), Some(MountState::Consuming));
        for round in 2..=adapter::MAX_RECOVERIES + 1 {
            raw_publish(&server, "ha.in", LONE_CR, b"poison");
            eventually("the mount to come back, or the app to give up", || {
                (app.recoveries().len() >= round.min(adapter::MAX_RECOVERIES)).then_some(())
            })
            .await;
        }
        let h = tokio::time::timeout(
            Duration::from_secs(20),
            watch.wait_for(|h| h.failure.is_some()),
        )
        .await
        .expect("the app gives up")
        .expect("the app is there");
        assert!(!h.live() && !h.ready(), "{h:?}");
        assert_eq!(h.mount("health-again"), Some(MountState::Failed));
        let _ = app.until_signal().await;
    });
}

/// An operator deletes the consumer under a running JetStream mount: the mount says so
/// (refused: not ready, an error naming it and its consumer), nothing is delivered meanwhile,
/// and once the consumer is made again it consumes again and is ready. (It stayed "consuming"
/// and ready while nothing could reach it: noted and left at issue 42.)
#[test]
fn a_mount_whose_consumer_is_deleted_is_not_ready_until_the_consumer_exists_again() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        let r = runs();
        let app = start(&server, &events(), |a| {
            a.consumer_reread(Duration::from_millis(300))
                .mount(js_mount("gone"), scripted(&r, |_, _| Outcome::Ack))
        })
        .await;
        tc.js_publish("orders.1", HeaderMap::new(), b"0").await;
        eventually("one handled", || {
            (r.lock().unwrap().len() == 1).then_some(())
        })
        .await;
        let stream = tc.js.get_stream("ORDERS").await.unwrap();
        stream.delete_consumer("worker").await.unwrap();
        let mut health = app.health();
        let refused = tokio::time::timeout(
            Duration::from_secs(10),
            health.wait_for(|h| h.mount("gone") == Some(MountState::Refused)),
        )
        .await
        .expect("the mount is refused")
        .unwrap();
        assert!(!refused.ready(), "{refused:?}");
        logged(&["mount=gone", "the mount's consumer no longer exists"]).await;
        tc.js_publish("orders.2", HeaderMap::new(), b"1").await;
        quiet(500).await;
        assert_eq!(
            r.lock().unwrap().len(),
            1,
            "nothing delivered without a consumer"
        );
        assert_eq!(app.health().get().mount("gone"), Some(MountState::Refused));
        // Made again by hand, as a restart of the app would make it.
        stream
            .create_consumer(adapter::async_nats::jetstream::consumer::pull::Config {
                durable_name: Some("worker".into()),
                ack_policy: adapter::async_nats::jetstream::consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_millis(700),
                ..Default::default()
            })
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), health.wait_for(|h| h.ready()))
            .await
            .expect("ready again")
            .unwrap();
        logged(&["mount=gone", "the mount's consumer exists again"]).await;
        // The new consumer delivers the stream from its start.
        eventually("the message published without a consumer handled", || {
            r.lock()
                .unwrap()
                .iter()
                .any(|(_, p, _)| p == "1")
                .then_some(())
        })
        .await;
        app.shutdown().await;
    });
}

/// A consumer made again under a running mount's name that no longer fits it (another filter
/// subject, here) keeps the mount refused, naming what differs, as start-up would refuse it:
/// the mount must not handle messages outside what it declares (a breaker's finding: it went
/// back to consuming and handled `orders.b` on a mount filtered to `orders.a`). Made to fit
/// again, it consumes again.
#[test]
fn a_consumer_made_again_that_does_not_fit_the_mount_keeps_it_refused() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        let r = runs();
        let app = start(&server, &events(), |a| {
            a.consumer_reread(Duration::from_millis(300)).mount(
                js_mount("fits").filter_subject("orders.a"),
                scripted(&r, |_, _| Outcome::Ack),
            )
        })
        .await;
        let stream = tc.js.get_stream("ORDERS").await.unwrap();
        let consumer = |filter: &str| adapter::async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("worker".into()),
            ack_policy: adapter::async_nats::jetstream::consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_millis(700),
            filter_subject: filter.into(),
            ..Default::default()
        };
        stream.delete_consumer("worker").await.unwrap();
        let mut health = app.health();
        tokio::time::timeout(
            Duration::from_secs(10),
            health.wait_for(|h| h.mount("fits") == Some(MountState::Refused)),
        )
        .await
        .expect("the mount is refused")
        .unwrap();
        stream.create_consumer(consumer("orders.b")).await.unwrap();
        logged(&["mount=fits", "no longer fits the mount", "orders.b"]).await;
        tc.js_publish("orders.b", HeaderMap::new(), b"B").await;
        quiet(1000).await;
        assert_eq!(app.health().get().mount("fits"), Some(MountState::Refused));
        assert!(
            r.lock().unwrap().is_empty(),
            "a message outside the mount's filter was handled"
        );
        stream.delete_consumer("worker").await.unwrap();
        stream.create_consumer(consumer("orders.a")).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), health.wait_for(|h| h.ready()))
            .await
            .expect("ready again")
            .unwrap();
        tc.js_publish("orders.a", HeaderMap::new(), b"A").await;
        eventually("the mount's own message handled", || {
            r.lock()
                .unwrap()
                .iter()
                .any(|(_, p, _)| p == "A")
                .then_some(())
        })
        .await;
        assert!(r.lock().unwrap().iter().all(|(_, p, _)| p == "A"));
        app.shutdown().await;
    });
}

on_real_server! {
/// A push consumer made under a running mount's name (the simulator models no push
/// consumers): the server answers each pull request `409 Consumer is push based` at once. The
/// mount is refused and asks again only after a pause, not thousands of times a second (a
/// breaker counted 8,762 requests in 3 s on 2.15.1), and the supervisor's re-read names it.
#[test]
fn a_push_consumer_made_under_the_mount_s_name_refuses_it_without_a_flood_of_requests() {
    run(async {
        let server = NatsServer::start();
        let tc = js_setup(&server).await;
        let r = runs();
        let app = start(&server, &events(), |a| {
            a.consumer_reread(Duration::from_millis(300))
                .mount(js_mount("pushed"), scripted(&r, |_, _| Outcome::Ack))
        })
        .await;
        let stream = tc.js.get_stream("ORDERS").await.unwrap();
        stream.delete_consumer("worker").await.unwrap();
        let mut health = app.health();
        tokio::time::timeout(
            Duration::from_secs(10),
            health.wait_for(|h| h.mount("pushed") == Some(MountState::Refused)),
        )
        .await
        .expect("the mount is refused")
        .unwrap();
        let next = ruststream_tests::Wire::watch(
            &tc.client,
            "$JS.API.CONSUMER.MSG.NEXT.ORDERS.worker",
        )
        .await;
        stream
            .create_consumer(adapter::async_nats::jetstream::consumer::push::Config {
                durable_name: Some("worker".into()),
                deliver_subject: "elsewhere.push".into(),
                ack_policy: adapter::async_nats::jetstream::consumer::AckPolicy::Explicit,
                ..Default::default()
            })
            .await
            .unwrap();
        logged(&["mount=pushed", "no longer fits the mount"]).await;
        quiet(3000).await;
        let requests = next.all().len();
        assert!(requests < 40, "{requests} pull requests in about 3 s");
        assert_eq!(app.health().get().mount("pushed"), Some(MountState::Refused));
        assert!(r.lock().unwrap().is_empty());
        app.shutdown().await;
    });
}
}
