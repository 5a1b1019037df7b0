//! The turns of a keyed mount's keys (rule 24): who runs and who waits, in arrival order
//! ([`Keys`]); a key's turn ([`Turn`]), which hands itself on when dropped; and where a
//! delivery of a mount with strict order keeps its turn through its runs in place
//! ([`HeldTurn`]). A leaf of the api floor: it imports nothing of the crate but the
//! deliberate bugs' switch (support, the floor below).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// The keys of a mount's deliveries that run or wait: for each, who waits, in arrival order.
/// Keys are 64-bit hashes (a random seed per mount): two keys that hash alike would only be
/// ordered together.
#[derive(Default)]
pub(crate) struct Keys {
    hasher: std::collections::hash_map::RandomState,
    held: Mutex<HashMap<u64, VecDeque<oneshot::Sender<Turn>>>>,
}

/// A key's turn: while it is held, no other delivery of the key runs. Dropping it hands the
/// turn to the key's next waiting delivery, or frees the key.
pub(crate) struct Turn {
    keys: Arc<Keys>,
    key: u64,
    /// `false` once handed on (a turn sent back by a waiter that was gone).
    armed: bool,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.armed {
            self.keys.pass(self.key);
        }
    }
}

impl Keys {
    /// The hasher a mount's keys are hashed with (a random seed per mount).
    pub(crate) fn hasher(&self) -> &std::collections::hash_map::RandomState {
        &self.hasher
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, VecDeque<oneshot::Sender<Turn>>>> {
        // No code that can panic runs under the lock.
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes `key`'s turn now if it is free, or else queues for it.
    pub(crate) fn enter(self: &Arc<Self>, key: u64) -> Result<Turn, oneshot::Receiver<Turn>> {
        if crate::support::deliberate::active(crate::support::deliberate::Bug::KeyTurnSkipped) {
            // A turn that is no one's: the key stays as it is, and the delivery runs at once.
            return Ok(Turn {
                keys: self.clone(),
                key,
                armed: false,
            });
        }
        let mut held = self.lock();
        match held.get_mut(&key) {
            None => {
                held.insert(key, VecDeque::new());
                Ok(Turn {
                    keys: self.clone(),
                    key,
                    armed: true,
                })
            }
            Some(waiting) => {
                let (tx, rx) = oneshot::channel();
                waiting.push_back(tx);
                Err(rx)
            }
        }
    }

    /// Hands `key`'s turn to its next waiting delivery still there, or frees the key.
    fn pass(self: &Arc<Self>, key: u64) {
        let mut held = self.lock();
        let Some(waiting) = held.get_mut(&key) else {
            return;
        };
        while let Some(next) = waiting.pop_front() {
            let turn = Turn {
                keys: self.clone(),
                key,
                armed: true,
            };
            match next.send(turn) {
                Ok(()) => return,
                // That delivery is gone (its run was dropped): the next one.
                Err(mut turn) => turn.armed = false,
            }
        }
        held.remove(&key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Where a delivery of a mount with strict order keeps its key's turn (rule 24): the keyed
/// handler puts the turn here when it comes, and the delivery keeps it until it ends, through
/// its runs in place. Dropping the last handle hands the turn on.
#[derive(Clone, Default)]
pub(crate) struct HeldTurn(Arc<Mutex<Option<Turn>>>);

impl HeldTurn {
    /// Whether it holds a key's turn.
    pub(crate) fn holds(&self) -> bool {
        self.lock().is_some()
    }

    pub(crate) fn put(&self, turn: Turn) {
        *self.lock() = Some(turn);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Turn>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Arc<Keys> {
        Arc::new(Keys::default())
    }

    #[test]
    fn a_key_is_handed_on_in_arrival_order_and_freed_at_the_end() {
        let k = keys();
        let first = k.enter(7).ok().expect("free");
        let mut second = k.enter(7).err().expect("waits");
        let mut third = k.enter(7).err().expect("waits");
        let other = k.enter(8).ok().expect("another key runs at once");
        assert!(second.try_recv().is_err());
        drop(first);
        let second = second.try_recv().expect("the second's turn");
        assert!(third.try_recv().is_err(), "not before the second ends");
        drop(second);
        let third = third.try_recv().expect("the third's turn");
        drop(third);
        drop(other);
        assert_eq!(k.len(), 0, "every key freed");
    }

    #[test]
    fn a_waiter_that_is_gone_is_skipped() {
        let k = keys();
        let first = k.enter(1).ok().expect("free");
        let gone = k.enter(1).err().expect("waits");
        let mut last = k.enter(1).err().expect("waits");
        drop(gone);
        drop(first);
        let last = last.try_recv().expect("the turn skips the one gone");
        drop(last);
        assert_eq!(k.len(), 0);
    }

    #[test]
    fn a_turn_sent_to_a_waiter_dropped_before_it_looked_is_handed_on() {
        let k = keys();
        let first = k.enter(1).ok().expect("free");
        let late = k.enter(1).err().expect("waits");
        let mut last = k.enter(1).err().expect("waits");
        drop(first); // the turn is in `late`'s channel
        drop(late); // dropped with it unread
        let last = last.try_recv().expect("handed on");
        drop(last);
        assert_eq!(k.len(), 0);
    }
}
