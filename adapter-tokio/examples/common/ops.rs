//! The demo's reading of its ops endpoint (served by the app itself, `App::ops`), as a scraper
//! and a probe would: a plain HTTP GET, and a counter read out of Prometheus text.

use std::net::SocketAddr;

/// `GET path` on `addr`: the status code and the body (a plain HTTP/1.0 request, enough for
/// the demo to read its own endpoints as a scraper would).
///
/// # Errors
/// When the endpoint cannot be reached or answers something that is not HTTP.
pub(crate) fn get(
    addr: SocketAddr,
    path: &str,
) -> Result<(u16, String), Box<dyn std::error::Error>> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or("an HTTP response without a body")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("an HTTP response without a status")?;
    Ok((status, body.to_owned()))
}

/// The value of the counter `name` with every label of `labels` in Prometheus text `text`
/// (0 when there is none).
pub(crate) fn scraped(text: &str, name: &str, labels: &[(&str, &str)]) -> u64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .filter(|(series, _)| {
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            metric == name
                && labels
                    .iter()
                    .all(|(l, v)| rest.contains(&format!("{l}=\"{v}\"")))
        })
        .filter_map(|(_, value)| value.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}
