//! Batch handlers (rule 23): a mount that declares [`Mount::batch`](crate::Mount::batch) gives
//! its handler up to `max` deliveries at once ([`Batch`]), and settles each member as a single
//! delivery with its outcome would be.
//!
//! # How a batch is made
//!
//! Each member is an ordinary delivery to the runtime: it is read, checked on arrival (rule 3:
//! one past its limit takes the at-limit path without running and never joins a batch),
//! decoded (rule 17: one that does not decode for a typed handler takes the at-limit path
//! alone), holds a handler slot, and, on JetStream, its lease is renewed while it waits and
//! while its batch runs (rule 16). Its handler run joins the mount's open batch and waits for
//! its outcome. The first member of a batch leads it: once `max` members have joined, or
//! `max_wait` has passed since the leader joined, or the app's shutdown has begun, the batch
//! closes, waits for one of the mount's `concurrency` batch places, and the leader runs the
//! application's function on it, bounded by the mount's handler time limit: its first poll in
//! place, and, if it awaits, the rest on a task of its own ([`run_apart`]). Each member's run
//! then ends with its outcome, and the runtime plans and settles it by itself: its own
//! attempt, `max_attempts`, backoff, dead letter before `+TERM`, Core copy. (On JetStream a
//! batch's members wait and are settled beside their mount loop: `Starts` in
//! `handling::flow`.)
//!
//! So the core decides every member's plan, and this module adds no settlement rule: it only
//! gathers runs and hands out outcomes.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ruststream_settlement::Outcome;
use serde::de::DeserializeOwned;
use tokio::sync::{Semaphore, oneshot, watch};

use super::codec::{Codec, DecodeError};
use super::context::{Context, ContextSource, Standing};
use super::delivery::Delivery;
use super::handled::Handled;
use super::handler::{HandledFuture, Handler};
use super::timer::Timer;

/// The most deliveries one batch may hold: 100,000. A larger
/// [`Mount::batch`](crate::Mount::batch) is refused at start-up with
/// [`StartError::Setting`](crate::StartError::Setting).
pub const MAX_BATCH: usize = 100_000;

/// One member of a [`Batch`]: its payload as the handler takes it (`T`: the payload's
/// [`Bytes`] for [`App::mount_batch`](crate::App::mount_batch), the decoded value for
/// [`App::mount_typed_batch`](crate::App::mount_typed_batch) and
/// [`App::mount_json_batch`](crate::App::mount_json_batch)), and the delivery.
#[derive(Debug, Clone)]
pub struct Member<T> {
    /// The payload, as the handler takes it.
    pub value: T,
    /// The delivery: subject, headers, attempt, JetStream metadata.
    pub delivery: Delivery,
}

/// What a batch handler is given: 1 to `max` members, in the order the mount received them,
/// and a [`Context`] to publish and make requests through.
///
/// No two members are the same delivery. On JetStream each member is settled by its own ack
/// reply subject; on Core each member's retry is a copy of its own (rule 23).
#[derive(Debug)]
pub struct Batch<T = Bytes> {
    members: Vec<Member<T>>,
    context: Context,
}

impl<T> Batch<T> {
    /// How many members it has: at least 1, at most the mount's batch `max`.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always `false`: a batch has at least one member. (Here for clippy's sake and for
    /// generic code.)
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The members, in the order the mount received them.
    pub fn members(&self) -> &[Member<T>] {
        &self.members
    }

    /// The members' values, in order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.members.iter().map(|m| &m.value)
    }

    /// The members, in order, owned.
    pub fn into_members(self) -> Vec<Member<T>> {
        self.members
    }

    /// Iterates over the members, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Member<T>> {
        self.members.iter()
    }

    /// A context to publish, publish to a stream and make requests through, on the mount's
    /// connection. It answers no request: a batch has many members, so
    /// [`Context::respond`] fails with [`ContextError::NoReplySubject`](crate::ContextError::NoReplySubject)
    /// (a batch mount whose members are Core requests answers each through
    /// [`Context::client`] and the member's [`Delivery::reply`]).
    pub fn context(&self) -> &Context {
        &self.context
    }
}

