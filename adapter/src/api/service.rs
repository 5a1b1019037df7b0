//! An app declared as a NATS service ([`Service`]), as the micro protocol sees it: its name,
//! version, description and metadata, and the rules they must keep.

use std::collections::BTreeMap;

/// The queue group a Core mount of a service app subscribes in when it names none of its own:
/// `"q"`, the micro protocol's default (ADR-32), so that several instances of one service share
/// its requests. A mount's own [`queue_group`](crate::Mount::queue_group) wins.
pub const DEFAULT_SERVICE_QUEUE_GROUP: &str = "q";

/// The longest service name [`App::start`](crate::App::start) accepts, in bytes: 256. The
/// name is in the `$SRV` subjects the app subscribes to (`$SRV.STATS.<name>.<id>`, 34 bytes
/// more with a 22-byte instance id), each sent in one `SUB` line that must fit the server's
/// `max_control_line` (4096 bytes by default); 256 keeps far below it and within what
/// discovery tools show.
pub const MAX_SERVICE_NAME_BYTES: usize = 256;

/// The longest service description [`App::start`](crate::App::start) accepts, in bytes: 4096.
/// It is in every `$SRV.INFO` answer, which must fit one NATS message (the server's
/// `max_payload`, 1 MB by default).
pub const MAX_SERVICE_DESCRIPTION_BYTES: usize = 4096;

/// The most service metadata [`App::start`](crate::App::start) accepts: its keys and values
/// together, in bytes: 65,536 (64 KiB). The metadata is in every `$SRV` answer, `PING`
/// included; with the other limits, what the service answers stays far below the server's
/// default `max_payload` of 1 MB (the endpoints' subjects and names are bounded by the
/// server's control line, and `last_error` by [`MAX_LAST_ERROR_BYTES`](crate::MAX_LAST_ERROR_BYTES)).
pub const MAX_SERVICE_METADATA_BYTES: usize = 65_536;

/// An app declared as a NATS service (the micro protocol, ADR-32), given to
/// [`App::service`](crate::App::service): discovery tools (`nats micro ls`, `nats micro info`,
/// `nats micro stats`, or any client of the protocol) then see the service, its endpoints and
/// their counts.
///
/// ```
/// # use ruststream_adapter::Service;
/// let service = Service::new("orders", "1.2.0")
///     .description("takes orders")
///     .metadata("team", "payments");
/// assert_eq!(service.name(), "orders");
/// ```
///
/// What the app then does:
/// - it answers `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS`, each also with `.<name>` and
///   `.<name>.<id>` after it (one subscription each, nine in all), from start-up until its
///   shutdown begins, on a second client of its own connected from the app's URL and options:
///   a message on `$SRV` that brings a client down costs only that client a reconnection
///   (logged at warn), never the app one of its recoveries (rule 20). An app made
///   [`App::with_client`](crate::App::with_client) answers on that client instead, following
///   the supervisor's replacements: there such a message counts as a loss of the app's client;
/// - a flood of `$SRV` requests is bounded: each subscription holds at most 16 unanswered
///   (async-nats drops the rest on the responder's own client), and at most 500 are answered
///   a second, the rest dropped and logged at warn at most once per 10 s.
///   The `id` is a fresh NUID per started app, so that several instances of one service answer
///   `$SRV.PING.<name>` each with its own id;
/// - every Core mount ([`Mount::core_subject`](crate::Mount::core_subject), and
///   [`Mount::core_wildcard`](crate::Mount::core_wildcard) with its wildcard as its subject) is
///   one of its endpoints, named as the mount, unless the mount opts out with
///   [`Mount::service_endpoint`](crate::Mount::service_endpoint). JetStream mounts are not
///   endpoints: they answer no requests;
/// - an endpoint without a [`queue_group`](crate::Mount::queue_group) of its own subscribes in
///   [`DEFAULT_SERVICE_QUEUE_GROUP`] (`"q"`), as the micro protocol's endpoints do;
/// - each endpoint's stats come from what the runtime counts for its mount, since the app
///   started: `num_requests`, handler runs that ended; `num_errors`, those that ended in
///   error (see [`Mount::service_endpoint`](crate::Mount::service_endpoint) for what counts),
///   with `last_error` the text of the last; `processing_time`, the handlers' total run time
///   (each from its call to its result), and `average_processing_time`, that over
///   `num_requests`, both in nanoseconds on the wire.
///
/// Nothing is checked until [`App::start`](crate::App::start).
///
/// # Errors
/// [`App::start`](crate::App::start) refuses, with [`StartError::Service`](crate::StartError::Service)
/// naming what is wrong and before it connects, a service whose name is empty or holds
/// anything but `A-Z`, `a-z`, `0-9`, `-` and `_`, or whose version is not a semantic version
/// (`MAJOR.MINOR.PATCH`, with an optional `-pre.release` and `+build`, as semver.org 2.0.0
/// writes it): the rules of the micro protocol. It refuses too a name longer than
/// [`MAX_SERVICE_NAME_BYTES`], a description longer than [`MAX_SERVICE_DESCRIPTION_BYTES`]
/// and metadata whose keys and values together pass [`MAX_SERVICE_METADATA_BYTES`], so that
/// what the service answers always fits a NATS message and its subscriptions the server's
/// control line; and an endpoint (a Core mount that did not opt out) whose name breaks the
/// protocol's rule for endpoint names, the service name's alphabet (`A-Z`, `a-z`, `0-9`,
/// `-`, `_`): rename the mount or opt it out with
/// [`Mount::service_endpoint`](crate::Mount::service_endpoint)`(false)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    name: String,
    version: String,
    pub(crate) description: String,
    pub(crate) metadata: BTreeMap<String, String>,
}

