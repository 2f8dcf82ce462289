//! Soft-fabric specific behaviour the conformance suite cannot ask of real
//! hardware: packet loss with retransmission, silent peer death found by the
//! transport timeout, partitions, port flaps, and exact replay of a seed.

use std::net::SocketAddr;
use std::time::Duration;

use relink_fabric::*;
use relink_soft::{Fault, LinkConfig, SoftFabric, SoftHost};

struct Side {
    host: SoftHost,
    cq: CqId,
    qp: QpId,
    mem: Memory,
    mr: MrInfo,
}

fn wait_cm(h: &SoftHost, until: Timestamp) -> CmEvent {
    loop {
        while let Some(ev) = h.poll_event() {
            if let Event::Cm(c) = ev {
                return c;
            }
        }
        assert!(h.now() < until, "no CM event before {until}");
        h.wait(Some(until));
    }
}

fn setup(h: &SoftHost, dev: &DeviceId) -> (ContextId, PdId, CqId, QpId, Memory, MrInfo) {
    let ctx = h.open_device(dev).unwrap();
    let pd = h.alloc_pd(ctx).unwrap();
    let cq = h.create_cq(ctx, 4096).unwrap();
    let qp = h
        .create_qp(
            pd,
            QpInit {
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                caps: QpCaps {
                    max_send_wr: 1024,
                    max_recv_wr: 1024,
                    ..QpCaps::default()
                },
                sq_sig_all: false,
            },
        )
        .unwrap();
    let mem = h.alloc_memory(1 << 16).unwrap();
    let mr = h
        .reg_mr(
            pd,
            &mem,
            mem.addr(),
            mem.len() as u64,
            Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
        )
        .unwrap();
    (ctx, pd, cq, qp, mem, mr)
}

fn pair(seed: u64) -> (SoftFabric, Side, Side) {
    let f = SoftFabric::new(seed);
    let a = f.add_host("a");
    let b = f.add_host("b");
    f.add_device(&a, "soft0", "10.0.0.1/24");
    f.add_device(&b, "soft0", "10.0.0.2/24");
    let dl = Timestamp(u64::MAX / 2);
    let lid = b.cm_create_id().unwrap();
    b.cm_bind(lid, "10.0.0.2:7471".parse().unwrap()).unwrap();
    b.cm_listen(lid, 8).unwrap();
    let cid = a.cm_create_id().unwrap();
    let dst: SocketAddr = "10.0.0.2:7471".parse().unwrap();
    a.cm_resolve_addr(cid, None, dst, Duration::from_secs(1))
        .unwrap();
    assert_eq!(wait_cm(&a, dl).kind, CmEventKind::AddrResolved);
    a.cm_resolve_route(cid, Duration::from_secs(1)).unwrap();
    assert_eq!(wait_cm(&a, dl).kind, CmEventKind::RouteResolved);
    let adev = a.cm_device(cid).unwrap();
    let (_, _, acq, aqp, amem, amr) = setup(&a, &adev);
    a.cm_connect(cid, aqp, ConnParams::default(), b"hello")
        .unwrap();
    let req = wait_cm(&b, dl);
    let CmEventKind::ConnectRequest { private_data, .. } = &req.kind else {
        panic!("{req:?}")
    };
    assert_eq!(private_data, b"hello");
    let bdev = b.cm_device(req.id).unwrap();
    let (_, _, bcq, bqp, bmem, bmr) = setup(&b, &bdev);
    b.cm_accept(req.id, bqp, b"welcome").unwrap();
    assert_eq!(
        wait_cm(&a, dl).kind,
        CmEventKind::Established {
            private_data: b"welcome".to_vec()
        }
    );
    assert!(matches!(
        wait_cm(&b, dl).kind,
        CmEventKind::Established { .. }
    ));
    (
        f,
        Side {
            host: a,
            cq: acq,
            qp: aqp,
            mem: amem,
            mr: amr,
        },
        Side {
            host: b,
            cq: bcq,
            qp: bqp,
            mem: bmem,
            mr: bmr,
        },
    )
}