impl<T> IntoIterator for Batch<T> {
    type Item = Member<T>;
    type IntoIter = std::vec::IntoIter<Member<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.members.into_iter()
    }
}

impl<'a, T> IntoIterator for &'a Batch<T> {
    type Item = &'a Member<T>;
    type IntoIter = std::slice::Iter<'a, Member<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.members.iter()
    }
}

/// What a batch handler's outcome is for its members: one [`Handled`] for all, or one each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchHandled {
    /// The same for every member.
    All(Handled),
    /// One per member, in the batch's order. A list of another length than the batch's is a bug
    /// in the handler: logged at error level, and every member is treated as
    /// [`Outcome::Retry`] (rule 23).
    Each(Vec<Handled>),
}

/// What a batch handler may return:
/// - an [`Outcome`], for every member;
/// - a `Vec` of one outcome per member, in the batch's order: [`Outcome`]s, or
///   `Result<Outcome, E>`s (an `Err` is that member's error, settled by the mount's
///   [`ErrorPolicy`](crate::ErrorPolicy));
/// - `Result<X, E>` of either, for any error type that can be displayed, so that `?` works: an
///   `Err` is every member's error, logged once per member and settled by the mount's
///   [`ErrorPolicy`](crate::ErrorPolicy) (by default [`Outcome::Retry`]).
///
/// A per-member list whose length is not the batch's is logged at error level, and every member
/// is treated as [`Outcome::Retry`] (rule 23). A batch handler cannot return a
/// [`Reply`](crate::Reply): it has no one request to answer.
pub trait IntoBatchHandled: Send + 'static {
    /// This return value as [`BatchHandled`].
    fn into_batch_handled(self) -> BatchHandled;
}

/// One member's outcome in a per-member list: an [`Outcome`], or `Result<Outcome, E>`.
pub trait MemberOutcome: Send + 'static {
    /// This member's outcome as [`Handled`].
    fn into_handled(self) -> Handled;
}

impl MemberOutcome for Outcome {
    fn into_handled(self) -> Handled {
        Handled::Outcome(self)
    }
}

impl<E: std::fmt::Display + Send + 'static> MemberOutcome for Result<Outcome, E> {
    fn into_handled(self) -> Handled {
        match self {
            Ok(outcome) => Handled::Outcome(outcome),
            Err(e) => Handled::Error(e.to_string()),
        }
    }
}

impl IntoBatchHandled for Outcome {
    fn into_batch_handled(self) -> BatchHandled {
        BatchHandled::All(Handled::Outcome(self))
    }
}

impl<M: MemberOutcome> IntoBatchHandled for Vec<M> {
    fn into_batch_handled(self) -> BatchHandled {
        BatchHandled::Each(self.into_iter().map(M::into_handled).collect())
    }
}

impl<B: IntoBatchHandled, E: std::fmt::Display + Send + 'static> IntoBatchHandled for Result<B, E> {
    fn into_batch_handled(self) -> BatchHandled {
        match self {
            Ok(b) => b.into_batch_handled(),
            Err(e) => BatchHandled::All(Handled::Error(e.to_string())),
        }
    }
}

impl IntoBatchHandled for BatchHandled {
    fn into_batch_handled(self) -> BatchHandled {
        self
    }
}

/// What a batch handler needs of the mount and the runtime, fixed when it is mounted.
#[derive(Clone, Copy)]
pub(crate) struct BatchTerms {
    /// The mount's name, for logs and the batch-size histogram.
    pub(crate) mount: &'static str,
    /// The most members a batch holds.
    pub(crate) max: usize,
    /// How long a batch waits for more members after its first joined.
    pub(crate) max_wait: Duration,
    /// How many batches run at once.
    pub(crate) concurrency: usize,
    /// The handler time limit, applied to each batch's run.
    pub(crate) limit: Duration,
    /// The runtime's clock and sleep.
    pub(crate) timer: Timer,
}

