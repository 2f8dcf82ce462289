//! The fuzz driver of the C API (the `c_api` target of `fuzz/`, and the
//! replay of its kept inputs in this crate's tests).
//!
//! [`run`] reads its input as a script of calls to the exported functions,
//! on a fresh in-process soft fabric with two hosts (`a` on 10.0.0.1/24,
//! `b` on 10.0.0.2/24, a device `soft0` each) and a node on each: options
//! made, set with any value and freed; listeners, connects and accepts
//! with any address string (NULL, empty, not UTF-8, not an address);
//! sessions, listeners, registrations, shared receive queues and tokens
//! named by the ids calls returned (closed, deregistered and freed ones
//! included) or by any number; every length (0, small, at and past each
//! limit, `UINT32_MAX`, `SIZE_MAX`), offset and alignment; work requests
//! with any kind, flags and scatter/gather list; NULL for every pointer
//! argument; the pollers, the error texts, recovery control, soft faults
//! and turns of virtual time between them. At the end everything made is
//! freed.
//!
//! What it checks, beyond "nothing aborts, nothing leaks" (the sanitizers'
//! part under `cargo fuzz`): no call returns `RELINK_ERR_INTERNAL` (a
//! panic caught at the boundary), every error leaves a one-line message in
//! `relink_last_error`, every status has a name.
//!
//! What it does not pass, because the header makes it the caller's duty
//! (undefined behaviour by contract, not a refusal librelink can make): a
//! freed node, options or fabric pointer (a freed object is set to NULL
//! here, and NULL is fuzzed), a buffer shorter than the length given with
//! it — but for lengths the header promises are refused before a byte is
//! read (a message over 1 GiB, the most any `max_message` allows; connect
//! data over `RELINK_MAX_CONNECT_DATA`; more than `RELINK_MAX_SGE` ranges;
//! a region range past the end of any region this driver makes), which
//! come with a one-byte buffer — and a registered buffer freed before its
//! deregistration (buffers live until the nodes are freed). Options whose
//! sessions would need more memory than [`MEMORY_BUDGET`] (a region or
//! queue of gigabytes is the caller's to ask for) are not connected or
//! listened with: the call that would allocate it is skipped.

mod calls;
mod input;

use std::ffi::CStr;
use std::ptr::null_mut;

use crate::status::relink_status::{self, *};
use crate::*;

/// The most memory a session of fuzzed options may ask for (regions and
/// receive slots on both ends); connects and listens over it are skipped.
pub(crate) const MEMORY_BUDGET: u64 = 16 << 20;

/// The most calls one input makes.
const MAX_CALLS: usize = 96;

/// The longest buffer the driver allocates for a length it passes; a
/// longer length comes with a one-byte buffer only where the header
/// promises a refusal before a byte is read.
const MAX_BUFFER: u64 = 1 << 16;

/// Run one input: the script of calls it encodes, then free everything.
/// Panics (so the fuzzer reports) when a check fails.
pub fn run(data: &[u8]) {
    let mut w = World::new(data);
    let mut calls = 0;
    while !w.input.is_empty() && calls < MAX_CALLS {
        w.step();
        calls += 1;
    }
    w.free();
}

use input::{CArg, Input};

/// Everything the script made, by the ids and pointers calls returned.
struct World<'a> {
    input: Input<'a>,
    fabric: *mut relink_soft_fabric,
    /// Node `a` and node `b`; NULL once freed.
    nodes: [*mut relink_node; 2],
    /// Options made; NULL once freed.
    options: Vec<*mut relink_options>,
    /// Every session id returned (by connect or accept), closed ones too.
    sessions: Vec<u64>,
    listeners: Vec<u64>,
    /// Every registration id returned, deregistered ones too.
    registrations: Vec<u32>,
    queues: Vec<u64>,
    /// The registered buffers: alive until the nodes are freed.
    buffers: Vec<Vec<u64>>,
}

