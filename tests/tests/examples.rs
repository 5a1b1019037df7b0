//! The README's batch and order-per-key services, run as a user runs them
//! (`adapter-tokio/examples/payments_batch.rs` and `accounts_ordered.rs`), each against a
//! nats-server of its own, and checked by what the server shows: each settlement on the wire
//! by stream sequence, the consumer's counts and the dead letters with their provenance.
//! Each test builds its example first (`build_examples`), so it never runs a stale one.

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::HeaderMap;
use ruststream_tests::process::Scripted;
use ruststream_tests::{
    NatsServer, PATIENCE, TestClient, Wire, build_examples, eventually, round_trip,
};

fn run(scenario: impl std::future::Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(scenario);
}

/// Starts the example `bin` against `server`, logging at info level in plain text, and waits
/// until it consumes.
async fn start(bin: &std::path::Path, server: &NatsServer) -> Scripted {
    let url = server.url();
    let env = [
        ("NATS_URL", url.as_str()),
        ("RUST_LOG", "info"),
        ("NO_COLOR", "1"),
    ];
    let service = Scripted::spawn_bin(bin, &[], &env);
    service.wait_for("ruststream started").await;
    service
}

/// Stops `service` as Ctrl-C does, and checks that it stopped cleanly with nothing lost.
async fn stop(mut service: Scripted) -> String {
    service.terminate();
    let code = service.exit_code(PATIENCE).await;
    let printed = service.printed();
    assert_eq!(code, 0, "{printed}");
    assert!(
        printed.contains("stopped: abandoned=[] lost_copies=[] core_losses=[]"),
        "{printed}"
    );
    printed
}

/// Its output without the terminal's colour codes, should the subscriber add them.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The stream sequence in a JetStream ack reply subject (9-token form, or 11 with a domain and
/// an account hash after `$JS.ACK`).
fn stream_sequence(ack_subject: &str) -> u64 {
    let tokens: Vec<&str> = ack_subject.split('.').collect();
    assert!(
        tokens.len() == 9 || tokens.len() == 11,
        "an ack reply subject: {ack_subject}"
    );
    tokens[tokens.len() - 4].parse().expect("a stream sequence")
}

/// The settlements seen on the wire (every ack payload but the `+WPI` renewals), by stream
/// sequence.
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

/// Waits until every stream sequence from 1 to `n` has a final settlement (`+ACK` or
/// `+TERM`), then a little longer to see that nothing more comes; the settlements.
async fn settled(acks: &Wire, n: u64) -> BTreeMap<u64, Vec<String>> {
    eventually(&format!("stream sequences 1 to {n} settled"), || {
        let by = settlements(acks);
        (1..=n)
            .all(|seq| {
                by.get(&seq)
                    .and_then(|p| p.last())
                    .is_some_and(|p| p == "+ACK" || p == "+TERM")
            })
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    settlements(acks)
}

/// The value of the last field `name` in a log line (`name=value` or `name="value"`).
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let value = line
        .rsplit(&format!(" {name}="))
        .next()
        .filter(|v| v.len() < line.len())?;
    let value = value.split(' ').next()?;
    Some(value.trim_matches('"'))
}

/// A dead letter's provenance header `name`.
fn header<'a>(letter: &'a (String, Vec<(String, String)>, bytes::Bytes), name: &str) -> &'a str {
    letter
        .1
        .iter()
        .find(|(n, _)| n == name)
        .map_or("", |(_, v)| v.as_str())
}

/// Waits until `stream` holds `n` messages; them.
async fn stored(
    tc: &TestClient,
    stream: &str,
    n: u64,
) -> Vec<(String, Vec<(String, String)>, bytes::Bytes)> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while tc.stream_len(stream).await < n && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stored = tc.stored(stream).await;
    assert_eq!(stored.len() as u64, n, "{stream}: {stored:?}");
    stored
}

