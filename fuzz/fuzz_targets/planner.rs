//! Fuzz target `planner`: see [`ruststream_fuzz::check_plan`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ruststream_fuzz::check_plan(data));
