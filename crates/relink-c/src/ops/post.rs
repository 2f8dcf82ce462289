//! `relink_post`: a work request read member by member (as its flags and
//! kind say it was set), checked — its kind and flags, its scatter/gather
//! list's ranges and their total — and submitted, whatever its kind.

use relink_rs::{LocalRange, LocalSgl, OpId, OpKind, SessionHandle};

use super::op::{relink_op, relink_op_kind};
use super::submit::{check_local, local, max_message, message, submit_error, too_large};
use super::work_request::{
    relink_work_request, RELINK_MAX_SGE, RELINK_WR_FROM_REGION, RELINK_WR_SGL, WR_FLAGS,
};
use crate::node::{node_mut, relink_node};
use crate::session::relink_session;
use crate::status::*;

/// The work request at `wr`, read member by member: those of the first
/// layout always, `sgl` and `num_sge` only when `flags` has
/// `RELINK_WR_SGL` (then NULL and 0 otherwise), `imm` only when `kind` is
/// `RELINK_OP_KIND_WRITE_IMM` (then 0 otherwise) — a program built
/// against an older header has a smaller struct, without them.
///
/// # Safety
/// `wr` is non-NULL, aligned, and valid for reads of the members of the
/// first layout (88 bytes on 64-bit targets), of `sgl` and `num_sge` too
/// if `flags` has `RELINK_WR_SGL`, and of `imm` if `kind` is
/// `RELINK_OP_KIND_WRITE_IMM`.
unsafe fn read_work_request(wr: *const relink_work_request) -> relink_work_request {
    // SAFETY: the contract: each member read is inside the caller's
    // struct (a place projection of a raw pointer reads that member
    // alone), and every bit pattern is a value of each (integers, a
    // pointer, a `relink_token` of integers).
    unsafe {
        let kind = (&raw const (*wr).kind).read();
        let flags = (&raw const (*wr).flags).read();
        let with_sgl = flags & RELINK_WR_SGL != 0;
        relink_work_request {
            kind,
            flags,
            context: (&raw const (*wr).context).read(),
            buf: (&raw const (*wr).buf).read(),
            len: (&raw const (*wr).len).read(),
            region: (&raw const (*wr).region).read(),
            offset: (&raw const (*wr).offset).read(),
            remote: (&raw const (*wr).remote).read(),
            add: (&raw const (*wr).add).read(),
            compare: (&raw const (*wr).compare).read(),
            swap: (&raw const (*wr).swap).read(),
            sgl: if with_sgl {
                (&raw const (*wr).sgl).read()
            } else {
                std::ptr::null()
            },
            num_sge: if with_sgl {
                (&raw const (*wr).num_sge).read()
            } else {
                0
            },
            imm: if kind == relink_op_kind::RELINK_OP_KIND_WRITE_IMM as i32 {
                (&raw const (*wr).imm).read()
            } else {
                0
            },
        }
    }
}

/// The local ranges `wr` (read by [`read_work_request`], its `flags` one
/// of `RELINK_WR_FROM_REGION` and `RELINK_WR_SGL`) names — a message's
/// from registered memory, or a WRITE's, WRITE_IMM's or READ's list:
/// checked, and at most `RELINK_MAX_SGE` of them, before anything is
/// allocated.
///
/// # Safety
/// With `RELINK_WR_SGL`, `wr.sgl` is NULL or valid for reads of
/// `wr.num_sge` `relink_sge`s.
unsafe fn local_ranges(
    wr: &relink_work_request,
) -> Result<([LocalRange; LocalSgl::MAX], usize), Fail> {
    let mut ranges = [local(0, 0, 0); LocalSgl::MAX];
    if wr.flags == RELINK_WR_FROM_REGION {
        // A `len` over `UINT32_MAX` is over any `max_message`:
        // `message_from` refuses it by `wr.len` before the range is used.
        let len = u32::try_from(wr.len).unwrap_or(u32::MAX);
        ranges[0] = local(wr.region, wr.offset, len);
        return Ok((ranges, 1));
    }
    let count = wr.num_sge as usize;
    if !(1..=LocalSgl::MAX).contains(&count) {
        return Err(Fail::arg(format!(
            "`num_sge` is {}: a scatter/gather list has 1 to \
             RELINK_MAX_SGE ({RELINK_MAX_SGE}) ranges",
            wr.num_sge
        )));
    }
    let sgl = non_null(wr.sgl, "sgl")?;
    for (i, range) in ranges.iter_mut().take(count).enumerate() {
        // SAFETY: non-NULL, and valid for reads of `num_sge` (at most
        // `RELINK_MAX_SGE`) elements by the contract; every bit pattern
        // is a `relink_sge` (integers).
        let sge = unsafe { sgl.add(i).read() };
        *range = local(sge.region, sge.offset, sge.len);
    }
    Ok((ranges, count))
}

