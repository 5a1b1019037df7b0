//! A delivery's side of its lease (rule 16): a handler still running after its first poll runs
//! under a lease in the app's one [`LeaseRoom`] ([`run_leased`]), and a prefetched JetStream
//! message that waits for a handler slot holds one too ([`WaitLease`]); the lease loop
//! (`loops::lease_loop`, one timer per app) renews JetStream deliveries with `+WPI`
//! ([`renew`]) and cancels handlers at their mount's time limit, as the core's `Leases`
//! decide. A handler that finishes at its first poll never gets here: no timer, no publish.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::{Client, Subject};
use futures_util::FutureExt;
use ruststream_settlement::{
    AckReply, Delivery as CoreDelivery, Event, LeaseEnd, LeaseTerms, LeasedDelivery, Outcome,
    WORK_IN_PROGRESS,
};
use tokio::sync::{oneshot, watch};

use super::handler_run::{HandlerRun, handled};
use crate::runtime::Runtime;
use crate::state::lease_room::{LeaseIo, LeaseRoom};
use crate::state::mount_context::MountContext;
use crate::support::incoming::Incoming;
use crate::support::metrics::Wire;

/// A handler's run under its lease: its event, and whether it came in time.
pub(crate) struct Leased {
    pub(crate) event: Event,
    pub(crate) end: LeaseEnd,
    /// The handler's error text, kept for provenance headers (see [`handled`]).
    pub(crate) error: Option<Box<str>>,
}

/// The lease of a handler that did not finish at its first poll, taken on the mount's task
/// before anything else is read ([`Lease::take`]), so that a later delivery of the same
/// message that the mount receives next always finds it (rule 16: it supersedes it). Ended by
/// [`run_leased`], or, if the delivery is dropped before (a task cancelled), when it is
/// dropped: a lease never outlives its handler.
pub(crate) struct Lease {
    room: Arc<LeaseRoom>,
    /// `None` once ended.
    key: Option<ruststream_settlement::LeaseKey>,
    cancelled: oneshot::Receiver<()>,
    started: Instant,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            // Nothing is sent for it: the clock read only dates the end.
            let _ = self.room.end(key, Instant::now());
        }
    }
}

impl Lease {
    /// Takes the lease of `delivery`, whose handler started at `started` and is still running.
    pub(crate) fn take(
        ctx: &MountContext,
        msg: &Incoming,
        delivery: &CoreDelivery<'_>,
        started: Instant,
    ) -> Self {
        let (cancel, cancelled) = oneshot::channel();
        let io = LeaseIo {
            reply: msg.reply.clone(),
            cancel: Some(cancel),
            metrics: ctx.metrics.clone(),
        };
        let terms = ctx.lease_settings().terms(ctx.index, delivery);
        let key = ctx.leases.start(terms, io, started);
        Self {
            room: ctx.leases.clone(),
            key: Some(key),
            cancelled,
            started,
        }
    }
}

/// Runs the rest of a handler that did not finish at its first poll, under its `lease`:
/// renewed while it runs (JetStream, leases on), cancelled at the mount's time limit (then
/// logged at error level and counted as no outcome).
///
/// The deadline counts from the handler's start, a little after the server sent the message;
/// renewals come at half the span, so with leases on that margin never matters, and with
/// leases off a result that lands within it past the server's deadline is still sent.
pub(crate) async fn run_leased<R: Runtime>(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    run: HandlerRun,
    mut lease: Lease,
) -> Leased {
    let started = lease.started;
    let result = tokio::select! {
        result = run => Some(result),
        Ok(()) = &mut lease.cancelled => None,
    };
    let now = R::now();
    if ctx.metrics.timed() {
        ctx.metrics
            .handled_in(now.saturating_duration_since(started));
    }
    let end = match lease.key.take() {
        Some(key) => ctx.leases.end(key, now),
        None => LeaseEnd::OnTime,
    };
    let (event, error) = match result {
        Some(result) => handled(ctx, msg, delivery, result),
        None => (
            {
                tracing::error!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
                elapsed = ?now.saturating_duration_since(started), limit = ?ctx.lease_settings().limit,
                "handler time limit reached: cancelled, treated as no outcome");
                ctx.metrics.run_failed(&format_args!(
                    "handler time limit reached ({:?})",
                    ctx.lease_settings().limit
                ));
                Event::Handled(Outcome::None)
            },
            None,
        ),
    };
    Leased { event, end, error }
}

/// Sends `+WPI` on `reply` through the app's current client, without waiting: whether the
/// client took it (a refusal is logged).
pub(crate) fn renew(clients: &watch::Receiver<Client>, reply: Subject) -> bool {
    let wpi = bytes::Bytes::from_static(WORK_IN_PROGRESS);
    let client = clients.borrow().clone();
    match client.publish(reply, wpi).now_or_never() {
        Some(Ok(())) => true,
        Some(Err(e)) => {
            tracing::warn!(error = %e, "lease renewal (+WPI) not sent");
            false
        }
        None => {
            tracing::warn!("lease renewal (+WPI) not sent: the client's buffer is full");
            false
        }
    }
}

