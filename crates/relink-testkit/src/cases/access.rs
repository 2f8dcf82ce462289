//! Protection: remote rights, bounds and keys (`RemAccessErr`), local keys
//! (`LocProtErr`), and the MR rights verbs refuses.

use relink_fabric::{Access, CreateError, RemoteAddr, SendOp, SendWr, Sge, WcStatus};

use super::{expect_error_then_flush, expect_one_of_then_flush};
use crate::check::unused_key;
use crate::harness::Harness;
use crate::pair::{assert_no_objects, connect_pair, PairOpts, FULL_ACCESS};
use crate::rig::{report_deviation, Quirk, Rig, Side};

/// A WRITE to an MR registered without `REMOTE_WRITE` fails with
/// `RemAccessErr`; the requests behind it flush.
pub fn remote_write_without_right(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let mut pair = connect_pair(&mut h, &PairOpts::default());
    let mr = pair
        .target
        .reg_extra_mr(&h, 32_768, 4096, Access::LOCAL_WRITE | Access::REMOTE_READ);
    let bad = SendWr::new(
        1,
        SendOp::Write {
            remote: RemoteAddr {
                addr: mr.addr,
                rkey: mr.rkey,
            },
        },
        vec![pair.initiator.sge(0, 64)],
    );
    pair.initiator.mem.write(0, &[0xCD; 64]).expect("in bounds");
    expect_error_then_flush(&mut h, &pair, bad, WcStatus::RemAccessErr);
    assert!(
        pair.target
            .mem
            .read_vec(32_768, 64)
            .expect("in bounds")
            .iter()
            .all(|b| *b == 0),
        "a refused WRITE must not modify the target's memory"
    );
    pair.teardown(&h);
}

/// A WRITE that runs past the end of the MR fails with `RemAccessErr` and
/// writes nothing, not even the part inside the MR.
pub fn remote_write_out_of_bounds(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let mut pair = connect_pair(&mut h, &PairOpts::default());
    let mr = pair.target.reg_extra_mr(&h, 32_768, 4096, FULL_ACCESS);
    let bad = SendWr::new(
        1,
        SendOp::Write {
            remote: RemoteAddr {
                addr: mr.addr + mr.length - 8,
                rkey: mr.rkey,
            },
        },
        vec![pair.initiator.sge(0, 16)],
    );
    pair.initiator.mem.write(0, &[0xAB; 16]).expect("in bounds");
    expect_error_then_flush(&mut h, &pair, bad, WcStatus::RemAccessErr);
    assert!(
        pair.target
            .mem
            .read_vec(32_768 + 4096 - 8, 16)
            .expect("in bounds")
            .iter()
            .all(|b| *b == 0),
        "an out-of-bounds WRITE must not write anything"
    );
    pair.teardown(&h);
}

/// A WRITE with an rkey that names no MR of the target fails with
/// `RemAccessErr`.
pub fn remote_bad_rkey(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let pair = connect_pair(&mut h, &PairOpts::default());
    let tgt = &pair.target;
    let rkey = unused_key(&[tgt.mr.rkey, tgt.mr.lkey]);
    let bad = SendWr::new(
        1,
        SendOp::Write {
            remote: RemoteAddr {
                addr: tgt.mr.addr,
                rkey,
            },
        },
        vec![pair.initiator.sge(0, 64)],
    );
    expect_error_then_flush(&mut h, &pair, bad, WcStatus::RemAccessErr);
    pair.teardown(&h);
}

/// A READ from an MR registered without `REMOTE_READ` fails with
/// `RemAccessErr`.
pub fn remote_read_without_right(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let mut pair = connect_pair(&mut h, &PairOpts::default());
    let mr = pair
        .target
        .reg_extra_mr(&h, 32_768, 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let bad = SendWr::new(
        1,
        SendOp::Read {
            remote: RemoteAddr {
                addr: mr.addr,
                rkey: mr.rkey,
            },
        },
        vec![pair.initiator.sge(0, 64)],
    );
    expect_error_then_flush(&mut h, &pair, bad, WcStatus::RemAccessErr);
    pair.teardown(&h);
}

/// An SGE with an lkey that names no MR fails with `LocProtErr`; so does
/// (on a fresh connection) an SGE that runs past the end of its MR.
pub fn local_protection_error(rig: &dyn Rig) {
    let mut h = Harness::new(rig);
    let pair = connect_pair(&mut h, &PairOpts::default());
    let (ini, tgt) = (&pair.initiator, &pair.target);
    let lkey = unused_key(&[ini.mr.lkey, ini.mr.rkey]);
    let bad = SendWr::new(
        1,
        SendOp::Write {
            remote: tgt.remote(0),
        },
        vec![Sge {
            addr: ini.mr.addr,
            length: 64,
            lkey,
        }],
    );
    let statuses: &[WcStatus] = if rig.has_quirk(Quirk::BadLkeyIsLocQpOpErr) {
        report_deviation(
            rig,
            "local_protection_error",
            "a bad lkey or an SGE past its MR completes LocQpOpErr (rxe, 6.1) or WrFlushErr (rxe, 6.12), not LocProtErr",
        );
        &[
            WcStatus::LocProtErr,
            WcStatus::LocQpOpErr,
            WcStatus::WrFlushErr,
        ]
    } else {
        &[WcStatus::LocProtErr]
    };
    expect_one_of_then_flush(&mut h, &pair, bad, statuses);
    pair.teardown(&h);

    let mut pair = connect_pair(&mut h, &PairOpts::default());
    let small = pair
        .initiator
        .reg_extra_mr(&h, 0, 4096, Access::LOCAL_WRITE);
    let bad = SendWr::new(
        2,
        SendOp::Write {
            remote: pair.target.remote(0),
        },
        vec![Sge {
            addr: small.addr + small.length - 8,
            length: 16,
            lkey: small.lkey,
        }],
    );
    expect_one_of_then_flush(&mut h, &pair, bad, statuses);
    pair.teardown(&h);
}

/// `reg_mr` refuses remote write or remote atomic rights without local
/// write (`InvalidArgument`), as verbs does; remote read alone is fine.
pub fn reg_mr_requires_local_write(rig: &dyn Rig) {
    let h = Harness::new(rig);
    let side = Side::Initiator;
    let host = h.host(side);
    let dev = h
        .device(side)
        .unwrap_or_else(|| panic!("no device owns the {side} address {}", rig.addr(side)));
    let ctx = host.open_device(&dev.id).expect("open_device");
    let pd = host.alloc_pd(ctx).expect("alloc_pd");
    let mem = host.alloc_memory(4096).expect("alloc_memory");
    for access in [
        Access::REMOTE_WRITE,
        Access::REMOTE_ATOMIC,
        Access::REMOTE_WRITE | Access::REMOTE_READ,
    ] {
        match host.reg_mr(pd, &mem, mem.addr(), 4096, access) {
            Err(CreateError::InvalidArgument(_)) => {}
            other => panic!("reg_mr({access:?}) must fail with InvalidArgument, got {other:?}"),
        }
    }
    let mr = host
        .reg_mr(pd, &mem, mem.addr(), 4096, Access::REMOTE_READ)
        .expect("reg_mr(REMOTE_READ) without LOCAL_WRITE is valid");
    assert!(matches!(
        host.dereg_mr(mr.id),
        Ok(relink_fabric::Destroyed::Released)
    ));
    assert!(matches!(
        host.dealloc_pd(pd),
        Ok(relink_fabric::Destroyed::Released)
    ));
    assert!(matches!(
        host.close_device(ctx),
        Ok(relink_fabric::Destroyed::Released)
    ));
    assert_no_objects(&h);
}
