//! Operations: messages, RDMA WRITE and READ, and atomics on the peer's
//! advertised memory (named by tokens), each by a call of its own or any
//! of them through `relink_post` with a context its completion carries
//! back. A session accepts each with an id and completes it exactly once
//! (`relink_poll_completion`), also across recoveries; it holds at most
//! its `max_outstanding` operations whose completion was not taken
//! (`relink_room`; past it, `RELINK_ERR_AGAIN`).

use relink_rs::{
    LocalRange, Node, OpId, OpKind, RegionId, SessionHandle, SubmitError, REGISTERED_BASE,
};

use crate::node::{node_mut, relink_node};
use crate::region::{in_region, relink_token};
use crate::session::relink_session;
use crate::status::*;

/// An operation a session accepted: it completes exactly once
/// (`relink_poll_completion`), also across recoveries.
pub type relink_op = u64;

/// What kind of operation: a `relink_work_request`'s `kind`
/// (`relink_post`) and a completion's (`relink_completion`). The numbers
/// are fixed: new kinds take new numbers.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_op_kind {
    /// No operation: a work request whose kind was not set (refused), or
    /// the `completion` of a `relink_output` of another kind.
    RELINK_OP_KIND_NONE = 0,
    /// A message (`relink_send`).
    RELINK_OP_KIND_MESSAGE = 1,
    /// An RDMA WRITE (`relink_write`).
    RELINK_OP_KIND_WRITE = 2,
    /// An RDMA READ (`relink_read`).
    RELINK_OP_KIND_READ = 3,
    /// An atomic FETCH_ADD (`relink_fetch_add`).
    RELINK_OP_KIND_FETCH_ADD = 4,
    /// An atomic CMP_SWAP (`relink_cmp_swap`).
    RELINK_OP_KIND_CMP_SWAP = 5,
    /// A kind this header does not name (a newer librelink), in a
    /// completion; `relink_post` refuses it.
    RELINK_OP_KIND_OTHER = 99,
}

/// One operation for `relink_post`, as a work request (`ibv_send_wr`) is
/// for `ibv_post_send`: its `kind` says which members it reads, the others
/// are ignored. Start from a zeroed one (`relink_work_request wr = {0};`,
/// or designated initializers) and set what the kind needs:
///
/// | kind | members read |
/// |---|---|
/// | `RELINK_OP_KIND_MESSAGE` | `buf`, `len` (at most the session's `max_message`) |
/// | `RELINK_OP_KIND_WRITE`, `RELINK_OP_KIND_READ` | `region`, `offset`, `len` (at most `UINT32_MAX`), `remote` |
/// | `RELINK_OP_KIND_FETCH_ADD` | `region`, `offset`, `remote`, `add` (`len` 8, or 0 for 8) |
/// | `RELINK_OP_KIND_CMP_SWAP` | `region`, `offset`, `remote`, `compare`, `swap` (`len` 8, or 0 for 8) |
///
/// `kind`, `flags` and `context` are read for every kind. The struct may
/// grow at its end in a later librelink: it then reads a new member only
/// when a flag in `flags` says the caller set it, so a program built
/// against this header keeps working.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct relink_work_request {
    /// What it does: a `relink_op_kind`, MESSAGE to CMP_SWAP (any other
    /// number is `RELINK_ERR_ARGUMENT`).
    pub kind: i32,
    /// None defined yet: 0 (anything else is `RELINK_ERR_ARGUMENT`).
    pub flags: u32,
    /// The application's context: returned as is in the operation's
    /// completion (`relink_completion.context`): a number, or a pointer
    /// cast to one.
    pub context: u64,
    /// MESSAGE: the bytes to send (copied; NULL only if `len` is 0).
    pub buf: *const std::ffi::c_void,
    /// MESSAGE: the bytes at `buf`; WRITE, READ: the local range's
    /// length; the atomics: 8 (or 0, which stands for 8).
    pub len: u64,
    /// WRITE, READ, the atomics: the session's own region the local range
    /// is in, or a registration of the node (`relink_register`) (the
    /// data's source for a WRITE, where a READ's data or an atomic's old
    /// value lands).
    pub region: u32,
    /// WRITE, READ, the atomics: the local range's offset in `region` (a
    /// multiple of 8 for the atomics).
    pub offset: u64,
    /// WRITE, READ, the atomics: the peer's memory (its offset a multiple
    /// of 8 for the atomics).
    pub remote: relink_token,
    /// FETCH_ADD: added to the peer's word.
    pub add: u64,
    /// CMP_SWAP: the value the peer's word is compared with.
    pub compare: u64,
    /// CMP_SWAP: stored into the peer's word if it holds `compare`.
    pub swap: u64,
}

// The layout C programs are built with (x86-64, AArch64): `tests/header.rs`
// pins the members' order, this their offsets.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(
    std::mem::size_of::<relink_work_request>() == 88
        && std::mem::offset_of!(relink_work_request, context) == 8
        && std::mem::offset_of!(relink_work_request, buf) == 16
        && std::mem::offset_of!(relink_work_request, len) == 24
        && std::mem::offset_of!(relink_work_request, region) == 32
        && std::mem::offset_of!(relink_work_request, offset) == 40
        && std::mem::offset_of!(relink_work_request, remote) == 48
        && std::mem::offset_of!(relink_work_request, swap) == 80
);

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
/// The region is one of the session's options, or a registration of the
/// node (`relink_register`), which every session has.
fn submit_error(n: &Node, s: SessionHandle, e: SubmitError) -> Fail {
    let SubmitError::BadLocal(l) = e else {
        return e.into();
    };
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
        None => Fail::new(
            RELINK_ERR_NO_REGION,
            format!("session {} has no region {}", s.0, l.region.0),
        ),
        Some(len) => in_region("local range", l.region.0, l.offset, u64::from(l.len), len)
            .err()
            // Inside its region yet refused: an atomic's range not 8 bytes.
            .unwrap_or_else(|| e.into()),
    }
}

