//! Order per key (rule 24): a mount that declares [`Mount::key`](crate::Mount::key) runs the
//! deliveries of one key one at a time, started in the order they arrived; different keys run
//! concurrently, up to the mount's concurrency.
//!
//! # How it works
//!
//! Each delivery is an ordinary delivery to the runtime: read, checked on arrival (rule 3),
//! given a handler slot and, on JetStream, a lease renewed while it runs *and while it waits
//! for its key* (rule 16). Its handler is called when it arrives (so a payload that does not
//! decode takes the at-limit path at once, rule 17), but its run starts only when its key's
//! turn comes: the key's earlier deliveries have ended (settled, or given up). Turns are handed
//! in arrival order, in the mount loop that received them.
//!
//! The handler time limit bounds each run from its turn, not from its arrival: a delivery
//! waiting behind a slow one of its key is not cancelled for waiting.
//!
//! With strict order ([`Mount::strict_order`](crate::Mount::strict_order)) the delivery keeps
//! its turn (in a [`HeldTurn`] its flow holds) until it is settled: the flow asks the core
//! whether a retry runs again in place (`ruststream_settlement::retry_in_place`), waits its delay
//! with its lease renewed, and calls this handler again, which then runs at once.
//!
//! # Memory
//!
//! A delivery that waits for its key holds one of the mount's handler slots, so the mount
//! holds at most `concurrency` deliveries (running or waiting) and one small table entry per
//! key among them. When every slot is taken by deliveries of busy keys, a JetStream mount
//! stops fetching (its pull window stops growing: the stream keeps the rest) and a Core mount
//! holds what arrives in its subscription buffer, which drops and counts what does not fit
//! (rule 21).

use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use ruststream_settlement::Outcome;

use super::codec::DecodeError;
use super::context::ContextSource;
use super::delivery::Delivery;
use super::handled::Handled;
use super::handler::{HandledFuture, Handler};
use super::timer::Timer;
use super::turns::{HeldTurn, Keys};

/// What a mount's deliveries are ordered by (rule 24; see [`Mount::key`](crate::Mount::key)).
///
/// A delivery that has no key (a subject with fewer tokens, no such header, a function that
/// gives `None`) is not ordered: it runs as on a mount without a key, concurrently with
/// everything else.
#[derive(Clone)]
pub enum Key {
    /// The subject's token at this index, from 0: for `payments.<account>.created`,
    /// `Key::SubjectToken(1)` orders by account.
    SubjectToken(usize),
    /// The value of this header (its first value; the name matches in any letter case, as
    /// NATS headers are read).
    Header(String),
    /// What this function gives for the delivery. It runs on the mount's loop for every
    /// delivery, so it should be quick.
    Function(KeyFn),
}

/// The function of a [`Key::Function`].
pub type KeyFn = Arc<dyn Fn(&Delivery) -> Option<String> + Send + Sync>;

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SubjectToken(i) => f.debug_tuple("SubjectToken").field(i).finish(),
            Self::Header(name) => f.debug_tuple("Header").field(name).finish(),
            Self::Function(_) => f.write_str("Function(..)"),
        }
    }
}

impl Key {
    /// [`Key::SubjectToken`]: the subject's token at `index`, from 0.
    pub fn subject_token(index: usize) -> Self {
        Self::SubjectToken(index)
    }

    /// [`Key::Header`]: the value of the header `name`.
    pub fn header(name: &str) -> Self {
        Self::Header(name.to_owned())
    }

    /// [`Key::Function`]: what `f` gives for the delivery.
    pub fn function(f: impl Fn(&Delivery) -> Option<String> + Send + Sync + 'static) -> Self {
        Self::Function(Arc::new(f))
    }

    /// The key of `delivery`, hashed with `hasher`; `None` when it has none.
    fn of(&self, delivery: &Delivery, hasher: &impl BuildHasher) -> Option<u64> {
        let hash = |bytes: &[u8]| hasher.hash_one(bytes);
        match self {
            Self::SubjectToken(i) => delivery
                .subject
                .as_str()
                .split('.')
                .nth(*i)
                .map(|t| hash(t.as_bytes())),
            Self::Header(name) => delivery.headers.as_deref().and_then(|h| {
                h.iter()
                    .find(|(n, _)| AsRef::<str>::as_ref(n).eq_ignore_ascii_case(name))
                    .and_then(|(_, values)| values.first().map(|v| hash(v.as_str().as_bytes())))
            }),
            Self::Function(f) => f(delivery).map(|k| hash(k.as_bytes())),
        }
    }
}

/// What a keyed handler needs of the mount and the runtime.
#[derive(Clone, Copy)]
pub(crate) struct KeyTerms {
    /// The mount's name, for logs.
    pub(crate) mount: &'static str,
    /// The handler time limit applied to each run from its turn; `None` where the handler
    /// bounds its runs itself (a batch handler bounds each batch).
    pub(crate) limit: Option<Duration>,
    /// The runtime's clock and sleep.
    pub(crate) timer: Timer,
}