/// Submit the message from registered memory that `wr` names
/// (`RELINK_WR_FROM_REGION` or `RELINK_WR_SGL`): its ranges checked —
/// how many, their total against `max_message`, each inside its region —
/// before anything is allocated.
///
/// # Safety
/// As [`local_ranges`].
unsafe fn message_from(
    n: &mut relink_node,
    session: relink_session,
    wr: &relink_work_request,
) -> Result<OpId, Fail> {
    // SAFETY: the caller's contract.
    let (ranges, count) = unsafe { local_ranges(wr) }?;
    let ranges = &ranges[..count];
    let s = SessionHandle(session);
    let max = max_message(n, session)?;
    let total = if wr.flags == RELINK_WR_FROM_REGION {
        wr.len
    } else {
        ranges.iter().map(|r| u64::from(r.len)).sum()
    };
    if total > u64::from(max) {
        return Err(too_large(session, total, max));
    }
    for r in ranges {
        check_local(&n.node, s, *r)?;
    }
    let local = LocalSgl::new(ranges.iter().copied())
        .ok_or_else(|| Fail::arg(format!("{count} ranges are no scatter/gather list")))?;
    n.node
        .submit_with(s, OpKind::MessageFrom { local }, wr.context)
        .map_err(|e| submit_error(&n.node, s, e))
}

/// A one-sided operation's length: at most `UINT32_MAX` bytes (a work
/// request's length is 32 bits), else `RELINK_ERR_TOO_LARGE`.
fn one_sided_len(len: u64) -> Result<u32, Fail> {
    u32::try_from(len).map_err(|_| {
        Fail::new(
            RELINK_ERR_TOO_LARGE,
            format!(
                "a one-sided operation of {len} bytes is longer than the most, {} bytes \
                 (UINT32_MAX)",
                u32::MAX
            ),
        )
    })
}

/// The scatter/gather list of a WRITE, WRITE_IMM or READ with
/// `RELINK_WR_SGL`: how many ranges and their total checked (at most
/// `UINT32_MAX` bytes) before anything is allocated; each range is checked
/// against its region when it is submitted.
///
/// # Safety
/// As [`local_ranges`].
unsafe fn one_sided_sgl(wr: &relink_work_request) -> Result<LocalSgl, Fail> {
    // SAFETY: the caller's contract.
    let (ranges, count) = unsafe { local_ranges(wr) }?;
    let ranges = &ranges[..count];
    let total: u64 = ranges.iter().map(|r| u64::from(r.len)).sum();
    if total > u64::from(u32::MAX) {
        return Err(Fail::new(
            RELINK_ERR_TOO_LARGE,
            format!(
                "a one-sided operation of {total} bytes (its {count} ranges' total) is \
                 longer than the most, {} bytes (UINT32_MAX)",
                u32::MAX
            ),
        ));
    }
    LocalSgl::new(ranges.iter().copied())
        .ok_or_else(|| Fail::arg(format!("{count} ranges are no scatter/gather list")))
}

