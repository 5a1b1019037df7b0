//! The JetStream API's JSON, as nats-server reads and writes it, and nothing that holds state:
//! the `$JS.API.` prefix, a request's body read with the server's defaults filled in, the
//! `type` each response gives, pages of names, and error answers (`{"error": {"code",
//! "err_code", "description"}}`) with nats-server's code for each refusal of the model. The
//! answers themselves are the server's, in `model/server/api.rs`.

use async_nats::jetstream::consumer::pull;
use async_nats::jetstream::{ErrorCode, stream};
use serde_json::{Value, json};

use crate::model::error::SimError;

/// The prefix of every JetStream API subject.
pub(crate) const API_PREFIX: &str = "$JS.API.";

/// nats-server's page size for `STREAM.NAMES` and `CONSUMER.NAMES`.
const PAGE: usize = 1024;

/// The time nats-server writes for "never" (Go's zero time).
pub(crate) const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// A JetStream API error, as nats-server answers one.
pub(crate) struct ApiError {
    code: u16,
    err_code: ErrorCode,
    description: String,
}

impl ApiError {
    pub(crate) fn new(code: u16, err_code: ErrorCode, description: impl Into<String>) -> Self {
        Self {
            code,
            err_code,
            description: description.into(),
        }
    }

    pub(crate) fn not_modelled(what: &str) -> Self {
        Self::new(
            400,
            ErrorCode::BAD_REQUEST,
            format!("{what} is not modelled by ruststream-sim"),
        )
    }

    pub(crate) fn bad_request(problem: impl std::fmt::Display) -> Self {
        Self::new(
            400,
            ErrorCode::BAD_REQUEST,
            format!("bad request: {problem}"),
        )
    }
}

impl From<SimError> for ApiError {
    fn from(e: SimError) -> Self {
        // The server's own descriptions, where clients may match on them.
        match &e {
            SimError::Priority { rule, .. } => {
                return Self::new(400, ErrorCode(rule.err_code()), rule.to_string());
            }
            SimError::StreamNotFound(_) => {
                return Self::new(404, ErrorCode::STREAM_NOT_FOUND, "stream not found");
            }
            SimError::ConsumerNotFound { .. } => {
                return Self::new(404, ErrorCode::CONSUMER_NOT_FOUND, "consumer not found");
            }
            _ => {}
        }
        let description = e.to_string();
        let (code, err_code) = match e {
            SimError::StreamNotFound(_) => (404, ErrorCode::STREAM_NOT_FOUND),
            SimError::ConsumerNotFound { .. } => (404, ErrorCode::CONSUMER_NOT_FOUND),
            SimError::StreamExists(_) => (400, ErrorCode::STREAM_NAME_EXIST),
            SimError::SubjectsOverlap { .. } => (400, ErrorCode::STREAM_SUBJECT_OVERLAP),
            SimError::ConsumerExists { .. } => (400, ErrorCode::CONSUMER_ALREADY_EXISTS),
            SimError::StreamFull(_) => (503, ErrorCode::STREAM_STORE_FAILED),
            SimError::MessageTooLarge { .. } => (400, ErrorCode(10054)),
            SimError::WrongExpectation { header, .. } => match header {
                "Nats-Expected-Stream" => (400, ErrorCode(10060)),
                "Nats-Expected-Last-Msg-Id" => (400, ErrorCode(10070)),
                _ => (400, ErrorCode(10071)),
            },
            // A fault the test injected: no nats-server error is its twin.
            SimError::PublishFailed { .. } => (503, ErrorCode(10000)),
            SimError::InvalidConfig { .. } => (400, ErrorCode::STREAM_INVALID_CONFIG),
            SimError::WorkQueue { rule, .. } => (400, ErrorCode(rule.err_code())),
            _ => (400, ErrorCode::BAD_REQUEST),
        };
        Self {
            code,
            err_code,
            description,
        }
    }
}

/// A JetStream error answer, as nats-server writes one: `{"error": {"code", "err_code",
/// "description"}}`; for an API request, or a JetStream publish the model refused.
pub(crate) fn error_body(e: impl Into<ApiError>) -> Value {
    let e = e.into();
    json!({"error": {
        "code": e.code,
        "err_code": e.err_code.0,
        "description": e.description,
    }})
}

