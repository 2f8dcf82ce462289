//! Verbs data types: access flags, work requests, work completions, QP and
//! SRQ attributes. They follow `libibverbs` names so that a reader who knows
//! verbs recognises every field.

use crate::error::{CreateError, PostError};
use crate::handles::{CqId, MrId, MwId, SrqId};
use crate::memory::Memory;
use crate::sgl::SgeList;

bitflags::bitflags! {
    /// Memory access rights of an MR or MW (`ibv_access_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Access: u32 {
        /// The local HCA may write (receives, READ responses, atomics results).
        const LOCAL_WRITE = 1;
        /// Peers may WRITE into it.
        const REMOTE_WRITE = 1 << 1;
        /// Peers may READ from it.
        const REMOTE_READ = 1 << 2;
        /// Peers may run atomics on it.
        const REMOTE_ATOMIC = 1 << 3;
        /// Memory windows may be bound to it.
        const MW_BIND = 1 << 4;
    }
}

impl Access {
    /// Whether verbs accepts this combination: remote write and remote atomic
    /// require local write (`EINVAL` otherwise).
    pub fn is_valid_for_mr(self) -> bool {
        !self.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
            || self.contains(Access::LOCAL_WRITE)
    }
}

/// The argument checks of `reg_mr` that every provider makes, in one
/// place: a valid access combination and a non-empty range inside
/// `memory`.
///
/// # Errors
/// `CreateError::InvalidArgument` naming what is wrong.
pub fn check_reg_mr(
    memory: &Memory,
    addr: u64,
    length: u64,
    access: Access,
) -> Result<(), CreateError> {
    if !access.is_valid_for_mr() {
        return Err(CreateError::InvalidArgument(
            "REMOTE_WRITE/REMOTE_ATOMIC need LOCAL_WRITE".into(),
        ));
    }
    if length == 0 || !memory.contains(addr, length) {
        return Err(CreateError::InvalidArgument(format!(
            "range {addr:#x}+{length} is not inside the memory {:#x}+{}",
            memory.addr(),
            memory.len()
        )));
    }
    Ok(())
}

/// How a memory window is bound and invalidated (`ibv_mw_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Type 1: bound with `ibv_bind_mw`, invalidated by rebinding with length 0.
    Type1,
    /// Type 2: bound with a BIND_MW work request to one QP, invalidated with
    /// LOCAL_INV or SEND_WITH_INV.
    Type2,
}

/// A scatter/gather element: local memory named by virtual address + lkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sge {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the MR covering the range.
    pub lkey: u32,
}

/// A remote buffer: virtual address on the peer + rkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteAddr {
    /// Virtual address on the peer.
    pub addr: u64,
    /// Remote key of the peer's MR or MW.
    pub rkey: u32,
}

/// What a memory-window bind grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MwBind {
    /// The MR the window lies in (must have `MW_BIND`).
    pub mr: MrId,
    /// First byte of the window.
    pub addr: u64,
    /// Length of the window; 0 unbinds a type 1 window.
    pub length: u64,
    /// Remote rights of the window (a subset of the MR's).
    pub access: Access,
}

