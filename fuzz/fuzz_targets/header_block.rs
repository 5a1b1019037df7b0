//! Fuzz target `header_block`: see [`ruststream_fuzz::check_header_block`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ruststream_fuzz::check_header_block(data));
