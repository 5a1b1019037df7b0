//! `ruststream dlq` end to end against a real nats-server (issue 40): dead letters made by a
//! running app, then listed, shown, replayed and purged by the command, run in the process
//! (`ruststream_tools::run`) with its output captured; what it did is read back from the server.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::{self, stream::Config};
use ruststream_tests::NatsServer;
use ruststream_tokio::{App, Delivery, Mount, Outcome};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// What a run of the command printed, and its exit status.
struct Ran {
    code: u8,
    out: String,
    err: String,
}

impl std::fmt::Debug for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- out\n{}--- err\n{}",
            self.code, self.out, self.err
        )
    }
}

/// Runs `ruststream --url <server> <args>` with `input` as its standard input.
async fn cli_with(server: &NatsServer, args: &[&str], input: &str) -> Ran {
    let mut full = vec!["ruststream".to_owned(), "--url".to_owned(), server.url()];
    full.extend(args.iter().map(|a| (*a).to_owned()));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut input = input.as_bytes();
    let code = ruststream_tools::run(full, &mut out, &mut err, &mut input, false).await;
    Ran {
        code,
        out: String::from_utf8(out).unwrap(),
        err: String::from_utf8(err).unwrap(),
    }
}

async fn cli(server: &NatsServer, args: &[&str]) -> Ran {
    cli_with(server, args, "").await
}

fn stream(name: &str, subjects: &[&str]) -> Config {
    Config {
        name: name.to_owned(),
        subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    }
}

async fn count(js: &jetstream::Context, name: &str) -> u64 {
    js.get_stream(name)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .messages
}

