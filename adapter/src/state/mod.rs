//! The fourth floor: a mount's state, what its loop, its deliveries and the app share about it.
//! Its [`MountContext`](mount_context::MountContext) (what a delivery is handled and executed
//! with), its [`MountRecord`](record::MountRecord) (what it keeps over its life, whatever loop
//! runs it), what start-up hands its loop ([`checked_mount`]), and what it counts: deliveries
//! in flight, where its deliveries that wait go on, Core losses, the stream sequences it received and whether it pulls carefully
//! (rule 20), and the app's leases with each mount's lease settings (rule 16). Imports only
//! from the floors below.

pub(crate) mod careful;
pub(crate) mod checked_mount;
pub(crate) mod in_flight;
pub(crate) mod lease_room;
pub(crate) mod losses;
pub(crate) mod mount_context;
pub(crate) mod placement;
pub(crate) mod received;
pub(crate) mod record;
