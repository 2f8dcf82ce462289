//! The `uevent_parse` target: its body, and what it feeds and checks, is
//! `relink_fuzz::uevent_parse` (crates/relink-fuzz).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| relink_fuzz::uevent_parse::run(data));
