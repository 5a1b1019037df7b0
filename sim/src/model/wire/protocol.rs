//! The NATS client protocol, as the endpoint reads and writes it: the operations a client sends
//! (`CONNECT`, `PING`, `PONG`, `SUB`, `UNSUB`, `PUB`, `HPUB`) parsed from bytes, and the
//! messages the server sends (`MSG`, `HMSG`) written to bytes. The wire format is the one in
//! the NATS documentation's "Client Protocol" page; header blocks are `NATS/1.0` with an
//! optional status line, then `Name: Value` lines, as nats-server writes them.
//!
//! Pure (bytes in, operations out, messages back to bytes; no socket), so it is wire vocabulary
//! in the model, below both its users: the model's `STREAM.MSG.GET` answer and the endpoint.

use async_nats::HeaderMap;
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The longest control line the endpoint accepts (nats-server's `max_control_line`, 4 KiB).
pub(crate) const MAX_CONTROL_LINE: usize = 4096;

/// One operation a client sent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ClientOp {
    /// `CONNECT` with its JSON options.
    Connect(String),
    Ping,
    Pong,
    Sub {
        subject: String,
        queue: Option<String>,
        sid: String,
    },
    Unsub {
        sid: String,
        max: Option<u64>,
    },
    Pub {
        subject: String,
        reply: Option<String>,
        headers: Option<HeaderMap>,
        /// A header block the model cannot read as headers, kept byte for byte: nats-server
        /// does not read a header block before it stores and forwards it.
        unreadable_headers: Option<Bytes>,
        payload: Bytes,
    },
}

/// What the endpoint cannot read: the connection is closed with `-ERR` naming it, as
/// nats-server closes a connection that breaks the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProtocolError {
    #[error("Unknown Protocol Operation: {0}")]
    UnknownOperation(String),
    #[error("Maximum Control Line Exceeded")]
    ControlLineTooLong,
    #[error("malformed {op}: {line}")]
    Malformed { op: &'static str, line: String },
    #[error("malformed headers: {0}")]
    Headers(String),
}

/// The next whole operation in `buf`, taken out of it; `None` until one has fully arrived.
///
/// # Errors
/// [`ProtocolError`] for bytes that are not the protocol.
pub(crate) fn parse(buf: &mut BytesMut) -> Result<Option<ClientOp>, ProtocolError> {
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        if buf.len() > MAX_CONTROL_LINE {
            return Err(ProtocolError::ControlLineTooLong);
        }
        return Ok(None);
    };
    let line = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut words = line.split_ascii_whitespace();
    let op = words.next().unwrap_or_default().to_ascii_uppercase();
    let args: Vec<&str> = words.collect();
    let malformed = |op: &'static str| ProtocolError::Malformed {
        op,
        line: line.clone(),
    };
    let simple = |op: ClientOp, buf: &mut BytesMut| {
        buf.advance(end + 2);
        Ok(Some(op))
    };
    match op.as_str() {
        "CONNECT" => {
            let options = line
                .split_once(char::is_whitespace)
                .map(|(_, json)| json.trim().to_owned())
                .unwrap_or_default();
            simple(ClientOp::Connect(options), buf)
        }
        "PING" => simple(ClientOp::Ping, buf),
        "PONG" => simple(ClientOp::Pong, buf),
        "SUB" => {
            let (subject, queue, sid) = match args.as_slice() {
                [subject, sid] => (*subject, None, *sid),
                [subject, queue, sid] => (*subject, Some((*queue).to_owned()), *sid),
                _ => return Err(malformed("SUB")),
            };
            let op = ClientOp::Sub {
                subject: subject.to_owned(),
                queue,
                sid: sid.to_owned(),
            };
            simple(op, buf)
        }
        "UNSUB" => {
            let (sid, max) = match args.as_slice() {
                [sid] => (*sid, None),
                [sid, max] => (*sid, Some(max.parse().map_err(|_| malformed("UNSUB"))?)),
                _ => return Err(malformed("UNSUB")),
            };
            let op = ClientOp::Unsub {
                sid: sid.to_owned(),
                max,
            };
            simple(op, buf)
        }
        "PUB" | "HPUB" => {
            let with_headers = op == "HPUB";
            let name = if with_headers { "HPUB" } else { "PUB" };
            let sizes = if with_headers { 2 } else { 1 };
            if args.len() < 1 + sizes || args.len() > 2 + sizes {
                return Err(malformed(name));
            }
            let (names, numbers) = args.split_at(args.len() - sizes);
            let numbers: Vec<usize> = numbers
                .iter()
                .map(|n| n.parse().map_err(|_| malformed(name)))
                .collect::<Result<_, _>>()?;
            let total = *numbers.last().unwrap_or(&0);
            let header_len = if with_headers { numbers[0] } else { 0 };
            if header_len > total {
                return Err(malformed(name));
            }
            if buf.len() < end + 2 + total + 2 {
                return Ok(None);
            }
            let subject = names[0].to_owned();
            let reply = names.get(1).map(|r| (*r).to_owned());
            buf.advance(end + 2);
            let mut body = buf.split_to(total).freeze();
            if &buf[..2] != b"\r\n" {
                return Err(malformed(name));
            }
            buf.advance(2);
            let (headers, unreadable_headers) = if with_headers {
                let block = body.split_to(header_len);
                match parse_headers(&block) {
                    Ok(headers) => (Some(headers), None),
                    Err(_) => (None, Some(block)),
                }
            } else {
                (None, None)
            };
            Ok(Some(ClientOp::Pub {
                subject,
                reply,
                headers,
                unreadable_headers,
                payload: body,
            }))
        }
        _ => Err(ProtocolError::UnknownOperation(op)),
    }
}