/// The operation of a send-queue work request (`ibv_wr_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendOp {
    /// Two-sided message; consumes a receive at the peer.
    Send,
    /// SEND carrying 32 bits of immediate data.
    SendWithImm {
        /// Immediate data (host order).
        imm: u32,
    },
    /// SEND that invalidates a memory window at the peer.
    SendWithInv {
        /// The rkey the peer must invalidate.
        rkey: u32,
    },
    /// One-sided write.
    Write {
        /// Where the gathered bytes land: an address at the peer and the
        /// rkey of an MR or MW there with `REMOTE_WRITE`.
        remote: RemoteAddr,
    },
    /// Write that also consumes a receive at the peer and delivers `imm`.
    WriteWithImm {
        /// Where the gathered bytes land, as for [`SendOp::Write`].
        remote: RemoteAddr,
        /// Immediate data (host order), delivered in the peer's receive
        /// completion.
        imm: u32,
    },
    /// One-sided read into the local SGEs.
    Read {
        /// Where the bytes come from: an address at the peer and the rkey of
        /// an MR or MW there with `REMOTE_READ`.
        remote: RemoteAddr,
    },
    /// 64-bit fetch-and-add; the old value lands in the (8-byte) local SGE.
    FetchAdd {
        /// The peer's u64: 8-byte aligned, the rkey with `REMOTE_ATOMIC`.
        remote: RemoteAddr,
        /// Added to the peer's u64 (wrapping).
        add: u64,
    },
    /// 64-bit compare-and-swap; the old value lands in the local SGE.
    CmpSwap {
        /// The peer's u64: 8-byte aligned, the rkey with `REMOTE_ATOMIC`.
        remote: RemoteAddr,
        /// The value the peer's u64 must hold for the swap to happen.
        compare: u64,
        /// Written to the peer's u64 if it held `compare`.
        swap: u64,
    },
    /// Bind a type 2 memory window (the new rkey is `rkey`).
    BindMw {
        /// The type 2 window to bind.
        mw: MwId,
        /// New rkey: the window's rkey with a new low byte (`ibv_inc_rkey`).
        rkey: u32,
        /// The MR range the window covers and the remote rights it grants.
        bind: MwBind,
    },
    /// Invalidate a local memory window by rkey.
    LocalInv {
        /// The rkey of the local type 2 window; refused from then on.
        rkey: u32,
    },
}

impl SendOp {
    /// The completion opcode this request reports.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => {
                WcOpcode::Send
            }
            SendOp::Write { .. } | SendOp::WriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::Read { .. } => WcOpcode::RdmaRead,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
            SendOp::CmpSwap { .. } => WcOpcode::CompSwap,
            SendOp::BindMw { .. } => WcOpcode::BindMw,
            SendOp::LocalInv { .. } => WcOpcode::LocalInv,
        }
    }

    /// The remote buffer the request targets, if it is one-sided.
    pub fn remote(&self) -> Option<RemoteAddr> {
        match *self {
            SendOp::Write { remote }
            | SendOp::WriteWithImm { remote, .. }
            | SendOp::Read { remote }
            | SendOp::FetchAdd { remote, .. }
            | SendOp::CmpSwap { remote, .. } => Some(remote),
            _ => None,
        }
    }
}

/// A send-queue work request (`ibv_send_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's cookie, returned in the completion.
    pub wr_id: u64,
    /// What the request does, with its remote target if it is one-sided.
    pub op: SendOp,
    /// Local memory: the gather list (SEND/WRITE) or scatter list (READ/atomics).
    pub sgl: SgeList,
    /// Generate a completion on success (errors always complete).
    pub signaled: bool,
    /// Ask the peer to raise a solicited event.
    pub solicited: bool,
    /// Wait for prior READs/atomics before executing (`IBV_SEND_FENCE`).
    pub fence: bool,
}

impl SendWr {
    /// A signaled request with the given SGEs (an [`Sge`], an array, a
    /// `Vec` or an [`SgeList`]).
    pub fn new(wr_id: u64, op: SendOp, sgl: impl Into<SgeList>) -> SendWr {
        SendWr {
            wr_id,
            op,
            sgl: sgl.into(),
            signaled: true,
            solicited: false,
            fence: false,
        }
    }

    /// Total bytes of the SGE list.
    pub fn sgl_len(&self) -> u64 {
        self.sgl.total_len()
    }

    /// The checks every provider makes when this request is posted as
    /// number `posted` of its batch: at most `max_sge` SGEs, and an atomic
    /// has exactly one 8-byte SGE.
    pub fn check(&self, max_sge: u32, posted: usize) -> Result<(), PostError> {
        check_sges(self.sgl.len(), max_sge, posted)?;
        if matches!(self.op, SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. })
            && (self.sgl.len() != 1 || self.sgl[0].length != 8)
        {
            return Err(PostError::InvalidArgument {
                reason: "atomics need exactly one 8-byte SGE".into(),
                posted,
            });
        }
        Ok(())
    }
}

