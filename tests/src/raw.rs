//! A raw NATS publisher: a plain TCP connection that sends bytes as any publisher may, for
//! messages async-nats refuses to build (a header value with a lone carriage return).

use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

use crate::NatsServer;

/// A header block whose one value holds a lone carriage return. async-nats 0.51's connection
/// task panics when it receives it ("invalid header value"); the server stores and forwards
/// it.
pub const LONE_CR: &[u8] = b"NATS/1.0\r\nX-Poison: a\rb\r\n\r\n";

/// Publishes one message to `subject` with `header_block` (a whole `NATS/1.0` block, byte for
/// byte) over a raw TCP connection, then waits for the server's PONG, so the server has
/// processed it.
///
/// # Panics
/// When the server cannot be reached or refuses the message.
pub fn raw_publish(server: &NatsServer, subject: &str, header_block: &[u8], payload: &[u8]) {
    raw_publish_bytes(server, subject.as_bytes(), header_block, payload);
}

/// As [`raw_publish`], to a subject given as bytes: one async-nats cannot hold (not UTF-8).
///
/// # Panics
/// As [`raw_publish`].
pub fn raw_publish_bytes(server: &NatsServer, subject: &[u8], header_block: &[u8], payload: &[u8]) {
    let address = server.url().trim_start_matches("nats://").to_owned();
    let stream = std::net::TcpStream::connect(&address).expect("raw connection");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut writer = stream.try_clone().expect("clone");
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).expect("INFO");
    assert!(line.starts_with("INFO"), "{line}");
    let mut out = Vec::new();
    out.extend_from_slice(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true}\r\n");
    out.extend_from_slice(b"HPUB ");
    out.extend_from_slice(subject);
    out.extend_from_slice(
        format!(
            " {} {}\r\n",
            header_block.len(),
            header_block.len() + payload.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(header_block);
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\nPING\r\n");
    writer.write_all(&out).expect("raw publish");
    loop {
        line.clear();
        reader.read_line(&mut line).expect("a reply");
        assert!(!line.starts_with("-ERR"), "the server refused: {line}");
        if line.starts_with("PONG") {
            return;
        }
    }
}
