//! A message that brings the client down every time it is delivered (rule 20): after each
//! loss of the connection, each JetStream mount's suspect is read from its consumer; while
//! there is one the mount pulls one message at a time, and the same suspect too many times in
//! a row ends the app naming it. One async-nats cannot read is taken before one it can; a
//! readable suspect is not counted while another mount has an unreadable one.

use std::sync::PoisonError;
use std::time::Duration;

use ruststream_settlement::Descriptor;

use super::reread::consumer_info;
use super::{PATIENCE, Supervisor, Watch};
use crate::runtime::Runtime;
use crate::state::record::MountRecord;
/// After this many losses of the connection in a row while a JetStream consumer's oldest
/// unacknowledged message stays the same, the app ends with an error naming it.
pub const SAME_SUSPECT_LIMIT: u32 = 3;

/// How many sequences after a consumer's ack floor are searched for the message that
/// brought the client down.
const SUSPECT_SCAN: u64 = 64;

impl<R: Runtime> Supervisor<R> {
    /// After a loss of the connection: each JetStream mount's consumer's oldest unacknowledged
    /// message, logged; the same one at [`SAME_SUSPECT_LIMIT`] losses in a row ends the app.
    pub(super) async fn check_suspects(&self, watch: &mut Watch, what: &str) -> Result<(), String> {
        let js = async_nats::jetstream::new(self.client());
        let mut found = Vec::new();
        for (index, (_, _, policy)) in self.declared.iter().enumerate() {
            let Descriptor::JetStream { stream, consumer } = policy.descriptor() else {
                continue;
            };
            let name = self.records[index].name;
            let info = match consumer_info::<R>(&js, stream, consumer).await {
                Ok(info) => info,
                Err(e) => {
                    tracing::warn!(mount = %name, error = %e, "cannot read the consumer's info after the connection loss");
                    continue;
                }
            };
            // Nothing waited for, or every message the consumer waits for is one this mount
            // holds (running, or waiting to run, under a lease): none brought the client down.
            // The server does not list which messages above the ack floor are acknowledged, so
            // without this count a message an earlier process (or another one sharing the
            // durable) acknowledged there, which this process never received, would be taken
            // for one. Each message counts once, and only while no newer delivery of it
            // superseded its runs: counting the mount's running deliveries instead counted a
            // message run twice (delivered again while a handler that outlives `ack_wait` ran)
            // twice, and a run whose message a newer delivery had settled, and so hid a poison
            // behind them (the explorer's seeds 8110272 and 9759629). A delivery that holds no
            // lease (a dead letter waiting for its confirmation) is not counted: the search
            // below then skips it as received.
            if info.num_ack_pending <= self.launcher.leases.current_messages(index) {
                watch.suspects.remove(&index);
                self.records[index].careful.clear();
                continue;
            }
            let Some((sequence, unreadable)) = self.suspect(&js, index, stream, &info).await else {
                // Every message it waits for reached the mount: none brought the client down.
                watch.suspects.remove(&index);
                self.records[index].careful.clear();
                continue;
            };
            let record = &self.records[index];
            record.careful.until(R::now() + careful_span(record));
            found.push(Suspect {
                index,
                stream,
                consumer,
                sequence,
                unreadable,
                ack_pending: info.num_ack_pending,
                redelivered: info.num_redelivered,
            });
        }
        // A suspect async-nats cannot read (`STREAM.MSG.GET`) is the likeliest culprit, and one
        // of another mount that it can read is then no suspect: it may be a message an earlier
        // process received and `-NAK`ed with a delay, waiting for its redelivery, while a poison
        // in this other stream brings the shared client down (the explorer's seeds 2685 and
        // 2705: naming it had the operator remove a good message). Unreadable ones first, so
        // that the error names one.
        let any_unreadable = found.iter().any(|f| f.unreadable);
        found.sort_by_key(|f| !f.unreadable);
        for f in found {
            let name = self.records[f.index].name;
            let (stream, consumer, sequence) = (f.stream, f.consumer, f.sequence);
            if any_unreadable && !f.unreadable {
                watch.suspects.remove(&f.index);
                tracing::info!(mount = %name, stream, consumer, stream_sequence = sequence,
                    "{what} while this consumer waits for a message that never reached the mount; another mount waits for one the client cannot read, the likelier culprit: not counted");
                continue;
            }
            let times = match watch.suspects.get(&f.index) {
                Some(&(seen, n)) if seen == sequence => n + 1,
                _ => 1,
            };
            watch.suspects.insert(f.index, (sequence, times));
            tracing::warn!(mount = %name, stream, consumer, stream_sequence = sequence, times,
                ack_pending = f.ack_pending, redelivered = f.redelivered,
                unreadable = f.unreadable,
                "{what} while this consumer waits for the acknowledgement of the message at this stream sequence, which never reached the mount; it pulls one message at a time meanwhile");
            if times >= SAME_SUSPECT_LIMIT {
                return Err(format!(
                    "mount `{name}`: the connection to NATS was lost {times} times in a row while \
                     consumer `{consumer}` of stream `{stream}` waited for the message at stream \
                     sequence {sequence}, which probably brings the client down every time it is \
                     delivered. Look at it (`nats stream get {stream} {sequence}`), remove it \
                     (`nats stream rmm {stream} {sequence}`) or move it aside, then start the \
                     service again"
                ));
            }
        }
        Ok(())
    }

