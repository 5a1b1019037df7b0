//! The sans-io queue of delayed Core copies.
//!
//! A Core `retry_after(d)` arms a timer ([`Action::ScheduleCopy`](crate::Action::ScheduleCopy)):
//! the copy waits in the process until its deadline. The adapter keeps one [`DelayQueue`] and
//! one timer, driven quinn-style:
//!
//! 1. [`DelayQueue::handle_copy`] adds a copy with its deadline;
//! 2. [`DelayQueue::poll_timeout`] gives the earliest deadline, for the adapter's one timer;
//! 3. when the timer fires, [`DelayQueue::handle_timeout`] with the current instant yields
//!    every copy that is due, in deadline order, and the adapter publishes them.
//!
//! Insert and pop are O(log n) (a binary heap); copies with the same deadline come out in the
//! order they went in. A copy still queued when the process stops is lost, as SETTLEMENT.md
//! says; [`DelayQueue::drain`] lets the adapter count and report them.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Instant;

use slab::Slab;

use bytes::Bytes;

use crate::header::{Headers, RetryCount};
use crate::message::{Message, Publication};
use crate::subject::Subject;

/// A copy of a Core delivery waiting to be published, and the mount it belongs to.
///
/// Kept compact, since a process may hold millions (issue 13): the payload (shared with the
/// delivered message, never copied), the retry count, and the delivered reply subject and
/// headers packed into one allocation, which holds nothing when there are neither. The copy
/// subject is the mount's, given back at publish time; the copy's headers are built then, by
/// [`Message::copy`] (rules 4 and 9), so [`into_publication`](Self::into_publication) gives
/// exactly what [`Message::copy`] would have at queue time. 64 bytes, plus per delivered
/// header 8 bytes beyond the name and value, plus 5 and its length for a reply subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCopy {
    mount: u32,
    retry_count: RetryCount,
    payload: Bytes,
    /// A flag byte (1: a reply subject follows, as a length and bytes), then each header as
    /// its name's length, name, value's length, value; lengths are little-endian `u32`s.
    packed: Box<[u8]>,
}

impl PendingCopy {
    /// The copy of `message` after attempt `retry_count`, for the mount numbered `mount` (as
    /// the adapter numbers its mounts; used to report copies lost at shutdown per mount).
    ///
    /// # Panics
    /// When a reply subject, a header name or a header value is 4 GiB or longer (no NATS
    /// server accepts such a message).
    pub fn new(mount: usize, message: &Message, retry_count: RetryCount) -> Self {
        fn put(packed: &mut Vec<u8>, bytes: &[u8]) {
            let len = u32::try_from(bytes.len()).expect("shorter than 4 GiB");
            packed.extend_from_slice(&len.to_le_bytes());
            packed.extend_from_slice(bytes);
        }
        let packed = match (&message.reply, message.headers.is_empty()) {
            (None, true) => Box::default(),
            (reply, _) => {
                let mut packed = Vec::new();
                match reply {
                    Some(reply) => {
                        packed.push(1);
                        put(&mut packed, reply);
                    }
                    None => packed.push(0),
                }
                for (name, value) in message.headers.iter() {
                    put(&mut packed, name);
                    put(&mut packed, value);
                }
                packed.into_boxed_slice()
            }
        };
        Self {
            mount: u32::try_from(mount).unwrap_or(u32::MAX),
            retry_count,
            payload: message.payload.clone(),
            packed,
        }
    }

    /// The index of the mount the copy belongs to.
    pub fn mount(&self) -> usize {
        self.mount as usize
    }

