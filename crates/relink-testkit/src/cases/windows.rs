//! Memory windows: type 2 (BIND_MW work request, LOCAL_INV, SEND_WITH_INV)
//! and type 1 (`bind_mw`, unbind with length 0).

use relink_fabric::{
    Access, MwBind, MwInfo, MwType, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcStatus,
};

use super::expect_error_then_flush;
use crate::check::{assert_wc_ok, inc_rkey, pattern};
use crate::harness::Harness;
use crate::pair::{connect_pair, Pair, PairOpts};
use crate::rig::{report_deviation, Quirk, Rig, Side};

/// Offset of the window in the target's memory.
const WIN_OFF: usize = 4096;
/// Length of the window.
const WIN_LEN: usize = 4096;

fn window_bind(pair: &Pair) -> MwBind {
    let tgt = &pair.target;
    MwBind {
        mr: tgt.mr.id,
        addr: tgt.mr.addr + WIN_OFF as u64,
        length: WIN_LEN as u64,
        access: Access::REMOTE_WRITE | Access::REMOTE_READ,
    }
}

/// The remote address of byte `offset` of the window, through `rkey`.
fn in_window(pair: &Pair, offset: usize, rkey: u32) -> RemoteAddr {
    RemoteAddr {
        addr: pair.target.mr.addr + (WIN_OFF + offset) as u64,
        rkey,
    }
}

/// Allocate a type 2 window at the target and bind it over
/// `[WIN_OFF, WIN_OFF+WIN_LEN)` with a BIND_MW request; returns the rkey.
#[track_caller]
fn bind_type2(h: &mut Harness<'_>, pair: &mut Pair, wr_id: u64) -> (MwInfo, u32) {
    let mw = pair.target.alloc_mw(h, MwType::Type2);
    let rkey = inc_rkey(mw.rkey);
    let bind = window_bind(pair);
    let tgt = &pair.target;
    tgt.post_send(
        h,
        &[SendWr::new(
            wr_id,
            SendOp::BindMw {
                mw: mw.id,
                rkey,
                bind,
            },
            Vec::new(),
        )],
    );
    let deadline = h.deadline(Side::Target);
    let wc = h.wait_completions(Side::Target, tgt.send_cq, 1, deadline);
    assert_wc_ok(&wc[0], wr_id, WcOpcode::BindMw);
    (mw, rkey)
}

/// Allocate a type 1 window at the target and bind it with `bind_mw`;
/// returns the window and the rkey `bind_mw` gave.
#[track_caller]
fn bind_type1(h: &mut Harness<'_>, pair: &mut Pair, wr_id: u64) -> (MwInfo, u32) {
    let mw = pair.target.alloc_mw(h, MwType::Type1);
    let bind = window_bind(pair);
    let tgt = &pair.target;
    let rkey = h
        .host(Side::Target)
        .bind_mw(tgt.qp, mw.id, wr_id, bind)
        .unwrap_or_else(|e| panic!("bind_mw on the target host: {e}"));
    let deadline = h.deadline(Side::Target);
    let wc = h.wait_completions(Side::Target, tgt.send_cq, 1, deadline);
    assert_wc_ok(&wc[0], wr_id, WcOpcode::BindMw);
    (mw, rkey)
}

/// WRITE 256 bytes through the window at `offset` and READ them back.
#[track_caller]
fn write_and_read_through(h: &mut Harness<'_>, pair: &Pair, offset: usize, rkey: u32, seed: u64) {
    let (ini, tgt) = (&pair.initiator, &pair.target);
    let payload = pattern(seed, 256);
    ini.mem.write(0, &payload).expect("in bounds");
    let remote = in_window(pair, offset, rkey);
    ini.post_send(
        h,
        &[
            SendWr::new(seed, SendOp::Write { remote }, vec![ini.sge(0, 256)]),
            SendWr::new(seed + 1, SendOp::Read { remote }, vec![ini.sge(1024, 256)]),
        ],
    );
    let deadline = h.deadline(Side::Initiator);
    let wcs = h.wait_completions(Side::Initiator, ini.send_cq, 2, deadline);
    assert_wc_ok(&wcs[0], seed, WcOpcode::RdmaWrite);
    assert_wc_ok(&wcs[1], seed + 1, WcOpcode::RdmaRead);
    assert_eq!(
        tgt.mem.read_vec(WIN_OFF + offset, 256).expect("in bounds"),
        payload,
        "a WRITE through the window must land in the window"
    );
    assert_eq!(ini.mem.read_vec(1024, 256).expect("in bounds"), payload);
}

/// A WRITE that starts inside the window and runs past its end is refused
/// and writes nothing.
#[track_caller]
/// A WRITE with an rkey that no longer names a window fails with
/// `RemAccessErr` (and flushes what follows).
fn write_with_dead_rkey(h: &mut Harness<'_>, pair: &Pair, rkey: u32) {
    let bad = SendWr::new(
        100,
        SendOp::Write {
            remote: in_window(pair, 0, rkey),
        },
        vec![pair.initiator.sge(0, 64)],
    );
    expect_error_then_flush(h, pair, bad, WcStatus::RemAccessErr);
}

