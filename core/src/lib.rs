//! # ruststream-settlement
//!
//! Every delivery a NATS handler gets is settled by exactly one plan: this crate decides it.
//! Given a delivery's metadata, what its handler returned, the mount's policy and the current
//! instant, [`plan`] returns the ordered wire actions (ack payloads, Core copies with their
//! retry-count header, dead letters, timers, logs) that SETTLEMENT.md prescribes.
//!
//! The crate is sans-io: no async, no NATS client, no runtime, no clock. Adapters
//! (`ruststream-tokio`, `ruststream-smol`) do the I/O.
//!
//! # How to drive it
//! 1. At start-up, build each mount's [`MountDeclaration`] and [`validate`](MountDeclaration::validate)
//!    it into a [`MountPolicy`]; check what the server says with
//!    [`MountPolicy::check_consumer`] and [`MountPolicy::check_dead_letter_storage`]. Any
//!    error names the mount and stops start-up.
//! 2. For each message, build a [`Delivery`]: on JetStream from [`AckReply::parse`] of the
//!    reply subject, on Core from [`RetryCountReading::read`] of the headers.
//! 3. Plan [`Event::Arrived`]; run the handler only if [`Plan::runs_handler`] (rule 3).
//! 4. Plan [`Event::Handled`] with the handler's [`Outcome`] (or [`Outcome::None`] after a
//!    panic), reading the clock once for `now`, and execute the [`Action`]s in order with one
//!    exhaustive `match`.
//! 5. If a publish fails, stop, and plan [`Event::PublishFailed`].
//! 6. Keep delayed Core copies in one [`DelayQueue`], driven by one timer through
//!    [`DelayQueue::poll_timeout`] and [`DelayQueue::handle_timeout`].
//! 7. Pull JetStream messages for free handler slots, plus a prefetch sized from the measured
//!    handling rate and the delivery deadline, as one [`PullAccounting`] per mount decides:
//!    when to request and how many, what a message, the end of a request or a lost request
//!    does to the slots.
//! 8. Keep every handler that is still running after its first poll in one [`Leases`]: renew
//!    its JetStream delivery with `+WPI` before its deadline, cancel it at its mount's time
//!    limit, and do not send a result that comes after its deadline (rule 16).
//!
//! ```
//! use std::time::{Duration, Instant};
//! use ruststream_settlement::{
//!     Action, AckReply, Delivery, Event, MountDeclaration, Outcome, plan,
//! };
//!
//! let policy = MountDeclaration::jetstream("orders", "ORDERS", "worker")
//!     .max_attempts(3)
//!     .dead_letter("dlq.orders")
//!     .validate()?;
//! let reply = b"$JS.ACK.ORDERS.worker.1.42.42.1700000000000000000.0";
//! let delivery = Delivery::jetstream("orders.new", AckReply::parse(reply)?);
//! # #[allow(clippy::disallowed_methods)]
//! let now = Instant::now(); // the adapter's one clock read
//!
//! assert!(plan(&delivery, Event::Arrived, &policy, now).runs_handler());
//! let outcome = Outcome::RetryAfter(Duration::from_millis(200)); // what the handler said
//! let decided = plan(&delivery, Event::Handled(outcome), &policy, now);
//! for action in &decided {
//!     match action {
//!         Action::Settle(s) => assert_eq!(s.payload().as_bytes(), br#"-NAK {"delay": 200000000}"#),
//!         other => unreachable!("{other:?}"),
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Invariants
//! - A plan has at most [`MAX_ACTIONS`] actions, at most one settlement, and the settlement
//!   is last; every publish comes before it.
//! - A Core copy published after attempt `n` carries `x-ruststream-retry-count: n`; a Core
//!   message retried forever runs its handler at most `max_attempts` times.
//! - Planning never panics, never allocates, and is deterministic.
//! - The core never copies a payload: actions refer to "the delivered message".
//!
//! The contract is `docs/settlement.md` in the repository (the team's `SETTLEMENT.md`, in the
//! project's own words): rule numbers in these docs are its rules, and the row numbers of
//! `tests/decision_table.rs` its decision table's.

#![warn(missing_docs)]

mod ack;
mod backoff;
mod delivery;
mod header;
mod lease;
mod message;
mod overlap;
mod plan;
mod policy;
mod priority;
mod provenance;
mod pull;
mod queue;
mod redrive;
mod reply;
mod subject;

pub use ack::{AckError, AckPayload, MAX_NAK_DELAY, Settlement, WORK_IN_PROGRESS};
pub use backoff::{
    Backoff, BackoffError, DEFAULT_BACKOFF_FACTOR, DEFAULT_BACKOFF_JITTER, KEY_SEED, key_of,
};
pub use delivery::{Attempt, Delivery, Model};
pub use header::{
    DROPPED_DIRECTIVE_PREFIXES, DROPPED_DIRECTIVES, Headers, MSG_ID_HEADER, PUBLISH_MSG_ID_PREFIX,
    RETRY_COUNT_HEADER, RetryCount, RetryCountReading, dead_letter_msg_id, is_dropped_directive,
    is_retry_count, parse_retry_count, publish_msg_id,
};
pub use lease::{LeaseDue, LeaseEnd, LeaseKey, LeaseTerms, LeasedDelivery, Leases, lease_span};
pub use message::{Message, Publication, wire_len};
pub use overlap::{MountSubjects, Overlap, OverlapSeverity, StoredSubjects, find_overlaps};
pub use plan::{
    Action, DeadLetterReason, Disposition, Event, Log, MAX_ACTIONS, Outcome, Plan, deadline, plan,
    plan_with_clock, retry_in_place,
};
pub use policy::{
    AckPolicy, ConsumerFacts, DEFAULT_DEAD_LETTER_RETRY_DELAY, DeclarationError,
    DeclarationErrorKind, DeclarationWarning, DeclarationWarningKind, Descriptor, MountDeclaration,
    MountPolicy, NameRole, SubjectRole, dead_letter_confirm_within,
};
pub use priority::{
    ConsumerPriority, MAX_GROUP_NAME, MAX_MIN_PENDING, PriorityPolicy, ServerFeature,
    ServerVersion, check_group_name, check_priority, check_server_has,
};
pub use provenance::{
    PROVENANCE_ATTEMPT, PROVENANCE_CONSUMER, PROVENANCE_ERROR, PROVENANCE_ERROR_MAX,
    PROVENANCE_MOUNT, PROVENANCE_MSG_ID, PROVENANCE_REASON, PROVENANCE_STREAM,
    PROVENANCE_STREAM_SEQUENCE, PROVENANCE_SUBJECT, Provenance,
};
pub use pull::{
    PENDING_MESSAGES_HEADER, PREFETCH_PER_SLOT, PREFETCH_WAIT_SHARE, PULL_EXPIRES, PULL_GRACE,
    PullAccounting, PullRequest, RATE_MIN_WINDOW, RATE_SAMPLE, RATE_WINDOW, Receipt,
    parse_pending_messages,
};
pub use queue::{DelayQueue, Due, PendingCopy};
pub use redrive::{
    DEAD_LETTER_MSG_ID_PREFIX, DeadLetterFilter, DeadLetterRecord, REPLAY_MSG_ID_PREFIX,
    replay_msg_id, restored_headers, rfc3339,
};
pub use reply::{ACK_PREFIX, AckReply, AckReplyError};
pub use subject::{Subject, SubjectError, Wildcard};