/// `payments_batch`: four payments stored before it starts make one batch (the one that is
/// not JSON never joins it), whose members are settled each by its own outcome: the valid ones
/// acked once their transaction committed, the invalid one rejected to the dead-letter
/// stream. Then a payment of a `flaky-` account fails its batch's transaction: every member
/// of that batch is retried after the backoff's delay (`-NAK {"delay": …}`), and written on
/// attempt 2. The ledger holds each valid payment once.
#[test]
fn the_payments_batch_example_settles_each_member_by_its_own_outcome() {
    let [bin] = build_examples(["payments_batch"]);
    run(async {
        let server = NatsServer::start();
        let tc = TestClient::connect(&server).await;
        tc.stream("PAYMENTS", &["payments.new"]).await;
        let acks = Wire::watch(&tc.client, "$JS.ACK.>").await;
        for payment in [
            &br#"{"id":1,"account":"acct-1","amount":500}"#[..],
            br#"{"id":2,"account":"acct-2","amount":0}"#,
            b"not a payment",
            br#"{"id":4,"account":"acct-1","amount":250}"#,
        ] {
            tc.js_publish("payments.new", HeaderMap::new(), payment)
                .await;
        }
        let service = start(&bin, &server).await;
        let first = settled(&acks, 4).await;
        let expected: BTreeMap<u64, Vec<String>> = [
            (1, "+ACK"),
            (2, "+TERM"), // rejected, beside members acked in its batch
            (3, "+TERM"), // undecodable, never in a batch
            (4, "+ACK"),
        ]
        .into_iter()
        .map(|(s, p)| (s, vec![p.to_owned()]))
        .collect();
        assert_eq!(first, expected, "{}", service.printed());
        let printed = plain(&service.printed());
        assert!(
            printed.contains("batch committed size=3 written=2"),
            "one batch of the three that decode: {printed}"
        );

        for payment in [
            &br#"{"id":5,"account":"flaky-3","amount":700}"#[..],
            br#"{"id":6,"account":"acct-1","amount":50}"#,
        ] {
            tc.js_publish("payments.new", HeaderMap::new(), payment)
                .await;
        }
        let all = settled(&acks, 6).await;
        let flaky = &all[&5];
        assert_eq!(flaky.len(), 2, "{all:?}");
        let delay_ns: u64 = flaky[0]
            .strip_prefix("-NAK {\"delay\": ")
            .and_then(|d| d.strip_suffix('}'))
            .and_then(|d| d.parse().ok())
            .unwrap_or_else(|| panic!("a -NAK with the backoff's delay: {all:?}"));
        assert!(
            (80_000_000..=100_000_000).contains(&delay_ns),
            "100 ms less its jitter: {delay_ns}"
        );
        assert_eq!(flaky[1], "+ACK");
        // Payment 6 shared the failed batch (retried, then acked) or came in the next one.
        let other = &all[&6];
        assert!(
            other == &["+ACK"] || (other.len() == 2 && other[0].starts_with("-NAK {\"delay\": ")),
            "{all:?}"
        );
        let printed = plain(&service.printed());
        assert!(
            printed.contains("attempt=1 error=lock timeout on account flaky-3")
                && printed.contains("handler returned an error"),
            "{printed}"
        );

        let info = tc.consumer_info("PAYMENTS", "writer").await;
        assert_eq!((info.num_ack_pending, info.num_pending), (0, 0), "{info:?}");
        let letters = stored(&tc, "PAYMENTS_DLQ", 2).await;
        let mut reasons: Vec<(&str, &str, &str)> = letters
            .iter()
            .map(|l| {
                (
                    header(l, "Ruststream-Stream-Sequence"),
                    header(l, "Ruststream-Reason"),
                    header(l, "Ruststream-Attempt"),
                )
            })
            .collect();
        reasons.sort_unstable();
        assert_eq!(
            reasons,
            [("2", "rejected", "1"), ("3", "undecodable", "1")],
            "{letters:?}"
        );
        assert!(letters.iter().all(|l| l.0 == "dlq.payments"));

        let reply = tc
            .client
            .request("payments.ledger", bytes::Bytes::new())
            .await
            .unwrap();
        let ledger: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
        assert_eq!(
            ledger,
            serde_json::json!({ "payments": 4, "total": 1500 }),
            "payments 1, 4, 5 and 6, each once"
        );
        round_trip(&tc.client).await;
        stop(service).await;
    });
}