    /// The message most likely to have brought the client down: the first one after the
    /// consumer's ack floor, up to the last it delivered (at most [`SUSPECT_SCAN`] of them),
    /// that the mount never received (a message the client cannot read never reaches it) and
    /// that the consumer would deliver (still stored, on its filter subject), and whether
    /// async-nats cannot read it when it asks for it stored (`STREAM.MSG.GET`). One it cannot
    /// read is taken before any readable one: a message that brings the client down is one the
    /// client cannot read. `None` when every such message reached the mount: a handler still
    /// running, say, is no suspect.
    async fn suspect(
        &self,
        js: &async_nats::jetstream::Context,
        index: usize,
        stream: &str,
        info: &async_nats::jetstream::consumer::Info,
    ) -> Option<(u64, bool)> {
        let first = info.ack_floor.stream_sequence + 1;
        let last = info
            .delivered
            .stream_sequence
            .min(first.saturating_add(SUSPECT_SCAN - 1));
        let received = self.records[index].received.snapshot();
        let filter = match info.config.filter_subject.as_str() {
            "" => None,
            f => ruststream_settlement::Wildcard::new(f).ok(),
        };
        let Some(Ok(stream)) = R::timeout(PATIENCE, js.get_stream(stream)).await else {
            return None;
        };
        let mut readable = None;
        for sequence in first..=last {
            if received.contains(&sequence) {
                continue;
            }
            // The stored message, as JSON (its headers base64-encoded): reading it cannot
            // bring the client down, though it may fail to decode.
            use async_nats::jetstream::stream::RawMessageErrorKind;
            let stored = match R::timeout(PATIENCE, stream.get_raw_message(sequence)).await {
                Some(Ok(stored)) => stored,
                Some(Err(e)) if e.kind() == RawMessageErrorKind::NoMessageFound => continue,
                // Stored, and async-nats cannot read it either: the likeliest culprit.
                Some(Err(_)) => return Some((sequence, true)),
                None => continue,
            };
            let on_filter = match (
                &filter,
                ruststream_settlement::Subject::new(&stored.subject),
            ) {
                (None, _) => true,
                (Some(filter), Ok(subject)) => filter.matches(&subject),
                (Some(_), Err(_)) => true,
            };
            if on_filter && readable.is_none() {
                readable = Some((sequence, false));
            }
        }
        readable
    }
}

/// One mount's suspect after a loss of the connection.
struct Suspect<'a> {
    index: usize,
    stream: &'a str,
    consumer: &'a str,
    sequence: u64,
    unreadable: bool,
    ack_pending: usize,
    redelivered: usize,
}

/// How long a JetStream mount pulls one message at a time once a message is suspected of
/// bringing the client down: twice its consumer's `ack_wait` (the suspect comes back after
/// one), between 1 s and 2 minutes.
pub(super) fn careful_span(record: &MountRecord) -> Duration {
    let ack_wait = record
        .lease_settings
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .ack_wait
        .unwrap_or(Duration::from_secs(30));
    (ack_wait * 2).clamp(Duration::from_secs(1), Duration::from_secs(120))
}
