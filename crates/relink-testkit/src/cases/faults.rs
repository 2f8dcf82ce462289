//! Device loss: flushes, CM events and dead handles on removal; listeners;
//! the identity of a device that comes back or is replaced; reconnecting
//! after a reset.

use relink_fabric::{
    Access, CmEvent, CmEventKind, CreateError, DeviceEventKind, Event, MwType, OpenError, QpCaps,
    QpInit, RecvWr, SendOp, SendWr, WcStatus,
};

use super::{expect_error_then_flush, send_one};
use crate::check::{assert_success_then_flush, assert_wc_ok, assert_wc_status, pattern};
use crate::harness::Harness;
use crate::pair::{
    assert_no_objects, connect_pair, connect_via, destroy_id, listen, resolve, target_addr,
    wildcard_for, End, PairOpts,
};
use crate::rig::{fault_applied, Rig, Side};

/// Creates on a context/PD whose device is gone fail with `DeviceLost`.
#[track_caller]
fn assert_creates_fail(h: &Harness<'_>, end: &End) {
    let host = h.host(end.side);
    let lost = CreateError::DeviceLost;
    assert_eq!(
        host.alloc_pd(end.ctx),
        Err(lost.clone()),
        "alloc_pd on a lost context"
    );
    assert_eq!(
        host.create_cq(end.ctx, 16),
        Err(lost.clone()),
        "create_cq on a lost context"
    );
    assert_eq!(
        host.reg_mr(end.pd, &end.mem, end.mem.addr(), 4096, Access::LOCAL_WRITE),
        Err(lost.clone()),
        "reg_mr on a lost PD"
    );
    assert_eq!(
        host.alloc_mw(end.pd, MwType::Type2),
        Err(lost.clone()),
        "alloc_mw on a lost PD"
    );
    assert_eq!(
        host.create_qp(
            end.pd,
            QpInit {
                send_cq: end.send_cq,
                recv_cq: end.recv_cq,
                srq: None,
                caps: QpCaps::default(),
                sq_sig_all: false,
            },
        ),
        Err(lost),
        "create_qp on a lost PD"
    );
}

/// Opening a device registration that is gone fails with `NoDevice`.
#[track_caller]
fn assert_open_fails(h: &Harness<'_>, side: Side, id: &relink_fabric::DeviceId) {
    match h.host(side).open_device(id) {
        Err(OpenError::NoDevice(_)) => {}
        other => panic!(
            "open_device({id}) of a gone registration must fail with NoDevice, got {other:?}"
        ),
    }
}

