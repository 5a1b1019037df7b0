//! Caught panics: their text for the log, and values dropped with their panics caught.

use std::any::Any;
use std::panic::AssertUnwindSafe;

/// The text of a caught panic: its `&str` or `String` payload, or a placeholder for any other.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-string panic payload)")
}

/// Drops `value` (a handler's future, or what holds one) with a panic of its `Drop` caught:
/// the panic's payload, if it panicked, for the caller to log.
pub(crate) fn drop_caught<T>(value: T) -> Result<(), Box<dyn Any + Send>> {
    std::panic::catch_unwind(AssertUnwindSafe(|| drop(value)))
}
