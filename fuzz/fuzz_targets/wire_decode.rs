//! The `wire_decode` target: its body, and what it feeds and checks, is
//! `relink_fuzz::wire_decode` (crates/relink-fuzz).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| relink_fuzz::wire_decode::run(data));
