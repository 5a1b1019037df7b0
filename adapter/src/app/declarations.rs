//! The checks of an app's mount declarations that need no server: run first, before the app
//! connects.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ruststream_settlement::{
    Descriptor, MAX_MIN_PENDING, MountPolicy, PULL_EXPIRES, PriorityPolicy, check_group_name,
};

use super::startup::StartError;
use crate::api::batch::MAX_BATCH;
use crate::api::handler::Handler;
use crate::api::keyed::Key;
use crate::api::mount::{MAX_CONCURRENCY, Mount};

/// A mount as declared and validated: its declaration, its handler and its policy, which
/// start-up checks against the server, and the supervisor again when it subscribes the mount
/// again (rule 20).
pub(crate) type Declared = (Mount, Arc<dyn Handler>, MountPolicy);

/// Validates every mount: the pure rules of its declaration, a name of its own and a durable
/// of its own, and the runtime settings a server would take wrongly or that cannot work.
///
/// # Errors
/// [`StartError::Declaration`], [`StartError::DuplicateMount`], [`StartError::SharedConsumer`]
/// and [`StartError::Setting`], each naming the mount.
pub(super) fn validate(
    mounts: Vec<(Mount, Arc<dyn Handler>)>,
) -> Result<Vec<Declared>, StartError> {
    let mut names = HashSet::new();
    let mut consumers: HashMap<(String, String), String> = HashMap::new();
    let mut declared = Vec::with_capacity(mounts.len());
    for (mount, handler) in mounts {
        if !names.insert(mount.name().to_owned()) {
            return Err(StartError::DuplicateMount(mount.name().to_owned()));
        }
        let policy = mount.declaration.validate()?;
        if let Descriptor::JetStream { stream, consumer } = policy.descriptor() {
            let key = (stream.clone(), consumer.clone());
            if let Some(first) = consumers.insert(key, mount.name().to_owned()) {
                return Err(StartError::SharedConsumer {
                    stream: stream.clone(),
                    consumer: consumer.clone(),
                    first,
                    second: mount.name().to_owned(),
                });
            }
        }
        if mount.concurrency.get() > MAX_CONCURRENCY {
            return Err(StartError::Setting {
                mount: mount.name().to_owned(),
                reason: format!(
                    "concurrency {} is above the most a mount can run at once, {}",
                    mount.concurrency, MAX_CONCURRENCY
                ),
            });
        }
        check_batch(&mount)?;
        if mount.strict_order && mount.key.is_none() {
            return Err(StartError::Setting {
                mount: mount.name().to_owned(),
                reason:
                    "strict order needs a key (`Mount::key`): it orders the deliveries of each key"
                        .to_owned(),
            });
        }
        check_waits(&mount, &policy)?;
        if mount.strict_order && policy.max_attempts().is_none() {
            return Err(StartError::Setting {
                mount: mount.name().to_owned(),
                reason: "strict order needs `max_attempts`: without a limit a delivery that always retries would hold its key for ever".to_owned(),
            });
        }
        if mount.ack_wait_or_default().is_zero()
            && matches!(policy.descriptor(), Descriptor::JetStream { .. })
        {
            return Err(StartError::Setting {
                mount: mount.name().to_owned(),
                reason: "ack_wait is zero: nats-server would take it as unset and give the consumer its own default (30 s); give a positive duration, or leave the runtime's default".to_owned(),
            });
        }
        if handler.replies() && matches!(policy.descriptor(), Descriptor::JetStream { .. }) {
            return Err(StartError::Setting {
                mount: mount.name().to_owned(),
                reason: "its handler returns a `Reply`, but a JetStream delivery's reply subject is its ack reply subject, which the runtime settles: publish the answer to a subject of your own through the handler's `Context`".to_owned(),
            });
        }
        check_priority_group(&mount, &policy)?;
        declared.push((mount, handler, policy));
    }
    Ok(declared)
}