/// Remove the initiator's device right after posting 8 WRITEs and 8 SENDs:
/// every request completes exactly once, in order, successes (acknowledged
/// before the loss) then `WrFlushErr`; posted receives flush; every CM id
/// on the device gets `DeviceRemoval`; the peer gets `Disconnected` and its
/// unconsumed receives flush; creates on the old context/PD fail with
/// `DeviceLost`, the old registration cannot be opened, and every verbs
/// destroy reports `AlreadyReleased`.
pub fn flush_on_device_removal(rig: &dyn Rig) {
    const CASE: &str = "flush_on_device_removal";
    const PAIRS: usize = 8;
    const WLEN: usize = 2048;
    const SLEN: usize = 512;
    const SLOT: usize = 1024;
    const RECV_OFF: usize = 32_768;
    let mut h = Harness::new(rig);
    let mut pair = connect_pair(&mut h, &PairOpts::default());
    let dst = target_addr(&h);
    let extra = resolve(&mut h, Side::Initiator, dst);
    assert_eq!(
        h.host(Side::Initiator).cm_device(extra).as_ref(),
        Some(&pair.initiator.device),
        "a second id resolved to the same peer binds to the same device"
    );
    pair.initiator.extra_ids.push(extra);
    let (ini, tgt) = (&pair.initiator, &pair.target);

    let tgt_recvs: Vec<u64> = (0..PAIRS as u64).map(|j| 1000 + j).collect();
    tgt.post_recv(
        &h,
        &(0..PAIRS)
            .map(|j| RecvWr {
                wr_id: tgt_recvs[j],
                sgl: tgt.sge(RECV_OFF + j * SLOT, SLOT as u32).into(),
            })
            .collect::<Vec<_>>(),
    );
    let ini_recvs: Vec<u64> = (2000..2003).collect();
    ini.post_recv(
        &h,
        &ini_recvs
            .iter()
            .enumerate()
            .map(|(i, wr_id)| RecvWr {
                wr_id: *wr_id,
                sgl: ini.sge(40_000 + i * 256, 256).into(),
            })
            .collect::<Vec<_>>(),
    );
    // wr_id k: even = WRITE of pattern(100+k) to tgt offset (k/2)*WLEN,
    // odd = SEND of pattern(100+k) into target receive k/2.
    let mut wrs = Vec::new();
    for k in 0..2 * PAIRS {
        let j = k / 2;
        if k % 2 == 0 {
            let off = j * WLEN;
            ini.mem
                .write(off, &pattern(100 + k as u64, WLEN))
                .expect("in bounds");
            wrs.push(SendWr::new(
                k as u64,
                SendOp::Write {
                    remote: tgt.remote(off),
                },
                vec![ini.sge(off, WLEN as u32)],
            ));
        } else {
            let off = PAIRS * WLEN + j * SLEN;
            ini.mem
                .write(off, &pattern(100 + k as u64, SLEN))
                .expect("in bounds");
            wrs.push(SendWr::new(
                k as u64,
                SendOp::Send,
                vec![ini.sge(off, SLEN as u32)],
            ));
        }
    }
    ini.post_send(&h, &wrs);
    if !fault_applied(rig, CASE, rig.remove_device(Side::Initiator)) {
        pair.teardown(&h);
        return;
    }

    // The requester: exactly one completion per request, in order.
    let wr_ids: Vec<u64> = (0..2 * PAIRS as u64).collect();
    let deadline = h.deadline(Side::Initiator);
    let swcs = h.wait_completions(Side::Initiator, ini.send_cq, wr_ids.len(), deadline);
    let acked = assert_success_then_flush(&swcs, &wr_ids);
    let deadline = h.deadline(Side::Initiator);
    let rwcs = h.wait_completions(Side::Initiator, ini.recv_cq, ini_recvs.len(), deadline);
    for (wc, wr_id) in rwcs.iter().zip(&ini_recvs) {
        assert_wc_status(wc, *wr_id, WcStatus::WrFlushErr);
    }
    let more = h.collect_completions(Side::Initiator, ini.send_cq, rig.quiet_time());
    assert!(
        more.is_empty(),
        "completions after every request completed once: {more:?}"
    );
    let more = h.poll_cq(Side::Initiator, ini.recv_cq, usize::MAX);
    assert!(
        more.is_empty(),
        "receive completions after every receive completed once: {more:?}"
    );

    // The CM: every id on the device, and the peer.
    for id in [ini.id, extra] {
        let deadline = h.deadline(Side::Initiator);
        h.wait_cm(Side::Initiator, id, deadline, |k| {
            *k == CmEventKind::DeviceRemoval
        });
    }
    let deadline = h.deadline(Side::Target);
    h.wait_cm(Side::Target, tgt.id, deadline, |k| {
        *k == CmEventKind::Disconnected
    });

    // Dead handles.
    assert!(
        !h.host(Side::Initiator)
            .devices()
            .iter()
            .any(|d| d.id == ini.device),
        "a removed device must not be listed"
    );
    assert_open_fails(&h, Side::Initiator, &ini.device);
    assert_creates_fail(&h, ini);

    // The responder: receives complete exactly once; every SEND the
    // initiator saw acknowledged was delivered, every acknowledged WRITE
    // placed.
    let deadline = h.deadline(Side::Target);
    let twcs = h.wait_completions(Side::Target, tgt.recv_cq, PAIRS, deadline);
    let delivered = assert_success_then_flush(&twcs, &tgt_recvs);
    for (j, wc) in twcs[..delivered].iter().enumerate() {
        assert_wc_ok(wc, tgt_recvs[j], relink_fabric::WcOpcode::Recv);
        assert_eq!(wc.byte_len as usize, SLEN, "byte_len in {wc:?}");
        assert_eq!(
            tgt.mem
                .read_vec(RECV_OFF + j * SLOT, SLEN)
                .expect("in bounds"),
            pattern(100 + 2 * j as u64 + 1, SLEN),
            "payload of receive {j}"
        );
    }
    let sends_acked = swcs[..acked].iter().filter(|wc| wc.wr_id % 2 == 1).count();
    assert!(
        delivered >= sends_acked,
        "{sends_acked} SENDs were acknowledged but only {delivered} delivered"
    );
    for wc in swcs[..acked].iter().filter(|wc| wc.wr_id % 2 == 0) {
        let j = wc.wr_id as usize / 2;
        assert_eq!(
            tgt.mem.read_vec(j * WLEN, WLEN).expect("in bounds"),
            pattern(100 + wc.wr_id, WLEN),
            "an acknowledged WRITE ({}) must have placed its data",
            wc.wr_id
        );
    }

    pair.initiator.mark_lost();
    pair.teardown(&h);
}

