//! Leases (rule 16): a running handler's delivery is kept from redelivery, and every handler
//! is bounded by its mount's time limit.
//!
//! A JetStream consumer redelivers a message whose ack has not come within the delivery's
//! *span*: the consumer's `ack_wait`, or where it has a `BackOff` list, its entry for this
//! delivery ([`lease_span`]). A handler slower than that would run twice at once, and a late
//! `+ACK` from the first run would override what the second decided. So while a handler runs,
//! the adapter sends `+WPI` (work in progress) on the delivery's ack reply subject, which
//! restarts the server's clock; a result that comes after the deadline passed without a
//! renewal is not sent (the server may already have redelivered).
//!
//! [`Leases`] keeps this sans-io, for every running handler of an app, with one timer:
//!
//! 1. [`Leases::handle_start`] when a handler is still running after its first poll (one that
//!    returns at once never gets a lease: it costs nothing). Its deadline is `now + span`; a
//!    renewal falls due at half the span; its time limit at `now + limit`.
//! 2. [`Leases::poll_timeout`] gives the earliest instant anything is due, for the one timer;
//!    [`Leases::handle_timeout`] gives what is due then: renewals to send
//!    ([`LeaseDue::Renew`]) and handlers to cancel ([`LeaseDue::TimeLimit`]).
//! 3. [`Leases::handle_renewed`] once a `+WPI` went out: the deadline moves to `now + span`,
//!    the next renewal to half a span later. A renewal that could not be sent is not reported,
//!    and the deadline stays where it was.
//! 4. [`Leases::handle_end`] when the handler finishes: [`LeaseEnd::OnTime`], or
//!    [`LeaseEnd::Late`] when the deadline passed first; then the result is logged and not
//!    sent.
//!
//! A lease without a span (a Core mount, or a mount with leases off) is only a time limit;
//! with leases off, the deadline still counts, so that a late result is not sent.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use slab::Slab;

/// The span of a JetStream delivery: how long the server waits for its ack (or a `+WPI`)
/// before it redelivers. `BackOff[min(delivered - 1, len - 1)]` where the consumer has a
/// `BackOff` list, else its `ack_wait` (nats-server: `consumer.go`, the redelivery check uses
/// the backoff entry for the delivery count in place of `ack_wait`).
pub fn lease_span(ack_wait: Duration, backoff: &[Duration], delivered: u64) -> Duration {
    let index = usize::try_from(delivered.saturating_sub(1)).unwrap_or(usize::MAX);
    match backoff.last() {
        None => ack_wait,
        Some(last) => backoff.get(index).copied().unwrap_or(*last),
    }
}

/// How a lease is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTerms {
    /// The delivery's span ([`lease_span`]); `None` where nothing redelivers (Core).
    pub span: Option<Duration>,
    /// Whether to renew the lease with `+WPI` while the handler runs (the mount's setting).
    pub renew: bool,
    /// The mount's handler time limit.
    pub limit: Duration,
}

/// A lease's key, given by [`Leases::handle_start`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseKey {
    slot: usize,
    generation: u64,
}

/// What is due for a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseDue {
    /// Send `+WPI` for it now, then report [`Leases::handle_renewed`].
    Renew(LeaseKey),
    /// Its handler has run for its mount's time limit: cancel it (it counts as no outcome),
    /// then report [`Leases::handle_end`].
    TimeLimit(LeaseKey),
}

/// How a lease ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseEnd {
    /// Within its deadline (or it has none): the result is sent.
    OnTime,
    /// After its deadline passed without a renewal: the result is logged, not sent.
    Late {
        /// How long after the deadline it came.
        by: Duration,
    },
}

#[derive(Debug)]
struct Lease<T> {
    generation: u64,
    terms: LeaseTerms,
    deadline: Option<Instant>,
    renew_at: Option<Instant>,
    limit_at: Instant,
    item: T,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Renew,
    TimeLimit,
}

/// The leases of an app's running handlers, each with an item of the adapter's (what it needs
/// to send a renewal or cancel the handler). See the module docs.
///
/// Every lease has at most two entries in the schedule (its next renewal and its time limit),
/// removed when it ends or is renewed: the memory held is bounded by the handlers running, not
/// by how many have run.
#[derive(Debug)]
pub struct Leases<T> {
    leases: Slab<Lease<T>>,
    /// What is due when: (instant, kind, slot, generation).
    due: BTreeSet<(Instant, Kind, usize, u64)>,
    generation: u64,
}

impl<T> Default for Leases<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Leases<T> {
    /// No leases.
    pub fn new() -> Self {
        Self {
            leases: Slab::new(),
            due: BTreeSet::new(),
            generation: 0,
        }
    }

    /// How many leases are held.
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// Whether no lease is held.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// How many renewals and time limits are scheduled: at most two per lease held.
    pub fn scheduled(&self) -> usize {
        self.due.len()
    }

    /// The item of a lease still held.
    pub fn get(&self, key: LeaseKey) -> Option<&T> {
        self.lease(key).map(|l| &l.item)
    }

