//! Operations: messages, RDMA WRITE and READ, and atomics on the peer's
//! advertised memory (named by tokens). A session accepts each with an id
//! and completes it exactly once (`relink_poll_completion`), also across
//! recoveries.

use relink_rs::{LocalRange, Node, OpId, RegionId, SessionHandle, SubmitError};

use crate::node::{node_mut, relink_node};
use crate::region::{in_region, relink_token};
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
    call: impl FnOnce(&mut Node, SessionHandle) -> Result<OpId, SubmitError>,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let s = SessionHandle(session);
        let id = call(&mut n.node, s).map_err(|e| submit_error(&n.node, s, e))?;
        // SAFETY: the caller's contract.
        unsafe { put_opt(op, id.0) };
        Ok(RELINK_OK)
    })
}

/// A refused submit's status and message: a local range's region the
/// session does not have is `RELINK_ERR_NO_REGION`, a range outside it
/// `RELINK_ERR_RANGE` with the region's length; the rest as `Fail::from`.
fn submit_error(n: &Node, s: SessionHandle, e: SubmitError) -> Fail {
    let SubmitError::BadLocal(l) = e else {
        return e.into();
    };
    let region = n
        .options(s)
        .and_then(|o| o.regions.iter().find(|r| r.id == l.region));
    match region {
        None => Fail::new(
            RELINK_ERR_NO_REGION,
            format!("session {} has no region {}", s.0, l.region.0),
        ),
        Some(r) => in_region("local range", l.region.0, l.offset, u64::from(l.len), r.len)
            .err()
            // Inside its region yet refused: an atomic's range not 8 bytes.
            .unwrap_or_else(|| e.into()),
    }
}

/// Send `len` bytes from `buf` as one message (copied; `buf` may be reused
/// at once). It is delivered exactly once and in order; its completion
/// says the peer's node has it. `*op` (if not NULL) gets its id.
/// `RELINK_ERR_TOO_LARGE` if `len` is over the session's `max_message`
/// (checked before `buf` is read or anything allocated),
/// `RELINK_ERR_NO_SESSION` for an unknown session, `RELINK_ERR_SESSION`
/// for one that ended or is closing.
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
        if len != 0 {
            non_null(buf, "buf")?;
        }
        let s = SessionHandle(session);
        // The length first: the message is copied (and its copy allocated)
        // only once it is known to fit.
        let max = n
            .node
            .options(s)
            .ok_or_else(|| Fail::new(RELINK_ERR_NO_SESSION, format!("no session {session}")))?
            .max_message;
        if u64::try_from(len).map_or(true, |l| l > u64::from(max)) {
            return Err(Fail::new(
                RELINK_ERR_TOO_LARGE,
                format!(
                    "a message of {len} bytes is longer than session {session}'s \
                     max_message, {max} bytes"
                ),
            ));
        }
        let payload: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: non-NULL, valid for `len` bytes by the contract, and
            // `len` is at most `max_message`.
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }
        };
        let id = n
            .node
            .send(s, payload)
            .map_err(|e| submit_error(&n.node, s, e))?;
        // SAFETY: the caller's contract.
        unsafe { put_opt(op, id.0) };
        Ok(RELINK_OK)
    })
}

/// RDMA WRITE `len` bytes at `offset` of the session's own region `region`
/// to the peer's memory at `remote`. Replayed after a loss if it was not
/// confirmed (a write is idempotent). Refused with `RELINK_ERR_NO_SESSION`
/// (unknown session), `RELINK_ERR_NO_REGION` (the session has no region
/// `region`), `RELINK_ERR_RANGE` (`offset` + `len` past its end) or
/// `RELINK_ERR_SESSION` (it ended or is closing). A token the peer did not
/// advertise is no error here: the operation completes
/// `RELINK_OUTCOME_FAILED` with `RELINK_OP_REMOTE`.
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

/// RDMA READ `len` bytes of the peer's memory at `remote` into `offset` of
/// the session's own region `region` (which needs local write access).
/// Refused as `relink_write` is.
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
