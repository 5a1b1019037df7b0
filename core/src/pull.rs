//! Pull accounting: how a JetStream mount asks for messages only for free handler slots.
//!
//! A mount has `concurrency` handler slots. A pull request
//! (`$JS.API.CONSUMER.MSG.NEXT`) asks for as many messages as there are free slots, and each
//! requested message holds its slot from the request on, so that no fetched message ever waits
//! for a handler (and past `ack_wait`) in the client. This type keeps the count of those
//! held slots ("outstanding": requested, not yet received) and decides, sans-io:
//!
//! - when to request ([`PullAccounting::poll_request`]): when every slot is free and nothing is
//!   outstanding, or when at least half the slots are free again, so that pulls overlap with
//!   handling; never once shutdown has begun;
//! - what a received message does ([`PullAccounting::handle_message`]): it takes one
//!   outstanding slot for its handler, or, if more came than were requested, needs a free one;
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
//! slot counted outstanding is given back exactly once, by a message that takes it, the end of
//! its request, or the loss of its request (checked by property tests).

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
    /// It takes one of the outstanding slots: the adapter moves one held slot to its handler.
    Reserved,
    /// More came than were requested: the adapter takes a free slot for it (waiting for one
    /// if need be) and never drops the message.
    Unrequested,
}

/// A pull request to send now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct PullRequest {
    /// How many messages to ask for; the adapter takes this many free slots and holds them
    /// as outstanding. At least 1.
    pub batch: usize,
    /// How long the request waits on the server ([`PULL_EXPIRES`]).
    pub expires: Duration,
}

/// The pull accounting of one JetStream mount. See the module docs.
#[derive(Debug, Clone)]
pub struct PullAccounting {
    threshold: usize,
    outstanding: usize,
    /// When the newest request is sure to have ended on the server; only meaningful while
    /// something is outstanding.
    requests_end: Option<Instant>,
    stopping: bool,
}

impl PullAccounting {
    /// The accounting of a mount with `concurrency` handler slots, nothing outstanding.
    pub fn new(concurrency: NonZeroUsize) -> Self {
        Self {
            threshold: (concurrency.get() / 2).max(1),
            outstanding: 0,
            requests_end: None,
            stopping: false,
        }
    }

    /// How many slots are held for messages requested and not yet received.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Whether shutdown has begun.
    pub fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// Whether the pull loop is done: shutdown has begun and nothing is outstanding.
    pub fn is_done(&self) -> bool {
        self.stopping && self.outstanding == 0
    }

    /// The request to send now, given `free` slots: `Some` when none is outstanding and a slot
    /// is free, or when at least half the slots are free; `None` once shutdown has begun.
    pub fn poll_request(&self, free: usize) -> Option<PullRequest> {
        let due = !self.stopping && free > 0 && (self.outstanding == 0 || free >= self.threshold);
        due.then_some(PullRequest {
            batch: free,
            expires: PULL_EXPIRES,
        })
    }

    /// Whether a request would be due with `free` slots while messages are being received: a
    /// reason to stop draining buffered messages and send one.
    pub fn request_due(&self, free: usize) -> bool {
        !self.stopping && free >= self.threshold
    }

    /// The request `request` was sent at `now`: its slots are outstanding until its messages
    /// come, it ends, or it is lost.
    pub fn handle_requested(&mut self, request: PullRequest, now: Instant) {
        self.outstanding += request.batch;
        self.requests_end = Some(now + request.expires + PULL_GRACE);
    }

    /// A message of a request came.
    pub fn handle_message(&mut self) -> Receipt {
        match self.outstanding.checked_sub(1) {
            Some(left) => {
                self.outstanding = left;
                Receipt::Reserved
            }
            None => Receipt::Unrequested,
        }
    }

    /// A request ended without being filled, its `Nats-Pending-Messages` value `pending` (the
    /// raw header value, if there was one). Returns how many outstanding slots to free: the
    /// messages it will not bring, at most what is outstanding; everything outstanding when
    /// the header is missing or unreadable (a later message then takes a free slot).
    pub fn handle_request_end(&mut self, pending: Option<&[u8]>) -> usize {
        let unfilled = pending
            .and_then(parse_pending_messages)
            .unwrap_or(self.outstanding)
            .min(self.outstanding);
        self.outstanding -= unfilled;
        unfilled
    }