/// Puts each run of consecutive `SUB`s in the order of their sids (numbers, as async-nats
/// writes them). `SUB`s commute, so this changes nothing a client can tell, but it takes out
/// the one order async-nats does not fix: after a reconnect it subscribes again from a hash
/// map, in an order that changes from run to run, and the model routes a message to
/// subscriptions, and picks a queue group's member, in the order they were made.
pub(crate) fn order_subscriptions(ops: &mut [ClientOp]) {
    let sid = |op: &ClientOp| match op {
        ClientOp::Sub { sid, .. } => Some(sid.parse::<u64>().unwrap_or(u64::MAX)),
        _ => None,
    };
    let mut start = 0;
    while start < ops.len() {
        let mut end = start;
        while end < ops.len() && sid(&ops[end]).is_some() {
            end += 1;
        }
        if end > start {
            ops[start..end].sort_by_key(|op| sid(op));
            start = end;
        } else {
            start += 1;
        }
    }
}

/// A header block (`NATS/1.0\r\nName: Value\r\n…\r\n`) as a header map. A client's block has
/// no status; one given is ignored.
fn parse_headers(block: &[u8]) -> Result<HeaderMap, ProtocolError> {
    let text =
        std::str::from_utf8(block).map_err(|_| ProtocolError::Headers("not UTF-8".to_owned()))?;
    let mut lines = text.split("\r\n");
    match lines.next() {
        Some(first) if first.starts_with("NATS/1.0") => {}
        _ => return Err(ProtocolError::Headers("no NATS/1.0 line".to_owned())),
    }
    let mut headers = HeaderMap::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| ProtocolError::Headers(format!("no `:` in `{line}`")))?;
        let name: async_nats::HeaderName = name
            .trim()
            .parse()
            .map_err(|_| ProtocolError::Headers(format!("invalid header name `{name}`")))?;
        let value: async_nats::HeaderValue = value
            .trim()
            .parse()
            .map_err(|_| ProtocolError::Headers(format!("invalid header value `{value}`")))?;
        headers.append(name, value);
    }
    Ok(headers)
}

