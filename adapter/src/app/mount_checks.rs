//! Every mount checked against the server before anything is consumed (rules 8 and 11): its
//! stream, its consumer (bound, or created), where its dead letters go, and its Core
//! subscriptions; whatever a refused start created removed again.

use std::sync::Arc;
use std::time::Duration;

use async_nats::Client;
use async_nats::jetstream::consumer::{
    AckPolicy as JsAckPolicy, PriorityPolicy as JsPriorityPolicy, pull,
};
use async_nats::jetstream::context::ConsumerInfoErrorKind;
use ruststream_settlement::{
    AckPolicy, ConsumerFacts, ConsumerPriority, Descriptor, MountPolicy, PriorityPolicy,
    ServerFeature, check_priority, check_server_has,
};

use super::overlaps::check_overlaps;
use super::startup::{StartError, server_error};
use crate::api::handler::Handler;
use crate::api::mount::Mount;
use crate::runtime::Runtime;
use crate::state::checked_mount::{CheckedMount, Source};
use crate::state::mount_context::DeadLetterSink;

/// Below this `ack_wait` a lease (rule 16) may not be renewed in time: a delivery's deadline
/// counts from the handler's first poll, a little after the server sent it, and the first
/// renewal comes at half the span. Start-up warns; it does not refuse.
const SHORTEST_LEASED_ACK_WAIT: Duration = Duration::from_millis(100);

/// Whether [`check_mounts`] checks the mounts' subjects for overlaps
/// ([`check_overlaps`](super::overlaps::check_overlaps)): at start-up, with every mount of the
/// app; not when the supervisor subscribes some of them again (rule 20), since they passed at
/// start-up and the app's other mounts are not among them (a stream added meanwhile would
/// otherwise turn a recovery into a failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overlaps {
    /// Check them.
    Check,
    /// Leave them.
    Skip,
}

/// Checks every mount against the server, binds or creates its durable, decides where its
/// dead letters go, subscribes every Core mount, and waits for the server to have processed
/// it all. A refusal removes the durables created on the way.
pub(crate) async fn check_mounts<R: Runtime>(
    client: &Client,
    declared: Vec<(Mount, Arc<dyn Handler>, MountPolicy)>,
    overlaps: Overlaps,
) -> Result<Vec<CheckedMount>, StartError> {
    let js = async_nats::jetstream::new(client.clone());
    let mut created = Vec::new();
    let checked = async {
        let mut checked = Vec::with_capacity(declared.len());
        for (mount, handler, policy) in declared {
            let consumer = match policy.descriptor() {
                Descriptor::JetStream { stream, consumer } => {
                    Some(bind_consumer(&js, &mount, &policy, stream, consumer, &mut created).await?)
                }
                Descriptor::CoreSubject(_) | Descriptor::CoreWildcard { .. } => None,
            };
            if consumer.is_some() {
                let core_only = [
                    (mount.queue_group.is_some(), "a queue group"),
                    (mount.subscription_buffer.is_some(), "a subscription buffer"),
                ];
                for (_, what) in core_only.iter().filter(|(set, _)| *set) {
                    tracing::warn!(mount = %mount.name(),
                        "{what} is for Core mounts: a JetStream mount has no use for it, and it is ignored");
                }
            }
            if policy.provenance() && policy.dead_letter().is_none() {
                tracing::warn!(mount = %mount.name(),
                    "provenance headers go on dead letters, and the mount declares no dead-letter subject: they are never sent");
            }
            if consumer.is_none() && policy.backoff().is_some() && policy.max_attempts().is_none() {
                tracing::warn!(mount = %mount.name(),
                    "a Core mount with a backoff and no max_attempts copies a retried message after each delay without end (rule 18): set max_attempts to bound it");
            }
            let config = consumer.as_ref().map(|c| &c.cached_info().config);
            if let Some(ack_wait) = config.map(|c| c.ack_wait)
                && ack_wait < SHORTEST_LEASED_ACK_WAIT
            {
                tracing::warn!(mount = %mount.name(), ?ack_wait,
                    "consumer ack_wait is shorter than 100 ms: a message can be redelivered before its running handler's lease is first renewed, and run twice");
            }
            if let (Some((max, max_wait)), Some(pending)) =
                (mount.batch, config.map(|c| c.max_ack_pending))
                && pending > 0
                && i64::try_from(max).is_ok_and(|max| max > pending)
            {
                tracing::warn!(mount = %mount.name(), max, max_ack_pending = pending, ?max_wait,
                    "the batch max is above the consumer's max_ack_pending: the server never has that many messages out at once, so no batch fills and each waits its max_wait (rule 23)");
            }
            let filter = config.map(|c| c.filter_subject.as_str());
            let confirm_within =
                config.map(|c| ruststream_settlement::dead_letter_confirm_within(c.ack_wait));
            let dead_letters = dead_letter_sink(&js, &policy, filter, confirm_within).await?;
            tracing::debug!(mount = %mount.name(), "mount checked");
            // Every Core mount subscribes before any loop starts, so that a refused
            // subscription stops start-up with nothing consumed.
            let source = match consumer {
                Some(consumer) => Source::JetStream(Box::new(consumer)),
                None => Source::Core(subscribe(client, &mount, &policy).await?),
            };
            checked.push(CheckedMount {
                mount,
                handler,
                policy,
                source,
                dead_letters,
            });
        }
        if overlaps == Overlaps::Check {
            check_overlaps(&js, &checked).await?;
        }
        // Once `start` returns, the server has processed every subscription: a message
        // published after that reaches the mounts.
        round_trip::<R>(client).await?;
        Ok::<_, StartError>(checked)
    }
    .await;
    if checked.is_err() {
        remove_created(&created).await;
    }
    checked
}