    /// When the outstanding requests count as lost, if any are outstanding.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.outstanding {
            0 => None,
            _ => self.requests_end,
        }
    }

    /// Time passed: at or past [`poll_timeout`](Self::poll_timeout), every outstanding request
    /// is lost. Returns how many slots to free (0 before then).
    pub fn handle_timeout(&mut self, now: Instant) -> usize {
        match self.poll_timeout() {
            Some(end) if now >= end => std::mem::take(&mut self.outstanding),
            _ => 0,
        }
    }

    /// The connection was lost and made again: the server has forgotten every outstanding
    /// request (a restarted server keeps none, and one that stayed up drops a request whose
    /// reply subject lost its interest). Returns how many slots to free: all outstanding, at
    /// once rather than at [`poll_timeout`](Self::poll_timeout). A message of such a request
    /// that still comes is [`Receipt::Unrequested`], and takes a free slot.
    pub fn handle_connection_lost(&mut self) -> usize {
        std::mem::take(&mut self.outstanding)
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
        let first = a.poll_request(8).expect("all free");
        a.handle_requested(first, now);
        assert_eq!(a.handle_message(), Receipt::Reserved);
        assert_eq!(a.handle_connection_lost(), 7);
        assert_eq!(a.outstanding(), 0);
        assert_eq!(a.poll_timeout(), None, "nothing left to time out");
        // A message of the forgotten request that still comes takes a free slot.
        assert_eq!(a.handle_message(), Receipt::Unrequested);
        assert_eq!(a.poll_request(8).map(|r| r.batch), Some(8));
    }

    #[test]
    fn requests_every_free_slot_at_first_then_at_half() {
        let now = Instant::now();
        let mut a = accounting(8);
        assert_eq!(a.poll_request(0), None);
        let first = a.poll_request(8).expect("all free");
        assert_eq!(first.batch, 8);
        a.handle_requested(first, now);
        assert_eq!(a.outstanding(), 8);
        for _ in 0..8 {
            assert_eq!(a.handle_message(), Receipt::Reserved);
        }
        // Handlers hold all 8; 3 finish: under half, and nothing outstanding, so a request.
        assert_eq!(a.poll_request(3).map(|r| r.batch), Some(3));
        a.handle_requested(
            PullRequest {
                batch: 3,
                expires: PULL_EXPIRES,
            },
            now,
        );
        // With 3 outstanding, 3 more free is under half: wait; 4 is half: request.
        assert_eq!(a.poll_request(3), None);
        assert!(!a.request_due(3));
        assert_eq!(a.poll_request(4).map(|r| r.batch), Some(4));
        assert!(a.request_due(4));
    }

    #[test]
    fn concurrency_one_requests_one_at_a_time() {
        let mut a = accounting(1);
        let r = a.poll_request(1).expect("free");
        assert_eq!(r.batch, 1);
        a.handle_requested(r, Instant::now());
        assert_eq!(a.poll_request(0), None);
        assert_eq!(a.handle_message(), Receipt::Reserved);
        assert_eq!(a.handle_message(), Receipt::Unrequested);
    }

    #[test]
    fn the_end_of_a_request_frees_what_it_will_not_bring() {
        let mut a = accounting(10);
        a.handle_requested(a.poll_request(10).expect("free"), Instant::now());
        let _ = a.handle_message();
        assert_eq!(a.handle_request_end(Some(b" 4 ")), 4);
        assert_eq!(a.outstanding(), 5);
        // More than is outstanding: only what is.
        assert_eq!(a.handle_request_end(Some(b"99")), 5);
        assert_eq!(a.outstanding(), 0);
        a.handle_requested(
            PullRequest {
                batch: 3,
                expires: PULL_EXPIRES,
            },
            Instant::now(),
        );
        // No header, or one that does not read: everything outstanding.
        assert_eq!(a.handle_request_end(Some(b"-1")), 3);
        a.handle_requested(
            PullRequest {
                batch: 2,
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
        a.handle_requested(a.poll_request(4).expect("free"), now);
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
        let mut a = accounting(4);
        a.handle_requested(a.poll_request(4).expect("free"), Instant::now());
        a.handle_shutdown();
        assert!(a.is_stopping() && !a.is_done());
        assert_eq!(a.poll_request(4), None);
        assert!(!a.request_due(4));
        assert_eq!(a.handle_request_end(Some(b"4")), 4);
        assert!(a.is_done());
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
