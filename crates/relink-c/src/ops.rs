//! Operations: messages, RDMA WRITE (also with immediate data, which the
//! peer's application is told of) and READ, and atomics on the peer's
//! advertised memory (named by tokens), each by a call of its own or any
//! of them through `relink_post` with a context its completion carries
//! back (there also a message sent from registered memory without a
//! copy, and a WRITE or READ over a scatter/gather list). A session accepts each with an id and completes it exactly once
//! (`relink_poll_completion`), also across recoveries; it holds at most
//! its `max_outstanding` operations whose completion was not taken
//! (`relink_room`; past it, `RELINK_ERR_AGAIN`).

use relink_rs::{
    LocalRange, LocalSgl, Node, OpId, OpKind, RegionId, SessionHandle, SubmitError, REGISTERED_BASE,
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
    /// A message (`relink_send`, or `relink_post`: of bytes at `buf`, or
    /// of registered memory with `RELINK_WR_FROM_REGION` or
    /// `RELINK_WR_SGL`).
    RELINK_OP_KIND_MESSAGE = 1,
    /// An RDMA WRITE (`relink_write`, or `relink_post`: from one range, or
    /// gathered from a scatter/gather list with `RELINK_WR_SGL`).
    RELINK_OP_KIND_WRITE = 2,
    /// An RDMA READ (`relink_read`, or `relink_post`: into one range, or
    /// scattered over a scatter/gather list with `RELINK_WR_SGL`).
    RELINK_OP_KIND_READ = 3,
    /// An atomic FETCH_ADD (`relink_fetch_add`).
    RELINK_OP_KIND_FETCH_ADD = 4,
    /// An atomic CMP_SWAP (`relink_cmp_swap`).
    RELINK_OP_KIND_CMP_SWAP = 5,
    /// A flush (`relink_post`): completes once every operation of the
    /// session submitted before it completed, whatever their outcomes, and
    /// the operations submitted after it are posted only then (a barrier
    /// and a fence, across recoveries). It moves nothing (`len` 0).
    RELINK_OP_KIND_FLUSH = 6,
    /// An RDMA WRITE with immediate data (`relink_write_imm`, or
    /// `relink_post` with the work request's `imm`, from one range or a
    /// scatter/gather list with `RELINK_WR_SGL`): the bytes land in the
    /// peer's memory, then the peer's application is told, once and in
    /// order with the messages (`relink_poll_written`, or a buffer it
    /// posted: `RELINK_RECEIVE_WRITTEN`).
    RELINK_OP_KIND_WRITE_IMM = 7,
    /// A kind this header does not name (a newer librelink), in a
    /// completion; `relink_post` refuses it.
    RELINK_OP_KIND_OTHER = 99,
}

/// A MESSAGE's flag (`relink_work_request.flags`): its payload is the
/// `len` bytes at `offset` of `region` — a session's own region or a
/// registration of the node (`relink_register`) — sent without a copy
/// (the SEND reads them where they are), instead of the bytes at `buf`.
/// The bytes stay the application's, and it leaves them unchanged until
/// the operation's completion, whatever its outcome: relink keeps the
/// range, not the bytes, and a replay after a device loss reads them
/// again (as the buffer of an `ibv_post_send` is the caller's until its
/// completion). `RELINK_ERR_NO_REGION` for a region the session does not
/// have, `RELINK_ERR_RANGE` for a range past its end,
/// `RELINK_ERR_TOO_LARGE` for a `len` over `max_message`.
pub const RELINK_WR_FROM_REGION: u32 = 1 << 0;

/// The local side of a MESSAGE, WRITE, WRITE_IMM or READ
/// (`relink_work_request.flags`) is the `num_sge` ranges at `sgl` (1 to
/// `RELINK_MAX_SGE`), one after the other, each in a session's own region
/// or a registration of the node — a scatter/gather list, as an
/// `ibv_send_wr`'s `sg_list` is — instead of one range:
///
/// - a MESSAGE's payload is the ranges' bytes, in order, sent without a
///   copy under the contract of `RELINK_WR_FROM_REGION` (at most
///   `max_message` bytes in all);
/// - a WRITE or WRITE_IMM gathers the ranges' bytes, in order, into the
///   peer's memory at `remote`, one range after the other;
/// - a READ scatters the peer's bytes at `remote` over the ranges, in
///   order (each needs local write access).
///
/// Every range stays unchanged (a READ's: untouched by the program) until
/// the operation's completion, whatever its outcome: a replay after a
/// device loss reads or writes them again. A one-sided operation moves at
/// most `UINT32_MAX` bytes in all (`RELINK_ERR_TOO_LARGE`). The array at
/// `sgl` is read during the call only. Not with `RELINK_WR_FROM_REGION`
/// (both: `RELINK_ERR_ARGUMENT`), nor on an atomic or a FLUSH.
pub const RELINK_WR_SGL: u32 = 1 << 1;

/// The most ranges a scatter/gather list has
/// (`relink_work_request.num_sge` with `RELINK_WR_SGL`).
pub const RELINK_MAX_SGE: u32 = 4;

