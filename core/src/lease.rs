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
//!    [`LeaseEnd::Late`] when the deadline passed first, or [`LeaseEnd::Superseded`] when the
//!    message was delivered again meanwhile (below); then the result is logged and not sent.
//!
//! A renewal can be lost on its way (the client took it, the server never saw it), and then
//! the server delivers the message again while its handler still runs here, which nothing
//! here can see until that delivery arrives. [`Leases::handle_delivered`], told of every
//! JetStream delivery a mount receives, marks the leases of earlier deliveries of the same
//! message superseded: they are renewed no more, and their results are not sent. nats-server
//! settles a message by its stream sequence, whatever delivery the ack reply subject names,
//! so a superseded run's `-NAK` or `+ACK` would be taken over the newer delivery's, which
//! then runs, unrenewed or redelivered, beside another.
//!
//! A lease without a span (a Core mount, or a mount with leases off) is only a time limit;
//! with leases off, the deadline still counts, so that a late result is not sent.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
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

/// The JetStream delivery a lease keeps from redelivery: which message (its mount, an index the
/// adapter gives, and its stream sequence) and which delivery of it (the delivery count of its
/// ack reply subject).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasedDelivery {
    /// The mount that received it (the adapter's index; only compared).
    pub mount: usize,
    /// The message's stream sequence.
    pub stream_sequence: u64,
    /// Its delivery count: 1 for the first delivery.
    pub delivered: u64,
}

