//! Mount declarations and their start-up validation.
//!
//! A *mount point* puts a handler on a descriptor: a Core subject ([`Descriptor::CoreSubject`]),
//! a Core wildcard with the subject its copies go to ([`Descriptor::CoreWildcard`]), or a
//! JetStream consumer on a stream ([`Descriptor::JetStream`]). The declaration also names
//! `max_attempts` and a dead-letter subject.
//!
//! [`MountDeclaration::validate`] applies the pure rules of SETTLEMENT.md (7, 10, 11) and gives
//! a [`MountPolicy`], or a [`DeclarationError`] that names the mount. The server-side rules (the
//! consumer's ack policy and `max_deliver`, its `BackOff`, whether a stream stores the
//! dead-letter subject) need facts only an adapter can fetch; it passes them to
//! [`MountPolicy::check_consumer`] and [`MountPolicy::check_dead_letter_storage`], which decide.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use crate::backoff::{Backoff, BackoffError};

use crate::subject::{Subject, SubjectError, Wildcard};

/// The default delay of the `-NAK` sent when a JetStream dead-letter publish fails (rule 8):
/// 5 seconds, long enough not to hammer a server whose dead-letter stream is missing.
pub const DEFAULT_DEAD_LETTER_RETRY_DELAY: Duration = Duration::from_secs(5);

/// The longest a JetStream mount's dead-letter publish waits for its stream's confirmation
/// (rule 8): half the consumer's `ack_wait`, so that a failed publish is known (and the
/// delivery sent back with `-NAK`) before the server would give the delivery to another
/// attempt; at least 50 ms, and at most 5 s (async-nats' own default wait for a publish
/// acknowledgement).
pub fn dead_letter_confirm_within(ack_wait: Duration) -> Duration {
    (ack_wait / 2).clamp(Duration::from_millis(50), Duration::from_secs(5))
}

/// A mount point as the application declares it, not yet validated.
///
/// Built with [`core_subject`](Self::core_subject), [`core_wildcard`](Self::core_wildcard) or
/// [`jetstream`](Self::jetstream), then refined with the builder methods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountDeclaration {
    name: String,
    kind: DeclaredKind,
    max_attempts: Option<u32>,
    dead_letter: Option<String>,
    dead_letter_retry_delay: Duration,
    backoff: Option<Backoff>,
    provenance: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum DeclaredKind {
    CoreSubject(String),
    CoreWildcard {
        wildcard: String,
        copy_subject: Option<String>,
    },
    JetStream {
        stream: String,
        consumer: String,
    },
}

