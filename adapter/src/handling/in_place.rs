//! A handler's runs to their end: the run under its lease, a late result discarded (rule 16),
//! and, on a mount with strict order per key (rule 24), a retry run again in place while the
//! core's [`retry_in_place`] says so, the delivery keeping its key's turn.

use std::time::Duration;

use ruststream_settlement::{Delivery as CoreDelivery, Event, LeaseEnd, deadline, retry_in_place};

use super::handler_run::{HandlerRun, start_handler};
use super::lease::{Lease, Leased, WaitEnd, WaitLease, renew, run_leased};
use crate::api::turns::HeldTurn;
use crate::runtime::Runtime;
use crate::state::mount_context::MountContext;
use crate::support::incoming::Incoming;
use crate::support::metrics::Wire;

/// Where a delivery's handling stands.
pub(crate) enum Next {
    /// Its handler runs, under its lease.
    Running(HandlerRun, Lease),
    /// Its retry runs again in place after this delay (rule 24).
    Again(Duration),
}

/// With strict order, the delay after which the delivery's `event` runs again in place: only
/// while it holds its key's turn (`held`), and as the core decides (below the limit, the
/// backoff's or the asked delay).
pub(crate) fn again_after(
    ctx: &MountContext,
    delivery: &CoreDelivery<'_>,
    event: Event,
    held: Option<&HeldTurn>,
) -> Option<Duration> {
    match event {
        Event::Handled(outcome) if held.is_some_and(HeldTurn::holds) => {
            retry_in_place(delivery, outcome, &ctx.policy)
        }
        _ => None,
    }
}

/// Runs the delivery's handler to its end from `next`: the run under its lease, then, while the
/// core says so (strict order, [`again_after`]), a wait of the retry's delay (its JetStream
/// lease renewed with `+WPI`, nothing sent to NATS) and another run. Returns the runs in
/// place before the last, and the last run's result; `None` when that result is late and discarded (rule 16), or when the message's
/// deadline passed while it waited to run again (then the server delivers it again).
pub(crate) async fn run_to_end<R: Runtime>(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    mut next: Next,
    held: Option<&HeldTurn>,
) -> Option<(u64, Leased)> {
    let mut runs = 0;
    loop {
        let current = delivery.after_runs_in_place(runs);
        next = match next {
            Next::Running(run, lease) => {
                let leased = run_leased::<R>(ctx, msg, &current, run, lease).await;
                if !on_time(ctx, msg, &current, &leased) {
                    return None;
                }
                match again_after(ctx, &current, leased.event, held) {
                    Some(delay) => {
                        // The wait's lease counts its span from now: renew the server's
                        // deadline now too, or it would lapse before the wait's first renewal.
                        renew_now(ctx, msg);
                        Next::Again(delay)
                    }
                    None => return Some((runs, leased)),
                }
            }
            Next::Again(delay) => {
                tracing::info!(mount = %ctx.name, subject = %msg.subject, attempt = current.attempt().get(), ?delay,
                    "retried in place (strict order per key): runs again after the delay, its key's later deliveries waiting");
                let wait = WaitLease::hold::<R>(ctx, msg);
                R::sleep_until(deadline(R::now(), delay)).await;
                if let Some(wait) = wait
                    && wait.end::<R>(ctx, msg) == WaitEnd::Late
                {
                    return None;
                }
                // The run's lease counts its span from now: renew the server's deadline now.
                renew_now(ctx, msg);
                runs += 1;
                let again = delivery.after_runs_in_place(runs);
                let mut slot = ctx.handler.clone().slot();
                let started = R::now();
                if let Err(event) = start_handler(ctx, &mut slot, msg, &again, held) {
                    let leased = Leased {
                        event,
                        end: LeaseEnd::OnTime,
                        error: None,
                    };
                    return Some((runs, leased));
                }
                let run = HandlerRun::new(ctx, slot.take_run(&ctx.handler));
                Next::Running(run, Lease::take(ctx, msg, &again, started))
            }
        };
    }
}

/// Whether a run's result came in time to be settled; a late one is discarded, logged and
/// counted ([`discard_late`], rule 16).
pub(crate) fn on_time(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    leased: &Leased,
) -> bool {
    if leased.end == LeaseEnd::OnTime
        || crate::support::deliberate::active(crate::support::deliberate::Bug::SettleLateResult)
    {
        return true;
    }
    discard_late(ctx, msg, delivery, leased);
    false
}

/// Renews a JetStream delivery's deadline at once (`+WPI`), on a mount whose leases are on:
/// where a run in place hands over to its wait, or its wait to the next run, each new lease
/// counts its span from its own start, so the server's deadline is renewed at the hand-over.
fn renew_now(ctx: &MountContext, msg: &Incoming) {
    if ctx.jetstream_names.is_some()
        && ctx.lease_settings().renew
        && let Some(reply) = msg.reply.clone()
        && renew(&ctx.clients, reply)
    {
        ctx.metrics.wire(Wire::Wpi);
    }
}

/// Logs and counts a late result, which is neither sent nor published (rule 16): the server
/// may have delivered the message again already (it has, when superseded), and would take a
/// late `+ACK` over the newer attempt's answer.
fn discard_late(ctx: &MountContext, msg: &Incoming, delivery: &CoreDelivery<'_>, leased: &Leased) {
    ctx.metrics.late();
    let outcome = match leased.event {
        Event::Handled(outcome) => Some(outcome),
        _ => None,
    };
    let attempt = delivery.attempt().get();
    match leased.end {
        LeaseEnd::Superseded { by } => {
            tracing::warn!(mount = %ctx.name, subject = %msg.subject, attempt,
            ?outcome, delivered_again = by, "late result discarded: the message was delivered again while it ran (its renewals were lost on their way)")
        }
        LeaseEnd::Late { by } => {
            tracing::warn!(mount = %ctx.name, subject = %msg.subject, attempt,
            ?outcome, late_by = ?by, "late result discarded: the delivery's deadline passed without a renewal")
        }
        LeaseEnd::OnTime => {}
    }
}
