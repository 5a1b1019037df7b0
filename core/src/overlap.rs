//! Subject overlaps that cannot work, found at start-up before anything is consumed (rule 22,
//! issue 41): a Core mount whose subject a stream stores, and copies or dead letters that a
//! stream or another mount of the same app would take as new work.
//!
//! The adapter gathers what the server says (each stream's subjects, each JetStream mount's
//! consumer filters) and what each handler says of itself (whether it returns a reply); this
//! module decides, without I/O, and [`Overlap::message`] names the mount, the stream or other
//! mount, and the subjects that overlap.
//!
//! | what | found | why |
//! |---|---|---|
//! | a Core mount whose handler replies, on a subject a stream stores | refused | the requester gets the stream's publish acknowledgement as its reply, before the mount answers, and the request is stored as a message |
//! | any other Core mount on a subject a stream stores | warned | each message is handled live and also stored: a request gets the stream's acknowledgement first, and a consumer of that stream handles the message again |
//! | a Core mount's copies published to a subject a stream stores | warned (refused when a JetStream mount of the app consumes it) | every retry is stored; a JetStream mount would handle each copy again |
//! | a Core mount's copies received by another Core mount of the app | refused | the other mount would handle them as its own messages |
//! | dead letters received by another mount of the app (its Core subject, or its stream and consumer filter) | refused | the dead letters would be handled again as work (the mount's own are refused by [`MountPolicy::check_dead_letter_storage`] and rule 22) |
//! | dead letters stored by a stream with `no_ack` | refused | the stream never confirms them, and a dead letter is settled only once confirmed (rule 8): it would be tried again for ever |
//!
//! A stream with `no_ack` stores without answering: a replying Core mount under it gets its
//! requests answered by itself, and is only warned about.

use std::fmt::Write as _;

use crate::policy::{Descriptor, MountPolicy};
use crate::subject::{Subject, Wildcard};

/// A stream and the subjects it stores.
#[derive(Debug, Clone, Copy)]
pub struct StoredSubjects<'a> {
    /// The stream's name.
    pub stream: &'a str,
    /// Its subjects (a stream that only mirrors or sources others has none).
    pub subjects: &'a [Wildcard],
    /// Whether it acknowledges what is published to it: `false` for a stream with `no_ack`,
    /// which stores silently (a request then gets its real reply, and a publish to it is
    /// never confirmed).
    pub acknowledges: bool,
}

/// A mount, as the overlap checks see it.
#[derive(Debug, Clone, Copy)]
pub struct MountSubjects<'a> {
    /// Its validated declaration.
    pub policy: &'a MountPolicy,
    /// Whether its handler returns a reply to a Core request
    /// (the adapter's `Handler::replies`).
    pub replies: bool,
    /// A JetStream mount's consumer filter subjects; empty for one without a filter (it takes
    /// everything its stream stores) and for a Core mount.
    pub filters: &'a [Wildcard],
}

/// Whether an overlap stops the app from starting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverlapSeverity {
    /// Start-up refuses the mount.
    Refused,
    /// Start-up logs a warning and goes on.
    Warned,
}

/// One overlap found ([`find_overlaps`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The mount it is about.
    pub mount: String,
    /// Whether it is refused or warned about.
    pub severity: OverlapSeverity,
    /// What overlaps, naming the mount, the stream or other mount, and the subjects, and what
    /// would go wrong.
    pub message: String,
}

impl MountSubjects<'_> {
    /// Whether this mount would receive a message published to `subject`, through its Core
    /// subscriptions, or, on JetStream, through its stream (per `streams`) and filters.
    fn receives(&self, subject: &Subject, streams: &[StoredSubjects<'_>]) -> bool {
        match self.policy.descriptor() {
            Descriptor::CoreSubject(own) => own == subject,
            Descriptor::CoreWildcard { wildcard, .. } => {
                wildcard.matches(subject) || self.policy.extra_subscription() == Some(subject)
            }
            Descriptor::JetStream { stream, .. } => {
                let stored = streams
                    .iter()
                    .filter(|s| s.stream == stream)
                    .any(|s| s.subjects.iter().any(|x| x.matches(subject)));
                stored
                    && (self.filters.is_empty() || self.filters.iter().any(|f| f.matches(subject)))
            }
        }
    }

    /// Whether this mount's retries are published as Core copies: a Core mount with
    /// `max_attempts` or a backoff (rules 3 and 18).
    fn copies(&self) -> bool {
        self.policy.copy_subject().is_some()
            && (self.policy.max_attempts().is_some() || self.policy.backoff().is_some())
    }
}

