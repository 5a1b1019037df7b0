//! `ruststream dlq list|show|replay|purge`.

use std::io::Write;
use std::time::{Duration, Instant};

use async_nats::Client;
use indicatif::{ProgressBar, ProgressStyle};
use ruststream_adapter::dead_letters::{
    DeadLetterError, DeadLetters, ReplayEvent, ReplayOptions, ReplaySummary, Sent,
};

use crate::args::{Dlq, Filter};
use crate::{CliError, Io, render};

/// How often plain progress lines come (when `err` is not a terminal).
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

pub(crate) async fn execute(client: Client, command: Dlq, io: &mut Io<'_>) -> Result<(), CliError> {
    match command {
        Dlq::List {
            stream,
            filter,
            json,
        } => list(client, &stream, &filter, json, io).await,
        Dlq::Show {
            stream,
            sequence,
            json,
        } => {
            let dlq = DeadLetters::open(client, &stream).await?;
            let dead = dlq.get(sequence).await?;
            match json {
                true => writeln!(io.out, "{}", render::full_json(&dead))?,
                false => render::full(io.out, &stream, &dead)?,
            }
            Ok(())
        }
        Dlq::Replay {
            stream,
            filter,
            to,
            dry_run,
            rate,
            delete,
        } => {
            let options = ReplayOptions {
                filter: filter.to_filter(),
                to,
                dry_run,
                rate,
                delete,
                unmarked: filter.unmarked,
            };
            replay(client, &stream, &options, io).await
        }
        Dlq::Purge {
            stream,
            filter,
            yes,
        } => purge(client, &stream, &filter, yes, io).await,
    }
}

async fn list(
    client: Client,
    stream: &str,
    filter: &Filter,
    json: bool,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let dlq = DeadLetters::open(client, stream).await?;
    let mut failed: Option<std::io::Error> = None;
    // Rows wait until a dead letter carries a mark of the runtime (or --unmarked): a stream
    // that turns out to hold none is refused without printing its messages first.
    let mut held: Vec<String> = Vec::new();
    let mut marked = filter.unmarked;
    if !json {
        held.push(render::HEAD.to_owned());
    }
    let out = &mut *io.out;
    let scanned = dlq
        .each(&filter.to_filter(), filter.unmarked, |dead| {
            if failed.is_some() {
                return;
            }
            marked |= dead.record.is_marked();
            held.push(match json {
                true => render::summary_json(&dead).to_string(),
                false => render::line(&dead),
            });
            if marked {
                for row in held.drain(..) {
                    if let Err(e) = writeln!(out, "{row}") {
                        failed = Some(e);
                        return;
                    }
                }
            }
        })
        .await?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    for row in held.drain(..) {
        writeln!(io.out, "{row}")?;
    }
    match scanned.read {
        0 => writeln!(io.err, "no dead letters in {stream}")?,
        read => writeln!(
            io.err,
            "{} dead letter(s) listed, of {read} read from {stream}",
            scanned.taken
        )?,
    }
    Ok(())
}

/// Progress: a bar on a terminal, lines every [`PROGRESS_EVERY`] otherwise.
enum Progress {
    Bar(ProgressBar),
    Lines {
        last: Instant,
        done: u64,
        total: u64,
    },
}

impl Progress {
    fn new(terminal: bool) -> Self {
        match terminal {
            true => Self::Bar(ProgressBar::hidden()),
            false => Self::Lines {
                last: Instant::now(),
                done: 0,
                total: 0,
            },
        }
    }

    fn start(&mut self, total: u64) {
        match self {
            Self::Bar(bar) => {
                *bar = ProgressBar::new(total);
                if let Ok(style) = ProgressStyle::with_template(
                    "{bar:40} {pos}/{len} dead letters, {per_sec}, {eta} left",
                ) {
                    bar.set_style(style);
                }
            }
            Self::Lines { total: t, .. } => *t = total,
        }
    }

    fn step(&mut self, err: &mut dyn Write) {
        match self {
            Self::Bar(bar) => bar.inc(1),
            Self::Lines { last, done, total } => {
                *done += 1;
                if last.elapsed() >= PROGRESS_EVERY {
                    *last = Instant::now();
                    let _ = writeln!(err, "replayed {done} of {total}");
                }
            }
        }
    }

    fn note(&mut self, err: &mut dyn Write, text: &str) {
        match self {
            Self::Bar(bar) => bar.suspend(|| {
                let _ = writeln!(err, "{text}");
            }),
            Self::Lines { .. } => {
                let _ = writeln!(err, "{text}");
            }
        }
    }

    /// A line of the command's output, the bar (if any) out of its way.
    fn println(&mut self, out: &mut dyn Write, text: &str) {
        match self {
            Self::Bar(bar) => bar.suspend(|| {
                let _ = writeln!(out, "{text}");
            }),
            Self::Lines { .. } => {
                let _ = writeln!(out, "{text}");
            }
        }
    }

