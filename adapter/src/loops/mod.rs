//! The sixth floor: the loops that drive an app, each the driver of one state machine of the
//! core where there is one. A mount's loop ([`core_loop`], with its own [`buffered`] messages;
//! [`pull_loop`], the driver of `PullAccounting`, with what it holds in [`prefetch`]), started
//! by [`launch`]; and the app's [`delay_loop`] (`DelayQueue`) and [`lease_loop`] (`Leases`).
//! Imports only from the floors below.

pub(crate) mod buffered;
pub(crate) mod core_loop;
pub(crate) mod delay_loop;
pub(crate) mod launch;
pub(crate) mod lease_loop;
pub(crate) mod prefetch;
pub(crate) mod pull_loop;
