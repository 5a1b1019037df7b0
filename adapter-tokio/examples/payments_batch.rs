//! The payments service: JSON payments from a stream, taken in batches of up to 100 and written
//! to a database in one transaction per batch. An invalid payment is rejected on its own; a
//! transaction that fails is every member's error, retried with backoff; dead letters carry
//! provenance. The database is a small in-memory stand-in written below, not a real one: put
//! your database's transaction where `Database::insert_all` is.
//!
//! `NATS_URL=nats://127.0.0.1:4222 cargo run -p ruststream-tokio --example payments_batch`

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroUsize;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ruststream_tokio::async_nats::jetstream::stream;
use ruststream_tokio::{App, Backoff, Batch, Delivery, Mount, Outcome, Reply};
use serde::Deserialize;

/// A payment, as clients publish it to `payments.new`.
#[derive(Deserialize)]
struct Payment {
    /// The payment's id, the table's key.
    id: u64,
    /// The account it is paid from.
    account: String,
    /// How much, in cents.
    amount: i64,
}

impl Payment {
    fn is_valid(&self) -> bool {
        self.amount > 0 && !self.account.is_empty()
    }
}

/// Stands in for a database: a table of payments by id, written in transactions that apply
/// whole or not at all. Its first transaction that touches a `flaky-` account fails (a lock
/// timeout, say); the next one goes through.
#[derive(Default)]
struct Database {
    tables: Mutex<Tables>,
}

#[derive(Default)]
struct Tables {
    /// Payment id → (account, amount).
    payments: BTreeMap<u64, (String, i64)>,
    /// The `flaky-` accounts whose transaction has already failed once.
    timed_out: BTreeSet<String>,
}

impl Database {
    /// Writes `payments` in one transaction: all of them, or none and an error. A payment whose
    /// id is stored already is left as it is (`INSERT … ON CONFLICT DO NOTHING`), so a batch
    /// delivered again after its commit (its acks lost) writes nothing twice.
    async fn insert_all(&self, payments: &[&Payment]) -> Result<(), String> {
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        for p in payments {
            if p.account.starts_with("flaky-") && tables.timed_out.insert(p.account.clone()) {
                return Err(format!("lock timeout on account {}", p.account));
            }
        }
        for p in payments {
            let row = (p.account.clone(), p.amount);
            tables.payments.entry(p.id).or_insert(row);
        }
        Ok(())
    }

    /// How many payments are stored, and their total.
    fn summary(&self) -> (usize, i64) {
        let tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        let total = tables.payments.values().map(|(_, amount)| amount).sum();
        (tables.payments.len(), total)
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

fn payments_service(app: App) -> App {
    let db = Arc::new(Database::default());
    let ledger = db.clone();
    app.stream(stream("PAYMENTS", &["payments.new"]))
        .stream(stream("PAYMENTS_DLQ", &["dlq.payments"]))
        .mount_json_batch(
            Mount::jetstream("payments", "PAYMENTS", "writer")
                // Up to 100 payments a batch, or what came within 50 ms of the first.
                .batch(100, Duration::from_millis(50))
                // Batches, not payments: at most 4 transactions at once.
                .concurrency(NonZeroUsize::new(4).expect("not zero"))
                .max_attempts(5)
                .backoff(Backoff::exponential(
                    Duration::from_millis(100),
                    Duration::from_secs(5),
                ))
                .dead_letter("dlq.payments")
                .provenance(),
            move |batch: Batch<Payment>| {
                let db = db.clone();
                async move {
                    // One outcome per member, in the batch's order: an invalid payment is
                    // rejected on its own (dead-lettered at once), the others are acked once
                    // their transaction commits.
                    let valid: Vec<&Payment> = batch.values().filter(|p| p.is_valid()).collect();
                    let outcomes: Vec<Outcome> = batch
                        .values()
                        .map(|p| {
                            if p.is_valid() {
                                Outcome::Ack
                            } else {
                                Outcome::Reject
                            }
                        })
                        .collect();
                    // An `Err` is every member's error, the invalid ones' too: each is retried
                    // after its backoff delay (-NAK {"delay": …}), and dead-lettered at its
                    // fifth attempt.
                    db.insert_all(&valid).await?;
                    tracing::info!(size = batch.len(), written = valid.len(), "batch committed");
                    Ok::<_, String>(outcomes)
                }
            },
        )
        // A Core request: what the table holds, as JSON.
        .mount(
            Mount::core_subject("payments-ledger", "payments.ledger"),
            move |_d: Delivery| {
                let (payments, total) = ledger.summary();
                async move { Reply(serde_json::json!({ "payments": payments, "total": total })) }
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
    match payments_service(App::new(&url)).run().await {
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
