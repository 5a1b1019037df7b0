//! What a pull loop holds besides running deliveries: the handler slots held for messages it
//! requested ([`Held`]), and the prefetched messages that wait for a slot, renewed while they
//! wait ([`Prefetched`]), as the core's `PullAccounting` counts them.

use std::sync::Arc;
use std::time::Duration;

use ruststream_settlement::PullAccounting;
use tokio::sync::OwnedSemaphorePermit;

use crate::handling::flow::{Starts, start_delivery};
use crate::handling::lease::{WaitEnd, WaitLease};
use crate::handling::read::{arrived, read_jetstream_noted};
use crate::runtime::Runtime;
use crate::state::in_flight::InFlightGuard;
use crate::state::mount_context::MountContext;
use crate::support::incoming::Incoming;

/// The slots held for messages requested and not yet received: as many as the pull
/// accounting counts outstanding.
#[derive(Default)]
pub(super) struct Held(Option<OwnedSemaphorePermit>);

impl Held {
    pub(super) fn add(&mut self, permits: OwnedSemaphorePermit) {
        match self.0.as_mut() {
            Some(held) => held.merge(permits),
            None => self.0 = Some(permits),
        }
    }

    /// One held slot, for a message that came.
    pub(super) fn take_one(&mut self) -> Option<OwnedSemaphorePermit> {
        self.0.as_mut().and_then(|held| held.split(1))
    }

    /// Frees `n` held slots.
    pub(super) fn free(&mut self, n: usize) {
        let split = self.0.as_mut().and_then(|held| held.split(n));
        if split.is_none() && n > 0 {
            // Fewer held than `n` (cannot happen while the counts agree): free them all.
            self.0 = None;
        }
    }
}

/// A prefetched message that waits for a free handler slot: renewed while it waits (leases
/// on), its deadline and later deliveries kept either way ([`WaitLease`]), and counted in
/// flight, so that a shutdown waits for it and reports it abandoned if its grace period ends
/// first.
pub(super) struct Prefetched {
    msg: Incoming,
    lease: Option<WaitLease>,
    _in_flight: InFlightGuard,
}

/// The shortest time a delivery of the mount may go unacked, which bounds its prefetch: the
/// consumer's `ack_wait`, or its smallest `BackOff` step; `None` (no prefetch) with leases
/// off, since nothing would renew a message that waits.
pub(super) fn prefetch_deadline(ctx: &MountContext) -> Option<Duration> {
    let settings = ctx.lease_settings();
    if !settings.renew {
        return None;
    }
    let ack_wait = settings.ack_wait?;
    Some(
        settings
            .backoff
            .iter()
            .copied()
            .fold(ack_wait, Duration::min),
    )
}

/// Starts a message that waited, in the slot `permit`; one whose deadline passed while it
/// waited (its renewals could not be sent, or leases are off), or that the mount received
/// again meanwhile, is neither run nor settled: the server delivers it again, and a settlement
/// would be taken for the newer delivery (rule 16; seeds 391326 and 406590). `busy`
/// gives the handler slots running deliveries take, from the slots held for requests.
pub(super) async fn start_waiting<R: Runtime>(
    ctx: &Arc<MountContext>,
    pulls: &mut PullAccounting,
    busy: &impl Fn(usize) -> usize,
    waiting: Prefetched,
    permit: OwnedSemaphorePermit,
    starts: &mut Starts,
) {
    let Prefetched { msg, lease, .. } = waiting;
    if let Some(lease) = lease
        && lease.end::<R>(ctx, &msg) == WaitEnd::Late
    {
        return;
    }
    pulls.handle_started(R::now(), busy(pulls.held()));
    // Its arrival was noted when it came (`wait`).
    start_delivery::<R>(ctx.clone(), read_jetstream_noted, msg, permit, starts).await;
}

/// A prefetched message that found no free slot: it waits under its lease (renewed with
/// leases on), and is noted as received (the supervisor's suspect is a message the mount
/// never received, rule 20).
pub(super) fn wait<R: Runtime>(ctx: &MountContext, msg: Incoming) -> Prefetched {
    // Read once, for both (the ack reply subject is parsed once more when the message starts).
    let lease = match &msg.reply {
        Some(subject) => match ruststream_settlement::AckReply::parse(subject.as_bytes()) {
            Ok(reply) => {
                arrived(ctx, &reply);
                WaitLease::hold_read::<R>(ctx, subject, &reply)
            }
            Err(_) => None,
        },
        None => None,
    };
    Prefetched {
        lease,
        msg,
        _in_flight: ctx.in_flight.enter(),
    }
}