impl MountDeclaration {
    fn new(name: &str, kind: DeclaredKind) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            max_attempts: None,
            dead_letter: None,
            dead_letter_retry_delay: DEFAULT_DEAD_LETTER_RETRY_DELAY,
            backoff: None,
            provenance: false,
        }
    }

    /// A mount named `name` on the literal Core subject `subject`. Copies go back to
    /// `subject`.
    pub fn core_subject(name: &str, subject: &str) -> Self {
        Self::new(name, DeclaredKind::CoreSubject(subject.to_owned()))
    }

    /// A mount named `name` on the Core wildcard `wildcard`, whose copies are published to the
    /// literal `copy_subject`. `None` is refused by [`validate`](Self::validate): a wildcard
    /// publishes to no subject of its own (rule 10).
    pub fn core_wildcard(name: &str, wildcard: &str, copy_subject: Option<&str>) -> Self {
        Self::new(
            name,
            DeclaredKind::CoreWildcard {
                wildcard: wildcard.to_owned(),
                copy_subject: copy_subject.map(str::to_owned),
            },
        )
    }

    /// A mount named `name` on the JetStream consumer `consumer` of stream `stream`.
    pub fn jetstream(name: &str, stream: &str, consumer: &str) -> Self {
        Self::new(
            name,
            DeclaredKind::JetStream {
                stream: stream.to_owned(),
                consumer: consumer.to_owned(),
            },
        )
    }

    /// Bounds the attempts: the first delivery is attempt 1, and at attempt `n` or later a
    /// retry goes to the at-limit path. `0` is refused by [`validate`](Self::validate).
    #[must_use]
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Where deliveries at the limit go, unchanged. Needs [`max_attempts`](Self::max_attempts)
    /// (rule 7).
    #[must_use]
    pub fn dead_letter(mut self, subject: &str) -> Self {
        self.dead_letter = Some(subject.to_owned());
        self
    }

    /// The delay of the `-NAK` sent when the dead-letter publish of a JetStream delivery fails,
    /// so that it comes back past the limit and the dead letter is tried again (rule 8).
    /// Default [`DEFAULT_DEAD_LETTER_RETRY_DELAY`].
    #[must_use]
    pub fn dead_letter_retry_delay(mut self, delay: Duration) -> Self {
        self.dead_letter_retry_delay = delay;
        self
    }

    /// Paces retries (rule 18): a handler's `retry` then means `retry_after` the policy's
    /// delay for the attempt, and the rest of the decision table applies unchanged (on
    /// JetStream `-NAK {"delay": …}`; on Core a copy after the delay, so that a Core mount
    /// with a backoff copies even without `max_attempts`). `retry_after` keeps its own
    /// delay. Checked by [`validate`](Self::validate).
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// Asks for provenance headers on the mount's dead letters (rule 19; see
    /// [`Provenance`](crate::Provenance) for the headers). Off by default: a dead letter is
    /// then the delivery as it arrived, byte for byte (rule 9 aside).
    #[must_use]
    pub fn provenance(mut self, on: bool) -> Self {
        self.provenance = on;
        self
    }

    /// The mount's name, as errors and logs give it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Applies the pure start-up rules and gives the mount's policy.
    ///
    /// # Errors
    /// A [`DeclarationError`] naming this mount, whose [`kind`](DeclarationError::kind) is:
    /// [`DeclarationErrorKind::Subject`] for a subject or wildcard that is empty, has an empty
    /// token, whitespace or a control character, or (for a `CoreSubject`, a copy subject or a
    /// dead-letter subject) contains `*` or `>`; [`DeclarationErrorKind::MissingCopySubject`];
    /// [`DeclarationErrorKind::Name`] for a stream or consumer name NATS would refuse;
    /// [`DeclarationErrorKind::ZeroMaxAttempts`];
    /// [`DeclarationErrorKind::DeadLetterWithoutLimit`] (rule 7);
    /// [`DeclarationErrorKind::DeadLetterLoop`] for a Core mount that would receive its own
    /// dead letters; [`DeclarationErrorKind::MountName`]; [`DeclarationErrorKind::Backoff`]
    /// (see [`Backoff::check`]).
    pub fn validate(&self) -> Result<MountPolicy, DeclarationError> {
        let fail = |kind| DeclarationError {
            mount: self.name.clone(),
            kind,
        };
        let subject = |role: SubjectRole, s: &str| {
            Subject::new(s).map_err(|source| fail(DeclarationErrorKind::Subject { role, source }))
        };
        let descriptor = match &self.kind {
            DeclaredKind::CoreSubject(s) => Descriptor::CoreSubject(subject(SubjectRole::Core, s)?),
            DeclaredKind::CoreWildcard {
                wildcard,
                copy_subject,
            } => {
                let wildcard = Wildcard::new(wildcard).map_err(|source| {
                    fail(DeclarationErrorKind::Subject {
                        role: SubjectRole::Wildcard,
                        source,
                    })
                })?;
                let copy = copy_subject
                    .as_deref()
                    .ok_or_else(|| fail(DeclarationErrorKind::MissingCopySubject))?;
                Descriptor::CoreWildcard {
                    wildcard,
                    copy_subject: subject(SubjectRole::Copy, copy)?,
                }
            }
            DeclaredKind::JetStream { stream, consumer } => {
                for (role, name) in [(NameRole::Stream, stream), (NameRole::Consumer, consumer)] {
                    if !is_valid_name(name) {
                        return Err(fail(DeclarationErrorKind::Name {
                            role,
                            name: name.clone(),
                        }));
                    }
                }
                Descriptor::JetStream {
                    stream: stream.clone(),
                    consumer: consumer.clone(),
                }
            }
        };
        let max_attempts = match self.max_attempts {
            None => None,
            Some(n) => Some(
                NonZeroU32::new(n).ok_or_else(|| fail(DeclarationErrorKind::ZeroMaxAttempts))?,
            ),
        };
        if self.name.is_empty()
            || self
                .name
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(fail(DeclarationErrorKind::MountName));
        }
        let dead_letter = match &self.dead_letter {
            None => None,
            Some(s) => Some(subject(SubjectRole::DeadLetter, s)?),
        };
        // A Core mount that receives its own dead letters would handle each again, at the
        // limit, and dead-letter it again, without end.
        if let Some(dlq) = &dead_letter {
            let loops = match &descriptor {
                Descriptor::CoreSubject(s) => s == dlq,
                Descriptor::CoreWildcard {
                    wildcard,
                    copy_subject,
                } => wildcard.matches(dlq) || copy_subject == dlq,
                Descriptor::JetStream { .. } => false,
            };
            if loops {
                return Err(fail(DeclarationErrorKind::DeadLetterLoop(dlq.clone())));
            }
        }
        if dead_letter.is_some() && max_attempts.is_none() {
            return Err(fail(DeclarationErrorKind::DeadLetterWithoutLimit));
        }
        if let Some(backoff) = &self.backoff {
            backoff
                .check()
                .map_err(|e| fail(DeclarationErrorKind::Backoff(e)))?;
        }
        Ok(MountPolicy {
            name: Arc::from(self.name.as_str()),
            descriptor,
            max_attempts,
            dead_letter,
            dead_letter_retry_delay: self.dead_letter_retry_delay,
            backoff: self.backoff,
            provenance: self.provenance,
        })
    }
}

