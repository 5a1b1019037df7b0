//! Pull accounting: how a JetStream mount asks for messages for its handler slots, and how
//! far past them it may prefetch.
//!
//! A mount has `concurrency` handler slots. A pull request (`$JS.API.CONSUMER.MSG.NEXT`) asks
//! for the free slots' worth of messages, each of which holds its slot from the request on
//! ("held"), so that it never waits for a handler; plus, while the mount handles messages fast
//! enough, a **prefetch**: messages requested beyond the free slots, which wait in the client
//! for a slot. The prefetch is sized so that none of them can wait anywhere near its deadline:
//!
//! - it is at most [`PREFETCH_PER_SLOT`] times the concurrency, and at most what the mount
//!   handles in a [`PREFETCH_WAIT_SHARE`]th of the shortest time a delivery may go unacked
//!   (`ack_wait`, or the smallest `BackOff` step), at the rate measured over the last
//!   [`RATE_WINDOW`]: the last prefetched message is expected to start within that share;
//! - it is nothing until a rate has been measured, nothing without a deadline (the adapter
//!   gives none when leases are off, or while it pulls one message at a time), and it shrinks
//!   as soon as the rate drops (a window that runs long counts at its own, lower, rate);
//! - a message that does wait (the handlers slowed down after it was requested) is renewed by
//!   the adapter with `+WPI` at half its deadline, as a running handler is (rule 16), so that
//!   none expires while it waits.
//!
//! This type keeps the counts (outstanding: requested, not yet received; of those, held) and
//! decides, sans-io:
//!
//! - when to request ([`PullAccounting::poll_request`]): when nothing is outstanding, no
//!   prefetched message waits, and something can be asked for, or when at least half the
//!   window (slots plus prefetch) can be, so that pulls overlap with handling; never once
//!   shutdown has begun. (While prefetched messages wait, the next slots to free up have
//!   work: a request for the few that are free would be one of many small ones, a request
//!   and a write of the server's for every message or two; issue 39 counted 1,754 requests
//!   for 20,000 messages, a third of them for one);
//! - what a received message does ([`PullAccounting::handle_message`]): it takes one held slot
//!   ([`Receipt::Reserved`]), or it is prefetched ([`Receipt::Prefetched`]) or more than was
//!   requested ([`Receipt::Unrequested`]) and needs a free slot, waiting for one if need be;
//! - what the end of a request frees ([`PullAccounting::handle_request_end`]): the server ends
//!   a request it could not fill (status 408, request timeout, or 409) with a
//!   `Nats-Pending-Messages` header counting the messages it will not bring;
//! - when requests are lost ([`PullAccounting::poll_timeout`],
//!   [`PullAccounting::handle_timeout`]): a server that restarts forgets its waiting requests
//!   and never ends them, so every outstanding slot is given back a grace period after the last
//!   request expired.
//!
//! The adapter holds the slots themselves (a semaphore shared with running handlers) and
//! moves exactly as many as each call returns. Slots are never leaked nor freed twice: every
//! held slot is given back exactly once, by a message that takes it, the end of its request,
//! or the loss of its request (checked by property tests).

use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use crate::header::parse_count;

/// The header with which the server says how many messages an ended pull request did not
/// bring: `Nats-Pending-Messages` (nats-server `server/consumer.go`, `JSPullRequestPendingMsgs`).
pub const PENDING_MESSAGES_HEADER: &str = "Nats-Pending-Messages";

/// How long one pull request waits on the server for messages (its `expires`).
pub const PULL_EXPIRES: Duration = Duration::from_secs(1);

/// How long after its expiry a pull request may still be reported ended by the server; past
/// that it counts as lost.
pub const PULL_GRACE: Duration = Duration::from_secs(2);

/// The most messages a mount prefetches beyond its free slots, per handler slot: 3, so the
/// window is at most 4 times the concurrency (256 messages at the default 64 slots).
pub const PREFETCH_PER_SLOT: usize = 3;

/// The prefetch is at most what the mount handles in this fraction (1/4) of a delivery's
/// deadline.
pub const PREFETCH_WAIT_SHARE: u32 = 4;