impl LeasedDelivery {
    /// The delivery whose ack reply subject is `reply`, received by mount `mount`.
    pub fn of(mount: usize, reply: &crate::AckReply<'_>) -> Self {
        Self {
            mount,
            stream_sequence: reply.stream_sequence,
            delivered: reply.delivered,
        }
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
    /// The JetStream delivery it keeps, which a later delivery of the same message supersedes
    /// ([`Leases::handle_delivered`]); `None` on Core.
    pub delivery: Option<LeasedDelivery>,
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
    /// The message was delivered again while it ran (its renewals were lost on their way, so
    /// its deadline passed on the server though not here): the result is logged, not sent.
    Superseded {
        /// The delivery count of the newer delivery.
        by: u64,
    },
}

#[derive(Debug)]
struct Lease<T> {
    generation: u64,
    terms: LeaseTerms,
    deadline: Option<Instant>,
    renew_at: Option<Instant>,
    limit_at: Instant,
    /// Whether its time limit is still scheduled (not yet given by `handle_timeout`).
    limit_due: bool,
    /// The delivery count of a later delivery of its message, once one arrived.
    superseded: Option<u64>,
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
/// Every lease has at most two live entries in the schedule (its next renewal and its time
/// limit). An entry a lease no longer needs (the lease ended, or its renewal moved or was
/// cancelled) is not searched for and removed: it stays where it is and is skipped, the
/// earliest entry is always a live one (stale ones are dropped from the front as they come
/// there), and the schedule is rebuilt without its stale entries once they outnumber the live
/// ones by far (four per lease). So starting and ending a lease costs a push and nothing
/// else on the schedule, and the memory held stays bounded by the handlers running, not by
/// how many have run.
#[derive(Debug)]
pub struct Leases<T> {
    leases: Slab<Lease<T>>,
    /// What is due when, earliest first: (instant, kind, slot, generation).
    due: BinaryHeap<Reverse<Due>>,
    /// The leases of JetStream deliveries, by message: (mount, stream sequence).
    messages: HashMap<(usize, u64), Holders, BuildHasherDefault<MessageHasher>>,
    generation: u64,
}

/// The hasher of the message index: a multiply-and-rotate over the two integers of a
/// (mount, stream sequence) key, and a finalizer that spreads every bit. The keys come from the server's own sequence numbers, not
/// from anyone who could choose them to collide, so the standard library's DoS-resistant
/// hasher (SipHash, measured at half the cost of a lease's start) buys nothing here.
#[derive(Debug, Default, Clone, Copy)]
struct MessageHasher(u64);

impl Hasher for MessageHasher {
    fn finish(&self) -> u64 {
        // The product's low bits depend only on the key's low bits, and the table picks its
        // bucket by the low bits: a finalizer (MurmurHash3's 64-bit mix) spreads every bit
        // over all of them, so that sequences spaced by a power of two (a filtered consumer on
        // a stream whose publishers take turns) spread too.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        // The 64-bit golden-ratio constant spreads consecutive sequences over the table.
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// One entry of the schedule: (instant, kind, slot, generation).
type Due = (Instant, Kind, usize, u64);

/// How many entries the schedule may hold per lease held (plus [`STALE_SLACK`]) before it is
/// rebuilt without its stale ones: each lease has at most two live ones.
const STALE_FACTOR: usize = 4;

/// Entries the schedule may hold beyond [`STALE_FACTOR`] per lease, so that a few leases do
/// not rebuild it at every end.
const STALE_SLACK: usize = 1024;

/// The leases held for one message: nearly always one, so without an allocation.
#[derive(Debug)]
struct Holders {
    first: LeaseKey,
    more: Vec<LeaseKey>,
}

impl Holders {
    fn keys(&self) -> impl Iterator<Item = LeaseKey> + '_ {
        std::iter::once(self.first).chain(self.more.iter().copied())
    }
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
            due: BinaryHeap::new(),
            messages: HashMap::default(),
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

    /// How many JetStream messages have a delivery held under a lease: none means that
    /// [`handle_delivered`](Self::handle_delivered) has nothing to do.
    pub fn messages(&self) -> usize {
        self.messages.len()
    }

    /// How many of mount `mount`'s JetStream messages are held under a lease that no later
    /// delivery superseded: the messages the mount is still running (or waiting to run) for
    /// the server, each once however many of its deliveries run (see
    /// [`handle_delivered`](Self::handle_delivered)). A message whose every lease was
    /// superseded is not counted: a newer delivery of it has settled it, or will. One pass over
    /// the messages held.
    pub fn current_messages(&self, mount: usize) -> usize {
        self.messages
            .iter()
            .filter(|((m, _), holders)| {
                *m == mount
                    && holders
                        .keys()
                        .filter_map(|key| self.lease(key))
                        .any(|lease| lease.superseded.is_none())
            })
            .count()
    }

    /// How many renewals and time limits are scheduled: at most two per lease held. Counted
    /// over the leases held (for tests and diagnostics).
    pub fn scheduled(&self) -> usize {
        self.leases
            .iter()
            .map(|(_, l)| usize::from(l.renew_at.is_some()) + usize::from(l.limit_due))
            .sum()
    }

    /// The item of a lease still held.
    pub fn get(&self, key: LeaseKey) -> Option<&T> {
        self.lease(key).map(|l| &l.item)
    }

    /// The item of a lease still held, to change.
    pub fn get_mut(&mut self, key: LeaseKey) -> Option<&mut T> {
        self.lease_mut(key).map(|l| &mut l.item)
    }

    /// A handler started (or was found still running after its first poll) at `now`. A lease
    /// of a delivery older than one of the same message already held is superseded from the
    /// start (see [`handle_delivered`](Self::handle_delivered)), and supersedes older ones.
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
            limit_due: true,
            superseded: None,
            item,
        });
        if let Some(at) = renew_at {
            self.due.push(Reverse((at, Kind::Renew, slot, generation)));
        }
        self.due
            .push(Reverse((limit_at, Kind::TimeLimit, slot, generation)));
        let key = LeaseKey { slot, generation };
        if let Some(delivery) = terms.delivery {
            let message = (delivery.mount, delivery.stream_sequence);
            // Nearly always the only lease of its message: one lookup.
            if let Entry::Vacant(vacant) = self.messages.entry(message) {
                vacant.insert(Holders {
                    first: key,
                    more: Vec::new(),
                });
                return key;
            }
            self.handle_delivered(delivery);
            let newest = self
                .held(delivery)
                .map(|(_, d)| d.delivered)
                .max()
                .unwrap_or(delivery.delivered);
            if let Some(holders) = self.messages.get_mut(&message) {
                holders.more.push(key);
            }
            if newest > delivery.delivered {
                self.supersede(key, newest);
            }
        }
        key
    }