/// An error of the server's JetStream API, said plainly when nothing answered it: a server
/// without JetStream enabled has no responder for `$JS.API` (async-nats then says "requested
/// JetStream resource does not exist", which reads as a missing stream).
pub(crate) fn jetstream_error(e: &(dyn std::error::Error + 'static)) -> String {
    use async_nats::jetstream::context::{RequestError, RequestErrorKind};
    let no_responders = std::iter::successors(Some(e), |e| e.source())
        .filter_map(|e| e.downcast_ref::<RequestError>())
        .any(|r| r.kind() == RequestErrorKind::NoResponders);
    if no_responders {
        "JetStream is not enabled on the server: nothing answers its API (start nats-server with `-js`)"
            .to_owned()
    } else {
        e.to_string()
    }
}

/// Removes the durables a refused start-up created, so that a refusal leaves the server as
/// it found it. One that cannot be removed is logged.
async fn remove_created(created: &[(async_nats::jetstream::stream::Stream, String)]) {
    for (stream, consumer) in created {
        match stream.delete_consumer(consumer).await {
            Ok(_) => {
                tracing::info!(%consumer, "start-up refused: the durable it created is removed")
            }
            Err(e) => {
                tracing::warn!(%consumer, error = %e, "start-up refused: the durable it created could not be removed")
            }
        }
    }
}

/// Binds the mount's durable, or creates it (explicit ack, the mount's `ack_wait`, no
/// `max_deliver`; recorded in `created`), and checks it against rule 11. An existing
/// consumer is never changed; one whose filter subject is not the one the mount declares
/// (when it declares one) is refused.
async fn bind_consumer(
    js: &async_nats::jetstream::Context,
    mount: &Mount,
    policy: &MountPolicy,
    stream: &str,
    consumer: &str,
    created: &mut Vec<(async_nats::jetstream::stream::Stream, String)>,
) -> Result<async_nats::jetstream::consumer::PullConsumer, StartError> {
    let name = mount.name();
    let stream_handle = js
        .get_stream(stream)
        .await
        .map_err(|e| server_error(name, format!("stream `{stream}`: {}", jetstream_error(&e))))?;
    if mount.priority.is_some() {
        let announced = js.client().server_info().version;
        check_server_has(&announced, ServerFeature::PriorityGroups).map_err(|reason| {
            StartError::Setting {
                mount: name.to_owned(),
                reason: format!("it declares a priority group, but {reason}"),
            }
        })?;
    }
    let mut config = pull::Config {
        durable_name: Some(consumer.to_owned()),
        ack_policy: JsAckPolicy::Explicit,
        ack_wait: mount.ack_wait_or_default(),
        max_deliver: -1,
        filter_subject: mount.filter_subject.clone().unwrap_or_default(),
        ..Default::default()
    };
    if let Some((group, policy)) = &mount.priority {
        config.priority_groups = vec![group.clone()];
        config.priority_policy = match policy {
            PriorityPolicy::Pinned => {
                config.priority_timeout = mount.priority_timeout_or_default();
                JsPriorityPolicy::PinnedClient
            }
            _ => JsPriorityPolicy::Overflow,
        };
    }
    let refused = |e: &(dyn std::error::Error + 'static)| {
        server_error(
            name,
            format!(
                "consumer `{consumer}` on stream `{stream}`: {}",
                jetstream_error(e)
            ),
        )
    };
    let bound = match stream_handle.consumer_info(consumer).await {
        Ok(_) => stream_handle
            .get_consumer::<pull::Config>(consumer)
            .await
            .map_err(|e| refused(&*e))?,
        Err(e) if e.kind() == ConsumerInfoErrorKind::NotFound => {
            let bound = stream_handle
                .create_consumer(config)
                .await
                .map_err(|e| refused(&e))?;
            created.push((stream_handle, consumer.to_owned()));
            bound
        }
        Err(e) => return Err(refused(&e)),
    };
    let info = &bound.cached_info().config;
    if let Some(wanted) = mount.priority_timeout
        && info.priority_policy == JsPriorityPolicy::PinnedClient
        && info.priority_timeout != wanted
    {
        tracing::warn!(mount = %name, consumer, stream, has = ?info.priority_timeout, ?wanted,
            "the consumer exists with another priority_timeout, which it keeps (an existing consumer is never changed): the failover time is the consumer's");
    }
    for warning in check_consumer_fits(mount, policy, stream, consumer, info)? {
        tracing::warn!("{warning}");
    }
    Ok(bound)
}

/// Whether the consumer `consumer` of `stream`, configured as `info`, fits the mount (rule 11):
/// its filter subject (when the mount declares one), its priority policy and groups, its ack
/// policy. Start-up refuses a mount on a consumer that does not fit; the supervisor's re-read
/// finds one changed or made again under a running mount, and makes the mount refused. The
/// warnings of a consumer that fits (for the log), or why it does not.
///
/// # Errors
/// [`StartError::Setting`] naming the mount and what differs.
pub(crate) fn check_consumer_fits(
    mount: &Mount,
    policy: &MountPolicy,
    stream: &str,
    consumer: &str,
    info: &async_nats::jetstream::consumer::Config,
) -> Result<Vec<String>, StartError> {
    let name = mount.name();
    if let Some(wanted) = &mount.filter_subject
        && info.filter_subject != *wanted
    {
        let has = match info.filter_subject.as_str() {
            "" => "no filter subject (or several filter subjects)".to_owned(),
            other => format!("filter subject `{other}`"),
        };
        return Err(StartError::Setting {
            mount: name.to_owned(),
            reason: format!(
                "consumer `{consumer}` on stream `{stream}` exists with {has}, not the mount's `{wanted}`: an existing consumer is never changed, and it would deliver other messages than the mount declares; change the mount's filter_subject, or the consumer"
            ),
        });
    }
    let consumer_policy = priority_policy_name(&info.priority_policy);
    check_priority(
        mount.priority.as_ref().map(|(g, p)| (g.as_str(), *p)),
        ConsumerPriority {
            policy: &consumer_policy,
            groups: &info.priority_groups,
        },
    )
    .map_err(|e| StartError::Setting {
        mount: name.to_owned(),
        reason: format!("consumer `{consumer}` on stream `{stream}`: {e}"),
    })?;
    let facts = ConsumerFacts {
        ack_policy: ack_policy(info.ack_policy),
        max_deliver: info.max_deliver,
        backoff: !info.backoff.is_empty(),
    };
    Ok(policy
        .check_consumer(&facts)?
        .into_iter()
        .map(|w| w.to_string())
        .collect())
}

/// A consumer's priority policy as the server names it (`none`, `overflow`,
/// `pinned_client`, …), through its JSON name, for the same reason as [`ack_policy`]: the
/// enum grows variants behind async-nats' features.
fn priority_policy_name(policy: &JsPriorityPolicy) -> String {
    match serde_json::to_value(policy) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "unknown".to_owned(),
    }
}

