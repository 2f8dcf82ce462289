//! Shared receive queues: receives posted to an SRQ feed the QP attached to
//! it, the QP's own receive queue is gone, and the SRQ outlives the QP.

use relink_fabric::{
    AsyncEvent, DestroyError, Event, PostError, QpState, RecvWr, SendOp, SendWr, SrqInit, WcOpcode,
};

use crate::check::{assert_wc_ok, pattern};
use crate::harness::Harness;
use crate::pair::{connect_pair, PairOpts};
use crate::rig::{Rig, Side};

/// Whether `ev` is a `QpLastWqeReached` event (for any QP).
fn is_last_wqe(ev: &Event) -> bool {
    matches!(
        ev,
        Event::Async {
            event: AsyncEvent::QpLastWqeReached(_),
            ..
        }
    )
}

/// The target's QP takes its receives from an SRQ
/// ([`PairOpts::target_srq`]):
/// - `post_recv` on the QP is refused with `InvalidArgument` (none posted);
/// - `destroy_srq` is refused with `Busy` while the QP exists (also once
///   the QP is in `Err`); teardown then destroys QP and SRQ in that order;
/// - receives posted with `post_srq_recv` (in two batches) are consumed by
///   SENDs in posting order: `wr_id`, `qp`, `byte_len`, `imm` and bytes;
/// - a SEND that finds the SRQ empty waits (RNR, retried forever) until a
///   receive is posted to the SRQ;
/// - when the QP goes to `Err`, `QpLastWqeReached(qp)` is reported once, on
///   the QP's context, and receives still in the SRQ are not flushed (they
///   belong to the SRQ, not to the QP).
pub fn srq_receives(rig: &dyn Rig) {
    const N: usize = 16;
    const SLOT: usize = 256;
    const LATE: usize = 8192;
    let mut h = Harness::new(rig);
    let opts = PairOpts {
        target_srq: Some(SrqInit {
            max_wr: 64,
            max_sge: 2,
        }),
        ..PairOpts::default()
    };
    // A decoy context opened first on the same device: an affiliated event
    // must not land on it.
    let device = h.device(Side::Target).expect("the target has a device").id;
    let decoy = h
        .host(Side::Target)
        .open_device(&device)
        .unwrap_or_else(|e| panic!("open a second context on {device}: {e}"));
    let pair = connect_pair(&mut h, &opts);
    let (ini, tgt) = (&pair.initiator, &pair.target);
    let srq = tgt
        .srq
        .expect("PairOpts::target_srq must give the target's end an SRQ");
    assert!(
        ini.srq.is_none(),
        "PairOpts::target_srq must not give the initiator an SRQ"
    );
    let tgt_host = h.host(Side::Target);

    match tgt_host.post_recv(
        tgt.qp,
        &[RecvWr {
            wr_id: 1,
            sgl: tgt.sge(0, 64).into(),
        }],
    ) {
        Err(PostError::InvalidArgument { posted: 0, .. }) => {}
        other => panic!(
            "post_recv on a QP attached to an SRQ must fail with InvalidArgument \
             (0 posted), got {other:?}"
        ),
    }
    match tgt_host.destroy_srq(srq) {
        Err(DestroyError::Busy(_)) => {}
        other => panic!("destroy_srq({srq}) while a QP uses it must fail with Busy, got {other:?}"),
    }

    let recvs: Vec<RecvWr> = (0..N)
        .map(|i| RecvWr {
            wr_id: 50_000 + i as u64,
            sgl: tgt.sge(i * SLOT, SLOT as u32).into(),
        })
        .collect();
    tgt.post_srq_recv(&h, &recvs[..N / 2]);
    tgt.post_srq_recv(&h, &recvs[N / 2..]);

    let (sends, expected) = ini.stage_sends(N, SLOT, 100, 53, |i| {
        (i % 2 == 1).then_some(0x5A0_0000 | i as u32)
    });
    ini.post_send(&h, &sends);

    let deadline = h.deadline(Side::Target);
    let rwcs = h.wait_completions(Side::Target, tgt.recv_cq, N, deadline);
    for (i, (wc, (len, imm, data))) in rwcs.iter().zip(&expected).enumerate() {
        assert_wc_ok(wc, 50_000 + i as u64, WcOpcode::Recv);
        assert_eq!(
            wc.qp, tgt.qp,
            "receive {i}: an SRQ receive completes on the QP that consumed it: {wc:?}"
        );
        assert_eq!(
            wc.byte_len as usize, *len,
            "receive {i}: byte_len in {wc:?}"
        );
        assert_eq!(wc.imm, *imm, "receive {i}: immediate data in {wc:?}");
        assert_eq!(
            tgt.mem.read_vec(i * SLOT, *len).expect("in bounds"),
            *data,
            "receive {i}: payload (SRQ receives must be consumed in posting order)"
        );
    }
    let deadline = h.deadline(Side::Initiator);
    let swcs = h.wait_completions(Side::Initiator, ini.send_cq, N, deadline);
    for (i, wc) in swcs.iter().enumerate() {
        assert_wc_ok(wc, i as u64, WcOpcode::Send);
    }

    // The SRQ is empty now: the next SEND must wait for a receive.
    let data = pattern(7, 100);
    ini.mem.write(0, &data).expect("in bounds");
    ini.post_send(
        &h,
        &[SendWr::new(N as u64, SendOp::Send, vec![ini.sge(0, 100)])],
    );
    let early = h.collect_completions(Side::Initiator, ini.send_cq, rig.quiet_time());
    assert!(
        early.is_empty(),
        "a SEND completed although the peer's SRQ was empty: {early:?}"
    );
    let early = h.poll_cq(Side::Target, tgt.recv_cq, usize::MAX);
    assert!(
        early.is_empty(),
        "a receive completed although the SRQ was empty: {early:?}"
    );
    tgt.post_srq_recv(
        &h,
        &[RecvWr {
            wr_id: 60_000,
            sgl: tgt.sge(LATE, 128).into(),
        }],
    );
    let deadline = h.deadline(Side::Target);
    let rwc = h.wait_completions(Side::Target, tgt.recv_cq, 1, deadline);
    assert_wc_ok(&rwc[0], 60_000, WcOpcode::Recv);
    assert_eq!(rwc[0].qp, tgt.qp, "wrong QP in {:?}", rwc[0]);
    assert_eq!(rwc[0].byte_len, 100, "byte_len in {:?}", rwc[0]);
    assert_eq!(tgt.mem.read_vec(LATE, 100).expect("in bounds"), data);
    let deadline = h.deadline(Side::Initiator);
    let swc = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
    assert_wc_ok(&swc[0], N as u64, WcOpcode::Send);

    // The QP goes to error with receives still in the SRQ.
    let early = h.take_events(Side::Target, is_last_wqe);
    assert!(
        early.is_empty(),
        "QpLastWqeReached reported while the QP was healthy: {early:?}"
    );
    tgt.post_srq_recv(
        &h,
        &(0..4)
            .map(|i| RecvWr {
                wr_id: 70_000 + i as u64,
                sgl: tgt.sge(LATE + 1024 + i * SLOT, SLOT as u32).into(),
            })
            .collect::<Vec<_>>(),
    );
    tgt_host
        .qp_to_error(tgt.qp)
        .unwrap_or_else(|e| panic!("qp_to_error({}) on the target host: {e}", tgt.qp));
    let deadline = h.deadline(Side::Target);
    let qp = tgt.qp;
    let ev = h.wait_event(
        Side::Target,
        deadline,
        |ev| matches!(ev, Event::Async { event: AsyncEvent::QpLastWqeReached(q), .. } if *q == qp),
    );
    let Event::Async { ctx, .. } = ev else {
        unreachable!("the predicate only accepts async events")
    };
    assert_eq!(
        ctx, tgt.ctx,
        "QpLastWqeReached({qp}) is an affiliated event: it belongs on the context the QP \
         was created on"
    );
    assert_eq!(
        tgt_host.qp_state(tgt.qp),
        Ok(QpState::Err),
        "after qp_to_error the QP is in Err"
    );
    let late = h.collect_completions(Side::Target, tgt.recv_cq, rig.quiet_time());
    assert!(
        late.is_empty(),
        "receives still in the SRQ must not be flushed when an attached QP goes to Err: {late:?}"
    );
    let again = h.take_events(Side::Target, is_last_wqe);
    assert!(
        again.is_empty(),
        "QpLastWqeReached must be reported once per QP: {again:?}"
    );
    match tgt_host.destroy_srq(srq) {
        Err(DestroyError::Busy(_)) => {}
        other => panic!(
            "destroy_srq({srq}) while a QP in Err still uses it must fail with Busy, \
             got {other:?}"
        ),
    }
    let closed = h
        .host(Side::Target)
        .close_device(decoy)
        .unwrap_or_else(|e| panic!("close the decoy context: {e}"));
    assert_eq!(closed, relink_fabric::Destroyed::Released);
    pair.teardown(&h);
}
