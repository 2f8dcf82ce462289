//! The per-kind calls: a message of bytes (`relink_send`), an RDMA WRITE
//! (`relink_write`, `relink_write_imm`), an RDMA READ (`relink_read`) and
//! the atomics (`relink_fetch_add`, `relink_cmp_swap`), each with one
//! local range and a context of 0.

use super::op::relink_op;
use super::submit::{local, message, submit};
use crate::node::{node_mut, relink_node};
use crate::region::relink_token;
use crate::session::relink_session;
use crate::status::*;

/// Send `len` bytes from `buf` as one message (copied; `buf` may be reused
/// at once). It is delivered exactly once and in order; its completion
/// says the peer's node has it (its context is 0: `relink_post` gives
/// one). `*op` (if not NULL) gets its id. `RELINK_ERR_TOO_LARGE` if `len`
/// is over the session's `max_message` (checked before `buf` is read or
/// anything allocated), `RELINK_ERR_NO_SESSION` for an unknown session,
/// `RELINK_ERR_SESSION` for one that ended or is closing,
/// `RELINK_ERR_AGAIN` with `max_outstanding` operations outstanding.
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
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let len = u64::try_from(len).unwrap_or(u64::MAX);
        // SAFETY: the caller's contract (`len` is the caller's, or more
        // than any `max_message`).
        let id = unsafe { message(n, session, buf, len, 0) }?;
        // SAFETY: the caller's contract.
        unsafe { put_opt(op, id.0) };
        Ok(RELINK_OK)
    })
}

/// RDMA WRITE `len` bytes at `offset` of the session's own region `region`
/// (or of the node's registration `region`: `relink_register`) to the
/// peer's memory at `remote`. Replayed after a loss if it was not
/// confirmed (a write is idempotent). Refused with `RELINK_ERR_NO_SESSION`
/// (unknown session), `RELINK_ERR_NO_REGION` (the session has no region
/// `region`), `RELINK_ERR_RANGE` (`offset` + `len` past its end),
/// `RELINK_ERR_SESSION` (it ended or is closing) or `RELINK_ERR_AGAIN`
/// (`max_outstanding` operations outstanding). A token the peer did not
/// advertise is no error here: the operation completes
/// `RELINK_OUTCOME_FAILED` with `RELINK_OP_REMOTE`. Its context is 0
/// (`relink_post` gives one), as that of every per-kind call. A WRITE
/// gathered from up to `RELINK_MAX_SGE` ranges is `relink_post`'s, with
/// `RELINK_WR_SGL`.
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
            n.write(s, local(region, offset, len), remote.into())
        })
    }
}

/// RDMA WRITE with immediate data: `len` bytes at `offset` of region
/// `region` (the session's own, or the node's registration) to the peer's
/// memory at `remote`, then the peer's application is told — once, in
/// order with the session's messages, with `imm` and the range of its
/// memory the bytes landed in (at the peer: `relink_poll_written`, or a
/// buffer it posted, `RELINK_RECEIVE_WRITTEN`; node-wide
/// `RELINK_OUTPUT_WRITTEN`). The bytes land before the notice. Across a
/// device loss the WRITE is replayed if it was not confirmed and the
/// notice is delivered exactly once. Leave the local range unchanged
/// until the completion (a replay reads it again).
///
/// It completes as a message does (kind `RELINK_OP_KIND_WRITE_IMM`, `len`
/// the range's): SUCCESS once the peer's node delivered the notice;
/// FAILED with `RELINK_OP_REMOTE` if the peer refused the WRITE (a token
/// it does not advertise: the messages around it are delivered, and the
/// peer is told nothing); INDETERMINATE as a message posted and not
/// confirmed when the session ended. Refused at submit as `relink_write`
/// is.
///
/// # Safety
/// `node` is a live node; `op` NULL or valid for a write.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn relink_write_imm(
    node: *mut relink_node,
    session: relink_session,
    region: u32,
    offset: u64,
    len: u32,
    remote: relink_token,
    imm: u32,
    op: *mut relink_op,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        submit(node, session, op, |n, s| {
            n.write_imm(s, local(region, offset, len), remote.into(), imm)
        })
    }
}

/// RDMA READ `len` bytes of the peer's memory at `remote` into `offset` of
/// the session's own region `region` (which needs local write access).
/// Refused as `relink_write` is. A READ scattered over up to
/// `RELINK_MAX_SGE` ranges is `relink_post`'s, with `RELINK_WR_SGL`.
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
            n.read(s, local(region, offset, len), remote.into())
        })
    }
}

/// Atomic FETCH_ADD of `add` on the 8 bytes of the peer's memory at
/// `remote`; the old value lands at `offset` of region `region` (8 bytes).
/// Not replayed after a loss unless the policy says so: an unconfirmed one
/// completes `RELINK_OUTCOME_INDETERMINATE`. Both words are 8-byte
/// aligned: `offset` and `remote.offset` are multiples of 8, else
/// `RELINK_ERR_MISALIGNED` (refused before it is posted; the session is
/// unaffected). Otherwise refused as `relink_write` is (with `len` 8).
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
            n.fetch_add(s, local(region, offset, 8), remote.into(), add)
        })
    }
}

/// Atomic CMP_SWAP on the 8 bytes of the peer's memory at `remote`: `swap`
/// is stored if they hold `compare`; the old value lands at `offset` of
/// region `region` (8 bytes). Replay rule, alignment and refusals as
/// `relink_fetch_add`'s.
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
            n.cmp_swap(s, local(region, offset, 8), remote.into(), compare, swap)
        })
    }
}
