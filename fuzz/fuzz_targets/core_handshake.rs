//! The `core_handshake` target: its body, and what it feeds and checks, is
//! `relink_fuzz::core_handshake` (crates/relink-fuzz).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| relink_fuzz::core_handshake::run(data));