/// How long the handling rate is measured over: 100 ms at most; a window closes sooner, after
/// [`RATE_MIN_WINDOW`], once it holds [`RATE_SAMPLE`] messages, so that a mount that starts on
/// a backlog prefetches within its first milliseconds.
pub const RATE_WINDOW: Duration = Duration::from_millis(100);

/// The shortest window the handling rate is measured over: 10 ms.
pub const RATE_MIN_WINDOW: Duration = Duration::from_millis(10);

/// How many messages close a rate window before [`RATE_WINDOW`]: 128.
pub const RATE_SAMPLE: u64 = 128;

/// Parses a `Nats-Pending-Messages` value: ASCII digits, surrounding whitespace ignored,
/// saturating (a count above what is outstanding frees what is outstanding). `None` for
/// anything else.
pub fn parse_pending_messages(value: &[u8]) -> Option<usize> {
    parse_count(value).map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

/// What a received message does to the slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Receipt {
    /// It takes one of the held slots: the adapter moves one held slot to its handler.
    Reserved,
    /// It was prefetched: the adapter takes a free slot for it, or keeps it, renewed, until
    /// one frees up.
    Prefetched,
    /// More came than were requested: as [`Receipt::Prefetched`]; never dropped.
    Unrequested,
}

/// A pull request to send now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct PullRequest {
    /// How many messages to ask for. At least 1.
    pub batch: usize,
    /// How many of them hold a slot: the adapter takes this many free slots and holds them
    /// while they are outstanding. At most `batch`; the rest are prefetched.
    pub held: usize,
    /// How long the request waits on the server ([`PULL_EXPIRES`]).
    pub expires: Duration,
}

/// The handling rate, measured over windows of [`RATE_WINDOW`] (or shorter, see
/// [`RATE_SAMPLE`]): deliveries that finished, counted as those started less the growth of
/// those running, so that a burst of starts into free slots (handlers that have not finished
/// yet) does not count as a rate.
#[derive(Debug, Clone, Default)]
struct Rate {
    /// When the current window began; `None` before the first message.
    since: Option<Instant>,
    /// Messages started in the current window.
    count: u64,
    /// Handlers running when the window began.
    busy_at_start: usize,
    /// Handlers running at the latest start.
    busy: usize,
    /// The last full window's rate, in messages per second.
    per_second: f64,
}

impl Rate {
    /// A delivery started at `now`, with `busy` handlers running, this one included.
    fn note(&mut self, now: Instant, busy: usize) {
        let since = match self.since {
            Some(since) => since,
            None => {
                self.busy_at_start = busy.saturating_sub(1);
                self.since = Some(now);
                now
            }
        };
        let elapsed = now.saturating_duration_since(since);
        let full =
            elapsed >= RATE_WINDOW || (self.count >= RATE_SAMPLE && elapsed >= RATE_MIN_WINDOW);
        if full {
            // The window's messages are those started in [since, now); of those running now,
            // this one belongs to the next window.
            self.busy = busy.saturating_sub(1);
            self.per_second = self.finished() as f64 / elapsed.as_secs_f64();
            self.since = Some(now);
            self.count = 0;
            self.busy_at_start = busy.saturating_sub(1);
        }
        self.count += 1;
        self.busy = busy;
    }

    /// How many of the current window's deliveries finished, as far as the counts tell.
    fn finished(&self) -> u64 {
        let grew = self.busy.saturating_sub(self.busy_at_start) as u64;
        self.count.saturating_sub(grew)
    }

    /// The rate at `now`: the last full window's, or the current window's when it has run
    /// past [`RATE_WINDOW`] at a lower one.
    fn at(&self, now: Instant) -> f64 {
        match self.since {
            None => 0.0,
            Some(since) => {
                let elapsed = now.saturating_duration_since(since);
                if elapsed > RATE_WINDOW {
                    self.per_second
                        .min(self.finished() as f64 / elapsed.as_secs_f64())
                } else {
                    self.per_second
                }
            }
        }
    }
}

