//! A JetStream API request the runtime makes of its own (`$JS.API.<what>`: pausing a consumer,
//! giving up a pin), bounded in time, its answer told apart: the server's, or its refusal, or
//! none at all. async-nats' `Context::request` makes it; its answer's `Response::Ok` or
//! `Response::Err` is read in one place.

use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::runtime::Runtime;

/// Why a JetStream API request got no answer it could use.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiFailure {
    /// Nothing answered within the request's patience.
    #[error("no answer within {} s", .0.as_secs_f64())]
    NoAnswer(Duration),
    /// The request could not be made, or its answer not read (async-nats' error).
    #[error("{0}")]
    Request(String),
    /// The server answered with an error (its code and description).
    #[error("{0}")]
    Refused(String),
}

/// Sends `body` to `$JS.API.<what>` (`what`: `CONSUMER.PAUSE.<stream>.<consumer>`, say) through
/// `client`, and reads the server's answer as `T`, waiting at most `patience`.
///
/// # Errors
/// [`ApiFailure`]: no answer in time, a request that could not be made, or the server's error
/// answer.
pub(crate) async fn api_request<R: Runtime, T: DeserializeOwned>(
    client: async_nats::Client,
    what: String,
    body: serde_json::Value,
    patience: Duration,
) -> Result<T, ApiFailure> {
    let js = async_nats::jetstream::new(client);
    let answered = R::timeout(patience, async {
        let answer: Result<async_nats::jetstream::response::Response<T>, _> =
            js.request(what, &body).await;
        answer
    })
    .await;
    match answered {
        None => Err(ApiFailure::NoAnswer(patience)),
        Some(Err(e)) => Err(ApiFailure::Request(e.to_string())),
        Some(Ok(async_nats::jetstream::response::Response::Err { error })) => {
            Err(ApiFailure::Refused(error.to_string()))
        }
        Some(Ok(async_nats::jetstream::response::Response::Ok(answer))) => Ok(answer),
    }
}
