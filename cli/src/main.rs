//! `ruststream`: the operator's command (see the crate docs of `ruststream_tools`).

use std::io::IsTerminal;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let terminal = std::io::stderr().is_terminal();
    let code = ruststream_tools::run(
        std::env::args_os(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr(),
        &mut std::io::stdin().lock(),
        terminal,
    )
    .await;
    ExitCode::from(code)
}
