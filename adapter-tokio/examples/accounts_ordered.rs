//! The accounts service: account events on `accounts.<id>.<event>` applied to balances one
//! account at a time, in the order they arrived. A retry runs again in place, so an account's
//! later events wait for it; an event that cannot apply is dead-lettered with provenance and
//! its account goes on. The balances are kept in memory here, in place of your store.
//!
//! `NATS_URL=nats://127.0.0.1:4222 cargo run -p ruststream-tokio --example accounts_ordered`

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ruststream_tokio::async_nats::jetstream::stream;
use ruststream_tokio::{App, Backoff, Delivery, Key, Mount, Outcome};
use serde::Deserialize;

/// An event's payload: `{"amount": 250}` for `deposited` and `withdrawn`, `{}` for `opened`.
#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    amount: u64,
}

/// Stands in for a call to another service before an event is applied (a fraud check, say):
/// it times out on the first attempt of each event of a `flaky-` account.
async fn check(account: &str, attempt: u64) -> Result<(), String> {
    match account.starts_with("flaky-") && attempt < 2 {
        true => Err(format!("fraud check timed out for {account}")),
        false => Ok(()),
    }
}

/// A stream that stores `subjects`.
fn stream(name: &str, subjects: &[&str]) -> stream::Config {
    stream::Config {
        name: name.to_owned(),
        subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    }
}

fn accounts_service(app: App) -> App {
    // Balances by account: one that is here has been opened.
    let balances = Arc::new(Mutex::new(HashMap::<String, u64>::new()));
    app.stream(stream("ACCOUNTS", &["accounts.>"]))
        .stream(stream("ACCOUNTS_DLQ", &["dlq.accounts"]))
        .mount_json(
            Mount::jetstream("accounts", "ACCOUNTS", "balances")
                // accounts.<id>.<event>: token 1 is the account. One event of an account at
                // a time, in arrival order; different accounts at once.
                .key(Key::subject_token(1))
                // A retry runs again here after its backoff delay, the account's later events
                // waiting, instead of going back to the stream behind them.
                .strict_order(true)
                .max_attempts(5)
                .backoff(Backoff::exponential(
                    Duration::from_millis(100),
                    Duration::from_secs(2),
                ))
                .dead_letter("dlq.accounts")
                .provenance(),
            move |event: Event, d: Delivery| {
                let balances = balances.clone();
                async move {
                    let mut tokens = d.subject.as_str().split('.').skip(1);
                    let (Some(account), Some(kind)) = (tokens.next(), tokens.next()) else {
                        return Ok(Outcome::Reject);
                    };
                    // An `Err` is a `retry`: run again in place after ~100 ms, ~200 ms, …
                    check(account, d.attempt.get()).await?;
                    let mut balances = balances.lock().unwrap_or_else(PoisonError::into_inner);
                    let balance = match (kind, balances.get_mut(account)) {
                        ("opened", None) => {
                            balances.insert(account.to_owned(), 0);
                            0
                        }
                        ("deposited", Some(balance)) => {
                            *balance += event.amount;
                            *balance
                        }
                        ("withdrawn", Some(balance)) if *balance >= event.amount => {
                            *balance -= event.amount;
                            *balance
                        }
                        // Not opened, opened twice, overdrawn, or an unknown event: the dead
                        // letter now, and the account's next event runs.
                        _ => return Ok(Outcome::Reject),
                    };
                    let attempt = d.attempt.get();
                    tracing::info!(account, event = kind, attempt, balance, "applied");
                    Ok::<_, String>(Outcome::Ack)
                }
            },
        )
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned());
    match accounts_service(App::new(&url)).run().await {
        Ok(report) => {
            eprintln!("stopped: {report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