impl RecvWr {
    /// A receive `wr_id` into the given SGEs (an [`Sge`], an array, a `Vec`
    /// or an [`SgeList`]).
    pub fn new(wr_id: u64, sgl: impl Into<SgeList>) -> RecvWr {
        RecvWr {
            wr_id,
            sgl: sgl.into(),
        }
    }

    /// The check every provider makes when this receive is posted as number
    /// `posted` of its batch: at most `max_sge` SGEs.
    pub fn check(&self, max_sge: u32, posted: usize) -> Result<(), PostError> {
        check_sges(self.sgl.len(), max_sge, posted)
    }
}

fn check_sges(n: usize, max_sge: u32, posted: usize) -> Result<(), PostError> {
    if n > max_sge as usize {
        return Err(PostError::InvalidArgument {
            reason: format!("{n} SGEs > max_sge {max_sge}"),
            posted,
        });
    }
    Ok(())
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    /// Caller's cookie, returned in the receive completion.
    pub wr_id: u64,
    /// Where the incoming message lands, scattered in order; a message
    /// longer than their total fails with [`WcStatus::LocLenErr`].
    pub sgl: SgeList,
}

/// Status of a work completion (`ibv_wc_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcStatus {
    /// The operation completed (the responder acknowledged it).
    Success,
    /// Local length error (message larger than the receive buffer, ...).
    LocLenErr,
    /// Local QP operation error (e.g. the port went down).
    LocQpOpErr,
    /// Local protection error: an SGE not covered by a local MR with the right rights.
    LocProtErr,
    /// Flushed: the QP went to the error state before this request finished.
    /// The responder may or may not have executed it.
    WrFlushErr,
    /// Memory window bind error.
    MwBindErr,
    /// The responder rejected the request as invalid (e.g. bad invalidate).
    RemInvReqErr,
    /// The responder refused access: bad rkey, rights or bounds.
    RemAccessErr,
    /// The responder hit an error executing the operation.
    RemOpErr,
    /// The transport retry count was exceeded: no acknowledgement arrived.
    RetryExcErr,
    /// The receiver-not-ready retry count was exceeded.
    RnrRetryExcErr,
    /// Any other failure.
    GeneralErr,
}

impl WcStatus {
    /// Whether this is a success.
    pub fn is_ok(self) -> bool {
        self == WcStatus::Success
    }

    /// The `ibv_wc_status_str` name.
    pub fn name(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory bind operation error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::GeneralErr => "general error",
        }
    }
}

/// Completion opcode (`ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND (any flavour) completed.
    Send,
    /// A WRITE completed.
    RdmaWrite,
    /// A READ completed.
    RdmaRead,
    /// A compare-and-swap completed.
    CompSwap,
    /// A fetch-and-add completed.
    FetchAdd,
    /// A memory-window bind completed.
    BindMw,
    /// A local invalidate completed.
    LocalInv,
    /// A receive consumed by a SEND.
    Recv,
    /// A receive consumed by a WRITE_WITH_IMM.
    RecvRdmaWithImm,
}

/// A work completion (`ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The `wr_id` of the request or receive this completes.
    pub wr_id: u64,
    /// `Success`, or why not. After any other status the QP is in
    /// [`QpState::Err`]; a `WrFlushErr` request may or may not have been
    /// executed by the responder.
    pub status: WcStatus,
    /// What completed. For a send-queue request, the request's opcode
    /// ([`SendOp::wc_opcode`]) whatever the status; for a receive, `Recv`
    /// or `RecvRdmaWithImm` on success and always `Recv` on failure (a
    /// flushed receive consumed no message).
    pub opcode: WcOpcode,
    /// The QP the request belonged to.
    pub qp: crate::handles::QpId,
    /// Bytes received: for a successful receive the message's length (for
    /// `RecvRdmaWithImm`, the bytes the WRITE placed); 0 when `status` is
    /// not `Success`. On send-queue completions providers differ, so
    /// callers do not rely on it there.
    pub byte_len: u32,
    /// Immediate data, if the message carried some.
    pub imm: Option<u32>,
    /// rkey invalidated by a SEND_WITH_INV.
    pub invalidated_rkey: Option<u32>,
}

