//! Fuzz target `ack_reply`: see [`ruststream_fuzz::check_ack_reply`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ruststream_fuzz::check_ack_reply(data));