/// Submit the one operation `wr` describes (a `relink_work_request`): any
/// kind, with the context its completion carries back. It is what the
/// per-kind calls do (`relink_send`, `relink_write`, `relink_write_imm`,
/// `relink_read`, `relink_fetch_add`, `relink_cmp_swap`), with their
/// refusals; a message from registered memory, sent without a copy
/// (`RELINK_WR_FROM_REGION`, `RELINK_WR_SGL`: leave its bytes unchanged
/// until its completion); and a WRITE, WRITE_IMM or READ whose local
/// side is a scatter/gather list (`RELINK_WR_SGL`: gathered from, or
/// scattered over, its ranges in order; its completion's `len` is their
/// total). `*op` (if not NULL) gets its id. Everything is checked before
/// anything is read through `buf` or copied or allocated, and a refusal
/// submits nothing:
///
/// - `RELINK_ERR_ARGUMENT` for a NULL `wr`; a `kind` that is no
///   operation; a `flags` bit no `RELINK_WR_*` names, both
///   `RELINK_WR_FROM_REGION` and `RELINK_WR_SGL`, `RELINK_WR_FROM_REGION`
///   on a kind other than MESSAGE, or `RELINK_WR_SGL` on an atomic or a
///   FLUSH; a NULL `buf` with a `len`; with `RELINK_WR_SGL`, a `num_sge`
///   of 0 or over `RELINK_MAX_SGE`, or a NULL `sgl`; an atomic's `len`
///   other than 8 (or 0);
/// - `RELINK_ERR_TOO_LARGE` for a message over `max_message` (a message
///   from registered memory: its ranges' total) or a WRITE, WRITE_IMM or
///   READ over `UINT32_MAX` bytes (with `RELINK_WR_SGL`: its ranges'
///   total);
/// - `RELINK_ERR_NO_REGION` for a local range's region the session does
///   not have, `RELINK_ERR_RANGE` for a local range past its region's end
///   (every range of a scatter/gather list as a WRITE's one local range);
/// - `RELINK_ERR_NO_SESSION`, `RELINK_ERR_MISALIGNED`,
///   `RELINK_ERR_SESSION` and `RELINK_ERR_AGAIN` as the per-kind calls.
///
/// # Safety
/// `node` is a live node; `wr` NULL or valid for a read of a
/// `relink_work_request` — of its members up to `swap` only, unless
/// `flags` has `RELINK_WR_SGL` (then up to `num_sge`) or `kind` is
/// `RELINK_OP_KIND_WRITE_IMM` (then up to `imm`): a program built
/// against an older header passes its smaller struct — whose `buf` (for
/// a MESSAGE without a flag) is valid for reads of `len` bytes (NULL
/// only if `len` is 0), and whose `sgl` (with `RELINK_WR_SGL`) is NULL or
/// valid for reads of `num_sge` `relink_sge`s; `op` NULL or valid for a
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
        // SAFETY: non-NULL, and valid for reads of the members it reads by
        // the contract.
        let wr = unsafe { read_work_request(wr) };
        use relink_op_kind::*;
        let kind = [
            RELINK_OP_KIND_MESSAGE,
            RELINK_OP_KIND_WRITE,
            RELINK_OP_KIND_READ,
            RELINK_OP_KIND_FETCH_ADD,
            RELINK_OP_KIND_CMP_SWAP,
            RELINK_OP_KIND_FLUSH,
            RELINK_OP_KIND_WRITE_IMM,
        ]
        .into_iter()
        .find(|k| *k as i32 == wr.kind)
        .ok_or_else(|| {
            Fail::arg(format!(
                "`kind` {} is no operation (a relink_op_kind, MESSAGE to WRITE_IMM)",
                wr.kind
            ))
        })?;
        if wr.flags & !WR_FLAGS != 0 {
            return Err(Fail::arg(format!(
                "`flags` {:#x} has bits no RELINK_WR_* names",
                wr.flags
            )));
        }
        if wr.flags == WR_FLAGS {
            return Err(Fail::arg(
                "`flags` has both RELINK_WR_FROM_REGION and RELINK_WR_SGL: an operation's \
                 local side is one range or one scatter/gather list",
            ));
        }
        let one_sided = matches!(
            kind,
            RELINK_OP_KIND_WRITE | RELINK_OP_KIND_WRITE_IMM | RELINK_OP_KIND_READ
        );
        if wr.flags == RELINK_WR_FROM_REGION && kind != RELINK_OP_KIND_MESSAGE {
            return Err(Fail::arg(format!(
                "`flags` {:#x} on a `kind` {}: RELINK_WR_FROM_REGION is a MESSAGE's only \
                 (a WRITE's, WRITE_IMM's or READ's one range is `region`, `offset` and \
                 `len` already)",
                wr.flags, wr.kind
            )));
        }
        if wr.flags == RELINK_WR_SGL && kind != RELINK_OP_KIND_MESSAGE && !one_sided {
            return Err(Fail::arg(format!(
                "`flags` {:#x} on a `kind` {}: RELINK_WR_SGL is a MESSAGE's, WRITE's, \
                 WRITE_IMM's or READ's only",
                wr.flags, wr.kind
            )));
        }
        let s = SessionHandle(session);
        let id = if kind == RELINK_OP_KIND_MESSAGE && wr.flags != 0 {
            // SAFETY: the caller's contract for `sgl` (read with
            // `RELINK_WR_SGL` only).
            unsafe { message_from(n, session, &wr) }?
        } else if kind == RELINK_OP_KIND_MESSAGE {
            // SAFETY: the caller's contract for a MESSAGE's `buf`.
            unsafe { message(n, session, wr.buf, wr.len, wr.context) }?
        } else if kind == RELINK_OP_KIND_FLUSH {
            n.node
                .submit_with(s, OpKind::Flush, wr.context)
                .map_err(|e| submit_error(&n.node, s, e))?
        } else if one_sided {
            let local = if wr.flags == RELINK_WR_SGL {
                // SAFETY: the caller's contract for `sgl` (read with
                // `RELINK_WR_SGL` only).
                unsafe { one_sided_sgl(&wr) }?
            } else {
                LocalSgl::one(local(wr.region, wr.offset, one_sided_len(wr.len)?))
            };
            let remote = wr.remote.into();
            let kind = match kind {
                RELINK_OP_KIND_WRITE => OpKind::Write { local, remote },
                RELINK_OP_KIND_WRITE_IMM => OpKind::WriteImm {
                    local,
                    remote,
                    imm: wr.imm,
                },
                _ => OpKind::Read { local, remote },
            };
            n.node
                .submit_with(s, kind, wr.context)
                .map_err(|e| submit_error(&n.node, s, e))?
        } else {
            let local = match wr.len {
                0 | 8 => local(wr.region, wr.offset, 8),
                len => {
                    return Err(Fail::arg(format!(
                        "an atomic works on 8 bytes: `len` is {len} (8, or 0 for 8)"
                    )))
                }
            };
            let remote = wr.remote.into();
            let kind = match kind {
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