    /// The item of a lease still held, to change.
    pub fn get_mut(&mut self, key: LeaseKey) -> Option<&mut T> {
        self.lease_mut(key).map(|l| &mut l.item)
    }

    /// A handler started (or was found still running after its first poll) at `now`.
    pub fn handle_start(&mut self, terms: LeaseTerms, item: T, now: Instant) -> LeaseKey {
        self.generation += 1;
        let generation = self.generation;
        let deadline = terms.span.map(|span| crate::deadline(now, span));
        let renew_at = match (terms.renew, terms.span) {
            (true, Some(span)) => Some(crate::deadline(now, span / 2)),
            _ => None,
        };
        let limit_at = crate::deadline(now, terms.limit);
        let slot = self.leases.insert(Lease {
            generation,
            terms,
            deadline,
            renew_at,
            limit_at,
            item,
        });
        if let Some(at) = renew_at {
            self.due.insert((at, Kind::Renew, slot, generation));
        }
        self.due
            .insert((limit_at, Kind::TimeLimit, slot, generation));
        LeaseKey { slot, generation }
    }

    /// A `+WPI` for the lease went out at `now`: the server's clock restarts.
    pub fn handle_renewed(&mut self, key: LeaseKey, now: Instant) {
        let Some(lease) = self.lease_mut(key) else {
            return;
        };
        let Some(span) = lease.terms.span else {
            return;
        };
        lease.deadline = Some(crate::deadline(now, span));
        let old = lease.renew_at.take();
        // Past its time limit its handler is being cancelled: no more renewals.
        let next = (now < lease.limit_at).then(|| crate::deadline(now, span / 2));
        lease.renew_at = next;
        if let Some(at) = old {
            self.due
                .remove(&(at, Kind::Renew, key.slot, key.generation));
        }
        if let Some(at) = next {
            self.due.insert((at, Kind::Renew, key.slot, key.generation));
        }
    }

    /// The lease's handler finished at `now` (or was cancelled): the lease ends, and says
    /// whether the result may be sent. An unknown key (already ended) is on time.
    pub fn handle_end(&mut self, key: LeaseKey, now: Instant) -> (LeaseEnd, Option<T>) {
        if self.lease(key).is_none() {
            return (LeaseEnd::OnTime, None);
        }
        let lease = self.leases.remove(key.slot);
        if let Some(at) = lease.renew_at {
            self.due
                .remove(&(at, Kind::Renew, key.slot, key.generation));
        }
        self.due
            .remove(&(lease.limit_at, Kind::TimeLimit, key.slot, key.generation));
        let end = match lease.deadline {
            Some(deadline) if now > deadline => LeaseEnd::Late { by: now - deadline },
            _ => LeaseEnd::OnTime,
        };
        (end, Some(lease.item))
    }

