//! What the demos share: logging, the server they use, a settlement's outcome as they print
//! it, the checks' lines and the exit code. Each demo declares its `server` module beside
//! this one.

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

/// The server the demo uses: `NATS_URL` if set, otherwise a private nats-server (kept
/// running while the returned value lives), and its URL.
///
/// # Errors
/// When no private nats-server can be started.
#[allow(clippy::print_stdout)]
pub(crate) fn nats_server()
-> Result<(Option<crate::server::NatsServer>, String), Box<dyn std::error::Error>> {
    Ok(match std::env::var("NATS_URL") {
        Ok(url) => {
            println!("using NATS_URL");
            (None, url)
        }
        Err(_) => {
            // In a process group of its own: a Ctrl-C (which stops a demo that keeps
            // running) must not stop the server the demo still checks against.
            let server = crate::server::NatsServer::try_start_with(crate::server::ServerOptions {
                own_process_group: true,
                ..crate::server::ServerOptions::default()
            })?;
            let url = server.url();
            println!("started a private nats-server at {url}");
            (Some(server), url)
        }
    })
}

/// A settlement's outcome as the demos print it: the handler's, or why it did not run.
pub(crate) fn outcome_text(s: &ruststream_adapter::Settled) -> String {
    match (s.outcome, s.undecodable) {
        (Some(o), _) => format!("{o:?}"),
        (None, true) => "(undecodable)".to_owned(),
        (None, false) => "(handler not run)".to_owned(),
    }
}