/// The pull accounting of one JetStream mount. See the module docs.
#[derive(Debug, Clone)]
pub struct PullAccounting {
    concurrency: usize,
    /// Requested and not yet received, held and prefetched.
    outstanding: usize,
    /// Of `outstanding`, those holding a slot.
    held: usize,
    /// When the newest request is sure to have ended on the server; only meaningful while
    /// something is outstanding.
    requests_end: Option<Instant>,
    stopping: bool,
    rate: Rate,
    /// The shortest time a delivery may go unacked; `None`: no prefetch.
    deadline: Option<Duration>,
    /// The consumer's `MaxRequestBatch`, if it has one.
    max_batch: Option<usize>,
}

impl PullAccounting {
    /// The accounting of a mount with `concurrency` handler slots, nothing outstanding, no
    /// prefetch until [`set_prefetch_deadline`](Self::set_prefetch_deadline) gives a deadline
    /// and a rate has been measured.
    pub fn new(concurrency: NonZeroUsize) -> Self {
        Self {
            concurrency: concurrency.get(),
            outstanding: 0,
            held: 0,
            requests_end: None,
            stopping: false,
            rate: Rate::default(),
            deadline: None,
            max_batch: None,
        }
    }

    /// How many messages are requested and not yet received.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// How many slots are held for messages requested and not yet received.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Whether shutdown has begun.
    pub fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// Whether the pull loop is done: shutdown has begun and nothing is outstanding.
    pub fn is_done(&self) -> bool {
        self.stopping && self.outstanding == 0
    }

    /// The shortest time a delivery of the mount may go unacked (the consumer's `ack_wait`, or
    /// its smallest `BackOff` step), which bounds the prefetch; `None` for no prefetch (leases
    /// off, so nothing would renew a message that waits; or one message at a time).
    pub fn set_prefetch_deadline(&mut self, deadline: Option<Duration>) {
        self.deadline = deadline;
    }

    /// A delivery started at `now`, with `busy` handler slots taken by running deliveries,
    /// this one included (slots held for requested messages do not count): it counts towards
    /// the handling rate once it has finished, which the growth of `busy` tells.
    pub fn handle_started(&mut self, now: Instant, busy: usize) {
        self.rate.note(now, busy);
    }

    /// The consumer's `MaxRequestBatch`, which no request may exceed (the server refuses one
    /// that does, with a 409); `None` when it has none.
    pub fn set_max_batch(&mut self, max: Option<usize>) {
        self.max_batch = max.filter(|m| *m > 0);
    }

    /// How many messages may be prefetched beyond the free slots at `now`: the least of
    /// [`PREFETCH_PER_SLOT`] × concurrency and the rate × deadline / [`PREFETCH_WAIT_SHARE`];
    /// 0 without a deadline or a measured rate.
    pub fn prefetch(&self, now: Instant) -> usize {
        let Some(deadline) = self.deadline else {
            return 0;
        };
        let share = deadline / PREFETCH_WAIT_SHARE;
        let by_rate = (self.rate.at(now) * share.as_secs_f64()).floor();
        // `as` saturates a float: a huge rate gives usize::MAX, bounded next.
        (by_rate as usize).min(self.concurrency.saturating_mul(PREFETCH_PER_SLOT))
    }

    /// The request to send now, given `free` slots and `queued` prefetched messages that wait
    /// for one: `Some` when nothing is outstanding, nothing is queued, and something can be
    /// asked for, or when at least half the window can be (or the consumer's
    /// `MaxRequestBatch`, if smaller); never more than that batch; `None` once shutdown has
    /// begun.
    pub fn poll_request(&self, free: usize, queued: usize, now: Instant) -> Option<PullRequest> {
        let prefetch = self.prefetch(now);
        let extra = self.outstanding - self.held;
        let room = prefetch.saturating_sub(extra + queued);
        let most = self.max_batch.unwrap_or(usize::MAX);
        let batch = (free + room).min(most);
        let threshold = ((self.concurrency + prefetch) / 2).min(most).max(1);
        let idle = self.outstanding == 0 && queued == 0;
        let due = !self.stopping && batch > 0 && (idle || batch >= threshold);
        due.then_some(PullRequest {
            batch,
            held: free.min(batch),
            expires: PULL_EXPIRES,
        })
    }

