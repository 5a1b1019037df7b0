//! The `scripted` example as a user runs it, on both runtimes: a secured server reached with
//! its credentials (flags, or a URL), one delivery on the wire, a clean stop on SIGTERM, and
//! refusals that name the mount and exit non-zero. Nothing it prints holds a secret.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use ruststream_tests::process::Scripted;
use ruststream_tests::{NatsServer, PATIENCE, ServerOptions, TestClient, eventually};

const PASSWORD: &str = "scr1pted-pw";
const TOKEN: &str = "scr1pted-token";

fn run(scenario: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(scenario);
}

/// One delivery through `scripted` on `runtime`, to a server that requires `auth`, connected
/// as `connect` (flags) and `env` say, where `{url}` stands for the server's URL and
/// `{secret_url}` for it with the credentials in it; then SIGTERM, a clean exit, and no
/// secret printed.
async fn one_delivery(runtime: &str, auth: ServerOptions, connect: &[&str], env: &[(&str, &str)]) {
    let server = NatsServer::start_with(auth);
    let tc = TestClient::connect(&server).await;
    let subject = format!("scripted.{runtime}");
    let fill = |text: &str| {
        text.replace("{url}", &server.url())
            .replace("{secret_url}", &server.url_with_credentials())
    };
    let connect: Vec<String> = connect.iter().map(|a| fill(a)).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), fill(v)))
        .collect();
    let mut args = vec!["--runtime", runtime, "--subject", &subject];
    args.extend(connect.iter().map(String::as_str));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut service = Scripted::spawn(&args, &env);
    service.wait_for("ruststream started").await;
    tc.client
        .publish(subject.clone(), r#"{"outcome":"ack"}"#.into())
        .await
        .unwrap();
    tc.client.flush().await.unwrap();
    service
        .wait_for(&format!(
            "mount=scripted subject={subject} attempt=1 outcome=ack"
        ))
        .await;
    service.terminate();
    assert_eq!(
        service.exit_code(PATIENCE).await,
        0,
        "{}",
        service.printed()
    );
    let printed = service.printed();
    assert!(
        printed.contains("scripted: shutdown report: abandoned=[] lost_copies=[] core_losses=[] recoveries=0 failure=none"),
        "{printed}"
    );
    for secret in [PASSWORD, TOKEN] {
        assert!(
            !printed.contains(secret),
            "scripted printed a secret:\n{printed}"
        );
    }
}

fn user_password() -> ServerOptions {
    ServerOptions {
        user_password: Some(("alice".into(), PASSWORD.into())),
        ..ServerOptions::default()
    }
}

fn token() -> ServerOptions {
    ServerOptions {
        token: Some(TOKEN.into()),
        ..ServerOptions::default()
    }
}

#[test]
fn scripted_reaches_a_secured_server_with_user_and_password_flags() {
    run(async {
        for runtime in ["tokio", "smol"] {
            let connect = ["--url", "{url}", "--user", "alice", "--password", PASSWORD];
            one_delivery(runtime, user_password(), &connect, &[]).await;
        }
    });
}

#[test]
fn scripted_reaches_a_secured_server_with_a_token_flag_and_with_credentials_in_nats_url() {
    run(async {
        for runtime in ["tokio", "smol"] {
            one_delivery(runtime, token(), &["--url", "{url}", "--token", TOKEN], &[]).await;
            one_delivery(
                runtime,
                user_password(),
                &[],
                &[("NATS_URL", "{secret_url}")],
            )
            .await;
            one_delivery(
                runtime,
                token(),
                &["--url", "nats://127.0.0.1:1,{secret_url}"],
                &[],
            )
            .await;
        }
    });
}

