//! The built-in ops endpoint (issue 41; feature `ops`): `/metrics`, `/healthz`, `/readyz` and
//! `/asyncapi.json` over HTTP, on tokio and on smol, against a real nats-server. Its own test
//! binary: the endpoint installs the process's Prometheus recorder, which the conformance
//! binaries' recording recorder would refuse.

#![allow(clippy::unwrap_used, missing_docs)]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ruststream_tests::NatsServer;

/// `GET path` on `addr` (HTTP/1.0): the status code and the body; `None` when nothing
/// answers.
fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// Polls `path` until its status is `status`, for at most 10 s.
fn status_becomes(addr: SocketAddr, path: &str, status: u16) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = get(addr, path).expect("the endpoint answers");
        if got.0 == status || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What both runtimes check once their app runs with an endpoint: each path's answer, the
/// metrics of a handled message, a server that goes away seen by `/readyz`, and the endpoint
/// gone once the app is.
fn check_running(addr: SocketAddr, mount: &str, server: &mut NatsServer, publish: impl Fn()) {
    let (status, body) = get(addr, "/readyz").unwrap();
    assert_eq!(status, 200, "{body}");
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["ready"], true, "{body}");
    assert_eq!(health["live"], true, "{body}");
    assert_eq!(health["connection"], "connected", "{body}");
    assert_eq!(health["mounts"][mount], "consuming", "{body}");
    assert_eq!(get(addr, "/healthz").unwrap().0, 200);
    let (status, asyncapi) = get(addr, "/asyncapi.json").unwrap();
    assert_eq!(status, 200);
    let asyncapi: serde_json::Value = serde_json::from_str(&asyncapi).unwrap();
    assert_eq!(asyncapi["asyncapi"], "3.0.0");
    assert_eq!(asyncapi["info"]["title"], "ops-test");
    let (status, body) = get(addr, "/nothing").unwrap();
    assert_eq!(status, 404);
    assert!(body.contains("/metrics"), "{body}");
    publish();
    let metrics = {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (status, text) = get(addr, "/metrics").unwrap();
            assert_eq!(status, 200);
            let wanted =
                format!("ruststream_handler_outcomes_total{{mount=\"{mount}\",outcome=\"ack\"}} 1");
            if text.contains(&wanted) || Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    assert!(
        metrics.contains(&format!(
            "ruststream_handler_outcomes_total{{mount=\"{mount}\",outcome=\"ack\"}} 1"
        )),
        "{metrics}"
    );
    // The duration as a histogram with buckets (the dashboard's percentiles need them).
    assert!(
        metrics.contains("messaging_process_duration_bucket"),
        "{metrics}"
    );
    // The server goes away: not ready, still live (it reconnects for a while).
    server.stop();
    let (status, body) = status_becomes(addr, "/readyz", 503);
    assert_eq!(status, 503, "{body}");
    assert_eq!(get(addr, "/healthz").unwrap().0, 200);
}

#[test]
fn the_ops_endpoint_serves_metrics_health_readiness_and_asyncapi_on_tokio() {
    use ruststream_tokio::{App, Delivery, Mount, OpsEndpoint, Outcome};
    let mut server = NatsServer::start();
    let url = server.url();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let running = rt.block_on(async {
        App::new(&url)
            .mount(
                Mount::core_subject("ops-tokio", "ops.tokio"),
                |_d: Delivery| async { Outcome::Ack },
            )
            .ops(OpsEndpoint::bind("127.0.0.1:0").asyncapi("ops-test", "1.0.0"))
            .start()
            .await
            .expect("the app starts")
    });
    let addr = running.ops_addr().expect("an ops endpoint");
    let publisher = rt.block_on(async_nats::connect(&url)).unwrap();
    check_running(addr, "ops-tokio", &mut server, || {
        rt.block_on(async {
            publisher.publish("ops.tokio", "x".into()).await.unwrap();
            publisher.flush().await.unwrap();
        });
    });
    rt.block_on(running.shutdown());
    assert!(
        get(addr, "/healthz").is_none(),
        "the endpoint ends with the app"
    );
}

