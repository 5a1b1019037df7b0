//! `ruststream-explore`: runs the explorer (`ruststream_sim::explore`) over a range of seeds,
//! each a random scenario of mounts, messages and faults on the simulator, checked against the
//! settlement contract's invariants. `scripts/explore.sh` runs it.
//!
//! ```text
//! ruststream-explore [--seeds N] [--from SEED] [--minutes M] [--twice K] [--shrink] [--show]
//! ruststream-explore --bug NAME|all [--seeds N] [--from SEED]     (feature deliberate-bugs)
//! ```
//!
//! Every failing seed prints one command that runs it again, alone. Exit status: 0 when every
//! seed held, 1 when an invariant broke or a seed run twice did not run the same way.
//!
//! With `--bug`, one of the runtime's deliberate bugs is switched on
//! (`ruststream_adapter::deliberate`) and the seeds run until one finds it: the exit status is
//! 0 when every bug asked for was found within `--seeds` seeds, and each line says after how
//! many.

#![allow(clippy::print_stdout)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use ruststream_sim::explore::{self, Scenario};

/// Seeded random scenarios on the simulator, checked against the settlement contract.
#[derive(Debug, Parser)]
#[command(name = "ruststream-explore")]
struct Args {
    /// How many seeds to run (with --minutes: at most this many).
    #[arg(long, default_value_t = 200)]
    seeds: u64,
    /// The first seed; by default one drawn from the clock, printed first.
    #[arg(long)]
    from: Option<u64>,
    /// Run for this many minutes (then the seeds are not bounded unless --seeds is given too).
    #[arg(long)]
    minutes: Option<f64>,
    /// Run the first K seeds twice and check that each runs the same way.
    #[arg(long, default_value_t = 0)]
    twice: u64,
    /// Shrink each failing seed to a smaller scenario that breaks the same invariant.
    #[arg(long)]
    shrink: bool,
    /// Print each seed's scenario (JSON) and what it came to.
    #[arg(long)]
    show: bool,
    /// Print each seed's whole trace: every journal record and handler run, with its virtual
    /// time (the lines its fingerprint hashes).
    #[arg(long)]
    trace: bool,
    /// Switch on a deliberate bug (`settle-before-dead-letter`, `drop-lease-renewal`,
    /// `forget-core-drop`, `retry-past-limit`, `lose-delayed-copy`, `settle-late-result`,
    /// `key-turn-skipped`, or `all`, one after another) and run seeds until one finds it, at most --seeds. Needs the
    /// `deliberate-bugs` feature, which scripts/explore.sh turns on for it.
    #[arg(long)]
    bug: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    quiet_deliberate_panics();
    // The runtime's log, when asked for (`RUST_LOG=ruststream=debug`): off by default, as a
    // scenario's faults make it loud.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    if let Some(bug) = &args.bug {
        return hunt(bug, args.from.unwrap_or(0), args.seeds);
    }
    let from = args.from.unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        // Small enough to type: below ten million.
        (nanos % 10_000_000) as u64
    });
    let bounded_by_seeds = args.minutes.is_none() || std::env::args().any(|a| a == "--seeds");
    if let Some(m) = args.minutes
        && !(m.is_finite() && m >= 0.0 && m * 60.0 < 1e15)
    {
        println!("explore: --minutes must be a number of minutes, 0 or more, not {m}");
        return ExitCode::FAILURE;
    }
    let deadline = args
        .minutes
        .map(|m| Instant::now() + Duration::from_secs_f64(m * 60.0));
    println!(
        "explore: seeds from {from}{}{}",
        match bounded_by_seeds {
            true => format!(", {} of them", args.seeds),
            false => String::new(),
        },
        match args.minutes {
            Some(m) => format!(", for at most {m} minutes"),
            None => String::new(),
        }
    );
    let started = Instant::now();
    let (mut ran, mut failed, mut unsettled, mut trouble) = (0u64, 0u64, 0u64, 0u64);
    let (mut windows, mut poisoned, mut removed) = (0u64, 0u64, 0u64);
    let mut seed = from;
    loop {
        if bounded_by_seeds && ran >= args.seeds {
            break;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if args.show {
            println!(
                "seed {seed}: scenario {}",
                serde_json_line(&Scenario::of_seed(seed))
            );
        }
        if args.trace {
            let trace = explore::run(&Scenario::of_seed(seed));
            for line in explore::canonical(&trace) {
                println!("seed {seed}: {line}");
            }
        }
        let Some(checked) = within_limit(seed) else {
            println!(
                "seed {seed}: hung: still running after {HANG:?} of real time, its virtual clock stopped (a task that never waits)"
            );
            println!(
                "seed {seed}: rerun alone with: scripts/explore.sh --from {seed} --seeds 1 --show"
            );
            // The stuck run's thread cannot be stopped: the explorer ends here.
            return ExitCode::FAILURE;
        };
        ran += 1;
        if args.show {
            show(seed, &checked);
        }
        if !checked.settled {
            unsettled += 1;
        }
        if !checked.trouble.is_empty() {
            trouble += 1;
        }
        windows += checked.windows.len() as u64;
        poisoned += checked.poisoned as u64;
        removed += checked.poisons_removed as u64;
        if args.show {
            for line in &checked.windows {
                println!("seed {seed}: {line}");
            }
        }
        let mut broke = !checked.violations.is_empty();
        for v in &checked.violations {
            println!("seed {seed}: {v}");
        }
        if seed - from < args.twice {
            let Some(again) = within_limit(seed) else {
                println!("seed {seed}: hung the second time it ran");
                return ExitCode::FAILURE;
            };
            if again.fingerprint != checked.fingerprint {
                broke = true;
                println!(
                    "seed {seed}: not deterministic: two runs differ (fingerprints {:x} and {:x}); run `scripts/explore.sh --from {seed} --seeds 1 --trace` a few times and compare",
                    checked.fingerprint, again.fingerprint
                );
            }
        }
        if broke {
            failed += 1;
            println!(
                "seed {seed}: rerun alone with: scripts/explore.sh --from {seed} --seeds 1 --show"
            );
            if args.shrink
                && let Some(first) = checked.violations.first()
                && let Some(smaller) = explore::shrink(seed, first.invariant, 300)
            {
                println!(
                    "seed {seed}: a smaller scenario that breaks it: {}",
                    serde_json_line(&smaller)
                );
            }
        }
        let Some(next) = seed.checked_add(1) else {
            // The last seed there is: nothing after it.
            seed = u64::MAX;
            break;
        };
        seed = next;
    }
    let elapsed = started.elapsed();
    let per_minute = ran as f64 / elapsed.as_secs_f64().max(1e-9) * 60.0;
    println!(
        "explore: {ran} seeds ({from}..{seed}) in {:.1} s, {per_minute:.0} a minute; {failed} failed, {unsettled} still settling at their end, {trouble} with an app that did not start, {windows} Core copies, dead letters or messages lost in rule 21's window (async-nats held them as a fault or a poison closed the connection; --show names them), {poisoned} Core poisons brought a client down, {removed} stored poisons ended an app naming them and were removed",
        elapsed.as_secs_f64()
    );
    match failed {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

/// How long one seed may run in real time: a run whose virtual clock stops (a task that
/// never waits) would otherwise hang the explorer.
const HANG: Duration = Duration::from_secs(60);

/// Runs seed `seed` on a thread of its own, for at most [`HANG`]: `None` when it hung.
fn within_limit(seed: u64) -> Option<explore::Checked> {
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(explore::check_seed(seed));
    });
    ended.recv_timeout(HANG).ok()
}

