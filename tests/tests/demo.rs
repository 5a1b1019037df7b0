//! The demos, run as a new user runs them (`cargo run --example demo`): each starts its own
//! nats-server (from `NATS_SERVER_BIN` or `PATH`), and exits 0 only when its summary agrees
//! with what the server reports.

#![allow(clippy::unwrap_used, missing_docs)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ruststream_tests::example_bin;

/// Runs the example `name` to its end (at most a minute) and gives its exit code and output.
fn run_demo(name: &str) -> (Option<i32>, String) {
    let mut child = Command::new(example_bin(name))
        .env_remove("NATS_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the demo starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let printed = format!("{out}\n--- stderr ---\n{err}");
    assert!(
        status.is_some(),
        "{name} did not end within a minute:\n{printed}"
    );
    (status.and_then(|s| s.code()), printed)
}

/// The orders service demo (tokio): every check agrees with the server.
#[test]
fn the_orders_demo_agrees_with_the_server() {
    let (code, printed) = run_demo("demo");
    assert_eq!(code, Some(0), "{printed}");
    assert!(
        printed.contains("the summary agrees with the server"),
        "{printed}"
    );
    assert!(!printed.contains("DISAGREES"), "{printed}");
    assert!(
        printed.contains("orders.count answered: {\"accepted\":3}"),
        "{printed}"
    );
}

/// The smol demo: every check agrees with the server.
#[test]
fn the_smol_demo_agrees_with_the_server() {
    let (code, printed) = run_demo("smol_demo");
    assert_eq!(code, Some(0), "{printed}");
    assert!(
        printed.contains("the summary agrees with the server"),
        "{printed}"
    );
}
