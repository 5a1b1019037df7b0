//! Reading a delivered message into what the core needs to know of it: its attempt and, on
//! JetStream, its metadata.

use ruststream_settlement::{AckReply, Delivery as CoreDelivery, RetryCountReading};

use super::publish::header_pairs;
use crate::state::mount_context::MountContext;
use crate::support::incoming::Incoming;

/// How a mount loop reads a delivered message into what the core needs to know of it:
/// [`read_core`] on a Core mount, [`read_jetstream`] on a JetStream one. `None` when the
/// message cannot be handled at all (logged).
pub(crate) trait Reader:
    for<'m> Fn(&MountContext, &'m Incoming) -> Option<CoreDelivery<'m>> + Copy + Send + Sync + 'static
{
}

impl<F> Reader for F where
    F: for<'m> Fn(&MountContext, &'m Incoming) -> Option<CoreDelivery<'m>>
        + Copy
        + Send
        + Sync
        + 'static
{
}

/// A Core message: its attempt from the retry-count header (rule 5).
#[inline]
pub(crate) fn read_core<'m>(ctx: &MountContext, msg: &'m Incoming) -> Option<CoreDelivery<'m>> {
    let reading = match msg.headers {
        None => RetryCountReading::default(),
        Some(_) => RetryCountReading::read(header_pairs(msg)),
    };
    // Rule 18's jitter tells Core messages apart by subject and payload; only a mount with a
    // backoff pays for the hash. Built where it is returned: the delivery is as large as a
    // JetStream one, and moving it costs (issue 13).
    Some(match ctx.policy.backoff() {
        None => CoreDelivery::core(&msg.subject, reading),
        Some(_) => CoreDelivery::core(&msg.subject, reading).keyed_by_payload(&msg.payload),
    })
}

/// A JetStream message: its metadata from the ack reply subject (rule 1). `None` for a
/// message whose ack reply subject cannot be read (rule 22, logged with its subject): without
/// it there is no attempt count and nothing to settle with, and running the handler would
/// make the retry limit vanish, so it is neither handled nor settled.
#[inline]
pub(crate) fn read_jetstream<'m>(
    ctx: &MountContext,
    msg: &'m Incoming,
) -> Option<CoreDelivery<'m>> {
    read_jetstream_noting(ctx, msg, true)
}

/// As [`read_jetstream`], for a message whose arrival was noted when it was received (a
/// prefetched one that waited for a slot, see `loops::prefetch::wait`): its arrival is not
/// noted a second time, which would change nothing but cost a lock and a heap search per
/// message.
#[inline]
pub(crate) fn read_jetstream_noted<'m>(
    ctx: &MountContext,
    msg: &'m Incoming,
) -> Option<CoreDelivery<'m>> {
    read_jetstream_noting(ctx, msg, false)
}

#[inline]
fn read_jetstream_noting<'m>(
    ctx: &MountContext,
    msg: &'m Incoming,
    note: bool,
) -> Option<CoreDelivery<'m>> {
    let reply = msg.reply.as_ref().map_or(&b""[..], |r| r.as_bytes());
    match AckReply::parse(reply) {
        Ok(r) => {
            if note {
                arrived(ctx, &r);
            }
            Some(CoreDelivery::jetstream(&msg.subject, r))
        }
        Err(e) => {
            tracing::error!(mount = %ctx.name, subject = %msg.subject, error = %e,
                "JetStream message with an unreadable ack reply subject: not handled, not settled");
            None
        }
    }
}

/// Notes a JetStream delivery the mount received: for the supervisor's suspects (rule 20), and
/// for the leases of earlier deliveries of its message, which it supersedes (rule 16). Noted
/// again when the same delivery is read again: that changes nothing.
pub(crate) fn arrived(ctx: &MountContext, reply: &AckReply<'_>) {
    ctx.received.note(reply.stream_sequence);
    ctx.leases
        .delivered(ruststream_settlement::LeasedDelivery::of(ctx.index, reply));
}

/// The delivery's stream sequence, on JetStream.
pub(crate) fn stream_sequence(delivery: &CoreDelivery<'_>) -> Option<u64> {
    match delivery.model {
        ruststream_settlement::Model::JetStream(r) => Some(r.stream_sequence),
        ruststream_settlement::Model::Core(_) => None,
    }
}
