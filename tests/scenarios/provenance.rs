//! Provenance headers on dead letters, on request (rule 19).

use super::common::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

/// Sorted `(name, value)` pairs, the runtime's dead-letter id without its stored time.
fn sorted(headers: &[(String, String)]) -> Vec<(String, String)> {
    let mut h = without_stored_time(headers);
    h.sort();
    h
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = list
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
    v.sort();
    v
}

/// A JetStream mount that asks for provenance: each dead letter names its subject, mount,
/// stream, consumer, stream sequence, attempt and reason (with the handler's error text for
/// an error), after the delivery's own headers, which are kept.
#[test]
fn rule_19_jetstream_dead_letters_carry_provenance() {
    run(async {
        let (server, tc, acks, _r, ev) = js_case().await;
        let app = start(&server, &ev, |a| {
            a.mount_json(
                js_mount("js-provenance")
                    .max_attempts(2)
                    .dead_letter("dlq.orders")
                    .provenance(),
                |order: Order, _d: Delivery| async move {
                    match order.id {
                        1 => Err("database down\r\nfor order 1".to_owned()),
                        _ => Ok(Outcome::Reject),
                    }
                },
            )
        })
        .await;
        tc.js_publish(
            "orders.new",
            headers(&[("Trace-Id", "t1"), ("Nats-Msg-Id", "order-1")]),
            b"{\"id\":1}",
        )
        .await;
        assert_acks(&acks, &["-NAK", "+TERM"]).await;
        tc.js_publish("orders.new", HeaderMap::new(), b"{\"id\":2}")
            .await;
        assert_acks(&acks, &["-NAK", "+TERM", "+TERM"]).await;
        tc.js_publish("orders.new", HeaderMap::new(), b"not json")
            .await;
        assert_acks(&acks, &["-NAK", "+TERM", "+TERM", "+TERM"]).await;
        let stored = assert_dead_letters(
            &tc,
            "DLQ",
            &[
                ("dlq.orders", b"{\"id\":1}"),
                ("dlq.orders", b"{\"id\":2}"),
                ("dlq.orders", b"not json"),
            ],
        )
        .await;
        let common = |seq: &'static str, attempt: &'static str| {
            [
                ("Ruststream-Subject", "orders.new"),
                ("Ruststream-Mount", "js-provenance"),
                ("Ruststream-Stream", "ORDERS"),
                ("Ruststream-Consumer", "worker"),
                ("Ruststream-Stream-Sequence", seq),
                ("Ruststream-Attempt", attempt),
            ]
        };
        let mut first = common("1", "2").to_vec();
        first.extend([
            ("Trace-Id", "t1"),
            ("Ruststream-Reason", "handler-error"),
            // One line: the CR LF of the error's text would end the header.
            ("Ruststream-Error", "database down  for order 1"),
            // Its own id, which rule 9 keeps off the dead letter (issue 41).
            ("Ruststream-Msg-Id", "order-1"),
            ("Nats-Msg-Id", "ruststream.dead-letter.ORDERS.worker.1"),
        ]);
        assert_eq!(sorted(&stored[0].1), pairs(&first));
        let mut second = common("2", "1").to_vec();
        second.extend([
            ("Ruststream-Reason", "rejected"),
            ("Nats-Msg-Id", "ruststream.dead-letter.ORDERS.worker.2"),
        ]);
        assert_eq!(sorted(&stored[1].1), pairs(&second));
        let mut third = common("3", "1").to_vec();
        third.extend([
            ("Ruststream-Reason", "undecodable"),
            ("Nats-Msg-Id", "ruststream.dead-letter.ORDERS.worker.3"),
        ]);
        assert_eq!(sorted(&stored[2].1), pairs(&third));
        app.shutdown().await;
    });
}

/// A Core mount that asks for provenance: the dead letter at the limit names its subject,
/// mount, attempt and reason, and no stream parts. A delivery that already carries
/// provenance (a replayed dead letter) keeps its values, and the new ones come after them.
#[test]
fn rule_19_core_dead_letter_carries_provenance_after_the_original() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let mut dead = tc.client.subscribe("dlq.core").await.expect("subscribe");
        ruststream_tests::round_trip(&tc.client).await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-provenance", "cprov.in")
                    .max_attempts(2)
                    .dead_letter("dlq.core")
                    .provenance(),
                scripted(&r, |_, _| Outcome::Retry),
            )
        })
        .await;
        let replayed = headers(&[
            ("Ruststream-Mount", "earlier-mount"),
            ("Ruststream-Reason", "rejected"),
        ]);
        core_publish(&tc, "cprov.in", replayed, b"x").await;
        let letter = tokio::time::timeout(
            Duration::from_secs(10),
            futures_util::StreamExt::next(&mut dead),
        )
        .await
        .expect("a dead letter in time")
        .expect("the subscription is open");
        assert_eq!(attempts(&r), [1, 2]);
        assert_eq!(&letter.payload[..], b"x");
        let mut want = pairs(&[
            ("Ruststream-Mount", "earlier-mount"),
            ("Ruststream-Reason", "rejected"),
            ("x-ruststream-retry-count", "1"),
            ("Ruststream-Subject", "cprov.in"),
            ("Ruststream-Mount", "core-provenance"),
            ("Ruststream-Attempt", "2"),
            ("Ruststream-Reason", "limit"),
        ]);
        want.sort();
        assert_eq!(ruststream_tests::headers_of(&letter), want);
        // The new values come after the earlier ones: the last is this dead letter's.
        let h = letter.headers.as_ref().expect("headers");
        for (name, values) in [
            ("Ruststream-Reason", ["rejected", "limit"]),
            ("Ruststream-Mount", ["earlier-mount", "core-provenance"]),
        ] {
            let got: Vec<&str> = h
                .get_all(name)
                .map(adapter::async_nats::HeaderValue::as_str)
                .collect();
            assert_eq!(got, values, "{name}");
        }
        app.shutdown().await;
    });
}

/// A dead letter that its provenance headers would make larger than the server's
/// `max_payload` goes without them, as the delivery arrived (which fits), with a warning:
/// never lost for the sake of its provenance.
#[test]
fn rule_19_a_dead_letter_too_large_with_provenance_goes_without_it() {
    run(async {
        let (server, tc, r, ev) = core_case().await;
        let dead = Wire::watch(&tc.client, "dlq.big").await;
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("core-provenance-big", "cprovbig.in")
                    .max_attempts(3)
                    .dead_letter("dlq.big")
                    .provenance(),
                scripted(&r, |_, _| Outcome::Reject),
            )
        })
        .await;
        let max = tc.client.server_info().max_payload;
        let payload = bytes::Bytes::from(vec![b'x'; max - 10]);
        tc.client
            .publish("cprovbig.in", payload.clone())
            .await
            .expect("publish");
        tc.client.flush().await.expect("flush");
        let seen = dead.at_least(1).await;
        assert_eq!(seen[0].payload, payload);
        assert!(seen[0].headers.is_empty(), "{:?}", seen[0].headers);
        // The dead letter can be on the wire before its settlement is recorded.
        settled(&ev, 1).await;
        assert_eq!(dispositions(&ev), [Disposition::DeadLettered]);
        logged(&[
            "mount=core-provenance-big",
            "without its provenance headers",
        ])
        .await;
        app.shutdown().await;
    });
}
