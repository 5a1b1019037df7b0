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

/// The version of the nats-server binary tests run ([`nats_server_bin`]): `(major, minor,
/// patch)`, read once from `nats-server --version` (`nats-server: v2.9.10`).
///
/// # Panics
/// When there is no binary, or it does not say its version in that form.
pub fn nats_server_version() -> (u32, u32, u32) {
    static VERSION: std::sync::OnceLock<(u32, u32, u32)> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        let bin = nats_server_bin().unwrap_or_else(|e| panic!("{e}"));
        let out = Command::new(&bin)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {} --version: {e}", bin.display()));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let parsed = text.trim().rsplit('v').next().map(|v| {
            v.split(['.', '-'])
                .map(str::parse::<u32>)
                .collect::<Vec<_>>()
        });
        match parsed.as_deref() {
            Some([Ok(major), Ok(minor), Ok(patch), ..]) => (*major, *minor, *patch),
            _ => panic!("{} --version said {text:?}", bin.display()),
        }
    })
}

/// How a test server is set up beyond the defaults (JetStream on, no authorization).
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Run without JetStream (Core NATS only).
    pub without_jetstream: bool,
    /// Require this user and password of every client (`--user`, `--pass`).
    pub user_password: Option<(String, String)>,
    /// Require this token of every client (`--auth`).
    pub token: Option<String>,
    /// A configuration file's text (`-c`), for what has no command-line flag. The flags
    /// above win over it.
    pub config: Option<String>,
    /// Send ack reply subjects in their v2 form where the server can: nats-server 2.14 and
    /// later, with the `js_ack_fc_v2` feature flag (written into the configuration file);
    /// older ones send the v1 form whatever this says.
    pub ack_replies_v2: bool,
    /// Run the server in a process group of its own (Unix), so that a Ctrl-C at the terminal
    /// (SIGINT to the foreground group) reaches the program that started it, not the server:
    /// the demo, which stops on Ctrl-C, still has its server for its checks. Tests leave it
    /// off, so that a Ctrl-C stops their servers with them.
    pub own_process_group: bool,
}

