//! A private nats-server cluster for fault tests: a few nodes with JetStream on loopback, each
//! with a client port of its own choosing, a cluster port, a name and a temporary store; every
//! node killed on drop.
//!
//! The binary is the one [`NatsServer`](crate::NatsServer) runs ([`nats_server_bin`]:
//! `NATS_SERVER_BIN`, else `PATH`). Client ports are picked by the server itself (`-p -1`) and
//! read back from its ports file, as a single test server's are. Cluster ports cannot be: every
//! node names the others' in `--routes` before they run. So they are reserved by binding
//! loopback port 0 and released just before the nodes start; if one was taken in between, the
//! node says "address already in use" and the whole cluster is started again on fresh ports.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::nats_server_bin;

/// How long every node of a cluster may take to start listening for clients.
const START_PATIENCE: Duration = Duration::from_secs(10);

/// How many times a cluster is started on fresh cluster ports when one was taken.
const PORT_ATTEMPTS: usize = 3;

/// One node: its name, ports, store, log and process (`None` once killed).
struct Node {
    name: String,
    client_port: u16,
    cluster_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Node {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A nats-server cluster with JetStream on loopback: every node routes to every other, runs
/// under a name of its own (`n1`, `n2`, …) in a cluster named after this process, and keeps its
/// store in a temporary directory. Every node still running is killed on drop.
pub struct NatsCluster {
    nodes: Vec<Node>,
    /// Every node's directory; removed after `Drop` has killed the nodes.
    store: tempfile::TempDir,
}

impl NatsCluster {
    /// Starts a cluster of `size` nodes and waits until every node accepts client connections.
    /// JetStream may need a few seconds more to elect its leaders: wait for it with the
    /// JetStream API itself (a stream creation that is retried until it succeeds, say).
    ///
    /// # Panics
    /// When no nats-server can be found, a node does not start within 10 s, or the cluster
    /// ports were taken three times in a row: a test fails loudly, it never skips.
    pub fn start(size: usize) -> Self {
        assert!(size >= 2, "a cluster has at least two nodes");
        let bin = nats_server_bin().unwrap_or_else(|e| panic!("{e}"));
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            match Self::try_start(&bin, size) {
                Ok(cluster) => return cluster,
                Err(e) if e.contains("address already in use") => last = e,
                Err(e) => panic!("{e}"),
            }
        }
        panic!("the cluster ports were taken {PORT_ATTEMPTS} times; last: {last}");
    }

    fn try_start(bin: &Path, size: usize) -> Result<Self, String> {
        static CLUSTERS: AtomicU32 = AtomicU32::new(0);
        let cluster_name = format!(
            "ruststream-{}-{}",
            std::process::id(),
            CLUSTERS.fetch_add(1, Ordering::Relaxed)
        );
        let store = tempfile::tempdir().map_err(|e| format!("no temporary store: {e}"))?;
        let cluster_ports = reserve_ports(size)?;
        let mut cluster = Self {
            nodes: Vec::with_capacity(size),
            store,
        };
        for (index, &cluster_port) in cluster_ports.iter().enumerate() {
            let dir = cluster.store.path().join(format!("n{}", index + 1));
            std::fs::create_dir_all(dir.join("ports"))
                .map_err(|e| format!("no node directory: {e}"))?;
            cluster.nodes.push(Node {
                name: format!("n{}", index + 1),
                client_port: 0,
                cluster_port,
                dir,
                child: None,
            });
        }
        for index in 0..size {
            let routes: Vec<String> = cluster
                .nodes
                .iter()
                .filter(|other| other.cluster_port != cluster.nodes[index].cluster_port)
                .map(|other| format!("nats://127.0.0.1:{}", other.cluster_port))
                .collect();
            let node = &mut cluster.nodes[index];
            let log = std::fs::File::create(node.dir.join("server.log"))
                .map_err(|e| format!("no server log: {e}"))?;
            let child = Command::new(bin)
                .args(["-a", "127.0.0.1", "-p", "-1", "-n", &node.name])
                .args(["--cluster_name", &cluster_name])
                .arg("--cluster")
                .arg(format!("nats://127.0.0.1:{}", node.cluster_port))
                .arg("--routes")
                .arg(routes.join(","))
                .arg("-js")
                .arg("-sd")
                .arg(node.dir.join("jetstream"))
                .arg("--ports_file_dir")
                .arg(node.dir.join("ports"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(log))
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
            node.child = Some(child);
        }
        // Every node is running; now wait until each listens for clients.
        let deadline = Instant::now() + START_PATIENCE;
        for node in &mut cluster.nodes {
            loop {
                let child = node.child.as_mut().expect("just started");
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!(
                        "nats-server {} exited at start-up with {status}: {}",
                        node.name,
                        node.log().trim()
                    ));
                }
                let pid = child.id();
                if let Some(port) = client_port(&node.dir.join("ports"), pid, node.cluster_port)
                    && TcpStream::connect(("127.0.0.1", port)).is_ok()
                {
                    node.client_port = port;
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(format!(
                        "nats-server {} did not listen within {START_PATIENCE:?}: {}",
                        node.name,
                        node.log().trim()
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(cluster)
    }

    /// How many nodes the cluster has (killed ones included).
    pub fn size(&self) -> usize {
        self.nodes.len()
    }

    /// The client URL of node `index` (from 0).
    pub fn url(&self, index: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[index].client_port)
    }

    /// The client port of node `index`.
    pub fn client_port(&self, index: usize) -> u16 {
        self.nodes[index].client_port
    }

    /// The server name of node `index` (`n1` for index 0), as JetStream names leaders.
    pub fn name(&self, index: usize) -> &str {
        &self.nodes[index].name
    }

    /// The index of the node named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Whether node `index` is still running (not killed, not exited).
    pub fn is_running(&mut self, index: usize) -> bool {
        match self.nodes[index].child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills node `index` with SIGKILL and waits until it is gone; its store stays.
    pub fn kill(&mut self, index: usize) {
        self.nodes[index].kill();
    }

    /// What node `index` has logged so far, for a failure message.
    pub fn log(&self, index: usize) -> String {
        self.nodes[index].log()
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
    }
}

/// `n` distinct free loopback ports: each bound (all at once, so that they differ) and released.
fn reserve_ports(n: usize) -> Result<Vec<u16>, String> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind(("127.0.0.1", 0)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("no free loopback port: {e}"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("no local address: {e}"))
}

/// The client port in the ports file nats-server writes for process `pid` once it listens:
/// the first `nats://` URL that is not on the cluster port.
fn client_port(dir: &Path, pid: u32, cluster_port: u16) -> Option<u16> {
    crate::server::ports_in_file(dir, pid)?
        .into_iter()
        .find(|port| *port != cluster_port)
}