/// Whether NATS accepts `name` as a stream or consumer name: non-empty, and free of
/// whitespace, control characters, `.`, `*`, `>`, `/` and `\` (NATS docs, "Naming Streams,
/// Consumers, and Accounts").
fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.chars().any(|c| {
            c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>' | '/' | '\\')
        })
}

/// What a mount listens on, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Descriptor {
    /// A literal Core NATS subject; copies go back to it.
    CoreSubject(Subject),
    /// A Core NATS wildcard, and the literal subject its copies go to.
    CoreWildcard {
        /// What the mount subscribes to.
        wildcard: Wildcard,
        /// Where copies are published.
        copy_subject: Subject,
    },
    /// A JetStream consumer.
    JetStream {
        /// The stream's name.
        stream: String,
        /// The consumer's (durable) name.
        consumer: String,
    },
}

/// A validated mount: what the planner decides with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountPolicy {
    name: Arc<str>,
    descriptor: Descriptor,
    max_attempts: Option<NonZeroU32>,
    dead_letter: Option<Subject>,
    dead_letter_retry_delay: Duration,
    backoff: Option<Backoff>,
    provenance: bool,
}

impl MountPolicy {
    /// Whether its dead letters carry provenance headers (rule 19).
    pub fn provenance(&self) -> bool {
        self.provenance
    }

    /// How retries are paced (rule 18); `None`: a `retry` is redelivered (or copied) at once.
    pub fn backoff(&self) -> Option<&Backoff> {
        self.backoff.as_ref()
    }

    /// The mount's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the mount listens on.
    pub fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    /// The attempt limit; `None` for no limit.
    pub fn max_attempts(&self) -> Option<NonZeroU32> {
        self.max_attempts
    }

    /// The dead-letter subject, if declared (always with a limit).
    pub fn dead_letter(&self) -> Option<&Subject> {
        self.dead_letter.as_ref()
    }

    /// The delay of the `-NAK` after a failed JetStream dead-letter publish.
    pub fn dead_letter_retry_delay(&self) -> Duration {
        self.dead_letter_retry_delay
    }

    /// Where Core copies of this mount's deliveries are published: the `CoreSubject` itself,
    /// or the `CoreWildcard`'s copy subject; `None` for a JetStream mount.
    pub fn copy_subject(&self) -> Option<&Subject> {
        match &self.descriptor {
            Descriptor::CoreSubject(s) => Some(s),
            Descriptor::CoreWildcard { copy_subject, .. } => Some(copy_subject),
            Descriptor::JetStream { .. } => None,
        }
    }

    /// The subject a `CoreWildcard` mount must subscribe to besides its wildcard, so that its
    /// copies come home (rule 10): the copy subject when the wildcard does not match it;
    /// `None` when it does (the copies arrive through the wildcard's own subscription, and a
    /// second subscription would handle each copy twice) and for other descriptors.
    pub fn extra_subscription(&self) -> Option<&Subject> {
        match &self.descriptor {
            Descriptor::CoreWildcard {
                wildcard,
                copy_subject,
            } => (!wildcard.matches(copy_subject)).then_some(copy_subject),
            Descriptor::CoreSubject(_) | Descriptor::JetStream { .. } => None,
        }
    }

    fn warn(&self, kind: DeclarationWarningKind) -> DeclarationWarning {
        DeclarationWarning {
            mount: self.name.to_string(),
            kind,
        }
    }

    fn fail(&self, kind: DeclarationErrorKind) -> DeclarationError {
        DeclarationError {
            mount: self.name.to_string(),
            kind,
        }
    }

