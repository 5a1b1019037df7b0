//! A consumer's configuration, as nats-server takes it: checked and its defaults filled in at
//! creation, compared for a create that asks for the same again, and changed by an update.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PriorityPolicy, pull::Config};
use ruststream_settlement::Wildcard;

use crate::model::consumer::{
    Consumer, DEFAULT_MAX_ACK_PENDING, DEFAULT_MAX_WAITING, SERVER_DEFAULT_ACK_WAIT, Sequences,
};
use crate::model::error::{PriorityRule, SimError};
use crate::model::stream::Stream;

impl Consumer {
    /// A consumer on `stream`, checked as nats-server checks it, its defaults filled in.
    pub(crate) fn new(stream: &Stream, mut config: Config, v2_9: bool) -> Result<Self, SimError> {
        let name = config
            .durable_name
            .clone()
            .or_else(|| config.name.clone())
            .unwrap_or_default();
        let what = format!("consumer `{name}` on stream `{}`", stream.name());
        let invalid = |problem: String| SimError::InvalidConfig {
            what: what.clone(),
            problem,
        };
        let not_modelled = |setting: String| SimError::NotModelled {
            what: what.clone(),
            setting,
        };
        if name.is_empty() {
            return Err(invalid(
                "the simulator needs a durable_name or name for every consumer".to_owned(),
            ));
        }
        if name.contains(|c: char| c == '.' || c == '*' || c == '>' || c.is_whitespace()) {
            return Err(invalid(format!(
                "consumer name `{name}` may not contain `.`, `*`, `>` or whitespace"
            )));
        }
        if config.headers_only {
            return Err(not_modelled("headers_only".to_owned()));
        }
        if config.rate_limit > 0 {
            return Err(not_modelled(format!("rate_limit {}", config.rate_limit)));
        }
        if config.replay_policy != async_nats::jetstream::consumer::ReplayPolicy::Instant {
            return Err(not_modelled(format!(
                "replay_policy {:?}",
                config.replay_policy
            )));
        }
        if !matches!(
            config.ack_policy,
            AckPolicy::Explicit | AckPolicy::None | AckPolicy::All
        ) {
            return Err(not_modelled(format!("ack_policy {:?}", config.ack_policy)));
        }
        let next_sequence = match config.deliver_policy {
            DeliverPolicy::All => 1,
            DeliverPolicy::New => stream.last_sequence() + 1,
            DeliverPolicy::ByStartSequence { start_sequence } => start_sequence.max(1),
            other => return Err(not_modelled(format!("deliver_policy {other:?}"))),
        };
        let mut filters = Vec::new();
        for subject in filter_subjects(&config) {
            let filter = Wildcard::new(&subject).map_err(|e| SimError::Subject {
                subject: subject.clone(),
                reason: e.to_string(),
            })?;
            if !stream.subjects().iter().any(|s| s.overlaps(&filter)) {
                return Err(invalid(format!(
                    "filter subject `{subject}` does not match any of the stream's subjects"
                )));
            }
            filters.push(filter);
        }
        if config.max_deliver == 0 || config.max_deliver < -1 {
            config.max_deliver = -1;
        }
        if config.ack_wait.is_zero() {
            config.ack_wait = SERVER_DEFAULT_ACK_WAIT;
        }
        if let Some(first) = config.backoff.first() {
            // nats-server 2.9 wants `max_deliver` set and above the length; current servers
            // (2.10.14 on) also take no limit, or one equal to the length.
            let length = config.backoff.len() as i64;
            let refused = match v2_9 {
                true => config.max_deliver == -1 || length >= config.max_deliver,
                false => config.max_deliver != -1 && length > config.max_deliver,
            };
            if refused {
                return Err(invalid(
                    "max deliver is required to be > length of backoff values".to_owned(),
                ));
            }
            config.ack_wait = *first;
        }
        if config.max_ack_pending == 0 {
            config.max_ack_pending = DEFAULT_MAX_ACK_PENDING;
        }
        if config.max_waiting <= 0 {
            config.max_waiting = DEFAULT_MAX_WAITING;
        }
        if v2_9 {
            // 2.9 knows neither priority groups nor pauses: it ignores the fields, and
            // does not give them back.
            config.priority_policy = PriorityPolicy::None;
            config.priority_groups.clear();
            config.priority_timeout = Duration::ZERO;
            config.pause_until = None;
        } else {
            check_priority(&mut config).map_err(|rule| match rule {
                Ok(rule) => SimError::Priority {
                    stream: stream.name().to_owned(),
                    consumer: name.clone(),
                    rule,
                },
                Err(setting) => not_modelled(setting),
            })?;
        }
        Ok(Self {
            config,
            name,
            filters,
            next_sequence,
            last_consumer_sequence: 0,
            last_delivered_sequence: next_sequence - 1,
            pending: BTreeMap::new(),
            redelivered: BTreeMap::new(),
            redeliver: BTreeSet::new(),
            ack_floor: Sequences {
                consumer_sequence: 0,
                stream_sequence: next_sequence - 1,
            },
            waiting: VecDeque::new(),
            exceeded: Vec::new(),
            resume_at: None,
            pin: None,
            pins: 0,
            v2_9,
        })
    }

