//! Streams an app declares beside its mounts: created when missing, checked when present,
//! never changed (issue 14, item 7).

use async_nats::jetstream::context::GetStreamErrorKind;
use async_nats::jetstream::stream::Config;
use async_nats::jetstream::{self, ErrorCode};
use ruststream_settlement::Wildcard;

use super::mount_checks::jetstream_error;
use super::startup::StartError;

fn refused(stream: &str, reason: impl Into<String>) -> StartError {
    StartError::Stream {
        stream: stream.to_owned(),
        reason: reason.into(),
    }
}

/// Checks what can be checked without a server: a name NATS accepts, and subjects that are
/// valid subscription subjects.
///
/// # Errors
/// [`StartError::Stream`] naming the stream and what is wrong.
pub(crate) fn check_declared(config: &Config) -> Result<Vec<Wildcard>, StartError> {
    let name = config.name.as_str();
    let bad_name = name.is_empty()
        || name.chars().any(|c| {
            c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>' | '/' | '\\')
        });
    if bad_name {
        return Err(refused(
            name,
            "a stream name is not empty and has no whitespace, `.`, `*`, `>`, `/` or `\\`",
        ));
    }
    if config.subjects.is_empty() {
        return Err(refused(
            name,
            "declare the subjects it stores: a stream declared without subjects would store only its own name",
        ));
    }
    config
        .subjects
        .iter()
        .map(|s| Wildcard::new(s).map_err(|e| refused(name, e.to_string())))
        .collect()
}

/// Checks every stream an app declares, as [`check_declared`] does, and that none is declared
/// twice, before the app connects.
///
/// # Errors
/// [`StartError::Stream`] naming the first stream that is wrong.
pub(crate) fn check_all(streams: &[Config]) -> Result<(), StartError> {
    let mut names = std::collections::HashSet::new();
    for stream in streams {
        check_declared(stream)?;
        if !names.insert(stream.name.as_str()) {
            return Err(refused(&stream.name, "declared twice"));
        }
    }
    Ok(())
}

/// Creates the stream `config` describes when the server has none of that name; otherwise
/// checks that the one there fits (it stores every declared subject, with the declared
/// retention), and never changes it.
///
/// # Errors
/// [`StartError::Stream`] naming the stream: one that is there and does not fit (what
/// differs), one that could not be created (the server's reason: subjects that overlap another
/// stream's, limits), or a server without JetStream.
pub(crate) async fn declare(js: &jetstream::Context, config: &Config) -> Result<(), StartError> {
    let name = config.name.as_str();
    let declared = check_declared(config)?;
    match js.get_stream(name).await {
        Ok(mut stream) => {
            let info = stream
                .info()
                .await
                .map_err(|e| refused(name, jetstream_error(&e)))?;
            fits(name, config, &declared, &info.config)?;
            tracing::debug!(stream = name, "declared stream is there and fits");
            Ok(())
        }
        Err(e) if matches!(e.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND) =>
        {
            js.create_stream(config.clone())
                .await
                .map_err(|e| refused(name, format!("cannot create it: {}", jetstream_error(&e))))?;
            tracing::info!(stream = name, subjects = ?config.subjects, "declared stream created");
            Ok(())
        }
        Err(e) => Err(refused(name, jetstream_error(&e))),
    }
}

/// Whether the stream that is there (`existing`) fits the declaration: it stores everything
/// published to each declared subject, and has the declared retention. Other settings
/// (limits, storage, replicas) are the operator's, and are not compared.
fn fits(
    name: &str,
    declared: &Config,
    subjects: &[Wildcard],
    existing: &Config,
) -> Result<(), StartError> {
    // A stream created without subjects stores its own name.
    let stored: Vec<Wildcard> = if existing.subjects.is_empty() {
        Wildcard::new(&existing.name).into_iter().collect()
    } else {
        existing
            .subjects
            .iter()
            .filter_map(|s| Wildcard::new(s).ok())
            .collect()
    };
    for subject in subjects {
        if !stored.iter().any(|s| s.covers(subject)) {
            return Err(refused(
                name,
                format!(
                    "it exists and does not store `{subject}` (its subjects: {:?}); the app never changes a stream: add the subject to it, or declare what it stores",
                    existing.subjects
                ),
            ));
        }
    }
    if existing.retention != declared.retention {
        return Err(refused(
            name,
            format!(
                "it exists with retention {:?}, and the app declares {:?}; the app never changes a stream",
                existing.retention, declared.retention
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::jetstream::stream::RetentionPolicy;

    fn config(name: &str, subjects: &[&str]) -> Config {
        Config {
            name: name.to_owned(),
            subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn bad_declarations_name_the_stream() {
        for (c, needle) in [
            (config("", &["a"]), "stream name"),
            (config("A.B", &["a"]), "stream name"),
            (config("ORDERS", &[]), "without subjects"),
            (config("ORDERS", &["orders..x"]), "`orders..x`"),
        ] {
            let e = check_declared(&c).expect_err("refused").to_string();
            assert!(e.contains(needle), "{e}");
            assert!(e.starts_with(&format!("stream `{}`", c.name)), "{e}");
        }
    }

    #[test]
    fn an_existing_stream_fits_when_it_covers_every_subject_with_the_same_retention() {
        let declared = config("ORDERS", &["orders.new", "orders.paid"]);
        let subjects = check_declared(&declared).expect("valid");
        assert!(
            fits(
                "ORDERS",
                &declared,
                &subjects,
                &config("ORDERS", &["orders.>"])
            )
            .is_ok()
        );
        let narrow = fits(
            "ORDERS",
            &declared,
            &subjects,
            &config("ORDERS", &["orders.new"]),
        );
        assert!(
            narrow
                .expect_err("refused")
                .to_string()
                .contains("does not store `orders.paid`")
        );
        let mut interest = config("ORDERS", &["orders.>"]);
        interest.retention = RetentionPolicy::Interest;
        let e = fits("ORDERS", &declared, &subjects, &interest).expect_err("refused");
        assert!(e.to_string().contains("retention Interest"), "{e}");
        // Without subjects, a stream stores its own name.
        let own = config("orders", &["orders"]);
        let subjects = check_declared(&own).expect("valid");
        assert!(fits("orders", &own, &subjects, &config("orders", &[])).is_ok());
    }
}
