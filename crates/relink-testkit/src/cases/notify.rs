//! CQ notification: `req_notify_cq` arms a CQ for one `Event::CqReady`,
//! for any completion or only for solicited and unsuccessful ones.

use relink_fabric::{CqId, Event, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcStatus};

use crate::check::{assert_wc_ok, assert_wc_status, pattern, unused_key};
use crate::harness::Harness;
use crate::pair::{connect_pair, End, Pair, PairOpts};
use crate::rig::{Rig, Side};

/// Receives the target posts up front (more than the case consumes).
const RECVS: usize = 16;
/// Bytes per receive slot.
const SLOT: usize = 256;

/// Whether `ev` is a `CqReady` event (for any CQ).
fn is_cq_ready(ev: &Event) -> bool {
    matches!(ev, Event::CqReady(_))
}

/// Arm `cq` of `end`'s host; panics if that fails.
#[track_caller]
fn arm(h: &Harness<'_>, end: &End, cq: CqId, solicited_only: bool) {
    if let Err(e) = h.host(end.side).req_notify_cq(cq, solicited_only) {
        panic!(
            "req_notify_cq({cq}, solicited_only: {solicited_only}) on the {} host: {e}",
            end.side
        );
    }
}

/// Wait for exactly one `CqReady(cq)` on `side`: one must arrive before the
/// deadline, and no second one may be buffered right after it.
#[track_caller]
fn expect_one_ready(h: &mut Harness<'_>, side: Side, cq: CqId, what: &str) {
    let deadline = h.deadline(side);
    if h.try_wait_event(side, deadline, |ev| *ev == Event::CqReady(cq))
        .is_none()
    {
        panic!(
            "{what}: no CqReady({cq}) on the {side} host by {deadline}; \
             unconsumed events there: {:#?}",
            h.buffered(side)
        );
    }
    let more = h.take_events(side, |ev| *ev == Event::CqReady(cq));
    assert!(
        more.is_empty(),
        "{what}: one arming must produce one CqReady({cq}), got {} more: {more:?}",
        more.len()
    );
}

/// No `CqReady` on either host: watch `side` for the quiet time, then look
/// at what the other host has buffered.
#[track_caller]
fn expect_no_ready(h: &mut Harness<'_>, side: Side, what: &str) {
    let quiet = h.rig().quiet_time();
    h.expect_no_event(side, quiet, is_cq_ready);
    let other = h.take_events(side.peer(), is_cq_ready);
    assert!(
        other.is_empty(),
        "{what}: unexpected CqReady on the {} host: {other:?}",
        side.peer()
    );
}

/// One SEND of a distinct payload from the initiator, `solicited` or not,
/// into the target's receive number `n`; both sides complete successfully
/// and the bytes arrive.
#[track_caller]
fn send_one(h: &mut Harness<'_>, pair: &Pair, n: usize, solicited: bool) {
    let (ini, tgt) = (&pair.initiator, &pair.target);
    let len = 64 + n;
    let data = pattern(500 + n as u64, len);
    ini.mem.write(n * SLOT, &data).expect("in bounds");
    let mut wr = SendWr::new(n as u64, SendOp::Send, vec![ini.sge(n * SLOT, len as u32)]);
    wr.solicited = solicited;
    ini.post_send(h, &[wr]);
    let deadline = h.deadline(Side::Target);
    let rwc = h.wait_completions(Side::Target, tgt.recv_cq, 1, deadline);
    assert_wc_ok(&rwc[0], 100 + n as u64, WcOpcode::Recv);
    assert_eq!(rwc[0].byte_len as usize, len, "byte_len in {:?}", rwc[0]);
    assert_eq!(
        tgt.mem.read_vec(n * SLOT, len).expect("in bounds"),
        data,
        "receive {n}: payload"
    );
    let deadline = h.deadline(Side::Initiator);
    let swc = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
    assert_wc_ok(&swc[0], n as u64, WcOpcode::Send);
}

