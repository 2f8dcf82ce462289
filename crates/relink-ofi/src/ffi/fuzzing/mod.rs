//! The fuzz driver of the provider's entry points (the `ofi_entry` target
//! of `fuzz/`, and the replay of its kept inputs in this crate's tests),
//! re-exported as [`crate::fuzzing::run`].
//!
//! [`run`] calls the provider the way libfabric does, through
//! `fi_prov_ini`'s structure and the ops tables of the objects it hands
//! out, on the soft TCP fabric: a soft host of its own (device `soft0` at
//! 127.0.0.1/8, in a directory under the temporary directory, named by
//! `FI_RELINK_SOFT_DIR`, made once per process). An input is
//! - a `getinfo` with arbitrary hints (caps, mode, address format, source
//!   and destination addresses of any length and family, endpoint, domain,
//!   fabric, transmit and receive attributes, names, the API version,
//!   node, service and flags), or none;
//! - then, when there are answers, a script over objects opened from one:
//!   a fabric (the answer's, opened and closed by the input, for one
//!   input in four; else the process's, opened once, as opening one costs
//!   milliseconds), its domain, event and completion queues of any
//!   attributes, passive and active endpoints (from the answer or from a
//!   connection request), binds, enables, `getname`/`setname` of any
//!   length, `fi_listen`, `fi_connect` to the listener or to any address
//!   with CM data of any length, the event queue read into buffers of any
//!   size, `fi_accept` and `fi_reject` with CM data of any length,
//!   memory registrations with any access, offset and key, sends and
//!   receives of iovecs (0 to 8 of any length), RMA with keys and
//!   addresses that exist or not, completion reads, closes in any order;
//! - and at the end every connection request answered (rejected, unless
//!   an endpoint took it), every object closed (endpoints, registrations,
//!   the listener, queues, the domain, the input's fabric) and every
//!   `fi_info` freed.
//!
//! Sessions are small (`FI_RELINK_SLOT_SIZE` 4096, `FI_RELINK_QUEUE_SIZE`
//! 256): a closed endpoint's session lingers up to 5 s for its goodbye,
//! and on the process's fabric those of hundreds of inputs a second add
//! up.
//!
//! It checks that no entry point panics (`-FI_EOTHER`, the guard's
//! answer), that every return is 0, a count or a negative errno, and
//! that closing what is left in order succeeds (anything left would leak:
//! LeakSanitizer reports it under `cargo fuzz`).
//!
//! What it does not pass, being libfabric's duty by its API: an object
//! pointer that is not the provider's or was closed, a buffer shorter than
//! its length (every buffer here is as long as the length given with it,
//! addresses `*_addrlen` bytes), more iovecs than the array holds, and a
//! connection request's handle other than the one its event gave (or one
//! answered already).
//!
//! To see what an input does: `RELINK_FUZZ_INPUT=FILE RELINK_FUZZ_TRACE=1
//! cargo test -p relink-ofi --lib the_input_named -- --nocapture` prints
//! each step and each entry point's return.

mod hints;
mod objects;

use std::ffi::{c_char, CString};
use std::ptr::{null, null_mut};
use std::sync::OnceLock;

use super::info::free_info;
use super::sys::*;
use hints::{Hints, Input};
use objects::World;

/// The most steps of the script one input runs.
const MAX_STEPS: usize = 48;

/// The prefix of the soft host directories, one per process.
const DIR_PREFIX: &str = "relink-ofi-fuzz-";

/// Remove the soft host directories of fuzzing processes that are gone (a
/// process keeps its own for its whole life: nothing runs at its exit).
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The soft host every input's fabric opens: made once per process.
fn setup() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        remove_stale_dirs();
        let dir = std::env::temp_dir().join(format!("{DIR_PREFIX}{}", std::process::id()));
        let reg = relink_soft::Registry::open(&dir).expect("a soft host directory");
        if reg.list().map(|l| l.is_empty()).unwrap_or(true) {
            reg.add(
                "soft0",
                vec!["127.0.0.1/8".parse().expect("an address")],
                None,
                None,
            )
            .expect("a soft device");
        }
        // Read by the provider's parameters, in this process only.
        std::env::set_var("FI_RELINK_SOFT_DIR", &dir);
        std::env::set_var("FI_RELINK_CONNECT_TIMEOUT", "1");
        std::env::set_var("FI_RELINK_GIVE_UP", "1");
        // Small sessions: an endpoint's session outlives its close by up
        // to 5 s (its goodbye), and inputs come by the hundred a second.
        std::env::set_var("FI_RELINK_SLOT_SIZE", "4096");
        std::env::set_var("FI_RELINK_QUEUE_SIZE", "256");
    });
}