#[test]
fn scripted_refusals_name_the_mount_and_exit_non_zero() {
    run(async {
        let server = NatsServer::start();
        let url = server.url();
        let cases: [(&[&str], i32, &str); 12] = [
            (
                &["--name", "w12", "--subject", "a", "--on-error", "maybe"],
                2,
                "--on-error: `maybe` is not retry or reject",
            ),
            (
                &[
                    "--name",
                    "w10",
                    "--subject",
                    "a",
                    "--url",
                    &url,
                    "--backoff-ms",
                    "500:100",
                ],
                1,
                "bad backoff: backoff base 500ms is above its cap 100ms",
            ),
            (
                &["--name", "w11", "--subject", "a", "--backoff-ms", "5:x"],
                2,
                "--backoff-ms: invalid digit",
            ),
            (
                &["--name", "w1", "--wildcard", "w.*"],
                2,
                "--wildcard needs --copy-subject",
            ),
            (
                &[
                    "--name",
                    "w8",
                    "--stream",
                    "S",
                    "--durable",
                    "d",
                    "--subscription-buffer",
                    "5",
                ],
                2,
                "--subscription-buffer is for Core mounts",
            ),
            (
                &[
                    "--name",
                    "w9",
                    "--subject",
                    "a",
                    "--url",
                    &url,
                    "--concurrency",
                    "18446744073709551615",
                ],
                1,
                "is above the most a mount can run at once",
            ),
            (
                &["--name", "w2", "--subject", "a", "--user", "u"],
                2,
                "--user and --password",
            ),
            (
                &["--name", "w3", "--subject", "a", "--runtime", "async-std"],
                2,
                "--runtime",
            ),
            (
                &["--name", "w4", "--subject", "a", "--bogus"],
                2,
                "unknown flag --bogus",
            ),
            (
                &["--name", "w5", "--subject", "a.*", "--url", &url],
                1,
                "contains a wildcard",
            ),
            (
                &[
                    "--name",
                    "w6",
                    "--subject",
                    "a",
                    "--url",
                    "nats://127.0.0.1:1",
                ],
                1,
                "cannot connect",
            ),
            (
                &[
                    "--name",
                    "w7",
                    "--subject",
                    "a",
                    "--url",
                    "nats://t0k@127.0.0.1:1",
                    "--token",
                    "t",
                ],
                2,
                "credentials given twice",
            ),
        ];
        for (args, code, why) in cases {
            let name = args[1];
            let mut service = Scripted::spawn(args, &[]);
            assert_eq!(
                service.exit_code(PATIENCE).await,
                code,
                "{args:?}: {}",
                service.printed()
            );
            let printed = service.printed();
            assert!(
                printed.contains(&format!("scripted: mount `{name}`:")) && printed.contains(why),
                "{args:?}: {printed}"
            );
        }
    });
}

#[test]
fn scripted_shows_a_lease_on_the_wire_and_runs_a_slow_handler_once() {
    run(async {
        for runtime in ["tokio", "smol"] {
            let server = NatsServer::start();
            let tc = TestClient::connect(&server).await;
            tc.stream("SLOW", &["slow.>"]).await;
            let acks = ruststream_tests::Wire::watch(&tc.client, "$JS.ACK.SLOW.>").await;
            let url = server.url();
            let args = [
                "--runtime",
                runtime,
                "--url",
                &url,
                "--stream",
                "SLOW",
                "--durable",
                "w",
                "--ack-wait-ms",
                "1000",
                "--max-attempts",
                "3",
            ];
            let mut service = Scripted::spawn(&args, &[]);
            service.wait_for("ruststream started").await;
            tc.js_publish(
                "slow.x",
                Default::default(),
                br#"{"outcome":"ack","sleep_ms":2500}"#,
            )
            .await;
            eventually("the +ACK", || {
                acks.payloads().iter().any(|p| p == "+ACK").then_some(())
            })
            .await;
            let payloads = acks.payloads();
            let renewals = payloads.iter().filter(|p| *p == "+WPI").count();
            assert!(
                renewals >= 3,
                "{runtime}: a +WPI every 500 ms: {payloads:?}"
            );
            assert_eq!(
                payloads.last().map(String::as_str),
                Some("+ACK"),
                "{runtime}"
            );
            service.terminate();
            assert_eq!(
                service.exit_code(PATIENCE).await,
                0,
                "{}",
                service.printed()
            );
            let runs = service
                .stdout
                .lock()
                .unwrap()
                .iter()
                .filter(|l| l.starts_with("mount=scripted"))
                .count();
            assert_eq!(
                runs,
                1,
                "{runtime}: the slow handler ran once:\n{}",
                service.printed()
            );
        }
    });
}