/// The name the response's `type` field gives a request on `subject`.
pub(crate) fn response_type(subject: &str) -> &'static str {
    let tokens: Vec<&str> = subject.split('.').collect();
    match tokens.as_slice() {
        ["INFO"] => "account_info",
        ["STREAM", "CREATE", ..] => "stream_create",
        ["STREAM", "UPDATE", ..] => "stream_update",
        ["STREAM", "INFO", ..] => "stream_info",
        ["STREAM", "DELETE", ..] => "stream_delete",
        ["STREAM", "NAMES", ..] => "stream_names",
        ["STREAM", "LIST", ..] => "stream_list",
        ["STREAM", "MSG", "GET", ..] => "stream_msg_get",
        ["CONSUMER", "CREATE", ..] | ["CONSUMER", "DURABLE", ..] => "consumer_create",
        ["CONSUMER", "INFO", ..] => "consumer_info",
        ["CONSUMER", "DELETE", ..] => "consumer_delete",
        ["CONSUMER", "NAMES", ..] => "consumer_names",
        ["CONSUMER", "LIST", ..] => "consumer_list",
        ["CONSUMER", "PAUSE", ..] => "consumer_pause",
        ["CONSUMER", "UNPIN", ..] => "consumer_unpin",
        _ => "error",
    }
}

/// A request's JSON object; an empty payload is an empty request.
pub(crate) fn request(payload: &[u8]) -> Result<Value, ApiError> {
    if payload.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    serde_json::from_slice(payload).map_err(ApiError::bad_request)
}

pub(crate) fn page(key: &str, items: Value, total: usize) -> Value {
    let mut body = json!({"total": total, "offset": 0, "limit": PAGE});
    body[key] = items;
    body
}

/// `asked` over the JSON of `T::default()`: what a request leaves out takes nats-server's
/// default, as the server fills it in (async-nats' types require some fields, such as
/// `discard`, that a hand-written request may leave out).
fn with_defaults<T: Default + serde::Serialize + serde::de::DeserializeOwned>(
    asked: Value,
) -> Result<T, ApiError> {
    let mut base = serde_json::to_value(T::default()).map_err(ApiError::bad_request)?;
    match (&mut base, asked) {
        (Value::Object(base), Value::Object(asked)) => base.extend(asked),
        (_, other) => {
            return Err(ApiError::bad_request(format!(
                "a configuration must be a JSON object, not {other}"
            )));
        }
    }
    serde_json::from_value(base).map_err(ApiError::bad_request)
}

pub(crate) fn stream_config(name: &str, payload: &[u8]) -> Result<stream::Config, ApiError> {
    let config: stream::Config = with_defaults(request(payload)?)?;
    if config.name != name {
        return Err(ApiError::new(
            400,
            ErrorCode::STREAM_MISMATCH,
            "stream name in subject does not match request",
        ));
    }
    Ok(config)
}

/// The pull consumer a `CONSUMER.CREATE` asks for, and its action (`create`, `update`, or
/// empty for either). A push consumer (a `deliver_subject`) is refused as not modelled, not
/// made a pull consumer.
pub(crate) fn consumer_config(payload: &[u8]) -> Result<(pull::Config, String), ApiError> {
    let asked = request(payload)?;
    let action = asked
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let config = asked.get("config").cloned().unwrap_or_else(|| json!({}));
    if config
        .get("deliver_subject")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
    {
        return Err(ApiError::not_modelled(
            "a push consumer (`deliver_subject`)",
        ));
    }
    if config.get("priority_policy").and_then(Value::as_str) == Some("prioritized") {
        // nats-server 2.12's policy, by a request's `priority`: not modelled.
        return Err(ApiError::not_modelled("priority_policy `prioritized`"));
    }
    let config = with_defaults(config)?;
    Ok((config, action))
}

/// The group a `CONSUMER.UNPIN` names (`{"group": …}`), checked as nats-server checks it
/// before it looks the consumer up.
pub(crate) fn unpin_group(payload: &[u8]) -> Result<String, ApiError> {
    let invalid =
        |problem: &str| ApiError::new(400, ErrorCode(10025), format!("invalid JSON: {problem}"));
    let asked: Value = if payload.trim_ascii().is_empty() {
        return Err(invalid("unexpected end of JSON input"));
    } else {
        serde_json::from_slice(payload).map_err(|e| invalid(&e.to_string()))?
    };
    let group = asked
        .get("group")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if group.is_empty() {
        return Err(invalid("consumer group not specified"));
    }
    let valid = group.len() <= 16
        && group
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '=' | '-'));
    if !valid {
        let rule = crate::model::error::PriorityRule::InvalidGroupName;
        return Err(ApiError::new(
            400,
            ErrorCode(rule.err_code()),
            rule.to_string(),
        ));
    }
    Ok(group)
}
