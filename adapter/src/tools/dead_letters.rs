//! Reading a dead-letter stream: listing, showing and deleting its dead letters (the library
//! behind `ruststream dlq`; replaying them is [`replay`](super::replay)).
//!
//! A dead-letter stream is any stream that stores a mount's dead-letter subject. Each of its
//! messages is a dead letter: the delivery as it arrived, with provenance headers when the
//! mount asked for them (rule 19) and, from a JetStream mount, the runtime's `Nats-Msg-Id`
//! (rule 9). What a dead letter says of itself is read by the core
//! ([`DeadLetterRecord`](ruststream_settlement::DeadLetterRecord)).
//!
//! Reading goes through an ordered consumer of the stream's own (ephemeral, in memory, acked
//! by nobody), from the first message the filter can take up to the stream's last message
//! when the read began: dead letters stored meanwhile are left for the next command. Nothing
//! is changed on the stream except by [`DeadLetters::delete`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::{self, consumer::DeliverPolicy, stream::Stream};
use async_nats::{Client, HeaderMap};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use futures_util::StreamExt;
use ruststream_settlement::{DeadLetterFilter, DeadLetterRecord, Headers};
use serde::Deserialize;

/// How long a read waits for the stream's next message before it gives up: 10 s.
pub const READ_STALL: Duration = Duration::from_secs(10);

/// Why a dead-letter command could not do what it was asked. Every message names the stream,
/// the sequence or the filter concerned; none holds a URL or a credential.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeadLetterError {
    /// The name cannot be a stream's (empty, or with whitespace, `.`, `*`, `>`).
    #[error(
        "`{0}` is not a stream name: a stream's name is not empty and has no whitespace, `.`, `*` or `>`"
    )]
    InvalidStreamName(String),
    /// No such stream on the server (for this account, in this domain).
    #[error("no stream `{0}` on this server: check its name (`nats stream ls` lists them)")]
    NoSuchStream(String),
    /// The stream holds messages, and none carries anything the runtime writes on a dead
    /// letter. Dead letters of a Core mount without provenance carry nothing either: pass
    /// `unmarked` to take its messages all the same.
    #[error(
        "stream `{stream}` holds {scanned} message(s) and none is a ruststream dead letter (none carries `Ruststream-` provenance or a dead-letter `Nats-Msg-Id`); if it stores dead letters of mounts without provenance, pass --unmarked"
    )]
    NotDeadLetters {
        /// The stream.
        stream: String,
        /// How many of its messages were read.
        scanned: u64,
    },
    /// A filter was given and no dead letter matches it.
    #[error("no dead letter in `{stream}` matches {filter} ({scanned} read)")]
    NothingMatches {
        /// The stream.
        stream: String,
        /// The filter, in the command line's words.
        filter: String,
        /// How many dead letters were read.
        scanned: u64,
    },
    /// The stream has no message at this sequence.
    #[error(
        "stream `{stream}` has no message {sequence} (never stored, deleted or purged; sequences start at 1)"
    )]
    NoSuchDeadLetter {
        /// The stream.
        stream: String,
        /// The sequence asked for.
        sequence: u64,
    },
    /// The server did not answer as expected; `action` says what was being done.
    #[error("{action}: {source}")]
    Nats {
        /// What was being done (`reading stream DLQ`, …).
        action: String,
        /// What async-nats reported.
        source: async_nats::Error,
    },
}

impl DeadLetterError {
    pub(super) fn nats(action: impl Into<String>, source: impl Into<async_nats::Error>) -> Self {
        Self::Nats {
            action: action.into(),
            source: source.into(),
        }
    }
}

/// One dead letter, as its stream stores it.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    /// Its sequence in the dead-letter stream.
    pub sequence: u64,
    /// When the stream stored it.
    pub stored: SystemTime,
    /// The subject it was stored under (the mount's dead-letter subject).
    pub subject: String,
    /// Its headers: the delivery's own, then provenance and the runtime's `Nats-Msg-Id`,
    /// every value of a repeated name kept in order. Read by [`DeadLetters::get`], in the
    /// order stored; read by [`DeadLetters::each`] (through async-nats, which keeps no order
    /// across names), grouped by name.
    pub headers: Headers,
    /// Its payload: the delivery's, unchanged.
    pub payload: Bytes,
    /// What it says of itself.
    pub record: DeadLetterRecord,
}