/// Removing the target's device sends `DeviceRemoval` to a listener bound
/// to its address but not to a wildcard listener, which accepts a
/// connection once the device is back.
pub fn removal_reaches_bound_listener_not_wildcard(rig: &dyn Rig) {
    const CASE: &str = "removal_reaches_bound_listener_not_wildcard";
    let side = Side::Target;
    let mut h = Harness::new(rig);
    let host = h.host(side);
    let before = h
        .device(side)
        .unwrap_or_else(|| panic!("no device owns the {side} address {}", rig.addr(side)));

    let dst = target_addr(&h);
    let bound = listen(&mut h, dst);
    assert_eq!(
        host.cm_device(bound).as_ref(),
        Some(&before.id),
        "a listener bound to a device's address is bound to that device"
    );
    if !fault_applied(rig, CASE, rig.remove_device(side)) {
        destroy_id(&h, side, bound);
        assert_no_objects(&h);
        return;
    }
    let deadline = h.deadline(side);
    h.wait_cm(side, bound, deadline, |k| *k == CmEventKind::DeviceRemoval);
    destroy_id(&h, side, bound);
    if !fault_applied(rig, CASE, rig.add_device_back(side)) {
        assert_no_objects(&h);
        return;
    }
    let back = h.wait_device_added(side, &before.id);

    let wildcard = std::net::SocketAddr::new(wildcard_for(rig.addr(side)), rig.port());
    let wild = listen(&mut h, wildcard);
    assert_eq!(
        host.cm_device(wild),
        None,
        "a wildcard listener is bound to no device"
    );
    if !fault_applied(rig, CASE, rig.remove_device(side)) {
        destroy_id(&h, side, wild);
        assert_no_objects(&h);
        return;
    }
    let deadline = h.deadline(side);
    h.wait_device_event(side, deadline, |d| {
        d.kind == DeviceEventKind::Removed && d.device.id == back.id
    });
    h.expect_no_event(side, rig.quiet_time(), |ev| {
        matches!(ev, Event::Cm(CmEvent { id, kind: CmEventKind::DeviceRemoval }) if *id == wild)
    });
    if !fault_applied(rig, CASE, rig.add_device_back(side)) {
        destroy_id(&h, side, wild);
        assert_no_objects(&h);
        return;
    }
    h.wait_device_added(side, &back.id);
    let pair = connect_via(&mut h, wild, &PairOpts::default());
    send_one(&mut h, &pair, 1);
    pair.teardown(&h);
}