    /// Whether a request would be due while messages are being received: a reason to stop
    /// draining buffered messages and send one.
    pub fn request_due(&self, free: usize, queued: usize, now: Instant) -> bool {
        self.outstanding > 0 && self.poll_request(free, queued, now).is_some()
    }

    /// The request `request` was sent at `now`: its messages are outstanding (and its held
    /// slots held) until they come, it ends, or it is lost.
    pub fn handle_requested(&mut self, request: PullRequest, now: Instant) {
        self.outstanding += request.batch;
        self.held += request.held.min(request.batch);
        self.requests_end = Some(now + request.expires + PULL_GRACE);
    }

    /// A message of a request came.
    pub fn handle_message(&mut self) -> Receipt {
        if self.outstanding == 0 {
            return Receipt::Unrequested;
        }
        self.outstanding -= 1;
        if self.held > 0 {
            self.held -= 1;
            Receipt::Reserved
        } else {
            Receipt::Prefetched
        }
    }

    /// A request ended without being filled, its `Nats-Pending-Messages` value `pending` (the
    /// raw header value, if there was one). Returns how many held slots to free: the messages
    /// it will not bring, prefetched ones first, at most what is outstanding; everything
    /// outstanding when the header is missing or unreadable (a later message then takes a
    /// free slot).
    pub fn handle_request_end(&mut self, pending: Option<&[u8]>) -> usize {
        let unfilled = pending
            .and_then(parse_pending_messages)
            .unwrap_or(self.outstanding)
            .min(self.outstanding);
        let extra = self.outstanding - self.held;
        self.outstanding -= unfilled;
        let freed = unfilled.saturating_sub(extra);
        self.held -= freed;
        freed
    }

