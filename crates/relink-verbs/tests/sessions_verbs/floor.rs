//! The raw floor of a recovery: no relink, the provider's rdma_cm and
//! verbs calls only. The initiator's device is deleted and added again;
//! from the moment the process sees it come back, the program resolves
//! the target's address and route, creates a PD, CQ, QP and one
//! registered buffer, connects (the target accepts with its own fresh
//! objects) and completes one 64 B SEND. Each phase is timed on the
//! provider's clock, named as `SessionInfo::last_recovery`'s are, so the
//! RESULT line sits next to `unplug_replug_cycles`' (relink's phases).

use relink_fabric::{
    Access, CmEventKind, CmId, ConnParams, ContextId, CqId, DeviceEventKind, Event, MrInfo, PdId,
    QpId, QpInit, RecvWr, SendOp, SendWr, Sge, SgeList, Timestamp,
};

use super::*;

const MSG: usize = 64;
/// How long any one wait may take (not a measurement: a hang's bound).
const WAIT: Duration = Duration::from_secs(20);
/// The timeout handed to rdma_cm's address and route resolution: a
/// hang's bound too (resolution takes milliseconds; a loaded machine may
/// take longer, which is the phase's figure, not a failure).
pub(super) const RESOLVE: Duration = Duration::from_secs(10);

/// One end's objects.
pub(super) struct End {
    pub(super) id: CmId,
    pub(super) ctx: ContextId,
    pd: PdId,
    pub(super) cq: CqId,
    pub(super) qp: QpId,
    mr: MrInfo,
    pub(super) mem: relink_fabric::Memory,
}

impl End {
    /// Open the device `id` is bound to and create what one SEND needs.
    fn open(p: &VerbsProvider, id: CmId) -> End {
        End::with_cq(p, id, 16)
    }

    /// [`open`](End::open) with a CQ of `depth` entries.
    pub(super) fn with_cq(p: &VerbsProvider, id: CmId, depth: u32) -> End {
        let dev = p.cm_device(id).expect("the id's device");
        let ctx = p.open_device(&dev).expect("open_device");
        let pd = p.alloc_pd(ctx).expect("alloc_pd");
        let cq = p.create_cq(ctx, depth).expect("create_cq");
        let qp = p
            .create_qp(
                pd,
                QpInit {
                    send_cq: cq,
                    recv_cq: cq,
                    srq: None,
                    caps: relink_fabric::QpCaps::default(),
                    sq_sig_all: false,
                },
            )
            .expect("create_qp");
        let mem = p.alloc_memory(4096).expect("alloc_memory");
        let mr = p
            .reg_mr(pd, &mem, mem.addr(), 4096, Access::LOCAL_WRITE)
            .expect("reg_mr");
        End {
            id,
            ctx,
            pd,
            cq,
            qp,
            mr,
            mem,
        }
    }

    /// The message buffer: the first 64 bytes of the registered memory.
    pub(super) fn sge(&self) -> SgeList {
        SgeList::one(Sge {
            addr: self.mem.addr(),
            length: MSG as u32,
            lkey: self.mr.lkey,
        })
    }

    /// Destroy everything (after a disconnect, or on a lost device).
    pub(super) fn close(self, p: &VerbsProvider) {
        let _ = p.cm_disconnect(self.id);
        let _ = p.destroy_qp(self.qp);
        let _ = p.destroy_cq(self.cq);
        let _ = p.dereg_mr(self.mr.id);
        let _ = p.dealloc_pd(self.pd);
        let _ = p.close_device(self.ctx);
        let _ = p.cm_destroy_id(self.id);
    }
}

/// The next CM event of `id` on `p` (others are dropped).
pub(super) fn next_cm(p: &VerbsProvider, id: CmId) -> CmEventKind {
    let by = p.now() + WAIT;
    loop {
        while let Some(ev) = p.poll_event() {
            if let Event::Cm(c) = ev {
                if c.id == id {
                    return c.kind;
                }
            }
        }
        assert!(p.now() < by, "no CM event for {id:?} within {WAIT:?}");
        p.wait(Some(p.now() + Duration::from_millis(1)));
    }
}

/// The next connection request on `listener`: its new id.
pub(super) fn next_request(p: &VerbsProvider, listener: CmId) -> CmId {
    let by = p.now() + WAIT;
    loop {
        while let Some(ev) = p.poll_event() {
            if let Event::Cm(c) = ev {
                if matches!(c.kind, CmEventKind::ConnectRequest { listener: l, .. } if l == listener)
                {
                    return c.id;
                }
            }
        }
        assert!(p.now() < by, "no connection request within {WAIT:?}");
        p.wait(Some(p.now() + Duration::from_millis(1)));
    }
}

/// Poll `cq` until one completion: its moment.
fn one_completion(p: &VerbsProvider, cq: CqId) -> Timestamp {
    let by = p.now() + WAIT;
    let mut out = Vec::new();
    loop {
        if p.poll_cq(cq, 1, &mut out).expect("poll_cq") > 0 {
            assert_eq!(
                out[0].status,
                relink_fabric::WcStatus::Success,
                "{:?}",
                out[0]
            );
            return p.now();
        }
        assert!(p.now() < by, "no completion within {WAIT:?}");
    }
}

