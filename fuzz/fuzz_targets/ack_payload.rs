//! Fuzz target `ack_payload`: see [`ruststream_fuzz::check_ack_payload`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ruststream_fuzz::check_ack_payload(data));
