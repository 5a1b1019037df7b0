//! Codecs beyond JSON (issue 41, item 8): a typed mount decodes with the codec it was given
//! (MessagePack, CBOR), a payload that does not decode with it takes the at-limit path as bad
//! JSON does (rule 17: dead-lettered with `Ruststream-Reason: undecodable`), and a handler
//! publishes, publishes to a stream and replies through its `Context` with a codec of its
//! choice.

use super::common::*;
use adapter::{Batch, Cbor, Codec, Context, ContextError, MessagePack, ReplyAs};

#[derive(serde::Deserialize, serde::Serialize, Debug, Clone, PartialEq)]
struct Order {
    id: u64,
    sku: String,
}

#[derive(serde::Deserialize, serde::Serialize, Debug, Clone, PartialEq)]
struct Accepted {
    order: u64,
    lines: Vec<u32>,
}

fn order(id: u64) -> Order {
    Order {
        id,
        sku: format!("sku-{id}"),
    }
}

/// Publishes `payload` to ORDERS and waits for the stream's acknowledgement.
async fn js_publish_bytes(tc: &TestClient, payload: Vec<u8>) {
    tc.js
        .publish("orders.new", payload.into())
        .await
        .expect("publish")
        .await
        .expect("stream ack");
}

/// A JetStream mount typed with `codec` decodes and acks a payload in that encoding; a JSON
/// payload, which is not one, never reaches the handler: dead-lettered at once (attempt 1 of
/// 5) with `Ruststream-Reason: undecodable`, then `+TERM`, and the log names the codec.
fn a_typed_jetstream_mount_decodes_with_its_codec_and_dead_letters_what_does_not<C>(codec: C)
where
    C: Codec + Copy,
{
    run(async {
        let (server, tc, acks, _r, ev) = js_case().await;
        let mount = format!("codec-{}", codec.name());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let app = start(&server, &ev, |a| {
            a.mount_typed(
                js_mount(&mount)
                    .max_attempts(5)
                    .dead_letter("dlq.codec")
                    .provenance(),
                codec,
                move |order: Order, _d: Delivery| {
                    sink.lock().unwrap().push(order);
                    async { Outcome::Ack }
                },
            )
        })
        .await;
        js_publish_bytes(&tc, codec.encode(&order(7)).unwrap()).await;
        assert_acks(&acks, &["+ACK"]).await;
        let json = br#"{"id":8,"sku":"sku-8"}"#;
        tc.js_publish("orders.new", HeaderMap::new(), json).await;
        assert_acks(&acks, &["+ACK", "+TERM"]).await;
        assert_eq!(*seen.lock().unwrap(), [order(7)]);
        let stored = assert_dead_letters(&tc, "DLQ", &[("dlq.codec", json)]).await;
        let header = |name: &str| {
            stored[0]
                .1
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(header("Ruststream-Reason").as_deref(), Some("undecodable"));
        assert_eq!(header("Ruststream-Attempt").as_deref(), Some("1"));
        let runs: Vec<(bool, bool)> = settled(&ev, 2)
            .await
            .iter()
            .map(|s| (s.handler_ran, s.undecodable))
            .collect();
        assert_eq!(runs, [(true, false), (false, true)]);
        logged(&[
            &format!("mount={mount}"),
            &format!("payload does not decode as {}", codec.name()),
        ])
        .await;
        app.shutdown().await;
    });
}

#[test]
fn codec_msgpack_jetstream_mount_decodes_acks_and_dead_letters_an_undecodable_payload() {
    a_typed_jetstream_mount_decodes_with_its_codec_and_dead_letters_what_does_not(MessagePack);
}

#[test]
fn codec_cbor_jetstream_mount_decodes_acks_and_dead_letters_an_undecodable_payload() {
    a_typed_jetstream_mount_decodes_with_its_codec_and_dead_letters_what_does_not(Cbor);
}

/// A typed batch mount decodes each member with its codec: the member that does not decode
/// (JSON, on a CBOR mount) never joins its batch and is dead-lettered alone (rule 23), and the
/// rest are acked.
#[test]
fn codec_typed_batch_decodes_members_with_its_codec() {
    run(async {
        let (server, tc, acks, _r, ev) = js_case().await;
        js_publish_bytes(&tc, Cbor.encode(&order(1)).unwrap()).await;
        tc.js_publish("orders.new", HeaderMap::new(), b"{\"id\":2}")
            .await;
        js_publish_bytes(&tc, Cbor.encode(&order(3)).unwrap()).await;
        let batches = Arc::new(Mutex::new(Vec::new()));
        let sink = batches.clone();
        let app = start(&server, &ev, |a| {
            a.mount_typed_batch(
                js_mount("codec-batch")
                    .max_attempts(3)
                    .dead_letter("dlq.codec")
                    .batch(3, Duration::from_millis(300)),
                Cbor,
                move |batch: Batch<Order>| {
                    sink.lock()
                        .unwrap()
                        .push(batch.values().map(|o| o.id).collect::<Vec<_>>());
                    async { Outcome::Ack }
                },
            )
        })
        .await;
        settled(&ev, 3).await;
        let mut payloads = acks.payloads();
        payloads.sort();
        assert_eq!(payloads, ["+ACK", "+ACK", "+TERM"]);
        assert_eq!(*batches.lock().unwrap(), [vec![1, 3]]);
        assert_dead_letters(&tc, "DLQ", &[("dlq.codec", b"{\"id\":2}")]).await;
        app.shutdown().await;
    });
}

/// A handler publishes through its `Context` with codecs of its choice, and subscribers decode
/// what it sent with the same: on Core as CBOR (`publish_encoded`), to a stream as
/// MessagePack (`jetstream_publish_encoded`). A Core request to a CBOR mount is answered in
/// MessagePack by a returned `ReplyAs`, and in CBOR by `respond_encoded`.
#[test]
fn codec_context_publishes_and_replies_with_a_codec_that_subscribers_decode() {
    run(async {
        let (server, tc, _acks, _r, ev) = js_case().await;
        tc.stream("EVENTS", &["events.>"]).await;
        let audit = Wire::watch(&tc.client, "audit.>").await;
        let app = start(&server, &ev, |a| {
            a.mount_typed(
                js_mount("codec-context"),
                MessagePack,
                |order: Order, _d: Delivery, cx: Context| async move {
                    let accepted = Accepted {
                        order: order.id,
                        lines: vec![1, 2],
                    };
                    cx.publish_encoded("audit.accepted", &Cbor, &accepted)
                        .await?;
                    cx.jetstream_publish_encoded("events.accepted", &MessagePack, &order)
                        .await?;
                    Ok::<_, ContextError>(Outcome::Ack)
                },
            )
            .mount_typed(
                Mount::core_subject("codec-reply", "codec.ask"),
                Cbor,
                |order: Order, _d: Delivery| async move {
                    ReplyAs(
                        MessagePack,
                        Accepted {
                            order: order.id,
                            lines: vec![3],
                        },
                    )
                },
            )
            .mount_typed(
                Mount::core_subject("codec-respond", "codec.respond"),
                Cbor,
                |order: Order, _d: Delivery, cx: Context| async move {
                    cx.respond_encoded(&Cbor, &order).await?;
                    Ok::<_, ContextError>(Outcome::Ack)
                },
            )
        })
        .await;
        js_publish_bytes(&tc, MessagePack.encode(&order(5)).unwrap()).await;
        let core = audit.at_least(1).await;
        assert_eq!(core[0].subject, "audit.accepted");
        assert_eq!(
            Cbor.decode::<Accepted>(&core[0].payload).unwrap(),
            Accepted {
                order: 5,
                lines: vec![1, 2]
            }
        );
        let deadline = Instant::now() + ruststream_tests::PATIENCE;
        while tc.stream_len("EVENTS").await < 1 && Instant::now() < deadline {
            quiet(20).await;
        }
        let stored = tc.stored("EVENTS").await;
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0].0, "events.accepted");
        assert_eq!(MessagePack.decode::<Order>(&stored[0].2).unwrap(), order(5));

        let reply = tc
            .client
            .request("codec.ask", Cbor.encode(&order(6)).unwrap().into())
            .await
            .expect("the mount answers");
        assert_eq!(
            MessagePack.decode::<Accepted>(&reply.payload).unwrap(),
            Accepted {
                order: 6,
                lines: vec![3]
            }
        );
        let reply = tc
            .client
            .request("codec.respond", Cbor.encode(&order(9)).unwrap().into())
            .await
            .expect("the mount answers");
        assert_eq!(Cbor.decode::<Order>(&reply.payload).unwrap(), order(9));
        settled(&ev, 3).await;
        assert_eq!(dispositions(&ev), [Disposition::Acked; 3]);
        app.shutdown().await;
    });
}