/// How long a prefetched message that waits for a handler slot is renewed at most: a day. Its
/// handler's own time limit starts when it starts; the prefetch is sized so that a message
/// waits a small share of its deadline (`ruststream_settlement::PREFETCH_WAIT_SHARE`).
const WAIT_RENEWAL_LIMIT: Duration = Duration::from_secs(24 * 60 * 60);

/// The lease of a prefetched JetStream message that waits in its pull loop for a handler slot:
/// renewed with `+WPI` at half its span by the lease loop, as a running handler's is, so that
/// it cannot expire and be delivered again while it waits (rule 16 and the pull prefetch in
/// `ruststream_settlement::PullAccounting`). On a mount with leases off it is not renewed, and only
/// keeps the message's deadline and the deliveries of it that come after: a message that
/// waited past its deadline, or was delivered again while it waited, is not run (its result
/// would be a late one). Ended by [`WaitLease::end`], or, on any other way out (a loop that
/// ends, a task that is dropped), when it is dropped: a lease never outlives its message's
/// wait.
pub(crate) struct WaitLease {
    room: Arc<LeaseRoom>,
    /// `None` once ended.
    key: Option<ruststream_settlement::LeaseKey>,
    since: Instant,
    span: Duration,
    /// Whether it is renewed (the mount's leases are on).
    renew: bool,
}

/// What became of a message's wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitEnd {
    /// Renewed in time: the message may run.
    OnTime,
    /// Its deadline passed without a renewal (renewals could not be sent), or it was delivered
    /// again while it waited (renewals lost on their way): the server has delivered it again,
    /// or will, so it must not run here too.
    Late,
}

impl WaitLease {
    /// A lease for `msg`, from now, renewed when the mount's leases are on; `None` when there
    /// is no deadline to keep (no ack reply subject that reads, or no `ack_wait` known).
    pub(crate) fn hold<R: Runtime>(ctx: &MountContext, msg: &Incoming) -> Option<Self> {
        let reply = msg.reply.as_ref()?;
        let parsed = AckReply::parse(reply.as_bytes()).ok()?;
        Self::hold_read::<R>(ctx, reply, &parsed)
    }

    /// As [`hold`](Self::hold), for the message whose ack reply subject `reply` was read as
    /// `parsed`; `None` when no `ack_wait` is known.
    pub(crate) fn hold_read<R: Runtime>(
        ctx: &MountContext,
        reply: &Subject,
        parsed: &AckReply<'_>,
    ) -> Option<Self> {
        let delivered = parsed.delivered;
        let (span, renew) = {
            let settings = ctx.lease_settings();
            (
                ruststream_settlement::lease_span(settings.ack_wait?, &settings.backoff, delivered),
                settings.renew,
            )
        };
        let since = R::now();
        let terms = LeaseTerms {
            span: Some(span),
            renew,
            limit: WAIT_RENEWAL_LIMIT,
            delivery: Some(LeasedDelivery::of(ctx.index, parsed)),
        };
        let io = LeaseIo {
            reply: Some(reply.clone()),
            cancel: None,
            metrics: ctx.metrics.clone(),
        };
        let key = ctx.leases.start(terms, io, since);
        Some(Self {
            room: ctx.leases.clone(),
            key: Some(key),
            since,
            span,
            renew,
        })
    }

    /// The message got its slot: the lease ends, and says whether the message may run. One
    /// that waited a quarter of its span or more is renewed once more now (leases on), so that
    /// its handler's lease (which counts from its start) renews it in time.
    pub(crate) fn end<R: Runtime>(mut self, ctx: &MountContext, msg: &Incoming) -> WaitEnd {
        let now = R::now();
        let Some(key) = self.key.take() else {
            return WaitEnd::OnTime;
        };
        match self.room.end(key, now) {
            LeaseEnd::OnTime => {}
            LeaseEnd::Late { by } => {
                tracing::warn!(mount = %ctx.name, subject = %msg.subject, late_by = ?by,
                    "a message that waited (for a handler slot, or to run again in place) passed its deadline (its renewals could not be sent, or leases are off): not run here, the server delivers it again");
                return WaitEnd::Late;
            }
            LeaseEnd::Superseded { by } => {
                tracing::warn!(mount = %ctx.name, subject = %msg.subject, delivered_again = by,
                    "a message that waited (for a handler slot, or to run again in place) was delivered again meanwhile (its renewals were lost on their way): not run here, the newer delivery is");
                return WaitEnd::Late;
            }
        }
        if self.renew
            && now.saturating_duration_since(self.since) >= self.span / 4
            && let Some(reply) = msg.reply.clone()
            && renew(&ctx.clients, reply)
        {
            ctx.metrics.wire(Wire::Wpi);
        }
        WaitEnd::OnTime
    }
}

impl Drop for WaitLease {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            // Whether it was late does not matter here (the message is not run): the clock
            // read only dates the end.
            let _ = self.room.end(key, Instant::now());
        }
    }
}