async fn wait_for(js: &jetstream::Context, name: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let have = count(js, name).await;
        if have >= n {
            assert_eq!(have, n, "{name} holds more than expected");
            return;
        }
        assert!(Instant::now() < deadline, "{name}: {have} of {n} stored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The messages of stream `name`: (sequence, subject, headers, payload).
async fn messages(js: &jetstream::Context, name: &str) -> Vec<(u64, String, HeaderMap, Vec<u8>)> {
    let s = js.get_stream(name).await.unwrap();
    let info = s.get_info().await.unwrap();
    let mut out = Vec::new();
    for seq in info.state.first_sequence..=info.state.last_sequence {
        if let Ok(m) = s.get_raw_message(seq).await {
            out.push((
                m.sequence,
                m.subject.to_string(),
                m.headers,
                m.payload.to_vec(),
            ));
        }
    }
    out
}

/// A server, the streams ORDERS (orders.*) and DLQ (dlq.orders), and an app whose mount
/// `orders` (provenance on, one attempt) rejects `reject`, fails on `fail` and acks anything
/// else; its dead letters are made from five orders, then the app stops. Returns the server
/// and a JetStream context on it; DLQ holds, in order: 1 `reject-1` (rejected, with header
/// `Trace-Id: t1`), 2 `fail-2` (handler-error), 3 `reject-3` (rejected, on orders.eu), 4 the
/// bytes 0xff 0x00 (rejected), 5 `fail-5` (handler-error).
async fn dead_letters() -> (NatsServer, jetstream::Context) {
    let server = NatsServer::start();
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client);
    let running = App::new(&server.url())
        .stream(stream("ORDERS", &["orders.*"]))
        .stream(stream("DLQ", &["dlq.orders"]))
        .mount(
            Mount::jetstream("orders", "ORDERS", "worker")
                .max_attempts(1)
                .dead_letter("dlq.orders")
                .provenance(),
            |d: Delivery| async move {
                let payload = d.payload.to_vec();
                if payload.starts_with(b"fail") {
                    Err("database down".to_owned())
                } else if payload.starts_with(b"ok") {
                    Ok(Outcome::Ack)
                } else {
                    Ok(Outcome::Reject)
                }
            },
        )
        .start()
        .await
        .expect("the app starts");
    let mut traced = HeaderMap::new();
    traced.insert("Trace-Id", "t1");
    js.publish_with_headers("orders.new", traced, "reject-1".into())
        .await
        .unwrap()
        .await
        .unwrap();
    for (subject, payload) in [
        ("orders.new", &b"fail-2"[..]),
        ("orders.eu", b"reject-3"),
        ("orders.new", &[0xff, 0x00]),
        ("orders.new", b"fail-5"),
    ] {
        js.publish(subject, payload.to_vec().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    wait_for(&js, "DLQ", 5).await;
    running.shutdown().await;
    (server, js)
}

/// A server with the streams DLQ (`dlq.>`) and WORK (`work.>`), empty; a client on it.
async fn dlq_and_work() -> (NatsServer, async_nats::Client, jetstream::Context) {
    let server = NatsServer::start();
    let client = async_nats::connect(server.url()).await.unwrap();
    let js = jetstream::new(client.clone());
    js.create_stream(stream("DLQ", &["dlq.>"])).await.unwrap();
    js.create_stream(stream("WORK", &["work.>"])).await.unwrap();
    (server, client, js)
}

#[test]
fn list_shows_every_dead_letter_with_its_provenance_and_filters_them() {
    rt().block_on(async {
        let (server, _js) = dead_letters().await;
        let ran = cli(&server, &["dlq", "list", "DLQ"]).await;
        assert_eq!(ran.code, 0, "{ran:?}");
        let lines: Vec<&str> = ran.out.lines().collect();
        assert_eq!(lines.len(), 6, "a head and five dead letters: {ran:?}");
        assert!(lines[0].starts_with("SEQ\tSTORED\tSUBJECT"), "{ran:?}");
        let first: Vec<&str> = lines[1].split('\t').collect();
        assert_eq!(first[0], "1");
        assert_eq!(
            &first[2..],
            &["orders.new", "orders", "ORDERS#1", "1", "rejected", "-"],
            "{ran:?}"
        );
        let second: Vec<&str> = lines[2].split('\t').collect();
        assert_eq!(
            &second[2..],
            &[
                "orders.new",
                "orders",
                "ORDERS#2",
                "1",
                "handler-error",
                "database down"
            ]
        );
        assert!(
            ran.err
                .contains("5 dead letter(s) listed, of 5 read from DLQ"),
            "{ran:?}"
        );

        // Filters, each alone and together.
        let reason = cli(
            &server,
            &["dlq", "list", "DLQ", "--reason", "handler-error"],
        )
        .await;
        let seqs = |r: &Ran| -> Vec<String> {
            r.out
                .lines()
                .skip(1)
                .map(|l| l.split('\t').next().unwrap().to_owned())
                .collect()
        };
        assert_eq!(seqs(&reason), ["2", "5"], "{reason:?}");
        let subject = cli(&server, &["dlq", "list", "DLQ", "--subject", "orders.eu"]).await;
        assert_eq!(seqs(&subject), ["3"], "{subject:?}");
        let both = cli(
            &server,
            &[
                "dlq",
                "list",
                "DLQ",
                "--reason",
                "rejected",
                "--from-seq",
                "2",
            ],
        )
        .await;
        assert_eq!(seqs(&both), ["3", "4"], "{both:?}");
        let recent = cli(&server, &["dlq", "list", "DLQ", "--since", "1h"]).await;
        assert_eq!(seqs(&recent).len(), 5, "{recent:?}");

        // One JSON object per line.
        let json = cli(
            &server,
            &["dlq", "list", "DLQ", "--json", "--mount", "orders"],
        )
        .await;
        assert_eq!(json.code, 0, "{json:?}");
        let objects: Vec<serde_json::Value> = json
            .out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(objects.len(), 5);
        assert_eq!(objects[1]["provenance"]["reason"], "handler-error");
        assert_eq!(objects[1]["provenance"]["stream_sequence"], 2);
        assert_eq!(objects[1]["dead_letter_subject"], "dlq.orders");
    });
}

#[test]
fn bad_input_gets_an_error_naming_what_is_wrong() {
    rt().block_on(async {
        let (server, _js) = dead_letters().await;
        let cases: [(&[&str], &str); 8] = [
            (&["dlq", "list", "NOPE"], "no stream `NOPE`"),
            (&["dlq", "list", "a.b"], "`a.b` is not a stream name"),
            (
                &["dlq", "list", "ORDERS"],
                "none is a ruststream dead letter",
            ),
            (
                &["dlq", "list", "DLQ", "--mount", "payments"],
                "no dead letter in `DLQ` matches --mount payments (5 read)",
            ),
            (
                &["dlq", "replay", "DLQ", "--reason", "limit"],
                "no dead letter in `DLQ` matches --reason limit",
            ),
            (&["dlq", "show", "DLQ", "99"], "has no message 99"),
            (&["dlq", "show", "DLQ", "0"], "sequences start at 1"),
            (
                &["dlq", "purge", "DLQ", "--subject", "nothing.here", "--yes"],
                "matches --subject nothing.here",
            ),
        ];
        for (args, says) in cases {
            let ran = cli(&server, args).await;
            assert_eq!(ran.code, 1, "{args:?}: {ran:?}");
            assert!(
                ran.err.contains(says),
                "{args:?} should say {says:?}: {ran:?}"
            );
        }
        // The command line itself: status 2, with clap's message.
        let unknown = cli(&server, &["dlq", "list", "DLQ", "--reason", "tired"]).await;
        assert_eq!(unknown.code, 2, "{unknown:?}");
        assert!(
            unknown.err.contains("unknown reason `tired`"),
            "{unknown:?}"
        );
        let time = cli(&server, &["dlq", "list", "DLQ", "--since", "yesterday"]).await;
        assert_eq!(time.code, 2, "{time:?}");
        assert!(time.err.contains("neither an RFC 3339 time"), "{time:?}");
        // No server: says so, names no URL.
        let mut args = vec!["ruststream", "--url", "nats://user:secret@127.0.0.1:1"];
        args.extend(["dlq", "list", "DLQ"]);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = ruststream_tools::run(args, &mut out, &mut err, &mut &b""[..], false).await;
        let err = String::from_utf8(err).unwrap();
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("cannot connect"), "{err}");
        assert!(!err.contains("secret"), "a credential printed: {err}");
    });
}

#[test]
fn show_prints_one_dead_letter_in_full_and_binary_payloads_safely() {
    rt().block_on(async {
        let (server, _js) = dead_letters().await;
        let ran = cli(&server, &["dlq", "show", "DLQ", "1"]).await;
        assert_eq!(ran.code, 0, "{ran:?}");
        for says in [
            "dead letter 1 of DLQ",
            "came on orders.new to mount orders",
            "from stream ORDERS sequence 1, consumer worker",
            "reason rejected",
            "  Trace-Id: t1",
            "  Ruststream-Reason: rejected",
            "payload (8 bytes, text):\nreject-1",
        ] {
            assert!(ran.out.contains(says), "should say {says:?}: {ran:?}");
        }
        let binary = cli(&server, &["dlq", "show", "DLQ", "4"]).await;
        assert!(
            binary
                .out
                .contains("payload (2 bytes, binary, base64):\n/wA="),
            "{binary:?}"
        );
        let json = cli(&server, &["dlq", "show", "DLQ", "4", "--json"]).await;
        let v: serde_json::Value = serde_json::from_str(json.out.trim()).unwrap();
        assert_eq!(v["payload_base64"], "/wA=");
        assert!(
            v["headers"]
                .as_array()
                .unwrap()
                .iter()
                .any(|h| h[0] == "Ruststream-Mount")
        );
    });
}

#[test]
fn replay_restores_each_dead_letter_and_twice_stores_nothing_twice() {
    rt().block_on(async {
        let (server, js) = dead_letters().await;
        let before = count(&js, "ORDERS").await;
        assert_eq!(before, 5);
        // A dry run sends nothing.
        let dry = cli(&server, &["dlq", "replay", "DLQ", "--dry-run"]).await;
        assert_eq!(dry.code, 0, "{dry:?}");
        assert!(
            dry.out.contains("would replay 1 to orders.new (stored by stream ORDERS, confirmed; headers Nats-Msg-Id, Trace-Id)"),
            "{dry:?}"
        );
        assert!(dry.out.contains("5 of 5 selected"), "{dry:?}");
        assert_eq!(count(&js, "ORDERS").await, before);

        let ran = cli(&server, &["dlq", "replay", "DLQ", "--reason", "rejected"]).await;
        assert_eq!(ran.code, 0, "{ran:?}");
        assert!(
            ran.out.contains("3 selected; 3 stored, 0 stored before"),
            "{ran:?}"
        );
        wait_for(&js, "ORDERS", before + 3).await;
        let stored = messages(&js, "ORDERS").await;
        let replayed: Vec<_> = stored.iter().skip(5).collect();
        assert_eq!(replayed[0].1, "orders.new");
        assert_eq!(replayed[0].3, b"reject-1");
        assert_eq!(replayed[1].1, "orders.eu", "back to its own subject");
        let h = &replayed[0].2;
        assert_eq!(h.get("Trace-Id").map(|v| v.as_str()), Some("t1"), "kept");
        assert!(
            h.iter()
                .all(|(n, _)| !n.to_string().starts_with("Ruststream-")),
            "provenance removed: {h:?}"
        );
        let id = h.get("Nats-Msg-Id").map(|v| v.as_str().to_owned()).unwrap();
        assert!(id.starts_with("ruststream.replay.DLQ.1."), "{id}");

        // Again: the stream takes each for a duplicate, stores nothing.
        let again = cli(&server, &["dlq", "replay", "DLQ", "--reason", "rejected"]).await;
        assert_eq!(again.code, 0, "{again:?}");
        assert!(again.out.contains("0 stored, 3 stored before"), "{again:?}");
        assert!(
            again.out.contains("replayed 1 to orders.new: stored before as ORDERS#6 (a duplicate"),
            "{again:?}"
        );
        assert_eq!(count(&js, "ORDERS").await, before + 3);
        assert_eq!(
            count(&js, "DLQ").await,
            5,
            "nothing deleted without --delete"
        );
    });
}

#[test]
fn delete_removes_only_dead_letters_whose_replay_was_confirmed() {
    rt().block_on(async {
        let (server, js) = dead_letters().await;
        // Dead letters 2 and 5 to a Core subject (no stream stores it): unconfirmed, kept.
        let core = cli(
            &server,
            &[
                "dlq",
                "replay",
                "DLQ",
                "--reason",
                "handler-error",
                "--to",
                "audit.core",
                "--delete",
            ],
        )
        .await;
        assert_eq!(core.code, 0, "{core:?}");
        assert!(core.out.contains("2 published on Core NATS"), "{core:?}");
        assert!(
            core.out
                .contains("replayed 2 to audit.core: published on Core NATS, unconfirmed\n"),
            "{core:?}"
        );
        assert!(core.out.contains("0 dead letter(s) deleted"), "{core:?}");
        assert_eq!(count(&js, "DLQ").await, 5);
        // The rejected ones into ORDERS: confirmed, deleted.
        let stored = cli(
            &server,
            &["dlq", "replay", "DLQ", "--reason", "rejected", "--delete"],
        )
        .await;
        assert_eq!(stored.code, 0, "{stored:?}");
        assert!(
            stored.out.contains("3 dead letter(s) deleted"),
            "{stored:?}"
        );
        let left: Vec<u64> = messages(&js, "DLQ").await.iter().map(|m| m.0).collect();
        assert_eq!(left, [2, 5]);
        assert_eq!(count(&js, "ORDERS").await, 8);
    });
}

#[test]
fn a_replay_that_fails_half_way_loses_nothing_and_resumes() {
    rt().block_on(async {
        let (server, js) = dead_letters().await;
        // A target stream that takes two messages, then refuses (discard new).
        js.create_stream(Config {
            name: "AUDIT".to_owned(),
            subjects: vec!["audit.>".to_owned()],
            max_messages: 2,
            discard: jetstream::stream::DiscardPolicy::New,
            ..Default::default()
        })
        .await
        .unwrap();
        let args = ["dlq", "replay", "DLQ", "--to", "audit.orders", "--delete"];
        let first = cli(&server, &args).await;
        assert_eq!(first.code, 1, "{first:?}");
        assert!(first.err.contains("stopped at dead letter 3"), "{first:?}");
        assert!(first.err.contains("--from-seq 3"), "{first:?}");
        assert!(first.out.contains("2 stored"), "{first:?}");
        // Nothing lost: the two replayed are deleted, the rest kept.
        let left: Vec<u64> = messages(&js, "DLQ").await.iter().map(|m| m.0).collect();
        assert_eq!(left, [3, 4, 5]);
        // Room made; the same command, resumed where it stopped.
        let mut audit = js.get_stream("AUDIT").await.unwrap();
        let mut config = audit.info().await.unwrap().config.clone();
        config.max_messages = 100;
        js.update_stream(config).await.unwrap();
        let mut resumed: Vec<&str> = args.to_vec();
        resumed.extend(["--from-seq", "3"]);
        let second = cli(&server, &resumed).await;
        assert_eq!(second.code, 0, "{second:?}");
        assert!(second.out.contains("3 selected; 3 stored"), "{second:?}");
        assert_eq!(count(&js, "AUDIT").await, 5, "each dead letter stored once");
        assert_eq!(count(&js, "DLQ").await, 0);
        // Every one carries its own replay id: five distinct.
        let mut ids: Vec<String> = messages(&js, "AUDIT")
            .await
            .iter()
            .map(|m| m.2.get("Nats-Msg-Id").unwrap().as_str().to_owned())
            .collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 5);
    });
}

#[test]
fn a_dead_letter_without_provenance_goes_back_only_where_it_is_told() {
    rt().block_on(async {
        let (server, client, js) = dlq_and_work().await;
        // As a JetStream mount without provenance leaves it: the runtime's id only.
        let mut h = HeaderMap::new();
        h.insert(
            "Nats-Msg-Id",
            "ruststream.dead-letter.WORK.worker.7.1700000000000000000",
        );
        h.insert("x-kept", "yes");
        js.publish_with_headers("dlq.work", h, "bare".into())
            .await
            .unwrap()
            .await
            .unwrap();
        let skipped = cli(&server, &["dlq", "replay", "DLQ"]).await;
        assert_eq!(skipped.code, 1, "a skip is not a success: {skipped:?}");
        assert!(
            skipped
                .err
                .contains("1 selected dead letter(s) were not replayed"),
            "{skipped:?}"
        );
        assert!(
            skipped.err.contains("skipped 1: it has no provenance"),
            "{skipped:?}"
        );
        assert!(skipped.out.contains("1 skipped"), "{skipped:?}");
        assert_eq!(count(&js, "WORK").await, 0);
        let list = cli(&server, &["dlq", "list", "DLQ"]).await;
        assert!(list.out.contains("\t-\t-\tWORK#7\t-\t-\t-"), "{list:?}");
        let told = cli(&server, &["dlq", "replay", "DLQ", "--to", "work.again"]).await;
        assert_eq!(told.code, 0, "{told:?}");
        wait_for(&js, "WORK", 1).await;
        let m = &messages(&js, "WORK").await[0];
        assert_eq!(m.2.get("x-kept").map(|v| v.as_str()), Some("yes"));
        // The dead-letter subject itself is refused as a target.
        let back = cli(&server, &["dlq", "replay", "DLQ", "--to", "dlq.work"]).await;
        assert_eq!(back.code, 1, "{back:?}");
        assert!(
            back.err.contains("is the dead-letter subject itself"),
            "{back:?}"
        );
        // A stream of messages that are no dead letters (a replay's id marks nothing) is
        // refused, and taken with --unmarked.
        js.publish("work.plain", "plain".into())
            .await
            .unwrap()
            .await
            .unwrap();
        let plain = cli(&server, &["dlq", "list", "WORK"]).await;
        assert_eq!(plain.code, 1, "{plain:?}");
        assert!(
            plain.err.contains("none is a ruststream dead letter"),
            "{plain:?}"
        );
        let taken = cli(&server, &["dlq", "list", "WORK", "--unmarked"]).await;
        assert_eq!(taken.code, 0, "{taken:?}");
        assert_eq!(taken.out.lines().count(), 3, "a head and two: {taken:?}");
        drop(client);
    });
}

#[test]
fn rate_bounds_the_replays_per_second() {
    rt().block_on(async {
        let (server, js) = dead_letters().await;
        let started = Instant::now();
        let ran = cli(&server, &["dlq", "replay", "DLQ", "--rate", "20"]).await;
        assert_eq!(ran.code, 0, "{ran:?}");
        // Five at 20 a second: the fifth no sooner than 200 ms after the first.
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(count(&js, "ORDERS").await, 10);
    });
}

#[test]
fn purge_asks_first_and_deletes_only_what_the_filter_takes() {
    rt().block_on(async {
        let (server, js) = dead_letters().await;
        let no = cli_with(
            &server,
            &["dlq", "purge", "DLQ", "--reason", "rejected"],
            "n\n",
        )
        .await;
        assert_eq!(no.code, 1, "{no:?}");
        assert!(
            no.err
                .contains("delete 3 dead letter(s) from DLQ (--reason rejected)? [y/N]"),
            "{no:?}"
        );
        assert!(
            no.err.contains("not confirmed: nothing was deleted"),
            "{no:?}"
        );
        assert_eq!(count(&js, "DLQ").await, 5);
        let yes = cli_with(
            &server,
            &["dlq", "purge", "DLQ", "--reason", "rejected"],
            "y\n",
        )
        .await;
        assert_eq!(yes.code, 0, "{yes:?}");
        assert!(yes.out.contains("3 dead letter(s) deleted"), "{yes:?}");
        let left: Vec<u64> = messages(&js, "DLQ").await.iter().map(|m| m.0).collect();
        assert_eq!(left, [2, 5]);
        let all = cli(&server, &["dlq", "purge", "DLQ", "--yes"]).await;
        assert_eq!(all.code, 0, "{all:?}");
        assert_eq!(count(&js, "DLQ").await, 0);
        let _ = js;
    });
}

#[test]
fn a_filter_past_the_last_dead_letter_answers_at_once() {
    rt().block_on(async {
        let (server, js) = dead_letters().await;
        // Stored after every dead letter there is: nothing matches, said at once.
        let started = Instant::now();
        let later = cli(
            &server,
            &["dlq", "list", "DLQ", "--since", "2099-01-01T00:00:00Z"],
        )
        .await;
        assert_eq!(later.code, 1, "{later:?}");
        assert!(
            later.err.contains("matches --since 2099-01-01T00:00:00"),
            "{later:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
        // The last dead letter deleted: resuming from it finds nothing, at once.
        js.get_stream("DLQ")
            .await
            .unwrap()
            .delete_message(5)
            .await
            .unwrap();
        let started = Instant::now();
        let resumed = cli(&server, &["dlq", "replay", "DLQ", "--from-seq", "5"]).await;
        assert_eq!(resumed.code, 1, "{resumed:?}");
        assert!(resumed.err.contains("matches --from-seq 5"), "{resumed:?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
    });
}

#[test]
fn repeated_headers_keep_every_value_through_show_and_replay() {
    rt().block_on(async {
        let (server, client, js) = dlq_and_work().await;
        let mut h = HeaderMap::new();
        h.append("x-tenant", "a");
        h.append("x-tenant", "b");
        h.insert("Ruststream-Subject", "work.new");
        h.insert("Ruststream-Mount", "work");
        h.insert("Ruststream-Attempt", "1");
        h.insert("Ruststream-Reason", "rejected");
        js.publish_with_headers("dlq.work", h, "two tenants".into())
            .await
            .unwrap()
            .await
            .unwrap();
        let shown = cli(&server, &["dlq", "show", "DLQ", "1"]).await;
        assert!(shown.out.contains("  x-tenant: a\n"), "{shown:?}");
        assert!(shown.out.contains("  x-tenant: b\n"), "{shown:?}");
        let ran = cli(&server, &["dlq", "replay", "DLQ", "--delete"]).await;
        assert_eq!(ran.code, 0, "{ran:?}");
        wait_for(&js, "WORK", 1).await;
        // Read back through a consumer (async-nats' direct reading keeps one value a name).
        let consumer = js
            .get_stream("WORK")
            .await
            .unwrap()
            .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
            .await
            .unwrap();
        let mut stream_of = consumer.messages().await.unwrap();
        use futures_util::StreamExt;
        let got = stream_of.next().await.unwrap().unwrap();
        let tenants: Vec<String> = got
            .headers
            .as_ref()
            .unwrap()
            .get_all("x-tenant")
            .map(|v| v.to_string())
            .collect();
        assert_eq!(tenants, ["a", "b"], "every value replayed");
        assert_eq!(count(&js, "DLQ").await, 0);
        drop(client);
    });
}

#[test]
fn a_stream_of_work_and_dead_letters_gives_only_its_dead_letters() {
    rt().block_on(async {
        let server = NatsServer::start();
        let client = async_nats::connect(server.url()).await.unwrap();
        let js = jetstream::new(client.clone());
        // One stream stores the work and the dead letters (rule 8 allows it).
        js.create_stream(stream("ORDERS", &["orders.>"]))
            .await
            .unwrap();
        for n in 0..3 {
            js.publish("orders.new", format!("work-{n}").into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
        let mut h = HeaderMap::new();
        h.insert("Ruststream-Subject", "orders.new");
        h.insert("Ruststream-Mount", "orders");
        h.insert("Ruststream-Reason", "rejected");
        js.publish_with_headers("orders.dlq", h, "dead".into())
            .await
            .unwrap()
            .await
            .unwrap();
        let list = cli(&server, &["dlq", "list", "ORDERS"]).await;
        assert_eq!(list.code, 0, "{list:?}");
        assert_eq!(
            list.out.lines().count(),
            2,
            "a head and the dead letter: {list:?}"
        );
        let purge = cli(&server, &["dlq", "purge", "ORDERS", "--yes"]).await;
        assert_eq!(purge.code, 0, "{purge:?}");
        assert!(purge.out.contains("1 dead letter(s) deleted"), "{purge:?}");
        assert_eq!(count(&js, "ORDERS").await, 3, "the work is left alone");
        drop(client);
    });
}