/// `accounts_ordered`: six events of two accounts, interleaved, stored before it starts. Each
/// event of the `flaky-` account fails its first attempt and runs again in place, after the
/// backoff's delay, before the account's next event: its events are applied in order, on
/// attempt 2, and nothing goes back to the server (no `-NAK`, each message delivered once).
/// The other account goes on meanwhile; its overdrawing withdrawal is dead-lettered with its
/// provenance, and its next event applies.
#[test]
fn the_accounts_ordered_example_applies_one_accounts_events_in_order_retrying_in_place() {
    let [bin] = build_examples(["accounts_ordered"]);
    run(async {
        let server = NatsServer::start();
        let tc = TestClient::connect(&server).await;
        tc.stream("ACCOUNTS", &["accounts.>"]).await;
        let acks = Wire::watch(&tc.client, "$JS.ACK.>").await;
        for (subject, event) in [
            ("accounts.flaky-1.opened", &b"{}"[..]),
            ("accounts.acct-2.opened", b"{}"),
            ("accounts.flaky-1.deposited", br#"{"amount":100}"#),
            ("accounts.acct-2.withdrawn", br#"{"amount":50}"#),
            ("accounts.flaky-1.withdrawn", br#"{"amount":30}"#),
            ("accounts.acct-2.deposited", br#"{"amount":20}"#),
        ] {
            tc.js_publish(subject, HeaderMap::new(), event).await;
        }
        let service = start(&bin, &server).await;
        let all = settled(&acks, 6).await;
        let expected: BTreeMap<u64, Vec<String>> = [
            (1, "+ACK"),
            (2, "+ACK"),
            (3, "+ACK"),
            (4, "+TERM"),
            (5, "+ACK"),
            (6, "+ACK"),
        ]
        .into_iter()
        .map(|(s, p)| (s, vec![p.to_owned()]))
        .collect();
        assert_eq!(
            all,
            expected,
            "one settlement each, no -NAK: {}",
            service.printed()
        );

        // What the service did for each account, in the order it printed it: the runtime's
        // warning for each `Err` (with the subject) and the example's `applied` line.
        let printed = plain(&service.printed());
        let lines_of = |account: &str| -> Vec<String> {
            let subject = format!("subject=accounts.{account}.");
            let named = format!("account=\"{account}\"");
            printed
                .lines()
                .filter_map(|l| {
                    let attempt = field(l, "attempt")?;
                    if l.contains("handler returned an error") && l.contains(&subject) {
                        let event = field(l, "subject")?.rsplit('.').next()?;
                        Some(format!("{event} failed (attempt {attempt})"))
                    } else if l.contains(" applied ") && l.contains(&named) {
                        let (event, balance) = (field(l, "event")?, field(l, "balance")?);
                        Some(format!(
                            "{event} applied, balance {balance} (attempt {attempt})"
                        ))
                    } else {
                        None
                    }
                })
                .collect()
        };
        assert_eq!(
            lines_of("flaky-1"),
            [
                "opened failed (attempt 1)",
                "opened applied, balance 0 (attempt 2)",
                "deposited failed (attempt 1)",
                "deposited applied, balance 100 (attempt 2)",
                "withdrawn failed (attempt 1)",
                "withdrawn applied, balance 70 (attempt 2)",
            ],
            "{printed}"
        );
        assert_eq!(
            lines_of("acct-2"),
            [
                "opened applied, balance 0 (attempt 1)",
                "deposited applied, balance 20 (attempt 1)",
            ],
            "{printed}"
        );
        let position = |needle: &str| {
            printed
                .find(needle)
                .unwrap_or_else(|| panic!("{needle:?} not printed: {printed}"))
        };
        assert!(
            position(r#"account="acct-2" event="deposited""#)
                < position(r#"account="flaky-1" event="opened""#),
            "another account is not held back by flaky-1's retry: {printed}"
        );

        let info = tc.consumer_info("ACCOUNTS", "balances").await;
        assert_eq!(
            (
                info.delivered.stream_sequence,
                info.delivered.consumer_sequence,
                info.num_redelivered,
                info.num_ack_pending,
                info.num_pending
            ),
            (6, 6, 0, 0, 0),
            "each message delivered once, all settled: {info:?}"
        );
        let letters = stored(&tc, "ACCOUNTS_DLQ", 1).await;
        let letter = &letters[0];
        assert_eq!(
            (letter.0.as_str(), &letter.2[..]),
            ("dlq.accounts", &br#"{"amount":50}"#[..])
        );
        assert_eq!(
            (
                header(letter, "Ruststream-Reason"),
                header(letter, "Ruststream-Subject"),
                header(letter, "Ruststream-Stream-Sequence"),
            ),
            ("rejected", "accounts.acct-2.withdrawn", "4")
        );
        stop(service).await;
    });
}