/// Wait until `p` reports device `name` added: its moment.
pub(super) fn device_added(p: &VerbsProvider, name: &str) -> Timestamp {
    let by = p.now() + WAIT;
    loop {
        while let Some(ev) = p.poll_event() {
            if let Event::Device(d) = ev {
                if d.kind == DeviceEventKind::Added && d.device.id.name == name {
                    return p.now();
                }
            }
        }
        assert!(p.now() < by, "{name} did not come back within {WAIT:?}");
        p.wait(Some(p.now() + Duration::from_millis(1)));
    }
}

pub(super) fn rdma(args: &[&str]) {
    let s = Command::new("rdma").args(args).status().expect("run rdma");
    assert!(s.success(), "rdma {args:?}: {s}");
}

/// One connection from nothing once the initiator's device is back: the
/// time from starting `rdma link add` until the process saw the device,
/// and the phases `[attempt, addr, route, resources, connect,
/// first_completion]` from then (`attempt` is 0: the raw program starts at
/// once).
fn one_cycle(
    pa: &Arc<VerbsProvider>,
    pb: &Arc<VerbsProvider>,
    env: &Topology,
    listener: CmId,
    peer: std::net::SocketAddr,
) -> (Duration, [Duration; 6]) {
    rdma(&["link", "delete", &env.init.device]);
    std::thread::sleep(Duration::from_millis(200));
    while pa.poll_event().is_some() {}
    let add = Instant::now();
    rdma(&[
        "link",
        "add",
        &env.init.device,
        "type",
        "rxe",
        "netdev",
        &env.init.netdev,
    ]);
    let visible = device_added(pa, &env.init.device);
    let seen = add.elapsed();
    let id = pa.cm_create_id().expect("cm_create_id");
    pa.cm_resolve_addr(id, Some(env.init.addr), peer, RESOLVE)
        .expect("cm_resolve_addr");
    assert_eq!(next_cm(pa, id), CmEventKind::AddrResolved);
    let addr = pa.now();
    pa.cm_resolve_route(id, RESOLVE).expect("cm_resolve_route");
    assert_eq!(next_cm(pa, id), CmEventKind::RouteResolved);
    let route = pa.now();
    let a = End::open(pa, id);
    let resources = pa.now();
    pa.cm_connect(id, a.qp, ConnParams::default(), b"floor")
        .expect("cm_connect");
    let req = next_request(pb, listener);
    let b = End::open(pb, req);
    pb.post_recv(
        b.qp,
        &[RecvWr {
            wr_id: 1,
            sgl: b.sge(),
        }],
    )
    .expect("post_recv");
    pb.cm_accept(req, b.qp, b"").expect("cm_accept");
    assert!(matches!(next_cm(pa, id), CmEventKind::Established { .. }));
    let connected = pa.now();
    a.mem.write(0, &[0x5a; MSG]).expect("write the message");
    pa.post_send(
        a.qp,
        &[SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sgl: a.sge(),
            signaled: true,
            solicited: false,
            fence: false,
        }],
    )
    .expect("post_send");
    let first = one_completion(pa, a.cq);
    one_completion(pb, b.cq);
    a.close(pa);
    b.close(pb);
    let d = |from: Timestamp, to: Timestamp| to.saturating_since(from);
    let phases = [
        Duration::ZERO,
        d(visible, addr),
        d(addr, route),
        d(route, resources),
        d(resources, connected),
        d(connected, first),
    ];
    (seen, phases)
}

#[test]
fn raw_floor_of_a_recovery() {
    let env = env_or_skip!(need_nothing);
    let _lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let cycles: usize = env_or("RELINK_VERBS_FLOOR_CYCLES", 10);
    let pa = provider(env.init.addr).expect("the initiator's provider");
    let pb = provider(env.target.addr).expect("the target's provider");
    let peer = std::net::SocketAddr::new(env.target.addr, port());
    let listener = pb.cm_create_id().expect("cm_create_id");
    pb.cm_bind(listener, peer).expect("cm_bind");
    pb.cm_listen(listener, 16).expect("cm_listen");
    let mut samples = Vec::new();
    let mut seen = Vec::new();
    for _ in 0..cycles {
        let (visible, [attempt, addr, route, resources, connect, first]) =
            one_cycle(&pa, &pb, &env, listener, peer);
        seen.push(visible);
        // The raw program has no resync: the order of relink's phases.
        samples.push([
            attempt,
            addr,
            route,
            resources,
            connect,
            Duration::ZERO,
            first,
        ]);
    }
    let _ = pb.cm_destroy_id(listener);
    seen.sort();
    let note = format!(
        "`rdma link add` to the device seen p50 {:.1} ms; {}",
        seen[seen.len() / 2].as_secs_f64() * 1e3,
        super::phases::note(&samples)
    );
    println!("RESULT raw_floor_of_a_recovery: {cycles} cycles; {note}");
    println!("RELINK_VM_NOTE: raw floor, {note}");
}