    /// When the outstanding requests count as lost, if any are outstanding.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.outstanding {
            0 => None,
            _ => self.requests_end,
        }
    }

    /// Time passed: at or past [`poll_timeout`](Self::poll_timeout), every outstanding request
    /// is lost. Returns how many held slots to free (0 before then).
    pub fn handle_timeout(&mut self, now: Instant) -> usize {
        match self.poll_timeout() {
            Some(end) if now >= end => self.forget_outstanding(),
            _ => 0,
        }
    }

    /// The connection was lost and made again: the server has forgotten every outstanding
    /// request (a restarted server keeps none, and one that stayed up drops a request whose
    /// reply subject lost its interest). Returns how many held slots to free: all, at once
    /// rather than at [`poll_timeout`](Self::poll_timeout). A message of such a request that
    /// still comes is [`Receipt::Unrequested`], and takes a free slot.
    pub fn handle_connection_lost(&mut self) -> usize {
        self.forget_outstanding()
    }

    fn forget_outstanding(&mut self) -> usize {
        self.outstanding = 0;
        std::mem::take(&mut self.held)
    }

    /// Shutdown began: no request goes out any more; outstanding ones are received to their
    /// end (or loss).
    pub fn handle_shutdown(&mut self) {
        self.stopping = true;
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // the tests read the clock for a base instant
mod tests {
    use super::*;

    fn accounting(concurrency: usize) -> PullAccounting {
        PullAccounting::new(NonZeroUsize::new(concurrency).expect("non-zero"))
    }

    #[test]
    fn a_lost_connection_frees_every_outstanding_slot_at_once() {
        let now = Instant::now();
        let mut a = accounting(8);
        let first = a.poll_request(8, 0, now).expect("all free");
        a.handle_requested(first, now);
        assert_eq!(a.handle_message(), Receipt::Reserved);
        assert_eq!(a.handle_connection_lost(), 7);
        assert_eq!(a.outstanding(), 0);
        assert_eq!(a.poll_timeout(), None, "nothing left to time out");
        // A message of the forgotten request that still comes takes a free slot.
        assert_eq!(a.handle_message(), Receipt::Unrequested);
        assert_eq!(a.poll_request(8, 0, now).map(|r| r.batch), Some(8));
    }

    #[test]
    fn requests_every_free_slot_at_first_then_at_half() {
        let now = Instant::now();
        let mut a = accounting(8);
        assert_eq!(a.poll_request(0, 0, now), None);
        let first = a.poll_request(8, 0, now).expect("all free");
        assert_eq!(first.batch, 8);
        a.handle_requested(first, now);
        assert_eq!(a.outstanding(), 8);
        for _ in 0..8 {
            assert_eq!(a.handle_message(), Receipt::Reserved);
        }
        // Handlers hold all 8; 3 finish: under half, and nothing outstanding, so a request.
        assert_eq!(a.poll_request(3, 0, now).map(|r| r.batch), Some(3));
        a.handle_requested(
            PullRequest {
                batch: 3,
                held: 3,
                expires: PULL_EXPIRES,
            },
            now,
        );
        // With 3 outstanding, 3 more free is under half: wait; 4 is half: request.
        assert_eq!(a.poll_request(3, 0, now), None);
        assert!(!a.request_due(3, 0, now));
        assert_eq!(a.poll_request(4, 0, now).map(|r| r.batch), Some(4));
        assert!(a.request_due(4, 0, now));
    }

    #[test]
    fn concurrency_one_requests_one_at_a_time() {
        let now = Instant::now();
        let mut a = accounting(1);
        let r = a.poll_request(1, 0, now).expect("free");
        assert_eq!(r.batch, 1);
        a.handle_requested(r, Instant::now());
        assert_eq!(a.poll_request(0, 0, now), None);
        assert_eq!(a.handle_message(), Receipt::Reserved);
        assert_eq!(a.handle_message(), Receipt::Unrequested);
    }

    #[test]
    fn the_end_of_a_request_frees_what_it_will_not_bring() {
        let now = Instant::now();
        let mut a = accounting(10);
        a.handle_requested(a.poll_request(10, 0, now).expect("free"), Instant::now());
        let _ = a.handle_message();
        assert_eq!(a.handle_request_end(Some(b" 4 ")), 4);
        assert_eq!(a.outstanding(), 5);
        // More than is outstanding: only what is.
        assert_eq!(a.handle_request_end(Some(b"99")), 5);
        assert_eq!(a.outstanding(), 0);
        a.handle_requested(
            PullRequest {
                batch: 3,
                held: 3,
                expires: PULL_EXPIRES,
            },
            Instant::now(),
        );
        // No header, or one that does not read: everything outstanding.
        assert_eq!(a.handle_request_end(Some(b"-1")), 3);
        a.handle_requested(
            PullRequest {
                batch: 2,
                held: 2,
                expires: PULL_EXPIRES,
            },
            Instant::now(),
        );
        assert_eq!(a.handle_request_end(None), 2);
        assert_eq!(a.handle_request_end(None), 0);
    }

    #[test]
    fn requests_never_ended_are_lost_after_the_grace_period() {
        let now = Instant::now();
        let mut a = accounting(4);
        assert_eq!(a.poll_timeout(), None);
        a.handle_requested(a.poll_request(4, 0, now).expect("free"), now);
        let end = now + PULL_EXPIRES + PULL_GRACE;
        assert_eq!(a.poll_timeout(), Some(end));
        assert_eq!(a.handle_timeout(end - Duration::from_millis(1)), 0);
        assert_eq!(a.handle_timeout(end), 4);
        assert_eq!(a.outstanding(), 0);
        assert_eq!(a.poll_timeout(), None);
        assert_eq!(a.handle_timeout(end + PULL_GRACE), 0);
    }

    #[test]
    fn shutdown_stops_requests_and_ends_when_nothing_is_outstanding() {
        let now = Instant::now();
        let mut a = accounting(4);
        a.handle_requested(a.poll_request(4, 0, now).expect("free"), Instant::now());
        a.handle_shutdown();
        assert!(a.is_stopping() && !a.is_done());
        assert_eq!(a.poll_request(4, 0, now), None);
        assert!(!a.request_due(4, 0, now));
        assert_eq!(a.handle_request_end(Some(b"4")), 4);
        assert!(a.is_done());
    }

    /// An accounting whose mount started `per_window` messages, evenly, over one full
    /// [`RATE_WINDOW`], with a deadline of `deadline`; returns it and the instant the window
    /// closed.
    fn measured(
        concurrency: usize,
        per_window: u32,
        deadline: Duration,
    ) -> (PullAccounting, Instant) {
        let start = Instant::now();
        let mut a = accounting(concurrency);
        a.set_prefetch_deadline(Some(deadline));
        for k in 0..per_window {
            a.handle_started(start + RATE_WINDOW * k / per_window, 1);
        }
        let end = start + RATE_WINDOW;
        a.handle_started(end, 1);
        (a, end)
    }

    #[test]
    fn no_prefetch_without_a_deadline_or_a_rate() {
        let now = Instant::now();
        let mut a = accounting(64);
        assert_eq!(a.prefetch(now), 0, "no rate yet");
        a.set_prefetch_deadline(Some(Duration::from_secs(30)));
        assert_eq!(a.prefetch(now), 0, "a deadline, still no rate");
        let (mut a, end) = measured(64, 1_000, Duration::from_secs(30));
        assert_eq!(a.prefetch(end), 64 * PREFETCH_PER_SLOT);
        a.set_prefetch_deadline(None);
        assert_eq!(a.prefetch(end), 0, "leases off, or one at a time");
    }

    #[test]
    fn the_prefetch_is_what_a_quarter_of_the_deadline_handles() {
        // 10 in 100 ms, 100 a second; 3 s deadline: 75 in 750 ms; the cap is 3 x 64.
        let (a, end) = measured(64, 10, Duration::from_secs(3));
        assert_eq!(a.prefetch(end), 75);
        // The guard: one slot, 1 s handlers, ack_wait 3 s: nothing prefetched.
        let start = Instant::now();
        let mut a = accounting(1);
        a.set_prefetch_deadline(Some(Duration::from_secs(3)));
        for s in 0..4 {
            a.handle_started(start + Duration::from_secs(s), 1);
            assert_eq!(a.prefetch(start + Duration::from_secs(s)), 0);
        }
    }

    #[test]
    fn a_busy_window_closes_early() {
        let start = Instant::now();
        let mut a = accounting(64);
        a.set_prefetch_deadline(Some(Duration::from_secs(30)));
        // 128 messages in 1 ms: not yet a rate (under the shortest window).
        for k in 0..128 {
            a.handle_started(start + Duration::from_micros(k * 8), 1);
        }
        assert_eq!(a.prefetch(start + Duration::from_millis(1)), 0);
        // At 10 ms the window closes: 128 in 10 ms, 12,800 a second.
        a.handle_started(start + RATE_MIN_WINDOW, 1);
        assert_eq!(a.prefetch(start + RATE_MIN_WINDOW), 64 * PREFETCH_PER_SLOT);
    }

    #[test]
    fn the_prefetch_shrinks_when_the_rate_drops() {
        // 100 in 100 ms (one window: fewer than a sample), 1,000 a second: 7,500 in 7.5 s,
        // capped at 3 x 64.
        let (a, end) = measured(64, 100, Duration::from_secs(30));
        assert_eq!(
            a.prefetch(end + RATE_WINDOW),
            64 * PREFETCH_PER_SLOT,
            "within the window"
        );
        // Nothing more started for 100 windows: the window that runs long counts at its own
        // rate (1 in 10 s: 0.1 a second, 0.75 in 7.5 s).
        assert_eq!(a.prefetch(end + RATE_WINDOW * 100), 0);
    }

    #[test]
    fn a_request_asks_for_free_slots_and_prefetch_and_holds_only_the_slots() {
        let (mut a, now) = measured(8, 1_000, Duration::from_secs(30));
        let r = a.poll_request(8, 0, now).expect("all free");
        assert_eq!((r.batch, r.held), (32, 8));
        a.handle_requested(r, now);
        assert_eq!((a.outstanding(), a.held()), (32, 8));
        for _ in 0..8 {
            assert_eq!(a.handle_message(), Receipt::Reserved);
        }
        assert_eq!(a.handle_message(), Receipt::Prefetched);
        // 23 outstanding, none held; 3 queued, all 8 slots free again: room for 8 + (24 - 23 -
        // 3 = 0); half the window is 16: not due.
        assert_eq!(a.poll_request(8, 3, now), None);
        // The request ends with 20 it will not bring: prefetched ones first, no slot to free.
        assert_eq!(a.handle_request_end(Some(b"20")), 0);
        assert_eq!((a.outstanding(), a.held()), (3, 0));
        // Queued messages count against the prefetch: 8 free + (24 - 3 - 10) = 19.
        assert_eq!(
            a.poll_request(8, 10, now).map(|r| (r.batch, r.held)),
            Some((19, 8))
        );
    }

    #[test]
    fn no_small_request_while_prefetched_messages_wait() {
        // 8 slots, a window of 8 + 24: every slot busy, nothing outstanding, 22 prefetched
        // messages queued. Room for 2: half the window (16) is not reached, and the next
        // slots to free up have work; before issue 39 a request for 2 went out (and one for 1
        // after each message, 1,754 requests for 20,000 messages in its js-io bench).
        let (a, now) = measured(8, 1_000, Duration::from_secs(30));
        assert_eq!(a.outstanding(), 0);
        assert_eq!(a.poll_request(0, 22, now), None);
        assert_eq!(a.poll_request(1, 22, now), None);
        // Half the window can be asked for: due, outstanding or not.
        assert_eq!(a.poll_request(8, 16, now).map(|r| r.batch), Some(16));
        // Nothing queued and nothing outstanding: whatever is free is asked for at once, so
        // that an idle slot never waits for others to free up.
        assert_eq!(
            a.poll_request(1, 0, now).map(|r| (r.batch, r.held)),
            Some((25, 1))
        );
    }

    #[test]
    fn a_lost_request_frees_only_held_slots() {
        let (mut a, now) = measured(4, 1_000, Duration::from_secs(30));
        let r = a.poll_request(2, 0, now).expect("free");
        assert_eq!((r.batch, r.held), (14, 2));
        a.handle_requested(r, now);
        assert_eq!(a.handle_connection_lost(), 2);
        assert_eq!((a.outstanding(), a.held()), (0, 0));
    }

    #[test]
    fn a_burst_of_starts_into_free_slots_is_no_rate() {
        // 256 slow handlers start within 20 ms: none has finished, so no rate, no prefetch.
        let start = Instant::now();
        let mut a = accounting(256);
        a.set_prefetch_deadline(Some(Duration::from_secs(30)));
        for k in 0..256u32 {
            a.handle_started(
                start + Duration::from_micros(u64::from(k) * 80),
                k as usize + 1,
            );
        }
        assert_eq!(a.prefetch(start + Duration::from_millis(21)), 0);
    }

    #[test]
    fn no_request_exceeds_max_request_batch() {
        let (mut a, now) = measured(64, 1_000, Duration::from_secs(30));
        a.set_max_batch(Some(100));
        let r = a.poll_request(64, 0, now).expect("free");
        assert_eq!((r.batch, r.held), (100, 64));
        a.set_max_batch(Some(10));
        assert_eq!(
            a.poll_request(64, 0, now).map(|r| (r.batch, r.held)),
            Some((10, 10))
        );
        // Half the window is 128, above the limit: a full limit's worth is due.
        a.handle_requested(a.poll_request(64, 0, now).expect("free"), now);
        assert_eq!(a.poll_request(54, 0, now).map(|r| r.batch), Some(10));
        a.set_max_batch(Some(0));
        assert_eq!(a.poll_request(54, 0, now).map(|r| r.batch), Some(54 + 192));
    }

    #[test]
    fn pending_messages_values() {
        assert_eq!(parse_pending_messages(b"12"), Some(12));
        assert_eq!(parse_pending_messages(b" 7\t"), Some(7));
        assert_eq!(
            parse_pending_messages(b"99999999999999999999999999"),
            Some(usize::MAX)
        );
        for bad in [&b""[..], b" ", b"+1", b"1 2", b"x"] {
            assert_eq!(parse_pending_messages(bad), None, "{bad:?}");
        }
    }
}
