//! What every submit shares: a local range, the submit of a per-kind
//! call, a refusal's status, the checks of a local range and of a
//! message's length, the submit of a message of bytes; and how many more
//! submits a session takes (`relink_room`).

use relink_rs::{
    LocalRange, Node, OpId, OpKind, RegionId, SessionHandle, SubmitError, REGISTERED_BASE,
};

use super::op::relink_op;
use crate::node::{node_mut, relink_node};
use crate::region::in_region;
use crate::session::relink_session;
use crate::status::*;

pub(crate) fn local(region: u32, offset: u64, len: u32) -> LocalRange {
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
pub(super) unsafe fn submit(
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
/// `RELINK_ERR_RANGE` with the region's length ([`check_local`]); the rest
/// as `Fail::from`.
pub(crate) fn submit_error(n: &Node, s: SessionHandle, e: SubmitError) -> Fail {
    let SubmitError::BadLocal(l) = e else {
        return e.into();
    };
    check_local(n, s, l)
        .err()
        // Inside its region yet refused: an atomic's range not 8 bytes.
        .unwrap_or_else(|| e.into())
}

/// Whether local range `l` is inside a region session `s` has:
/// `RELINK_ERR_NO_REGION` if it has no region `l.region`, else
/// `RELINK_ERR_RANGE` with the region's length if the range is outside
/// it. The region is one of the session's options, or a registration of
/// the node (`relink_register`), which every session has.
pub(super) fn check_local(n: &Node, s: SessionHandle, l: LocalRange) -> Result<(), Fail> {
    let len = n
        .options(s)
        .and_then(|o| o.regions.iter().find(|r| r.id == l.region))
        .map(|r| r.len)
        .or_else(|| {
            (l.region.0 >= REGISTERED_BASE)
                .then(|| n.region(s, l.region).ok())
                .flatten()
                .map(|m| m.len() as u64)
        });
    match len {
        None => Err(Fail::new(
            RELINK_ERR_NO_REGION,
            format!("session {} has no region {}", s.0, l.region.0),
        )),
        Some(len) => in_region("local range", l.region.0, l.offset, u64::from(l.len), len),
    }
}

/// The `max_message` of session `session`, or `RELINK_ERR_NO_SESSION`.
pub(super) fn max_message(n: &relink_node, session: relink_session) -> Result<u32, Fail> {
    Ok(n.node
        .options(SessionHandle(session))
        .ok_or_else(|| Fail::new(RELINK_ERR_NO_SESSION, format!("no session {session}")))?
        .max_message)
}

/// `RELINK_ERR_TOO_LARGE` for a message of `len` bytes over `max`.
pub(super) fn too_large(session: relink_session, len: u64, max: u32) -> Fail {
    Fail::new(
        RELINK_ERR_TOO_LARGE,
        format!(
            "a message of {len} bytes is longer than session {session}'s \
             max_message, {max} bytes"
        ),
    )
}

/// A posted receive buffer's `len` as the 32 bits a buffer has
/// (`relink_post_receive`, `relink_post_shared_receive`), else
/// `RELINK_ERR_TOO_LARGE`.
pub(crate) fn receive_len(len: u64) -> Result<u32, Fail> {
    u32::try_from(len).map_err(|_| {
        Fail::new(
            RELINK_ERR_TOO_LARGE,
            format!(
                "a receive buffer of {len} bytes is longer than the most, {} bytes \
                 (UINT32_MAX)",
                u32::MAX
            ),
        )
    })
}

/// Submit the message of `len` bytes at `buf` with `context`: its length
/// checked before a byte is read or anything allocated.
///
/// # Safety
/// `buf` is NULL or valid for reads of `len` bytes.
pub(super) unsafe fn message(
    n: &mut relink_node,
    session: relink_session,
    buf: *const std::ffi::c_void,
    len: u64,
    context: u64,
) -> Result<OpId, Fail> {
    if len != 0 {
        non_null(buf, "buf")?;
    }
    let s = SessionHandle(session);
    // The length first: the message is copied (and its copy allocated)
    // only once it is known to fit.
    let max = max_message(n, session)?;
    let len = match usize::try_from(len) {
        Ok(l) if len <= u64::from(max) => l,
        _ => return Err(too_large(session, len, max)),
    };
    let payload: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: non-NULL, valid for `len` bytes by the contract, and
        // `len` is at most `max_message`.
        unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }
    };
    let submitted = if context == 0 {
        // Into the allocation of a message the peer confirmed, if one is
        // spare.
        n.node.send(s, payload)
    } else {
        let payload = payload.to_vec();
        n.node.submit_with(s, OpKind::Message { payload }, context)
    };
    submitted.map_err(|e| submit_error(&n.node, s, e))
}

/// How many more operations the session takes now before a submit is
/// refused with `RELINK_ERR_AGAIN`, in `*room`: its `max_outstanding`
/// (`relink_options_set_max_outstanding`) less the operations submitted
/// whose completion was not taken. `RELINK_ERR_NO_SESSION` if there is no
/// such session.
///
/// # Safety
/// `node` is a live node; `room` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_room(
    node: *mut relink_node,
    session: relink_session,
    room: *mut u64,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        non_null(room, "room")?;
        let r = n.node.room(SessionHandle(session))?;
        // SAFETY: the caller's contract.
        unsafe { put(room, "room", r) }?;
        Ok(RELINK_OK)
    })
}
