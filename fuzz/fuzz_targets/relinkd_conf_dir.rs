//! The `relinkd_conf_dir` target: its body, and what it feeds and checks, is
//! `relink_fuzz::relinkd_conf_dir` (crates/relink-fuzz).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| relink_fuzz::relinkd_conf_dir::run(data));