/// A member waiting for its batch's outcome.
struct Joined<T> {
    value: T,
    delivery: Delivery,
    /// Whether it still stands when its batch closes (JetStream).
    standing: Option<Standing>,
    /// Where its outcome goes; `None` for the leader, which returns its own.
    answer: Option<oneshot::Sender<Handled>>,
}

/// The batch members are joining.
struct Open<T> {
    id: u64,
    members: Vec<Joined<T>>,
    /// Where the members go once `max` have joined.
    leader: oneshot::Sender<Vec<Joined<T>>>,
}

/// The mount's batches: the one open, and the places for the ones that run.
struct Gathering<T> {
    terms: BatchTerms,
    open: Mutex<(u64, Option<Open<T>>)>,
    places: Arc<Semaphore>,
    sizes: OnceLock<metrics::Histogram>,
}

/// What a new member is to its batch.
enum Role<T> {
    /// It opened the batch: it runs it.
    Leads {
        id: u64,
        full: oneshot::Receiver<Vec<Joined<T>>>,
    },
    /// It joined an open batch: it waits for its outcome.
    Follows(oneshot::Receiver<Handled>),
}

impl<T: Send + 'static> Gathering<T> {
    fn new(terms: BatchTerms) -> Self {
        Self {
            terms,
            open: Mutex::new((0, None)),
            places: Arc::new(Semaphore::new(
                terms.concurrency.clamp(1, Semaphore::MAX_PERMITS),
            )),
            sizes: OnceLock::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, Option<Open<T>>)> {
        // A panic cannot happen while the lock is held (no user code runs under it).
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds a member to the open batch, opening one if there is none; closes it when full.
    fn join(&self, value: T, delivery: Delivery, standing: Option<Standing>) -> Role<T> {
        let mut open = self.lock();
        if let Some(batch) = open.1.as_mut() {
            let (answer, answered) = oneshot::channel();
            batch.members.push(Joined {
                value,
                delivery,
                standing,
                answer: Some(answer),
            });
            if batch.members.len() >= self.terms.max
                && let Some(full) = open.1.take()
            {
                // The leader may be gone (dropped before its batch closed): then the members'
                // senders drop here, and each ends with no outcome.
                let _ = full.leader.send(full.members);
            }
            return Role::Follows(answered);
        }
        let id = open.0;
        open.0 += 1;
        let (leader, full) = oneshot::channel();
        let members = vec![Joined {
            value,
            delivery,
            standing,
            answer: None,
        }];
        if self.terms.max <= 1 {
            let _ = leader.send(members);
        } else {
            open.1 = Some(Open {
                id,
                members,
                leader,
            });
        }
        Role::Leads { id, full }
    }

    /// Closes batch `id` and takes its members: from the open batch if it is still the one
    /// open, or else from `full`, where the member that filled it sent them (under the lock).
    fn close(&self, id: u64, full: &mut oneshot::Receiver<Vec<Joined<T>>>) -> Vec<Joined<T>> {
        let mut open = self.lock();
        if open.1.as_ref().is_some_and(|o| o.id == id)
            && let Some(batch) = open.1.take()
        {
            return batch.members;
        }
        full.try_recv().unwrap_or_default()
    }

    /// Forgets batch `id` if it is still open: its leader is gone before it closed, so its
    /// members end with no outcome (their senders drop).
    fn abandon(&self, id: u64) {
        let mut open = self.lock();
        if open.1.as_ref().is_some_and(|o| o.id == id) {
            let gone = open.1.take();
            drop(open);
            if let Some(gone) = gone {
                tracing::error!(
                    mount = self.terms.mount,
                    members = gone.members.len(),
                    "a batch's leading delivery ended before its batch closed: its members are treated as no outcome"
                );
            }
        }
    }

    fn sizes(&self) -> &metrics::Histogram {
        self.sizes
            .get_or_init(|| crate::support::metrics::batch_sizes(self.terms.mount))
    }
}

/// Forgets the leader's batch if the leader is dropped before it closed.
struct Leading<'a, T: Send + 'static> {
    gathering: &'a Gathering<T>,
    id: u64,
    closed: bool,
}

impl<T: Send + 'static> Drop for Leading<'_, T> {
    fn drop(&mut self) {
        if !self.closed {
            self.gathering.abandon(self.id);
        }
    }
}

/// A batch handler: gathers its mount's deliveries into batches and runs `f` on each (see the
/// module docs). Built by [`App::mount_batch`](crate::App::mount_batch),
/// [`App::mount_typed_batch`](crate::App::mount_typed_batch) and
/// [`App::mount_json_batch`](crate::App::mount_json_batch).
pub struct BatchHandler<T, F> {
    f: Arc<F>,
    decode: Decode<T>,
    gathering: Arc<Gathering<T>>,
}

/// How a batch handler makes a member's value of its delivery: [`raw`], or [`typed`] with the
/// mount's codec.
pub(crate) type Decode<T> = Box<dyn Fn(&Delivery) -> Result<T, DecodeError> + Send + Sync>;

impl<T, F> std::fmt::Debug for BatchHandler<T, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchHandler")
            .field("mount", &self.gathering.terms.mount)
            .field("max", &self.gathering.terms.max)
            .field("max_wait", &self.gathering.terms.max_wait)
            .finish_non_exhaustive()
    }
}