/// The core's view of an async-nats ack policy, through its JSON name. async-nats' enum grows
/// variants behind its `server_2_*` features (`FlowControl` with `server_2_14`, on by
/// default), which a `match` here could not name without breaking the build for users with
/// other features; a name the core does not know is [`AckPolicy::Unknown`], refused as not
/// explicit.
fn ack_policy(policy: JsAckPolicy) -> AckPolicy {
    match serde_json::to_value(policy) {
        Ok(serde_json::Value::String(name)) => AckPolicy::from_name(&name),
        _ => AckPolicy::Unknown,
    }
}

/// Decides where the mount's dead letters go (rule 8): a JetStream publish where a stream
/// stores the subject; otherwise a refusal for a JetStream mount, a plain publish with a
/// warning for a Core mount. A JetStream mount whose dead letters would come back to it
/// through its own stream and filter is refused.
async fn dead_letter_sink(
    js: &async_nats::jetstream::Context,
    policy: &MountPolicy,
    consumer_filter: Option<&str>,
    confirm_within: Option<Duration>,
) -> Result<DeadLetterSink, StartError> {
    let Some(subject) = policy.dead_letter() else {
        return Ok(DeadLetterSink::Plain);
    };
    let stored_by = match js.stream_by_subject(subject.as_str()).await {
        Ok(stream) => Some(stream),
        Err(e) => {
            tracing::debug!(mount = policy.name(), %subject, error = %e, "no stream found for the dead-letter subject");
            None
        }
    };
    if let Some(warning) =
        policy.check_dead_letter_storage(stored_by.as_deref(), consumer_filter)?
    {
        tracing::warn!("{warning}");
    }
    Ok(match stored_by {
        Some(stream) => {
            tracing::debug!(mount = policy.name(), %subject, %stream, "dead letters stored by a stream");
            let mut js = js.clone();
            if let Some(limit) = confirm_within {
                js.set_timeout(limit);
            }
            DeadLetterSink::JetStream(Box::new(js))
        }
        None => DeadLetterSink::Plain,
    })
}

