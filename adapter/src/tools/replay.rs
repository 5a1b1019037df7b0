//! Replaying dead letters: each sent back to where it came from, as it was before it was
//! dead-lettered (the library behind `ruststream dlq replay`).
//!
//! For each dead letter the filter takes, in stream order:
//!
//! 1. **Where to.** `to` when given, else its original subject (`Ruststream-Subject`). A dead
//!    letter without provenance does not say where it came from: it is skipped unless `to` is
//!    given. A dead letter's own subject (the dead-letter subject) is refused as a target,
//!    since the replay would be stored as a dead letter again: that dead letter is skipped
//!    when its provenance names it, and the replay stops when `to` does. (The original
//!    subject may be stored by the dead-letter stream itself, rule 8: a stream that stores
//!    both works.) A dead letter deleted between the selection and its turn (by another
//!    replay or purge) is skipped.
//! 2. **What.** Its payload unchanged, and its headers without what its dead-lettering added
//!    ([`restored_headers`](ruststream_settlement::restored_headers)): provenance, the runtime's
//!    `Nats-Msg-Id`.
//! 3. **How.** Into a stream (one stores the target subject): a JetStream publish carrying a
//!    `Nats-Msg-Id` made from the dead letter ([`replay_msg_id`](ruststream_settlement::replay_msg_id)),
//!    confirmed by the stream's acknowledgement. A replay run again within the target stream's
//!    duplicate window (its `duplicate_window`, 2 minutes by default) is stored once: the
//!    stream answers `duplicate`, counted as [`ReplaySummary::duplicates`]. **Outside the
//!    window it is stored again**: resume with `from_sequence` (the summary names where to),
//!    or use `delete`. Onto a Core subject (no stream stores it): a Core publish, flushed to
//!    the server, which delivers it to the subscribers there are at that moment and confirms
//!    nothing; run again, it is delivered again.
//! 4. **Delete**, when asked: the dead letter is deleted only once a stream has confirmed its
//!    replay (a `duplicate` answer confirms it too: the stream holds it already). A replay onto
//!    a Core subject is never confirmed, so its dead letter is kept.
//!
//! A failure stops the replay at that dead letter: nothing after it is sent, nothing is
//! deleted that was not confirmed, and [`ReplaySummary::stopped_at`] says where to resume.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use async_nats::jetstream::context::{GetStreamByNameErrorKind, PublishErrorKind};
use async_nats::{HeaderMap, HeaderName, HeaderValue, Subject};
use ruststream_settlement::{DeadLetterFilter, MSG_ID_HEADER, replay_msg_id, restored_headers};

use super::dead_letters::{DeadLetter, DeadLetterError, DeadLetters};

/// How to replay.
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// Which dead letters.
    pub filter: DeadLetterFilter,
    /// Send every one to this subject instead of its original subject.
    pub to: Option<ruststream_settlement::Subject>,
    /// Say what would be sent; send and delete nothing.
    pub dry_run: bool,
    /// At most this many replays a second.
    pub rate: Option<NonZeroU32>,
    /// Delete each dead letter once a stream has confirmed its replay.
    pub delete: bool,
    /// Take a stream whose messages carry no mark of a dead letter all the same (see
    /// [`DeadLetters::each`]).
    pub unmarked: bool,
}

/// Where one replay went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// Stored by `stream` at `sequence`; `duplicate` when the stream had stored it already
    /// (an earlier replay within its duplicate window).
    Stored {
        /// The stream that stored it.
        stream: String,
        /// Its sequence there.
        sequence: u64,
        /// Whether it was stored before.
        duplicate: bool,
    },
    /// Published on Core NATS: delivered to whoever subscribed then, confirmed by nobody.
    Core,
    /// Nothing sent (a dry run); `stream` is the stream that would store it (`None`: a Core
    /// publish, unconfirmed, whose dead letter `delete` would keep).
    DryRun {
        /// The stream that stores the target subject, if one does.
        stream: Option<String>,
    },
}

/// What happened to one dead letter.
#[derive(Debug, Clone)]
pub enum ReplayEvent {
    /// Sent (or, in a dry run, would be).
    Replayed {
        /// The dead letter's sequence.
        sequence: u64,
        /// The subject it went to.
        target: String,
        /// Where it went.
        sent: Sent,
        /// Its headers as sent, the replay's `Nats-Msg-Id` included.
        headers: HeaderMap,
        /// Whether its dead letter was deleted.
        deleted: bool,
    },
    /// Not sent, and the replay goes on.
    Skipped {
        /// The dead letter's sequence.
        sequence: u64,
        /// Why.
        why: String,
    },
}

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Dead letters the filter took.
    pub selected: u64,
    /// Stored by a stream for the first time.
    pub stored: u64,
    /// Stored before (a stream answered `duplicate`): replayed already, within its window.
    pub duplicates: u64,
    /// Published on Core NATS, unconfirmed.
    pub core: u64,
    /// Would have been sent (a dry run).
    pub dry_run: u64,
    /// Not sent, with why (sequence, reason).
    pub skipped: Vec<(u64, String)>,
    /// Dead letters deleted after their replay was confirmed.
    pub deleted: u64,
    /// The failure that stopped the replay, if one did: the dead letter's sequence (the one
    /// to resume from: nothing from it on was sent) and what went wrong.
    pub stopped_at: Option<(u64, String)>,
}