#[test]
fn the_ops_endpoint_serves_metrics_health_readiness_and_asyncapi_on_smol() {
    use ruststream_smol::{App, Compat, Delivery, Mount, OpsEndpoint, Outcome};
    let mut server = NatsServer::start();
    let url = server.url();
    let running = smol::block_on(Compat::new(async {
        App::new(&url)
            .mount(
                Mount::core_subject("ops-smol", "ops.smol"),
                |_d: Delivery| async { Outcome::Ack },
            )
            .ops(OpsEndpoint::bind("127.0.0.1:0").asyncapi("ops-test", "1.0.0"))
            .start()
            .await
            .expect("the app starts")
    }));
    let addr = running.ops_addr().expect("an ops endpoint");
    let publisher = smol::block_on(Compat::new(async_nats::connect(&url))).unwrap();
    check_running(addr, "ops-smol", &mut server, || {
        smol::block_on(Compat::new(async {
            publisher.publish("ops.smol", "x".into()).await.unwrap();
            publisher.flush().await.unwrap();
        }));
    });
    smol::block_on(Compat::new(running.shutdown()));
    assert!(
        get(addr, "/healthz").is_none(),
        "the endpoint ends with the app"
    );
}

/// An address that cannot be bound stops start-up with an error that names it; nothing is
/// consumed.
#[test]
fn an_ops_address_taken_is_refused_at_start_up() {
    use ruststream_tokio::{App, Delivery, Mount, OpsEndpoint, Outcome, StartError};
    let server = NatsServer::start();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let e = rt
        .block_on(
            App::new(&server.url())
                .mount(
                    Mount::core_subject("ops-taken", "ops.taken"),
                    |_d: Delivery| async { Outcome::Ack },
                )
                .ops(OpsEndpoint::bind(&addr))
                .start(),
        )
        .expect_err("the address is taken");
    assert!(
        matches!(&e, StartError::Ops(reason) if reason.contains(&addr)),
        "{e}"
    );
}

/// A client that sends half a request and stops (a body shorter than its `Content-Length`)
/// holds only its own answer: probes are still answered, a `POST` is refused with 405, and
/// the app's shutdown returns within seconds, after which the address can be bound again at
/// once (a breaker found the endpoint frozen and `shutdown` hung for good, issue 41).
#[test]
fn a_stuck_client_neither_freezes_the_ops_endpoint_nor_its_shutdown() {
    use ruststream_tokio::{App, Delivery, Mount, OpsEndpoint, Outcome};
    let server = NatsServer::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let running = rt.block_on(async {
        App::new(&server.url())
            .mount(
                Mount::core_subject("ops-stuck", "ops.stuck"),
                |_d: Delivery| async { Outcome::Ack },
            )
            .ops(OpsEndpoint::bind("127.0.0.1:0"))
            .start()
            .await
            .expect("the app starts")
    });
    let addr = running.ops_addr().expect("an ops endpoint");
    let mut stuck = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stuck,
        "POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\nabc"
    )
    .unwrap();
    let mut idle: Vec<std::net::TcpStream> = (0..8)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    assert_eq!(get(addr, "/readyz").map(|r| r.0), Some(200));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let mut post = std::net::TcpStream::connect(addr).unwrap();
    write!(post, "POST /readyz HTTP/1.0\r\nContent-Length: 0\r\n\r\n").unwrap();
    let mut answer = String::new();
    post.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.0 405") || answer.starts_with("HTTP/1.1 405"),
        "{answer}"
    );
    let stopping = Instant::now();
    rt.block_on(running.shutdown());
    assert!(
        stopping.elapsed() < Duration::from_secs(8),
        "shutdown took {:?}",
        stopping.elapsed()
    );
    std::net::TcpListener::bind(addr).expect("the address is free once the app has stopped");
    idle.clear();
    drop(stuck);
}
