//! The end of a plan's execution: the recovery from a publish that failed, and the report of
//! the settlement ([`conclude`]).

use ruststream_settlement::{Delivery as CoreDelivery, Disposition, Event, Plan, plan_with_clock};

use super::executor::carry_out;
use super::publish::{PublishFailed, Unpublished};
use super::settled::report_sent;
use crate::runtime::Runtime;
use crate::state::mount_context::MountContext;
use crate::support::incoming::Incoming;
use crate::support::metrics::Loss;

/// Concludes a delivery whose plan was carried out (`executed` says how it went): when a
/// publish failed, plans and carries out the recovery (unless it was the settlement, which
/// nothing can follow: the server redelivers), then reports the settlement.
pub(crate) async fn conclude<'p, R: Runtime>(
    ctx: &'p MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    event: Option<Event>,
    plan: Plan<'p>,
    executed: Result<(), PublishFailed>,
) {
    let (plan, sent) = match executed {
        Ok(()) => (plan, true),
        // Nothing can be sent: the server redelivers. Reported as not sent.
        Err(e) if e.what == Unpublished::Settlement => (plan, false),
        Err(e) => recover::<R>(ctx, msg, delivery, &plan, e).await,
    };
    report_sent(ctx, msg, delivery, event, &plan, sent);
}

/// Plans and executes the recovery from a publish of `failed_plan` that failed (`failed`): the
/// at-limit path for a Core copy over `max_payload` (rule 21), otherwise the core's plan for a
/// failed publish (a `-NAK` on JetStream; on Core the delivery is lost, and counted for the
/// mount). A recovery whose own publish fails is recovered once more the same way, at most
/// twice in all. Returns the plan that was executed last, and whether its settlement (if it
/// has one) was sent.
async fn recover<'p, R: Runtime>(
    ctx: &'p MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    failed_plan: &Plan<'p>,
    mut failed: PublishFailed,
) -> (Plan<'p>, bool) {
    match failed.what {
        Unpublished::CopyTooLarge => {
            tracing::warn!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
                reason = %failed.reason, "Core copy not published: it would be larger than the server's max_payload; the delivery takes the at-limit path (rule 21)")
        }
        Unpublished::Copy | Unpublished::DeadLetter | Unpublished::Settlement => {
            tracing::error!(mount = %ctx.name, subject = %msg.subject, error = %failed.reason, plan = %failed_plan,
                "publish failed: the plan stopped before its settlement; planning the recovery")
        }
    }
    let mut tries = 0;
    loop {
        tries += 1;
        let event = match failed.what {
            Unpublished::CopyTooLarge => Event::CopyTooLarge,
            Unpublished::Copy | Unpublished::DeadLetter | Unpublished::Settlement => {
                Event::PublishFailed
            }
        };
        let recovery = plan_with_clock(delivery, event, &ctx.policy, R::now);
        if event == Event::CopyTooLarge && recovery.disposition() == Disposition::LetGo {
            // No dead-letter subject to take it: lost, and said so in this case's words (the
            // plan's own warning speaks of a limit reached).
            ctx.losses.add(Loss::Copy, 1);
            tracing::error!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(),
                size = msg.payload.len(),
                "Core delivery lost: its copy would be larger than the server's max_payload and the mount has no dead-letter subject");
            return (recovery, true);
        }
        if recovery.disposition() == Disposition::Lost {
            let loss = match failed.what {
                Unpublished::DeadLetter => Loss::DeadLetter,
                Unpublished::Copy | Unpublished::CopyTooLarge | Unpublished::Settlement => {
                    Loss::Copy
                }
            };
            ctx.losses.add(loss, 1);
        }
        match carry_out(ctx, msg, delivery, &recovery, None).await {
            Ok(()) => {
                tracing::warn!(mount = %ctx.name, plan = %recovery, "recovery sent");
                return (recovery, true);
            }
            // Nothing more can be sent on this delivery: the server redelivers it.
            Err(again) if again.what == Unpublished::Settlement => return (recovery, false),
            Err(again) if tries < 2 => {
                tracing::error!(mount = %ctx.name, error = %again.reason, plan = %recovery, "recovery plan failed too; planning its recovery");
                failed = again;
            }
            Err(again) => {
                tracing::error!(mount = %ctx.name, error = %again.reason, plan = %recovery, "recovery plan failed too");
                return (recovery, true);
            }
        }
    }
}
