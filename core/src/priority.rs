//! Priority groups (nats-server 2.11+): how the instances of an app that pull one consumer
//! share it, and the server versions that have the consumer features a mount may ask for.
//!
//! A pull consumer with a priority policy names its groups; every pull request names one of
//! them (`"group"` in the `$JS.API.CONSUMER.MSG.NEXT` request), and the policy decides which
//! requests the server serves:
//!
//! - **pinned client** (`pinned_client`): the server pins one client per group and serves
//!   only its requests, which carry the pin id it gave (`"id"`, from the `Nats-Pin-Id` header
//!   of the messages it delivers); the others stand by. When the pinned client makes no
//!   request for the consumer's `priority_timeout`, the server pins another; a request with an
//!   id that is no longer the pin is answered `423 Nats-Pin-Id mismatch`.
//! - **overflow** (`overflow`): a request with `"min_pending": n` is served only while the
//!   consumer has at least `n` messages pending: a standby that helps under a backlog.
//!
//! This module decides, sans-io, what a mount's declaration and the consumer the server has
//! must agree on ([`check_priority`]), and which server version has a feature
//! ([`ServerVersion`], [`ServerFeature`]).

use std::fmt;

/// How a mount's instances share its consumer's messages through a priority group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PriorityPolicy {
    /// One instance at a time receives the group's messages (the consumer's `pinned_client`
    /// policy); another takes over when it stops pulling for the consumer's
    /// `priority_timeout` (killed, or disconnected).
    Pinned,
    /// The instance receives only while the consumer has at least `min_pending` messages
    /// pending (the consumer's `overflow` policy): a standby that helps under a backlog.
    /// `min_pending` 0 means always.
    Overflow {
        /// The pending count (messages not yet delivered) from which this instance's
        /// requests are served.
        min_pending: u64,
    },
}

impl PriorityPolicy {
    /// The consumer's `priority_policy` this policy needs, as the server names it:
    /// `pinned_client` or `overflow`.
    pub fn server_name(self) -> &'static str {
        match self {
            Self::Pinned => "pinned_client",
            Self::Overflow { .. } => "overflow",
        }
    }

    /// Reads what the `--priority-policy` option of a command line says: `pinned`,
    /// `overflow` (no threshold) or `overflow:MIN_PENDING`.
    ///
    /// # Errors
    /// A message naming what is wrong: another word, or a threshold that is not a whole
    /// number.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.split_once(':') {
            None if text == "pinned" => Ok(Self::Pinned),
            None if text == "overflow" => Ok(Self::Overflow { min_pending: 0 }),
            Some(("overflow", n)) => n.parse().map(|min_pending| Self::Overflow { min_pending }).map_err(|_| {
                format!("priority policy `{text}`: the overflow threshold `{n}` is not a whole number of pending messages")
            }),
            _ => Err(format!(
                "priority policy `{text}`: expected `pinned`, `overflow` or `overflow:MIN_PENDING`"
            )),
        }
    }
}

impl fmt::Display for PriorityPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pinned => f.write_str("pinned"),
            Self::Overflow { min_pending } => write!(f, "overflow:{min_pending}"),
        }
    }
}

/// The longest priority group name the server takes: 16 characters.
pub const MAX_GROUP_NAME: usize = 16;

/// Checks a priority group's name as the server does: 1 to [`MAX_GROUP_NAME`] characters of
/// `A-Z a-z 0-9 - _ / =` (nats-server's error 10162 otherwise).
///
/// # Errors
/// A sentence naming the group and the rule.
pub fn check_group_name(group: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '/' | '=');
    if group.is_empty() || group.len() > MAX_GROUP_NAME || !group.chars().all(allowed) {
        return Err(format!(
            "priority group {group:?}: a group name is 1 to {MAX_GROUP_NAME} characters of A-Z, a-z, 0-9, -, _, / and =, as nats-server requires"
        ));
    }
    Ok(())
}

/// The largest overflow threshold the server reads: `min_pending` is a signed 64-bit count
/// there (`i64::MAX`); a larger one has every pull request refused.
pub const MAX_MIN_PENDING: u64 = i64::MAX as u64;