    /// A mount received `delivery` (every JetStream delivery, as it arrives): the leases of
    /// earlier deliveries of the same message are superseded. They get no more renewals (a
    /// renewal on an earlier delivery's ack reply subject would restart the server's clock of
    /// the newer one, and undo a `-NAK`'s delay), and [`handle_end`](Self::handle_end) says
    /// [`LeaseEnd::Superseded`]. Returns how many it superseded now.
    pub fn handle_delivered(&mut self, delivery: LeasedDelivery) -> usize {
        let older: Vec<LeaseKey> = self
            .held(delivery)
            .filter(|(_, held)| held.delivered < delivery.delivered)
            .map(|(key, _)| key)
            .collect();
        let mut superseded = 0;
        for key in older {
            if self.supersede(key, delivery.delivered) {
                superseded += 1;
            }
        }
        superseded
    }

    /// Whether `delivery` still stands at `now`: no later delivery of its message superseded
    /// its lease, and its lease's deadline (if it has one) has not passed. A delivery that
    /// waited to start (for its key's turn, or for its batch, rule 24 and rule 23) and no
    /// longer stands is not run: the server has delivered its message again, or will, and a
    /// run now would overlap the newer one's (rule 16). One without a lease here stands.
    pub fn is_current(&self, delivery: LeasedDelivery, now: Instant) -> bool {
        self.held(delivery)
            .filter(|(_, held)| held.delivered == delivery.delivered)
            .filter_map(|(key, _)| self.lease(key))
            .all(|lease| {
                lease.superseded.is_none() && lease.deadline.is_none_or(|deadline| now <= deadline)
            })
    }

    /// The leases held for `delivery`'s message, with the deliveries they keep.
    fn held(&self, delivery: LeasedDelivery) -> impl Iterator<Item = (LeaseKey, LeasedDelivery)> {
        self.messages
            .get(&(delivery.mount, delivery.stream_sequence))
            .into_iter()
            .flat_map(Holders::keys)
            .filter_map(|key| Some((key, self.lease(key)?.terms.delivery?)))
    }

    /// Marks the lease `key` superseded by delivery `by` and takes its next renewal off the
    /// schedule; whether it was not superseded before.
    fn supersede(&mut self, key: LeaseKey, by: u64) -> bool {
        let Some(lease) = self.lease_mut(key) else {
            return false;
        };
        let first = lease.superseded.is_none();
        lease.superseded = Some(lease.superseded.map_or(by, |b| b.max(by)));
        // Its renewal's entry is stale from here.
        if lease.renew_at.take().is_some() {
            self.tidy();
        }
        first
    }

    /// A `+WPI` for the lease went out at `now`: the server's clock restarts.
    pub fn handle_renewed(&mut self, key: LeaseKey, now: Instant) {
        let Some(lease) = self.lease_mut(key) else {
            return;
        };
        let Some(span) = lease.terms.span else {
            return;
        };
        // Superseded while its renewal went out: the next one is not scheduled.
        if lease.superseded.is_some() {
            return;
        }
        lease.deadline = Some(crate::deadline(now, span));
        // Past its time limit its handler is being cancelled: no more renewals. The entry
        // of the renewal it had, if any, is stale from here.
        let next = (now < lease.limit_at).then(|| crate::deadline(now, span / 2));
        lease.renew_at = next;
        if let Some(at) = next {
            self.due
                .push(Reverse((at, Kind::Renew, key.slot, key.generation)));
        }
        self.tidy();
    }