impl Service {
    /// A service named `name` (`A-Z`, `a-z`, `0-9`, `-`, `_`), of the semantic version
    /// `version` (`1.2.0`, `2.0.0-rc.1+build.5`), with no description or metadata.
    pub fn new(name: &str, version: &str) -> Self {
        Self {
            name: name.to_owned(),
            version: version.to_owned(),
            description: String::new(),
            metadata: BTreeMap::new(),
        }
    }

    /// What the service does, for `$SRV.INFO` (empty by default).
    #[must_use]
    pub fn description(mut self, description: &str) -> Self {
        self.description = description.to_owned();
        self
    }

    /// Adds `key: value` to the service's metadata, in every `$SRV` response; a key given
    /// again takes the last value.
    #[must_use]
    pub fn metadata(mut self, key: &str, value: &str) -> Self {
        self.metadata.insert(key.to_owned(), value.to_owned());
        self
    }

    /// The service's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The service's version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// What is wrong with the service's name or version, if anything (see [`Service`]'s
    /// `# Errors`).
    pub(crate) fn problem(&self) -> Option<String> {
        if self.name.len() > MAX_SERVICE_NAME_BYTES {
            return Some(format!(
                "the service name `{}…` is {} bytes: give at most {MAX_SERVICE_NAME_BYTES} (MAX_SERVICE_NAME_BYTES), so that its `$SRV` subscriptions fit the server's control line",
                self.name.chars().take(32).collect::<String>(),
                self.name.len()
            ));
        }
        if !is_protocol_name(&self.name) {
            return Some(format!(
                "the name `{}` is not a service name: give one or more of A-Z, a-z, 0-9, `-` and `_` (the micro protocol's rule)",
                self.name
            ));
        }
        if !is_semver(&self.version) {
            return Some(format!(
                "service `{}`: the version `{}` is not a semantic version: give MAJOR.MINOR.PATCH (`1.2.0`), with an optional `-pre.release` and `+build` (semver.org 2.0.0, the micro protocol's rule)",
                self.name, self.version
            ));
        }
        if self.description.len() > MAX_SERVICE_DESCRIPTION_BYTES {
            return Some(format!(
                "service `{}`: the description is {} bytes: give at most {MAX_SERVICE_DESCRIPTION_BYTES} (MAX_SERVICE_DESCRIPTION_BYTES), so that `$SRV.INFO` answers fit a NATS message",
                self.name,
                self.description.len()
            ));
        }
        let metadata: usize = self.metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
        if metadata > MAX_SERVICE_METADATA_BYTES {
            return Some(format!(
                "service `{}`: the metadata's keys and values are {metadata} bytes together: give at most {MAX_SERVICE_METADATA_BYTES} (MAX_SERVICE_METADATA_BYTES), so that every `$SRV` answer fits a NATS message",
                self.name
            ));
        }
        None
    }
}