/// A private nats-server with JetStream on a free loopback port and a temporary store,
/// killed on drop. It can be stopped and started again on the same port and store.
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    store: tempfile::TempDir,
    bin: PathBuf,
    options: ServerOptions,
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
        Self::try_start_with(ServerOptions::default())
    }

    /// Starts a server without JetStream (Core NATS only), for tests of what a mount does
    /// there.
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub fn start_without_jetstream() -> Self {
        Self::start_with(ServerOptions {
            without_jetstream: true,
            ..ServerOptions::default()
        })
    }

    /// Starts a server set up as `options` says.
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub fn start_with(options: ServerOptions) -> Self {
        Self::try_start_with(options).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a server set up as `options` says.
    ///
    /// # Errors
    /// As [`try_start`](Self::try_start).
    pub fn try_start_with(options: ServerOptions) -> Result<Self, String> {
        let mut server = Self {
            child: None,
            port: 0,
            store: tempfile::tempdir().map_err(|e| format!("no temporary store: {e}"))?,
            bin: nats_server_bin()?,
            options,
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
        // The server logs to stderr: into a file in the store, read back if it will not start.
        let log_file = self.store.path().join("server.log");
        let log = std::fs::File::create(&log_file).map_err(|e| format!("no server log: {e}"))?;
        let mut command = Command::new(&self.bin);
        let mut config = self.options.config.clone().unwrap_or_default();
        if self.options.ack_replies_v2 && nats_server_version() >= (2, 14, 0) {
            config.push_str("\nfeature_flags {\n  js_ack_fc_v2: true\n}\n");
        }
        if !config.is_empty() {
            let file = self.store.path().join("server.conf");
            std::fs::write(&file, config).map_err(|e| format!("cannot write {file:?}: {e}"))?;
            command.arg("-c").arg(file);
        }
        command.args(["-a", "127.0.0.1", "-p", &port_arg]);
        if !self.options.without_jetstream {
            command
                .args(["-js", "-sd"])
                .arg(self.store.path().join("jetstream"));
        }
        if let Some((user, password)) = &self.options.user_password {
            command.args(["--user", user, "--pass", password]);
        }
        if let Some(token) = &self.options.token {
            command.args(["--auth", token]);
        }
        #[cfg(unix)]
        if self.options.own_process_group {
            use std::os::unix::process::CommandExt;
            command.process_group(0);
        }
        let child = command
            .arg("--ports_file_dir")
            .arg(&ports_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.bin.display()))?;
        let pid = child.id();
        let child = self.child.insert(child);
        let deadline = Instant::now() + START_PATIENCE;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let said = std::fs::read_to_string(&log_file).unwrap_or_default();
                return Err(format!(
                    "nats-server exited at start-up with {status}: {}",
                    said.trim()
                ));
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

    /// The URL to connect to, with the server's user and password or token in it.
    pub fn url_with_credentials(&self) -> String {
        let port = self.port;
        match (&self.options.user_password, &self.options.token) {
            (Some((user, password)), _) => format!("nats://{user}:{password}@127.0.0.1:{port}"),
            (None, Some(token)) => format!("nats://{token}@127.0.0.1:{port}"),
            (None, None) => self.url(),
        }
    }

    /// How the server was set up.
    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// The version of the binary this server runs, as [`nats_server_version`] reads it.
    pub fn version(&self) -> (u32, u32, u32) {
        nats_server_version()
    }

    /// Kills the server (the store stays).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server's process where it stands (SIGSTOP): its connections stay open, and it
    /// reads and writes nothing until [`resume`](Self::resume), so that what clients send
    /// piles up in their buffers, as with a server that hangs.
    ///
    /// # Panics
    /// When the signal cannot be sent.
    pub fn pause(&mut self) {
        self.signal("STOP");
    }

    /// Lets a [`pause`](Self::pause)d server go on (SIGCONT).
    ///
    /// # Panics
    /// When the signal cannot be sent.
    pub fn resume(&mut self) {
        self.signal("CONT");
    }

    fn signal(&mut self, name: &str) {
        let child = self.child.as_ref().expect("a running nats-server");
        let sent = Command::new("sh")
            .args(["-c", "kill -s \"$1\" \"$2\"", "sh", name])
            .arg(child.id().to_string())
            .status();
        assert!(
            matches!(sent, Ok(s) if s.success()),
            "SIG{name} to nats-server: {sent:?}"
        );
    }

    /// Stops the server with SIGTERM, as a service manager does, and waits until it has exited
    /// (its JetStream store shut down cleanly); the store stays. Gives its exit status, which
    /// is not judged (nats-server 2.9.10 has been seen to exit 0 and 1 on SIGTERM). Nothing
    /// happens when it is not running.
    ///
    /// # Panics
    /// When the signal cannot be sent, or the server has not exited within 10 s (it is then
    /// killed).
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let sent = Command::new("sh")
            .args(["-c", "kill -s TERM \"$1\"", "sh"])
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + START_PATIENCE;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if !matches!(sent, Ok(s) if s.success()) || Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("nats-server did not exit on SIGTERM within 10 s (sent: {sent:?})");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts the server again on the same port and store, after [`stop`](Self::stop) (which
    /// kills it with SIGKILL) or [`terminate`](Self::terminate) (SIGTERM), so that a test can
    /// keep it down for a while in between.
    ///
    /// # Panics
    /// When it is still running, or does not come back.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "the server is still running");
        if let Err(e) = self.spawn() {
            panic!("{e}");
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
    ports_in_file(dir, pid)?.first().copied()
}

/// Every port of a `nats://` URL in the ports file nats-server writes for process `pid` once
/// it listens (client first; a clustered node's file lists its cluster port too), or `None`
/// while there is no such file.
pub(crate) fn ports_in_file(dir: &std::path::Path, pid: u32) -> Option<Vec<u16>> {
    let suffix = format!("_{pid}.ports");
    let entry = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().ends_with(&suffix))?;
    let text = std::fs::read_to_string(entry.path()).ok()?;
    Some(
        text.split('"')
            .filter(|s| s.starts_with("nats://"))
            .filter_map(|url| url.rsplit(':').next()?.parse::<u16>().ok())
            .collect(),
    )
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
