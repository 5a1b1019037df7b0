//! The executor: the one place a plan is carried out.
//!
//! A delivery's plan, as `ruststream-settlement`'s planner makes it, is handed to [`execute`] once.
//! It carries out at once, on the caller's task and awaiting nothing, every action that needs
//! no reply (logs, copies handed to the delay queue), and gives back what is left, if
//! anything: the plan's last action when it is a publish ([`Execution::Publish`], a Core copy
//! or a JetStream settlement, built and owned, borrowing nothing of the message), which the
//! caller hands to the client where it keeps it (in place, as the mount's back-pressure: a
//! Core copy in the Core loop's own slot, a settlement awaited on the pull loop's task); or
//! the whole plan, when it waits for the server ([`Execution::Waits`]: a dead letter is
//! confirmed before anything else, rule 8), which [`carry_out`] runs in full, in order: on a
//! task of its own for a delivery's plan, in place for a recovery's. Those are the fast paths,
//! and they are branches of [`execute`]: the loops never look at a plan's actions.
//!
//! Every `match` here over the core's actions is exhaustive: a new action breaks the build
//! here (and in the metrics, which count each action).
//! Nothing here decides anything about attempts, limits or headers: the plan says what to do,
//! and this module does it over async-nats, in order, stopping at the first action that fails
//! (the core's adapter obligations); the recovery from a failure, and the report of the
//! settlement, are [`conclude`](super::recover::conclude)'s.

use std::time::Instant;

use ruststream_settlement::{Action, Delivery as CoreDelivery, Log, PendingCopy, Plan, RetryCount};

use super::dead_letter::dead_letter;
use super::publish::{
    Publish, PublishFailed, Unpublished, check_copy_size, core_message, header_pairs,
    settle_through_new_client,
};
use crate::state::mount_context::MountContext;
use crate::support::deliberate::{self, Bug};
use crate::support::incoming::Incoming;

/// What [`execute`] left of a plan.
pub(crate) enum Execution {
    /// Nothing: the plan was carried out in full (logs, copies handed to the delay queue), or
    /// it stopped at the first action that failed (`Err`: its recovery is left).
    Done(Result<(), PublishFailed>),
    /// The plan's last action, a publish: every action before it was carried out, and this is
    /// to be handed to the client ([`send`], or [`Publish::send`] where the message must not
    /// be borrowed).
    Publish(Publish),
    /// The whole plan: it waits for the server (it publishes a dead letter, confirmed before
    /// anything else happens, rule 8) or holds more than one publish. Nothing was carried out;
    /// [`carry_out`] runs it (a delivery's on a task of its own).
    Waits,
}

/// Carries out `plan` as far as it goes without awaiting anything, and says what is left:
/// entered once per plan. A plan that runs the handler (rule 3) holds only logs, which are
/// written; anything else in it would be a planner bug, and is logged as an error, never
/// carried out.
#[inline(always)]
pub(crate) fn execute(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    plan: &Plan<'_>,
) -> Execution {
    // Checked where it is called, with no call: most arrival plans hold nothing, and where the
    // caller knows the plan runs the handler, the rest of this is never built in.
    match plan.actions().split_last() {
        None => Execution::Done(Ok(())),
        Some(_) if plan.runs_handler() => {
            arrival_logs(ctx, msg, delivery, plan);
            Execution::Done(Ok(()))
        }
        Some((last, before)) => execute_actions(ctx, msg, delivery, last, before),
    }
}

