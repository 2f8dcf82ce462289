//! The conformance cases. Each is a `pub fn name(rig: &dyn Rig)` that
//! panics on a violation and tears down everything it created (checking
//! that both hosts end with no objects). [`crate::CASES`] lists them all.

mod access;
mod cm;
mod data;
mod faults;
mod notify;
mod readiness;
mod srq;
mod windows;

pub use access::{
    local_protection_error, reg_mr_requires_local_write, remote_bad_rkey,
    remote_read_without_right, remote_write_out_of_bounds, remote_write_without_right,
};
pub use cm::{
    connect_without_listener, disconnect_flushes_peer, private_data_limits,
    reject_with_private_data,
};
pub use data::{
    atomics, atomics_in_flight, large_transfers, rnr_retry_then_delivery, send_recv_ordering,
    write_then_read, write_with_imm,
};
pub use faults::{
    flush_on_device_removal, readd_keeps_name_and_guid,
    removal_reaches_bound_listener_not_wildcard, replacement_new_guid_same_address,
    reset_reports_fatal_removed_added, reset_then_reconnect,
};
pub use notify::cq_notification;
pub use readiness::event_fd_readiness;
pub use srq::srq_receives;
pub use windows::{
    mw_type1_bind_and_bounds, mw_type1_unbind, mw_type2_bind_and_bounds, mw_type2_local_invalidate,
    send_with_invalidate,
};

use relink_fabric::{QpState, RecvWr, SendOp, SendWr, WcOpcode, WcStatus};

use crate::check::{assert_wc_ok, assert_wc_status, pattern};
use crate::harness::Harness;
use crate::pair::Pair;
use crate::rig::Side;

/// Post `bad` on the initiator followed (in the same batch) by a WRITE and a
/// SEND: `bad` completes with `status`, the two behind it with
/// `WrFlushErr`, the QP is in `Err`, and a request posted afterwards is
/// accepted and flushed too.
#[track_caller]
pub(crate) fn expect_error_then_flush(
    h: &mut Harness<'_>,
    pair: &Pair,
    bad: SendWr,
    status: WcStatus,
) {
    expect_one_of_then_flush(h, pair, bad, &[status]);
}

/// [`expect_error_then_flush`] where `bad` may complete with any of
/// `statuses` (known driver deviations).
#[track_caller]
pub(crate) fn expect_one_of_then_flush(
    h: &mut Harness<'_>,
    pair: &Pair,
    bad: SendWr,
    statuses: &[WcStatus],
) {
    let (ini, tgt) = (&pair.initiator, &pair.target);
    let bad_id = bad.wr_id;
    let batch = [
        bad,
        SendWr::new(
            9001,
            SendOp::Write {
                remote: tgt.remote(0),
            },
            vec![ini.sge(0, 64)],
        ),
        SendWr::new(9002, SendOp::Send, vec![ini.sge(0, 64)]),
    ];
    ini.post_send(h, &batch);
    let deadline = h.deadline(Side::Initiator);
    let wcs = h.wait_completions(Side::Initiator, ini.send_cq, 3, deadline);
    assert_eq!(wcs[0].wr_id, bad_id, "first completion: {:?}", wcs[0]);
    assert!(
        statuses.contains(&wcs[0].status),
        "{:?}: want one of {statuses:?}",
        wcs[0]
    );
    assert_wc_status(&wcs[1], 9001, WcStatus::WrFlushErr);
    assert_wc_status(&wcs[2], 9002, WcStatus::WrFlushErr);
    assert_eq!(
        h.host(Side::Initiator).qp_state(ini.qp),
        Ok(QpState::Err),
        "after an error completion the requester's QP is in Err"
    );
    ini.post_send(h, &[SendWr::new(9003, SendOp::Send, vec![ini.sge(0, 64)])]);
    let deadline = h.deadline(Side::Initiator);
    let wcs = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
    assert_wc_status(&wcs[0], 9003, WcStatus::WrFlushErr);
}

/// One SEND of 128 bytes from the initiator into a fresh receive at the
/// target; both complete successfully and the bytes arrive.
#[track_caller]
pub(crate) fn send_one(h: &mut Harness<'_>, pair: &Pair, seed: u64) {
    let (ini, tgt) = (&pair.initiator, &pair.target);
    tgt.post_recv(
        h,
        &[RecvWr {
            wr_id: seed,
            sgl: tgt.sge(0, 256).into(),
        }],
    );
    let data = pattern(seed, 128);
    ini.mem.write(0, &data).expect("in bounds");
    ini.post_send(h, &[SendWr::new(seed, SendOp::Send, vec![ini.sge(0, 128)])]);
    let deadline = h.deadline(Side::Target);
    let rwc = h.wait_completions(Side::Target, tgt.recv_cq, 1, deadline);
    assert_wc_ok(&rwc[0], seed, WcOpcode::Recv);
    assert_eq!(rwc[0].byte_len, 128, "byte_len in {:?}", rwc[0]);
    assert_eq!(tgt.mem.read_vec(0, 128).expect("in bounds"), data);
    let deadline = h.deadline(Side::Initiator);
    let swc = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
    assert_wc_ok(&swc[0], seed, WcOpcode::Send);
}