    /// Whether an existing consumer's configuration is the one asked for again (what
    /// nats-server calls an idempotent create).
    pub(crate) fn same_config(&self, stream: &Stream, config: &Config) -> bool {
        Self::new(stream, config.clone(), self.v2_9).is_ok_and(|other| other.config == self.config)
    }

    /// Takes `config` (checked and filled in by [`new`](Self::new) as `updated`) where it
    /// changes only what nats-server lets an update change and the model follows: `ack_wait`,
    /// `BackOff`, `max_deliver`, `max_ack_pending`, `max_waiting`, the description,
    /// `inactive_threshold`, `pause_until` (the server sets the pause from it). Pending deliveries keep their delivery time and take
    /// the new wait, as the server's next redelivery check reads them.
    ///
    /// # Errors
    /// [`SimError::NotModelled`] naming the other settings when any other changes.
    pub(crate) fn update(&mut self, updated: Consumer) -> Result<(), SimError> {
        let new = updated.config;
        let mut unchanged = self.config.clone();
        unchanged.ack_wait = new.ack_wait;
        unchanged.backoff = new.backoff.clone();
        unchanged.max_deliver = new.max_deliver;
        unchanged.max_ack_pending = new.max_ack_pending;
        unchanged.max_waiting = new.max_waiting;
        unchanged.description = new.description.clone();
        unchanged.inactive_threshold = new.inactive_threshold;
        unchanged.pause_until = new.pause_until;
        if unchanged != new {
            return Err(SimError::NotModelled {
                what: format!("consumer `{}`", self.name),
                setting: "an update of a setting other than ack_wait, backoff, max_deliver, \
                    max_ack_pending, max_waiting, description, inactive_threshold or pause_until"
                    .to_owned(),
            });
        }
        let before: Vec<(u64, Duration)> = self
            .pending
            .keys()
            .map(|s| (*s, self.wait(self.deliveries(*s) - 1)))
            .collect();
        self.config = new;
        for (sequence, old_wait) in before {
            let wait = self.wait(self.deliveries(sequence) - 1);
            if let Some(p) = self.pending.get_mut(&sequence) {
                let delivered_at = p.deadline.checked_sub(old_wait).unwrap_or(p.deadline);
                p.deadline = delivered_at + wait;
            }
        }
        Ok(())
    }
}

/// Checks a consumer's priority settings as nats-server 2.11+ does (`checkConsumerCfg`), and
/// fills in the default `priority_timeout` (2 minutes) of a pinned-client consumer. `Err(Ok)`:
/// a rule the server refuses the configuration by; `Err(Err)`: a setting the model does not
/// follow.
fn check_priority(config: &mut Config) -> Result<(), Result<PriorityRule, String>> {
    if config.priority_policy == PriorityPolicy::None {
        if !config.priority_groups.is_empty() {
            return Err(Ok(PriorityRule::GroupsWithPolicyNone));
        }
        if !config.priority_timeout.is_zero() {
            return Err(Ok(PriorityRule::TimeoutWithPolicyNone));
        }
        return Ok(());
    }
    if config.priority_groups.is_empty() {
        return Err(Ok(PriorityRule::PolicyWithoutGroup));
    }
    for group in &config.priority_groups {
        if group.is_empty() {
            return Err(Ok(PriorityRule::EmptyGroupName));
        }
        let valid = group.len() <= 16
            && group
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '=' | '-'));
        if !valid {
            return Err(Ok(PriorityRule::InvalidGroupName));
        }
    }
    if config.priority_policy == PriorityPolicy::PinnedClient {
        if config.priority_groups.len() > 1 {
            // The server keeps one pin for the consumer, whatever the group.
            return Err(Err(format!(
                "pinned_client with more than one priority group ({:?})",
                config.priority_groups
            )));
        }
        if config.priority_timeout.is_zero() {
            config.priority_timeout = DEFAULT_PRIORITY_TIMEOUT;
        }
    }
    Ok(())
}

/// nats-server's `priority_timeout` for a pinned-client consumer that sets none.
pub(crate) const DEFAULT_PRIORITY_TIMEOUT: Duration = Duration::from_secs(120);

/// The consumer's filter subjects: `filter_subject`, and `filter_subjects` where async-nats
/// has the field (its `server_2_10` feature, which this crate does not choose: read through
/// the configuration's JSON form, which has it whenever the field exists).
fn filter_subjects(config: &Config) -> Vec<String> {
    let mut subjects: Vec<String> = std::iter::once(config.filter_subject.clone())
        .filter(|s| !s.is_empty())
        .collect();
    if let Ok(json) = serde_json::to_value(config)
        && let Some(more) = json.get("filter_subjects").and_then(|v| v.as_array())
    {
        subjects.extend(more.iter().filter_map(|v| v.as_str().map(str::to_owned)));
    }
    subjects
}