/// The subjects of `stream` that `wildcard` overlaps, joined for a message: `` `a`, `b` ``.
fn overlapping(stream: &StoredSubjects<'_>, overlaps: impl Fn(&Wildcard) -> bool) -> String {
    let mut list = String::new();
    for subject in stream.subjects.iter().filter(|s| overlaps(s)) {
        if !list.is_empty() {
            list.push_str(", ");
        }
        let _ = write!(list, "`{subject}`");
    }
    list
}

/// Every overlap among `mounts` and `streams` (see the module docs), in mount order.
pub fn find_overlaps(mounts: &[MountSubjects<'_>], streams: &[StoredSubjects<'_>]) -> Vec<Overlap> {
    let mut found = Vec::new();
    for (i, mount) in mounts.iter().enumerate() {
        let name = mount.policy.name();
        let mut push = |severity, message: String| {
            found.push(Overlap {
                mount: name.to_owned(),
                severity,
                message,
            });
        };
        let listens = match mount.policy.descriptor() {
            Descriptor::CoreSubject(s) => Wildcard::new(s.as_str()).ok(),
            Descriptor::CoreWildcard { wildcard, .. } => Some(wildcard.clone()),
            Descriptor::JetStream { .. } => None,
        };
        if let Some(listens) = &listens {
            for stream in streams {
                let subjects = overlapping(stream, |x| x.overlaps(listens));
                if subjects.is_empty() {
                    continue;
                }
                match (mount.replies, stream.acknowledges) {
                    (true, true) => push(
                        OverlapSeverity::Refused,
                        format!(
                            "Core mount `{name}` answers requests on `{listens}`, which stream `{}` stores (its subjects {subjects}): a request there gets the stream's publish acknowledgement as its reply before this mount answers, and is stored as a message; listen on a subject no stream stores, or take it out of the stream",
                            stream.stream
                        ),
                    ),
                    (true, false) => push(
                        OverlapSeverity::Warned,
                        format!(
                            "Core mount `{name}` answers requests on `{listens}`, which stream `{}` stores without acknowledging (no_ack; its subjects {subjects}): each request is also stored, and a consumer of the stream handles it again",
                            stream.stream
                        ),
                    ),
                    (false, _) => push(
                        OverlapSeverity::Warned,
                        format!(
                            "Core mount `{name}` listens on `{listens}`, which stream `{}` stores (its subjects {subjects}): each message is handled here and also stored, a request there gets the stream's publish acknowledgement as its first reply (unless the stream has no_ack), and a consumer of the stream handles the message again",
                            stream.stream
                        ),
                    ),
                }
            }
        }
        if mount.copies()
            && let Some(copy) = mount.policy.copy_subject()
            && !listens.as_ref().is_some_and(|l| l.matches(copy))
        {
            for stream in streams {
                let subjects = overlapping(stream, |x| x.matches(copy));
                if subjects.is_empty() {
                    continue;
                }
                // Core mounts that receive the copies are refused below, by name.
                let consumer = mounts.iter().find(|other| {
                    other.policy.name() != name
                        && matches!(other.policy.descriptor(), Descriptor::JetStream { .. })
                        && other.receives(copy, streams)
                });
                match consumer {
                    Some(other) => push(
                        OverlapSeverity::Refused,
                        format!(
                            "Core mount `{name}` publishes its copies to `{copy}`, which stream `{}` stores (its subjects {subjects}) and JetStream mount `{}` consumes: each retry would be handled again there; name a copy subject no stream stores",
                            stream.stream,
                            other.policy.name()
                        ),
                    ),
                    None => push(
                        OverlapSeverity::Warned,
                        format!(
                            "Core mount `{name}` publishes its copies to `{copy}`, which stream `{}` stores (its subjects {subjects}): every retry is stored there too",
                            stream.stream
                        ),
                    ),
                }
            }
        }
        if mount.copies()
            && let Some(copy) = mount.policy.copy_subject()
        {
            for other in mounts.iter().filter(|o| o.policy.name() != name) {
                if matches!(other.policy.descriptor(), Descriptor::JetStream { .. }) {
                    continue;
                }
                if other.receives(copy, streams) {
                    push(
                        OverlapSeverity::Refused,
                        format!(
                            "Core mount `{name}` publishes its copies to `{copy}`, which Core mount `{}` also receives: it would handle them as its own messages; give each mount a copy subject of its own",
                            other.policy.name()
                        ),
                    );
                }
            }
        }
        if let Some(dead_letter) = mount.policy.dead_letter() {
            for stream in streams.iter().filter(|s| !s.acknowledges) {
                let subjects = overlapping(stream, |x| x.matches(dead_letter));
                if !subjects.is_empty() {
                    push(
                        OverlapSeverity::Refused,
                        format!(
                            "mount `{name}` publishes its dead letters to `{dead_letter}`, which stream `{}` stores without acknowledging (no_ack; its subjects {subjects}): a dead letter is settled only once its stream confirms it (rule 8), so each would be tried again for ever; store dead letters in a stream that acknowledges",
                            stream.stream
                        ),
                    );
                }
            }
            for (j, other) in mounts.iter().enumerate() {
                if i == j || !other.receives(dead_letter, streams) {
                    continue;
                }
                let how = match other.policy.descriptor() {
                    Descriptor::JetStream { stream, .. } => {
                        format!(
                            "JetStream mount `{}` consumes it from stream `{stream}`",
                            other.policy.name()
                        )
                    }
                    _ => format!("Core mount `{}` receives it", other.policy.name()),
                };
                push(
                    OverlapSeverity::Refused,
                    format!(
                        "mount `{name}` publishes its dead letters to `{dead_letter}`, and {how}: they would be handled again as new work; give the dead letters a subject no mount receives"
                    ),
                );
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::MountDeclaration;

    fn w(s: &str) -> Wildcard {
        Wildcard::new(s).expect("valid")
    }

    fn core(name: &str, subject: &str) -> MountPolicy {
        MountDeclaration::core_subject(name, subject)
            .validate()
            .expect("valid")
    }

    fn view(policy: &MountPolicy, replies: bool) -> MountSubjects<'_> {
        MountSubjects {
            policy,
            replies,
            filters: &[],
        }
    }

    #[test]
    fn a_replying_core_mount_under_a_stream_is_refused_and_another_warned() {
        let status = core("status", "payments.status");
        let tap = core("tap", "payments.new");
        let subjects = [w("payments.*")];
        let streams = [StoredSubjects {
            stream: "PAYMENTS",
            subjects: &subjects,
            acknowledges: true,
        }];
        let found = find_overlaps(&[view(&status, true), view(&tap, false)], &streams);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].mount, "status");
        assert_eq!(found[0].severity, OverlapSeverity::Refused);
        for part in [
            "`status`",
            "`payments.status`",
            "`PAYMENTS`",
            "`payments.*`",
            "acknowledgement",
        ] {
            assert!(
                found[0].message.contains(part),
                "{part}: {}",
                found[0].message
            );
        }
        assert_eq!(found[1].mount, "tap");
        assert_eq!(found[1].severity, OverlapSeverity::Warned);
    }

    #[test]
    fn subjects_no_stream_stores_are_fine() {
        let status = core("status", "status.payments");
        let subjects = [w("payments.*"), w("refunds.>")];
        let streams = [StoredSubjects {
            stream: "PAYMENTS",
            subjects: &subjects,
            acknowledges: true,
        }];
        assert!(find_overlaps(&[view(&status, true)], &streams).is_empty());
    }

    #[test]
    fn copies_stored_and_consumed_by_a_jetstream_mount_are_refused() {
        let region = MountDeclaration::core_wildcard("region", "region.*.in", Some("retry.region"))
            .max_attempts(3)
            .validate()
            .expect("valid");
        let worker = MountDeclaration::jetstream("worker", "RETRIES", "w")
            .validate()
            .expect("valid");
        let subjects = [w("retry.>")];
        let streams = [StoredSubjects {
            stream: "RETRIES",
            subjects: &subjects,
            acknowledges: true,
        }];
        let found = find_overlaps(&[view(&region, false), view(&worker, false)], &streams);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].severity, OverlapSeverity::Refused);
        assert!(
            found[0].message.contains("`worker`"),
            "{}",
            found[0].message
        );
        // Only stored: a warning.
        let found = find_overlaps(&[view(&region, false)], &streams);
        assert_eq!(found[0].severity, OverlapSeverity::Warned);
        // A filter that leaves the copies out: only stored.
        let filters = [w("retry.other")];
        let filtered = MountSubjects {
            policy: &worker,
            replies: false,
            filters: &filters,
        };
        let found = find_overlaps(&[view(&region, false), filtered], &streams);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].severity, OverlapSeverity::Warned);
    }

    #[test]
    fn a_mount_without_retries_publishes_no_copies() {
        let region = MountDeclaration::core_wildcard("region", "region.*.in", Some("retry.region"))
            .validate()
            .expect("valid");
        let subjects = [w("retry.>")];
        let streams = [StoredSubjects {
            stream: "RETRIES",
            subjects: &subjects,
            acknowledges: true,
        }];
        assert!(find_overlaps(&[view(&region, false)], &streams).is_empty());
    }

    #[test]
    fn copies_another_core_mount_receives_are_refused() {
        let a = MountDeclaration::core_wildcard("a", "a.*", Some("shared.retry"))
            .max_attempts(2)
            .validate()
            .expect("valid");
        let b = core("b", "shared.retry");
        let found = find_overlaps(&[view(&a, false), view(&b, false)], &[]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].mount, "a");
        assert_eq!(found[0].severity, OverlapSeverity::Refused);
        assert!(
            found[0].message.contains("Core mount `b`"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn dead_letters_another_mount_takes_as_work_are_refused() {
        let orders = MountDeclaration::jetstream("orders", "ORDERS", "worker")
            .max_attempts(3)
            .dead_letter("events.dead")
            .validate()
            .expect("valid");
        let events = MountDeclaration::jetstream("events", "EVENTS", "e")
            .validate()
            .expect("valid");
        let tap = core("tap", "audit.dead");
        let events_subjects = [w("events.>")];
        let streams = [StoredSubjects {
            stream: "EVENTS",
            subjects: &events_subjects,
            acknowledges: true,
        }];
        let found = find_overlaps(&[view(&orders, false), view(&events, false)], &streams);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].severity, OverlapSeverity::Refused);
        for part in [
            "`orders`",
            "`events.dead`",
            "JetStream mount `events`",
            "`EVENTS`",
        ] {
            assert!(
                found[0].message.contains(part),
                "{part}: {}",
                found[0].message
            );
        }
        // A Core mount listening on a dead-letter subject.
        let audited = MountDeclaration::core_subject("audited", "audit.in")
            .max_attempts(2)
            .dead_letter("audit.dead")
            .validate()
            .expect("valid");
        let found = find_overlaps(&[view(&audited, false), view(&tap, false)], &[]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].message.contains("Core mount `tap` receives it"),
            "{}",
            found[0].message
        );
        // Dead letters stored where nobody consumes them: nothing to say.
        let dlq_subjects = [w("dlq.>")];
        let dlq = [StoredSubjects {
            stream: "DLQ",
            subjects: &dlq_subjects,
            acknowledges: true,
        }];
        let stored_only = MountDeclaration::jetstream("orders", "ORDERS", "worker")
            .max_attempts(3)
            .dead_letter("dlq.orders")
            .validate()
            .expect("valid");
        assert!(find_overlaps(&[view(&stored_only, false), view(&events, false)], &dlq).is_empty());
    }

    #[test]
    fn a_stream_without_acknowledgements_lets_replies_through_but_never_confirms_dead_letters() {
        let status = core("status", "status.payments");
        let audited = MountDeclaration::jetstream("orders", "ORDERS", "worker")
            .max_attempts(2)
            .dead_letter("audit.dead")
            .validate()
            .expect("valid");
        let subjects = [w(">")];
        let audit = [StoredSubjects {
            stream: "AUDIT",
            subjects: &subjects,
            acknowledges: false,
        }];
        let found = find_overlaps(&[view(&status, true)], &audit);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].severity, OverlapSeverity::Warned);
        assert!(found[0].message.contains("no_ack"), "{}", found[0].message);
        let found = find_overlaps(&[view(&audited, false)], &audit);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].severity, OverlapSeverity::Refused);
        for part in ["`audit.dead`", "`AUDIT`", "no_ack", "rule 8"] {
            assert!(
                found[0].message.contains(part),
                "{part}: {}",
                found[0].message
            );
        }
    }

    #[test]
    fn copies_a_core_mount_receives_are_named_as_a_core_mount_even_when_stored() {
        let region = MountDeclaration::core_wildcard("region", "region.*", Some("shared.retry"))
            .max_attempts(2)
            .validate()
            .expect("valid");
        let tap = core("tap", "shared.retry");
        let subjects = [w("shared.>")];
        let streams = [StoredSubjects {
            stream: "SHARED",
            subjects: &subjects,
            acknowledges: true,
        }];
        let found = find_overlaps(&[view(&region, false), view(&tap, false)], &streams);
        let refused: Vec<&Overlap> = found
            .iter()
            .filter(|o| o.severity == OverlapSeverity::Refused)
            .collect();
        assert_eq!(refused.len(), 1, "{found:?}");
        assert!(
            refused[0].message.contains("Core mount `tap`"),
            "{}",
            refused[0].message
        );
        assert!(
            !found
                .iter()
                .any(|o| o.message.contains("JetStream mount `tap`")),
            "{found:?}"
        );
    }
}
