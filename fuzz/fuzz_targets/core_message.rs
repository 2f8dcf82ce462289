//! The `core_message` target: its body, and what it feeds and checks, is
//! `relink_fuzz::core_message` (crates/relink-fuzz).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| relink_fuzz::core_message::run(data));