/// What a consumer on the server says of its priority groups: its `priority_policy` as the
/// server names it (`none`, `overflow`, `pinned_client`, `prioritized`, or empty for a
/// server that has none) and its `priority_groups`.
#[derive(Debug, Clone, Copy)]
pub struct ConsumerPriority<'a> {
    /// The consumer's `priority_policy`.
    pub policy: &'a str,
    /// The consumer's `priority_groups`.
    pub groups: &'a [String],
}

/// Checks that a mount's priority group (`declared`: its group and policy, or `None`) agrees
/// with the consumer the server has, which is never changed (rule 11).
///
/// # Errors
/// A sentence naming the disagreement, for the start-up error of the mount:
/// - the mount declares a group and the consumer has another policy, or not that group;
/// - the mount declares none and the consumer has a policy (the server refuses a pull
///   request without a group then).
pub fn check_priority(
    declared: Option<(&str, PriorityPolicy)>,
    consumer: ConsumerPriority<'_>,
) -> Result<(), String> {
    let has_policy = !matches!(consumer.policy, "" | "none");
    let has = || {
        if has_policy {
            format!(
                "priority policy `{}` with groups {:?}",
                consumer.policy, consumer.groups
            )
        } else {
            "no priority policy".to_owned()
        }
    };
    match declared {
        None if has_policy => Err(format!(
            "the consumer has {}: the server refuses a pull request that names no group; declare the group with Mount::priority_group",
            has()
        )),
        None => Ok(()),
        Some((group, policy)) => {
            if consumer.policy == policy.server_name() && consumer.groups.iter().any(|g| g == group)
            {
                Ok(())
            } else {
                Err(format!(
                    "the consumer has {}, not the mount's group `{group}` with policy `{}`: an existing consumer is never changed; change the mount's priority group, or the consumer",
                    has(),
                    policy.server_name()
                ))
            }
        }
    }
}

/// A consumer feature that not every nats-server has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerFeature {
    /// Priority groups on pull consumers (pinned client, overflow): 2.11.
    PriorityGroups,
    /// Pausing a consumer (`$JS.API.CONSUMER.PAUSE`): 2.11.
    ConsumerPause,
}

impl ServerFeature {
    /// The first nats-server version that has it, as `(major, minor)`.
    pub fn since(self) -> (u64, u64) {
        match self {
            Self::PriorityGroups | Self::ConsumerPause => (2, 11),
        }
    }

    /// What it is called in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::PriorityGroups => "priority groups",
            Self::ConsumerPause => "consumer pause",
        }
    }

    /// "need" or "needs", as its [`name`](Self::name) is plural or not.
    fn needs(self) -> &'static str {
        match self {
            Self::PriorityGroups => "need",
            Self::ConsumerPause => "needs",
        }
    }
}

/// A nats-server version, as its `INFO` announces it (`2.9.10`, `2.11.0-RC.1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion {
    /// The major version.
    pub major: u64,
    /// The minor version.
    pub minor: u64,
    /// The patch version (0 when absent).
    pub patch: u64,
}

impl ServerVersion {
    /// Reads `major.minor[.patch][-suffix]`; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let core = text.trim().trim_start_matches('v');
        let core = core.split(['-', '+']).next().unwrap_or(core);
        let mut parts = core.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        let patch = match parts.next() {
            Some(p) => p.parse().ok()?,
            None => 0,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            major,
            minor,
            patch,
        })
    }

    /// Whether a server of this version has `feature`.
    pub fn has(self, feature: ServerFeature) -> bool {
        (self.major, self.minor) >= feature.since()
    }
}