/// A raw member's value: its payload (a reference count, no copy).
pub(crate) fn raw() -> Decode<Bytes> {
    Box::new(|delivery| Ok(delivery.payload.clone()))
}

/// A typed member's value: its payload decoded with `codec`.
pub(crate) fn typed<C: Codec, T: DeserializeOwned>(codec: C) -> Decode<T> {
    Box::new(move |delivery| codec.decode(&delivery.payload))
}

impl<T, F, Fut> BatchHandler<T, F>
where
    T: Send + 'static,
    F: Fn(Batch<T>) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoBatchHandled,
{
    /// A handler that decodes each member with `decode` and runs `f` on batches made by
    /// `terms`.
    pub(crate) fn new(f: F, decode: Decode<T>, terms: BatchTerms) -> Self {
        Self {
            f: Arc::new(f),
            decode,
            gathering: Arc::new(Gathering::new(terms)),
        }
    }
}

impl<T, F, Fut> Handler for BatchHandler<T, F>
where
    T: Send + 'static,
    F: Fn(Batch<T>) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoBatchHandled,
{
    fn call(
        &self,
        delivery: Delivery,
        context: ContextSource<'_>,
    ) -> Result<HandledFuture, DecodeError> {
        let value = (self.decode)(&delivery)?;
        let gathering = self.gathering.clone();
        let f = self.f.clone();
        let standing = context.standing();
        let context = context.batch_context();
        // The member joins its batch when its run is first polled, not here: a mount with a
        // key (rule 24) starts a delivery's run only when its key's turn comes, so that a
        // batch never holds two deliveries of one key. Unkeyed, the mount loop polls it at
        // once, in the order the deliveries arrived.
        Ok(Box::pin(async move {
            match gathering.join(value, delivery, standing) {
                Role::Follows(answered) => follow(answered, gathering.terms.mount).await,
                Role::Leads { id, full } => {
                    let first_at = gathering.terms.timer.now();
                    let stopping = context.stopping();
                    lead(gathering, f, id, full, first_at, context, stopping).await
                }
            }
        }))
    }
}

