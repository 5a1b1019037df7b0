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
    let filters: Vec<Vec<Wildcard>> = checked.iter().map(consumer_filters).collect();
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

/// A JetStream mount's consumer filter subjects (its `filter_subject`, or its several
/// `filter_subjects`, server 2.10+, as its bound info gives them); empty for one without a
/// filter and for a Core mount.
fn consumer_filters(mount: &CheckedMount) -> Vec<Wildcard> {
    let Source::JetStream(consumer) = &mount.source else {
        return Vec::new();
    };
    let config = &consumer.cached_info().config;
    std::iter::once(&config.filter_subject)
        .filter(|s| !s.is_empty())
        .chain(&config.filter_subjects)
        .filter_map(|s| Wildcard::new(s).ok())
        .collect()
}
