//! How dead letters are printed: one line each, in full, or as JSON.
//!
//! Nothing a message holds reaches a terminal as it is: a payload is printed as text only when
//! it is UTF-8 without control characters (newlines and tabs aside), otherwise in base64;
//! control characters in header values and in provenance are escaped.

use std::io::{self, Write};
use std::time::SystemTime;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ruststream_adapter::dead_letters::{DeadLetter, DeadLetterRecord};
use serde_json::{Value, json};

/// `time` as RFC 3339 in UTC, to the millisecond.
pub(crate) fn time(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

/// Whether `c` could change what a terminal shows of the text around it: a control
/// character, or a Unicode direction mark or override (U+200E, U+200F, U+202A to U+202E,
/// U+2066 to U+2069), which reorders what follows it.
fn drives_terminal(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `s` with its control characters and direction marks escaped (`\u{1b}`), so that it
/// cannot drive a terminal.
pub(crate) fn safe(s: &str) -> String {
    if !s.chars().any(drives_terminal) {
        return s.to_owned();
    }
    s.chars()
        .map(|c| match drives_terminal(c) {
            true => c.escape_unicode().to_string(),
            false => c.to_string(),
        })
        .collect()
}

/// The payload as text, when it reads as such: UTF-8 without control characters other than
/// newline and tab, and without direction marks (a carriage return could hide what came
/// before it on its line).
pub(crate) fn payload_text(payload: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(payload).ok()?;
    (!text
        .chars()
        .any(|c| drives_terminal(c) && !matches!(c, '\n' | '\t')))
    .then_some(text)
}

/// The column heads of [`line`].
pub(crate) const HEAD: &str = "SEQ\tSTORED\tSUBJECT\tMOUNT\tORIGIN\tATTEMPT\tREASON\tERROR";

/// One dead letter on one line, tab-separated: its sequence, when it was stored, the original
/// subject, the mount, the stream and sequence of origin (`ORDERS#42`), the attempt, the
/// reason and the error text; `-` for what it does not say.
pub(crate) fn line(dead: &DeadLetter) -> String {
    let r = &dead.record;
    let dash = |v: Option<&str>| v.map(safe).unwrap_or_else(|| "-".to_owned());
    let origin = match (&r.stream, r.stream_sequence) {
        (Some(stream), Some(seq)) => format!("{}#{seq}", safe(stream)),
        (Some(stream), None) => safe(stream),
        _ => "-".to_owned(),
    };
    format!(
        "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
        dead.sequence,
        time(dead.stored),
        dash(r.subject.as_deref()),
        dash(r.mount.as_deref()),
        origin,
        r.attempt.map_or_else(|| "-".to_owned(), |a| a.to_string()),
        dash(r.reason.as_deref()),
        dash(r.error.as_deref()),
    )
}

fn record_json(r: &DeadLetterRecord) -> Value {
    json!({
        "subject": r.subject,
        "mount": r.mount,
        "stream": r.stream,
        "consumer": r.consumer,
        "stream_sequence": r.stream_sequence,
        "attempt": r.attempt,
        "reason": r.reason,
        "error": r.error,
        "original_msg_id": r.original_msg_id,
        "dead_letterings": r.dead_letterings,
    })
}

/// One dead letter as a JSON object, without its payload and headers (`list --json`).
pub(crate) fn summary_json(dead: &DeadLetter) -> Value {
    json!({
        "sequence": dead.sequence,
        "stored": time(dead.stored),
        "dead_letter_subject": dead.subject,
        "size": dead.payload.len(),
        "provenance": record_json(&dead.record),
    })
}

/// The headers as `(name, value)` pairs, in the order the dead letter holds them (values
/// that are not UTF-8 read lossily).
fn header_list(dead: &DeadLetter) -> Vec<(String, String)> {
    dead.headers
        .iter()
        .map(|(n, v)| {
            (
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect()
}

/// One dead letter in full as a JSON object (`show --json`): the payload under `payload` as
/// text when it reads as such, else under `payload_base64`.
pub(crate) fn full_json(dead: &DeadLetter) -> Value {
    let mut v = summary_json(dead);
    let headers: Vec<Value> = header_list(dead)
        .into_iter()
        .map(|(n, v)| json!([n, v]))
        .collect();
    v["headers"] = Value::Array(headers);
    match payload_text(&dead.payload) {
        Some(text) => v["payload"] = json!(text),
        None => v["payload_base64"] = json!(STANDARD.encode(&dead.payload)),
    }
    v
}

/// One dead letter in full, for a person (`show`).
pub(crate) fn full(out: &mut dyn Write, stream: &str, dead: &DeadLetter) -> io::Result<()> {
    let r = &dead.record;
    writeln!(
        out,
        "dead letter {} of {}, stored {} on {}",
        dead.sequence,
        safe(stream),
        time(dead.stored),
        safe(&dead.subject)
    )?;
    match &r.subject {
        Some(subject) => {
            write!(out, "came on {}", safe(subject))?;
            if let Some(mount) = &r.mount {
                write!(out, " to mount {}", safe(mount))?;
            }
            writeln!(out)?;
        }
        None => writeln!(
            out,
            "no provenance: it does not say where it came from (replay it with --to)"
        )?,
    }
    if let (Some(stream), Some(seq)) = (&r.stream, r.stream_sequence) {
        write!(out, "from stream {} sequence {seq}", safe(stream))?;
        if let Some(consumer) = &r.consumer {
            write!(out, ", consumer {}", safe(consumer))?;
        }
        writeln!(out)?;
    }
    if let Some(attempt) = r.attempt {
        writeln!(out, "attempt {attempt}")?;
    }
    if let Some(reason) = &r.reason {
        match &r.error {
            Some(error) => writeln!(out, "reason {}: {}", safe(reason), safe(error))?,
            None => writeln!(out, "reason {}", safe(reason))?,
        }
    }
    if let Some(id) = &r.original_msg_id {
        writeln!(out, "original Nats-Msg-Id {}", safe(id))?;
    }
    if r.dead_letterings > 1 {
        writeln!(
            out,
            "dead-lettered {} times (replayed with its provenance on); the last is shown",
            r.dead_letterings
        )?;
    }
    let headers = header_list(dead);
    writeln!(out, "headers ({}):", headers.len())?;
    for (name, value) in headers {
        writeln!(out, "  {}: {}", safe(&name), safe(&value))?;
    }
    match payload_text(&dead.payload) {
        Some(text) => {
            writeln!(out, "payload ({} bytes, text):", dead.payload.len())?;
            writeln!(out, "{text}")?;
        }
        None => {
            writeln!(
                out,
                "payload ({} bytes, binary, base64):",
                dead.payload.len()
            )?;
            writeln!(out, "{}", STANDARD.encode(&dead.payload))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_text_prints_as_text() {
        assert_eq!(payload_text(b"{\"id\":1}\n"), Some("{\"id\":1}\n"));
        assert_eq!(payload_text(b"\x1b[2J"), None, "an escape sequence");
        assert_eq!(payload_text(&[0xff, 0x00]), None, "not UTF-8");
        assert_eq!(payload_text(b"FAILED\rok"), None, "a carriage return");
        assert_eq!(
            payload_text("a\u{202E}b".as_bytes()),
            None,
            "a direction override"
        );
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(safe("plain"), "plain");
        assert_eq!(safe("a\u{1b}[31mb"), "a\\u{1b}[31mb");
        assert_eq!(safe("x\u{202E}y"), "x\\u{202e}y");
    }
}
