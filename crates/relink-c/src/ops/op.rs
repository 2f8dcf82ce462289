//! An operation: the id a session gives it (`relink_op`) and its kind
//! (`relink_op_kind`), which a work request names and a completion
//! reports.

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
