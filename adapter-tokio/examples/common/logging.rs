//! Logging, the checks' lines and the exit code, shared by the demos.

/// Sets up logging to stderr (plain when stderr is not a terminal), at `RUST_LOG` or `warn`.
pub(crate) fn init() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// The process exit code for the demo's result: 0 agrees, 1 disagrees, 2 failed.
pub(crate) fn exit_code(
    result: Result<bool, Box<dyn std::error::Error>>,
) -> std::process::ExitCode {
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("demo failed: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Prints one line per check (what, whether it agrees, the figures), then the verdict:
/// whether every check agrees.
#[allow(clippy::print_stdout)]
pub(crate) fn print_checks(checks: &[(&str, bool, String)]) -> bool {
    let mut ok = true;
    for (what, passed, detail) in checks {
        println!(
            "server check: {what}: {} ({detail})",
            if *passed { "agrees" } else { "DISAGREES" }
        );
        ok &= passed;
    }
    println!(
        "{}",
        if ok {
            "the summary agrees with the server"
        } else {
            "the summary does NOT agree with the server"
        }
    );
    ok
}