/// Submit the message of `len` bytes at `buf` with `context`: its length
/// checked before a byte is read or anything allocated.
///
/// # Safety
/// `buf` is NULL or valid for reads of `len` bytes.
unsafe fn message(
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
    let max = n
        .node
        .options(s)
        .ok_or_else(|| Fail::new(RELINK_ERR_NO_SESSION, format!("no session {session}")))?
        .max_message;
    let len = match usize::try_from(len) {
        Ok(l) if len <= u64::from(max) => l,
        _ => {
            return Err(Fail::new(
                RELINK_ERR_TOO_LARGE,
                format!(
                    "a message of {len} bytes is longer than session {session}'s \
                     max_message, {max} bytes"
                ),
            ))
        }
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
/// (`relink_post` gives one), as that of every per-kind call.
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

/// Submit the one operation `wr` describes (a `relink_work_request`): any
/// kind, with the context its completion carries back. It is what the
/// per-kind calls do (`relink_send`, `relink_write`, `relink_read`,
/// `relink_fetch_add`, `relink_cmp_swap`), with their refusals, and
/// `*op` (if not NULL) gets its id. Everything is checked before anything
/// is read through `buf` or copied, and a refusal submits nothing:
/// `RELINK_ERR_ARGUMENT` for a NULL `wr`, a `kind` that is no operation, a
/// `flags` not 0, a NULL `buf` with a `len`, an atomic's `len` other than
/// 8 (or 0); `RELINK_ERR_TOO_LARGE` for a message over `max_message` or a
/// WRITE or READ over `UINT32_MAX` bytes; `RELINK_ERR_NO_SESSION`,
/// `RELINK_ERR_NO_REGION`, `RELINK_ERR_RANGE`, `RELINK_ERR_MISALIGNED`,
/// `RELINK_ERR_SESSION` and `RELINK_ERR_AGAIN` as the per-kind calls.
///
/// # Safety
/// `node` is a live node; `wr` NULL or valid for a read of a
/// `relink_work_request`, whose `buf` (for a MESSAGE) is valid for reads
/// of `len` bytes (NULL only if `len` is 0); `op` NULL or valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn relink_post(
    node: *mut relink_node,
    session: relink_session,
    wr: *const relink_work_request,
    op: *mut relink_op,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        non_null(wr, "wr")?;
        // SAFETY: non-NULL and valid for a read by the contract; every bit
        // pattern is a value of its members (integers, a pointer, a
        // `relink_token`): `kind` is an `int32_t`, checked below.
        let wr = unsafe { wr.read() };
        if wr.flags != 0 {
            return Err(Fail::arg(format!(
                "`flags` is {:#x}: this librelink defines no flag",
                wr.flags
            )));
        }
        use relink_op_kind::*;
        let kind = [
            RELINK_OP_KIND_MESSAGE,
            RELINK_OP_KIND_WRITE,
            RELINK_OP_KIND_READ,
            RELINK_OP_KIND_FETCH_ADD,
            RELINK_OP_KIND_CMP_SWAP,
        ]
        .into_iter()
        .find(|k| *k as i32 == wr.kind)
        .ok_or_else(|| {
            Fail::arg(format!(
                "`kind` {} is no operation (a relink_op_kind, MESSAGE to CMP_SWAP)",
                wr.kind
            ))
        })?;
        let s = SessionHandle(session);
        let id = if kind == RELINK_OP_KIND_MESSAGE {
            // SAFETY: the caller's contract for a MESSAGE's `buf`.
            unsafe { message(n, session, wr.buf, wr.len, wr.context) }?
        } else {
            let atomic = matches!(kind, RELINK_OP_KIND_FETCH_ADD | RELINK_OP_KIND_CMP_SWAP);
            let len = match (atomic, wr.len) {
                (true, 0 | 8) => 8,
                (true, len) => {
                    return Err(Fail::arg(format!(
                        "an atomic works on 8 bytes: `len` is {len} (8, or 0 for 8)"
                    )))
                }
                (false, len) => u32::try_from(len).map_err(|_| {
                    Fail::new(
                        RELINK_ERR_TOO_LARGE,
                        format!(
                            "a one-sided operation of {len} bytes is longer than the \
                             most, {} bytes (UINT32_MAX)",
                            u32::MAX
                        ),
                    )
                })?,
            };
            let local = local(wr.region, wr.offset, len);
            let remote = wr.remote.into();
            let kind = match kind {
                RELINK_OP_KIND_WRITE => OpKind::Write { local, remote },
                RELINK_OP_KIND_READ => OpKind::Read { local, remote },
                RELINK_OP_KIND_FETCH_ADD => OpKind::FetchAdd {
                    local,
                    remote,
                    add: wr.add,
                },
                _ => OpKind::CmpSwap {
                    local,
                    remote,
                    compare: wr.compare,
                    swap: wr.swap,
                },
            };
            n.node
                .submit_with(s, kind, wr.context)
                .map_err(|e| submit_error(&n.node, s, e))?
        };
        // SAFETY: the caller's contract.
        unsafe { put_opt(op, id.0) };
        Ok(RELINK_OK)
    })
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
