//! The `scripted` example as a user runs it, on both runtimes: a secured server reached with
//! its credentials (flags, or a URL), one delivery on the wire, a clean stop on SIGTERM, and
//! refusals that name the mount and exit non-zero. Nothing it prints holds a secret.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::time::Duration;

use ruststream_tests::process::Scripted;
use ruststream_tests::{NatsServer, PATIENCE, ServerOptions, TestClient, Wire, eventually};

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
            assert_refused(args, code, why).await;
        }
    });
}

/// Runs `scripted` with `args` (`args[1]` the mount's name, after `--name`) and asserts that
/// it exits with `code`, naming the mount and saying `why`.
async fn assert_refused(args: &[&str], code: i32, why: &str) {
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

/// The handler lines `scripted` printed (`mount=…`), in order.
fn handler_lines(service: &Scripted) -> Vec<String> {
    service
        .stdout
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.starts_with("mount="))
        .cloned()
        .collect()
}

/// The value of `key=` in a handler line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split(' ')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line}"))
}

/// Asserts that the batch lines are numbered from 1 without a gap, and that each batch has as
/// many lines as its `size=` says (the same on each).
fn assert_batches_add_up(lines: &[String]) {
    let mut by_batch = BTreeMap::<u64, Vec<u64>>::new();
    for line in lines {
        let batch = field(line, "batch").parse().expect("batch=<n>");
        let size = field(line, "size").parse().expect("size=<n>");
        by_batch.entry(batch).or_default().push(size);
    }
    let numbers: Vec<u64> = by_batch.keys().copied().collect();
    assert_eq!(
        numbers,
        (1..=numbers.len() as u64).collect::<Vec<_>>(),
        "batches counted from 1: {lines:#?}"
    );
    for (batch, sizes) in by_batch {
        assert!(
            sizes.iter().all(|s| *s == sizes.len() as u64),
            "batch {batch}: {} lines, sizes {sizes:?}: {lines:#?}",
            sizes.len()
        );
    }
}

/// The stream sequence in a JetStream ack reply subject: `$JS.ACK.<stream>.<consumer>.
/// <delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>`, or the 11-token form with
/// a domain and an account hash in front.
fn stream_sequence(ack_subject: &str) -> u64 {
    let tokens: Vec<&str> = ack_subject.split('.').collect();
    assert!(
        tokens.len() == 9 || tokens.len() == 11,
        "an ack reply subject: {ack_subject}"
    );
    tokens[tokens.len() - 4].parse().expect("a stream sequence")
}

/// The settlements seen on the wire (every ack payload but `+WPI`), by stream sequence.
fn settlements(acks: &Wire) -> BTreeMap<u64, Vec<String>> {
    let mut by = BTreeMap::<u64, Vec<String>>::new();
    for seen in acks.all() {
        let payload = String::from_utf8_lossy(&seen.payload).into_owned();
        if payload != "+WPI" {
            by.entry(stream_sequence(&seen.subject))
                .or_default()
                .push(payload);
        }
    }
    by
}