/// A device removed and added back keeps its name and GUID and shows a new
/// generation; the old registration cannot be opened, the new one can.
pub fn readd_keeps_name_and_guid(rig: &dyn Rig) {
    const CASE: &str = "readd_keeps_name_and_guid";
    let side = Side::Initiator;
    let mut h = Harness::new(rig);
    let host = h.host(side);
    let before = h
        .device(side)
        .unwrap_or_else(|| panic!("no device owns the {side} address {}", rig.addr(side)));
    assert_eq!(
        before.id.name,
        rig.device_name(side),
        "the rig's device name must match the device owning its address"
    );
    if !fault_applied(rig, CASE, rig.remove_device(side)) {
        return;
    }
    let deadline = h.deadline(side);
    h.wait_device_event(side, deadline, |d| {
        d.kind == DeviceEventKind::Removed && d.device.id == before.id
    });
    assert!(
        host.devices().iter().all(|d| d.id != before.id),
        "a removed device must not be listed"
    );
    assert_open_fails(&h, side, &before.id);
    if !fault_applied(rig, CASE, rig.add_device_back(side)) {
        return;
    }
    let added = h.wait_device_added(side, &before.id);
    let after = h.device(side).expect("the device is listed again");
    assert_eq!(after.id, added.id, "the listed device is the one announced");
    assert_eq!(
        after.id.name, before.id.name,
        "a re-added device keeps its name"
    );
    assert_eq!(
        after.node_guid, before.node_guid,
        "a re-added device keeps its GUID"
    );
    assert!(
        after.id.generation > before.id.generation,
        "a re-added device shows a new, larger generation: {} -> {}",
        before.id,
        after.id
    );
    assert_eq!(rig.device_name(side), after.id.name);
    assert_open_fails(&h, side, &before.id);
    let ctx = host
        .open_device(&after.id)
        .unwrap_or_else(|e| panic!("open_device({}) after re-add: {e}", after.id));
    assert_eq!(
        host.close_device(ctx),
        Ok(relink_fabric::Destroyed::Released)
    );
    assert_no_objects(&h);
}

/// A reset shows `Fatal`, `Removed` and `Added` in that order on the device
/// event stream; the device keeps name and GUID with a new generation; an
/// open context is dead (creates fail with `DeviceLost`, destroys report
/// `AlreadyReleased`).
pub fn reset_reports_fatal_removed_added(rig: &dyn Rig) {
    const CASE: &str = "reset_reports_fatal_removed_added";
    let side = Side::Target;
    let mut h = Harness::new(rig);
    let host = h.host(side);
    let addr = rig.addr(side);
    let before = h
        .device(side)
        .unwrap_or_else(|| panic!("no device owns the {side} address {addr}"));
    let ctx = host.open_device(&before.id).expect("open_device");
    let pd = host.alloc_pd(ctx).expect("alloc_pd");
    if !fault_applied(rig, CASE, rig.reset_device(side)) {
        assert_eq!(host.dealloc_pd(pd), Ok(relink_fabric::Destroyed::Released));
        assert_eq!(
            host.close_device(ctx),
            Ok(relink_fabric::Destroyed::Released)
        );
        assert_no_objects(&h);
        return;
    }
    let mut kinds = Vec::new();
    let after = loop {
        let deadline = h.deadline(side);
        let ev = h.wait_device_event(side, deadline, |d| {
            d.device.id == before.id || (d.kind == DeviceEventKind::Added && d.device.owns(addr))
        });
        kinds.push(ev.kind.clone());
        if ev.kind == DeviceEventKind::Added && ev.device.id != before.id {
            break ev.device;
        }
    };
    let fatal = kinds.iter().position(|k| *k == DeviceEventKind::Fatal);
    let removed = kinds.iter().position(|k| *k == DeviceEventKind::Removed);
    assert!(
        matches!((fatal, removed), (Some(f), Some(r)) if f < r),
        "a reset must show Fatal, then Removed, then Added; got {kinds:?}"
    );
    assert_eq!(
        after.id.name, before.id.name,
        "a reset device keeps its name"
    );
    assert_eq!(
        after.node_guid, before.node_guid,
        "a reset device keeps its GUID"
    );
    assert!(
        after.id.generation > before.id.generation,
        "a reset device shows a new, larger generation: {} -> {}",
        before.id,
        after.id
    );
    assert_eq!(h.device(side).map(|d| d.id), Some(after.id.clone()));
    assert_open_fails(&h, side, &before.id);
    assert_eq!(
        host.alloc_pd(ctx),
        Err(CreateError::DeviceLost),
        "alloc_pd on a context of the reset device"
    );
    assert_eq!(
        host.dealloc_pd(pd),
        Ok(relink_fabric::Destroyed::AlreadyReleased)
    );
    assert_eq!(
        host.close_device(ctx),
        Ok(relink_fabric::Destroyed::AlreadyReleased)
    );
    assert_no_objects(&h);
}

