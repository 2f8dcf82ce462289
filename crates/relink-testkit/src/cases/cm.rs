//! Connection management: private data limits, reject, no listener,
//! disconnect.

use relink_fabric::{
    CmError, CmEventKind, QpState, RecvWr, RejectReason, WcStatus, MAX_ACCEPT_PRIVATE_DATA,
    MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA,
};

use crate::check::{assert_private_data, assert_wc_status, pattern};
use crate::harness::Harness;
use crate::pair::{
    assert_no_objects, connect_pair, destroy_id, listen, open_end, resolve, target_addr,
    wait_connect_request, Pair, PairOpts,
};
use crate::rig::{Rig, Side};

#[track_caller]
fn expect_too_long(r: Result<(), CmError>, len: usize, max: usize, what: &str) {
    match r {
        Err(CmError::PrivateDataTooLong { len: l, max: m }) if l == len && m == max => {}
        other => panic!(
            "{what} with {len} bytes of private data must fail with \
             PrivateDataTooLong {{ len: {len}, max: {max} }}, got {other:?}"
        ),
    }
}

/// Connect refuses 57 bytes of private data (`PrivateDataTooLong`) and
/// delivers 56 in `ConnectRequest`; accept refuses 197 and delivers 196 in
/// the initiator's `Established`. A refused call leaves the id usable.
pub fn private_data_limits(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let opts = PairOpts::default();
    let dst = target_addr(&h);
    let listener = listen(&mut h, dst);
    let id = resolve(&mut h, Side::Initiator, dst);
    let initiator = open_end(&h, Side::Initiator, id, &opts);
    let ini_host = h.host(Side::Initiator);

    let too_long = pattern(57, MAX_CONNECT_PRIVATE_DATA + 1);
    expect_too_long(
        ini_host.cm_connect(id, initiator.qp, opts.params, &too_long),
        MAX_CONNECT_PRIVATE_DATA + 1,
        MAX_CONNECT_PRIVATE_DATA,
        "cm_connect",
    );
    let connect_data = pattern(56, MAX_CONNECT_PRIVATE_DATA);
    ini_host
        .cm_connect(id, initiator.qp, opts.params, &connect_data)
        .unwrap_or_else(|e| panic!("cm_connect with 56 bytes of private data: {e}"));

    let req = wait_connect_request(&mut h, listener);
    assert_private_data(&req.private_data, &connect_data, "ConnectRequest");
    let target = open_end(&h, Side::Target, req.id, &opts);
    let tgt_host = h.host(Side::Target);
    let too_long = pattern(197, MAX_ACCEPT_PRIVATE_DATA + 1);
    expect_too_long(
        tgt_host.cm_accept(req.id, target.qp, &too_long),
        MAX_ACCEPT_PRIVATE_DATA + 1,
        MAX_ACCEPT_PRIVATE_DATA,
        "cm_accept",
    );
    let accept_data = pattern(196, MAX_ACCEPT_PRIVATE_DATA);
    tgt_host
        .cm_accept(req.id, target.qp, &accept_data)
        .unwrap_or_else(|e| panic!("cm_accept with 196 bytes of private data: {e}"));

    let deadline = h.deadline(Side::Initiator);
    match h.next_cm(Side::Initiator, id, deadline) {
        CmEventKind::Established { private_data } => {
            assert_private_data(&private_data, &accept_data, "Established (initiator)");
        }
        other => panic!("the initiator got {other:?}, not Established"),
    }
    let deadline = h.deadline(Side::Target);
    match h.next_cm(Side::Target, req.id, deadline) {
        CmEventKind::Established { .. } => {}
        other => panic!("the target got {other:?}, not Established"),
    }
    Pair {
        initiator,
        target,
        listener: Some(listener),
    }
    .teardown(&h);
}