/// `req_notify_cq` is one-shot and honours `solicited_only`
/// (`ibv_req_notify_cq(3)`: with `solicited_only` an event comes only for a
/// receive completion of a message with the Solicited Event bit, or for an
/// unsuccessful completion; every successful send completion is
/// unsolicited):
/// - unarmed CQs never raise `CqReady`;
/// - armed for any completion, the next receive completion raises exactly
///   one `CqReady(cq)`; later completions raise none until the CQ is armed
///   again, and re-arming gives one more;
/// - armed `solicited_only`, an unsolicited SEND's receive completion does
///   not notify, a SEND with `solicited: true` does; the requester's send
///   CQ, also armed `solicited_only`, is not notified by either successful
///   send completion;
/// - an error completion notifies a `solicited_only` CQ: a WRITE with a bad
///   rkey (`RemAccessErr`) notifies the initiator's send CQ once, and the
///   flushed receives of the now failed QP notify its receive CQ once; a
///   re-armed `solicited_only` send CQ is notified by a flushed SEND.
pub fn cq_notification(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let pair = connect_pair(&mut h, &PairOpts::default());
    let (ini, tgt) = (&pair.initiator, &pair.target);
    let recvs: Vec<RecvWr> = (0..RECVS)
        .map(|i| RecvWr {
            wr_id: 100 + i as u64,
            sgl: tgt.sge(i * SLOT, SLOT as u32).into(),
        })
        .collect();
    tgt.post_recv(&h, &recvs);

    // Nothing armed: completions come, events do not.
    send_one(&mut h, &pair, 0, false);
    expect_no_ready(&mut h, Side::Target, "no CQ armed");

    // Armed for any completion: one event, then none until re-armed.
    arm(&h, tgt, tgt.recv_cq, false);
    send_one(&mut h, &pair, 1, false);
    expect_one_ready(
        &mut h,
        Side::Target,
        tgt.recv_cq,
        "receive CQ armed for any completion",
    );
    send_one(&mut h, &pair, 2, false);
    send_one(&mut h, &pair, 3, true);
    expect_no_ready(
        &mut h,
        Side::Target,
        "completions after the one that consumed the arming",
    );
    arm(&h, tgt, tgt.recv_cq, false);
    send_one(&mut h, &pair, 4, false);
    expect_one_ready(&mut h, Side::Target, tgt.recv_cq, "receive CQ re-armed");

    // Solicited only: an unsolicited SEND does not notify, a solicited one
    // does, and successful send completions never do.
    arm(&h, tgt, tgt.recv_cq, true);
    arm(&h, ini, ini.send_cq, true);
    send_one(&mut h, &pair, 5, false);
    expect_no_ready(
        &mut h,
        Side::Target,
        "an unsolicited SEND into a CQ armed solicited_only",
    );
    send_one(&mut h, &pair, 6, true);
    expect_one_ready(
        &mut h,
        Side::Target,
        tgt.recv_cq,
        "a solicited SEND into a CQ armed solicited_only",
    );
    expect_no_ready(
        &mut h,
        Side::Initiator,
        "successful send completions on a send CQ armed solicited_only",
    );
    // IBV_SEND_SOLICITED is valid on RDMA WRITE with immediate too.
    arm(&h, tgt, tgt.recv_cq, true);
    let mut wr = SendWr::new(
        7,
        SendOp::WriteWithImm {
            remote: tgt.remote(7 * SLOT),
            imm: 0x50_1c,
        },
        vec![ini.sge(7 * SLOT, 32)],
    );
    wr.solicited = true;
    ini.post_send(&h, &[wr]);
    let deadline = h.deadline(Side::Target);
    let rwc = h.wait_completions(Side::Target, tgt.recv_cq, 1, deadline);
    assert_wc_ok(&rwc[0], 107, WcOpcode::RecvRdmaWithImm);
    assert_eq!(rwc[0].imm, Some(0x50_1c));
    let deadline = h.deadline(Side::Initiator);
    h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
    expect_one_ready(
        &mut h,
        Side::Target,
        tgt.recv_cq,
        "a solicited WRITE_WITH_IMM into a CQ armed solicited_only",
    );

    // Errors notify a solicited_only CQ: the send CQ is still armed; arm the
    // initiator's receive CQ too, with receives for the flush to complete.
    let ini_recvs = [300, 301];
    ini.post_recv(
        &h,
        &ini_recvs
            .iter()
            .enumerate()
            .map(|(i, wr_id)| RecvWr {
                wr_id: *wr_id,
                sgl: ini.sge(32_768 + i * SLOT, SLOT as u32).into(),
            })
            .collect::<Vec<_>>(),
    );
    arm(&h, ini, ini.recv_cq, true);
    let rkey = unused_key(&[tgt.mr.rkey, tgt.mr.lkey, ini.mr.rkey, ini.mr.lkey]);
    ini.post_send(
        &h,
        &[
            SendWr::new(
                20,
                SendOp::Write {
                    remote: RemoteAddr {
                        addr: tgt.mr.addr,
                        rkey,
                    },
                },
                vec![ini.sge(0, 64)],
            ),
            SendWr::new(21, SendOp::Send, vec![ini.sge(0, 64)]),
        ],
    );
    let deadline = h.deadline(Side::Initiator);
    let wcs = h.wait_completions(Side::Initiator, ini.send_cq, 2, deadline);
    assert_wc_status(&wcs[0], 20, WcStatus::RemAccessErr);
    assert_wc_status(&wcs[1], 21, WcStatus::WrFlushErr);
    expect_one_ready(
        &mut h,
        Side::Initiator,
        ini.send_cq,
        "an error completion on a send CQ armed solicited_only",
    );
    let deadline = h.deadline(Side::Initiator);
    let wcs = h.wait_completions(Side::Initiator, ini.recv_cq, ini_recvs.len(), deadline);
    for (wc, wr_id) in wcs.iter().zip(ini_recvs) {
        assert_wc_status(wc, wr_id, WcStatus::WrFlushErr);
    }
    expect_one_ready(
        &mut h,
        Side::Initiator,
        ini.recv_cq,
        "flushed receives on a receive CQ armed solicited_only",
    );
    ini.post_send(&h, &[SendWr::new(22, SendOp::Send, vec![ini.sge(0, 64)])]);
    let deadline = h.deadline(Side::Initiator);
    let wcs = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
    assert_wc_status(&wcs[0], 22, WcStatus::WrFlushErr);
    expect_no_ready(
        &mut h,
        Side::Initiator,
        "a flushed SEND after the arming was consumed",
    );
    arm(&h, ini, ini.send_cq, true);
    ini.post_send(&h, &[SendWr::new(23, SendOp::Send, vec![ini.sge(0, 64)])]);
    let deadline = h.deadline(Side::Initiator);
    let wcs = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
    assert_wc_status(&wcs[0], 23, WcStatus::WrFlushErr);
    expect_one_ready(
        &mut h,
        Side::Initiator,
        ini.send_cq,
        "a flushed SEND on a send CQ re-armed solicited_only",
    );
    pair.teardown(&h);
}