/// A member that follows: its outcome, when its batch has run.
async fn follow(answered: oneshot::Receiver<Handled>, mount: &'static str) -> Handled {
    match answered.await {
        Ok(handled) => handled,
        Err(_) => {
            tracing::warn!(
                mount,
                "this delivery's batch ended without an outcome for it (its handler panicked or was cancelled): treated as no outcome"
            );
            Handled::Outcome(Outcome::None)
        }
    }
}

/// The leader's run: waits for its batch to close and for a place, runs `f` on it within the
/// time limit, hands every other member its outcome, and returns its own.
async fn lead<T, F, Fut>(
    gathering: Arc<Gathering<T>>,
    f: Arc<F>,
    id: u64,
    mut full: oneshot::Receiver<Vec<Joined<T>>>,
    first_at: Instant,
    context: Context,
    mut stopping: watch::Receiver<bool>,
) -> Handled
where
    T: Send + 'static,
    F: Fn(Batch<T>) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoBatchHandled,
{
    let terms = gathering.terms;
    let mut leading = Leading {
        gathering: &gathering,
        id,
        closed: false,
    };
    let filled = {
        let waited = terms
            .timer
            .sleep_until(first_at.checked_add(terms.max_wait));
        tokio::select! {
            members = &mut full => members.ok(),
            () = waited => None,
            _ = stopping.wait_for(|stopping| *stopping) => None,
        }
    };
    // A place among the mount's `concurrency` batches; the batch keeps filling meanwhile.
    let _place = gathering.places.clone().acquire_owned().await;
    let joined = match filled {
        Some(members) => members,
        None => gathering.close(id, &mut full),
    };
    leading.closed = true;
    let joined = standing_only(terms, joined);
    let size = joined.len();
    if size == 0 {
        // Not one member stands: the leader did not either.
        return Handled::Outcome(Outcome::None);
    }
    gathering.sizes().record(size as f64);
    let mut answers = Vec::with_capacity(size);
    let members = joined
        .into_iter()
        .map(|j| {
            answers.push(j.answer);
            Member {
                value: j.value,
                delivery: j.delivery,
            }
        })
        .collect();
    let handled = run_apart(terms, f, Batch { members, context }).await;
    // The leader's own outcome: no answer (`None`) stands for it; `Outcome::None` if it did
    // not stand itself.
    let mut own = Handled::Outcome(Outcome::None);
    for (answer, handled) in answers.into_iter().zip(handled) {
        match answer {
            // A member whose run is gone (its task cancelled) needs no answer.
            Some(answer) => {
                let _ = answer.send(handled);
            }
            None => own = handled,
        }
    }
    own
}

/// Runs `f` on `batch`, bounded by the handler time limit: its first poll in place, on the task
/// of the batch's members (beside their mount loop, where they are settled), and, if it has to
/// wait, the rest on a task of its own on the application's runtime, so that a batch that
/// awaits runs in parallel with the connection and with the other batches (issue 38: running
/// every batch on the application's runtime cost 10 % of js-batch's throughput, a hand-over
/// and a wake-up across threads for each). Each member's outcome, in order
/// ([`outcomes`]); a panic in `f` is caught and logged, and counts as no outcome for every
/// member (rule 13).
async fn run_apart<T, F, Fut>(terms: BatchTerms, f: Arc<F>, batch: Batch<T>) -> Vec<Handled>
where
    T: Send + 'static,
    F: Fn(Batch<T>) -> Fut + Send + Sync + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: IntoBatchHandled,
{
    use futures_util::FutureExt;

    let size = batch.len();
    let started = terms.timer.now();
    let mut run =
        Box::pin(std::panic::AssertUnwindSafe(async move { f(batch).await }).catch_unwind());
    // Its first poll in place, as a single delivery's handler has (and most batches end
    // there: a batch is one call, its awaits one transaction); a run that awaits goes on on a
    // task of its own, on the application's runtime, where the time limit's timer is made
    // (one made here would belong to the loop's thread, whose runtime may be gone before a
    // run the shutdown gave up on ends).
    let first = std::future::poll_fn(|cx| Poll::Ready(run.as_mut().poll(cx))).await;
    let result = match first {
        Poll::Ready(ran) => Ok(ran.map(Some)),
        Poll::Pending => {
            let (ran, result) = oneshot::channel();
            (terms.timer.spawn)(Box::pin(async move {
                let spent = terms.timer.now().saturating_duration_since(started);
                let ended = match terms
                    .timer
                    .within(terms.limit.saturating_sub(spent), run)
                    .await
                {
                    Some(ran) => ran.map(Some),
                    None => Ok(None),
                };
                let _ = ran.send(ended);
            }));
            result.await
        }
    };
    match result {
        // `None` at the time limit.
        Ok(Ok(result)) => return outcomes(terms, size, result),
        Ok(Err(panic)) => {
            tracing::error!(mount = %terms.mount, size,
                panic = crate::support::panics::panic_message(&*panic),
                "batch handler panicked: every member treated as no outcome");
        }
        // The task was dropped unfinished: the application's runtime is shutting down.
        Err(_) => {
            tracing::error!(mount = %terms.mount, size,
                "the batch's run was dropped unfinished (the application's runtime is shutting down): every member treated as no outcome");
        }
    }
    vec![Handled::Outcome(Outcome::None); size]
}

