//! Nodes: a node holds sessions and listeners on one provider. It is made
//! on the TCP soft fabric (`relink_node_new_tcp`), on rdma-core
//! (`relink_node_new_verbs`) or on the in-process soft fabric
//! (`relink_node_new_soft`, in the next section); it makes progress only
//! in `relink_poll` and `relink_wait` (or in the program's own loop on
//! `relink_event_fd` and `relink_next_deadline_ms`); `relink_node_free`
//! ends it.

use std::collections::BTreeMap;
use std::ffi::c_char;
use std::sync::Arc;
use std::time::Duration;

use relink_rs::{Node, PollMode, Provider};
use relink_soft::TcpHost;

use crate::host_memory::Registered;
use crate::status::*;

/// A relink node: sessions and listeners on one provider, driven by
/// `relink_poll` / `relink_wait` from one thread at a time. Made by a
/// `relink_node_new_*` call, freed by `relink_node_free`.
pub struct relink_node {
    pub(crate) node: Node,
    /// A delivery a too-small buffer could not take (`RELINK_ERR_TRUNCATED`):
    /// the next `relink_poll_delivery` of its session returns it first.
    pub(crate) held: BTreeMap<u64, (u64, Vec<u8>)>,
    /// The output a too-small buffer could not take in
    /// `relink_poll_output`: the next call returns it first.
    pub(crate) held_output: Option<relink_rs::Output>,
    /// The allocation `relink_poll_delivery` swaps messages into.
    pub(crate) scratch: Vec<u8>,
    /// The caller's buffers registered with the node (`relink_register`),
    /// by id, until `relink_deregister` gave them back. Declared after
    /// `node`, so dropped after it: the node lets go of them first, then
    /// each is given back (`Registered`'s drop) before `relink_node_free`
    /// returns.
    pub(crate) registrations: BTreeMap<u32, Registered>,
    /// Buffers a refused `relink_register` could not give back at once
    /// (the device kept an MR over one): given back when the node is
    /// freed, after it.
    pub(crate) held_back: Vec<Registered>,
    /// The provider, when it is rdma-core's (`relink_node_new_verbs`): it
    /// adopts the caller's buffers.
    pub(crate) verbs: Option<Arc<relink_verbs::VerbsProvider>>,
}

impl relink_node {
    pub(crate) fn boxed(provider: Arc<dyn Provider>) -> *mut relink_node {
        Self::boxed_with(provider, None)
    }

    fn boxed_with(
        provider: Arc<dyn Provider>,
        verbs: Option<Arc<relink_verbs::VerbsProvider>>,
    ) -> *mut relink_node {
        Box::into_raw(Box::new(relink_node {
            node: Node::new(provider),
            held: BTreeMap::new(),
            held_output: None,
            scratch: Vec::new(),
            registrations: BTreeMap::new(),
            held_back: Vec::new(),
            verbs,
        }))
    }
}

/// The node behind a handle.
///
/// # Safety
/// `p` is NULL or a live node from `relink_node_new_*`, not used by another
/// thread during the call.
pub(crate) unsafe fn node_mut<'a>(p: *mut relink_node) -> Result<&'a mut relink_node, Fail> {
    non_null(p, "node")?;
    // SAFETY: non-NULL; the caller passes a live node it does not share
    // during the call.
    Ok(unsafe { &mut *p })
}

/// Make a node on the TCP soft fabric: the soft devices of the directory
/// `dir` (NULL: `$RELINK_SOFT_DIR`, else the per-user runtime directory),
/// reaching other processes' soft devices over TCP; store it in `*out`.
/// Two hosts on one machine are two directories.
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string; `out` valid for a write of a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn relink_node_new_tcp(
    dir: *const c_char,
    out: *mut *mut relink_node,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let dir = unsafe { opt_c_str(dir, "dir")? };
        non_null(out, "out")?;
        let dir = dir
            .map(std::path::PathBuf::from)
            .unwrap_or_else(relink_soft::Registry::default_dir);
        let host = TcpHost::open(&dir).map_err(|e| {
            Fail::new(
                RELINK_ERR_IO,
                format!("cannot open the soft devices of {}: {e}", dir.display()),
            )
        })?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", relink_node::boxed(Arc::new(host))) }?;
        Ok(RELINK_OK)
    })
}

