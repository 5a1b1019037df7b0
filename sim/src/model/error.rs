//! What the model refuses, and why.

use crate::model::ids::{ConnectionId, SubscriptionId};

/// Why the modelled server refused an operation. Every variant names what it refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A subject or subscription subject that NATS would refuse.
    #[error("subject `{subject}` is not valid: {reason}")]
    Subject {
        /// The subject as given.
        subject: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The connection was never made, or it is closed.
    #[error("connection {0} is closed or was never made")]
    NoConnection(ConnectionId),
    /// The subscription does not exist (or its connection closed).
    #[error("subscription {0} does not exist")]
    NoSubscription(SubscriptionId),
    /// The message is larger than the server's `max_payload` (what async-nats refuses
    /// before sending: `PublishErrorKind::MaxPayloadExceeded`).
    #[error(
        "a message of {size} bytes (payload and headers) exceeds the server's max_payload of {max_payload} bytes"
    )]
    MaxPayload {
        /// The payload's and headers' size, in bytes.
        size: usize,
        /// The server's limit, in bytes.
        max_payload: usize,
    },
    /// A publish failed on purpose, by [`Faults::fail_publishes`](crate::model::faults::Faults::fail_publishes).
    #[error("publish to `{subject}` failed (fault injected)")]
    PublishFailed {
        /// The subject of the publish.
        subject: String,
    },
    /// No stream of that name.
    #[error("stream `{0}` not found")]
    StreamNotFound(String),
    /// A stream of that name exists with another configuration.
    #[error("stream `{0}` already exists with a different configuration")]
    StreamExists(String),
    /// A stream's subjects overlap another stream's (nats-server refuses such a stream).
    #[error("stream `{stream}`: subject `{subject}` overlaps stream `{other}`")]
    SubjectsOverlap {
        /// The stream refused.
        stream: String,
        /// Its subject that overlaps.
        subject: String,
        /// The stream it overlaps.
        other: String,
    },
    /// No consumer of that name on the stream.
    #[error("consumer `{consumer}` not found on stream `{stream}`")]
    ConsumerNotFound {
        /// The stream.
        stream: String,
        /// The consumer.
        consumer: String,
    },
    /// A consumer of that name exists with another configuration.
    #[error(
        "consumer `{consumer}` already exists on stream `{stream}` with a different configuration"
    )]
    ConsumerExists {
        /// The stream.
        stream: String,
        /// The consumer.
        consumer: String,
    },
    /// A setting the model does not implement: refused rather than silently ignored.
    #[error("{what}: {setting} is not modelled by the simulator")]
    NotModelled {
        /// The stream or consumer.
        what: String,
        /// The setting and its value.
        setting: String,
    },
    /// A setting nats-server would refuse.
    #[error("{what}: {problem}")]
    InvalidConfig {
        /// The stream or consumer.
        what: String,
        /// What is wrong.
        problem: String,
    },
    /// A stream with `DiscardPolicy::New` is full: the publish is refused.
    #[error("stream `{0}`: maximum messages exceeded")]
    StreamFull(String),
    /// A consumer a work-queue stream cannot have ([`WorkQueueRule`] says which rule).
    #[error("consumer `{consumer}` on stream `{stream}`: {rule}")]
    WorkQueue {
        /// The stream.
        stream: String,
        /// The consumer.
        consumer: String,
        /// The rule it breaks.
        rule: WorkQueueRule,
    },
    /// Priority settings nats-server 2.11+ refuses ([`PriorityRule`] says which rule).
    #[error("consumer `{consumer}` on stream `{stream}`: {rule}")]
    Priority {
        /// The stream.
        stream: String,
        /// The consumer.
        consumer: String,
        /// The rule they break.
        rule: PriorityRule,
    },
    /// A publish directive (`Nats-Expected-…`) the stream does not meet: nothing is stored.
    #[error("stream `{stream}`: {header}: {problem}")]
    WrongExpectation {
        /// The stream.
        stream: String,
        /// The header.
        header: &'static str,
        /// What nats-server says of it (`wrong last sequence: 2`, …).
        problem: String,
    },
    /// A message over a stream's `max_message_size` (payload and headers), which it does not
    /// store.
    #[error(
        "stream `{stream}`: a message of {size} bytes exceeds its max_message_size of {max_message_size} bytes"
    )]
    MessageTooLarge {
        /// The stream.
        stream: String,
        /// The message's size in bytes, payload and headers.
        size: usize,
        /// The stream's `max_message_size`.
        max_message_size: i32,
    },
}

/// The rules nats-server keeps for a work-queue stream's consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkQueueRule {
    /// Its consumers acknowledge explicitly (error code 10098).
    #[error("workqueue stream requires explicit ack")]
    RequiresExplicitAck,
    /// At most one consumer without a filter (10099).
    #[error("multiple non-filtered consumers not allowed on workqueue stream")]
    MultipleUnfiltered,
    /// Filters that do not overlap (10100).
    #[error("filtered consumer not unique on workqueue stream")]
    NotUnique,
}

impl WorkQueueRule {
    /// nats-server's error code for it.
    pub fn err_code(self) -> u64 {
        match self {
            Self::RequiresExplicitAck => 10098,
            Self::MultipleUnfiltered => 10099,
            Self::NotUnique => 10100,
        }
    }
}

/// The rules nats-server 2.11+ keeps for a consumer's priority settings; each displays as the
/// server's own description.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PriorityRule {
    /// A priority policy needs a group (10159).
    #[error("Setting PriorityPolicy requires at least one PriorityGroup to be set")]
    PolicyWithoutGroup,
    /// A group name may not be empty (10161).
    #[error("Group name cannot be an empty string")]
    EmptyGroupName,
    /// A group name is 1 to 16 of `A-Z a-z 0-9 - _ / =` (10162).
    #[error(
        "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters"
    )]
    InvalidGroupName,
    /// Groups without a policy (10196).
    #[error("consumer can not have priority groups when policy is none")]
    GroupsWithPolicyNone,
    /// `priority_timeout` without a policy (10197).
    #[error("PinnedTTL cannot be set when PriorityPolicy is none")]
    TimeoutWithPolicyNone,
    /// `CONSUMER.UNPIN` for a group the consumer does not have (10160).
    #[error("Provided priority group does not exist for this consumer")]
    UnknownGroup,
}

impl PriorityRule {
    /// nats-server's error code for it.
    pub fn err_code(self) -> u64 {
        match self {
            Self::PolicyWithoutGroup => 10159,
            Self::UnknownGroup => 10160,
            Self::EmptyGroupName => 10161,
            Self::InvalidGroupName => 10162,
            Self::GroupsWithPolicyNone => 10196,
            Self::TimeoutWithPolicyNone => 10197,
        }
    }
}