/// Run one input (see the module docs). Panics (so the fuzzer reports)
/// when a check fails.
pub fn run(data: &[u8]) {
    setup();
    let mut input = Input { data };
    let prov = super::fi_prov_ini();
    // SAFETY: the provider structure lives for the process.
    let prov = unsafe { &*prov };
    let mut hints = Hints::build(&mut input);
    let version = match input.u8() % 4 {
        0 => crate::info::API_VERSION,
        1 => (1 << 16) | u32::from(input.u8() % 24),
        2 => (1 << 16) | 4,
        _ => input.u32(),
    };
    let node = input.string(&["127.0.0.1", "127.0.0.2", "localhost", "0.0.0.0"]);
    let service = input.string(&["7471", "0", "65535", "http"]);
    let flags = match input.u8() % 4 {
        0 => 0,
        1 => FI_SOURCE,
        2 => input.u64(),
        _ => FI_SOURCE | input.u64() & 0xff,
    };
    let mut info: *mut fi_info = null_mut();
    let getinfo = prov.getinfo.expect("getinfo");
    let hints_ptr = hints.as_mut().map_or(null_mut(), |h| h.ptr());
    // SAFETY: NULL or NUL-terminated strings, NULL or hints whose every
    // pointer is NULL or valid for its length; `info` valid for a write.
    let r = unsafe {
        getinfo(
            version,
            ptr(&node),
            ptr(&service),
            flags,
            hints_ptr,
            &mut info,
        )
    };
    check(r as isize);
    if r == 0 && !info.is_null() && input.u8() % 4 != 0 {
        let mut w = World::new(input, info);
        w.script(prov);
        w.close_all();
    }
    // SAFETY: the answers getinfo allocated, freed once.
    unsafe { free_info(info) };
    drop(hints);
}

/// An entry point's return: 0, a count, or a negative errno, never the
/// guard's `-FI_EOTHER` (a panic).
#[track_caller]
fn check(r: isize) {
    if objects::trace() {
        eprintln!("{}: {r}", std::panic::Location::caller());
    }
    assert_ne!(r, -(FI_EOTHER as isize), "an entry point panicked");
    assert!(r >= -4096, "not an errno: {r}");
}

fn ptr(s: &Option<CString>) -> *const c_char {
    s.as_ref().map_or(null(), |s| s.as_ptr())
}

#[cfg(test)]
mod tests {
    /// Replay every kept input of the `ofi_entry` fuzz target: its regressions
    /// (inputs that failed once) and its corpus (`relink_fuzz::kept`).
    #[test]
    fn the_kept_fuzz_inputs_pass() {
        relink_fuzz::kept::replay("ofi_entry", super::run);
    }

    /// Replay the input named by `RELINK_FUZZ_INPUT`, if set (with
    /// `RELINK_FUZZ_TRACE` to see its steps).
    #[test]
    fn the_input_named_passes() {
        if let Some(f) = std::env::var_os("RELINK_FUZZ_INPUT") {
            super::run(&std::fs::read(f).expect("the input"));
        }
    }

    /// A script of every step on objects opened from an answer.
    #[test]
    fn scripts_of_every_step_pass() {
        super::run(&[]);
        for step in 0u8..20 {
            // No hints' bytes: NULL hints, the API version, no node.
            let mut data = vec![0, 0, 4, 4, 0, 1];
            for s in [0, 1, 2, 3, 4, 6, 7, 7, step, step, step] {
                data.push(s);
                data.extend([1u8, 0, 1, 0]);
            }
            super::run(&data);
        }
    }
}
