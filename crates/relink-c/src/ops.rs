//! Operations: messages, RDMA WRITE and READ, and atomics on the peer's
//! advertised memory (named by tokens). A session accepts each with an id
//! and completes it exactly once (`relink_poll_completion`), also across
//! recoveries.

use relink_rs::{LocalRange, Node, OpId, RegionId, SessionHandle};

use crate::node::{node_mut, relink_node};
use crate::region::relink_token;
use crate::session::relink_session;
use crate::status::*;

/// An operation a session accepted: it completes exactly once
/// (`relink_poll_completion`), also across recoveries.
pub type relink_op = u64;

fn local(region: u32, offset: u64, len: u32) -> LocalRange {
    LocalRange {
        region: RegionId(region),
        offset,
        len,
    }
}

/// Submit an operation with `call` and store its id in `*op`.
///
/// # Safety
/// `node` is a live node; `op` NULL or valid for a write.
unsafe fn submit(
    node: *mut relink_node,
    session: relink_session,
    op: *mut relink_op,
    call: impl FnOnce(&mut Node, SessionHandle) -> Result<OpId, Fail>,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let id = call(&mut n.node, SessionHandle(session))?;
        // SAFETY: the caller's contract.
        unsafe { put_opt(op, id.0) };
        Ok(RELINK_OK)
    })
}

/// Send `len` bytes from `buf` as one message (copied; `buf` may be reused
/// at once). It is delivered exactly once and in order; its completion
/// says the peer's node has it. `*op` (if not NULL) gets its id.
///
/// # Safety
/// `node` is a live node; `buf` valid for reads of `len` bytes (NULL only
/// if `len` is 0); `op` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_send(
    node: *mut relink_node,
    session: relink_session,
    buf: *const std::ffi::c_void,
    len: usize,
    op: *mut relink_op,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        submit(node, session, op, |n, s| {
            let payload: &[u8] = if len == 0 {
                &[]
            } else {
                non_null(buf, "buf")?;
                // SAFETY: non-NULL, valid for `len` bytes by the contract.
                std::slice::from_raw_parts(buf.cast::<u8>(), len)
            };
            Ok(n.send(s, payload)?)
        })
    }
}

/// RDMA WRITE `len` bytes at `offset` of the session's own region `region`
/// to the peer's memory at `remote`. Replayed after a loss if it was not
/// confirmed (a write is idempotent).
///
/// # Safety
/// `node` is a live node; `op` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_write(
    node: *mut relink_node,
    session: relink_session,
    region: u32,
    offset: u64,
    len: u32,
    remote: relink_token,
    op: *mut relink_op,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        submit(node, session, op, |n, s| {
            Ok(n.write(s, local(region, offset, len), remote.into())?)
        })
    }
}

/// RDMA READ `len` bytes of the peer's memory at `remote` into `offset` of
/// the session's own region `region` (which needs local write access).
///
/// # Safety
/// `node` is a live node; `op` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_read(
    node: *mut relink_node,
    session: relink_session,
    region: u32,
    offset: u64,
    len: u32,
    remote: relink_token,
    op: *mut relink_op,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        submit(node, session, op, |n, s| {
            Ok(n.read(s, local(region, offset, len), remote.into())?)
        })
    }
}

/// Atomic FETCH_ADD of `add` on the 8 bytes of the peer's memory at
/// `remote`; the old value lands at `offset` of region `region` (8 bytes).
/// Not replayed after a loss unless the policy says so: an unconfirmed one
/// completes `RELINK_OUTCOME_INDETERMINATE`.
///
/// # Safety
/// `node` is a live node; `op` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_fetch_add(
    node: *mut relink_node,
    session: relink_session,
    region: u32,
    offset: u64,
    remote: relink_token,
    add: u64,
    op: *mut relink_op,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        submit(node, session, op, |n, s| {
            Ok(n.fetch_add(s, local(region, offset, 8), remote.into(), add)?)
        })
    }
}

/// Atomic CMP_SWAP on the 8 bytes of the peer's memory at `remote`: `swap`
/// is stored if they hold `compare`; the old value lands at `offset` of
/// region `region` (8 bytes). Replay rule as `relink_fetch_add`.
///
/// # Safety
/// `node` is a live node; `op` NULL or valid for a write.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn relink_cmp_swap(
    node: *mut relink_node,
    session: relink_session,
    region: u32,
    offset: u64,
    remote: relink_token,
    compare: u64,
    swap: u64,
    op: *mut relink_op,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        submit(node, session, op, |n, s| {
            Ok(n.cmp_swap(s, local(region, offset, 8), remote.into(), compare, swap)?)
        })
    }
}
