//! The explorer's poisons (`Scenario::poisons`): a message whose header block async-nats
//! cannot read, published to a Core mount's subject, which brings down the app's client and
//! every mount on it (rule 20). The draw leaves every other draw of a seed as it was; a run
//! with one passes the invariants, and the rule 20 invariants fail a run whose app did not
//! come back.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use ruststream_sim::explore::invariants::check;
use ruststream_sim::explore::scenario::Fault;
use ruststream_sim::explore::{Scenario, Trace, run};

/// The first seed from 0 whose poison reached the app's client with no restart after it.
fn poisoned_run() -> (u64, Trace) {
    for seed in 0..2_000 {
        let scenario = Scenario::of_seed(seed);
        let Some(&poison) = scenario.poisons.first() else {
            continue;
        };
        let restarted_after = scenario
            .faults
            .iter()
            .any(|f| matches!(f.fault, Fault::Restart { .. }) && f.at_ms >= poison);
        if restarted_after {
            continue;
        }
        let trace = run(&scenario);
        if trace.poisons.iter().any(|p| p.1 > 0) && trace.dropped.is_empty() {
            return (seed, trace);
        }
    }
    panic!("no seed in 0..2000 has a poison that reached its app");
}

#[test]
fn about_one_seed_in_eight_with_a_core_mount_draws_a_poison() {
    let with_core: Vec<Scenario> = (0..800)
        .map(Scenario::of_seed)
        .filter(|s| s.mounts.iter().any(|m| !m.is_jetstream()))
        .collect();
    let poisoned = with_core.iter().filter(|s| !s.poisons.is_empty()).count();
    assert!(
        (with_core.len() / 16..with_core.len() / 4).contains(&poisoned),
        "{poisoned} of {} seeds with a Core mount",
        with_core.len()
    );
    assert!(
        (0..800)
            .map(Scenario::of_seed)
            .filter(|s| s.mounts.iter().all(|m| m.is_jetstream()))
            .all(|s| s.poisons.is_empty()),
        "a poison needs a Core mount"
    );
}

#[test]
fn a_poisoned_run_passes_and_its_app_came_back_on_a_new_client() {
    let (seed, trace) = poisoned_run();
    assert_eq!(check(&trace), [], "seed {seed}");
    let recoveries: Vec<_> = trace
        .reports
        .iter()
        .flat_map(|(_, r)| r.recoveries.iter())
        .collect();
    assert!(
        recoveries.iter().any(|r| r.reason.contains("new client")),
        "seed {seed}: {recoveries:?}"
    );
    // The client went down at the poison: the model saw a connection close then.
    let at = trace.poisons.iter().find(|p| p.1 > 0).unwrap().0;
    assert!(
        trace.journal.iter().any(|r| matches!(
            r,
            ruststream_sim::Record::Disconnected { at: closed, .. }
                if closed.saturating_duration_since(trace.start) >= at
                    && closed.saturating_duration_since(trace.start) <= at + Duration::from_secs(1)
        )),
        "seed {seed}: no connection closed within 1 s of the poison at {at:?}"
    );
}

#[test]
fn an_app_that_did_not_come_back_or_ended_breaks_rule_20() {
    let (seed, trace) = poisoned_run();
    let mut not_back = trace.clone();
    for (_, report) in &mut not_back.reports {
        report.recoveries.clear();
    }
    let found = check(&not_back);
    assert!(
        found
            .iter()
            .any(|v| v.invariant == "rule 20: a client a poison brought down is replaced"),
        "seed {seed}: {found:?}"
    );
    let mut ended = trace;
    ended.reports.last_mut().unwrap().1.failure = Some("gave up".to_owned());
    let found = check(&ended);
    assert!(
        found
            .iter()
            .any(|v| v.invariant == "rule 20: a poison on Core ends no app"),
        "seed {seed}: {found:?}"
    );
}
