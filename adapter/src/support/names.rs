//! Names kept once per process.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

/// `name` kept for the life of the process, once per distinct name: mount, stream and
/// consumer names and mounts' literal subjects, which every delivery carries, then cost no
/// reference counting. A name is allocated the first time it is seen and never freed, so the
/// memory this holds is bounded by the distinct names a process uses, not by how many apps it
/// starts.
pub(crate) fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(kept) = names.get(name) {
        return kept;
    }
    let kept: &'static str = Box::leak(name.into());
    names.insert(kept);
    kept
}
