//! The `block_command` target: its body, and what it feeds and checks, is
//! `relink_fuzz::block_command` (crates/relink-fuzz).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| relink_fuzz::block_command::run(data));
