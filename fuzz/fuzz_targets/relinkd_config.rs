//! The `relinkd_config` target: its body, and what it feeds and checks, is
//! `relink_fuzz::relinkd_config` (crates/relink-fuzz).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| relink_fuzz::relinkd_config::run(data));