    /// The lease's handler finished at `now` (or was cancelled): the lease ends, and says
    /// whether the result may be sent. An unknown key (already ended) is on time.
    pub fn handle_end(&mut self, key: LeaseKey, now: Instant) -> (LeaseEnd, Option<T>) {
        if self.lease(key).is_none() {
            return (LeaseEnd::OnTime, None);
        }
        // Its entries in the schedule are stale from here.
        let lease = self.leases.remove(key.slot);
        self.tidy();
        if let Some(delivery) = lease.terms.delivery {
            let message = (delivery.mount, delivery.stream_sequence);
            if let Some(holders) = self.messages.get_mut(&message) {
                if holders.first == key {
                    match holders.more.pop() {
                        Some(next) => holders.first = next,
                        None => {
                            self.messages.remove(&message);
                        }
                    }
                } else {
                    holders.more.retain(|k| *k != key);
                }
            }
        }
        let end = match (lease.superseded, lease.deadline) {
            (Some(by), _) => LeaseEnd::Superseded { by },
            (None, Some(deadline)) if now > deadline => LeaseEnd::Late { by: now - deadline },
            _ => LeaseEnd::OnTime,
        };
        (end, Some(lease.item))
    }

    /// The earliest instant something is due, if anything is.
    pub fn poll_timeout(&self) -> Option<Instant> {
        // The earliest entry is always a live one (`tidy`).
        self.due.peek().map(|Reverse((at, ..))| *at)
    }

    /// What is due at `now`, in order: renewals to send and time limits reached. A lease whose
    /// time limit is reached gets no more renewals.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<LeaseDue> {
        let mut due = Vec::new();
        while let Some(&Reverse(entry)) = self.due.peek() {
            let (at, kind, slot, generation) = entry;
            if at > now {
                break;
            }
            self.due.pop();
            if !is_live(&self.leases, entry) {
                continue;
            }
            let key = LeaseKey { slot, generation };
            let Some(lease) = self.lease_mut(key) else {
                continue;
            };
            match kind {
                Kind::Renew => {
                    lease.renew_at = None;
                    due.push(LeaseDue::Renew(key));
                }
                Kind::TimeLimit => {
                    // Its renewal's entry, if any, is stale from here.
                    lease.limit_due = false;
                    lease.renew_at = None;
                    due.push(LeaseDue::TimeLimit(key));
                }
            }
        }
        self.tidy();
        due
    }

    /// Keeps the schedule's invariants after entries went stale: its earliest entry is a live
    /// one, and it holds at most [`STALE_FACTOR`] entries per lease (plus [`STALE_SLACK`]),
    /// rebuilt without its stale ones beyond that.
    fn tidy(&mut self) {
        let leases = &self.leases;
        if self.due.len() > STALE_FACTOR * leases.len() + STALE_SLACK {
            self.due.retain(|&Reverse(entry)| is_live(leases, entry));
        }
        while let Some(&Reverse(entry)) = self.due.peek() {
            if is_live(leases, entry) {
                break;
            }
            self.due.pop();
        }
    }

    fn lease(&self, key: LeaseKey) -> Option<&Lease<T>> {
        lease_at(&self.leases, key)
    }

    fn lease_mut(&mut self, key: LeaseKey) -> Option<&mut Lease<T>> {
        self.leases
            .get_mut(key.slot)
            .filter(|l| l.generation == key.generation)
    }
}

/// The lease `key` names, if it is still held (its slot not reused by a later lease).
fn lease_at<T>(leases: &Slab<Lease<T>>, key: LeaseKey) -> Option<&Lease<T>> {
    leases
        .get(key.slot)
        .filter(|l| l.generation == key.generation)
}