/// Capacities of a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpCaps {
    /// Send requests outstanding at most; a post beyond it fails with
    /// `QueueFull`.
    pub max_send_wr: u32,
    /// Receives posted at most, as for `max_send_wr` (ignored with an SRQ).
    pub max_recv_wr: u32,
    /// SGEs per send request at most ([`SendWr::check`]).
    pub max_send_sge: u32,
    /// SGEs per receive at most ([`RecvWr::check`]).
    pub max_recv_sge: u32,
}

impl Default for QpCaps {
    fn default() -> QpCaps {
        QpCaps {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
        }
    }
}

/// Attributes to create an RC QP with (`ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpInit {
    /// CQ for send completions.
    pub send_cq: CqId,
    /// CQ for receive completions.
    pub recv_cq: CqId,
    /// Shared receive queue, if receives come from one.
    pub srq: Option<SrqId>,
    /// Queue depths and SGE limits.
    pub caps: QpCaps,
    /// Signal every send request regardless of its `signaled` flag.
    pub sq_sig_all: bool,
}

/// QP state (`ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Created, not usable.
    Reset,
    /// Receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue error.
    Sqe,
    /// Error: every posted request completes with a flush error.
    Err,
}

/// Attributes of a shared receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SrqInit {
    /// Receives the SRQ holds at most; a post beyond it fails with
    /// `QueueFull`.
    pub max_wr: u32,
    /// SGEs per receive at most ([`RecvWr::check`]).
    pub max_sge: u32,
}

/// A registered memory region as the caller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrInfo {
    /// The handle to deregister it (and bind windows in it) with.
    pub id: MrId,
    /// First virtual address covered.
    pub addr: u64,
    /// Bytes covered.
    pub length: u64,
    /// The key an [`Sge`] names to use this range locally.
    pub lkey: u32,
    /// The key a peer names in a [`RemoteAddr`] to reach this range;
    /// refused once the MR is deregistered or its device has gone.
    pub rkey: u32,
    /// Rights granted.
    pub access: Access,
}

/// An allocated memory window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MwInfo {
    /// The handle to bind and free it with.
    pub id: MwId,
    /// Current rkey (changes on every bind).
    pub rkey: u32,
    /// How it is bound and invalidated.
    pub kind: MwType,
}

/// Connection parameters of an RC connection (`rdma_conn_param`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnParams {
    /// Transport retries before RETRY_EXC_ERR (0..=7).
    pub retry_count: u8,
    /// RNR retries before RNR_RETRY_EXC_ERR (0..=7; 7 = forever).
    pub rnr_retry_count: u8,
    /// Local ACK timeout exponent: 4.096 us * 2^timeout (IB spec).
    pub ack_timeout: u8,
}

impl Default for ConnParams {
    fn default() -> ConnParams {
        ConnParams {
            retry_count: 7,
            rnr_retry_count: 7,
            ack_timeout: 14,
        }
    }
}

impl ConnParams {
    /// The local ACK timeout as a duration.
    pub fn ack_timeout_duration(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(4096u64 << self.ack_timeout.min(31))
    }
}

/// Asynchronous events on a device context (`ibv_async_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// The device failed; the context is dead (`IBV_EVENT_DEVICE_FATAL`).
    DeviceFatal,
    /// The port went down.
    PortErr,
    /// The port came up.
    PortActive,
    /// The port's GID table changed (e.g. the netdev went away).
    GidChange,
    /// A QP entered the error state on its own.
    QpFatal(crate::handles::QpId),
    /// The last WQE of an SRQ-attached QP in error was consumed.
    QpLastWqeReached(crate::handles::QpId),
    /// A CQ overran: more completions were queued than its depth.
    CqErr(CqId),
}
