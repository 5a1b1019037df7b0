//! The model on a socket: a NATS protocol endpoint on loopback TCP that async-nats connects to
//! as to a nats-server, serving every client operation from one [`Server`] and driving the
//! model's timers with the runtime's clock.
//!
//! This is the simulator's seam for I/O. The runtime's adapter talks to NATS only through
//! async-nats, and async-nats only through the NATS client protocol; serving that protocol
//! from the model runs the same adapter code, the user's own client (`Context::client()`,
//! `App::with_client`) included, with no trait in the adapter's hot path. On a current-thread
//! tokio runtime with its clock paused, loopback bytes are readable as soon as they are
//! written, so the runtime only moves its virtual clock when every task, the endpoint's
//! included, waits for a timer: runs are deterministic.
//!
//! This folder is the simulator's async side, above the model (it imports `crate::model`,
//! which never imports it): this file is the endpoint, `runtime.rs` the virtual-time
//! [`Runtime`](runtime::Runtime) and its clock, `harness.rs` the [`Sim`](harness::Sim) test
//! API that holds the endpoint.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc};

use crate::model::error::SimError;
use crate::model::ids::{ConnectionId, SubscriptionId};
use crate::model::journal::Publish;
use crate::model::server::{PULL_PREFIX, Server};
use crate::model::wire::api::API_PREFIX;
use crate::model::wire::protocol::{self, ClientOp};

pub(crate) mod harness;
pub(crate) mod runtime;

/// Direct gets: `$JS.API.DIRECT.GET.<stream>`.
const DIRECT_GET_PREFIX: &str = "$JS.API.DIRECT.GET.";

/// The virtual instant: the runtime's clock, which a paused tokio runtime moves only when
/// every task waits for a timer.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// What a client must give in its `CONNECT` to be let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authorization {
    /// A user and password (`user`, `pass`), as `nats://user:password@host` gives them.
    UserPassword {
        /// The user.
        user: String,
        /// The password.
        password: String,
    },
    /// A token (`auth_token`), as `nats://token@host` gives it.
    Token(String),
}

impl Authorization {
    /// Whether a `CONNECT`'s JSON options give what this requires.
    fn admits(&self, options: &str) -> bool {
        let options: serde_json::Value = serde_json::from_str(options).unwrap_or_default();
        let field = |name: &str| options.get(name).and_then(serde_json::Value::as_str);
        match self {
            Self::UserPassword { user, password } => {
                field("user") == Some(user.as_str()) && field("pass") == Some(password.as_str())
            }
            Self::Token(token) => field("auth_token") == Some(token.as_str()),
        }
    }
}

/// How the endpoint lets clients in: what it requires, whether JetStream is on, whether it is
/// up.
#[derive(Debug, Clone)]
pub(crate) struct Access {
    pub(crate) authorization: Option<Authorization>,
    pub(crate) jetstream: bool,
    pub(crate) up: bool,
}

/// What the endpoint's tasks and the test share.
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    /// Woken when the model may have a new next timer.
    changed: Notify,
}

pub(crate) struct Inner {
    pub(crate) server: Server,
    pub(crate) access: Access,
    clients: BTreeMap<ConnectionId, Client>,
    routes: BTreeMap<SubscriptionId, Route>,
}

/// A client connection's socket side.
struct Client {
    /// Its `CONNECT` was taken (always, with no authorization required).
    admitted: bool,
    out: mpsc::UnboundedSender<Bytes>,
    sids: HashMap<String, SubscriptionId>,
    close: Arc<Notify>,
}

/// Where the model's deliveries for a subscription go.
struct Route {
    connection: ConnectionId,
    sid: String,
    delivered: u64,
    /// `UNSUB <sid> <max>`: the subscription ends after this many deliveries in all.
    max: Option<u64>,
}

impl Shared {
    pub(crate) fn new(server: Server) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner {
                server,
                access: Access {
                    authorization: None,
                    jetstream: true,
                    up: true,
                },
                clients: BTreeMap::new(),
                routes: BTreeMap::new(),
            }),
            changed: Notify::new(),
        })
    }

    /// The model, locked. Never held across an await.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the model, then sends what it queued and lets the timer task look again.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut Server) -> T) -> T {
        let out = {
            let mut inner = self.lock();
            let out = f(&mut inner.server);
            inner.flush();
            out
        };
        self.changed.notify_one();
        out
    }

    /// Closes every client connection at once, as a network failure would: the model forgets
    /// them (their subscriptions and waiting pull requests end) before this returns, and their
    /// sockets close; async-nats reconnects.
    pub(crate) fn drop_clients(&self) -> Vec<ConnectionId> {
        let dropped = {
            let mut inner = self.lock();
            let dropped: Vec<ConnectionId> = inner.clients.keys().copied().collect();
            for connection in &dropped {
                inner.close(*connection);
            }
            inner.flush();
            dropped
        };
        self.changed.notify_one();
        dropped
    }

    /// Goes down (`up` false: every connection closed, new ones closed at once, as a stopped
    /// server's port refuses them) or comes back up.
    pub(crate) fn set_up(&self, up: bool) {
        self.lock().access.up = up;
        if !up {
            self.drop_clients();
        }
    }

    /// The open client connections, in the order they connected.
    pub(crate) fn clients(&self) -> Vec<ConnectionId> {
        self.lock().clients.keys().copied().collect()
    }
}

