//! The third floor: the public API that applications write against, and what the runtime
//! tells them back. Handlers ([`handler`], their function adapters in [`handler_fn`] and
//! [`typed`], the [`codec`]s typed ones decode with, what they are given in [`delivery`] and
//! what they return in [`handled`]), the handler's [`context`], a
//! mount's declaration ([`mount`], [`error_policy`]), the app as a NATS [`service`], [`health`],
//! and [`reports`]. Imports only
//! from the floors below ([`crate::support`], [`crate::runtime`]).

pub(crate) mod batch;
pub(crate) mod codec;
pub(crate) mod context;
pub(crate) mod delivery;
pub(crate) mod error_policy;
pub(crate) mod handled;
pub(crate) mod handler;
pub(crate) mod handler_fn;
pub(crate) mod health;
pub(crate) mod keyed;
pub(crate) mod mount;
pub(crate) mod reports;
pub(crate) mod service;
pub(crate) mod timer;
pub(crate) mod turns;
pub(crate) mod typed;