fn write_past_window(h: &mut Harness<'_>, pair: &Pair, rkey: u32) {
    let rig = h.rig();
    if rig.has_quirk(Quirk::MwBoundsCheckedAgainstMr) {
        report_deviation(
            rig,
            "mw bounds",
            "windows are range-checked against their MR: a WRITE past a window's end is not refused (not checked)",
        );
        return;
    }
    pair.initiator.mem.write(0, &[0xEE; 64]).expect("in bounds");
    let bad = SendWr::new(
        100,
        SendOp::Write {
            remote: in_window(pair, WIN_LEN - 32, rkey),
        },
        vec![pair.initiator.sge(0, 64)],
    );
    expect_error_then_flush(h, pair, bad, WcStatus::RemAccessErr);
    assert!(
        pair.target
            .mem
            .read_vec(WIN_OFF + WIN_LEN - 32, 64)
            .expect("in bounds")
            .iter()
            .all(|b| *b == 0),
        "a WRITE past the window must not write anything"
    );
}

/// A type 2 window bound with BIND_MW (rkey = `ibv_inc_rkey` of the
/// window's) grants WRITE and READ inside it; a WRITE past its end fails
/// with `RemAccessErr`.
pub fn mw_type2_bind_and_bounds(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let mut pair = connect_pair(&mut h, &PairOpts::default());
    let (_mw, rkey) = bind_type2(&mut h, &mut pair, 77);
    write_and_read_through(&mut h, &pair, 100, rkey, 10);
    write_past_window(&mut h, &pair, rkey);
    pair.teardown(&h);
}

/// LOCAL_INV of a bound type 2 window: afterwards a WRITE with its rkey
/// fails with `RemAccessErr`.
pub fn mw_type2_local_invalidate(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let mut pair = connect_pair(&mut h, &PairOpts::default());
    let (_mw, rkey) = bind_type2(&mut h, &mut pair, 77);
    write_and_read_through(&mut h, &pair, 0, rkey, 20);
    let tgt = &pair.target;
    tgt.post_send(
        &h,
        &[SendWr::new(78, SendOp::LocalInv { rkey }, Vec::new())],
    );
    let deadline = h.deadline(Side::Target);
    let wc = h.wait_completions(Side::Target, tgt.send_cq, 1, deadline);
    assert_wc_ok(&wc[0], 78, WcOpcode::LocalInv);
    write_with_dead_rkey(&mut h, &pair, rkey);
    pair.teardown(&h);
}

/// A type 1 window bound with `bind_mw` (completion on the send CQ) grants
/// WRITE and READ inside it; a WRITE past its end fails with
/// `RemAccessErr`.
pub fn mw_type1_bind_and_bounds(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let mut pair = connect_pair(&mut h, &PairOpts::default());
    let (_mw, rkey) = bind_type1(&mut h, &mut pair, 79);
    write_and_read_through(&mut h, &pair, 100, rkey, 30);
    write_past_window(&mut h, &pair, rkey);
    pair.teardown(&h);
}

/// Rebinding a type 1 window with length 0 unbinds it: the old rkey then
/// fails with `RemAccessErr`.
pub fn mw_type1_unbind(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let mut pair = connect_pair(&mut h, &PairOpts::default());
    let (mw, rkey) = bind_type1(&mut h, &mut pair, 79);
    write_and_read_through(&mut h, &pair, 0, rkey, 40);
    let tgt = &pair.target;
    let unbind = MwBind {
        mr: tgt.mr.id,
        addr: tgt.mr.addr,
        length: 0,
        access: Access::empty(),
    };
    let new_rkey = h
        .host(Side::Target)
        .bind_mw(tgt.qp, mw.id, 80, unbind)
        .unwrap_or_else(|e| panic!("bind_mw(length 0) on the target host: {e}"));
    assert_ne!(new_rkey, rkey, "an unbind must change the window's rkey");
    let deadline = h.deadline(Side::Target);
    let wc = h.wait_completions(Side::Target, tgt.send_cq, 1, deadline);
    assert_wc_ok(&wc[0], 80, WcOpcode::BindMw);
    write_with_dead_rkey(&mut h, &pair, rkey);
    pair.teardown(&h);
}

/// SEND_WITH_INV invalidates a type 2 window at the peer: the receive
/// completion reports `invalidated_rkey`, and a WRITE with that rkey then
/// fails with `RemAccessErr`.
pub fn send_with_invalidate(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let mut pair = connect_pair(&mut h, &PairOpts::default());
    let (_mw, rkey) = bind_type2(&mut h, &mut pair, 77);
    write_and_read_through(&mut h, &pair, 0, rkey, 50);
    let (ini, tgt) = (&pair.initiator, &pair.target);
    tgt.post_recv(
        &h,
        &[RecvWr {
            wr_id: 51,
            sgl: tgt.sge(32_768, 64).into(),
        }],
    );
    ini.post_send(
        &h,
        &[SendWr::new(
            52,
            SendOp::SendWithInv { rkey },
            vec![ini.sge(0, 32)],
        )],
    );
    let deadline = h.deadline(Side::Target);
    let rwc = h.wait_completions(Side::Target, tgt.recv_cq, 1, deadline);
    assert_wc_ok(&rwc[0], 51, WcOpcode::Recv);
    assert_eq!(rwc[0].byte_len, 32, "byte_len in {:?}", rwc[0]);
    assert_eq!(
        rwc[0].invalidated_rkey,
        Some(rkey),
        "the receive of a SEND_WITH_INV must report the invalidated rkey"
    );
    let deadline = h.deadline(Side::Initiator);
    let swc = h.wait_completions(Side::Initiator, ini.send_cq, 1, deadline);
    assert_wc_ok(&swc[0], 52, WcOpcode::Send);
    write_with_dead_rkey(&mut h, &pair, rkey);
    pair.teardown(&h);
}
