//! Subject overlaps that cannot work, checked at start-up once every mount is bound or
//! subscribed and before anything is consumed (issue 41): the server's streams and each
//! JetStream mount's consumer filters gathered here, the decision the core's
//! ([`find_overlaps`]).

use futures_util::StreamExt;
use ruststream_settlement::{
    Descriptor, MountSubjects, OverlapSeverity, StoredSubjects, Wildcard, find_overlaps,
};

use super::startup::StartError;
use crate::state::checked_mount::{CheckedMount, Source};

/// Refuses the first overlap that cannot work, naming the mount, the stream or other mount,
/// and the subjects; logs a warning for each one that only has side effects.
///
/// The streams are listed only when a mount has a Core subject or a dead-letter subject
/// (nothing else can overlap). A server without JetStream, or an account not allowed to list
/// streams, leaves only the checks among the app's own mounts, with a debug line.
///
/// # Errors
/// [`StartError::Overlap`] for the first overlap refused.
pub(crate) async fn check_overlaps(
    js: &async_nats::jetstream::Context,
    checked: &[CheckedMount],
) -> Result<(), StartError> {
    let needs_streams = checked.iter().any(|c| {
        c.policy.dead_letter().is_some()
            || !matches!(c.policy.descriptor(), Descriptor::JetStream { .. })
    });
    let streams = match needs_streams {
        true => stored_subjects(js).await,
        false => Vec::new(),
    };
    let mut filters = Vec::with_capacity(checked.len());
    for c in checked {
        filters.push(consumer_filters(js, c, checked, &streams).await);
    }
    let mounts: Vec<MountSubjects<'_>> = checked
        .iter()
        .zip(&filters)
        .map(|(c, filters)| MountSubjects {
            policy: &c.policy,
            replies: c.handler.replies(),
            filters,
        })
        .collect();
    let stored: Vec<StoredSubjects<'_>> = streams
        .iter()
        .map(|(stream, subjects, no_ack)| StoredSubjects {
            stream,
            subjects,
            acknowledges: !no_ack,
        })
        .collect();
    for overlap in find_overlaps(&mounts, &stored) {
        match overlap.severity {
            OverlapSeverity::Refused => {
                return Err(StartError::Overlap {
                    mount: overlap.mount,
                    reason: overlap.message,
                });
            }
            OverlapSeverity::Warned => {
                tracing::warn!(mount = %overlap.mount, "{}", overlap.message);
            }
        }
    }
    Ok(())
}

/// A stream's name, the subjects it stores, and whether it has `no_ack`.
type Listed = (String, Vec<Wildcard>, bool);

/// Every stream of the account, the subjects it stores (subjects that do not parse are left
/// out: the server would not have taken them) and its `no_ack`. Empty, with a debug line, when
/// they cannot be listed.
async fn stored_subjects(js: &async_nats::jetstream::Context) -> Vec<Listed> {
    let mut listed = js.streams();
    let mut streams = Vec::new();
    while let Some(info) = listed.next().await {
        match info {
            Ok(info) => {
                let subjects = info
                    .config
                    .subjects
                    .iter()
                    .filter_map(|s| Wildcard::new(s).ok())
                    .collect();
                streams.push((info.config.name, subjects, info.config.no_ack));
            }
            Err(e) => {
                tracing::debug!(error = %e, "the streams could not be listed: subject overlaps with streams are not checked");
                return streams;
            }
        }
    }
    streams
}

/// A JetStream mount's consumer filter subjects; empty for one without a filter and for a
/// Core mount.
///
/// async-nats shows `filter_subjects` (several, server 2.10+) only with its `server_2_10`
/// feature, which the runtime leaves to the application. A consumer whose `filter_subject`
/// is empty has either no filter or several: its info is then asked for again and read here,
/// but only when its stream stores another mount's dead-letter or copy subject (the only
/// subjects a JetStream mount is checked against), so that start-up makes no request more
/// for the common case. When that request fails, the consumer is taken to have no filter.
async fn consumer_filters(
    js: &async_nats::jetstream::Context,
    mount: &CheckedMount,
    checked: &[CheckedMount],
    streams: &[Listed],
) -> Vec<Wildcard> {
    let Source::JetStream(consumer) = &mount.source else {
        return Vec::new();
    };
    let info = consumer.cached_info();
    let parse = |s: &String| Wildcard::new(s).ok();
    if !info.config.filter_subject.is_empty() {
        return parse(&info.config.filter_subject).into_iter().collect();
    }
    if !stores_taken_subject(&info.stream_name, checked, streams) {
        return Vec::new();
    }
    let subject = format!("CONSUMER.INFO.{}.{}", info.stream_name, info.name);
    let answer: Result<FiltersAnswer, _> = js.request(subject, &serde_json::json!({})).await;
    match answer {
        Ok(FiltersAnswer { config: Some(c) }) => {
            c.filter_subjects.iter().filter_map(parse).collect()
        }
        Ok(FiltersAnswer { config: None }) | Err(_) => Vec::new(),
    }
}

/// Whether stream `stream` stores a dead-letter or copy subject of one of the `checked`
/// mounts.
fn stores_taken_subject(stream: &str, checked: &[CheckedMount], streams: &[Listed]) -> bool {
    let stored: Vec<&Wildcard> = streams
        .iter()
        .filter(|(name, _, _)| name == stream)
        .flat_map(|(_, subjects, _)| subjects)
        .collect();
    checked
        .iter()
        .flat_map(|c| [c.policy.dead_letter(), c.policy.copy_subject()])
        .flatten()
        .any(|taken| stored.iter().any(|s| s.matches(taken)))
}

/// The part of a `CONSUMER.INFO` answer [`consumer_filters`] reads.
#[derive(serde::Deserialize)]
struct FiltersAnswer {
    config: Option<FiltersConfig>,
}

/// A consumer's filter subjects, as its info gives them.
#[derive(serde::Deserialize)]
struct FiltersConfig {
    #[serde(default)]
    filter_subjects: Vec<String>,
}
