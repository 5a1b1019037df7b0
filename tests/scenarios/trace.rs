//! Trace context through headers (issue 15, item 2; the `otel` feature): a delivery's W3C
//! `traceparent` is the parent of its span, the same for every attempt (a Core copy, a
//! JetStream redelivery), and what a handler publishes through its `Context` carries it on.

use super::common::*;
use adapter::Context;
use ruststream_tests::current_trace_id;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn traced() -> HeaderMap {
    // The header name in another case than W3C's: async-nats' own lookup would miss it.
    headers(&[("Traceparent", &format!("00-{TRACE_ID}-00f067aa0ba902b7-01"))])
}

/// Each attempt's trace id, as its handler saw it.
type Traces = Arc<Mutex<Vec<String>>>;

/// A Core delivery and its copy share the trace of the delivery's `traceparent`; the copy
/// carries the header on.
#[test]
fn trace_context_survives_a_core_copy() {
    run(async {
        let (server, tc, _r, ev) = core_case().await;
        let traces: Traces = Arc::default();
        let seen = traces.clone();
        let app = start(&server, &ev, |a| {
            a.mount(
                Mount::core_subject("trace-core", "tcore.in").max_attempts(2),
                move |d: Delivery| {
                    seen.lock().unwrap().push(current_trace_id());
                    std::future::ready(match d.attempt.get() {
                        1 => Outcome::Retry,
                        _ => Outcome::Ack,
                    })
                },
            )
        })
        .await;
        core_publish(&tc, "tcore.in", traced(), b"x").await;
        settled(&ev, 2).await;
        assert_eq!(*traces.lock().unwrap(), [TRACE_ID, TRACE_ID]);
        app.shutdown().await;
    });
}

/// A JetStream redelivery has the trace of the stored message's `traceparent`, and a
/// message published through the handler's `Context` carries that trace on; a delivery
/// without one gets a trace of its own.
#[test]
fn trace_context_survives_a_jetstream_redelivery_and_goes_on_with_a_publish() {
    run(async {
        let (server, tc, acks, _r, ev) = js_case().await;
        let onward = Wire::watch(&tc.client, "traced.onward").await;
        let traces: Traces = Arc::default();
        let seen = traces.clone();
        let app = start(&server, &ev, |a| {
            a.mount(
                js_mount("trace-js").max_attempts(3),
                move |d: Delivery, cx: Context| {
                    let seen = seen.clone();
                    async move {
                        seen.lock().unwrap().push(current_trace_id());
                        if d.attempt.get() == 1 {
                            return Ok(Outcome::Retry);
                        }
                        cx.publish("traced.onward", "next").await?;
                        Ok::<_, adapter::ContextError>(Outcome::Ack)
                    }
                },
            )
        })
        .await;
        tc.js_publish("orders.new", traced(), b"x").await;
        assert_acks(&acks, &["-NAK", "+ACK"]).await;
        assert_eq!(*traces.lock().unwrap(), [TRACE_ID, TRACE_ID]);
        let published = onward.at_least(1).await;
        let parent = published[0]
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("traceparent"))
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        assert!(
            parent.starts_with(&format!("00-{TRACE_ID}-")),
            "the publish carries the trace on: {:?}",
            published[0].headers
        );
        // Without a traceparent: a trace of its own, not the one before.
        tc.js_publish("orders.new", HeaderMap::new(), b"y").await;
        eventually("the untraced delivery", || {
            (traces.lock().unwrap().len() >= 3).then_some(())
        })
        .await;
        let own = traces.lock().unwrap()[2].clone();
        assert_ne!(own, TRACE_ID);
        assert_ne!(own, "00000000000000000000000000000000");
        app.shutdown().await;
    });
}