impl Inner {
    /// Sends the model's outbox to the sockets.
    fn flush(&mut self) {
        while let Some(delivered) = self.server.poll_delivered() {
            let Some(route) = self.routes.get_mut(&delivered.subscription) else {
                continue;
            };
            route.delivered += 1;
            let done = route.max.is_some_and(|max| route.delivered >= max);
            if let Some(client) = self.clients.get(&route.connection) {
                let mut out = BytesMut::new();
                protocol::write_message(&mut out, &route.sid, &delivered.message);
                let _ = client.out.send(out.freeze());
            }
            if done {
                self.end_subscription(delivered.subscription);
            }
        }
    }

    fn end_subscription(&mut self, subscription: SubscriptionId) {
        if let Some(route) = self.routes.remove(&subscription)
            && let Some(client) = self.clients.get_mut(&route.connection)
        {
            client.sids.remove(&route.sid);
        }
        // Already gone when the connection closed.
        let _ = self.server.unsubscribe(subscription);
    }

    /// Forgets a client connection: the model disconnects it, and its task closes the socket.
    /// Nothing happens for one already closed.
    fn close(&mut self, connection: ConnectionId) {
        if let Some(client) = self.clients.remove(&connection) {
            client.close.notify_one();
        }
        self.routes.retain(|_, r| r.connection != connection);
        let _ = self.server.disconnect(connection, now());
    }

    fn send(&self, connection: ConnectionId, bytes: impl Into<Bytes>) {
        if let Some(client) = self.clients.get(&connection) {
            let _ = client.out.send(bytes.into());
        }
    }

    /// Applies one operation of `connection`. `Err` closes the connection after its `-ERR`.
    fn apply(&mut self, connection: ConnectionId, op: ClientOp) -> Result<(), ()> {
        let admitted = self.clients.get(&connection).is_some_and(|c| c.admitted);
        match op {
            ClientOp::Connect(options) => {
                let admits = self
                    .access
                    .authorization
                    .as_ref()
                    .is_none_or(|a| a.admits(&options));
                if !admits {
                    self.send(connection, &b"-ERR 'Authorization Violation'\r\n"[..]);
                    return Err(());
                }
                if let Some(client) = self.clients.get_mut(&connection) {
                    client.admitted = true;
                }
                return Ok(());
            }
            ClientOp::Pong => return Ok(()),
            ClientOp::Ping if admitted => {
                self.send(connection, &b"PONG\r\n"[..]);
                return Ok(());
            }
            _ if !admitted => {
                // nats-server wants `CONNECT` first where it requires authorization.
                self.send(connection, &b"-ERR 'Authorization Violation'\r\n"[..]);
                return Err(());
            }
            _ => {}
        }
        match op {
            ClientOp::Connect(_) | ClientOp::Pong => {}
            ClientOp::Ping => self.send(connection, &b"PONG\r\n"[..]),
            ClientOp::Sub {
                subject,
                queue,
                sid,
            } => match self
                .server
                .subscribe(connection, &subject, queue.as_deref())
            {
                Ok(id) => {
                    if let Some(client) = self.clients.get_mut(&connection) {
                        client.sids.insert(sid.clone(), id);
                    }
                    self.routes.insert(
                        id,
                        Route {
                            connection,
                            sid,
                            delivered: 0,
                            max: None,
                        },
                    );
                }
                Err(_) => self.send(connection, &b"-ERR 'Invalid Subject'\r\n"[..]),
            },
            ClientOp::Unsub { sid, max } => {
                let id = self
                    .clients
                    .get(&connection)
                    .and_then(|c| c.sids.get(&sid).copied());
                if let Some(id) = id {
                    match (max, self.routes.get_mut(&id)) {
                        (Some(max), Some(route)) if route.delivered < max => route.max = Some(max),
                        _ => self.end_subscription(id),
                    }
                }
            }
            ClientOp::Pub {
                subject,
                reply,
                headers,
                payload,
            } => return self.publish(connection, subject, reply, headers, payload),
        }
        Ok(())
    }

