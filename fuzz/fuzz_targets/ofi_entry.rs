//! Drives the libfabric provider's entry points as libfabric calls them,
//! on the soft TCP fabric: `getinfo` with arbitrary hints (caps, mode,
//! address formats, source and destination addresses of any length,
//! endpoint, domain, fabric, transmit and receive attributes, names, API
//! versions), then a script over objects opened from an answer (fabric,
//! domain, queues, passive and active endpoints, listen, connect, accept
//! and reject with CM data of any length, event and completion reads,
//! memory registrations with any key, iovecs of any count and length, RMA
//! with keys that do not exist), and everything closed and freed.
//!
//! Beyond "never aborts, never leaks", checks that no entry point panics
//! (`-FI_EOTHER`), that every return is 0, a count or an errno, and that
//! closing what is left in order succeeds. The driver is
//! `relink_fi::fuzzing::run` (crates/relink-ofi/src/ffi/fuzzing/): its
//! docs say which arguments libfabric's API makes the caller's duty and
//! are not fuzzed.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| relink_fi::fuzzing::run(data));