const _: () = assert!(RELINK_MAX_SGE as usize == LocalSgl::MAX);

/// Every flag this librelink knows (`relink_work_request.flags`).
const WR_FLAGS: u32 = RELINK_WR_FROM_REGION | RELINK_WR_SGL;

/// One range of registered memory in a scatter/gather list
/// (`relink_work_request.sgl`, with `RELINK_WR_SGL`), as an `ibv_sge` is
/// in an `ibv_send_wr`'s list, but named by region: `len` bytes at
/// `offset` of `region`, a session's own region or a registration of the
/// node (`relink_register`). 24 bytes on the targets C programs are
/// built for (x86-64, AArch64), with 4 bytes of padding after `region`
/// and after `len` that librelink never reads: a positional initializer
/// `{region, offset, len}` fills it as a designated one does.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct relink_sge {
    /// The range's region: a session's own region, or a registration of
    /// the node.
    pub region: u32,
    /// The range's offset in `region`.
    pub offset: u64,
    /// The range's length in bytes.
    pub len: u32,
}

// Its layout on the targets C programs are built for (x86-64, AArch64).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(
    std::mem::size_of::<relink_sge>() == 24
        && std::mem::align_of::<relink_sge>() == 8
        && std::mem::offset_of!(relink_sge, offset) == 8
        && std::mem::offset_of!(relink_sge, len) == 16
);

/// One operation for `relink_post`, as a work request (`ibv_send_wr`) is
/// for `ibv_post_send`: its `kind` and `flags` say which members it reads,
/// the others are ignored. Start from a zeroed one (`relink_work_request
/// wr = {0};`, or designated initializers) and set what the kind needs:
///
/// | kind | `flags` | members read |
/// |---|---|---|
/// | `RELINK_OP_KIND_MESSAGE` | 0 | `buf`, `len` (at most the session's `max_message`): copied |
/// | `RELINK_OP_KIND_MESSAGE` | `RELINK_WR_FROM_REGION` | `region`, `offset`, `len` (at most `max_message`): sent from there, no copy |
/// | `RELINK_OP_KIND_MESSAGE` | `RELINK_WR_SGL` | `sgl`, `num_sge` (1 to `RELINK_MAX_SGE` ranges, at most `max_message` bytes in all): sent from there, no copy |
/// | `RELINK_OP_KIND_WRITE`, `RELINK_OP_KIND_READ` | 0 | `region`, `offset`, `len` (at most `UINT32_MAX`), `remote` |
/// | `RELINK_OP_KIND_WRITE`, `RELINK_OP_KIND_READ` | `RELINK_WR_SGL` | `sgl`, `num_sge` (1 to `RELINK_MAX_SGE` ranges, at most `UINT32_MAX` bytes in all), `remote` |
/// | `RELINK_OP_KIND_WRITE_IMM` | 0 | `region`, `offset`, `len` (at most `UINT32_MAX`), `remote`, `imm` |
/// | `RELINK_OP_KIND_WRITE_IMM` | `RELINK_WR_SGL` | `sgl`, `num_sge` (1 to `RELINK_MAX_SGE` ranges, at most `UINT32_MAX` bytes in all), `remote`, `imm` |
/// | `RELINK_OP_KIND_FETCH_ADD` | 0 | `region`, `offset`, `remote`, `add` (`len` 8, or 0 for 8) |
/// | `RELINK_OP_KIND_CMP_SWAP` | 0 | `region`, `offset`, `remote`, `compare`, `swap` (`len` 8, or 0 for 8) |
/// | `RELINK_OP_KIND_FLUSH` | 0 | nothing more |
///
/// `kind`, `flags` and `context` are read for every kind. A message from
/// registered memory (`RELINK_WR_FROM_REGION`, `RELINK_WR_SGL`) is
/// delivered as one of bytes is (the peer gets one message of the ranges'
/// bytes, in order) and completes as one (`RELINK_OP_KIND_MESSAGE`,
/// `len` the total bytes); its bytes stay unchanged until that completion.
/// A WRITE, WRITE_IMM or READ over a scatter/gather list
/// (`RELINK_WR_SGL`) moves the ranges' bytes to or from the peer's
/// memory at `remote` as one operation of their total length (its
/// completion's `len`; the peer's notice of a WRITE_IMM says that
/// length too), one range after the other; `region`, `offset` and `len`
/// are not read then.
///
/// The struct may grow at its end in a later librelink, which reads a
/// member added after the first layout only when the caller said it set
/// it — by a flag in `flags`, or by a `kind` that came with the member —
/// so a program built against an older header (and its smaller struct)
/// keeps working. `sgl` and `num_sge` came so: they are read only with
/// `RELINK_WR_SGL` (the struct grew from 88 to 104 bytes on 64-bit
/// targets; the members before keep their offsets). `imm` came with
/// `RELINK_OP_KIND_WRITE_IMM`, the only kind that reads it (no program
/// built before it can ask for that kind); it took the 4 bytes of tail
/// padding after `num_sge`: the struct is still 104 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct relink_work_request {
    /// What it does: a `relink_op_kind`, MESSAGE to WRITE_IMM (any other
    /// number is `RELINK_ERR_ARGUMENT`).
    pub kind: i32,
    /// An or of `RELINK_WR_*`: for a MESSAGE `RELINK_WR_FROM_REGION` or
    /// `RELINK_WR_SGL` (not both); for a WRITE, WRITE_IMM or READ
    /// `RELINK_WR_SGL`; 0 for the other kinds. A bit no `RELINK_WR_*`
    /// names, both flags, or a flag on a kind that does not take it is
    /// `RELINK_ERR_ARGUMENT`.
    pub flags: u32,
    /// The application's context: returned as is in the operation's
    /// completion (`relink_completion.context`): a number, or a pointer
    /// cast to one.
    pub context: u64,
    /// MESSAGE without a flag: the bytes to send (copied; NULL only if
    /// `len` is 0).
    pub buf: *const std::ffi::c_void,
    /// MESSAGE: the bytes at `buf` (with `RELINK_WR_FROM_REGION`: at
    /// `offset` of `region`); WRITE, WRITE_IMM, READ without
    /// `RELINK_WR_SGL`: the local range's length; the atomics: 8 (or 0,
    /// which stands for 8).
    pub len: u64,
    /// WRITE, WRITE_IMM, READ without `RELINK_WR_SGL`, the atomics, and a
    /// MESSAGE with `RELINK_WR_FROM_REGION`: the session's own region the
    /// local range is in, or a registration of the node
    /// (`relink_register`) (the data's source for a WRITE and a MESSAGE,
    /// where a READ's data or an atomic's old value lands).
    pub region: u32,
    /// WRITE, WRITE_IMM, READ without `RELINK_WR_SGL`, the atomics, a
    /// MESSAGE with `RELINK_WR_FROM_REGION`: the local range's offset in
    /// `region` (a multiple of 8 for the atomics).
    pub offset: u64,
    /// WRITE, WRITE_IMM, READ, the atomics: the peer's memory (its offset
    /// a multiple of 8 for the atomics).
    pub remote: relink_token,
    /// FETCH_ADD: added to the peer's word.
    pub add: u64,
    /// CMP_SWAP: the value the peer's word is compared with.
    pub compare: u64,
    /// CMP_SWAP: stored into the peer's word if it holds `compare`.
    pub swap: u64,
    /// A MESSAGE, WRITE, WRITE_IMM or READ with `RELINK_WR_SGL` (read only
    /// then): its `num_sge` local ranges, in the order their bytes are
    /// sent (a READ's: filled). Read during the call only; the bytes the
    /// ranges name stay unchanged until the completion. NULL is
    /// `RELINK_ERR_ARGUMENT`.
    pub sgl: *const relink_sge,
    /// With `RELINK_WR_SGL` (read only then): the ranges at `sgl`, 1 to
    /// `RELINK_MAX_SGE` (0, or more than `RELINK_MAX_SGE`, is
    /// `RELINK_ERR_ARGUMENT`: a number of ranges no list has).
    pub num_sge: u32,
    /// WRITE_IMM (read only for that kind): the immediate data the peer's
    /// application is told with the WRITE (`relink_written.imm`,
    /// `relink_received.imm`).
    pub imm: u32,
}