    /// The copy to publish to `subject` (the mount's copy subject): what
    /// [`Message::copy`] gives for the delivered message.
    pub fn into_publication(self, subject: &Subject) -> Publication {
        let mut reply = None;
        let mut headers = Headers::new();
        if let Some((&flag, mut rest)) = self.packed.split_first() {
            // What `new` packed: well formed by construction.
            let take = |rest: &mut &[u8]| -> Bytes {
                let (len, tail) = rest.split_at(4);
                let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
                let (bytes, tail) = tail.split_at(len);
                *rest = tail;
                Bytes::copy_from_slice(bytes)
            };
            if flag == 1 {
                reply = Some(take(&mut rest));
            }
            while !rest.is_empty() {
                let name = take(&mut rest);
                let value = take(&mut rest);
                headers.append(name, value);
            }
        }
        let message = Message {
            reply,
            headers,
            payload: self.payload,
        };
        message.copy(subject, self.retry_count)
    }
}

/// A heap key: the deadline, an insertion number that orders ties, and where the item waits.
/// Kept small (32 bytes) so that sifting the heap moves keys, not copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    at: Instant,
    seq: u64,
    slot: usize,
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    /// Reversed, so that the max-heap pops the earliest `(at, seq)` first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Items waiting for their deadlines; by default [`PendingCopy`]s.
///
/// Generic so that adapters and tests may queue their own item type; the queue never looks
/// inside an item. Keys live in a binary heap, items in a slab: insert and pop are O(log n)
/// and move only 32-byte keys.
pub struct DelayQueue<T = PendingCopy> {
    heap: BinaryHeap<Key>,
    items: Slab<T>,
    next_seq: u64,
}

impl<T> Default for DelayQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> std::fmt::Debug for DelayQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayQueue")
            .field("len", &self.heap.len())
            .field("next", &self.poll_timeout())
            .finish()
    }
}

impl<T> DelayQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty queue with room for `capacity` items before it reallocates.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            heap: BinaryHeap::with_capacity(capacity),
            items: Slab::with_capacity(capacity),
            next_seq: 0,
        }
    }

    /// Queues `item` to be released at `at` or later. O(log n).
    pub fn handle_copy(&mut self, item: T, at: Instant) {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let slot = self.items.insert(item);
        self.heap.push(Key { at, seq, slot });
    }

    /// The earliest deadline, for the adapter's timer; `None` when the queue is empty. O(1).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.heap.peek().map(|k| k.at)
    }

    /// Yields every item whose deadline is at or before `now`, earliest first (ties in the
    /// order they were queued). O(log n) per item. Items not taken from the iterator stay
    /// queued.
    pub fn handle_timeout(&mut self, now: Instant) -> Due<'_, T> {
        Due { queue: self, now }
    }

    /// How many items are queued.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Empties the queue, yielding every item in no particular order: what is lost at
    /// shutdown.
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.heap.clear();
        self.items.drain()
    }
}

/// The iterator of [`DelayQueue::handle_timeout`]: due items, earliest first.
#[derive(Debug)]
pub struct Due<'q, T> {
    queue: &'q mut DelayQueue<T>,
    now: Instant,
}

impl<T> Iterator for Due<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.queue.heap.peek()?.at > self.now {
            return None;
        }
        let key = self.queue.heap.pop()?;
        // Every key names an occupied slot: both are added together and removed together.
        Some(self.queue.items.remove(key.slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn releases_due_items_in_order() {
        #[allow(clippy::disallowed_methods)]
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut q = DelayQueue::new();
        assert_eq!(q.poll_timeout(), None);
        q.handle_copy("c", ms(30));
        q.handle_copy("a", ms(10));
        q.handle_copy("b", ms(10));
        q.handle_copy("d", ms(40));
        assert_eq!(q.poll_timeout(), Some(ms(10)));
        assert_eq!(q.handle_timeout(ms(9)).count(), 0);
        assert_eq!(q.handle_timeout(ms(10)).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(q.poll_timeout(), Some(ms(30)));
        assert_eq!(q.handle_timeout(ms(35)).collect::<Vec<_>>(), ["c"]);
        assert_eq!(q.len(), 1);
        assert_eq!(q.drain().collect::<Vec<_>>(), ["d"]);
        assert!(q.is_empty());
    }
}