    fn publish(
        &mut self,
        connection: ConnectionId,
        subject: String,
        reply: Option<String>,
        headers: Option<async_nats::HeaderMap>,
        payload: Bytes,
    ) -> Result<(), ()> {
        if subject.starts_with(API_PREFIX) && !self.access.jetstream {
            // A server without JetStream has no responder for its API, pull requests
            // included.
            if let Some(reply) = reply {
                self.server.no_responders(&reply);
            }
            return Ok(());
        }
        if subject.starts_with(DIRECT_GET_PREFIX) {
            // A stream without `allow_direct` (the model refuses it) has no direct-get
            // responder: nats-server answers `503 No Responders`.
            if let Some(reply) = reply {
                self.server.no_responders(&reply);
            }
            return Ok(());
        }
        if let Some(api) = subject.strip_prefix(API_PREFIX)
            && !subject.starts_with(PULL_PREFIX)
        {
            let body = self.server.answer_api(api, &payload);
            if let Some(reply) = reply {
                self.respond(&reply, body.to_string());
            }
            return Ok(());
        }
        let message = Publish {
            subject,
            reply: reply.clone(),
            headers,
            payload,
        };
        match self.server.publish(connection, message, now()) {
            Ok(_) => Ok(()),
            Err(SimError::MaxPayload { .. }) => {
                self.send(connection, &b"-ERR 'Maximum Payload Violation'\r\n"[..]);
                Err(())
            }
            Err(SimError::Subject { .. }) => {
                self.send(connection, &b"-ERR 'Invalid Publish Subject'\r\n"[..]);
                Ok(())
            }
            // A refused JetStream publish (a fault, a full stream) is answered as
            // nats-server answers one: a JetStream error to the reply subject.
            Err(e) => {
                if let Some(reply) = reply {
                    self.respond(&reply, crate::model::wire::api::error_body(e).to_string());
                }
                Ok(())
            }
        }
    }

    fn respond(&mut self, reply: &str, body: String) {
        self.server.respond(reply, Bytes::from(body));
    }
}

/// The endpoint: a listener on loopback and the task driving the model's timers.
pub(crate) fn start(shared: &Arc<Shared>) -> std::io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let addr = listener.local_addr()?;
    let accepting = shared.clone();
    tokio::spawn(async move {
        let mut next_client = 0u64;
        while let Ok((socket, _)) = listener.accept().await {
            next_client += 1;
            tokio::spawn(serve(accepting.clone(), socket, addr, next_client));
        }
    });
    tokio::spawn(timers(shared.clone()));
    Ok(addr)
}

/// Lets the model's timers fall due on the runtime's clock.
async fn timers(shared: Arc<Shared>) {
    loop {
        let due = shared.lock().server.poll_timeout();
        match due {
            Some(at) => {
                tokio::select! {
                    biased;
                    () = shared.changed.notified() => {}
                    () = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {
                        let mut inner = shared.lock();
                        inner.server.handle_timeout(now());
                        inner.flush();
                    }
                }
            }
            None => shared.changed.notified().await,
        }
    }
}

/// Serves one client connection until it closes, breaks the protocol, or a fault closes it.
async fn serve(shared: Arc<Shared>, socket: TcpStream, addr: SocketAddr, client_id: u64) {
    let _ = socket.set_nodelay(true);
    let (mut reader, mut writer) = socket.into_split();
    let (out, mut outgoing) = mpsc::unbounded_channel::<Bytes>();
    let close = Arc::new(Notify::new());
    let connection = {
        let mut inner = shared.lock();
        if !inner.access.up {
            // Down: the connection closes before the server says anything.
            return;
        }
        let connection = inner.server.connect();
        let info = serde_json::json!({
            "server_id": "RUSTSTREAMSIM",
            "server_name": "ruststream-sim",
            "version": inner.server.version.announced(),
            "proto": 1,
            "go": "ruststream-sim",
            "host": addr.ip().to_string(),
            "port": addr.port(),
            "headers": true,
            "max_payload": inner.server.max_payload(),
            "jetstream": inner.access.jetstream,
            "auth_required": inner.access.authorization.is_some(),
            "client_id": client_id,
        });
        let _ = out.send(Bytes::from(format!("INFO {info}\r\n")));
        let admitted = inner.access.authorization.is_none();
        inner.clients.insert(
            connection,
            Client {
                admitted,
                out,
                sids: HashMap::new(),
                close: close.clone(),
            },
        );
        connection
    };
    let writing = tokio::spawn(async move {
        while let Some(bytes) = outgoing.recv().await {
            if writer.write_all(&bytes).await.is_err() {
                break;
            }
        }
    });
    let mut buf = BytesMut::with_capacity(64 * 1024);
    'reading: loop {
        tokio::select! {
            biased;
            () = close.notified() => {
                writing.abort();
                break 'reading;
            }
            read = reader.read_buf(&mut buf) => {
                if !matches!(read, Ok(n) if n > 0) {
                    break 'reading;
                }
                let mut ops = Vec::new();
                let broken = loop {
                    match protocol::parse(&mut buf) {
                        Ok(Some(op)) => ops.push(op),
                        Ok(None) => break None,
                        Err(e) => break Some(e),
                    }
                };
                protocol::order_subscriptions(&mut ops);
                let mut inner = shared.lock();
                for op in ops {
                    if inner.apply(connection, op).is_err() {
                        inner.flush();
                        break 'reading;
                    }
                }
                if let Some(e) = broken {
                    inner.send(connection, format!("-ERR '{e}'\r\n"));
                    break 'reading;
                }
                inner.flush();
                drop(inner);
                shared.changed.notify_one();
            }
        }
    }
    {
        let mut inner = shared.lock();
        inner.close(connection);
        inner.flush();
    }
    shared.changed.notify_one();
    // The writer ends once its queue is drained (an `-ERR` reaches the client first); a
    // fault's close aborted it.
    let _ = writing.await;
}
