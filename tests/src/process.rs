//! The `scripted` example (or another) run as a process, as a user runs it: its output
//! collected line by line, signals sent to it, its exit awaited.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::example_bin;

/// A running `scripted` (or other example) and every line it has printed so far. Killed on
/// drop.
pub struct Scripted {
    child: Child,
    /// Its standard output, a line an entry.
    pub stdout: Arc<Mutex<Vec<String>>>,
    /// Its standard error, a line an entry.
    pub stderr: Arc<Mutex<Vec<String>>>,
}

fn collect(stream: impl std::io::Read + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

impl Scripted {
    /// Starts `scripted` with `args` and the environment `env` (over `NATS_URL` removed and
    /// `RUST_LOG=trace`).
    ///
    /// # Panics
    /// When the example is not built ([`example_bin`]) or does not start.
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut with_trace = vec![("RUST_LOG", "trace")];
        with_trace.extend_from_slice(env);
        Self::spawn_bin(&example_bin("scripted"), args, &with_trace)
    }

    /// Starts another example, `bin` (from [`build_examples`](crate::build_examples)), with
    /// `args` and the environment `env` (over `NATS_URL` removed), and collects its output
    /// the same way.
    ///
    /// # Panics
    /// When it does not start.
    pub fn spawn_bin(bin: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(bin);
        command
            .args(args)
            .env_remove("NATS_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", bin.display()));
        let stdout = collect(child.stdout.take().unwrap());
        let stderr = collect(child.stderr.take().unwrap());
        Self {
            child,
            stdout,
            stderr,
        }
    }

    /// Everything printed so far: standard output, then standard error.
    pub fn printed(&self) -> String {
        let mut all = self.stdout.lock().unwrap().join("\n");
        all.push('\n');
        all.push_str(&self.stderr.lock().unwrap().join("\n"));
        all
    }

    /// Waits until it has printed `text`.
    ///
    /// # Panics
    /// After [`PATIENCE`](crate::PATIENCE) without it.
    pub async fn wait_for(&self, text: &str) {
        crate::eventually(&format!("scripted to print {text:?}"), || {
            self.printed().contains(text).then_some(())
        })
        .await;
    }

    /// Waits (at most `within`) for the process to exit; its exit code.
    ///
    /// # Panics
    /// When it does not exit in time, or is killed by a signal.
    pub async fn exit_code(&mut self, within: Duration) -> i32 {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the reader threads take the last lines.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return status.code().expect("exited, not killed by a signal");
            }
            assert!(
                Instant::now() < deadline,
                "scripted did not exit:\n{}",
                self.printed()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends it SIGTERM.
    ///
    /// # Panics
    /// When `kill` fails.
    pub fn terminate(&self) {
        let status = Command::new("sh")
            .args(["-c", "kill -s TERM \"$1\"", "sh"])
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -s TERM failed: {status}");
    }

    /// Kills it with SIGKILL and reaps it.
    ///
    /// # Panics
    /// When it cannot be killed.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
