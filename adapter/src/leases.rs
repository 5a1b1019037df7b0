//! Leases (rule 16): every handler still running after its first poll holds a lease in the
//! app's one [`LeaseRoom`]; the lease loop (one timer per app) renews JetStream deliveries
//! with `+WPI` and cancels handlers at their mount's time limit, as the core's [`Leases`]
//! decide. A handler that finishes at its first poll never gets here: no timer, no publish.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_nats::{Client, Subject};
use futures_util::FutureExt;
use ruststream_core::{
    Delivery as CoreDelivery, Event, LeaseDue, LeaseEnd, LeaseTerms, Leases, Model, Outcome,
    WORK_IN_PROGRESS, lease_span,
};
use tokio::sync::{Notify, oneshot, watch};

use crate::handler_run::{HandlerRun, handled};
use crate::incoming::Incoming;
use crate::mount_context::MountContext;
use crate::runtime::Runtime;

/// What the lease loop needs of a lease: where to renew it, and how to cancel its handler.
pub(crate) struct LeaseIo {
    /// The delivery's ack reply subject (JetStream); `None` on Core.
    reply: Option<Subject>,
    /// Fired at the time limit.
    cancel: Option<oneshot::Sender<()>>,
    /// Its mount's metrics, which count its renewals.
    metrics: Arc<crate::metrics::MountMetrics>,
}

/// The leases of an app's running handlers, shared by its deliveries and its lease loop.
#[derive(Default)]
pub(crate) struct LeaseRoom {
    leases: Mutex<Leases<LeaseIo>>,
    /// Wakes the lease loop when a lease starts (its first instant may be the earliest).
    started: Notify,
}

impl LeaseRoom {
    fn lock(&self) -> MutexGuard<'_, Leases<LeaseIo>> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A mount's lease settings, from its declaration and (JetStream) its consumer's info.
#[derive(Debug, Clone)]
pub(crate) struct LeaseSettings {
    /// The consumer's `ack_wait`; `None` on Core.
    pub(crate) ack_wait: Option<Duration>,
    /// The consumer's `BackOff` list.
    pub(crate) backoff: Vec<Duration>,
    /// Whether to renew with `+WPI`.
    pub(crate) renew: bool,
    /// The handler time limit.
    pub(crate) limit: Duration,
}

impl LeaseSettings {
    fn terms(&self, delivery: &CoreDelivery<'_>) -> LeaseTerms {
        let span = match (delivery.model, self.ack_wait) {
            (Model::JetStream(reply), Some(ack_wait)) => {
                Some(lease_span(ack_wait, &self.backoff, reply.delivered))
            }
            _ => None,
        };
        LeaseTerms {
            span,
            renew: self.renew,
            limit: self.limit,
        }
    }
}

/// A handler's run under its lease: its event, and whether it came in time.
pub(crate) struct Leased {
    pub(crate) event: Event,
    pub(crate) end: LeaseEnd,
    /// The handler's error text, kept for provenance headers (see [`handled`]).
    pub(crate) error: Option<Box<str>>,
}

/// Runs the rest of a handler that did not finish at its first poll, under a lease: renewed
/// while it runs (JetStream, leases on), cancelled at the mount's time limit (then logged at
/// error level and counted as no outcome).
///
/// The deadline counts from here, a little after the server sent the message; renewals come
/// at half the span, so with leases on that margin never matters, and with leases off a
/// result that lands within it past the server's deadline is still sent.
pub(crate) async fn run_leased<R: Runtime>(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    run: HandlerRun,
    started: Instant,
) -> Leased {
    let (cancel, cancelled) = oneshot::channel();
    let io = LeaseIo {
        reply: msg.reply.clone(),
        cancel: Some(cancel),
        metrics: ctx.metrics.clone(),
    };
    let key = ctx
        .leases
        .lock()
        .handle_start(ctx.lease_settings().terms(delivery), io, started);
    ctx.leases.started.notify_one();
    let result = tokio::select! {
        result = run => Some(result),
        Ok(()) = cancelled => None,
    };
    let now = R::now();
    if ctx.metrics.timed() {
        ctx.metrics
            .handled_in(now.saturating_duration_since(started).as_secs_f64());
    }
    let (end, _) = ctx.leases.lock().handle_end(key, now);
    let (event, error) = match result {
        Some(result) => handled(ctx, msg, delivery, result),
        None => (
            {
                tracing::error!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
                elapsed = ?now.saturating_duration_since(started), limit = ?ctx.lease_settings().limit,
                "handler time limit reached: cancelled, treated as no outcome");
                Event::Handled(Outcome::None)
            },
            None,
        ),
    };
    Leased { event, end, error }
}

