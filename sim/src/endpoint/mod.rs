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
//! which never imports it), in floors, lowest first:
//! - `runtime.rs`: the virtual clock ([`now`]) and the [`Runtime`](runtime::Runtime) the app
//!   runs on.
//! - The endpoint. Here, the state its tasks and the test share ([`Shared`]), the listener
//!   ([`start`]) and the task that lets the model's timers fall due; in `access.rs`, who is
//!   let in; in `connection.rs`, one client connection's task, which reads its operations and
//!   writes what is queued for it; in `dispatch.rs`, those operations applied to the model.
//! - `sim/`: the [`Sim`](sim::Sim) test API, which holds the endpoint.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::{Bytes, BytesMut};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};

use crate::endpoint::access::Access;
use crate::endpoint::connection::serve;
use crate::endpoint::runtime::now;
use crate::model::ids::{ConnectionId, SubscriptionId};
use crate::model::server::Server;
use crate::model::wire::protocol;

pub(crate) mod access;
mod connection;
mod dispatch;
pub(crate) mod runtime;
pub(crate) mod sim;

/// What the endpoint's tasks and the test share.
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    /// Woken when the model may have a new next timer.
    changed: Notify,
}

/// The model and the endpoint's side of each client connection, behind [`Shared`]'s lock.
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
                protocol::write_message(
                    &mut out,
                    &route.sid,
                    &delivered.message,
                    delivered.unreadable_headers.as_ref(),
                );
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
