//! A private nats-server for tests and examples: the binary from `NATS_SERVER_BIN` or `PATH`,
//! a free loopback port, a temporary JetStream store, killed on drop.
//!
//! Shared by the conformance suite (`ruststream-tests`) and the adapters' examples, which
//! include this file by path so that both start servers the same way.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to start listening.
const START_PATIENCE: Duration = Duration::from_secs(10);

/// Where the nats-server binary is: `NATS_SERVER_BIN`, else `nats-server` on `PATH`.
///
/// # Errors
/// A message saying how to install one, when neither exists.
pub fn nats_server_bin() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("NATS_SERVER_BIN") {
        let bin = PathBuf::from(bin);
        return match bin.is_file() {
            true => Ok(bin),
            false => Err(format!("NATS_SERVER_BIN={} is not a file", bin.display())),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            "nats-server not found on PATH and NATS_SERVER_BIN is not set: install it \
             (Debian: apt-get install nats-server) or point NATS_SERVER_BIN at the binary"
                .to_owned()
        })
}

/// A private nats-server with JetStream on a free loopback port and a temporary store,
/// killed on drop. It can be stopped and started again on the same port and store.
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    store: tempfile::TempDir,
    bin: PathBuf,
}

impl NatsServer {
    /// Starts a server and waits until it accepts connections.
    ///
    /// # Panics
    /// When [`try_start`](Self::try_start) fails: a test fails loudly, it never skips.
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a server and waits until it accepts connections.
    ///
    /// # Errors
    /// When the binary is missing, no port or store can be had, or the server does not
    /// listen within 10 s.
    pub fn try_start() -> Result<Self, String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| format!("no free loopback port: {e}"))?;
        let mut server = Self {
            child: None,
            port,
            store: tempfile::tempdir().map_err(|e| format!("no temporary store: {e}"))?,
            bin: nats_server_bin()?,
        };
        server.spawn()?;
        Ok(server)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let child = Command::new(&self.bin)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.bin.display()))?;
        let child = self.child.insert(child);
        let deadline = Instant::now() + START_PATIENCE;
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "nats-server exited at start-up with {status} (port {})",
                    self.port
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "nats-server did not listen on port {} within 10 s",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The URL to connect to.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Kills the server (the store stays).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and store.
    ///
    /// # Panics
    /// When it does not come back.
    pub fn restart(&mut self) {
        self.stop();
        if let Err(e) = self.spawn() {
            panic!("{e}");
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