/// A header block: `NATS/1.0`, the status and its description if any, each header as
/// `Name: Value` (names in sorted order, so that the bytes are the same every run), an empty
/// line.
pub(crate) fn header_block(
    headers: Option<&HeaderMap>,
    status: Option<async_nats::StatusCode>,
    description: Option<&str>,
) -> Vec<u8> {
    let mut block = b"NATS/1.0".to_vec();
    if let Some(status) = status {
        block.extend_from_slice(format!(" {}", status.as_u16()).as_bytes());
        if let Some(description) = description {
            block.extend_from_slice(format!(" {description}").as_bytes());
        }
    }
    block.extend_from_slice(b"\r\n");
    if let Some(headers) = headers {
        let mut names: Vec<_> = headers.iter().collect();
        names.sort_by_key(|(name, _)| name.to_string());
        for (name, values) in names {
            for value in values {
                block.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
            }
        }
    }
    block.extend_from_slice(b"\r\n");
    block
}

/// A message to a subscription as `MSG` or, with headers or a status, `HMSG`; with
/// `unreadable_headers`, that block byte for byte instead of its headers.
pub(crate) fn write_message(
    out: &mut BytesMut,
    sid: &str,
    message: &async_nats::Message,
    unreadable_headers: Option<&Bytes>,
) {
    let block = if let Some(block) = unreadable_headers {
        block.to_vec()
    } else if message.headers.is_some() || message.status.is_some() {
        header_block(
            message.headers.as_ref(),
            message.status,
            message.description.as_deref(),
        )
    } else {
        Vec::new()
    };
    let reply = message
        .reply
        .as_ref()
        .map(|r| format!(" {r}"))
        .unwrap_or_default();
    let total = block.len() + message.payload.len();
    let line = if block.is_empty() {
        format!("MSG {} {sid}{reply} {total}\r\n", message.subject)
    } else {
        format!(
            "HMSG {} {sid}{reply} {} {total}\r\n",
            message.subject,
            block.len()
        )
    };
    out.reserve(line.len() + total + 2);
    out.put_slice(line.as_bytes());
    out.put_slice(&block);
    out.put_slice(&message.payload);
    out.put_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn all(bytes: &[u8]) -> Result<Vec<ClientOp>, ProtocolError> {
        let mut buf = BytesMut::from(bytes);
        let mut ops = Vec::new();
        while let Some(op) = parse(&mut buf)? {
            ops.push(op);
        }
        assert!(buf.is_empty(), "left unread: {buf:?}");
        Ok(ops)
    }

    /// A header block the model cannot read is kept as bytes (nats-server forwards it
    /// unread) and written back byte for byte in place of headers.
    #[test]
    fn keeps_a_header_block_it_cannot_read_and_writes_it_back_as_it_is() {
        let block: &[u8] = b"NATS/1.0\r\nX-Poison: a\rb\r\n\r\n";
        let mut wire = format!("HPUB a.b {} {}\r\n", block.len(), block.len() + 2).into_bytes();
        wire.extend_from_slice(block);
        wire.extend_from_slice(b"hi\r\n");
        let ops = all(&wire).unwrap();
        let ClientOp::Pub {
            headers,
            unreadable_headers,
            payload,
            ..
        } = &ops[0]
        else {
            panic!("{ops:?}")
        };
        assert!(headers.is_none());
        assert_eq!(unreadable_headers.as_deref(), Some(block));
        assert_eq!(payload.as_ref(), b"hi");
        let message = async_nats::Message {
            subject: "a.b".into(),
            reply: None,
            payload: payload.clone(),
            headers: None,
            status: None,
            description: None,
            length: 0,
        };
        let mut out = BytesMut::new();
        write_message(&mut out, "3", &message, unreadable_headers.as_ref());
        let mut expected =
            format!("HMSG a.b 3 {} {}\r\n", block.len(), block.len() + 2).into_bytes();
        expected.extend_from_slice(block);
        expected.extend_from_slice(b"hi\r\n");
        assert_eq!(&out[..], &expected[..]);
    }

    #[test]
    fn parses_what_async_nats_sends() {
        let ops = all(
            b"CONNECT {\"verbose\":false}\r\nPING\r\nSUB a.> q 7\r\nSUB b 8\r\n\
              UNSUB 8 3\r\nPUB a.b _INBOX.x 2\r\nhi\r\n\
              HPUB a.c 26 28\r\nNATS/1.0\r\nK: v1\r\nK: v2\r\n\r\nhi\r\n",
        )
        .unwrap();
        assert_eq!(ops[0], ClientOp::Connect(r#"{"verbose":false}"#.into()));
        assert_eq!(ops[1], ClientOp::Ping);
        assert_eq!(
            ops[2],
            ClientOp::Sub {
                subject: "a.>".into(),
                queue: Some("q".into()),
                sid: "7".into()
            }
        );
        assert_eq!(
            ops[4],
            ClientOp::Unsub {
                sid: "8".into(),
                max: Some(3)
            }
        );
        let ClientOp::Pub { reply, payload, .. } = &ops[5] else {
            panic!("{:?}", ops[5]);
        };
        assert_eq!(reply.as_deref(), Some("_INBOX.x"));
        assert_eq!(&payload[..], b"hi");
        let ClientOp::Pub {
            headers, payload, ..
        } = &ops[6]
        else {
            panic!("{:?}", ops[6]);
        };
        let values: Vec<_> = headers
            .as_ref()
            .unwrap()
            .get_all("K")
            .map(|v| v.as_str().to_owned())
            .collect();
        assert_eq!(values, ["v1", "v2"]);
        assert_eq!(&payload[..], b"hi");
    }

    #[test]
    fn waits_for_a_whole_payload_and_refuses_what_is_not_the_protocol() {
        let mut buf = BytesMut::from(&b"PUB a 5\r\nhel"[..]);
        assert_eq!(parse(&mut buf).unwrap(), None);
        buf.extend_from_slice(b"lo\r\n");
        assert!(matches!(
            parse(&mut buf).unwrap(),
            Some(ClientOp::Pub { .. })
        ));
        assert_eq!(
            all(b"HELLO\r\n"),
            Err(ProtocolError::UnknownOperation("HELLO".into()))
        );
        assert!(matches!(
            all(b"PUB a x\r\n"),
            Err(ProtocolError::Malformed { op: "PUB", .. })
        ));
        assert!(matches!(
            all(b"PUB a 1\r\nxyz\r\n"),
            Err(ProtocolError::Malformed { .. })
        ));
        let long = vec![b'A'; MAX_CONTROL_LINE + 1];
        assert_eq!(all(&long), Err(ProtocolError::ControlLineTooLong));
    }

    #[test]
    fn runs_of_subscriptions_take_the_order_of_their_sids() {
        let mut ops =
            all(b"SUB c 3\r\nSUB a 1\r\nPING\r\nSUB z 10\r\nSUB y 9\r\nSUB b 2\r\n").unwrap();
        order_subscriptions(&mut ops);
        let order: Vec<String> = ops
            .iter()
            .map(|op| match op {
                ClientOp::Sub { sid, .. } => sid.clone(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(order, ["1", "3", "Ping", "2", "9", "10"]);
    }

    #[test]
    fn writes_a_status_and_sorted_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("b", "2");
        headers.insert("a", "1");
        let message = async_nats::Message {
            subject: "_INBOX.x".into(),
            reply: None,
            payload: Bytes::new(),
            headers: Some(headers),
            status: Some(async_nats::StatusCode::from_u16(408).unwrap()),
            description: Some("Request Timeout".into()),
            length: 0,
        };
        let mut out = BytesMut::new();
        write_message(&mut out, "9", &message, None);
        let block = "NATS/1.0 408 Request Timeout\r\na: 1\r\nb: 2\r\n\r\n";
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            format!(
                "HMSG _INBOX.x 9 {} {}\r\n{block}\r\n",
                block.len(),
                block.len()
            )
        );
    }
}
