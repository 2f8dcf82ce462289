//! Shared receive queues: the sessions of a node may receive through one
//! shared receive queue instead of receives of their own; relink builds it
//! on each device that carries one of its sessions and rebuilds it after
//! every recovery.

use relink_rs::{SharedReceiveHandle, SharedReceiveOptions};

use crate::node::{node_mut, relink_node};
use crate::options::relink_options;
use crate::status::*;

/// A shared receive queue of a node (`relink_shared_receive_new`).
pub type relink_shared_receive = u64;

/// Make a shared receive queue on `node` holding `depth` receives of
/// messages up to `max_message` bytes, for the sessions whose options name
/// it (`relink_options_set_shared_receive`). Each such session reserves
/// its receive slots (`relink_options_set_recv_slots`, 64 by default) out
/// of the depth for as long as it lives: a connect past the depth fails
/// with `RELINK_ERR_SESSION`, and a listener refuses the incoming session
/// as busy (the peer retries). One queue is built on each device that
/// carries one of its sessions, and rebuilt after every recovery.
/// Stores the queue in `*out`. `RELINK_ERR_OPTIONS` names a value out of
/// range (depth 9..=65536, max_message 8..=16 MiB).
///
/// # Safety
/// `node` is a live node; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_shared_receive_new(
    node: *mut relink_node,
    depth: u32,
    max_message: u32,
    out: *mut relink_shared_receive,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let opts = SharedReceiveOptions::builder()
            .depth(depth)
            .max_message(max_message)
            .build()?;
        let h = n.node.create_shared_receive(opts)?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", h.0) }?;
        Ok(RELINK_OK)
    })
}

/// Remove a shared receive queue no session or listener uses any more
/// (`RELINK_ERR_SESSION` while one does; `RELINK_ERR_OPTIONS` for an
/// unknown one).
///
/// # Safety
/// `node` is a live node.
#[no_mangle]
pub unsafe extern "C" fn relink_shared_receive_free(
    node: *mut relink_node,
    queue: relink_shared_receive,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        n.node.remove_shared_receive(SharedReceiveHandle(queue))?;
        Ok(RELINK_OK)
    })
}

/// Sessions made with these options receive through `queue` (`use_it`
/// non-zero), or through receives of their own (`use_it` 0, the default).
/// The queue is checked when the options are used (`relink_connect`,
/// `relink_listen`).
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_shared_receive(
    options: *mut relink_options,
    queue: relink_shared_receive,
    use_it: i32,
) -> relink_status {
    guard(|| {
        non_null(options, "options")?;
        // SAFETY: non-NULL; the caller's contract.
        let o = unsafe { &mut *options };
        o.opts.shared_receive = (use_it != 0).then_some(SharedReceiveHandle(queue));
        Ok(RELINK_OK)
    })
}