    fn finish(&mut self) {
        if let Self::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

async fn replay(
    client: Client,
    stream: &str,
    options: &ReplayOptions,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let dlq = DeadLetters::open(client, stream).await?;
    let progress = std::cell::RefCell::new(Progress::new(io.terminal && !options.dry_run));
    let out = &mut *io.out;
    let err = &mut *io.err;
    let lines = std::cell::RefCell::new((out, err));
    let summary = dlq
        .replay(
            options,
            |total| progress.borrow_mut().start(total),
            |event| {
                let (out, err) = &mut *lines.borrow_mut();
                match event {
                    ReplayEvent::Replayed {
                        sequence,
                        target,
                        sent: Sent::DryRun { stream },
                        headers,
                        ..
                    } => {
                        let mut names: Vec<String> =
                            headers.iter().map(|(n, _)| n.to_string()).collect();
                        names.sort();
                        let how = match stream {
                            Some(stream) => format!(
                                "stored by stream {}, confirmed{}",
                                render::safe(stream),
                                if options.delete {
                                    ", then its dead letter deleted"
                                } else {
                                    ""
                                }
                            ),
                            None => format!(
                                "no stream stores it: a Core publish, unconfirmed{}",
                                if options.delete {
                                    ", its dead letter kept"
                                } else {
                                    ""
                                }
                            ),
                        };
                        let headers = match names.is_empty() {
                            true => "no headers".to_owned(),
                            false => format!("headers {}", names.join(", ")),
                        };
                        let _ = writeln!(
                            out,
                            "would replay {sequence} to {} ({how}; {})",
                            render::safe(target),
                            render::safe(&headers)
                        );
                    }
                    ReplayEvent::Replayed {
                        sequence,
                        target,
                        sent,
                        deleted,
                        ..
                    } => {
                        let mut p = progress.borrow_mut();
                        let how = match sent {
                            Sent::Stored {
                                stream,
                                sequence: stored,
                                duplicate: false,
                            } => format!("stored {}#{stored}", render::safe(stream)),
                            Sent::Stored {
                                stream,
                                sequence: stored,
                                duplicate: true,
                            } => format!(
                                "stored before as {}#{stored} (a duplicate, not stored again)",
                                render::safe(stream)
                            ),
                            Sent::Core => "published on Core NATS, unconfirmed".to_owned(),
                            Sent::DryRun { .. } => String::new(),
                        };
                        let deleted = if *deleted {
                            ", dead letter deleted"
                        } else {
                            ""
                        };
                        p.println(
                            *out,
                            &format!(
                                "replayed {sequence} to {}: {how}{deleted}",
                                render::safe(target)
                            ),
                        );
                        p.step(*err);
                    }
                    ReplayEvent::Skipped { sequence, why } => progress
                        .borrow_mut()
                        .note(*err, &format!("skipped {sequence}: {why}")),
                }
            },
        )
        .await;
    progress.borrow_mut().finish();
    let (out, _) = lines.into_inner();
    let summary = summary?;
    writeln!(out, "{}", summary_text(stream, options, &summary))?;
    match (&summary.stopped_at, summary.resume_hint()) {
        (Some((sequence, why)), Some(hint)) => Err(CliError::Stopped(format!(
            "the replay stopped at dead letter {sequence}: {why}\n{hint}"
        ))),
        _ if !summary.skipped.is_empty() => Err(CliError::Stopped(format!(
            "{} selected dead letter(s) were not replayed (skipped, each said why above)",
            summary.skipped.len()
        ))),
        _ => Ok(()),
    }
}

fn summary_text(stream: &str, options: &ReplayOptions, s: &ReplaySummary) -> String {
    if options.dry_run {
        return format!(
            "dry run: {} of {} selected dead letter(s) of {stream} would be replayed, {} skipped; nothing was sent",
            s.dry_run,
            s.selected,
            s.skipped.len()
        );
    }
    let mut text = format!(
        "{stream}: {} selected; {} stored, {} stored before (a duplicate within the target stream's window: replayed already), {} published on Core NATS (unconfirmed), {} skipped",
        s.selected,
        s.stored,
        s.duplicates,
        s.core,
        s.skipped.len()
    );
    if options.delete {
        text.push_str(&format!(
            "; {} dead letter(s) deleted after their replay was confirmed",
            s.deleted
        ));
        if s.core > 0 {
            text.push_str(" (those published on Core NATS are kept: nothing confirmed them)");
        }
    }
    text
}

async fn purge(
    client: Client,
    stream: &str,
    filter: &Filter,
    yes: bool,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let dlq = DeadLetters::open(client, stream).await?;
    let library_filter = filter.to_filter();
    let sequences = dlq.select(&library_filter, filter.unmarked).await?;
    if sequences.is_empty() {
        writeln!(io.out, "no dead letters in {stream}: nothing to purge")?;
        return Ok(());
    }
    if !yes {
        write!(
            io.err,
            "delete {} dead letter(s) from {stream} ({})? [y/N] ",
            sequences.len(),
            library_filter.describe()
        )?;
        io.err.flush()?;
        let mut answer = String::new();
        io.input.read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
            return Err(CliError::Refused(
                "not confirmed: nothing was deleted (--yes deletes without asking)".to_owned(),
            ));
        }
    }
    let (mut deleted, mut gone) = (0u64, 0u64);
    for sequence in &sequences {
        match dlq.delete(*sequence).await {
            Ok(()) => deleted += 1,
            Err(DeadLetterError::NoSuchDeadLetter { .. }) => gone += 1,
            Err(e) => {
                writeln!(
                    io.out,
                    "{stream}: {deleted} dead letter(s) deleted before the purge stopped"
                )?;
                return Err(CliError::Stopped(format!(
                    "the purge stopped at dead letter {sequence}: {e}\nrun the same command again to delete the rest"
                )));
            }
        }
    }
    writeln!(
        io.out,
        "{stream}: {deleted} dead letter(s) deleted{}",
        match gone {
            0 => String::new(),
            n => format!(", {n} deleted by someone else meanwhile"),
        }
    )?;
    Ok(())
}
