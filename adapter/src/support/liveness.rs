//! Telling a dead client from a live one, for the pull loop (a failed pull request) and the
//! supervisor (its health check, rule 20).

use std::time::Duration;

use async_nats::Client;

use crate::runtime::Runtime;

/// What a flush says of a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// It answered: connected and working.
    Alive,
    /// It failed at once: its connection task is gone, and nothing sent through it arrives.
    Dead,
    /// No answer within the time given: reconnecting, or a slow server. No verdict.
    NoAnswer,
}

/// Flushes `client`, waiting at most `within`, to tell a dead client from a live one.
pub(crate) async fn liveness<R: Runtime>(client: &Client, within: Duration) -> Liveness {
    match R::timeout(within, client.flush()).await {
        Some(Ok(())) => Liveness::Alive,
        Some(Err(_)) => Liveness::Dead,
        None => Liveness::NoAnswer,
    }
}
