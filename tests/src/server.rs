//! A private nats-server for tests and examples: the binary from `NATS_SERVER_BIN` or `PATH`,
//! a free loopback port, a temporary JetStream store, killed on drop.
//!
//! Shared by the conformance suite (`ruststream-tests`) and the adapters' examples, which
//! include this file by path so that both start servers the same way.

use std::net::TcpStream;
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
    jetstream: bool,
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
        Self::try_start_with(true)
    }

    /// Starts a server without JetStream (Core NATS only), for tests of what a mount does
    /// there.
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub fn start_without_jetstream() -> Self {
        Self::try_start_with(false).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_start_with(jetstream: bool) -> Result<Self, String> {
        let mut server = Self {
            child: None,
            port: 0,
            store: tempfile::tempdir().map_err(|e| format!("no temporary store: {e}"))?,
            bin: nats_server_bin()?,
            jetstream,
        };
        server.spawn()?;
        Ok(server)
    }

    /// Starts the binary: on the port it had before, or on a port the server picks itself
    /// (`-p -1`), read back from its ports file, so that two servers never race for one port.
    fn spawn(&mut self) -> Result<(), String> {
        let ports_dir = self.store.path().join("ports");
        let _ = std::fs::remove_dir_all(&ports_dir);
        std::fs::create_dir_all(&ports_dir).map_err(|e| format!("no ports directory: {e}"))?;
        let port_arg = match self.port {
            0 => "-1".to_owned(),
            known => known.to_string(),
        };
        let mut command = Command::new(&self.bin);
        command.args(["-a", "127.0.0.1", "-p", &port_arg]);
        if self.jetstream {
            command
                .args(["-js", "-sd"])
                .arg(self.store.path().join("jetstream"));
        }
        let child = command
            .arg("--ports_file_dir")
            .arg(&ports_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.bin.display()))?;
        let pid = child.id();
        let child = self.child.insert(child);
        let deadline = Instant::now() + START_PATIENCE;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("nats-server exited at start-up with {status}"));
            }
            if let Some(port) = read_ports_file(&ports_dir, pid)
                && TcpStream::connect(("127.0.0.1", port)).is_ok()
            {
                self.port = port;
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err("nats-server did not become ready within 10 s".to_owned());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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

/// The client port in the ports file nats-server writes for process `pid` once it listens:
/// JSON like `{"client":["nats://127.0.0.1:PORT"],…}`.
fn read_ports_file(dir: &std::path::Path, pid: u32) -> Option<u16> {
    let suffix = format!("_{pid}.ports");
    let entry = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().ends_with(&suffix))?;
    let text = std::fs::read_to_string(entry.path()).ok()?;
    let url = text.split('"').find(|s| s.starts_with("nats://"))?;
    url.rsplit(':').next()?.parse().ok()
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
