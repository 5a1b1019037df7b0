//! Names of the model's connections and subscriptions.

use std::fmt;

/// A client connection to the modelled server, from [`Server::connect`](crate::model::server::Server::connect).
/// Numbered from 1 in the order they are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionId(pub u64);

/// A subscription, from [`Server::subscribe`](crate::model::server::Server::subscribe). Numbered from 1 in
/// the order they are made, across connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SubscriptionId(pub u64);

impl fmt::Display for ConnectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

impl fmt::Display for SubscriptionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}