/// The Core subscriptions of a mount: its subject or wildcard, in its queue group if any,
/// and for a wildcard that does not match its copy subject, the copy subject too (rule 10).
/// None for a JetStream mount.
async fn subscribe(
    client: &Client,
    mount: &Mount,
    policy: &MountPolicy,
) -> Result<Vec<async_nats::Subscriber>, StartError> {
    let subjects: Vec<String> = match policy.descriptor() {
        Descriptor::CoreSubject(s) => vec![s.to_string()],
        Descriptor::CoreWildcard { wildcard, .. } => std::iter::once(wildcard.to_string())
            .chain(policy.extra_subscription().map(ToString::to_string))
            .collect(),
        Descriptor::JetStream { .. } => Vec::new(),
    };
    let mut subscribers = Vec::with_capacity(subjects.len());
    for subject in subjects {
        let subscriber = match &mount.queue_group {
            Some(group) => client.queue_subscribe(subject.clone(), group.clone()).await,
            None => client.subscribe(subject.clone()).await,
        }
        .map_err(|e| server_error(mount.name(), format!("subscribe to `{subject}`: {e}")))?;
        subscribers.push(subscriber);
    }
    Ok(subscribers)
}

/// How long the start-up round trip with the server may take.
const ROUND_TRIP_TIMEOUT: Duration = Duration::from_secs(10);

/// Waits until the server has processed everything this client sent so far.
///
/// async-nats' `flush` only writes the client's buffer to the socket; it does not wait for the
/// server. The server handles one connection's operations in order, so a message the client
/// publishes to itself comes back only after every earlier `SUB` took effect.
async fn round_trip<R: Runtime>(client: &Client) -> Result<(), StartError> {
    use futures_util::StreamExt;
    let failed = |what: &str| StartError::Connect(format!("no round trip with the server: {what}"));
    let inbox = client.new_inbox();
    let mut echo = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| failed(&e.to_string()))?;
    client
        .publish(inbox, bytes::Bytes::new())
        .await
        .map_err(|e| failed(&e.to_string()))?;
    client
        .flush()
        .await
        .map_err(|e| failed(&e.kind().to_string()))?;
    match R::timeout(ROUND_TRIP_TIMEOUT, echo.next()).await {
        Some(Some(_)) => Ok(()),
        Some(None) => Err(failed("the subscription closed")),
        None => Err(failed("timed out")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_policies_map_by_name_whatever_async_nats_features_are_on() {
        for name in ["none", "all", "explicit", "flow_control"] {
            // `flow_control` parses only where async-nats' `server_2_14` feature is on.
            if let Ok(policy) = serde_json::from_str::<JsAckPolicy>(&format!("\"{name}\"")) {
                assert_eq!(ack_policy(policy).name(), name);
            }
        }
        assert_eq!(ack_policy(JsAckPolicy::Explicit), AckPolicy::Explicit);
    }
}
