//! The `registry_parse` target: its body, and what it feeds and checks, is
//! `relink_fuzz::registry_parse` (crates/relink-fuzz).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| relink_fuzz::registry_parse::run(data));