/// Whether `name` keeps the micro protocol's alphabet for service and endpoint names: one or
/// more of `A-Z`, `a-z`, `0-9`, `-` and `_`.
pub(crate) fn is_protocol_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Whether `version` is a semantic version as semver.org 2.0.0 defines it (what its
/// suggested regular expression, which the micro protocol's libraries use, accepts).
fn is_semver(version: &str) -> bool {
    let (rest, build) = match version.split_once('+') {
        Some((rest, build)) => (rest, Some(build)),
        None => (version, None),
    };
    let (core, pre) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let numeric = |part: &str| {
        !part.is_empty()
            && part.bytes().all(|b| b.is_ascii_digit())
            && (part == "0" || !part.starts_with('0'))
    };
    let identifier = |part: &str| {
        !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    let parts: Vec<&str> = core.split('.').collect();
    let core_ok = parts.len() == 3 && parts.iter().all(|p| numeric(p));
    // A pre-release identifier is numeric without leading zeros, or alphanumeric with a
    // non-digit somewhere.
    let pre_ok = pre.is_none_or(|pre| {
        pre.split('.')
            .all(|p| identifier(p) && (numeric(p) || p.bytes().any(|b| !b.is_ascii_digit())))
    });
    let build_ok = build.is_none_or(|build| build.split('.').all(identifier));
    core_ok && pre_ok && build_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semantic_versions_are_told_from_others() {
        for good in [
            "0.0.0",
            "1.2.3",
            "10.20.30",
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-0.3.7",
            "1.0.0-x.7.z.92",
            "1.0.0-alpha+001",
            "1.0.0+20130313144700",
            "1.0.0-beta+exp.sha.5114f85",
            "1.0.0--a",
        ] {
            assert!(is_semver(good), "{good} is a semantic version");
        }
        for bad in [
            "",
            "1",
            "1.2",
            "1.2.3.4",
            "01.2.3",
            "1.02.3",
            "1.2.03",
            "v1.2.3",
            "1.2.3-",
            "1.2.3+",
            "1.2.3-01",
            "1.2.3-a..b",
            "1.2.3-a_b",
            "1.2.3+a+b",
            " 1.2.3",
            "1.2.x",
        ] {
            assert!(!is_semver(bad), "{bad:?} is not a semantic version");
        }
    }

    #[test]
    fn names_keep_the_micro_protocol_s_alphabet() {
        assert_eq!(Service::new("orders-v2_X", "1.0.0").problem(), None);
        for bad in ["", "orders.v2", "orders v2", "ordérs", "a*"] {
            let problem = Service::new(bad, "1.0.0").problem().unwrap_or_default();
            assert!(
                problem.contains("is not a service name"),
                "{bad:?}: {problem}"
            );
        }
        let problem = Service::new(&"n".repeat(MAX_SERVICE_NAME_BYTES + 1), "1.0.0")
            .problem()
            .unwrap_or_default();
        assert!(problem.contains("257 bytes"), "{problem}");
        assert_eq!(
            Service::new(&"n".repeat(MAX_SERVICE_NAME_BYTES), "1.0.0").problem(),
            None
        );
        let problem = Service::new("orders", "1.0.0")
            .description(&"d".repeat(MAX_SERVICE_DESCRIPTION_BYTES + 1))
            .problem()
            .unwrap_or_default();
        assert!(problem.contains("description is 4097 bytes"), "{problem}");
        let at_limit = Service::new("orders", "1.0.0").metadata("k", &"v".repeat(65_535));
        assert_eq!(at_limit.problem(), None);
        let problem = at_limit.metadata("l", "").problem().unwrap_or_default();
        assert!(problem.contains("65537 bytes"), "{problem}");
        let problem = Service::new("orders", "1.0").problem().unwrap_or_default();
        assert!(
            problem.contains("`1.0` is not a semantic version"),
            "{problem}"
        );
    }
}
