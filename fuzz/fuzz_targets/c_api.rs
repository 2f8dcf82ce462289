//! Drives librelink's C API through its exported functions with arbitrary
//! arguments: the input is a script of calls (options, listeners,
//! connects, sessions, registrations, regions, sends, one-sided
//! operations, atomics, work requests, receives, shared receive queues,
//! pollers, recovery control, soft faults, turns of virtual time) on two
//! nodes of an in-process soft fabric, with NULL pointers, edge lengths,
//! out-of-range enums and the ids of closed sessions and deregistered
//! registrations among the arguments.
//!
//! Beyond "never aborts, never leaks", checks that no call panics inside
//! librelink (`RELINK_ERR_INTERNAL`), that every status has a name and
//! every error a one-line message. The driver is
//! `relink_c::fuzzing::run` (crates/relink-c/src/fuzzing/): its docs say
//! which arguments the header makes the caller's duty and are not fuzzed.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| relink_c::fuzzing::run(data));
