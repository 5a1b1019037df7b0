//! The test API: a simulation's model, its endpoint and its virtual clock, in one handle.
//!
//! Here, the handle: how a simulation starts, and what a test does through it (publish, read
//! the model, inject faults, drop connections, take the server down). How it lets virtual
//! time pass (`advance`, `run_until`, `run_until_idle`) is in `wait.rs`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::stream;
use bytes::Bytes;

use crate::endpoint::access::Authorization;
use crate::endpoint::{self, Shared};
use crate::model::consumer::ConsumerState;
use crate::model::error::SimError;
use crate::model::faults::Faults;
use crate::model::ids::ConnectionId;
use crate::model::journal::{Publish, Published, Record};
use crate::model::server::Server;
use crate::model::stream::{StoredMessage, StreamState};

mod wait;

pub use wait::{MAX_STEP, STEP, TimedOut};

/// A simulation: the model of NATS and JetStream ([`Server`]) served on a loopback socket
/// that the app's async-nats client connects to ([`Sim::url`]), on a virtual clock.
///
/// Cheap to clone; every clone is the same simulation.
///
/// ```
/// use std::time::Duration;
/// use ruststream_sim::{App, Delivery, Mount, Outcome, Sim};
///
/// Sim::run(|sim| async move {
///     let running = App::new(&sim.url())
///         .mount(Mount::core_subject("greet", "greet"), |_: Delivery| async { Outcome::Ack })
///         .start()
///         .await
///         .expect("the app starts on the simulator");
///     sim.publish("greet", "hi").expect("published");
///     sim.advance(Duration::from_secs(1)).await;
///     running.shutdown().await;
/// });
/// ```
#[derive(Clone)]
pub struct Sim {
    shared: Arc<Shared>,
    addr: SocketAddr,
    own: ConnectionId,
    started: Instant,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("url", &self.url())
            .field("elapsed", &self.elapsed())
            .finish_non_exhaustive()
    }
}

impl Sim {
    /// Runs `scenario` on a new simulation: a current-thread tokio runtime whose clock starts
    /// paused (it moves only when every task waits for a timer, straight to the next one),
    /// with the default model ([`Server::new`]). Returns what `scenario` returns.
    ///
    /// Give it the app of this crate ([`App`](crate::App)): `ruststream-tokio`'s would run
    /// too, its timers virtual, but read the system clock and take real time. Shut the app
    /// down inside `scenario`: the simulation, and the app's tasks with it, end when `run`
    /// returns. A task that
    /// never waits (a handler spinning in a loop) keeps the clock from moving, and so every
    /// deadline, the test's own included.
    ///
    /// # Panics
    /// If the runtime cannot be built or the endpoint cannot listen on loopback; when called
    /// inside a tokio runtime, saying to use [`start`](Self::start) there.
    pub fn run<F, Fut>(scenario: F) -> Fut::Output
    where
        F: FnOnce(Sim) -> Fut,
        Fut: Future,
    {
        Self::run_with(Server::new, scenario)
    }

    /// As [`run`](Self::run), on the model `server` builds from the clock's start (for
    /// example `|start| Server::new(start).with_version(ServerVersion::V2_9)`).
    ///
    /// # Panics
    /// As [`run`](Self::run).
    pub fn run_with<S, F, Fut>(server: S, scenario: F) -> Fut::Output
    where
        S: FnOnce(Instant) -> Server,
        F: FnOnce(Sim) -> Fut,
        Fut: Future,
    {
        assert!(
            tokio::runtime::Handle::try_current().is_err(),
            "Sim::run builds the simulation's own runtime, so it cannot run inside another \
             (a #[tokio::test], say): there, use `#[tokio::test(start_paused = true)]` and \
             `Sim::start(Server::new(tokio::time::Instant::now().into_std()))`"
        );
        #[allow(clippy::expect_used)] // documented: no runtime, no simulation
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a current-thread tokio runtime");
        runtime.block_on(async move {
            #[allow(clippy::expect_used)] // documented
            let sim = Sim::start(server(endpoint::runtime::now()))
                .await
                .expect("the simulator's endpoint listens on loopback");
            scenario(sim).await
        })
    }