/// The members of a closed batch that still stand (rule 16): a JetStream member delivered
/// again while it waited, or past its deadline (its renewals could not be sent), is left out,
/// its run ended with no outcome (its result would be discarded, and running it would overlap
/// the newer delivery's run), logged at warn level.
fn standing_only<T>(terms: BatchTerms, joined: Vec<Joined<T>>) -> Vec<Joined<T>> {
    if joined.iter().all(|j| j.standing.is_none()) {
        return joined;
    }
    let now = terms.timer.now();
    let mut left_out = 0;
    let kept: Vec<Joined<T>> = joined
        .into_iter()
        .filter_map(|j| {
            if j.standing.as_ref().is_none_or(|s| s.holds(now)) {
                return Some(j);
            }
            left_out += 1;
            if let Some(answer) = j.answer {
                let _ = answer.send(Handled::Outcome(Outcome::None));
            }
            None
        })
        .collect();
    if left_out > 0 {
        tracing::warn!(
            mount = terms.mount,
            left_out,
            "members that waited for their batch were delivered again meanwhile, or passed their deadline (their renewals could not be sent): left out of the batch, not run here"
        );
    }
    kept
}

/// Each member's [`Handled`], in order, from the batch's result (`None`: the time limit).
fn outcomes<O: IntoBatchHandled>(
    terms: BatchTerms,
    size: usize,
    result: Option<O>,
) -> Vec<Handled> {
    match result.map(IntoBatchHandled::into_batch_handled) {
        None => {
            tracing::error!(mount = terms.mount, size, limit = ?terms.limit,
                "batch handler time limit reached: cancelled, every member treated as no outcome");
            vec![Handled::Outcome(Outcome::None); size]
        }
        Some(BatchHandled::All(handled)) => vec![handled; size],
        Some(BatchHandled::Each(each)) if each.len() == size => each,
        Some(BatchHandled::Each(each)) => {
            tracing::error!(
                mount = terms.mount,
                size,
                outcomes = each.len(),
                "the batch handler returned a per-member outcome list of the wrong length (a bug in the handler): every member is retried"
            );
            vec![Handled::Outcome(Outcome::Retry); size]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms() -> BatchTerms {
        BatchTerms {
            mount: "m",
            max: 3,
            max_wait: Duration::from_millis(10),
            concurrency: 1,
            limit: Duration::from_secs(1),
            timer: Timer {
                sleep_until: |_| Box::pin(std::future::pending()),
                now: Instant::now,
                spawn: |_| {},
            },
        }
    }

    #[test]
    fn one_outcome_is_every_members() {
        let got = outcomes(terms(), 3, Some(Outcome::Drop));
        assert_eq!(got, vec![Handled::Outcome(Outcome::Drop); 3]);
    }

    #[test]
    fn per_member_outcomes_keep_their_order() {
        let got = outcomes(
            terms(),
            3,
            Some(vec![
                Ok(Outcome::Ack),
                Err("boom"),
                Ok(Outcome::RetryAfter(Duration::from_millis(5))),
            ]),
        );
        assert_eq!(
            got,
            [
                Handled::Outcome(Outcome::Ack),
                Handled::Error("boom".to_owned()),
                Handled::Outcome(Outcome::RetryAfter(Duration::from_millis(5))),
            ]
        );
    }

    #[test]
    fn a_list_of_the_wrong_length_retries_every_member() {
        let got = outcomes(terms(), 3, Some(vec![Outcome::Ack]));
        assert_eq!(got, vec![Handled::Outcome(Outcome::Retry); 3]);
        let got = outcomes(terms(), 2, Some(vec![Outcome::Ack; 3]));
        assert_eq!(got, vec![Handled::Outcome(Outcome::Retry); 2]);
    }

    #[test]
    fn an_error_for_the_batch_is_every_members_error() {
        let got = outcomes(terms(), 2, Some(Err::<Outcome, _>("db down")));
        assert_eq!(got, vec![Handled::Error("db down".to_owned()); 2]);
        let got = outcomes(terms(), 2, Some(Err::<Vec<Outcome>, _>("db down")));
        assert_eq!(got, vec![Handled::Error("db down".to_owned()); 2]);
    }

    #[test]
    fn the_time_limit_is_no_outcome_for_every_member() {
        let got = outcomes::<Outcome>(terms(), 2, None);
        assert_eq!(got, vec![Handled::Outcome(Outcome::None); 2]);
    }

    fn delivery(n: u8) -> Delivery {
        Delivery {
            mount: "m",
            subject: "s".into(),
            reply: None,
            headers: None,
            payload: Bytes::from(vec![n]),
            attempt: ruststream_settlement::Attempt::FIRST,
            jetstream: None,
        }
    }

    #[test]
    fn a_batch_closes_when_full_and_the_next_member_opens_another() {
        let g = Gathering::<u8>::new(terms());
        let Role::Leads { id, mut full } = g.join(1, delivery(1), None) else {
            panic!("the first member leads")
        };
        assert!(matches!(g.join(2, delivery(2), None), Role::Follows(_)));
        assert!(full.try_recv().is_err(), "not full yet");
        assert!(matches!(g.join(3, delivery(3), None), Role::Follows(_)));
        let members = full.try_recv().expect("full at max");
        assert_eq!(
            members.iter().map(|m| m.value).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        let Role::Leads { id: next, .. } = g.join(4, delivery(4), None) else {
            panic!("a full batch is closed: the next member leads a new one")
        };
        assert_ne!(id, next);
    }

    #[test]
    fn a_batch_closed_by_its_wait_takes_who_joined() {
        let g = Gathering::<u8>::new(terms());
        let Role::Leads { id, mut full } = g.join(1, delivery(1), None) else {
            panic!("the first member leads")
        };
        let _follower = g.join(2, delivery(2), None);
        let members = g.close(id, &mut full);
        assert_eq!(members.len(), 2);
        assert!(matches!(g.join(3, delivery(3), None), Role::Leads { .. }));
    }

    #[test]
    fn an_abandoned_batch_ends_its_members_without_an_outcome() {
        let g = Gathering::<u8>::new(terms());
        let Role::Leads { id, .. } = g.join(1, delivery(1), None) else {
            panic!("the first member leads")
        };
        let Role::Follows(mut answered) = g.join(2, delivery(2), None) else {
            panic!("the second follows")
        };
        g.abandon(id);
        assert!(matches!(
            answered.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
    }
}