/// Sends `+WPI` on `reply` through the app's current client, without waiting: whether the
/// client took it (a refusal is logged).
fn renew(clients: &watch::Receiver<Client>, reply: Subject) -> bool {
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

/// The lease loop of an app: one timer for every lease. Sends each renewal that falls due
/// (`+WPI` on the delivery's ack reply subject) and fires each time limit. Ends when `finish`
/// holds a deadline (the shutdown has accounted for every handler): leases still held then
/// belong to abandoned handlers, whose results will come late and not be sent.
///
/// When `finish` closes instead (the app's `Running` dropped without a shutdown), the mounts
/// go on while a kept `ShutdownHandle` lets them, and once stopped settle what they
/// received: the loop keeps renewing and enforcing time limits until nothing else holds
/// `room` (every mount loop and delivery has ended), looked at every [`ORPHANED_CHECK`].
pub(crate) async fn lease_loop<R: Runtime>(
    room: Arc<LeaseRoom>,
    clients: watch::Receiver<Client>,
    mut finish: watch::Receiver<Option<Instant>>,
) {
    let mut orphaned = false;
    loop {
        if finish.borrow().is_some() || (orphaned && Arc::strong_count(&room) == 1) {
            break;
        }
        let next = room.lock().poll_timeout();
        tokio::select! {
            biased;
            changed = finish.changed(), if !orphaned => orphaned = changed.is_err(),
            () = R::sleep_until(R::now() + ORPHANED_CHECK), if orphaned => {}
            () = room.started.notified() => {}
            () = R::sleep_until(next.unwrap_or_else(R::now)), if next.is_some() => {
                let due = room.lock().handle_timeout(R::now());
                for due in due {
                    match due {
                        LeaseDue::Renew(key) => {
                            let io = room.lock().get(key).and_then(|io| Some((io.reply.clone()?, io.metrics.clone())));
                            let Some((reply, metrics)) = io else { continue };
                            // Handed to the client: the lease is renewed from now.
                            if renew(&clients, reply) {
                                metrics.wire(crate::metrics::Wire::Wpi);
                                room.lock().handle_renewed(key, R::now());
                            }
                        }
                        LeaseDue::TimeLimit(key) => {
                            let cancel = room.lock().get_mut(key).and_then(|io| io.cancel.take());
                            if let Some(cancel) = cancel {
                                let _ = cancel.send(());
                            }
                        }
                    }
                }
            }
        }
    }
    if orphaned {
        tracing::debug!(
            "the lease loop ends: every mount of the app, whose Running is gone, has ended"
        );
    }
}

/// How often the lease loop of an app whose every handle is gone looks whether its mounts
/// have all ended (see [`lease_loop`]).
const ORPHANED_CHECK: Duration = Duration::from_millis(100);

/// How long a prefetched message that waits for a handler slot is renewed at most: a day. Its
/// handler's own time limit starts when it starts; the prefetch is sized so that a message
/// waits a small share of its deadline (`ruststream_core::PREFETCH_WAIT_SHARE`).
const WAIT_RENEWAL_LIMIT: Duration = Duration::from_secs(24 * 60 * 60);

/// The lease of a prefetched JetStream message that waits in its pull loop for a handler slot:
/// renewed with `+WPI` at half its span by the lease loop, as a running handler's is, so that
/// it cannot expire and be delivered again while it waits (rule 16 and the pull prefetch in
/// `ruststream_core::PullAccounting`). Ended by [`WaitLease::end`], or, on any other way out
/// (a loop that ends, a task that is dropped), when it is dropped: a lease never outlives its
/// message's wait.
pub(crate) struct WaitLease {
    room: Arc<LeaseRoom>,
    /// `None` once ended.
    key: Option<ruststream_core::LeaseKey>,
    since: Instant,
    span: Duration,
}

/// What became of a message's wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitEnd {
    /// Renewed in time: the message may run.
    OnTime,
    /// Its deadline passed without a renewal (renewals could not be sent): the server has
    /// delivered it again, or will, so it must not run here too.
    Late,
}

impl WaitLease {
    /// A lease for `msg`, from now; `None` when there is nothing to renew (leases off, no ack
    /// reply subject that reads, or no `ack_wait` known).
    pub(crate) fn hold<R: Runtime>(ctx: &MountContext, msg: &Incoming) -> Option<Self> {
        let reply = msg.reply.clone()?;
        let delivered = ruststream_core::AckReply::parse(reply.as_bytes())
            .ok()?
            .delivered;
        let span = {
            let settings = ctx.lease_settings();
            if !settings.renew {
                return None;
            }
            ruststream_core::lease_span(settings.ack_wait?, &settings.backoff, delivered)
        };
        let since = R::now();
        let terms = LeaseTerms {
            span: Some(span),
            renew: true,
            limit: WAIT_RENEWAL_LIMIT,
        };
        let io = LeaseIo {
            reply: Some(reply),
            cancel: None,
            metrics: ctx.metrics.clone(),
        };
        let key = ctx.leases.lock().handle_start(terms, io, since);
        ctx.leases.started.notify_one();
        Some(Self {
            room: ctx.leases.clone(),
            key: Some(key),
            since,
            span,
        })
    }

    /// The message got its slot: the lease ends, and says whether the message may run. One
    /// that waited a quarter of its span or more is renewed once more now, so that its
    /// handler's lease (which counts from its start) renews it in time.
    pub(crate) fn end<R: Runtime>(mut self, ctx: &MountContext, msg: &Incoming) -> WaitEnd {
        let now = R::now();
        let Some(key) = self.key.take() else {
            return WaitEnd::OnTime;
        };
        if let (LeaseEnd::Late { by }, _) = self.room.lock().handle_end(key, now) {
            tracing::warn!(mount = %ctx.name, subject = %msg.subject, late_by = ?by,
                "a prefetched message waited past its deadline (its renewals could not be sent): not run here, the server delivers it again");
            return WaitEnd::Late;
        }
        if now.saturating_duration_since(self.since) >= self.span / 4
            && let Some(reply) = msg.reply.clone()
            && renew(&ctx.clients, reply)
        {
            ctx.metrics.wire(crate::metrics::Wire::Wpi);
        }
        WaitEnd::OnTime
    }
}

impl Drop for WaitLease {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            // Whether it was late does not matter here (the message is not run): the clock
            // read only dates the end.
            let _ = self.room.lock().handle_end(key, Instant::now());
        }
    }
}