/// Reject refuses 149 bytes of private data; a reject with private data
/// reaches the initiator as `Rejected { reason: Consumer, private_data }`.
pub fn reject_with_private_data(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let opts = PairOpts::default();
    let dst = target_addr(&h);
    let listener = listen(&mut h, dst);
    let id = resolve(&mut h, Side::Initiator, dst);
    let initiator = open_end(&h, Side::Initiator, id, &opts);
    h.host(Side::Initiator)
        .cm_connect(id, initiator.qp, opts.params, b"may I?")
        .unwrap_or_else(|e| panic!("cm_connect: {e}"));

    let req = wait_connect_request(&mut h, listener);
    assert_private_data(&req.private_data, b"may I?", "ConnectRequest");
    let tgt_host = h.host(Side::Target);
    let too_long = pattern(149, MAX_REJECT_PRIVATE_DATA + 1);
    expect_too_long(
        tgt_host.cm_reject(req.id, &too_long),
        MAX_REJECT_PRIVATE_DATA + 1,
        MAX_REJECT_PRIVATE_DATA,
        "cm_reject",
    );
    let why = b"relink-testkit says no".to_vec();
    tgt_host
        .cm_reject(req.id, &why)
        .unwrap_or_else(|e| panic!("cm_reject: {e}"));

    let deadline = h.deadline(Side::Initiator);
    match h.next_cm(Side::Initiator, id, deadline) {
        CmEventKind::Rejected {
            reason,
            private_data,
        } => {
            assert_eq!(
                reason,
                RejectReason::Consumer,
                "a cm_reject is a consumer reject"
            );
            assert_private_data(&private_data, &why, "Rejected");
        }
        other => panic!("the initiator got {other:?}, not Rejected"),
    }
    destroy_id(&h, Side::Target, req.id);
    destroy_id(&h, Side::Target, listener);
    initiator.teardown(&h);
    assert_no_objects(&h);
}

/// Connecting to a port nobody listens on ends in `Rejected { reason:
/// NoListener }` or `Unreachable`.
pub fn connect_without_listener(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let opts = PairOpts::default();
    let dst = target_addr(&h);
    let id = resolve(&mut h, Side::Initiator, dst);
    let initiator = open_end(&h, Side::Initiator, id, &opts);
    h.host(Side::Initiator)
        .cm_connect(id, initiator.qp, opts.params, b"anyone there?")
        .unwrap_or_else(|e| panic!("cm_connect: {e}"));
    // Unreachable only comes after the CM's request timeouts: allow longer.
    let deadline = h.deadline_after(Side::Initiator, rig.settle_time() * 8);
    match h.next_cm(Side::Initiator, id, deadline) {
        CmEventKind::Rejected {
            reason: RejectReason::NoListener,
            ..
        }
        | CmEventKind::Unreachable => {}
        other => panic!(
            "connecting to {dst} where nobody listens: want Rejected(NoListener) or \
             Unreachable, got {other:?}"
        ),
    }
    initiator.teardown(&h);
    assert_no_objects(&h);
}

/// `cm_disconnect` on the initiator: the target gets `Disconnected`, and
/// the receives posted on both QPs flush (both QPs end in `Err`).
pub fn disconnect_flushes_peer(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let pair = connect_pair(&mut h, &PairOpts::default());
    let (ini, tgt) = (&pair.initiator, &pair.target);
    let tgt_recvs: Vec<u64> = (100..104).collect();
    tgt.post_recv(
        &h,
        &tgt_recvs
            .iter()
            .enumerate()
            .map(|(i, wr_id)| RecvWr {
                wr_id: *wr_id,
                sgl: tgt.sge(i * 256, 256).into(),
            })
            .collect::<Vec<_>>(),
    );
    let ini_recvs: Vec<u64> = (200..202).collect();
    ini.post_recv(
        &h,
        &ini_recvs
            .iter()
            .enumerate()
            .map(|(i, wr_id)| RecvWr {
                wr_id: *wr_id,
                sgl: ini.sge(i * 256, 256).into(),
            })
            .collect::<Vec<_>>(),
    );

    h.host(Side::Initiator)
        .cm_disconnect(ini.id)
        .unwrap_or_else(|e| panic!("cm_disconnect: {e}"));
    let deadline = h.deadline(Side::Target);
    h.wait_cm(Side::Target, tgt.id, deadline, |k| {
        *k == CmEventKind::Disconnected
    });

    let deadline = h.deadline(Side::Target);
    let wcs = h.wait_completions(Side::Target, tgt.recv_cq, tgt_recvs.len(), deadline);
    for (wc, wr_id) in wcs.iter().zip(&tgt_recvs) {
        assert_wc_status(wc, *wr_id, WcStatus::WrFlushErr);
    }
    let deadline = h.deadline(Side::Initiator);
    let wcs = h.wait_completions(Side::Initiator, ini.recv_cq, ini_recvs.len(), deadline);
    for (wc, wr_id) in wcs.iter().zip(&ini_recvs) {
        assert_wc_status(wc, *wr_id, WcStatus::WrFlushErr);
    }
    for end in [ini, tgt] {
        assert_eq!(
            h.host(end.side).qp_state(end.qp),
            Ok(QpState::Err),
            "the {} QP must be in Err after the disconnect",
            end.side
        );
    }
    pair.teardown(&h);
}