/// The report line `scripted` prints at exit.
fn report_line(service: &Scripted) -> String {
    service
        .stderr
        .lock()
        .unwrap()
        .iter()
        .find_map(|l| {
            l.strip_prefix("scripted: shutdown report: ")
                .map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("no report line:\n{}", service.printed()))
}

/// The number after `key=` in `line`.
fn count(line: &str, key: &str) -> u64 {
    let at = line
        .find(&format!("{key}="))
        .unwrap_or_else(|| panic!("{key} in {line}"));
    line[at + key.len() + 1..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|e| panic!("{key} in {line}: {e}"))
}

#[test]
fn scripted_prints_its_shutdown_report_with_the_core_losses_on_one_line() {
    run(async {
        for runtime in ["tokio", "smol"] {
            let server = NatsServer::start();
            let tc = TestClient::connect(&server).await;
            let url = server.url();
            let args = [
                "--runtime",
                runtime,
                "--url",
                &url,
                "--subject",
                "slow.core",
                "--concurrency",
                "1",
                "--subscription-buffer",
                "5",
            ];
            let mut service = Scripted::spawn(&args, &[("RUST_LOG", "info")]);
            service.wait_for("ruststream started").await;
            const SENT: u64 = 200;
            for _ in 0..SENT {
                tc.client
                    .publish("slow.core", r#"{"outcome":"ack","sleep_ms":20}"#.into())
                    .await
                    .unwrap();
            }
            tc.client.flush().await.unwrap();
            service.wait_for("subscription buffer was full").await;
            // A few handler runs more, then stop.
            tokio::time::sleep(Duration::from_millis(200)).await;
            service.terminate();
            assert_eq!(
                service.exit_code(PATIENCE).await,
                0,
                "{}",
                service.printed()
            );
            let line = report_line(&service);
            assert!(
                line.starts_with("abandoned=[] lost_copies=[] core_losses=[scripted:"),
                "{line}"
            );
            assert!(line.ends_with("recoveries=0 failure=none"), "{line}");
            let runs = service
                .stdout
                .lock()
                .unwrap()
                .iter()
                .filter(|l| l.starts_with("mount=scripted"))
                .count() as u64;
            let dropped = count(&line, "slow_consumer");
            let unhandled = count(&line, "unhandled_at_shutdown");
            assert!(dropped > 0, "{runtime}: {line}");
            assert_eq!(
                runs + dropped + unhandled,
                SENT,
                "{runtime}: every message handled or counted: {runs} runs, {line}"
            );
        }
    });
}

#[test]
fn scripted_exits_non_zero_naming_a_stored_message_that_brings_the_client_down() {
    run(async {
        for runtime in ["tokio", "smol"] {
            let server = NatsServer::start();
            let tc = TestClient::connect(&server).await;
            tc.stream("POISON", &["poison.>"]).await;
            ruststream_tests::raw::raw_publish(
                &server,
                "poison.x",
                ruststream_tests::raw::LONE_CR,
                br#"{"outcome":"ack"}"#,
            );
            let url = server.url();
            let args = [
                "--runtime",
                runtime,
                "--url",
                &url,
                "--stream",
                "POISON",
                "--durable",
                "w",
                "--ack-wait-ms",
                "500",
                "--max-attempts",
                "3",
            ];
            let mut service = Scripted::spawn(&args, &[("RUST_LOG", "info")]);
            assert_eq!(
                service.exit_code(PATIENCE).await,
                1,
                "{}",
                service.printed()
            );
            let line = report_line(&service);
            assert!(
                line.contains("stream sequence 1") && line.contains("nats stream rmm POISON 1"),
                "{runtime}: {line}"
            );
            let printed = service.printed();
            assert!(
                printed.contains("scripted: the app stopped on its own: mount `scripted`: "),
                "{runtime}: {printed}"
            );
        }
    });
}

/// The `"error"` payload makes the handler return `Err`, and `--on-error reject` sends it down
/// the at-limit path at once: on a Core mount without a dead-letter subject, let go with the
/// warning, after one run.
#[test]
fn scripted_error_payload_follows_the_on_error_flag() {
    run(async {
        let server = NatsServer::start();
        let url = server.url();
        let tc = TestClient::connect(&server).await;
        let args = [
            "--url",
            &url,
            "--subject",
            "scripted.errors",
            "--max-attempts",
            "3",
            "--on-error",
            "reject",
        ];
        let mut service = Scripted::spawn(&args, &[]);
        service.wait_for("ruststream started").await;
        tc.client
            .publish("scripted.errors", r#"{"outcome":"error"}"#.into())
            .await
            .unwrap();
        tc.client.flush().await.unwrap();
        service
            .wait_for("mount=scripted subject=scripted.errors attempt=1 outcome=error")
            .await;
        service.wait_for("outcome=Reject").await;
        service.wait_for("it is let go").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !service.printed().contains("attempt=2"),
            "rejected: no second attempt\n{}",
            service.printed()
        );
        service.terminate();
        assert_eq!(
            service.exit_code(PATIENCE).await,
            0,
            "{}",
            service.printed()
        );
    });
}

/// `--provenance` with a dead-letter subject: the `"error"` payload's dead letter names the
/// mount, the reason `handler-error` and the error's text.
#[test]
fn scripted_provenance_flag_adds_provenance_to_dead_letters() {
    run(async {
        let server = NatsServer::start();
        let url = server.url();
        let tc = TestClient::connect(&server).await;
        let dead = ruststream_tests::Wire::watch(&tc.client, "scripted.dlq").await;
        let args = [
            "--url",
            &url,
            "--name",
            "prov",
            "--subject",
            "scripted.prov",
            "--max-attempts",
            "1",
            "--dead-letter",
            "scripted.dlq",
            "--provenance",
        ];
        let mut service = Scripted::spawn(&args, &[]);
        service.wait_for("ruststream started").await;
        tc.client
            .publish("scripted.prov", r#"{"outcome":"error"}"#.into())
            .await
            .unwrap();
        tc.client.flush().await.unwrap();
        let seen = dead.at_least(1).await;
        for pair in [
            ("Ruststream-Mount", "prov"),
            ("Ruststream-Subject", "scripted.prov"),
            ("Ruststream-Attempt", "1"),
            ("Ruststream-Reason", "handler-error"),
            ("Ruststream-Error", "the payload asked for an error"),
        ] {
            let pair = (pair.0.to_owned(), pair.1.to_owned());
            assert!(
                seen[0].headers.contains(&pair),
                "{pair:?} in {:?}",
                seen[0].headers
            );
        }
        service.terminate();
        assert_eq!(
            service.exit_code(PATIENCE).await,
            0,
            "{}",
            service.printed()
        );
    });
}
