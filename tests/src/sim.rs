//! The simulator as the suite's server: [`SimServer`] stands where [`NatsServer`] stands in
//! the scenarios, so that `tests/sim.rs` runs the same scenario bodies on `ruststream-sim`.
//!
//! [`NatsServer`]: crate::NatsServer

use ruststream_sim::{Authorization, Server, Sim};

use crate::{Endpoint, ServerOptions};

/// A simulated server for one scenario: the model of `ruststream-sim` on a loopback port of
/// the scenario's runtime (which `tests/sim.rs` runs on the simulator's virtual clock).
pub struct SimServer {
    sim: Sim,
    options: ServerOptions,
}

impl SimServer {
    /// A new simulated server with JetStream, on the current tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime, or when loopback cannot be bound.
    pub fn start() -> Self {
        Self::start_with(ServerOptions::default())
    }

    /// A simulated server without JetStream.
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub fn start_without_jetstream() -> Self {
        Self::start_with(ServerOptions {
            without_jetstream: true,
            ..ServerOptions::default()
        })
    }

    /// A simulated server set up as `options` says: without JetStream, requiring a user and
    /// password or a token, writing v2 ack reply subjects.
    ///
    /// # Panics
    /// As [`start`](Self::start); for a configuration file's text, which the simulator does
    /// not read.
    pub fn start_with(options: ServerOptions) -> Self {
        assert!(
            options.config.is_none(),
            "the simulator reads no nats-server configuration file"
        );
        let mut model = Server::new(tokio::time::Instant::now().into_std());
        if options.ack_replies_v2 {
            model = model.with_ack_replies_v2();
        }
        let sim = Sim::open(model).unwrap_or_else(|e| panic!("the simulator's endpoint: {e}"));
        sim.jetstream(!options.without_jetstream);
        if let Some((user, password)) = &options.user_password {
            sim.require(Authorization::UserPassword {
                user: user.clone(),
                password: password.clone(),
            });
        } else if let Some(token) = &options.token {
            sim.require(Authorization::Token(token.clone()));
        }
        Self { sim, options }
    }

    /// The URL to connect to, with the server's user and password or token in it.
    pub fn url_with_credentials(&self) -> String {
        let address = self.url().trim_start_matches("nats://").to_owned();
        match (&self.options.user_password, &self.options.token) {
            (Some((user, password)), _) => format!("nats://{user}:{password}@{address}"),
            (None, Some(token)) => format!("nats://{token}@{address}"),
            (None, None) => self.url(),
        }
    }

    /// Takes the server down, as killing its process would; the model stays.
    pub fn stop(&mut self) {
        self.sim.go_down();
    }

    /// Brings it back after [`stop`](Self::stop).
    pub fn start_again(&mut self) {
        self.sim.come_up();
    }

    /// The simulation, for what only it can do (its journal, its faults).
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    /// The URL to connect to.
    pub fn url(&self) -> String {
        self.sim.url()
    }

    /// How the server was set up.
    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// The nats-server version the model follows, as the endpoint announces it.
    ///
    /// # Panics
    /// If the announced version is not `MAJOR.MINOR.PATCH`.
    pub fn version(&self) -> (u32, u32, u32) {
        let announced = self.sim.with(|s| s.version()).announced();
        let parts: Vec<u32> = announced
            .split('.')
            .filter_map(|p| p.parse().ok())
            .collect();
        match parts[..] {
            [major, minor, patch] => (major, minor, patch),
            _ => panic!("announced version {announced}"),
        }
    }

    /// A restart, as the simulator has one: every client connection is closed, and clients
    /// reconnect to the same model, whose streams and consumers are kept (a server restarting
    /// on its file store).
    pub fn restart(&mut self) {
        self.sim.drop_connections();
    }
}

impl Endpoint for SimServer {
    fn url(&self) -> String {
        SimServer::url(self)
    }

    fn options(&self) -> &ServerOptions {
        &self.options
    }
}

/// Publishes one message to `subject` with `header_block` (a whole `NATS/1.0` block, byte for
/// byte) into the simulation, as [`crate::raw::raw_publish`] does over a raw connection to a
/// real server: a block async-nats cannot read (such as [`crate::raw::LONE_CR`]) is stored
/// and forwarded as it is, and brings down the client it reaches.
///
/// # Panics
/// When the model refuses the message.
pub fn raw_publish(server: &SimServer, subject: &str, header_block: &[u8], payload: &[u8]) {
    let message = ruststream_sim::Publish::new(subject, payload.to_vec())
        .unreadable_headers(header_block.to_vec());
    server
        .sim()
        .publish_message(message)
        .unwrap_or_else(|e| panic!("the simulation refused a raw publish to {subject}: {e}"));
}