impl DeadLetter {
    fn new(
        sequence: u64,
        stored: SystemTime,
        subject: String,
        headers: Headers,
        payload: Bytes,
    ) -> Self {
        let record = DeadLetterRecord::read(headers.iter());
        Self {
            sequence,
            stored,
            subject,
            headers,
            payload,
            record,
        }
    }

    /// When it was stored, in nanoseconds since the Unix epoch (0 before it).
    pub fn stored_nanos(&self) -> u64 {
        nanos(self.stored)
    }
}

/// `time` in nanoseconds since the Unix epoch: 0 before it, `u64::MAX` past 2554.
pub(super) fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// async-nats' headers as the core's list: a name's values in order, names grouped.
fn from_map(headers: Option<&HeaderMap>) -> Headers {
    headers
        .into_iter()
        .flat_map(|map| map.iter())
        .flat_map(|(name, values)| {
            values.iter().map(move |v| {
                (
                    Bytes::copy_from_slice(AsRef::<[u8]>::as_ref(name)),
                    Bytes::copy_from_slice(AsRef::<[u8]>::as_ref(v)),
                )
            })
        })
        .collect()
}

/// The answer to `$JS.API.STREAM.MSG.GET`: the message, or the API's error.
#[derive(Deserialize)]
struct MsgGet {
    message: Option<jetstream::stream::RawMessage>,
    error: Option<ApiError>,
}

/// A JetStream API error: its code and text.
#[derive(Deserialize)]
struct ApiError {
    #[serde(default)]
    err_code: u64,
    #[serde(default)]
    description: String,
}

/// "no message found" (nats-server `JSNoMessageFoundErr`), and the codes a delete of a
/// message already gone answers with (`JSSequenceNotFoundErrF`, `JSStreamMsgDeleteFailedF`).
const GONE: [u64; 3] = [10037, 10043, 10057];

/// What a read went through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scanned {
    /// Dead letters read.
    pub read: u64,
    /// Of those, how many the filter took.
    pub taken: u64,
}

/// A dead-letter stream, opened on a client.
#[derive(Debug, Clone)]
pub struct DeadLetters {
    pub(super) js: jetstream::Context,
    pub(super) stream: Stream,
    pub(super) name: String,
}

impl DeadLetters {
    /// Opens the dead-letter stream `stream` on `client`.
    ///
    /// # Errors
    /// [`DeadLetterError::InvalidStreamName`], [`DeadLetterError::NoSuchStream`], or
    /// [`DeadLetterError::Nats`] when the server does not answer (JetStream off, no
    /// permission).
    pub async fn open(client: Client, stream: &str) -> Result<Self, DeadLetterError> {
        if stream.is_empty()
            || stream
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>'))
        {
            return Err(DeadLetterError::InvalidStreamName(stream.to_owned()));
        }
        let js = jetstream::new(client);
        match js.get_stream(stream).await {
            Ok(s) => Ok(Self {
                js,
                stream: s,
                name: stream.to_owned(),
            }),
            Err(e) => match e.kind() {
                jetstream::context::GetStreamErrorKind::JetStream(j)
                    if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
                {
                    Err(DeadLetterError::NoSuchStream(stream.to_owned()))
                }
                _ => Err(DeadLetterError::nats(
                    format!("opening stream `{stream}`"),
                    e,
                )),
            },
        }
    }

    /// The stream's name.
    pub fn stream(&self) -> &str {
        &self.name
    }