impl ReplaySummary {
    /// How to go on after [`stopped_at`](Self::stopped_at): run the same command again with
    /// `--from-seq <sequence>`; `None` when the replay did not stop.
    ///
    /// Nothing after that dead letter was sent; the dead letter itself may have been stored
    /// (a publish whose acknowledgement did not come, a delete that failed after it): sent
    /// again within the target stream's duplicate window, it is stored once.
    pub fn resume_hint(&self) -> Option<String> {
        self.stopped_at.as_ref().map(|(sequence, _)| {
            format!(
                "nothing after dead letter {sequence} was sent; it may itself have been stored (a publish not confirmed, a delete that failed). Run the same command with --from-seq {sequence} within the target stream's duplicate window (2 minutes by default) to go on without storing it twice; later than that, check the target stream first, or go on with --from-seq {}",
                sequence + 1
            )
        })
    }
}

/// A target subject: stored by a stream (named), or not.
#[derive(Debug, Clone)]
enum Target {
    Stream(String),
    Core,
}

impl DeadLetters {
    /// Replays the dead letters `options` select (see the module docs), telling `progress`
    /// about each as it goes; `progress` is first given the number selected.
    ///
    /// # Errors
    /// What selecting returns ([`DeadLetters::each`]): no dead letters, nothing matching, an
    /// unreadable stream. A failure while replaying does not return an error: it stops the
    /// replay and is in [`ReplaySummary::stopped_at`].
    pub async fn replay(
        &self,
        options: &ReplayOptions,
        mut selected: impl FnMut(u64),
        mut progress: impl FnMut(&ReplayEvent),
    ) -> Result<ReplaySummary, DeadLetterError> {
        let sequences = self.select(&options.filter, options.unmarked).await?;
        let mut summary = ReplaySummary {
            selected: sequences.len() as u64,
            ..ReplaySummary::default()
        };
        selected(summary.selected);
        let mut targets: HashMap<String, Target> = HashMap::new();
        let started = Instant::now();
        for (n, sequence) in sequences.into_iter().enumerate() {
            if let Some(rate) = options.rate.filter(|_| !options.dry_run) {
                let due = started + Duration::from_secs_f64(n as f64 / f64::from(rate.get()));
                tokio::time::sleep_until(due.into()).await;
            }
            let dead = match self.get(sequence).await {
                Ok(dead) => dead,
                Err(DeadLetterError::NoSuchDeadLetter { .. }) => {
                    let why = "deleted since it was selected".to_owned();
                    progress(&ReplayEvent::Skipped {
                        sequence,
                        why: why.clone(),
                    });
                    summary.skipped.push((sequence, why));
                    continue;
                }
                Err(e) => {
                    summary.stopped_at = Some((sequence, e.to_string()));
                    return Ok(summary);
                }
            };
            match self
                .replay_one(&dead, options, &mut targets, &mut summary)
                .await
            {
                Ok(event) => progress(&event),
                Err(Stop::Skip(why)) => {
                    progress(&ReplayEvent::Skipped {
                        sequence,
                        why: why.clone(),
                    });
                    summary.skipped.push((sequence, why));
                }
                Err(Stop::Fail(why)) => {
                    summary.stopped_at = Some((sequence, why));
                    return Ok(summary);
                }
            }
        }
        Ok(summary)
    }