    /// The earliest instant something is due, if anything is.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.due.first().map(|(at, ..)| *at)
    }

    /// What is due at `now`, in order: renewals to send and time limits reached. A lease whose
    /// time limit is reached gets no more renewals.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<LeaseDue> {
        let mut due = Vec::new();
        while let Some(&(at, kind, slot, generation)) = self.due.first() {
            if at > now {
                break;
            }
            self.due.pop_first();
            let key = LeaseKey { slot, generation };
            match kind {
                Kind::Renew => {
                    if let Some(lease) = self.lease_mut(key) {
                        lease.renew_at = None;
                    }
                    due.push(LeaseDue::Renew(key));
                }
                Kind::TimeLimit => {
                    let renew_at = self.lease_mut(key).and_then(|lease| lease.renew_at.take());
                    if let Some(at) = renew_at {
                        self.due.remove(&(at, Kind::Renew, slot, generation));
                    }
                    due.push(LeaseDue::TimeLimit(key));
                }
            }
        }
        due
    }

    fn lease(&self, key: LeaseKey) -> Option<&Lease<T>> {
        self.leases
            .get(key.slot)
            .filter(|l| l.generation == key.generation)
    }

    fn lease_mut(&mut self, key: LeaseKey) -> Option<&mut Lease<T>> {
        self.leases
            .get_mut(key.slot)
            .filter(|l| l.generation == key.generation)
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests read the clock for a base instant
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn terms(span: Option<u64>, renew: bool, limit: u64) -> LeaseTerms {
        LeaseTerms {
            span: span.map(Duration::from_secs),
            renew,
            limit: Duration::from_secs(limit),
        }
    }

    #[test]
    fn the_span_is_ack_wait_or_the_backoff_entry_for_the_delivery() {
        let ack_wait = 30 * SECOND;
        assert_eq!(lease_span(ack_wait, &[], 1), ack_wait);
        let backoff = [SECOND, 2 * SECOND, 5 * SECOND];
        assert_eq!(lease_span(ack_wait, &backoff, 1), SECOND);
        assert_eq!(lease_span(ack_wait, &backoff, 2), 2 * SECOND);
        assert_eq!(lease_span(ack_wait, &backoff, 3), 5 * SECOND);
        assert_eq!(lease_span(ack_wait, &backoff, 9), 5 * SECOND);
        assert_eq!(lease_span(ack_wait, &backoff, u64::MAX), 5 * SECOND);
        assert_eq!(lease_span(ack_wait, &backoff, 0), SECOND);
    }

    #[test]
    fn renewals_come_at_half_the_span_and_keep_the_result_on_time() {
        let t0 = Instant::now();
        let mut leases = Leases::new();
        let key = leases.handle_start(terms(Some(10), true, 300), "d", t0);
        assert_eq!(leases.poll_timeout(), Some(t0 + 5 * SECOND));
        assert!(leases.handle_timeout(t0 + 4 * SECOND).is_empty());
        assert_eq!(
            leases.handle_timeout(t0 + 5 * SECOND),
            [LeaseDue::Renew(key)]
        );
        leases.handle_renewed(key, t0 + 5 * SECOND);
        assert_eq!(leases.poll_timeout(), Some(t0 + 10 * SECOND));
        assert_eq!(
            leases.handle_timeout(t0 + 10 * SECOND),
            [LeaseDue::Renew(key)]
        );
        leases.handle_renewed(key, t0 + 10 * SECOND);
        // 30 s in: three spans, never late.
        let (end, item) = leases.handle_end(key, t0 + 19 * SECOND);
        assert_eq!((end, item), (LeaseEnd::OnTime, Some("d")));
        assert!(leases.is_empty());
        assert_eq!(leases.poll_timeout(), None, "nothing due once it ended");
    }

    #[test]
    fn a_renewal_not_sent_leaves_the_deadline_and_the_result_is_late() {
        let t0 = Instant::now();
        let mut leases = Leases::new();
        let key = leases.handle_start(terms(Some(10), true, 300), (), t0);
        assert_eq!(
            leases.handle_timeout(t0 + 5 * SECOND),
            [LeaseDue::Renew(key)]
        );
        // The +WPI could not be sent (the connection was down): not reported.
        let (end, _) = leases.handle_end(key, t0 + 12 * SECOND);
        assert_eq!(end, LeaseEnd::Late { by: 2 * SECOND });
    }

    #[test]
    fn leases_off_renew_nothing_but_a_late_result_is_still_late() {
        let t0 = Instant::now();
        let mut leases = Leases::new();
        let key = leases.handle_start(terms(Some(1), false, 300), (), t0);
        assert_eq!(
            leases.poll_timeout(),
            Some(t0 + 300 * SECOND),
            "only the time limit"
        );
        assert_eq!(leases.handle_end(key, t0 + SECOND).0, LeaseEnd::OnTime);
        let key = leases.handle_start(terms(Some(1), false, 300), (), t0);
        assert_eq!(
            leases.handle_end(key, t0 + 3 * SECOND).0,
            LeaseEnd::Late { by: 2 * SECOND }
        );
    }

    #[test]
    fn a_core_lease_is_only_a_time_limit() {
        let t0 = Instant::now();
        let mut leases = Leases::new();
        let key = leases.handle_start(terms(None, true, 60), (), t0);
        assert_eq!(leases.poll_timeout(), Some(t0 + 60 * SECOND));
        assert_eq!(
            leases.handle_timeout(t0 + 60 * SECOND),
            [LeaseDue::TimeLimit(key)]
        );
        assert_eq!(leases.handle_end(key, t0 + 61 * SECOND).0, LeaseEnd::OnTime);
    }

    #[test]
    fn the_time_limit_stops_renewals() {
        let t0 = Instant::now();
        let mut leases = Leases::new();
        let key = leases.handle_start(terms(Some(4), true, 5), (), t0);
        assert_eq!(
            leases.handle_timeout(t0 + 2 * SECOND),
            [LeaseDue::Renew(key)]
        );
        leases.handle_renewed(key, t0 + 2 * SECOND);
        assert_eq!(
            leases.handle_timeout(t0 + 4 * SECOND),
            [LeaseDue::Renew(key)]
        );
        leases.handle_renewed(key, t0 + 4 * SECOND);
        assert_eq!(
            leases.handle_timeout(t0 + 5 * SECOND),
            [LeaseDue::TimeLimit(key)]
        );
        assert!(leases.handle_timeout(t0 + 60 * SECOND).is_empty());
    }

    #[test]
    fn an_ended_key_is_never_confused_with_a_new_lease_in_its_slot() {
        let t0 = Instant::now();
        let mut leases = Leases::new();
        let old = leases.handle_start(terms(Some(10), true, 300), 1, t0);
        let _ = leases.handle_end(old, t0);
        let new = leases.handle_start(terms(Some(10), true, 300), 2, t0);
        assert_ne!(old, new);
        assert_eq!(leases.get(old), None);
        assert_eq!(leases.get(new), Some(&2));
        assert_eq!(leases.handle_end(old, t0), (LeaseEnd::OnTime, None));
        leases.handle_renewed(old, t0 + SECOND);
        assert_eq!(
            leases.handle_timeout(t0 + 5 * SECOND),
            [LeaseDue::Renew(new)]
        );
    }
}