    /// Checks the JetStream consumer this mount binds against rule 11. The runtime never
    /// changes a consumer to make it fit. Gives the warnings to log; a Core mount has none.
    ///
    /// # Errors
    /// [`DeclarationErrorKind::AckPolicyNotExplicit`] when the consumer's ack policy is not
    /// explicit; [`DeclarationErrorKind::MaxDeliverTooLow`] when `max_deliver` is set and not
    /// above `max_attempts` (the server would stop redelivering first, and the message would
    /// be lost without a dead letter).
    pub fn check_consumer(
        &self,
        consumer: &ConsumerFacts,
    ) -> Result<Vec<DeclarationWarning>, DeclarationError> {
        let mut warnings = Vec::new();
        if let Descriptor::CoreSubject(_) | Descriptor::CoreWildcard { .. } = self.descriptor {
            return Ok(warnings);
        }
        if consumer.ack_policy != AckPolicy::Explicit {
            return Err(self.fail(DeclarationErrorKind::AckPolicyNotExplicit(
                consumer.ack_policy,
            )));
        }
        // The server treats 0 and negative values as "unlimited".
        let max_deliver = u64::try_from(consumer.max_deliver).ok().filter(|&n| n > 0);
        match (max_deliver, self.max_attempts) {
            (Some(max_deliver), Some(limit)) if max_deliver <= u64::from(limit.get()) => {
                return Err(self.fail(DeclarationErrorKind::MaxDeliverTooLow {
                    max_deliver,
                    max_attempts: limit,
                }));
            }
            (Some(max_deliver), None) => {
                warnings.push(
                    self.warn(DeclarationWarningKind::MaxDeliverWithoutLimit { max_deliver }),
                );
            }
            _ => {}
        }
        if consumer.backoff {
            warnings.push(self.warn(DeclarationWarningKind::BackOff));
        }
        Ok(warnings)
    }

    /// Checks where dead letters will go (rule 8), given the name of the stream whose
    /// subjects cover the dead-letter subject (`None`: no stream stores it) and, for a
    /// JetStream mount, its consumer's filter subject (`None` or empty: every subject of the
    /// stream). Gives the warning to log, if any; a mount without a dead-letter subject has
    /// none.
    ///
    /// # Errors
    /// [`DeclarationErrorKind::DeadLetterNotStored`] for a JetStream mount whose dead-letter
    /// subject no stream stores: its dead letters would not be durable. A Core mount in that
    /// case is accepted with [`DeclarationWarningKind::DeadLetterNotStored`]: its dead letters
    /// are plain publishes that reach only live subscribers.
    ///
    /// [`DeclarationErrorKind::DeadLetterLoop`] for a JetStream mount whose dead letters would
    /// be stored in the very stream it consumes and pass its consumer's filter: each dead
    /// letter would come back as a new first delivery, be dead-lettered again, and so on
    /// without end.
    pub fn check_dead_letter_storage(
        &self,
        stored_by: Option<&str>,
        consumer_filter: Option<&str>,
    ) -> Result<Option<DeclarationWarning>, DeclarationError> {
        let Some(subject) = &self.dead_letter else {
            return Ok(None);
        };
        match (&self.descriptor, stored_by) {
            (Descriptor::JetStream { stream, .. }, Some(by)) if by == stream => {
                let caught = match consumer_filter.filter(|f| !f.is_empty()) {
                    None => true,
                    Some(filter) => Wildcard::new(filter).is_ok_and(|w| w.matches(subject)),
                };
                match caught {
                    true => Err(self.fail(DeclarationErrorKind::DeadLetterLoop(subject.clone()))),
                    false => Ok(None),
                }
            }
            (_, Some(_)) => Ok(None),
            (Descriptor::JetStream { .. }, None) => {
                Err(self.fail(DeclarationErrorKind::DeadLetterNotStored(subject.clone())))
            }
            (Descriptor::CoreSubject(_) | Descriptor::CoreWildcard { .. }, None) => Ok(Some(
                self.warn(DeclarationWarningKind::DeadLetterNotStored(subject.clone())),
            )),
        }
    }
}

/// A consumer's acknowledgement policy, as JetStream names them.
///
/// The server grows new policies (`flow_control` came with nats-server 2.14, and async-nats
/// shows it only behind its `server_2_14` feature), so a policy is read from its wire name
/// with [`AckPolicy::from_name`], and one this runtime does not know is [`AckPolicy::Unknown`]
/// rather than a failure to build or to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckPolicy {
    /// `none`: the server expects no acknowledgement.
    None,
    /// `all`: acknowledging one message acknowledges every earlier one.
    All,
    /// `explicit`: every message is acknowledged by itself. The only policy the runtime runs.
    Explicit,
    /// `flow_control` (nats-server 2.14+): acknowledged through the replies to flow-control
    /// messages, for the server's own sourcing consumers (ADR-60).
    FlowControl,
    /// A policy this version of the runtime has no name for.
    Unknown,
}

impl AckPolicy {
    /// The policy whose JSON name in the consumer's configuration (`ack_policy`) is `name`:
    /// `none`, `all`, `explicit`, `flow_control`; anything else is [`AckPolicy::Unknown`].
    pub fn from_name(name: &str) -> Self {
        match name {
            "none" => Self::None,
            "all" => Self::All,
            "explicit" => Self::Explicit,
            "flow_control" => Self::FlowControl,
            _ => Self::Unknown,
        }
    }