/// Make a node on the host's RDMA devices through rdma-core (libibverbs and
/// librdmacm); store it in `*out`. Returns `RELINK_ERR_UNSUPPORTED` when
/// librelink was built without the verbs provider, `RELINK_ERR_PROVIDER`
/// when rdma-core cannot be opened.
///
/// # Safety
/// `out` is valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn relink_node_new_verbs(out: *mut *mut relink_node) -> relink_status {
    guard(|| {
        non_null(out, "out")?;
        if !relink_verbs::BUILT_WITH_RDMA {
            return Err(Fail::new(
                RELINK_ERR_UNSUPPORTED,
                "this librelink was built without the verbs provider (the `verbs` feature)",
            ));
        }
        let p = relink_verbs::VerbsProvider::new()
            .map_err(|e| Fail::new(RELINK_ERR_PROVIDER, format!("rdma-core: {e}")))?;
        let p = Arc::new(p);
        let node = relink_node::boxed_with(p.clone(), Some(p));
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", node) }?;
        Ok(RELINK_OK)
    })
}

/// Free a node: its sessions end (a live session says goodbye to its peer
/// first), its provider objects are destroyed, and the buffers still
/// registered with it (`relink_register`) are the caller's again once it
/// returned. NULL is ignored.
///
/// # Safety
/// `node` is NULL or a live node, not used again after the call.
#[no_mangle]
pub unsafe extern "C" fn relink_node_free(node: *mut relink_node) {
    if !node.is_null() {
        // SAFETY: made by `Box::into_raw` in `relink_node::boxed`; the
        // caller gives up the pointer.
        let n = unsafe { Box::from_raw(node) };
        // Dropping a node runs relink code: keep a panic on this side.
        guard_free(move || drop(n));
    }
}

/// One poll round: handle what arrived, fire due timers, post queued work.
/// `*did` (if not NULL) is set to 1 when the round did something, else 0.
///
/// # Safety
/// `node` is a live node; `did` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_poll(node: *mut relink_node, did: *mut i32) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let d = n.node.poll();
        // SAFETY: the caller's contract.
        unsafe { put_opt(did, i32::from(d)) };
        Ok(RELINK_OK)
    })
}

/// Block until the node has done something (`*did` = 1) or `timeout_ms`
/// passed with nothing done (`*did` = 0); a negative `timeout_ms` waits
/// with no limit of the caller's. Polls first: returns at once when work
/// is ready. On the in-process soft fabric it advances the virtual clock
/// instead of sleeping.
///
/// # Safety
/// `node` is a live node; `did` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_wait(
    node: *mut relink_node,
    timeout_ms: i64,
    did: *mut i32,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let deadline = u64::try_from(timeout_ms)
            .ok()
            .map(|ms| n.node.now() + Duration::from_millis(ms));
        let d = n.node.wait(deadline);
        // SAFETY: the caller's contract.
        unsafe { put_opt(did, i32::from(d)) };
        Ok(RELINK_OK)
    })
}

/// How a node learns of completions.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_poll_mode {
    /// Each CQ is armed whenever a round finds it empty, so its next
    /// completion wakes the event fd and `relink_wait`: once `relink_poll`
    /// sets `*did` to 0 the application may sleep at once (the default).
    RELINK_POLL_EVENTS = 0,
    /// Each CQ is looked at in every round and armed only before a sleep:
    /// `relink_wait` arms for itself; an application sleeping on the event
    /// fd calls `relink_prepare_to_sleep` first. Saves the arming and its
    /// event per completion of a loop that polls without sleeping (a
    /// progress engine), at the cost of a CQ poll per session per round.
    RELINK_POLL_BUSY = 1,
}