// The layout C programs are built with (x86-64, AArch64): `tests/header.rs`
// pins the members' order, this their offsets. The first layout ended at
// `swap` (88 bytes): `sgl` and `num_sge` came after it, then `imm` in the
// tail padding.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(
    std::mem::size_of::<relink_work_request>() == 104
        && std::mem::offset_of!(relink_work_request, context) == 8
        && std::mem::offset_of!(relink_work_request, buf) == 16
        && std::mem::offset_of!(relink_work_request, len) == 24
        && std::mem::offset_of!(relink_work_request, region) == 32
        && std::mem::offset_of!(relink_work_request, offset) == 40
        && std::mem::offset_of!(relink_work_request, remote) == 48
        && std::mem::offset_of!(relink_work_request, swap) == 80
        && std::mem::offset_of!(relink_work_request, sgl) == 88
        && std::mem::offset_of!(relink_work_request, num_sge) == 96
        && std::mem::offset_of!(relink_work_request, imm) == 100
);

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
fn check_local(n: &Node, s: SessionHandle, l: LocalRange) -> Result<(), Fail> {
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
fn max_message(n: &relink_node, session: relink_session) -> Result<u32, Fail> {
    Ok(n.node
        .options(SessionHandle(session))
        .ok_or_else(|| Fail::new(RELINK_ERR_NO_SESSION, format!("no session {session}")))?
        .max_message)
}

/// `RELINK_ERR_TOO_LARGE` for a message of `len` bytes over `max`.
fn too_large(session: relink_session, len: u64, max: u32) -> Fail {
    Fail::new(
        RELINK_ERR_TOO_LARGE,
        format!(
            "a message of {len} bytes is longer than session {session}'s \
             max_message, {max} bytes"
        ),
    )
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
/// order with this session's messages, with `imm` and the range of its
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