/// Checks that the server, whose `INFO` announced `announced`, has `feature`, for the error
/// of whatever asked for it.
///
/// # Errors
/// A sentence naming the feature, the version it needs and the server's: `priority groups
/// need nats-server 2.11 or later; the server is 2.9.10`. A version that cannot be read is
/// let through (the server then answers for itself).
pub fn check_server_has(announced: &str, feature: ServerFeature) -> Result<(), String> {
    match ServerVersion::parse(announced) {
        Some(version) if !version.has(feature) => {
            let (major, minor) = feature.since();
            Err(format!(
                "{} {} nats-server {major}.{minor} or later; the server is {announced}",
                feature.name(),
                feature.needs()
            ))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_and_compared() {
        let v = ServerVersion::parse("2.9.10").expect("a version");
        assert_eq!((v.major, v.minor, v.patch), (2, 9, 10));
        assert!(!v.has(ServerFeature::PriorityGroups));
        assert!(
            ServerVersion::parse("2.11.0-RC.1")
                .expect("a version")
                .has(ServerFeature::ConsumerPause)
        );
        assert!(
            ServerVersion::parse("2.15.1")
                .expect("a version")
                .has(ServerFeature::PriorityGroups)
        );
        assert!(
            ServerVersion::parse("3.0")
                .expect("a version")
                .has(ServerFeature::PriorityGroups)
        );
        assert_eq!(ServerVersion::parse("two"), None);
        assert_eq!(ServerVersion::parse("2.x.1"), None);
    }

    #[test]
    fn an_old_server_is_refused_naming_its_version() {
        let e = check_server_has("2.9.10", ServerFeature::PriorityGroups).expect_err("refused");
        assert_eq!(
            e,
            "priority groups need nats-server 2.11 or later; the server is 2.9.10"
        );
        assert!(check_server_has("2.11.0", ServerFeature::ConsumerPause).is_ok());
        assert!(check_server_has("garbage", ServerFeature::ConsumerPause).is_ok());
    }

    #[test]
    fn policies_are_read_from_the_command_line() {
        assert_eq!(PriorityPolicy::parse("pinned"), Ok(PriorityPolicy::Pinned));
        assert_eq!(
            PriorityPolicy::parse("overflow:25"),
            Ok(PriorityPolicy::Overflow { min_pending: 25 })
        );
        assert_eq!(
            PriorityPolicy::parse("overflow"),
            Ok(PriorityPolicy::Overflow { min_pending: 0 })
        );
        assert!(
            PriorityPolicy::parse("overflow:many")
                .expect_err("refused")
                .contains("`many` is not a whole number")
        );
        assert!(
            PriorityPolicy::parse("sticky")
                .expect_err("refused")
                .contains("expected `pinned`")
        );
    }

    #[test]
    fn group_names_follow_the_servers_rule() {
        for good in ["workers", "a", "A-b_c/d=e", "0123456789abcdef"] {
            assert!(check_group_name(good).is_ok(), "{good}");
        }
        for bad in ["", "a.b", "a b", "*", "ü", "0123456789abcdefg", "a\nb"] {
            let e = check_group_name(bad).expect_err("refused");
            assert!(e.contains("1 to 16 characters"), "{e}");
        }
    }

    #[test]
    fn the_mount_and_the_consumer_must_agree() {
        let groups = ["jobs".to_owned()];
        let pinned = ConsumerPriority {
            policy: "pinned_client",
            groups: &groups,
        };
        let none = ConsumerPriority {
            policy: "none",
            groups: &[],
        };
        assert!(check_priority(Some(("jobs", PriorityPolicy::Pinned)), pinned).is_ok());
        assert!(check_priority(None, none).is_ok());
        let e =
            check_priority(Some(("other", PriorityPolicy::Pinned)), pinned).expect_err("refused");
        assert!(e.contains("not the mount's group `other`"), "{e}");
        let e = check_priority(
            Some(("jobs", PriorityPolicy::Overflow { min_pending: 1 })),
            pinned,
        )
        .expect_err("refused");
        assert!(e.contains("priority policy `pinned_client`"), "{e}");
        let e = check_priority(Some(("jobs", PriorityPolicy::Pinned)), none).expect_err("refused");
        assert!(e.contains("has no priority policy"), "{e}");
        let e = check_priority(None, pinned).expect_err("refused");
        assert!(e.contains("names no group"), "{e}");
    }
}