fn drain(h: &SoftHost, cq: CqId, n: usize, until: Timestamp) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    while out.len() < n {
        h.poll_cq(cq, 64, &mut out).unwrap();
        if out.len() >= n {
            break;
        }
        assert!(h.now() < until, "only {} of {n} completions", out.len());
        h.wait(Some(until));
    }
    out
}

fn write(s: &Side, remote: &Side, wr_id: u64, off: u64, len: u32) -> SendWr {
    SendWr::new(
        wr_id,
        SendOp::Write {
            remote: RemoteAddr {
                addr: remote.mr.addr + off,
                rkey: remote.mr.rkey,
            },
        },
        vec![Sge {
            addr: s.mr.addr + off,
            length: len,
            lkey: s.mr.lkey,
        }],
    )
}

#[test]
fn lossy_link_still_delivers_every_write_in_order() {
    let (f, a, b) = pair(11);
    f.inject(Fault::SetLink(LinkConfig {
        latency: Duration::from_micros(5),
        jitter: Duration::from_micros(20),
        drop_rate: 0.2,
    }));
    for i in 0..64u64 {
        a.mem.write((i * 64) as usize, &[i as u8; 64]).unwrap();
    }
    let wrs: Vec<SendWr> = (0..64).map(|i| write(&a, &b, i, i * 64, 64)).collect();
    a.host.post_send(a.qp, &wrs).unwrap();
    let wcs = drain(&a.host, a.cq, 64, f.now() + Duration::from_secs(30));
    for (i, wc) in wcs.iter().enumerate() {
        assert_eq!(wc.wr_id, i as u64);
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    for i in 0..64usize {
        assert_eq!(b.mem.read_vec(i * 64, 64).unwrap(), vec![i as u8; 64]);
    }
}

#[test]
fn silent_peer_death_gives_retry_exceeded_not_a_hang() {
    let (f, a, b) = pair(12);
    f.inject(Fault::SilentRemove(b.host.index(), "soft0".into()));
    a.host
        .post_send(a.qp, &[write(&a, &b, 1, 0, 8), write(&a, &b, 2, 8, 8)])
        .unwrap();
    let start = f.now();
    let wcs = drain(&a.host, a.cq, 2, start + Duration::from_secs(60));
    assert_eq!(wcs[0].status, WcStatus::RetryExcErr);
    assert_eq!(wcs[1].status, WcStatus::WrFlushErr);
    // 8 tries of the ~67 ms ACK timeout.
    let took = f.now() - start;
    assert!(took >= Duration::from_millis(500), "{took:?}");
    // The peer was never told: no DISCONNECTED on a.
    while let Some(ev) = a.host.poll_event() {
        assert!(!matches!(
            ev,
            Event::Cm(CmEvent {
                kind: CmEventKind::Disconnected,
                ..
            })
        ));
    }
}

#[test]
fn partition_then_heal_within_retry_budget_loses_nothing() {
    let (f, a, b) = pair(13);
    f.inject(Fault::Partition(a.host.index(), b.host.index()));
    a.mem.write(0, b"partitioned").unwrap();
    a.host.post_send(a.qp, &[write(&a, &b, 1, 0, 11)]).unwrap();
    f.schedule(
        f.now() + Duration::from_millis(150),
        Fault::Heal(a.host.index(), b.host.index()),
    );
    let wcs = drain(&a.host, a.cq, 1, f.now() + Duration::from_secs(5));
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(b.mem.read_vec(0, 11).unwrap(), b"partitioned");
}

#[test]
fn port_down_fails_outstanding_with_loc_qp_op_err_then_flush() {
    let (f, a, b) = pair(14);
    f.inject(Fault::Partition(a.host.index(), b.host.index()));
    a.host
        .post_send(a.qp, &[write(&a, &b, 1, 0, 8), write(&a, &b, 2, 8, 8)])
        .unwrap();
    f.inject(Fault::PortDown(a.host.index(), "soft0".into()));
    let wcs = drain(&a.host, a.cq, 2, f.now() + Duration::from_secs(1));
    assert_eq!(wcs[0].status, WcStatus::LocQpOpErr);
    assert_eq!(wcs[1].status, WcStatus::WrFlushErr);
    let mut saw = false;
    while let Some(ev) = a.host.poll_event() {
        saw |= matches!(
            ev,
            Event::Async {
                event: AsyncEvent::PortErr,
                ..
            }
        );
    }
    assert!(saw, "PortErr async event");
    f.inject(Fault::PortUp(a.host.index(), "soft0".into()));
    assert_eq!(
        a.host.qp_state(a.qp).unwrap(),
        QpState::Err,
        "QP stays in error"
    );
}

#[test]
fn a_seed_replays_identically() {
    let run = |seed| {
        let (f, a, b) = pair(seed);
        f.inject(Fault::SetLink(LinkConfig {
            latency: Duration::from_micros(3),
            jitter: Duration::from_micros(50),
            drop_rate: 0.1,
        }));
        let wrs: Vec<SendWr> = (0..32).map(|i| write(&a, &b, i, i * 8, 8)).collect();
        a.host.post_send(a.qp, &wrs).unwrap();
        drain(&a.host, a.cq, 32, f.now() + Duration::from_secs(30));
        (f.digest(), f.now())
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
}

/// Payload buffers are recycled through the requester's pool: a steady
/// stream of write batches allocates only the first batch's buffers, every
/// payload lands exactly (a recycled buffer's old bytes never leak into a
/// shorter payload), and the idle buffers stay bounded.
#[test]
fn payload_buffers_are_recycled_and_bounded() {
    let (f, a, b) = pair(15);
    let until = f.now() + Duration::from_secs(60);
    const SLOT: u64 = 4096;
    for round in 0..50u64 {
        // 16 writes of shrinking length into 16 slots, only the last
        // signaled: the batch completes at once and all its buffers come
        // back together.
        let len = (SLOT - round * 8) as u32;
        b.mem.write(0, &vec![0xEE; 1 << 16]).unwrap();
        for i in 0..16u64 {
            let fill = (round * 16 + i) as u8;
            a.mem
                .write((i * SLOT) as usize, &vec![fill; SLOT as usize])
                .unwrap();
        }
        let wrs: Vec<SendWr> = (0..16u64)
            .map(|i| SendWr {
                signaled: i == 15,
                ..write(&a, &b, round * 16 + i, i * SLOT, len)
            })
            .collect();
        a.host.post_send(a.qp, &wrs).unwrap();
        let wcs = drain(&a.host, a.cq, 1, until);
        assert_eq!(wcs[0].status, WcStatus::Success, "{wcs:?}");
        for i in 0..16u64 {
            let fill = (round * 16 + i) as u8;
            let got = b.mem.read_vec((i * SLOT) as usize, SLOT as usize).unwrap();
            let (payload, rest) = got.split_at(len as usize);
            assert!(payload.iter().all(|&x| x == fill), "round {round} slot {i}");
            assert!(
                rest.iter().all(|&x| x == 0xEE),
                "round {round} slot {i}: overrun"
            );
        }
    }
    let s = a.host.pool_stats();
    assert_eq!(s.misses, 16, "only the first batch allocates: {s:?}");
    assert_eq!(s.hits, 49 * 16, "{s:?}");

    // 1,000 small writes outstanding at once: the pool keeps a bounded
    // number of them.
    let wrs: Vec<SendWr> = (0..1000u64)
        .map(|i| SendWr {
            signaled: i == 999,
            ..write(&a, &b, 10_000 + i, (i % 1000) * 64, 64)
        })
        .collect();
    a.host.post_send(a.qp, &wrs).unwrap();
    let wcs = drain(&a.host, a.cq, 1, until);
    assert_eq!(wcs[0].status, WcStatus::Success, "{wcs:?}");
    let s = a.host.pool_stats();
    assert!(
        s.idle_buffers <= 16 + relink_soft::BufferPool::MAX_IDLE_PER_CLASS
            && s.idle_bytes <= relink_soft::BufferPool::MAX_IDLE_BYTES,
        "{s:?}"
    );
}
