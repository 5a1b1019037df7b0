//! The conformance suite on the smol adapter: the same scenarios as `tokio.rs`.

#![allow(clippy::unwrap_used, missing_docs)]

use ruststream_smol as adapter;

/// Drives a scenario on smol. The scenario's own test client (async-nats, Tokio timers) runs
/// inside async-compat's Tokio context; the app's tasks run on smol's executor.
fn run<F: std::future::Future<Output = ()>>(scenario: F) {
    smol::block_on(async_compat::Compat::new(scenario));
}

include!("../scenarios.rs");

/// smol only: the app owns the Tokio reactor thread its NATS connection runs on. If that
/// thread ends, the app reports it and stops; it does not hang.
#[test]
fn smol_reactor_loss_is_reported_not_hung() {
    run(async {
        let server = NatsServer::start();
        let running = App::new(&server.url())
            .mount(
                Mount::core_subject("reactor", "reactor.in"),
                |_: Delivery| async { Outcome::Ack },
            )
            .start()
            .await
            .expect("the app starts");
        running.stop_reactor();
        let report = tokio::time::timeout(Duration::from_secs(20), running.until_signal())
            .await
            .expect("until_signal returns once the reactor is gone, instead of hanging");
        let failure = report.failure.expect("the loss is reported");
        assert!(failure.contains("reactor"), "{failure}");
    });
}