impl<'a> World<'a> {
    fn new(data: &'a [u8]) -> World<'a> {
        let mut w = World {
            input: Input { data },
            fabric: null_mut(),
            nodes: [null_mut(); 2],
            options: Vec::new(),
            sessions: Vec::new(),
            listeners: Vec::new(),
            registrations: Vec::new(),
            queues: Vec::new(),
            buffers: Vec::new(),
        };
        let mut fabric = null_mut();
        // SAFETY: `fabric` is valid for a write of a pointer; the strings
        // are NUL-terminated literals.
        unsafe {
            ok(relink_soft_fabric_new(1, &mut fabric));
            ok(relink_soft_fabric_add_device(
                fabric,
                c"a".as_ptr(),
                c"soft0".as_ptr(),
                c"10.0.0.1/24".as_ptr(),
            ));
            ok(relink_soft_fabric_add_device(
                fabric,
                c"b".as_ptr(),
                c"soft0".as_ptr(),
                c"10.0.0.2/24".as_ptr(),
            ));
        }
        w.fabric = fabric;
        for (i, host) in [c"a", c"b"].into_iter().enumerate() {
            let mut node = null_mut();
            // SAFETY: a live fabric, a NUL-terminated host, `node` valid for
            // a write.
            ok(unsafe { relink_node_new_soft(fabric, host.as_ptr(), &mut node) });
            w.nodes[i] = node;
        }
        w
    }

    /// Free what is left: options, nodes, then the fabric; the registered
    /// buffers last.
    fn free(mut self) {
        // SAFETY: each pointer is NULL or live and not used after.
        unsafe {
            for o in self.options.drain(..) {
                relink_options_free(o);
            }
            for n in self.nodes {
                relink_node_free(n);
            }
            relink_soft_fabric_free(self.fabric);
        }
        self.buffers.clear();
    }

    fn node(&mut self) -> *mut relink_node {
        match self.input.u8() % 8 {
            7 => null_mut(),
            k => self.nodes[usize::from(k) % 2],
        }
    }

    fn opts(&mut self) -> *mut relink_options {
        let i = self.input.pick(self.options.len() + 1);
        self.options.get(i).copied().unwrap_or(null_mut())
    }

    fn pick_id(&mut self, ids: &[u64]) -> u64 {
        let i = self.input.pick(ids.len() + 2);
        match ids.get(i) {
            Some(&id) => id,
            None if i == ids.len() => 0,
            None => self.input.num(),
        }
    }

    fn session(&mut self) -> u64 {
        let ids = self.sessions.clone();
        self.pick_id(&ids)
    }

    fn region(&mut self) -> u32 {
        let ids: Vec<u64> = self.registrations.iter().map(|&r| u64::from(r)).collect();
        match self.input.u8() % 4 {
            0 => 1,
            1 => 2,
            2 => self.pick_id(&ids) as u32,
            _ => self.input.num_u32(),
        }
    }

    fn token(&mut self) -> relink_token {
        relink_token {
            region: self.region(),
            offset: self.offset(),
        }
    }

    fn offset(&mut self) -> u64 {
        match self.input.u8() % 4 {
            0 => 0,
            1 => u64::from(self.input.u8()) * 8,
            2 => u64::from(self.input.u8()),
            _ => self.input.num(),
        }
    }

    /// A string argument: NULL, one of the hosts' names, devices and
    /// addresses, or bytes of the input (not UTF-8 possibly).
    fn string(&mut self) -> CArg {
        const FIXED: [&str; 12] = [
            "a",
            "b",
            "soft0",
            "10.0.0.2:7471",
            "10.0.0.1:7471",
            "10.0.0.2",
            "10.0.0.1",
            "",
            "10.0.0.2:0",
            "[::1]:7471",
            "10.0.0.9/24",
            "10.0.0.3/24",
        ];
        let k = self.input.pick(FIXED.len() + 3);
        if k < FIXED.len() {
            let mut v = FIXED[k].as_bytes().to_vec();
            v.push(0);
            CArg::Owned(v)
        } else if k == FIXED.len() {
            CArg::Null
        } else {
            let n = usize::from(self.input.u8() % 24);
            let mut v: Vec<u8> = (0..n)
                .map(|_| self.input.u8())
                .filter(|&b| b != 0)
                .collect();
            v.push(0);
            CArg::Owned(v)
        }
    }

    /// A length and a buffer for it: a buffer of `len` bytes up to
    /// [`MAX_BUFFER`], past it one byte when `refused_past` says the
    /// length is refused before a byte is read, else the length is cut to
    /// [`MAX_BUFFER`]. NULL sometimes, with any length.
    fn buffer(&mut self, refused_past: u64) -> (Vec<u8>, bool, u64) {
        let mut len = self.input.num();
        let null = self.input.u8() % 8 == 0;
        if null {
            return (Vec::new(), true, len);
        }
        if len > MAX_BUFFER && len <= refused_past {
            len = MAX_BUFFER;
        }
        let cap = if len > MAX_BUFFER { 1 } else { len as usize };
        let fill = self.input.u8();
        (vec![fill; cap], false, len)
    }

    /// Two nodes of memory a session of `o` would ask for, roughly: its
    /// regions and receive slots.
    fn too_big(o: *const relink_options) -> bool {
        if o.is_null() {
            return false;
        }
        // SAFETY: live options made by `relink_options_new`, not freed
        // (freed ones are NULL here).
        let opts = unsafe { &(*o).opts };
        let regions: u64 = opts
            .regions
            .iter()
            .fold(0u64, |t, r| t.saturating_add(r.len));
        let slots = u64::from(opts.recv_slots)
            .saturating_mul(2)
            .saturating_add(16)
            .saturating_mul(u64::from(opts.max_message).saturating_add(64));
        let one_sided = u64::from(opts.max_one_sided).saturating_mul(64);
        let outstanding = u64::from(opts.max_outstanding).saturating_mul(64);
        regions
            .saturating_add(slots)
            .saturating_add(one_sided)
            .saturating_add(outstanding)
            > MEMORY_BUDGET
    }

    /// One call (or a turn of both nodes) chosen by the input.
    fn step(&mut self) {
        let op = self.input.u8() % 36;
        match op {
            0 => self.options_new(),
            1 => {
                let i = self.input.pick(self.options.len() + 1);
                let p = self.options.get(i).copied().unwrap_or(null_mut());
                // SAFETY: NULL or live options, set to NULL below.
                unsafe { relink_options_free(p) };
                if let Some(o) = self.options.get_mut(i) {
                    *o = null_mut();
                }
            }
            2 | 3 => self.options_set(),
            4 => self.add_region(),
            5 => self.listen(),
            6 | 7 => self.connect(),
            8 => self.accept(),
            9 => {
                let (n, s) = (self.node(), self.session());
                // SAFETY: NULL or a live node.
                check(unsafe { relink_close(n, s) });
            }
            10 => self.listener_calls(),
            11 => self.session_getters(),
            12..=14 => self.turn(),
            15 => self.register(),
            16 => {
                let n = self.node();
                let ids: Vec<u64> = self.registrations.iter().map(|&r| u64::from(r)).collect();
                let id = self.pick_id(&ids) as u32;
                // SAFETY: NULL or a live node.
                check(unsafe { relink_deregister(n, id) });
            }
            17 => self.region_copy(),
            18 | 19 => self.send(),
            20 => self.one_sided(),
            21 => self.atomic(),
            22 | 23 => self.post(),
            24 => self.post_receive(),
            25 | 26 => self.polls(),
            27 => self.shared_receive(),
            28 => self.recovery(),
            29 => self.drain(),
            30 => self.node_getters(),
            31 => self.texts(),
            32 => self.fault(),
            33 => self.establish(),
            34 => self.node_lifecycle(),
            _ => self.fabric_calls(),
        }
    }
}

/// `p`, or NULL when `null`.
fn or_null<T>(null: bool, p: *mut T) -> *mut T {
    if null {
        null_mut()
    } else {
        p
    }
}

/// A setup call that must succeed.
fn ok(st: relink_status) {
    assert_eq!(st, RELINK_OK, "{}", last_error());
}

/// The checks every call's status passes: no internal error, a named
/// status, and a message for every error.
fn check(st: relink_status) {
    assert_ne!(st, RELINK_ERR_INTERNAL, "{}", last_error());
    // SAFETY: a static NUL-terminated string.
    let name = unsafe { CStr::from_ptr(relink_status_name(st as i32)) };
    assert_ne!(name.to_bytes(), b"RELINK_UNKNOWN_STATUS");
    if (st as i32) < 0 {
        let msg = last_error();
        assert!(!msg.is_empty(), "{name:?} with no message");
        assert!(!msg.contains('\n'), "a message of several lines: {msg:?}");
    }
}

fn last_error() -> String {
    // SAFETY: a NUL-terminated string valid until the next call on this
    // thread; copied at once.
    unsafe { CStr::from_ptr(relink_last_error()) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    /// Replay every kept input of the `c_api` fuzz target: its regressions
    /// (inputs that failed once) and its corpus (`relink_fuzz::kept`).
    #[test]
    fn the_kept_fuzz_inputs_pass() {
        relink_fuzz::kept::replay("c_api", super::run);
    }

    /// Inputs of every call, a session established first.
    #[test]
    fn scripts_of_every_call_pass() {
        super::run(&[]);
        for op in 0u8..36 {
            let mut data = vec![33, 0, op];
            data.extend((0..64u8).map(|i| i.wrapping_mul(37).wrapping_add(op)));
            super::run(&data);
        }
    }
}