    /// Reads the dead letters `filter` takes, in stream order, giving each to `each`.
    ///
    /// With `unmarked` false, only messages that carry something the runtime writes on a dead
    /// letter (provenance, or its dead-letter `Nats-Msg-Id`) are taken, so that a stream that
    /// stores a mount's work beside its dead letters (rule 8) gives only the dead letters; and
    /// a stream that holds messages none of which carries such a mark is refused (it is most
    /// likely not a dead-letter stream). With `unmarked`, every message is taken.
    ///
    /// # Errors
    /// [`DeadLetterError::NotDeadLetters`] (above); [`DeadLetterError::NothingMatches`] when a
    /// filter is given and takes nothing; [`DeadLetterError::Nats`] when the stream cannot be
    /// read (then `each` may have been given some).
    pub async fn each(
        &self,
        filter: &DeadLetterFilter,
        unmarked: bool,
        mut each: impl FnMut(DeadLetter),
    ) -> Result<Scanned, DeadLetterError> {
        let mut scanned = Scanned::default();
        let mut marked = false;
        self.read(filter, |dead| {
            scanned.read += 1;
            let is_marked = dead.record.is_marked();
            marked |= is_marked;
            // A stream may store its work and its dead letters side by side (rule 8): without
            // `unmarked`, only messages marked as dead letters are taken.
            if (is_marked || unmarked)
                && filter.matches(&dead.record, dead.sequence, dead.stored_nanos())
            {
                scanned.taken += 1;
                each(dead);
            }
        })
        .await?;
        if scanned.read > 0 && !marked && !unmarked {
            return Err(DeadLetterError::NotDeadLetters {
                stream: self.name.clone(),
                scanned: scanned.read,
            });
        }
        if scanned.taken == 0 && !filter.is_empty() {
            return Err(DeadLetterError::NothingMatches {
                stream: self.name.clone(),
                filter: filter.describe().into_owned(),
                scanned: scanned.read,
            });
        }
        Ok(scanned)
    }

    /// The sequences of the dead letters `filter` takes, in order (see [`each`](Self::each),
    /// whose errors it returns).
    ///
    /// # Errors
    /// As [`each`](Self::each).
    pub async fn select(
        &self,
        filter: &DeadLetterFilter,
        unmarked: bool,
    ) -> Result<Vec<u64>, DeadLetterError> {
        let mut sequences = Vec::new();
        self.each(filter, unmarked, |dead| sequences.push(dead.sequence))
            .await?;
        Ok(sequences)
    }

    /// The dead letter stored at `sequence`, its headers as stored (every value of a
    /// repeated name, in order: read with the core's parser from the server's answer to
    /// `$JS.API.STREAM.MSG.GET`, since async-nats' own keeps only a name's last value).
    ///
    /// # Errors
    /// [`DeadLetterError::NoSuchDeadLetter`], or [`DeadLetterError::Nats`] (with a message
    /// whose stored headers do not read as a NATS header block among them).
    pub async fn get(&self, sequence: u64) -> Result<DeadLetter, DeadLetterError> {
        // Sequences start at 1; the server answers 0 with a bare "bad request".
        if sequence == 0 {
            return Err(self.no_such(sequence));
        }
        let action = || format!("reading message {sequence} of `{}`", self.name);
        let answer: MsgGet = self
            .js
            .request(
                format!("STREAM.MSG.GET.{}", self.name),
                &serde_json::json!({ "seq": sequence }),
            )
            .await
            .map_err(|e| DeadLetterError::nats(action(), e))?;
        let raw = match (answer.message, answer.error) {
            (Some(raw), _) => raw,
            (None, Some(e)) if GONE.contains(&e.err_code) => return Err(self.no_such(sequence)),
            (None, Some(e)) => {
                return Err(DeadLetterError::nats(
                    action(),
                    format!("{} ({})", e.description, e.err_code),
                ));
            }
            (None, None) => return Err(DeadLetterError::nats(action(), "an empty answer")),
        };
        let payload = STANDARD
            .decode(raw.payload.as_bytes())
            .map_err(|e| DeadLetterError::nats(action(), format!("its payload: {e}")))?;
        let headers = match raw.headers.as_deref() {
            None | Some("") => Headers::new(),
            Some(encoded) => {
                let block = STANDARD
                    .decode(encoded.as_bytes())
                    .map_err(|e| DeadLetterError::nats(action(), format!("its headers: {e}")))?;
                Headers::parse_block(&block).ok_or_else(|| {
                    DeadLetterError::nats(
                        action(),
                        "its headers do not read as a NATS header block",
                    )
                })?
            }
        };
        Ok(DeadLetter::new(
            raw.sequence,
            raw.time.into(),
            raw.subject,
            headers,
            Bytes::from(payload),
        ))
    }