/// A seed's scenario and what it came to.
fn show(seed: u64, checked: &explore::Checked) {
    println!(
        "seed {seed}: {} handler runs, {} journal records, settled {}, fingerprint {:x}{}",
        checked.size.0,
        checked.size.1,
        checked.settled,
        checked.fingerprint,
        match checked.trouble.is_empty() {
            true => String::new(),
            false => format!(", trouble: {:?}", checked.trouble),
        }
    );
}

fn serde_json_line(scenario: &Scenario) -> String {
    serde_json::to_string(scenario).unwrap_or_else(|e| format!("(does not encode: {e})"))
}

/// The scenarios' handlers panic on purpose (rule 13): those panics are not printed; any
/// other is, as usual.
/// `--bug`: for each bug asked for, switched on alone, runs seeds from `from` until one breaks
/// an invariant, at most `seeds` of them, and says after how many.
fn hunt(name: &str, from: u64, seeds: u64) -> ExitCode {
    use ruststream_adapter::deliberate::Bug;
    let bugs: Vec<Bug> = match name {
        "all" => Bug::ALL.to_vec(),
        _ => match Bug::named(name) {
            Some(bug) => vec![bug],
            None => {
                let names: Vec<&str> = Bug::ALL.iter().map(|b| b.name()).collect();
                println!(
                    "explore: no deliberate bug is named {name:?}; the bugs are {}, or all",
                    names.join(", ")
                );
                return ExitCode::FAILURE;
            }
        },
    };
    if !cfg!(feature = "deliberate-bugs") {
        println!(
            "explore: --bug needs the deliberate-bugs feature (scripts/explore.sh turns it on when --bug is given)"
        );
        return ExitCode::FAILURE;
    }
    let mut missed = 0;
    for bug in bugs {
        switch_on(Some(bug));
        let started = Instant::now();
        let mut found = None;
        for seed in from..from.saturating_add(seeds) {
            let Some(checked) = within_limit(seed) else {
                found = Some((seed, "a hung run (its virtual clock stopped)".to_owned()));
                break;
            };
            if let Some(v) = checked.violations.first() {
                found = Some((seed, v.to_string()));
                break;
            }
        }
        switch_on(None);
        match found {
            Some((seed, what)) => println!(
                "bug {}: found at seed {seed}, the {} seed run, in {:.1} s: {what}\nbug {}: see it with: scripts/explore.sh --bug {} --from {seed} --seeds 1 (then, without --bug, --from {seed} --seeds 1 --show --trace shows the seed's run without the bug)",
                bug.name(),
                ordinal(seed - from + 1),
                started.elapsed().as_secs_f64(),
                bug.name(),
                bug.name(),
            ),
            None => {
                missed += 1;
                println!(
                    "bug {}: not found in {seeds} seeds from {from} ({:.1} s)",
                    bug.name(),
                    started.elapsed().as_secs_f64()
                );
            }
        }
    }
    match missed {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

/// Switches a deliberate bug on (or all off) where the feature is built in.
fn switch_on(bug: Option<ruststream_adapter::deliberate::Bug>) {
    #[cfg(feature = "deliberate-bugs")]
    ruststream_adapter::deliberate::switch_on(bug);
    #[cfg(not(feature = "deliberate-bugs"))]
    let _ = bug;
}

/// `1st`, `2nd`, `3rd`, `4th`, … `11th`, `21st`.
fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

fn quiet_deliberate_panics() {
    let usual = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str));
        // A poison (`Scenario::poisons`) makes async-nats' connection task panic on the
        // header value it cannot read: that is the fault, played on purpose.
        if message.is_some_and(|m| {
            m.starts_with("explorer:") || m.starts_with("invalid header value: cannot contain")
        }) {
            return;
        }
        usual(info);
    }));
}
