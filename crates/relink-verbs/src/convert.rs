//! Pure conversions between verbs' numeric ABI values and the provider
//! interface's types: completion status and opcode, QP state, reject
//! reasons, access flags. The numbers are rdma-core's (stable kernel/user
//! ABI); with the `rdma` feature a test checks them against the generated
//! bindings.

#![forbid(unsafe_code)]

use relink_fabric::{Access, QpState, RejectReason, WcOpcode, WcStatus};

/// `enum ibv_wc_status` values [`status_from_raw`] names (any other is
/// `GeneralErr`).
#[allow(missing_docs)]
pub mod wc_status {
    pub const SUCCESS: u32 = 0;
    pub const LOC_LEN_ERR: u32 = 1;
    pub const LOC_QP_OP_ERR: u32 = 2;
    pub const LOC_PROT_ERR: u32 = 4;
    pub const WR_FLUSH_ERR: u32 = 5;
    pub const MW_BIND_ERR: u32 = 6;
    pub const LOC_ACCESS_ERR: u32 = 8;
    pub const REM_INV_REQ_ERR: u32 = 9;
    pub const REM_ACCESS_ERR: u32 = 10;
    pub const REM_OP_ERR: u32 = 11;
    pub const RETRY_EXC_ERR: u32 = 12;
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
}

/// `enum ibv_wc_opcode` values.
#[allow(missing_docs)]
pub mod wc_opcode {
    pub const SEND: u32 = 0;
    pub const RDMA_WRITE: u32 = 1;
    pub const RDMA_READ: u32 = 2;
    pub const COMP_SWAP: u32 = 3;
    pub const FETCH_ADD: u32 = 4;
    pub const BIND_MW: u32 = 5;
    pub const LOCAL_INV: u32 = 6;
    /// Receive completions have this bit set.
    pub const RECV: u32 = 1 << 7;
    pub const RECV_RDMA_WITH_IMM: u32 = RECV + 1;
}

/// `enum ibv_qp_state` values.
#[allow(missing_docs)]
pub mod qp_state {
    pub const RESET: u32 = 0;
    pub const INIT: u32 = 1;
    pub const RTR: u32 = 2;
    pub const RTS: u32 = 3;
    pub const SQD: u32 = 4;
    pub const SQE: u32 = 5;
    pub const ERR: u32 = 6;
}

/// `enum ibv_access_flags` values relink uses.
#[allow(missing_docs)]
pub mod access {
    pub const LOCAL_WRITE: u32 = 1;
    pub const REMOTE_WRITE: u32 = 1 << 1;
    pub const REMOTE_READ: u32 = 1 << 2;
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
    pub const MW_BIND: u32 = 1 << 4;
}

/// A raw `ibv_wc_status` as the interface's status: `LOC_ACCESS_ERR`
/// reads as `LocProtErr`, a value not named here as `GeneralErr`.
pub fn status_from_raw(raw: u32) -> WcStatus {
    use wc_status::*;
    match raw {
        SUCCESS => WcStatus::Success,
        LOC_LEN_ERR => WcStatus::LocLenErr,
        LOC_QP_OP_ERR => WcStatus::LocQpOpErr,
        LOC_PROT_ERR | LOC_ACCESS_ERR => WcStatus::LocProtErr,
        WR_FLUSH_ERR => WcStatus::WrFlushErr,
        MW_BIND_ERR => WcStatus::MwBindErr,
        REM_INV_REQ_ERR => WcStatus::RemInvReqErr,
        REM_ACCESS_ERR => WcStatus::RemAccessErr,
        REM_OP_ERR => WcStatus::RemOpErr,
        RETRY_EXC_ERR => WcStatus::RetryExcErr,
        RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
        _ => WcStatus::GeneralErr,
    }
}

/// The completion opcode, if the value is one relink knows.
pub fn opcode_from_raw(raw: u32) -> Option<WcOpcode> {
    use wc_opcode::*;
    Some(match raw {
        SEND => WcOpcode::Send,
        RDMA_WRITE => WcOpcode::RdmaWrite,
        RDMA_READ => WcOpcode::RdmaRead,
        COMP_SWAP => WcOpcode::CompSwap,
        FETCH_ADD => WcOpcode::FetchAdd,
        BIND_MW => WcOpcode::BindMw,
        LOCAL_INV => WcOpcode::LocalInv,
        RECV => WcOpcode::Recv,
        RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
        _ => return None,
    })
}

