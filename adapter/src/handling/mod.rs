//! The fifth floor: the handling of one delivery, from the message a loop received to its
//! settlement. [`flow`] is its life (read, the arrival check, the handler's run, the plan);
//! [`executor`] is the one place a plan is carried out, with what it publishes
//! ([`publish`], [`dead_letter`]) and how it ends ([`recover`], [`settled`]); [`handler_run`]
//! runs a handler with its panics caught, and [`lease`] keeps a running handler's lease.
//! Imports only from the floors below.

pub(crate) mod beside;
pub(crate) mod dead_letter;
pub(crate) mod executor;
pub(crate) mod flow;
pub(crate) mod handler_run;
pub(crate) mod in_place;
pub(crate) mod lease;
pub(crate) mod publish;
pub(crate) mod read;
pub(crate) mod recover;
pub(crate) mod settled;