/// Refuses a priority group that cannot work: on a Core mount (Core NATS has none: a queue
/// group shares a subject), with a name the server refuses, an overflow threshold above what
/// the server reads, and a `priority_timeout` without a pinned group, of zero or above what
/// the server reads (it would take either as unset, 2 minutes). A `priority_timeout` below
/// 2 s is warned about.
fn check_priority_group(mount: &Mount, policy: &MountPolicy) -> Result<(), StartError> {
    let refuse = |reason: &str| {
        Err(StartError::Setting {
            mount: mount.name().to_owned(),
            reason: reason.to_owned(),
        })
    };
    let jetstream = matches!(policy.descriptor(), Descriptor::JetStream { .. });
    match &mount.priority {
        Some(_) if !jetstream => {
            return refuse(
                "a priority group is for JetStream mounts: Core NATS has none (share a Core subject between instances with `Mount::queue_group`)",
            );
        }
        Some((group, policy)) => {
            check_group_name(group).map_err(|reason| StartError::Setting {
                mount: mount.name().to_owned(),
                reason,
            })?;
            if let PriorityPolicy::Overflow { min_pending } = policy
                && *min_pending > MAX_MIN_PENDING
            {
                return refuse(&format!(
                    "its overflow threshold {min_pending} is above the largest the server reads, {MAX_MIN_PENDING}: every pull request would be refused"
                ));
            }
        }
        None => {}
    }
    match (mount.priority_timeout, &mount.priority) {
        (Some(_), Some((_, PriorityPolicy::Pinned))) | (None, _) => {}
        (Some(_), _) => {
            return refuse(
                "a priority_timeout is for a pinned priority group (`Mount::priority_group(group, PriorityPolicy::Pinned)`)",
            );
        }
    }
    if mount.priority_timeout.is_some_and(|t| t.is_zero()) {
        return refuse(
            "priority_timeout is zero: nats-server would take it as unset and pin an instance for 2 minutes after it stops pulling; give a positive duration, or leave the runtime's default",
        );
    }
    if let Some(timeout) = mount.priority_timeout
        && i64::try_from(timeout.as_nanos()).is_err()
    {
        return refuse(&format!(
            "priority_timeout {timeout:?} is above what the server reads (a signed 64-bit count of nanoseconds, about 292 years): it would take it as unset, 2 minutes"
        ));
    }
    if let Some(timeout) = mount.priority_timeout
        && timeout < 2 * PULL_EXPIRES
    {
        tracing::warn!(mount = %mount.name(), ?timeout,
            "priority_timeout is shorter than two pull requests' expiry (2 s): the server may pin another instance while the pinned one's request waits, and the pin moves between live instances");
    }
    Ok(())
}

/// Refuses a batch mount whose settings cannot work (rule 23): a `max` of 0 or above
/// [`MAX_BATCH`], more slots than a mount may hold, or a batch declared on one side only (the
/// mount's [`Mount::batch`] and its handler).
fn check_batch(mount: &Mount) -> Result<(), StartError> {
    let refuse = |reason: String| {
        Err(StartError::Setting {
            mount: mount.name().to_owned(),
            reason,
        })
    };
    match (mount.batch, mount.takes_batches) {
        (None, false) => Ok(()),
        (Some(_), false) => refuse("it declares a batch (`Mount::batch`), but its handler takes single deliveries: mount it with `App::mount_batch`, `App::mount_json_batch` or `App::mount_typed_batch`, or remove `batch`".to_owned()),
        (None, true) => refuse("its handler takes batches, but the mount declares no batch size: add `Mount::batch(max, max_wait)`".to_owned()),
        (Some((0, _)), true) => refuse("its batch max is 0: a batch holds at least one delivery".to_owned()),
        (Some((max, _)), true) if max > MAX_BATCH => refuse(format!(
            "its batch max {max} is above the most a batch may hold, {MAX_BATCH}"
        )),
        (Some((max, _)), true) if mount.concurrency.get().saturating_mul(max) > MAX_CONCURRENCY => {
            refuse(format!(
                "concurrency {} × batch max {max} is above the most deliveries a mount can hold at once, {MAX_CONCURRENCY}",
                mount.concurrency
            ))
        }
        (Some(_), true) => Ok(()),
    }
}

/// Refuses what makes deliveries wait in a way that cannot work (rules 23 and 24): on a
/// JetStream mount with leases off, a batch, a key or strict order (a delivery waiting for its
/// batch, its key's turn or its run in place past its deadline would be delivered again by the
/// server while it waits, and run twice or out of order); and a subject-token key on a Core
/// wildcard whose retries make copies (a copy comes back on the copy subject, whose token is
/// not the original's key).
fn check_waits(mount: &Mount, policy: &MountPolicy) -> Result<(), StartError> {
    let refuse = |reason: String| {
        Err(StartError::Setting {
            mount: mount.name().to_owned(),
            reason,
        })
    };
    let waits = match (&mount.batch, &mount.key, mount.strict_order) {
        (_, _, true) => Some("strict order"),
        (Some(_), _, _) => Some("a batch"),
        (None, Some(_), false) => Some("a key"),
        (None, None, false) => None,
    };
    if let Some(what) = waits
        && !mount.leases
        && matches!(policy.descriptor(), Descriptor::JetStream { .. })
    {
        return refuse(format!(
            "{what} needs leases (`Mount::leases(true)`, the default): a delivery that waits (for its batch, its key's turn, or to run again in place) past ack_wait would be delivered again by the server while it waits, and run twice or out of order"
        ));
    }
    let copies = policy.max_attempts().is_some() || policy.backoff().is_some();
    if let (Descriptor::CoreWildcard { copy_subject, .. }, Some(Key::SubjectToken(_))) =
        (policy.descriptor(), &mount.key)
        && copies
        && !mount.strict_order
    {
        return refuse(format!(
            "a subject-token key on a Core wildcard whose retries make copies: a copy comes back on the copy subject `{copy_subject}`, whose token is not the original's key, so a retry would run beside its key's later deliveries; key it by a header or a function (`Key::header`, `Key::function`), or use strict order, which makes no copies"
        ));
    }
    Ok(())
}
