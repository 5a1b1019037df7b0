//! The operator's tools, above the app: what `ruststream dlq` does, as a library a service can
//! offer itself.

pub(crate) mod dead_letters;
pub(crate) mod replay;
