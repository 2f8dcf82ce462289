//! The work request `relink_post` reads (`relink_work_request`): its
//! flags (`RELINK_WR_*`), the ranges of its scatter/gather list
//! (`relink_sge`, at most `RELINK_MAX_SGE`), and the layouts C programs
//! are built with.

use relink_rs::LocalSgl;

use crate::region::relink_token;

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
pub(super) const WR_FLAGS: u32 = RELINK_WR_FROM_REGION | RELINK_WR_SGL;

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