/// Set how the node learns of completions (`mode`, a `relink_poll_mode`);
/// takes effect from the next round. `RELINK_ERR_ARGUMENT` for another
/// value.
///
/// # Safety
/// `node` is a live node.
#[no_mangle]
pub unsafe extern "C" fn relink_set_poll_mode(node: *mut relink_node, mode: i32) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let mode = match mode {
            0 => PollMode::Events,
            1 => PollMode::Busy,
            _ => return Err(Fail::arg(format!("`mode` {mode} is no relink_poll_mode"))),
        };
        n.node.set_poll_mode(mode);
        Ok(RELINK_OK)
    })
}

/// Make the node ready to sleep on its event fd, after `relink_poll` set
/// `*did` to 0: `*may_sleep` = 1 when every CQ is armed and nothing came
/// meanwhile (sleep now); 0 when something came (call `relink_poll` and
/// take the outputs first). Like libfabric's `fi_trywait`. In
/// `RELINK_POLL_EVENTS` it sets 1 at once; in `RELINK_POLL_BUSY` it arms
/// the CQs and runs one poll round.
///
/// # Safety
/// `node` is a live node; `may_sleep` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_prepare_to_sleep(
    node: *mut relink_node,
    may_sleep: *mut i32,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let ready = n.node.prepare_to_sleep();
        // SAFETY: the caller's contract.
        unsafe { put(may_sleep, "may_sleep", i32::from(ready)) }?;
        Ok(RELINK_OK)
    })
}

/// A file descriptor that becomes readable when `relink_poll` has work, for
/// the application's own `poll`/`epoll` loop; with it, sleep no longer than
/// `relink_next_deadline_ms`, and only once `relink_prepare_to_sleep`
/// said so (needed in `RELINK_POLL_BUSY`). The node owns it: do not close it; it stays
/// valid until `relink_node_free`. Returns `RELINK_ERR_UNSUPPORTED` if the
/// provider has none (then use `relink_wait`).
///
/// # Safety
/// `node` is a live node; `fd` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_event_fd(node: *mut relink_node, fd: *mut i32) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        use std::os::fd::AsRawFd;
        let raw = n.node.event_fd().map(|f| f.as_raw_fd()).ok_or_else(|| {
            Fail::new(
                RELINK_ERR_UNSUPPORTED,
                "this node's provider has no event file descriptor",
            )
        })?;
        // SAFETY: the caller's contract.
        unsafe { put(fd, "fd", raw) }?;
        Ok(RELINK_OK)
    })
}

/// How long, in milliseconds (rounded up), until the node's next timer is
/// due: the longest an event loop may sleep on the event fd before calling
/// `relink_poll`. `-1`: no timer (sleep until the fd is readable); `0`: due.
///
/// # Safety
/// `node` is a live node; `ms` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_next_deadline_ms(
    node: *mut relink_node,
    ms: *mut i64,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let now = n.node.now();
        let v = match n.node.next_deadline() {
            None => -1,
            Some(at) => {
                let ns = at.saturating_since(now).as_nanos();
                i64::try_from(ns.div_ceil(1_000_000)).unwrap_or(i64::MAX)
            }
        };
        // SAFETY: the caller's contract.
        unsafe { put(ms, "ms", v) }?;
        Ok(RELINK_OK)
    })
}

/// The node's clock in nanoseconds (the provider's: virtual on the
/// in-process soft fabric, monotonic elsewhere).
///
/// # Safety
/// `node` is a live node; `ns` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_now_ns(node: *mut relink_node, ns: *mut u64) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let v = n.node.now().as_nanos();
        // SAFETY: the caller's contract.
        unsafe { put(ns, "ns", v) }?;
        Ok(RELINK_OK)
    })
}