/// [`execute`] of a plan that holds actions and does not run the handler: `last`, and those
/// `before` it.
#[inline(always)]
fn execute_actions(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    last: &Action<'_>,
    before: &[Action<'_>],
) -> Execution {
    if matches!(last, Action::PublishDeadLetter { .. }) || !before.iter().all(awaits_nothing) {
        return Execution::Waits;
    }
    for action in before {
        if let Err(failed) = at_once(ctx, msg, delivery, action) {
            return Execution::Done(Err(failed));
        }
    }
    match *last {
        Action::PublishCopy {
            subject,
            retry_count,
        } => match Publish::copy(ctx, msg, subject, retry_count) {
            Ok(copy) => Execution::Publish(copy),
            Err(failed) => Execution::Done(Err(failed)),
        },
        Action::Settle(settlement) => match &msg.reply {
            Some(_) if withheld(ctx, settlement) => Execution::Done(Err(nak_withheld())),
            Some(reply) => Execution::Publish(Publish::Settlement {
                reply: reply.clone(),
                payload: settlement.payload().to_bytes(),
            }),
            None => {
                no_ack_reply(ctx, msg);
                Execution::Done(Ok(()))
            }
        },
        Action::Log(_) | Action::ScheduleCopy { .. } => {
            Execution::Done(at_once(ctx, msg, delivery, last))
        }
        // Left whole above.
        Action::PublishDeadLetter { .. } => Execution::Waits,
    }
}

/// Carries out `plan` in full, awaiting what it publishes: [`execute`], then what it left.
/// `error` is the handler's error text, for the provenance headers of a dead letter (rule 19).
///
/// # Errors
/// The first publish that failed; the plan stopped there (a settlement the mount's client
/// refused was first tried through the app's new client, rule 20).
pub(crate) async fn carry_out(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    plan: &Plan<'_>,
    error: Option<&str>,
) -> Result<(), PublishFailed> {
    match execute(ctx, msg, delivery, plan) {
        Execution::Done(result) => result,
        // A settlement the client takes at once is handed over without `send`'s future (about
        // 1 KiB): this future is part of every waiting delivery's rest, boxed for each.
        Execution::Publish(publish) => match publish.send_now(&ctx.client) {
            Some(Ok(())) => Ok(()),
            Some(Err(failed)) => Box::pin(resend(ctx, msg, failed)).await,
            None => Box::pin(send(ctx, msg, publish)).await,
        },
        Execution::Waits => Box::pin(in_order(ctx, msg, delivery, plan, error)).await,
    }
}

/// Hands `publish` to the mount's client, and a settlement that client refused to the app's
/// new one ([`resend`]).
///
/// # Errors
/// The publish that failed.
pub(crate) async fn send(
    ctx: &MountContext,
    msg: &Incoming,
    publish: Publish,
) -> Result<(), PublishFailed> {
    match publish.send(&ctx.client).await {
        Ok(()) => Ok(()),
        Err(failed) => Box::pin(resend(ctx, msg, failed)).await,
    }
}

/// What a publish that failed comes to: a JetStream settlement the mount's client refused
/// (its connection task is gone) is sent through the client the supervisor connects in its
/// place (rule 20): an ack reply subject is good on any connection, so the delivery is settled
/// once, not redelivered and run again. Anything else stays failed.
///
/// # Errors
/// `failed`, when it is not a settlement or no new client took it in time.
pub(crate) async fn resend(
    ctx: &MountContext,
    msg: &Incoming,
    mut failed: PublishFailed,
) -> Result<(), PublishFailed> {
    let Some((reply, payload)) = failed.settlement.take() else {
        return Err(failed);
    };
    match settle_through_new_client(ctx, msg, reply, payload, &failed.reason).await {
        true => Ok(()),
        false => Err(failed),
    }
}

/// Carries out every action of `plan` in order, each publish awaited and each dead letter
/// confirmed before the next action (rule 8): the plans [`execute`] leaves whole.
async fn in_order(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    plan: &Plan<'_>,
    error: Option<&str>,
) -> Result<(), PublishFailed> {
    let settle_first = deliberate::active(Bug::SettleBeforeDeadLetter)
        && plan
            .into_iter()
            .any(|a| matches!(a, Action::PublishDeadLetter { .. }));
    if settle_first {
        for action in plan {
            if let (Action::Settle(settlement), Some(reply)) = (action, msg.reply.clone()) {
                let payload = settlement.payload().to_bytes();
                send(ctx, msg, Publish::Settlement { reply, payload }).await?;
            }
        }
    }
    for action in plan {
        if settle_first && matches!(action, Action::Settle(_)) {
            continue;
        }
        match *action {
            Action::Settle(settlement) => {
                let Some(reply) = msg.reply.clone() else {
                    no_ack_reply(ctx, msg);
                    continue;
                };
                if withheld(ctx, settlement) {
                    return Err(nak_withheld());
                }
                let payload = settlement.payload().to_bytes();
                send(ctx, msg, Publish::Settlement { reply, payload }).await?;
            }
            Action::PublishCopy {
                subject,
                retry_count,
            } => {
                Publish::copy(ctx, msg, subject, retry_count)?
                    .send(&ctx.client)
                    .await?;
            }
            Action::PublishDeadLetter { subject, reason } => {
                dead_letter(ctx, msg, delivery, subject, reason, error).await?;
            }
            Action::Log(_) | Action::ScheduleCopy { .. } => {
                at_once(ctx, msg, delivery, action)?;
            }
        }
    }
    Ok(())
}

/// Whether `action` is carried out at once, with no reply to wait for and nothing handed to
/// the client: a log, or a copy handed to the delay queue.
fn awaits_nothing(action: &Action<'_>) -> bool {
    match action {
        Action::Log(_) | Action::ScheduleCopy { .. } => true,
        Action::Settle(_) | Action::PublishCopy { .. } | Action::PublishDeadLetter { .. } => false,
    }
}

/// Carries out an action that [`awaits_nothing`].
///
/// # Errors
/// A copy the delay queue did not take, or one too large to publish when it falls due.
#[inline(always)]
fn at_once(
    ctx: &MountContext,
    msg: &Incoming,
    delivery: &CoreDelivery<'_>,
    action: &Action<'_>,
) -> Result<(), PublishFailed> {
    match *action {
        Action::Log(l) => log(ctx, msg, delivery, l),
        Action::ScheduleCopy {
            subject,
            retry_count,
            at,
        } => schedule_copy(ctx, msg, subject, retry_count, at)?,
        Action::Settle(_) | Action::PublishCopy { .. } | Action::PublishDeadLetter { .. } => {
            unreachable!("only actions that await nothing are carried out at once")
        }
    }
    Ok(())
}

/// Writes the logs of a plan that runs the handler (see [`execute`]).
#[inline(never)]
fn arrival_logs(ctx: &MountContext, msg: &Incoming, delivery: &CoreDelivery<'_>, plan: &Plan<'_>) {
    for action in plan {
        match *action {
            Action::Log(l) => log(ctx, msg, delivery, l),
            Action::Settle(_)
            | Action::PublishCopy { .. }
            | Action::ScheduleCopy { .. }
            | Action::PublishDeadLetter { .. } => tracing::error!(
                mount = %ctx.name, subject = %msg.subject, ?action,
                "an arrival plan that runs the handler holds more than logs: not executed"
            ),
        }
    }
}

/// Whether `settlement` is a `-NAK` that is not handed to the mount's client because its
/// connection is down (rule 16). The client would send it once connected again, when the
/// server may have delivered the message again already (its `ack_wait` ran out while the
/// connection was down, or the server restarted): nats-server settles by stream sequence, so
/// the old delivery's `-NAK` would make it deliver the message once more at once while the
/// newer delivery runs. Withheld, the server delivers it again after `ack_wait` all the same,
/// with `delivered + 1` (an attempt used, as the `-NAK` would have): the retry comes after
/// `ack_wait` instead of the delay it asked for. An `+ACK` or a `+TERM` is still
/// handed over: either ends the message, which is what was decided. Found by the explorer's
/// seed 3982.
fn withheld(ctx: &MountContext, settlement: ruststream_settlement::Settlement) -> bool {
    matches!(
        settlement,
        ruststream_settlement::Settlement::Nak | ruststream_settlement::Settlement::NakWithDelay(_)
    ) && ctx.client.connection_state() != async_nats::connection::State::Connected
}

/// The failure that reports a withheld `-NAK` ([`withheld`]) as a settlement not sent.
#[cold]
fn nak_withheld() -> PublishFailed {
    tracing::debug!(
        "-NAK withheld: the connection is down; the server delivers the message again after its ack_wait"
    );
    PublishFailed::new(
        Unpublished::Settlement,
        "-NAK withheld while the connection is down",
    )
}

/// A settlement of a JetStream delivery that has no ack reply subject (never seen: such a
/// delivery is not read, rule 22): logged, nothing sent.
#[cold]
fn no_ack_reply(ctx: &MountContext, msg: &Incoming) {
    tracing::error!(mount = %ctx.name, subject = %msg.subject, "JetStream delivery without an ack reply subject");
}

#[inline]
fn log(ctx: &MountContext, msg: &Incoming, delivery: &CoreDelivery<'_>, log: Log) {
    match log {
        // One per Core ack: debug, so that a healthy Core service does not flood its logs.
        Log::Unsupported(e) => {
            tracing::debug!(mount = %ctx.name, subject = %msg.subject, attempt = delivery.attempt().get(), error = %e, "AckError::Unsupported")
        }
        log => log_otherwise(ctx, msg, delivery, log),
    }
}

/// [`log`] of anything but a Core ack's `AckError::Unsupported`, which [`log`] writes itself
/// (it runs for every Core ack; the others are rare).
#[cold]
fn log_otherwise(ctx: &MountContext, msg: &Incoming, delivery: &CoreDelivery<'_>, log: Log) {
    let attempt = delivery.attempt().get();
    match log {
        Log::Unsupported(_) => unreachable!("written by `log`"),
        Log::RetryCountIgnored { values } => {
            // Every value of the header as it came, so the bad ones can be seen.
            let header: Vec<String> = header_pairs(msg)
                .filter(|(name, _)| ruststream_settlement::is_retry_count(name))
                .map(|(_, value)| String::from_utf8_lossy(value).into_owned())
                .collect();
            tracing::warn!(
                mount = %ctx.name, subject = %msg.subject, values, ?header,
                "x-ruststream-retry-count values that are not digits were ignored"
            )
        }
        Log::LetGo => tracing::warn!(
            mount = %ctx.name, subject = %msg.subject, attempt,
            "the Core delivery took the at-limit path (max_attempts reached, or its handler rejected it) and no dead-letter subject is declared: it is let go"
        ),
        Log::Lost => tracing::error!(
            mount = %ctx.name, subject = %msg.subject, attempt, size = msg.payload.len(),
            "Core delivery lost: its publish failed"
        ),
    }
}

/// Hands a Core copy to the app's delay queue.
fn schedule_copy(
    ctx: &MountContext,
    msg: &Incoming,
    subject: &ruststream_settlement::Subject,
    retry_count: RetryCount,
    at: Instant,
) -> Result<(), PublishFailed> {
    let message = core_message(msg);
    // The copy as it will be published to `subject` (the mount's copy subject, which the
    // delay loop gives back when it falls due), built once here for its size.
    check_copy_size(&ctx.client, message.copy(subject, retry_count).wire_len())?;
    let copy = PendingCopy::new(ctx.index, &message, retry_count);
    ctx.delayed
        .send((copy, at))
        .map_err(|_| PublishFailed::new(Unpublished::Copy, "the delay queue has stopped"))
}
