//! Compiles a service that uses both adapters and async-nats directly, with whatever
//! async-nats features CI turns on. It is checked, never run.

use std::time::Duration;

async fn handle(d: ruststream_tokio::Delivery) -> ruststream_tokio::Outcome {
    match d.attempt.get() {
        1 => ruststream_tokio::Outcome::RetryAfter(Duration::from_millis(200)),
        _ => ruststream_tokio::Outcome::Ack,
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let client = async_nats::connect("nats://127.0.0.1:4222").await?;
        let _stream = async_nats::jetstream::new(client.clone())
            .get_stream("ORDERS")
            .await?;
        let report = ruststream_tokio::App::with_client(client)
            .mount(
                ruststream_tokio::Mount::jetstream("orders", "ORDERS", "worker").max_attempts(3),
                handle,
            )
            .run()
            .await?;
        println!("{report:?}");
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    smol::block_on(async {
        let report = ruststream_smol::App::new("nats://127.0.0.1:4222")
            .mount(
                ruststream_smol::Mount::core_subject("greetings", "greet.new"),
                |_: ruststream_smol::Delivery| async { ruststream_smol::Outcome::Ack },
            )
            .run()
            .await?;
        println!("{report:?}");
        Ok(())
    })
}