    /// Deletes the dead letter stored at `sequence` (without erasing it on disk: an erase
    /// overwrites the message and costs the server ten times as much).
    ///
    /// # Errors
    /// [`DeadLetterError::NoSuchDeadLetter`] when it is not there (deleted already), or
    /// [`DeadLetterError::Nats`].
    pub async fn delete(&self, sequence: u64) -> Result<(), DeadLetterError> {
        #[derive(Deserialize)]
        struct Deleted {
            #[serde(default)]
            success: bool,
            error: Option<ApiError>,
        }
        let action = || format!("deleting message {sequence} of `{}`", self.name);
        let answer: Deleted = self
            .js
            .request(
                format!("STREAM.MSG.DELETE.{}", self.name),
                &serde_json::json!({ "seq": sequence, "no_erase": true }),
            )
            .await
            .map_err(|e| DeadLetterError::nats(action(), e))?;
        match (answer.success, answer.error) {
            (true, _) => Ok(()),
            (false, Some(e)) if GONE.contains(&e.err_code) => Err(self.no_such(sequence)),
            (false, Some(e)) => Err(DeadLetterError::nats(
                action(),
                format!("{} ({})", e.description, e.err_code),
            )),
            (false, None) => Err(self.no_such(sequence)),
        }
    }

    fn no_such(&self, sequence: u64) -> DeadLetterError {
        DeadLetterError::NoSuchDeadLetter {
            stream: self.name.clone(),
            sequence,
        }
    }

    /// Reads the stream from the first message `filter` can take to its last message now,
    /// giving each to `each`.
    async fn read(
        &self,
        filter: &DeadLetterFilter,
        mut each: impl FnMut(DeadLetter),
    ) -> Result<(), DeadLetterError> {
        let reading = || format!("reading stream `{}`", self.name);
        let mut stream = self.stream.clone();
        let info = stream
            .info()
            .await
            .map_err(|e| DeadLetterError::nats(reading(), e))?;
        let last = info.state.last_sequence;
        let first = filter
            .from_sequence
            .unwrap_or(0)
            .max(info.state.first_sequence);
        if info.state.messages == 0 || first > last {
            return Ok(());
        }
        let deliver_policy = match (filter.from_sequence, filter.since) {
            (Some(start_sequence), _) => DeliverPolicy::ByStartSequence { start_sequence },
            (None, Some(since)) => DeliverPolicy::ByStartTime {
                start_time: (UNIX_EPOCH + Duration::from_nanos(since)).into(),
            },
            (None, None) => DeliverPolicy::All,
        };
        let consumer = stream
            .create_consumer(jetstream::consumer::pull::OrderedConfig {
                deliver_policy,
                ..Default::default()
            })
            .await
            .map_err(|e| DeadLetterError::nats(reading(), e))?;
        // Nothing at or after the start (a time after the last dead letter, or a sequence
        // whose message and those after it were deleted): no message would ever come.
        if consumer.cached_info().num_pending == 0 {
            return Ok(());
        }
        let mut messages = consumer
            .messages()
            .await
            .map_err(|e| DeadLetterError::nats(reading(), e))?;
        loop {
            let next = tokio::time::timeout(READ_STALL, messages.next())
                .await
                .map_err(|_| {
                    DeadLetterError::nats(
                        reading(),
                        format!("no message came for {READ_STALL:?} though the stream holds more"),
                    )
                })?;
            let Some(message) = next else {
                return Ok(());
            };
            let message = message.map_err(|e| DeadLetterError::nats(reading(), e))?;
            let (sequence, published, pending) = {
                let info = message
                    .info()
                    .map_err(|e| DeadLetterError::nats(reading(), e))?;
                (info.stream_sequence, info.published, info.pending)
            };
            if sequence > last {
                return Ok(());
            }
            let message = message.message;
            each(DeadLetter::new(
                sequence,
                published.into(),
                message.subject.to_string(),
                from_map(message.headers.as_ref()),
                message.payload,
            ));
            if sequence >= last || pending == 0 {
                return Ok(());
            }
        }
    }
}