    async fn replay_one(
        &self,
        dead: &DeadLetter,
        options: &ReplayOptions,
        targets: &mut HashMap<String, Target>,
        summary: &mut ReplaySummary,
    ) -> Result<ReplayEvent, Stop> {
        let target = match (&options.to, &dead.record.subject) {
            (Some(to), _) => to.as_str().to_owned(),
            (None, Some(subject)) => subject.clone(),
            (None, None) => {
                return Err(Stop::Skip(
                    "it has no provenance (its mount did not ask for it), so it does not say where it came from: replay it with --to SUBJECT".to_owned(),
                ));
            }
        };
        if target == dead.subject {
            let why = format!(
                "`{target}` is the dead-letter subject itself: a replay there would be a dead letter again; replay with --to another subject"
            );
            // Told to (`--to`): every one would fail alike. From its provenance: this one.
            return Err(match options.to {
                Some(_) => Stop::Fail(why),
                None => Stop::Skip(why),
            });
        }
        if ruststream_settlement::Subject::new(&target).is_err() {
            return Err(Stop::Skip(format!(
                "its original subject `{target}` is not a subject one can publish to: replay it with --to SUBJECT"
            )));
        }
        let kind = match targets.get(&target) {
            Some(kind) => kind.clone(),
            None => {
                let kind = self.target(&target).await?;
                targets.insert(target.clone(), kind.clone());
                kind
            }
        };
        let mut headers = HeaderMap::new();
        for (name, value) in restored_headers(dead.headers.iter()) {
            // Every pair came from async-nats, so each converts back; one that did not would
            // be a header the replay cannot carry: the dead letter is skipped, not sent
            // without it.
            let converted = std::str::from_utf8(name)
                .ok()
                .and_then(|n| n.parse::<HeaderName>().ok())
                .zip(
                    std::str::from_utf8(value)
                        .ok()
                        .and_then(|v| v.parse::<HeaderValue>().ok()),
                );
            match converted {
                Some((name, value)) => headers.append(name, value),
                None => {
                    return Err(Stop::Skip(format!(
                        "its header `{}` cannot be published again as it is",
                        String::from_utf8_lossy(name).escape_debug()
                    )));
                }
            }
        }
        if let Target::Stream(_) = kind {
            headers.insert(
                MSG_ID_HEADER,
                replay_msg_id(&self.name, dead.sequence, dead.stored_nanos()).as_str(),
            );
        }
        if options.dry_run {
            summary.dry_run += 1;
            return Ok(ReplayEvent::Replayed {
                sequence: dead.sequence,
                target,
                sent: Sent::DryRun {
                    stream: match &kind {
                        Target::Stream(stream) => Some(stream.clone()),
                        Target::Core => None,
                    },
                },
                headers,
                deleted: false,
            });
        }
        let subject = Subject::from(target.as_str());
        let sent = match kind {
            Target::Stream(_) => {
                let ack = self
                    .js
                    .publish_with_headers(subject, headers.clone(), dead.payload.clone())
                    .await
                    .map_err(|e| match e.kind() {
                        // This one is too large with the replay's id; the next may not be.
                        PublishErrorKind::MaxPayloadExceeded => Stop::Skip(format!(
                            "with the replay's Nats-Msg-Id it exceeds the server's max_payload: replay it by hand ({e})"
                        )),
                        _ => Stop::Fail(format!("replaying to `{target}`: {e}")),
                    })?
                    .await
                    .map_err(|e| {
                        Stop::Fail(format!(
                            "replaying to `{target}`: the stream did not confirm it: {e}"
                        ))
                    })?;
                if ack.duplicate {
                    summary.duplicates += 1;
                } else {
                    summary.stored += 1;
                }
                Sent::Stored {
                    stream: ack.stream,
                    sequence: ack.sequence,
                    duplicate: ack.duplicate,
                }
            }
            Target::Core => {
                let client = self.js.client();
                client
                    .publish_with_headers(subject, headers.clone(), dead.payload.clone())
                    .await
                    .map_err(|e| Stop::Fail(format!("replaying to `{target}`: {e}")))?;
                client
                    .flush()
                    .await
                    .map_err(|e| Stop::Fail(format!("replaying to `{target}`: {e}")))?;
                summary.core += 1;
                Sent::Core
            }
        };
        let deleted = if options.delete && matches!(sent, Sent::Stored { .. }) {
            match self.delete(dead.sequence).await {
                // Deleted by someone else meanwhile: gone all the same.
                Ok(()) | Err(DeadLetterError::NoSuchDeadLetter { .. }) => {
                    summary.deleted += 1;
                    true
                }
                Err(e) => {
                    return Err(Stop::Fail(format!(
                        "replayed and confirmed, but its dead letter was not deleted: {e}"
                    )));
                }
            }
        } else {
            false
        };
        Ok(ReplayEvent::Replayed {
            sequence: dead.sequence,
            target,
            sent,
            headers,
            deleted,
        })
    }

    /// Which stream stores `subject`, if any.
    async fn target(&self, subject: &str) -> Result<Target, Stop> {
        match self.js.stream_by_subject(subject).await {
            Ok(stream) => Ok(Target::Stream(stream)),
            Err(e) if e.kind() == GetStreamByNameErrorKind::NotFound => Ok(Target::Core),
            Err(e) => Err(Stop::Fail(format!(
                "finding which stream stores `{subject}`: {e}"
            ))),
        }
    }
}

/// Why one dead letter was not replayed: skipped (the replay goes on), or failed (it stops).
enum Stop {
    Skip(String),
    Fail(String),
}