/// A replacement device shows a new GUID and the same address (and a new
/// identity); the old registration cannot be opened; a connection to the
/// replacement works.
pub fn replacement_new_guid_same_address(rig: &dyn Rig) {
    const CASE: &str = "replacement_new_guid_same_address";
    let side = Side::Target;
    let mut h = Harness::new(rig);
    let addr = rig.addr(side);
    let before = h
        .device(side)
        .unwrap_or_else(|| panic!("no device owns the {side} address {addr}"));
    if !fault_applied(rig, CASE, rig.replace_device(side)) {
        return;
    }
    let deadline = h.deadline(side);
    h.wait_device_event(side, deadline, |d| {
        d.kind == DeviceEventKind::Removed && d.device.id == before.id
    });
    let added = h.wait_device_added(side, &before.id);
    let after = h.device(side).expect("a device owns the address again");
    assert_eq!(after.id, added.id, "the listed device is the one announced");
    assert_ne!(
        after.id, before.id,
        "a replacement is a new device instance"
    );
    assert_ne!(
        after.node_guid, before.node_guid,
        "a replacement has a new GUID"
    );
    assert!(after.owns(addr), "a replacement owns the same address");
    if after.id.name == before.id.name {
        assert!(
            after.id.generation > before.id.generation,
            "a replacement with the same name shows a larger generation: {} -> {}",
            before.id,
            after.id
        );
    }
    assert_eq!(
        rig.device_name(side),
        after.id.name,
        "the rig reports the replacement's name"
    );
    assert_open_fails(&h, side, &before.id);

    let pair = connect_pair(&mut h, &PairOpts::default());
    assert_eq!(
        pair.target.device, after.id,
        "the connection uses the replacement"
    );
    send_one(&mut h, &pair, 3);
    pair.teardown(&h);
}

/// After a reset of the target's device the old connection's ids get
/// `DeviceRemoval` (connection and bound listener); connecting again works
/// and traffic flows; an rkey from before the reset is refused with
/// `RemAccessErr`.
pub fn reset_then_reconnect(rig: &dyn Rig) {
    const CASE: &str = "reset_then_reconnect";
    let side = Side::Target;
    let mut h = Harness::new(rig);
    let mut pair = connect_pair(&mut h, &PairOpts::default());
    let payload = pattern(9, 256);
    pair.initiator.mem.write(0, &payload).expect("in bounds");
    pair.initiator.post_send(
        &h,
        &[SendWr::new(
            1,
            SendOp::Write {
                remote: pair.target.remote(0),
            },
            vec![pair.initiator.sge(0, 256)],
        )],
    );
    let deadline = h.deadline(Side::Initiator);
    let wc = h.wait_completions(Side::Initiator, pair.initiator.send_cq, 1, deadline);
    assert_wc_ok(&wc[0], 1, relink_fabric::WcOpcode::RdmaWrite);

    let stale = pair.target.remote(0);
    // Keep the old memory alive so that its addresses cannot be handed out
    // again: only the rkey's validity decides.
    let old_mem = pair.target.mem.clone();
    let before = pair.target.device.clone();
    if !fault_applied(rig, CASE, rig.reset_device(side)) {
        pair.teardown(&h);
        return;
    }
    let listener = pair.listener.expect("connect_pair listens");
    for id in [pair.target.id, listener] {
        let deadline = h.deadline(side);
        h.wait_cm(side, id, deadline, |k| *k == CmEventKind::DeviceRemoval);
    }
    h.wait_device_added(side, &before);
    pair.target.mark_lost();
    pair.teardown(&h);

    let pair = connect_pair(&mut h, &PairOpts::default());
    assert_ne!(
        pair.target.device, before,
        "the new connection uses the new registration"
    );
    send_one(&mut h, &pair, 4);
    let bad = SendWr::new(
        100,
        SendOp::Write { remote: stale },
        vec![pair.initiator.sge(0, 64)],
    );
    expect_error_then_flush(&mut h, &pair, bad, WcStatus::RemAccessErr);
    drop(old_mem);
    pair.teardown(&h);
}
