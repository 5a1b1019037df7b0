//! Fuzz target `retry_count_header`: see [`ruststream_fuzz::check_retry_count`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ruststream_fuzz::check_retry_count(data));
