//! The simulator as the suite's server: [`SimServer`] stands where [`NatsServer`] stands in
//! the scenarios, so that `tests/sim.rs` runs the same scenario bodies on `ruststream-sim`.
//!
//! [`NatsServer`]: crate::NatsServer

use ruststream_sim::{Server, Sim};

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
        let sim = Sim::open(Server::new(tokio::time::Instant::now().into_std()))
            .unwrap_or_else(|e| panic!("the simulator's endpoint: {e}"));
        Self {
            sim,
            options: ServerOptions::default(),
        }
    }

    /// The simulation, for what only it can do (its journal, its faults).
    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    /// The URL to connect to.
    pub fn url(&self) -> String {
        self.sim.url()
    }

    /// How the server was set up: always the defaults (the model has no authorization).
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