/// A handler whose runs wait for their key's turn (see the module docs). Built by
/// [`App::mount`](crate::App::mount) and its kin for a mount that declares a key.
pub(crate) struct Keyed {
    inner: Arc<dyn Handler>,
    key: Key,
    keys: Arc<Keys>,
    terms: KeyTerms,
}

impl Keyed {
    pub(crate) fn new(inner: Arc<dyn Handler>, key: Key, terms: KeyTerms) -> Self {
        Self {
            inner,
            key,
            keys: Arc::new(Keys::default()),
            terms,
        }
    }
}

impl Handler for Keyed {
    fn call(
        &self,
        delivery: Delivery,
        context: ContextSource<'_>,
    ) -> Result<HandledFuture, DecodeError> {
        let terms = self.terms;
        let held = context.held().cloned();
        if held.as_ref().is_some_and(HeldTurn::holds) {
            // A run in place (rule 24's strict order): the delivery holds its key's turn.
            let run = self.inner.call(delivery, context)?;
            return Ok(Box::pin(bounded(run, terms)));
        }
        let key = self.key.of(&delivery, self.keys.hasher());
        let standing = context.standing();
        // Called now, in arrival order: a payload that does not decode is refused here. The
        // run itself is a future, and starts only when polled, after the turn.
        let run = self.inner.call(delivery, context)?;
        let Some(key) = key else {
            // Not ordered, but bounded as every run is (rule 16): the lease loop leaves a keyed
            // mount's runs to this handler.
            return Ok(Box::pin(bounded(run, terms)));
        };
        let turn = self.keys.enter(key);
        Ok(Box::pin(async move {
            let turn = match turn {
                Ok(turn) => turn,
                Err(waiting) => {
                    let Ok(turn) = waiting.await else {
                        // The table is dropped only with the handler, which outlives its runs.
                        return Handled::Outcome(Outcome::None);
                    };
                    // It waited: a JetStream delivery superseded meanwhile, or past its
                    // deadline, does not run (its result would be discarded, and its run would
                    // overlap the newer delivery's, rule 16); its turn passes on at once.
                    if let Some(standing) = &standing
                        && !standing.holds(terms.timer.now())
                    {
                        tracing::warn!(
                            mount = terms.mount,
                            "a delivery that waited for its key's turn was delivered again meanwhile, or passed its deadline (its renewals could not be sent): not run here"
                        );
                        return Handled::Outcome(Outcome::None);
                    }
                    turn
                }
            };
            // With strict order the delivery keeps the turn until it ends; otherwise the turn
            // ends with this run.
            let _turn = match &held {
                Some(held) => {
                    held.put(turn);
                    None
                }
                None => Some(turn),
            };
            bounded(run, terms).await
        }))
    }

    fn replies(&self) -> bool {
        self.inner.replies()
    }
}

/// `run`, cancelled at the time limit counted from now (logged, and no outcome, as rule 16
/// says of any handler).
async fn bounded(run: HandledFuture, terms: KeyTerms) -> Handled {
    let Some(limit) = terms.limit else {
        return run.await;
    };
    let started = terms.timer.now();
    match terms.timer.within(limit, run).await {
        Some(handled) => handled,
        None => {
            tracing::error!(mount = terms.mount, elapsed = ?terms.timer.now().saturating_duration_since(started),
                limit = ?terms.limit, "handler time limit reached: cancelled, treated as no outcome");
            Handled::Outcome(Outcome::None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(subject: &str, header: Option<(&str, &str)>) -> Delivery {
        let headers = header.map(|(n, v)| {
            let mut h = async_nats::HeaderMap::new();
            h.insert(n, v);
            Arc::new(h)
        });
        Delivery {
            mount: "m",
            subject: subject.into(),
            reply: None,
            headers,
            payload: bytes::Bytes::new(),
            attempt: ruststream_settlement::Attempt::FIRST,
            jetstream: None,
        }
    }

    #[test]
    fn keys_are_read_from_a_token_a_header_or_a_function() {
        let h = std::collections::hash_map::RandomState::new();
        let token = Key::subject_token(1);
        let a = token.of(&delivery("pay.acct-1.created", None), &h);
        let b = token.of(&delivery("pay.acct-1.settled", None), &h);
        let c = token.of(&delivery("pay.acct-2.created", None), &h);
        assert!(a.is_some() && a == b && a != c);
        assert_eq!(token.of(&delivery("pay", None), &h), None, "no such token");
        let header = Key::header("Account");
        let x = header.of(&delivery("s", Some(("account", "42"))), &h);
        assert!(x.is_some(), "the name matches in any case");
        assert_eq!(header.of(&delivery("s", None), &h), None);
        let function =
            Key::function(|d: &Delivery| d.subject.as_str().strip_prefix("k.").map(str::to_owned));
        assert!(function.of(&delivery("k.1", None), &h).is_some());
        assert_eq!(function.of(&delivery("z.1", None), &h), None);
    }
}
