//! The `nbd_structured` target: its body, and what it feeds and checks, is
//! `relink_fuzz::nbd_structured` (crates/relink-fuzz).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| relink_fuzz::nbd_structured::run(data));