/// Whether a schedule entry is still needed: its lease is held (the same generation), and it
/// is that lease's next renewal, or its time limit not yet given.
fn is_live<T>(leases: &Slab<Lease<T>>, (at, kind, slot, generation): Due) -> bool {
    let Some(lease) = lease_at(leases, LeaseKey { slot, generation }) else {
        return false;
    };
    match kind {
        Kind::Renew => lease.renew_at == Some(at),
        Kind::TimeLimit => lease.limit_due && lease.limit_at == at,
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
            delivery: None,
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

    fn delivered(stream_sequence: u64, delivered: u64) -> LeasedDelivery {
        LeasedDelivery {
            mount: 0,
            stream_sequence,
            delivered,
        }
    }

    fn delivery_terms(stream_sequence: u64, delivered: u64) -> LeaseTerms {
        LeaseTerms {
            delivery: Some(self::delivered(stream_sequence, delivered)),
            ..terms(Some(10), true, 300)
        }
    }

    #[test]
    fn sequences_spaced_by_a_power_of_two_spread_over_the_low_bits() {
        use std::hash::BuildHasher;
        let hasher = BuildHasherDefault::<MessageHasher>::default();
        for shift in [0, 4, 12, 16, 24] {
            let low: std::collections::HashSet<u64> = (0..1024u64)
                .map(|i| hasher.hash_one((0usize, i << shift)) & 1023)
                .collect();
            assert!(
                // 1,024 keys thrown at random into 1,024 buckets fill about 647.
                low.len() > 600,
                "stride 2^{shift}: {} distinct low 10 bits of 1024",
                low.len()
            );
        }
    }

    #[test]
    fn the_schedule_stays_bounded_by_the_leases_held_and_its_front_is_live() {
        let t0 = Instant::now();
        let mut leases = Leases::new();
        // One lease that runs long: every entry after it that goes stale stays behind it.
        let long = leases.handle_start(terms(Some(30), true, 300), 0, t0);
        for n in 0..20_000u64 {
            let now = t0 + Duration::from_micros(n);
            let key = leases.handle_start(delivery_terms(n, 1), 1, now);
            assert!(leases.due.len() <= STALE_FACTOR * leases.len() + STALE_SLACK);
            let (end, _) = leases.handle_end(key, now);
            assert_eq!(end, LeaseEnd::OnTime);
        }
        assert!(
            leases.due.len() <= STALE_FACTOR * leases.len() + STALE_SLACK,
            "{} entries for {} lease",
            leases.due.len(),
            leases.len()
        );
        assert_eq!(leases.messages(), 0);
        // The front is the long lease's renewal, at half its span.
        assert_eq!(leases.poll_timeout(), Some(t0 + 15 * SECOND));
        assert_eq!(
            leases.handle_timeout(t0 + 15 * SECOND),
            [LeaseDue::Renew(long)]
        );
        leases.handle_end(long, t0 + 16 * SECOND);
        assert_eq!(
            leases.poll_timeout(),
            None,
            "nothing due for leases that ended"
        );
        assert!(leases.due.is_empty());
    }

    #[test]
    fn a_delivery_stands_until_superseded_or_past_its_deadline() {
        let t0 = Instant::now();
        let mut leases = Leases::new();
        assert!(
            leases.is_current(delivered(7, 1), t0),
            "no lease: it stands"
        );
        let _first = leases.handle_start(delivery_terms(7, 1), "first", t0);
        let _other = leases.handle_start(delivery_terms(8, 1), "other", t0);
        assert!(leases.is_current(delivered(7, 1), t0 + SECOND));
        assert!(
            !leases.is_current(delivered(8, 1), t0 + 11 * SECOND),
            "its 10 s deadline passed without a renewal"
        );
        leases.handle_delivered(delivered(7, 2));
        assert!(
            !leases.is_current(delivered(7, 1), t0 + SECOND),
            "superseded"
        );
        assert!(
            leases.is_current(delivered(7, 2), t0 + SECOND),
            "the newer delivery, no lease yet, stands"
        );
    }

    #[test]
    fn a_later_delivery_of_the_message_supersedes_the_lease_and_stops_its_renewals() {
        let t0 = Instant::now();
        let mut leases = Leases::new();
        let first = leases.handle_start(delivery_terms(7, 1), "first", t0);
        let other = leases.handle_start(delivery_terms(8, 1), "other", t0);
        assert_eq!(leases.messages(), 2);
        // The same delivery again, or an earlier one, supersedes nothing.
        assert_eq!(leases.handle_delivered(delivered(7, 1)), 0);
        // Delivery 2 of sequence 7 arrives: its renewals were lost on their way.
        assert_eq!(leases.handle_delivered(delivered(7, 2)), 1);
        assert_eq!(leases.handle_delivered(delivered(7, 3)), 0, "once");
        let due = leases.handle_timeout(t0 + 5 * SECOND);
        assert_eq!(
            due,
            [LeaseDue::Renew(other)],
            "no renewal for the superseded one"
        );
        // Its result comes within its deadline here, and is not sent all the same.
        assert_eq!(
            leases.handle_end(first, t0 + SECOND),
            (LeaseEnd::Superseded { by: 3 }, Some("first"))
        );
        assert_eq!(
            leases.messages(),
            1,
            "its message is forgotten once it ended"
        );
        assert_eq!(
            leases.handle_end(other, t0 + SECOND),
            (LeaseEnd::OnTime, Some("other"))
        );
        assert_eq!(leases.messages(), 0);
    }

    #[test]
    fn a_lease_started_after_a_newer_delivery_is_superseded_from_the_start() {
        let t0 = Instant::now();
        let mut leases = Leases::new();
        let newer = leases.handle_start(delivery_terms(3, 2), "newer", t0);
        let older = leases.handle_start(delivery_terms(3, 1), "older", t0);
        assert_eq!(
            leases.handle_timeout(t0 + 5 * SECOND),
            [LeaseDue::Renew(newer)]
        );
        leases.handle_renewed(newer, t0 + 5 * SECOND);
        assert_eq!(
            leases.handle_end(older, t0 + 6 * SECOND),
            (LeaseEnd::Superseded { by: 2 }, Some("older"))
        );
        assert_eq!(
            leases.handle_end(newer, t0 + 6 * SECOND),
            (LeaseEnd::OnTime, Some("newer"))
        );
    }

    #[test]
    fn a_renewal_sent_as_the_lease_was_superseded_schedules_no_next_one() {
        let t0 = Instant::now();
        let mut leases = Leases::new();
        let key = leases.handle_start(delivery_terms(1, 1), (), t0);
        assert_eq!(
            leases.handle_timeout(t0 + 5 * SECOND),
            [LeaseDue::Renew(key)]
        );
        leases.handle_delivered(delivered(1, 2));
        leases.handle_renewed(key, t0 + 5 * SECOND);
        // Only its time limit is left.
        assert_eq!(leases.scheduled(), 1);
        assert_eq!(leases.poll_timeout(), Some(t0 + 300 * SECOND));
    }

    #[test]
    fn current_messages_count_each_message_once_and_none_whose_leases_are_all_superseded() {
        let t0 = Instant::now();
        let mut leases = Leases::new();
        let first = leases.handle_start(delivery_terms(1, 1), (), t0);
        leases.handle_start(delivery_terms(2, 1), (), t0);
        assert_eq!(leases.current_messages(0), 2);
        // Sequence 1 delivered again while its first run goes on: two runs, one message.
        let second = leases.handle_start(delivery_terms(1, 2), (), t0);
        let elsewhere = LeaseTerms {
            delivery: Some(LeasedDelivery {
                mount: 1,
                ..delivered(1, 4)
            }),
            ..terms(Some(10), true, 300)
        };
        leases.handle_start(elsewhere, (), t0);
        assert_eq!(leases.current_messages(0), 2);
        assert_eq!(
            leases.current_messages(1),
            1,
            "another mount's message is its own"
        );
        // The newer run ends (its +ACK went out); the older one, superseded, still runs: the
        // message is no longer the mount's to settle.
        leases.handle_end(second, t0 + SECOND);
        assert_eq!(leases.current_messages(0), 1);
        // Delivered again while nothing runs for it: superseded, not counted.
        assert_eq!(leases.handle_delivered(delivered(2, 2)), 1);
        assert_eq!(leases.current_messages(0), 0);
        leases.handle_end(first, t0 + SECOND);
        assert_eq!(leases.current_messages(0), 0);
    }

    #[test]
    fn deliveries_of_other_mounts_do_not_supersede() {
        let t0 = Instant::now();
        let mut leases = Leases::new();
        let key = leases.handle_start(delivery_terms(1, 1), (), t0);
        let elsewhere = LeasedDelivery {
            mount: 1,
            ..delivered(1, 2)
        };
        assert_eq!(leases.handle_delivered(elsewhere), 0);
        assert_eq!(leases.handle_end(key, t0 + SECOND).0, LeaseEnd::OnTime);
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