/// `--batch` on a JetStream mount: eight stored messages make one full batch whose members ask
/// for eight different things; each member is settled by its own payload's outcome (the
/// `"error"` member by `--on-error`'s default, retry), retried members come back at attempt 2
/// in later batches and are dead-lettered at the limit, and the batch sleeps for the longest
/// `sleep_ms` of its members before any of them is settled. Every handler line carries its
/// batch's number and size.
#[test]
fn scripted_batch_settles_each_jetstream_member_by_its_own_payload() {
    run(async {
        for runtime in ["tokio", "smol"] {
            let server = NatsServer::start();
            let tc = TestClient::connect(&server).await;
            tc.stream("BATCH", &["batch.>"]).await;
            tc.stream("DLQ", &["dlq.>"]).await;
            let acks = Wire::watch(&tc.client, "$JS.ACK.BATCH.>").await;
            let dead = Wire::watch(&tc.client, "dlq.batch").await;
            let payloads: [&[u8]; 8] = [
                br#""ack""#,
                br#"{"outcome":"retry"}"#,
                br#"{"outcome":"retry_after","delay_ms":50}"#,
                br#"{"outcome":"drop"}"#,
                br#"{"outcome":"reject"}"#,
                br#"{"outcome":"error"}"#,
                br#""none""#,
                br#"{"outcome":"ack","sleep_ms":1000}"#,
            ];
            for p in payloads {
                tc.js_publish("batch.in", Default::default(), p).await;
            }
            let url = server.url();
            let args = [
                "--runtime",
                runtime,
                "--url",
                &url,
                "--stream",
                "BATCH",
                "--durable",
                "w",
                "--ack-wait-ms",
                "1000",
                "--max-attempts",
                "2",
                "--dead-letter",
                "dlq.batch",
                "--batch",
                "8:300",
            ];
            let mut service = Scripted::spawn(&args, &[]);
            service.wait_for("batch=1 size=8").await;
            let printed_at = tokio::time::Instant::now();
            let expected: [(u64, &[&str]); 8] = [
                (1, &["+ACK"]),
                (2, &["-NAK", "+TERM"]),
                (3, &["-NAK {\"delay\": 50000000}", "+TERM"]),
                (4, &["+TERM"]),
                (5, &["+TERM"]),
                (6, &["-NAK", "+TERM"]),
                // No outcome twice: delivered again after ack_wait each time, and the third
                // delivery, past the limit, is dead-lettered without running (rule 3).
                (7, &["+TERM"]),
                (8, &["+ACK"]),
            ];
            let want: BTreeMap<u64, Vec<String>> = expected
                .iter()
                .map(|(s, p)| (*s, p.iter().map(|p| (*p).to_owned()).collect()))
                .collect();
            let total: usize = want.values().map(Vec::len).sum();
            eventually("every settlement", || {
                (settlements(&acks).values().map(Vec::len).sum::<usize>() >= total).then_some(())
            })
            .await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(
                settlements(&acks),
                want,
                "{runtime}: settlements by stream sequence:\n{}",
                service.printed()
            );
            let first_settled = acks
                .all()
                .iter()
                .find(|s| s.payload.as_ref() != b"+WPI")
                .map(|s| s.at)
                .unwrap();
            assert!(
                first_settled.duration_since(printed_at) >= Duration::from_millis(500),
                "{runtime}: the batch slept 1 s (its longest sleep_ms) before settling: {:?}",
                first_settled.duration_since(printed_at)
            );
            let mut dead_payloads: Vec<String> = dead
                .at_least(5)
                .await
                .iter()
                .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
                .collect();
            dead_payloads.sort();
            let mut want_dead: Vec<String> = [1, 2, 4, 5, 6]
                .iter()
                .map(|i| String::from_utf8_lossy(payloads[*i]).into_owned())
                .collect();
            want_dead.sort();
            assert_eq!(dead_payloads, want_dead, "{runtime}: the dead letters");
            service.terminate();
            assert_eq!(
                service.exit_code(PATIENCE).await,
                0,
                "{}",
                service.printed()
            );
            assert_eq!(
                report_line(&service),
                "abandoned=[] lost_copies=[] core_losses=[] recoveries=0 failure=none"
            );
            let lines = handler_lines(&service);
            let first: Vec<&str> = lines[..8].iter().map(String::as_str).collect();
            let outcomes = [
                "ack",
                "retry",
                "retry_after:50ms",
                "drop",
                "reject",
                "error",
                "none",
                "ack",
            ];
            let want_first: Vec<String> = outcomes
                .iter()
                .map(|o| {
                    format!("mount=scripted subject=batch.in attempt=1 outcome={o} batch=1 size=8")
                })
                .collect();
            assert_eq!(first, want_first, "{runtime}: the first batch, in order");
            let mut again: Vec<(&str, &str)> = lines[8..]
                .iter()
                .map(|l| (field(l, "attempt"), field(l, "outcome")))
                .collect();
            again.sort();
            assert_eq!(
                again,
                [
                    ("2", "error"),
                    ("2", "none"),
                    ("2", "retry"),
                    ("2", "retry_after:50ms")
                ],
                "{runtime}: the members without a final outcome ran once more: {lines:#?}"
            );
            assert_batches_add_up(&lines);
        }
    });
}