    /// The policy's JSON name, as the server writes it (`unknown` for [`AckPolicy::Unknown`]).
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::All => "all",
            Self::Explicit => "explicit",
            Self::FlowControl => "flow_control",
            Self::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for AckPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the server says about a consumer, for [`MountPolicy::check_consumer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerFacts {
    /// The consumer's ack policy.
    pub ack_policy: AckPolicy,
    /// The consumer's `max_deliver`; 0 or negative means unlimited, as on the server.
    pub max_deliver: i64,
    /// Whether the consumer has a non-empty `BackOff` list.
    pub backoff: bool,
}

/// Which subject of a declaration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubjectRole {
    /// The subject of a `CoreSubject`.
    Core,
    /// The wildcard of a `CoreWildcard`.
    Wildcard,
    /// The copy subject of a `CoreWildcard`.
    Copy,
    /// The dead-letter subject.
    DeadLetter,
}

impl fmt::Display for SubjectRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Core => "core subject",
            Self::Wildcard => "wildcard",
            Self::Copy => "copy subject",
            Self::DeadLetter => "dead-letter subject",
        })
    }
}

/// Which name of a JetStream declaration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameRole {
    /// The stream name.
    Stream,
    /// The consumer name.
    Consumer,
}

impl fmt::Display for NameRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Stream => "stream",
            Self::Consumer => "consumer",
        })
    }
}

/// A declaration refused at start-up, naming the mount.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mount `{mount}`: {kind}")]
pub struct DeclarationError {
    /// The mount's name.
    pub mount: String,
    /// What is wrong.
    pub kind: DeclarationErrorKind,
}

impl DeclarationError {
    /// What is wrong.
    pub fn kind(&self) -> &DeclarationErrorKind {
        &self.kind
    }
}

/// What is wrong with a declaration (SETTLEMENT.md rules 7, 8, 10, 11).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeclarationErrorKind {
    /// A subject or wildcard is malformed, or a literal one contains `*` or `>`.
    #[error("bad {role}: {source}")]
    Subject {
        /// Which subject.
        role: SubjectRole,
        /// Why.
        source: SubjectError,
    },
    /// A `CoreWildcard` names no copy subject.
    #[error("a core wildcard needs a copy subject: a wildcard publishes to no subject of its own")]
    MissingCopySubject,
    /// A stream or consumer name NATS would refuse.
    #[error(
        "bad {role} name `{name}`: names must be non-empty, without whitespace, control characters, `.`, `*`, `>`, `/` or `\\`"
    )]
    Name {
        /// Which name.
        role: NameRole,
        /// The name as declared.
        name: String,
    },
    /// `max_attempts` is 0.
    #[error("max_attempts must be at least 1 (the first delivery is attempt 1)")]
    ZeroMaxAttempts,
    /// A dead-letter subject without `max_attempts` (rule 7).
    #[error(
        "a dead-letter subject needs max_attempts (rule 7): set the attempt at which retried deliveries go to it (rejects and payloads that do not decode go to it at any attempt)"
    )]
    DeadLetterWithoutLimit,
    /// The consumer's ack policy is not explicit.
    #[error("consumer ack policy is `{0}`; ruststream needs `explicit` acknowledgement")]
    AckPolicyNotExplicit(AckPolicy),
    /// The consumer's `max_deliver` is not above `max_attempts`.
    #[error(
        "consumer max_deliver {max_deliver} is not above max_attempts {max_attempts}: the server would stop redelivering first and lose the message"
    )]
    MaxDeliverTooLow {
        /// The consumer's `max_deliver`.
        max_deliver: u64,
        /// The mount's `max_attempts`.
        max_attempts: NonZeroU32,
    },
    /// The mount would receive its own dead letters: a Core mount's subject, wildcard or copy
    /// subject covers the dead-letter subject, or a JetStream mount's dead letters would be
    /// stored in the stream it consumes and pass its consumer's filter.
    #[error(
        "dead-letter subject `{0}` comes back to this mount: each dead letter would be handled and dead-lettered again, without end"
    )]
    DeadLetterLoop(Subject),
    /// The mount's name is empty or has whitespace or control characters (it appears in logs
    /// as `mount=<name>`).
    #[error("a mount name must be non-empty, without whitespace or control characters")]
    MountName,
    /// The mount's backoff cannot be used (rule 18).
    #[error("bad backoff: {0}")]
    Backoff(BackoffError),
    /// A JetStream mount's dead-letter subject is stored by no stream.
    #[error(
        "no stream stores dead-letter subject `{0}`; a JetStream mount's dead letters must be durable"
    )]
    DeadLetterNotStored(Subject),
}

/// Something accepted at start-up that the operator should know, naming the mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclarationWarning {
    /// The mount's name.
    pub mount: String,
    /// What to know.
    pub kind: DeclarationWarningKind,
}

impl fmt::Display for DeclarationWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mount `{}`: {}", self.mount, self.kind)
    }
}

/// What a [`DeclarationWarning`] is about.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeclarationWarningKind {
    /// The consumer has a `BackOff` list; the server adds it to `retry_after` delays.
    BackOff,
    /// The consumer has `max_deliver` but the mount no `max_attempts`: the server stops
    /// redelivering after that many deliveries, and no dead letter is published.
    MaxDeliverWithoutLimit {
        /// The consumer's `max_deliver`.
        max_deliver: u64,
    },
    /// A Core mount's dead-letter subject is stored by no stream: dead letters are plain
    /// publishes that reach only live subscribers.
    DeadLetterNotStored(Subject),
}

impl fmt::Display for DeclarationWarningKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BackOff => {
                f.write_str("consumer has a BackOff list; the server adds it to retry_after delays")
            }
            Self::MaxDeliverWithoutLimit { max_deliver } => write!(
                f,
                "consumer max_deliver is {max_deliver} but the mount has no max_attempts; \
                 the server gives up after {max_deliver} deliveries without a dead letter"
            ),
            Self::DeadLetterNotStored(s) => write!(
                f,
                "no stream stores dead-letter subject `{s}`; dead letters reach only live subscribers"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(d: &MountDeclaration) -> DeclarationErrorKind {
        d.validate().expect_err("declaration must be refused").kind
    }

    #[test]
    fn errors_name_the_mount() {
        let err = MountDeclaration::core_subject("orders", "orders.*")
            .validate()
            .expect_err("wildcard in a core subject");
        assert_eq!(err.mount, "orders");
        let text = err.to_string();
        assert!(text.starts_with("mount `orders`: "), "{text}");
        assert!(text.contains("orders.*"), "{text}");
    }

    #[test]
    fn rule_11_core_subject_must_be_literal() {
        for bad in ["a.*", "a.>", "*", ">"] {
            assert!(matches!(
                kind(&MountDeclaration::core_subject("m", bad)),
                DeclarationErrorKind::Subject {
                    role: SubjectRole::Core,
                    source: SubjectError::NotLiteral(_)
                }
            ));
        }
    }

    #[test]
    fn rule_11_malformed_subjects_anywhere() {
        for bad in ["", "a..b", ".a", "a.", "a b", "a\tb", "a\u{0}b"] {
            let decls = [
                MountDeclaration::core_subject("m", bad),
                MountDeclaration::core_wildcard("m", bad, Some("copies")),
                MountDeclaration::core_wildcard("m", "in.*", Some(bad)),
                MountDeclaration::core_subject("m", "ok")
                    .max_attempts(2)
                    .dead_letter(bad),
            ];
            for d in decls {
                assert!(
                    matches!(kind(&d), DeclarationErrorKind::Subject { .. }),
                    "{bad:?} in {d:?}"
                );
            }
        }
    }

    #[test]
    fn rule_10_and_11_wildcard_needs_a_literal_copy_subject() {
        assert_eq!(
            kind(&MountDeclaration::core_wildcard("m", "in.*", None)),
            DeclarationErrorKind::MissingCopySubject
        );
        assert!(matches!(
            kind(&MountDeclaration::core_wildcard("m", "in.*", Some("in.>"))),
            DeclarationErrorKind::Subject {
                role: SubjectRole::Copy,
                source: SubjectError::NotLiteral(_)
            }
        ));
        assert!(matches!(
            kind(&MountDeclaration::core_wildcard("m", "in.*.x*", Some("c"))),
            DeclarationErrorKind::Subject {
                role: SubjectRole::Wildcard,
                source: SubjectError::MisplacedWildcard(_)
            }
        ));
    }

    #[test]
    fn rule_11_dead_letter_must_be_literal() {
        let d = MountDeclaration::jetstream("m", "S", "C")
            .max_attempts(3)
            .dead_letter("dlq.*");
        assert!(matches!(
            kind(&d),
            DeclarationErrorKind::Subject {
                role: SubjectRole::DeadLetter,
                source: SubjectError::NotLiteral(_)
            }
        ));
    }

    #[test]
    fn rule_7_dead_letter_needs_a_limit() {
        for d in [
            MountDeclaration::core_subject("m", "a").dead_letter("dlq"),
            MountDeclaration::jetstream("m", "S", "C").dead_letter("dlq"),
        ] {
            assert_eq!(kind(&d), DeclarationErrorKind::DeadLetterWithoutLimit);
        }
    }

    #[test]
    fn zero_max_attempts_is_refused() {
        assert_eq!(
            kind(&MountDeclaration::core_subject("m", "a").max_attempts(0)),
            DeclarationErrorKind::ZeroMaxAttempts
        );
    }

    #[test]
    fn stream_and_consumer_names() {
        for (stream, consumer, role) in [
            ("", "C", NameRole::Stream),
            ("A.B", "C", NameRole::Stream),
            ("S", "c*", NameRole::Consumer),
            ("S", "a b", NameRole::Consumer),
            ("S>", "C", NameRole::Stream),
            ("S", "x/y", NameRole::Consumer),
        ] {
            match kind(&MountDeclaration::jetstream("m", stream, consumer)) {
                DeclarationErrorKind::Name { role: r, .. } => assert_eq!(r, role),
                other => panic!("{stream}/{consumer}: {other:?}"),
            }
        }
    }

    #[test]
    fn rule_10_copies_come_home_once() {
        let p = MountDeclaration::core_wildcard("m", "orders.*", Some("orders.retry"))
            .validate()
            .expect("valid");
        assert_eq!(
            p.extra_subscription(),
            None,
            "the wildcard already matches the copy subject"
        );
        assert_eq!(p.copy_subject().map(Subject::as_str), Some("orders.retry"));
        let p = MountDeclaration::core_wildcard("m", "orders.*", Some("retry.orders"))
            .validate()
            .expect("valid");
        assert_eq!(
            p.extra_subscription().map(Subject::as_str),
            Some("retry.orders")
        );
        let p = MountDeclaration::core_subject("m", "a.b")
            .validate()
            .expect("valid");
        assert_eq!(p.extra_subscription(), None);
        assert_eq!(p.copy_subject().map(Subject::as_str), Some("a.b"));
        let p = MountDeclaration::jetstream("m", "S", "C")
            .validate()
            .expect("valid");
        assert_eq!(p.copy_subject(), None);
    }

    fn facts(ack_policy: AckPolicy, max_deliver: i64, backoff: bool) -> ConsumerFacts {
        ConsumerFacts {
            ack_policy,
            max_deliver,
            backoff,
        }
    }

    #[test]
    fn rule_11_consumer_checks() {
        let p = MountDeclaration::jetstream("m", "S", "C")
            .max_attempts(3)
            .validate()
            .expect("valid");
        assert_eq!(
            p.check_consumer(&facts(AckPolicy::Explicit, -1, false)),
            Ok(vec![])
        );
        assert_eq!(
            p.check_consumer(&facts(AckPolicy::Explicit, 0, false)),
            Ok(vec![])
        );
        assert_eq!(
            p.check_consumer(&facts(AckPolicy::Explicit, 4, false)),
            Ok(vec![])
        );
        for ack in [
            AckPolicy::None,
            AckPolicy::All,
            AckPolicy::FlowControl,
            AckPolicy::Unknown,
        ] {
            let err = p
                .check_consumer(&facts(ack, -1, false))
                .expect_err("not explicit");
            assert_eq!(err.kind, DeclarationErrorKind::AckPolicyNotExplicit(ack));
            assert_eq!(err.mount, "m");
        }
        for md in [1, 2, 3] {
            let err = p
                .check_consumer(&facts(AckPolicy::Explicit, md, false))
                .expect_err("too low");
            assert!(
                matches!(err.kind, DeclarationErrorKind::MaxDeliverTooLow { .. }),
                "{md}"
            );
        }
        let warnings = p
            .check_consumer(&facts(AckPolicy::Explicit, -1, true))
            .expect("accepted");
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].kind, DeclarationWarningKind::BackOff);
        assert!(warnings[0].to_string().starts_with("mount `m`: "));

        let unlimited = MountDeclaration::jetstream("u", "S", "C")
            .validate()
            .expect("valid");
        let warnings = unlimited
            .check_consumer(&facts(AckPolicy::Explicit, 5, false))
            .expect("accepted");
        assert_eq!(
            warnings[0].kind,
            DeclarationWarningKind::MaxDeliverWithoutLimit { max_deliver: 5 }
        );

        let core = MountDeclaration::core_subject("c", "a")
            .validate()
            .expect("valid");
        assert_eq!(
            core.check_consumer(&facts(AckPolicy::None, 1, true)),
            Ok(vec![])
        );
    }

    #[test]
    fn dead_letter_confirmation_waits_half_ack_wait_within_bounds() {
        let ms = Duration::from_millis;
        assert_eq!(dead_letter_confirm_within(ms(30_000)), ms(5_000));
        assert_eq!(dead_letter_confirm_within(ms(2_000)), ms(1_000));
        assert_eq!(dead_letter_confirm_within(ms(60)), ms(50));
        assert_eq!(dead_letter_confirm_within(Duration::ZERO), ms(50));
    }

    #[test]
    fn ack_policies_read_by_their_wire_names() {
        for name in ["none", "all", "explicit", "flow_control"] {
            assert_eq!(AckPolicy::from_name(name).name(), name);
        }
        assert_eq!(AckPolicy::from_name("Explicit"), AckPolicy::Unknown);
        assert_eq!(AckPolicy::from_name("by_moon_phase"), AckPolicy::Unknown);
        let err = MountDeclaration::jetstream("m", "S", "C")
            .validate()
            .expect("valid")
            .check_consumer(&facts(AckPolicy::FlowControl, -1, false))
            .expect_err("not explicit");
        assert!(err.to_string().contains("`flow_control`"), "{err}");
    }

    #[test]
    fn rule_8_dead_letter_storage() {
        let js = MountDeclaration::jetstream("j", "S", "C")
            .max_attempts(3)
            .dead_letter("dlq.orders")
            .validate()
            .expect("valid");
        assert_eq!(js.check_dead_letter_storage(Some("DLQ"), None), Ok(None));
        let err = js
            .check_dead_letter_storage(None, None)
            .expect_err("JetStream needs a durable dead letter");
        assert!(matches!(
            err.kind,
            DeclarationErrorKind::DeadLetterNotStored(_)
        ));
        assert!(err.to_string().contains("dlq.orders"));

        let core = MountDeclaration::core_subject("c", "a")
            .max_attempts(3)
            .dead_letter("dlq.orders")
            .validate()
            .expect("valid");
        assert_eq!(core.check_dead_letter_storage(Some("DLQ"), None), Ok(None));
        let warning = core
            .check_dead_letter_storage(None, None)
            .expect("accepted")
            .expect("warned");
        assert!(matches!(
            warning.kind,
            DeclarationWarningKind::DeadLetterNotStored(_)
        ));

        let none = MountDeclaration::jetstream("n", "S", "C")
            .validate()
            .expect("valid");
        assert_eq!(none.check_dead_letter_storage(None, None), Ok(None));
    }

    #[test]
    fn dead_letters_that_come_back_are_refused() {
        // Core: the subject itself, a subject the wildcard matches, the copy subject.
        for d in [
            MountDeclaration::core_subject("m", "orders.new")
                .max_attempts(2)
                .dead_letter("orders.new"),
            MountDeclaration::core_wildcard("m", "orders.*", Some("retry.x"))
                .max_attempts(2)
                .dead_letter("orders.dlq"),
            MountDeclaration::core_wildcard("m", "orders.*", Some("retry.x"))
                .max_attempts(2)
                .dead_letter("retry.x"),
        ] {
            assert!(
                matches!(kind(&d), DeclarationErrorKind::DeadLetterLoop(_)),
                "{d:?}"
            );
        }
        assert!(
            MountDeclaration::core_wildcard("m", "orders.*", Some("retry.x"))
                .max_attempts(2)
                .dead_letter("dlq.orders")
                .validate()
                .is_ok()
        );
        // JetStream: stored by the consumed stream, and passing the consumer's filter.
        let js = MountDeclaration::jetstream("j", "ORDERS", "C")
            .max_attempts(2)
            .dead_letter("orders.dlq")
            .validate()
            .expect("valid");
        for filter in [None, Some(""), Some("orders.>"), Some("orders.dlq")] {
            let err = js
                .check_dead_letter_storage(Some("ORDERS"), filter)
                .expect_err("loops");
            assert!(
                matches!(err.kind, DeclarationErrorKind::DeadLetterLoop(_)),
                "{filter:?}"
            );
            assert!(err.to_string().contains("mount `j`"));
        }
        // The same stream with a filter that leaves the dead letters out, or another stream.
        assert_eq!(
            js.check_dead_letter_storage(Some("ORDERS"), Some("orders.new")),
            Ok(None)
        );
        assert_eq!(js.check_dead_letter_storage(Some("DLQ"), None), Ok(None));
    }

    #[test]
    fn mount_names_are_checked() {
        for name in ["", "my mount", "tab\tname"] {
            assert_eq!(
                kind(&MountDeclaration::core_subject(name, "a")),
                DeclarationErrorKind::MountName,
                "{name:?}"
            );
        }
        assert!(
            MountDeclaration::core_subject("orders-eu_1", "a")
                .validate()
                .is_ok()
        );
    }
}