    /// Serves `server` on a loopback port of the current tokio runtime. For a test that
    /// builds its own runtime: deterministic and virtual only on a current-thread runtime
    /// with its clock paused (`#[tokio::test(start_paused = true)]`); on any other, the
    /// model runs in real time. Start the model's clock at the runtime's:
    /// `Server::new(tokio::time::Instant::now().into_std())`.
    ///
    /// # Errors
    /// The listener's, when loopback cannot be bound.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn start(server: Server) -> std::io::Result<Self> {
        Self::open(server)
    }

    /// As [`start`](Self::start), from synchronous code running on a tokio runtime (inside
    /// its `block_on`, say).
    ///
    /// # Errors
    /// As [`start`](Self::start).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn open(server: Server) -> std::io::Result<Self> {
        let started = server.now();
        let shared = Shared::new(server);
        let addr = endpoint::start(&shared)?;
        let own = shared.with(Server::connect);
        Ok(Self {
            shared,
            addr,
            own,
            started,
        })
    }

    /// The URL to give `App::new` or `async_nats::connect`: `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// The virtual time since the simulation started.
    pub fn elapsed(&self) -> Duration {
        self.now().saturating_duration_since(self.started)
    }

    /// The virtual clock's instant (the one the app's `Runtime::now` reads).
    pub fn now(&self) -> Instant {
        endpoint::runtime::now()
    }

    /// Runs `f` on the model at the current virtual time, then sends what it queued: for
    /// what the other methods do not cover (`server.now()` is the virtual time).
    pub fn with<T>(&self, f: impl FnOnce(&mut Server) -> T) -> T {
        let now = self.now();
        self.shared.with(|s| {
            s.at(now);
            f(s)
        })
    }

    /// Publishes `payload` to `subject` from the simulation's own connection, as a Core
    /// publisher would: a stream storing the subject stores it.
    ///
    /// # Errors
    /// As [`Server::publish`].
    pub fn publish(&self, subject: &str, payload: impl Into<Bytes>) -> Result<Published, SimError> {
        self.publish_message(Publish::new(subject, payload))
    }

    /// Publishes `message` (headers, a reply subject) from the simulation's own connection.
    ///
    /// # Errors
    /// As [`Server::publish`].
    pub fn publish_message(&self, message: Publish) -> Result<Published, SimError> {
        let (own, now) = (self.own, self.now());
        self.shared.with(|s| s.publish(own, message, now))
    }

    /// Creates a stream, as a service's declaration or `nats stream add` would.
    ///
    /// # Errors
    /// As [`Server::create_stream`].
    pub fn create_stream(&self, config: stream::Config) -> Result<StreamState, SimError> {
        self.with(|s| s.create_stream(config))
    }

    /// Every message a stream stores, in order (a dead-letter stream's dead letters).
    ///
    /// # Errors
    /// [`SimError::StreamNotFound`].
    pub fn stream_messages(&self, stream: &str) -> Result<Vec<StoredMessage>, SimError> {
        self.with(|s| s.stream_messages(stream))
    }

    /// A consumer's state, as `CONSUMER.INFO` gives it.
    ///
    /// # Errors
    /// [`SimError::StreamNotFound`], [`SimError::ConsumerNotFound`].
    pub fn consumer_state(&self, stream: &str, consumer: &str) -> Result<ConsumerState, SimError> {
        self.with(|s| s.consumer_state(stream, consumer))
    }

    /// Everything the server did so far, in order: publishes, deliveries with their
    /// delivery counts, acknowledgements with what they said (`+ACK`, `-NAK`, …), lost or not.
    pub fn journal(&self) -> Vec<Record> {
        self.with(|s| s.journal().to_vec())
    }

    /// Makes things go wrong, with the model's [`Faults`]. [`lose_acks`](Self::lose_acks)
    /// and [`fail_publishes`](Self::fail_publishes) are the same, shorter.
    ///
    /// ```
    /// # ruststream_sim::Sim::run(|sim| async move {
    /// sim.faults(|f| {
    ///     f.lose_acks(1);
    /// });
    /// # });
    /// ```
    pub fn faults<T>(&self, f: impl FnOnce(&mut Faults) -> T) -> T {
        self.with(|s| f(s.faults()))
    }

    /// The next `n` acknowledgements the app sends are lost on their way: the server
    /// redelivers at their deadline ([`Faults::lose_acks`]).
    pub fn lose_acks(&self, n: usize) {
        self.faults(|f| {
            f.lose_acks(n);
        });
    }

    /// The next `n` publishes to a subject `subject` matches fail (a JetStream publish gets
    /// an error answer, a Core one is not delivered): for a dead-letter publish that fails
    /// ([`Faults::fail_publishes`]).
    ///
    /// # Errors
    /// [`SimError::Subject`] for a subject NATS refuses.
    pub fn fail_publishes(&self, subject: &str, n: usize) -> Result<(), SimError> {
        self.faults(|f| f.fail_publishes(subject, n).map(|_| ()))
    }

    /// Closes every client connection, as a network failure would: their subscriptions and
    /// waiting pull requests end, and async-nats reconnects. Returns the connections closed.
    pub fn drop_connections(&self) -> Vec<ConnectionId> {
        self.shared.drop_clients()
    }

    /// From now on, a client must give `authorization` in its `CONNECT`; one that does not
    /// is refused with `-ERR 'Authorization Violation'`, as nats-server refuses it (the
    /// connections already open stay).
    pub fn require(&self, authorization: Authorization) {
        self.shared.lock().access.authorization = Some(authorization);
    }

    /// JetStream off, as on a nats-server started without it: its API has no responders
    /// (`503`) and `INFO` says `"jetstream": false`. The model's streams stay, for when it
    /// is turned on again with `jetstream(true)`.
    pub fn jetstream(&self, on: bool) {
        self.shared.lock().access.jetstream = on;
    }

    /// Takes the server down, as a stopped process: every connection closes, and new ones
    /// close before the server says anything, until [`come_up`](Self::come_up). The model
    /// keeps its streams and consumers (a server on its file store).
    pub fn go_down(&self) {
        self.shared.set_up(false);
    }

    /// Brings the server back after [`go_down`](Self::go_down): clients connect again.
    pub fn come_up(&self) {
        self.shared.set_up(true);
    }

    /// The open client connections (the simulation's own aside), in the order they
    /// connected.
    pub fn connections(&self) -> Vec<ConnectionId> {
        self.shared.clients()
    }
}