/// `--batch` on a Core wildcard (with the default WAIT_MS): a batch of three members, each
/// settled alone: the `retry` member gets a copy of its own with its retry count, which runs
/// in a batch of its own at attempt 2, at the limit, and is dead-lettered; the `reject` member
/// is dead-lettered at once; the `ack` member is done.
#[test]
fn scripted_batch_on_a_core_wildcard_copies_and_dead_letters_each_member_alone() {
    run(async {
        for runtime in ["tokio", "smol"] {
            let server = NatsServer::start();
            let tc = TestClient::connect(&server).await;
            let copies = Wire::watch(&tc.client, "scripted.copies").await;
            let dead = Wire::watch(&tc.client, "scripted.dlq").await;
            let url = server.url();
            let args = [
                "--runtime",
                runtime,
                "--url",
                &url,
                "--wildcard",
                "scripted.in.*",
                "--copy-subject",
                "scripted.copies",
                "--max-attempts",
                "2",
                "--dead-letter",
                "scripted.dlq",
                "--batch",
                "3",
            ];
            let mut service = Scripted::spawn(&args, &[]);
            service.wait_for("ruststream started").await;
            for (subject, payload) in [
                ("scripted.in.a", r#"{"outcome":"ack"}"#),
                ("scripted.in.b", r#"{"outcome":"retry"}"#),
                ("scripted.in.c", r#"{"outcome":"reject"}"#),
            ] {
                tc.client.publish(subject, payload.into()).await.unwrap();
            }
            tc.client.flush().await.unwrap();
            let seen = dead.at_least(2).await;
            let mut dead_payloads: Vec<String> = seen
                .iter()
                .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
                .collect();
            dead_payloads.sort();
            assert_eq!(
                dead_payloads,
                [r#"{"outcome":"reject"}"#, r#"{"outcome":"retry"}"#],
                "{runtime}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
            let copied = copies.all();
            assert_eq!(copied.len(), 1, "{runtime}: one copy: {copied:?}");
            assert_eq!(copied[0].payload.as_ref(), br#"{"outcome":"retry"}"#);
            assert!(
                copied[0]
                    .headers
                    .iter()
                    .any(|(n, v)| n.eq_ignore_ascii_case("x-ruststream-retry-count") && v == "1"),
                "{runtime}: {:?}",
                copied[0].headers
            );
            service.terminate();
            assert_eq!(
                service.exit_code(PATIENCE).await,
                0,
                "{}",
                service.printed()
            );
            let lines = handler_lines(&service);
            assert_eq!(
                lines,
                [
                    "mount=scripted subject=scripted.in.a attempt=1 outcome=ack batch=1 size=3",
                    "mount=scripted subject=scripted.in.b attempt=1 outcome=retry batch=1 size=3",
                    "mount=scripted subject=scripted.in.c attempt=1 outcome=reject batch=1 size=3",
                    "mount=scripted subject=scripted.copies attempt=2 outcome=retry batch=2 size=1",
                ],
                "{runtime}:\n{}",
                service.printed()
            );
        }
    });
}

/// `--batch` on a Core subject: a `"panic"` member panics its whole batch, after the batch's
/// sleep, and every member counts as no outcome (rule 13); the service goes on with the next
/// batch and stops cleanly, nothing left running.
#[test]
fn scripted_batch_panic_member_panics_the_whole_batch_and_the_service_goes_on() {
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
                "scripted.panics",
                "--batch",
                "2:5000",
            ];
            let mut service = Scripted::spawn(&args, &[]);
            service.wait_for("ruststream started").await;
            for payload in [r#"{"outcome":"ack","sleep_ms":200}"#, r#""panic""#] {
                tc.client
                    .publish("scripted.panics", payload.into())
                    .await
                    .unwrap();
            }
            tc.client.flush().await.unwrap();
            service
                .wait_for("a member of batch 1 asked for a panic")
                .await;
            // Caught where the batch runs, logged once: no outcome for every member.
            service
                .wait_for("batch handler panicked: every member treated as no outcome")
                .await;
            for _ in 0..2 {
                tc.client
                    .publish("scripted.panics", r#""ack""#.into())
                    .await
                    .unwrap();
            }
            tc.client.flush().await.unwrap();
            service.wait_for("outcome=ack batch=2 size=2").await;
            service.terminate();
            assert_eq!(
                service.exit_code(PATIENCE).await,
                0,
                "{}",
                service.printed()
            );
            assert_eq!(
                report_line(&service),
                "abandoned=[] lost_copies=[] core_losses=[] recoveries=0 failure=none",
                "{runtime}"
            );
            let lines = handler_lines(&service);
            assert_eq!(
                lines,
                [
                    "mount=scripted subject=scripted.panics attempt=1 outcome=ack batch=1 size=2",
                    "mount=scripted subject=scripted.panics attempt=1 outcome=panic batch=1 size=2",
                    "mount=scripted subject=scripted.panics attempt=1 outcome=ack batch=2 size=2",
                    "mount=scripted subject=scripted.panics attempt=1 outcome=ack batch=2 size=2",
                ],
                "{runtime}:\n{}",
                service.printed()
            );
        }
    });
}

#[test]
fn scripted_batch_refusals_name_what_is_wrong() {
    run(async {
        let server = NatsServer::start();
        let url = server.url();
        let cases: [(&[&str], i32, &str); 7] = [
            (
                &["--name", "b1", "--subject", "a", "--batch", "0"],
                2,
                "--batch: MAX must be at least 1",
            ),
            (
                &["--name", "b2", "--subject", "a", "--batch", "many"],
                2,
                "--batch: MAX `many` is not a number: invalid digit",
            ),
            (
                &["--name", "b3", "--subject", "a", "--batch", "5:soon"],
                2,
                "--batch: WAIT_MS `soon` is not a number of milliseconds: invalid digit",
            ),
            (
                &["--name", "b4", "--subject", "a", "--batch", "0:100"],
                2,
                "--batch: MAX must be at least 1",
            ),
            (
                &[
                    "--name",
                    "b5",
                    "--subject",
                    "a",
                    "--batch",
                    "5",
                    "--batch",
                    "6:10",
                ],
                2,
                "--batch given twice",
            ),
            (
                &["--name", "b6", "--subject", "a", "--batch"],
                2,
                "--batch needs a value",
            ),
            (
                &[
                    "--name",
                    "b7",
                    "--subject",
                    "a",
                    "--url",
                    &url,
                    "--batch",
                    "100001",
                ],
                1,
                "its batch max 100001 is above the most a batch may hold, 100000",
            ),
        ];
        for (args, code, why) in cases {
            assert_refused(args, code, why).await;
        }
    });
}

/// The settlement of stream sequence `seq` seen on the wire (the first ack payload of that
/// sequence other than `+WPI`): its payload and when it was seen.
fn settled_at(acks: &Wire, seq: u64) -> (String, tokio::time::Instant) {
    acks.all()
        .iter()
        .find(|s| stream_sequence(&s.subject) == seq && s.payload.as_ref() != b"+WPI")
        .map(|s| (String::from_utf8_lossy(&s.payload).into_owned(), s.at))
        .unwrap_or_else(|| panic!("no settlement of stream sequence {seq}"))
}

/// The delivered count in a JetStream ack reply subject (the server's count of deliveries of
/// the message, 9- or 11-token form).
fn delivered_count(ack_subject: &str) -> u64 {
    let tokens: Vec<&str> = ack_subject.split('.').collect();
    tokens[tokens.len() - 5].parse().expect("a delivered count")
}

/// `--key-token 1` on a JetStream mount (rule 24): six stored messages of two keys,
/// interleaved, each sleeping 400 ms. The deliveries of one key run one at a time, in the
/// order they were stored (each +ACK of a key at least a run after the previous one), while
/// the two keys run at once (their lines come in pairs, one of each key); every line shows its
/// key.
#[test]
fn scripted_key_token_runs_each_key_one_at_a_time_in_arrival_order() {
    run(async {
        for runtime in ["tokio", "smol"] {
            let server = NatsServer::start();
            let tc = TestClient::connect(&server).await;
            tc.stream("KEYS", &["keys.>"]).await;
            let acks = Wire::watch(&tc.client, "$JS.ACK.KEYS.>").await;
            // Stream sequences 1 to 6.
            let subjects = [
                "keys.a.1", "keys.b.1", "keys.a.2", "keys.b.2", "keys.a.3", "keys.b.3",
            ];
            for subject in subjects {
                tc.js_publish(
                    subject,
                    Default::default(),
                    br#"{"outcome":"ack","sleep_ms":400}"#,
                )
                .await;
            }
            let url = server.url();
            let args = [
                "--runtime",
                runtime,
                "--url",
                &url,
                "--stream",
                "KEYS",
                "--durable",
                "w",
                "--key-token",
                "1",
            ];
            let mut service = Scripted::spawn(&args, &[]);
            eventually("six +ACKs", || {
                (acks.payloads().iter().filter(|p| *p == "+ACK").count() == 6).then_some(())
            })
            .await;
            service.terminate();
            assert_eq!(
                service.exit_code(PATIENCE).await,
                0,
                "{}",
                service.printed()
            );
            let lines = handler_lines(&service);
            assert_eq!(lines.len(), 6, "{runtime}: {lines:#?}");
            for line in &lines {
                let subject = field(line, "subject");
                let key = subject.split('.').nth(1).unwrap();
                assert_eq!(
                    line,
                    &format!("mount=scripted subject={subject} attempt=1 outcome=ack key={key}"),
                    "{runtime}"
                );
            }
            for key in ["a", "b"] {
                let order: Vec<&str> = lines
                    .iter()
                    .filter(|l| field(l, "key") == key)
                    .map(|l| field(l, "subject"))
                    .collect();
                let want: Vec<String> = (1..=3).map(|n| format!("keys.{key}.{n}")).collect();
                assert_eq!(order, want, "{runtime}: key {key} in arrival order");
            }
            for (pair, n) in lines.chunks(2).zip(1..) {
                let mut subjects: Vec<&str> = pair.iter().map(|l| field(l, "subject")).collect();
                subjects.sort_unstable();
                assert_eq!(
                    subjects,
                    [format!("keys.a.{n}"), format!("keys.b.{n}")],
                    "{runtime}: the two keys run at once, each one at a time: {lines:#?}"
                );
            }
            let at = |seq| settled_at(&acks, seq).1;
            // a: sequences 1, 3, 5; b: 2, 4, 6. A run sleeps 400 ms: the next of its key
            // starts after it is settled, so is settled at least 400 ms later.
            for (earlier, later) in [(1, 3), (3, 5), (2, 4), (4, 6)] {
                let gap = at(later).duration_since(at(earlier));
                assert!(
                    gap >= Duration::from_millis(350),
                    "{runtime}: sequence {later} ran after {earlier} was settled: {gap:?} apart"
                );
            }
            let (a1, b1) = (at(1), at(2));
            let apart = a1.max(b1).duration_since(a1.min(b1));
            assert!(
                apart < Duration::from_millis(300),
                "{runtime}: keys a and b ran at once: first runs settled {apart:?} apart"
            );
        }
    });
}

/// `--strict-order` (rule 24) on a JetStream mount: a `retry` of key a runs again in place
/// after the backoff's 600 ms, twice, with no `-NAK` (the server delivers it once, and its
/// lease is renewed with `+WPI` through the delays), then takes the at-limit path (dead letter,
/// `+TERM`) at its third attempt; only then does the key's next delivery run, while key b ran
/// at once. The lines show each attempt and the key.
#[test]
fn scripted_strict_order_runs_a_retry_again_in_place_holding_its_key() {
    run(async {
        for runtime in ["tokio", "smol"] {
            let server = NatsServer::start();
            let tc = TestClient::connect(&server).await;
            tc.stream("STRICT", &["strict.>"]).await;
            tc.stream("DLQ", &["dlq.>"]).await;
            let acks = Wire::watch(&tc.client, "$JS.ACK.STRICT.>").await;
            let dead = Wire::watch(&tc.client, "dlq.strict").await;
            // Stream sequences 1, 2, 3.
            for (subject, payload) in [
                ("strict.a.1", &br#"{"outcome":"retry"}"#[..]),
                ("strict.a.2", br#""ack""#),
                ("strict.b.1", br#""ack""#),
            ] {
                tc.js_publish(subject, Default::default(), payload).await;
            }
            let url = server.url();
            let args = [
                "--runtime",
                runtime,
                "--url",
                &url,
                "--stream",
                "STRICT",
                "--durable",
                "w",
                "--ack-wait-ms",
                "1000",
                "--max-attempts",
                "3",
                "--backoff-ms",
                "600",
                "--dead-letter",
                "dlq.strict",
                "--key-token",
                "1",
                "--strict-order",
            ];
            let mut service = Scripted::spawn(&args, &[]);
            eventually("three settlements", || {
                (settlements(&acks).values().map(Vec::len).sum::<usize>() >= 3).then_some(())
            })
            .await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let want: BTreeMap<u64, Vec<String>> = [(1, "+TERM"), (2, "+ACK"), (3, "+ACK")]
                .into_iter()
                .map(|(s, p)| (s, vec![p.to_owned()]))
                .collect();
            assert_eq!(
                settlements(&acks),
                want,
                "{runtime}: no -NAK, the retry ran in place:\n{}",
                service.printed()
            );
            let seen = acks.all();
            let of_a1: Vec<_> = seen
                .iter()
                .filter(|s| stream_sequence(&s.subject) == 1)
                .collect();
            assert!(
                of_a1.iter().all(|s| delivered_count(&s.subject) == 1),
                "{runtime}: the server delivered it once: {:?}",
                of_a1.iter().map(|s| &s.subject).collect::<Vec<_>>()
            );
            assert!(
                of_a1.iter().any(|s| s.payload.as_ref() == b"+WPI"),
                "{runtime}: its lease renewed through the delays: {:?}",
                acks.payloads()
            );
            let (b1, a1, a2) = (
                settled_at(&acks, 3).1,
                settled_at(&acks, 1).1,
                settled_at(&acks, 2).1,
            );
            assert!(
                a1.duration_since(b1) >= Duration::from_millis(1000),
                "{runtime}: key b was not held back, and a's retry waited 600 ms twice: {:?}",
                a1.duration_since(b1)
            );
            assert!(
                a2 > a1,
                "{runtime}: a's next delivery ran after its settlement"
            );
            let dead_letters = dead.at_least(1).await;
            assert_eq!(
                dead_letters[0].payload.as_ref(),
                br#"{"outcome":"retry"}"#,
                "{runtime}"
            );
            let info = tc.consumer_info("STRICT", "w").await;
            assert_eq!(info.num_redelivered, 0, "{runtime}: {info:?}");
            service.terminate();
            assert_eq!(
                service.exit_code(PATIENCE).await,
                0,
                "{}",
                service.printed()
            );
            let lines = handler_lines(&service);
            let of_key = |key: &str| -> Vec<&str> {
                lines
                    .iter()
                    .filter(|l| field(l, "key") == key)
                    .map(String::as_str)
                    .collect()
            };
            assert_eq!(
                of_key("a"),
                [
                    "mount=scripted subject=strict.a.1 attempt=1 outcome=retry key=a",
                    "mount=scripted subject=strict.a.1 attempt=2 outcome=retry key=a",
                    "mount=scripted subject=strict.a.1 attempt=3 outcome=retry key=a",
                    "mount=scripted subject=strict.a.2 attempt=1 outcome=ack key=a",
                ],
                "{runtime}: in place, a.2 waiting:\n{}",
                service.printed()
            );
            assert_eq!(
                of_key("b"),
                ["mount=scripted subject=strict.b.1 attempt=1 outcome=ack key=b"],
                "{runtime}"
            );
            assert_eq!(lines.len(), 5, "{runtime}: {lines:#?}");
        }
    });
}

/// `--key-token` with `--batch` on a Core wildcard: a batch takes one delivery of each key
/// (rule 24), so the second of key a runs in the next batch; with `--strict-order` a
/// `retry_after` of key a runs again in place (in a batch of its own) with no Core copy, and
/// the key's next delivery only after it.
#[test]
fn scripted_key_token_on_a_core_wildcard_batch_with_strict_order() {
    run(async {
        for runtime in ["tokio", "smol"] {
            let server = NatsServer::start();
            let tc = TestClient::connect(&server).await;
            let copies = Wire::watch(&tc.client, "keyed.copies").await;
            let url = server.url();
            let args = [
                "--runtime",
                runtime,
                "--url",
                &url,
                "--wildcard",
                "keyed.*.in",
                "--copy-subject",
                "keyed.copies",
                "--max-attempts",
                "3",
                "--key-token",
                "1",
                "--strict-order",
                "--batch",
                "4:200",
            ];
            let mut service = Scripted::spawn(&args, &[]);
            service.wait_for("ruststream started").await;
            for (subject, payload) in [
                (
                    "keyed.a.in",
                    r#"{"outcome":"retry_after","delay_ms":100,"n":1}"#,
                ),
                ("keyed.b.in", r#"{"outcome":"ack","n":1}"#),
                ("keyed.a.in", r#"{"outcome":"ack","n":2}"#),
            ] {
                tc.client.publish(subject, payload.into()).await.unwrap();
            }
            tc.client.flush().await.unwrap();
            service.wait_for("key=a batch=3 size=1").await;
            service.wait_for("key=a batch=4 size=1").await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(
                copies.all().is_empty(),
                "{runtime}: no copy: {:?}",
                copies.payloads()
            );
            service.terminate();
            assert_eq!(
                service.exit_code(PATIENCE).await,
                0,
                "{}",
                service.printed()
            );
            assert_eq!(
                handler_lines(&service),
                [
                    "mount=scripted subject=keyed.a.in attempt=1 outcome=retry_after:100ms key=a batch=1 size=2",
                    "mount=scripted subject=keyed.b.in attempt=1 outcome=ack key=b batch=1 size=2",
                    "mount=scripted subject=keyed.a.in attempt=2 outcome=retry_after:100ms key=a batch=2 size=1",
                    "mount=scripted subject=keyed.a.in attempt=3 outcome=retry_after:100ms key=a batch=3 size=1",
                    "mount=scripted subject=keyed.a.in attempt=1 outcome=ack key=a batch=4 size=1",
                ],
                "{runtime}:\n{}",
                service.printed()
            );
        }
    });
}

#[test]
fn scripted_key_and_strict_order_refusals_name_what_is_wrong() {
    run(async {
        let server = NatsServer::start();
        let url = server.url();
        let cases: [(&[&str], i32, &str); 9] = [
            (
                &["--name", "k1", "--subject", "a.b", "--key-token", "x"],
                2,
                "--key-token: N `x` is not a number (a subject token's index, from 0)",
            ),
            (
                &["--name", "k2", "--subject", "a.b", "--key-token", "-1"],
                2,
                "--key-token: N `-1` is not a number (a subject token's index, from 0)",
            ),
            (
                &[
                    "--name",
                    "k3",
                    "--subject",
                    "a.b",
                    "--key-token",
                    "1",
                    "--key-token",
                    "0",
                ],
                2,
                "--key-token given twice",
            ),
            (
                &["--name", "k4", "--subject", "a.b", "--key-token"],
                2,
                "--key-token needs a value",
            ),
            (
                &[
                    "--name",
                    "k5",
                    "--subject",
                    "a.b",
                    "--key-token",
                    "1",
                    "--strict-order",
                    "--strict-order",
                ],
                2,
                "--strict-order given twice",
            ),
            (
                &[
                    "--name",
                    "k6",
                    "--subject",
                    "a.b",
                    "--max-attempts",
                    "3",
                    "--strict-order",
                ],
                2,
                "--strict-order needs --key-token",
            ),
            (
                &[
                    "--name",
                    "k7",
                    "--stream",
                    "S",
                    "--durable",
                    "d",
                    "--strict-order",
                ],
                2,
                "--strict-order needs --key-token",
            ),
            (
                &[
                    "--name",
                    "k8",
                    "--subject",
                    "a.b",
                    "--url",
                    &url,
                    "--key-token",
                    "1",
                    "--strict-order",
                ],
                1,
                "strict order needs `max_attempts`",
            ),
            (
                &[
                    "--name",
                    "k9",
                    "--runtime",
                    "smol",
                    "--wildcard",
                    "a.*",
                    "--copy-subject",
                    "c",
                    "--url",
                    &url,
                    "--key-token",
                    "1",
                    "--strict-order",
                ],
                1,
                "strict order needs `max_attempts`",
            ),
        ];
        for (args, code, why) in cases {
            assert_refused(args, code, why).await;
        }
    });
}

/// Bad priority-group flags are refused before anything connects (exit 2), naming the mount:
/// a policy that is neither `pinned` nor `overflow[:MIN_PENDING]`, a threshold that is not a
/// number, a group on a Core mount, a policy or timeout without a group, a zero timeout.
#[test]
fn scripted_priority_flag_refusals_exit_2() {
    run(async {
        let cases: [(&[&str], i32, &str); 6] = [
            (
                &[
                    "--name",
                    "p1",
                    "--stream",
                    "S",
                    "--durable",
                    "d",
                    "--priority-group",
                    "g",
                    "--priority-policy",
                    "sticky",
                ],
                2,
                "--priority-policy: priority policy `sticky`: expected `pinned`, `overflow` or \
                 `overflow:MIN_PENDING`",
            ),
            (
                &[
                    "--name",
                    "p2",
                    "--stream",
                    "S",
                    "--durable",
                    "d",
                    "--priority-group",
                    "g",
                    "--priority-policy",
                    "overflow:many",
                ],
                2,
                "the overflow threshold `many` is not a whole number of pending messages",
            ),
            (
                &["--name", "p3", "--subject", "a", "--priority-group", "g"],
                2,
                "--priority-group is for JetStream mounts (--stream)",
            ),
            (
                &[
                    "--name",
                    "p4",
                    "--stream",
                    "S",
                    "--durable",
                    "d",
                    "--priority-policy",
                    "pinned",
                ],
                2,
                "--priority-policy and --priority-timeout-ms go with --priority-group",
            ),
            (
                &[
                    "--name",
                    "p5",
                    "--stream",
                    "S",
                    "--durable",
                    "d",
                    "--priority-timeout-ms",
                    "2000",
                ],
                2,
                "--priority-policy and --priority-timeout-ms go with --priority-group",
            ),
            (
                &[
                    "--name",
                    "p6",
                    "--stream",
                    "S",
                    "--durable",
                    "d",
                    "--priority-group",
                    "g",
                    "--priority-timeout-ms",
                    "0",
                ],
                2,
                "--priority-timeout-ms must be at least 1",
            ),
        ];
        for (args, code, why) in cases {
            assert_refused(args, code, why).await;
        }
    });
}

/// `--service NAME:VERSION` (issue 42, item 3): the app answers `$SRV.INFO` with its Core mount
/// as its endpoint, in queue group "q", and `$SRV.STATS` counts a request and its run time
/// with no `metrics` recorder installed (the example installs none); a version that is not
/// semantic is refused at start-up (exit 1), naming it.
#[test]
fn scripted_service_flag_answers_srv_info_and_stats() {
    use ruststream_tokio::async_nats::service::{Info, Stats};

    async fn ask<T: serde::de::DeserializeOwned>(tc: &TestClient, subject: &str) -> T {
        let answer = tc
            .client
            .request(subject.to_owned(), bytes::Bytes::new())
            .await
            .unwrap_or_else(|e| panic!("no answer on {subject}: {e}"));
        serde_json::from_slice(&answer.payload).unwrap()
    }

    run(async {
        let server = NatsServer::start();
        let url = server.url();
        let tc = TestClient::connect(&server).await;
        let args = [
            "--url",
            &url,
            "--subject",
            "scripted.svc",
            "--name",
            "take",
            "--service",
            "orders:1.2.0",
        ];
        let mut service = Scripted::spawn(&args, &[]);
        service.wait_for("ruststream started").await;
        let info: Info = ask(&tc, "$SRV.INFO.orders").await;
        assert_eq!(
            (info.name.as_str(), info.version.as_str()),
            ("orders", "1.2.0")
        );
        let endpoints: Vec<(&str, &str, &str)> = info
            .endpoints
            .iter()
            .map(|e| (e.name.as_str(), e.subject.as_str(), e.queue_group.as_str()))
            .collect();
        assert_eq!(endpoints, [("take", "scripted.svc", "q")]);

        tc.client
            .publish("scripted.svc", r#"{"outcome":"ack","sleep_ms":20}"#.into())
            .await
            .unwrap();
        tc.client.flush().await.unwrap();
        service
            .wait_for("mount=take subject=scripted.svc attempt=1 outcome=ack")
            .await;
        let stats = loop {
            let stats: Stats = ask(&tc, "$SRV.STATS.orders").await;
            if stats.endpoints[0].requests == 1 {
                break stats;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            stats.endpoints[0].processing_time >= Duration::from_millis(20),
            "timed without a recorder: {:?}",
            stats.endpoints[0].processing_time
        );
        service.terminate();
        assert_eq!(
            service.exit_code(PATIENCE).await,
            0,
            "{}",
            service.printed()
        );

        let refused = [
            "--url",
            &url,
            "--subject",
            "scripted.svc",
            "--service",
            "orders:1.2",
        ];
        let mut service = Scripted::spawn(&refused, &[]);
        assert_eq!(
            service.exit_code(PATIENCE).await,
            1,
            "{}",
            service.printed()
        );
        assert!(
            service
                .printed()
                .contains("the version `1.2` is not a semantic version"),
            "{}",
            service.printed()
        );
    });
}