/// Whether a raw completion opcode is a receive's.
pub fn is_recv_opcode(raw: u32) -> bool {
    raw & wc_opcode::RECV != 0
}

/// Whether a completion opcode is a receive's.
pub fn is_recv(op: WcOpcode) -> bool {
    matches!(op, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
}

/// A raw `ibv_qp_state` as the interface's state: `SQD` (send queue
/// drained) reads as `Rts`, an unknown value as `Err`.
pub fn qp_state_from_raw(raw: u32) -> QpState {
    use qp_state::*;
    match raw {
        RESET => QpState::Reset,
        INIT => QpState::Init,
        RTR => QpState::Rtr,
        RTS | SQD => QpState::Rts,
        SQE => QpState::Sqe,
        _ => QpState::Err,
    }
}

/// Verbs access flags for `Access`.
pub fn access_to_raw(a: Access) -> u32 {
    let mut r = 0;
    for (flag, bit) in [
        (Access::LOCAL_WRITE, access::LOCAL_WRITE),
        (Access::REMOTE_WRITE, access::REMOTE_WRITE),
        (Access::REMOTE_READ, access::REMOTE_READ),
        (Access::REMOTE_ATOMIC, access::REMOTE_ATOMIC),
        (Access::MW_BIND, access::MW_BIND),
    ] {
        if a.contains(flag) {
            r |= bit;
        }
    }
    r
}

/// The IB CM reject reason in a `RDMA_CM_EVENT_REJECTED`'s status (IBTA
/// table 112; iWARP reports `-ECONNREFUSED`).
pub fn reject_reason(status: i32) -> RejectReason {
    match status {
        // No QP / no EEC / no resources available.
        1..=3 => RejectReason::NoResources,
        // Invalid service ID: nobody listens on that port.
        8 => RejectReason::NoListener,
        // iWARP: connection refused.
        -111 => RejectReason::NoListener,
        // 28 = consumer reject, and anything else.
        _ => RejectReason::Consumer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        assert_eq!(status_from_raw(wc_status::SUCCESS), WcStatus::Success);
        assert_eq!(
            status_from_raw(wc_status::WR_FLUSH_ERR),
            WcStatus::WrFlushErr
        );
        assert_eq!(
            status_from_raw(wc_status::REM_ACCESS_ERR),
            WcStatus::RemAccessErr
        );
        assert_eq!(
            status_from_raw(wc_status::RNR_RETRY_EXC_ERR),
            WcStatus::RnrRetryExcErr
        );
        assert_eq!(
            status_from_raw(wc_status::LOC_ACCESS_ERR),
            WcStatus::LocProtErr
        );
        assert_eq!(status_from_raw(21), WcStatus::GeneralErr);
    }

    #[test]
    fn opcodes() {
        assert_eq!(
            opcode_from_raw(wc_opcode::RDMA_READ),
            Some(WcOpcode::RdmaRead)
        );
        assert_eq!(opcode_from_raw(wc_opcode::RECV), Some(WcOpcode::Recv));
        assert_eq!(
            opcode_from_raw(wc_opcode::RECV_RDMA_WITH_IMM),
            Some(WcOpcode::RecvRdmaWithImm)
        );
        assert_eq!(opcode_from_raw(99), None);
        assert!(is_recv_opcode(wc_opcode::RECV_RDMA_WITH_IMM));
        assert!(!is_recv_opcode(wc_opcode::FETCH_ADD));
    }

    #[test]
    fn states_access_reject() {
        assert_eq!(qp_state_from_raw(qp_state::RTS), QpState::Rts);
        assert_eq!(qp_state_from_raw(qp_state::ERR), QpState::Err);
        assert_eq!(qp_state_from_raw(77), QpState::Err);
        assert_eq!(access_to_raw(Access::empty()), 0);
        assert_eq!(
            access_to_raw(Access::LOCAL_WRITE | Access::REMOTE_ATOMIC | Access::MW_BIND),
            1 | 8 | 16
        );
        assert_eq!(reject_reason(28), RejectReason::Consumer);
        assert_eq!(reject_reason(8), RejectReason::NoListener);
        assert_eq!(reject_reason(2), RejectReason::NoResources);
    }

    #[cfg(feature = "rdma")]
    #[test]
    fn constants_match_the_bindings() {
        use relink_verbs_sys as sys;
        assert_eq!(
            [
                wc_status::SUCCESS,
                wc_status::LOC_LEN_ERR,
                wc_status::LOC_QP_OP_ERR
            ],
            [
                sys::IBV_WC_SUCCESS,
                sys::IBV_WC_LOC_LEN_ERR,
                sys::IBV_WC_LOC_QP_OP_ERR
            ]
        );
        assert_eq!(
            [
                wc_status::LOC_PROT_ERR,
                wc_status::WR_FLUSH_ERR,
                wc_status::MW_BIND_ERR
            ],
            [
                sys::IBV_WC_LOC_PROT_ERR,
                sys::IBV_WC_WR_FLUSH_ERR,
                sys::IBV_WC_MW_BIND_ERR
            ]
        );
        assert_eq!(
            [
                wc_status::LOC_ACCESS_ERR,
                wc_status::REM_INV_REQ_ERR,
                wc_status::REM_ACCESS_ERR
            ],
            [
                sys::IBV_WC_LOC_ACCESS_ERR,
                sys::IBV_WC_REM_INV_REQ_ERR,
                sys::IBV_WC_REM_ACCESS_ERR
            ]
        );
        assert_eq!(
            [
                wc_status::REM_OP_ERR,
                wc_status::RETRY_EXC_ERR,
                wc_status::RNR_RETRY_EXC_ERR
            ],
            [
                sys::IBV_WC_REM_OP_ERR,
                sys::IBV_WC_RETRY_EXC_ERR,
                sys::IBV_WC_RNR_RETRY_EXC_ERR
            ]
        );
        assert_eq!(
            [
                wc_opcode::SEND,
                wc_opcode::RDMA_WRITE,
                wc_opcode::RDMA_READ,
                wc_opcode::COMP_SWAP
            ],
            [
                sys::IBV_WC_SEND,
                sys::IBV_WC_RDMA_WRITE,
                sys::IBV_WC_RDMA_READ,
                sys::IBV_WC_COMP_SWAP
            ]
        );
        assert_eq!(
            [
                wc_opcode::FETCH_ADD,
                wc_opcode::BIND_MW,
                wc_opcode::LOCAL_INV
            ],
            [
                sys::IBV_WC_FETCH_ADD,
                sys::IBV_WC_BIND_MW,
                sys::IBV_WC_LOCAL_INV
            ]
        );
        assert_eq!(
            [wc_opcode::RECV, wc_opcode::RECV_RDMA_WITH_IMM],
            [sys::IBV_WC_RECV, sys::IBV_WC_RECV_RDMA_WITH_IMM]
        );
        assert_eq!(
            [
                qp_state::RESET,
                qp_state::INIT,
                qp_state::RTR,
                qp_state::RTS
            ],
            [
                sys::IBV_QPS_RESET,
                sys::IBV_QPS_INIT,
                sys::IBV_QPS_RTR,
                sys::IBV_QPS_RTS
            ]
        );
        assert_eq!(
            [qp_state::SQD, qp_state::SQE, qp_state::ERR],
            [sys::IBV_QPS_SQD, sys::IBV_QPS_SQE, sys::IBV_QPS_ERR]
        );
        assert_eq!(
            [
                access::LOCAL_WRITE,
                access::REMOTE_WRITE,
                access::REMOTE_READ
            ],
            [
                sys::IBV_ACCESS_LOCAL_WRITE,
                sys::IBV_ACCESS_REMOTE_WRITE,
                sys::IBV_ACCESS_REMOTE_READ
            ]
        );
        assert_eq!(
            [access::REMOTE_ATOMIC, access::MW_BIND],
            [sys::IBV_ACCESS_REMOTE_ATOMIC, sys::IBV_ACCESS_MW_BIND]
        );
    }
}
