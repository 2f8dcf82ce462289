//! A connected RC pair, built with the full `rdma_cm` dance, and its
//! teardown with leak checks.
//!
//! [`connect_pair`] composes the steps, which are public on their own for
//! cases that need to break in between ([`listen`], [`resolve`],
//! [`open_end`], [`wait_connect_request`], [`connect_via`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use relink_fabric::{
    Access, CmEvent, CmEventKind, CmId, ConnParams, ContextId, CqId, DestroyError, Destroyed,
    DeviceId, ErrorClass, Event, Memory, MrInfo, MwInfo, MwType, PdId, QpCaps, QpId, QpInit,
    RecvWr, RemoteAddr, SendOp, SendWr, Sge, SrqId, SrqInit,
};

use crate::check::{assert_private_data, pattern};
use crate::harness::Harness;
use crate::rig::Side;

/// How long a retried listen or address resolution waits before the next
/// try (a device just added may not answer yet): a fixed pause, so a
/// rig's generous hang bound ([`Rig::settle_time`]) does not slow it.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Every right an MR can have: the access of each end's main MR.
pub const FULL_ACCESS: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC)
    .union(Access::MW_BIND);

/// How [`connect_pair`] sets up each end.
#[derive(Debug, Clone)]
pub struct PairOpts {
    /// Connection parameters of the initiator's connect.
    pub params: ConnParams,
    /// Private data of the connect (at most 56 bytes).
    pub connect_data: Vec<u8>,
    /// Private data of the accept (at most 196 bytes).
    pub accept_data: Vec<u8>,
    /// Bytes of host memory per end, registered as one MR with
    /// [`FULL_ACCESS`].
    pub buf_len: usize,
    /// QP capacities.
    pub caps: QpCaps,
    /// Depth of each CQ.
    pub cq_depth: u32,
    /// If set, the target's QP takes its receives from a shared receive
    /// queue created with these attributes on the target's PD
    /// ([`End::srq`]; post with [`End::post_srq_recv`]). `None` (the
    /// default): each QP has its own receive queue.
    pub target_srq: Option<SrqInit>,
}

impl Default for PairOpts {
    fn default() -> PairOpts {
        PairOpts {
            params: ConnParams::default(),
            connect_data: b"relink-testkit connect".to_vec(),
            accept_data: b"relink-testkit accept".to_vec(),
            buf_len: 64 * 1024,
            caps: QpCaps {
                max_send_wr: 256,
                max_recv_wr: 256,
                max_send_sge: 4,
                max_recv_sge: 4,
            },
            cq_depth: 512,
            target_srq: None,
        }
    }
}

/// One end of a connection: every handle a host holds for it.
#[derive(Debug)]
pub struct End {
    /// The host this end is on.
    pub side: Side,
    /// The device the context is open on.
    pub device: DeviceId,
    /// The open context.
    pub ctx: ContextId,
    /// Protection domain.
    pub pd: PdId,
    /// CQ of send completions.
    pub send_cq: CqId,
    /// CQ of receive completions.
    pub recv_cq: CqId,
    /// The RC QP.
    pub qp: QpId,
    /// The shared receive queue the QP takes its receives from, if any
    /// ([`PairOpts::target_srq`]); destroyed right after the QP.
    pub srq: Option<SrqId>,
    /// The connection's CM id.
    pub id: CmId,
    /// Host memory, [`PairOpts::buf_len`] bytes.
    pub mem: Memory,
    /// The MR covering all of `mem` with [`FULL_ACCESS`].
    pub mr: MrInfo,
    /// Further MRs a case registered (deregistered before `mr`).
    pub extra_mrs: Vec<MrInfo>,
    /// Memory windows a case allocated (deallocated before any MR).
    pub mws: Vec<MwInfo>,
    /// Further CM ids a case created on this host (destroyed last).
    pub extra_ids: Vec<CmId>,
    /// Whether the device went away: destroys must then report
    /// [`Destroyed::AlreadyReleased`].
    pub lost: bool,
}

/// What a receive of one staged SEND must show: length, immediate, bytes.
pub type StagedSend = (usize, Option<u32>, Vec<u8>);

impl End {
    /// `n` SENDs, request `i` (wr_id `i`) carrying the bytes staged in slot
    /// `i` of `mem` (`slot` bytes each): `1 + (i * step) % (slot - 1)` bytes
    /// of `pattern(seed + i)`, with the immediate `imm(i)` if any. Returns
    /// the requests and what each receive must show.
    pub fn stage_sends(
        &self,
        n: usize,
        slot: usize,
        seed: u64,
        step: usize,
        imm: impl Fn(usize) -> Option<u32>,
    ) -> (Vec<SendWr>, Vec<StagedSend>) {
        let mut sends = Vec::with_capacity(n);
        let mut expected = Vec::with_capacity(n);
        for i in 0..n {
            let len = 1 + (i * step) % (slot - 1);
            let data = pattern(seed + i as u64, len);
            self.mem.write(i * slot, &data).expect("payload fits");
            let imm = imm(i);
            let op = match imm {
                Some(imm) => SendOp::SendWithImm { imm },
                None => SendOp::Send,
            };
            sends.push(SendWr::new(
                i as u64,
                op,
                vec![self.sge(i * slot, len as u32)],
            ));
            expected.push((len, imm, data));
        }
        (sends, expected)
    }

    /// An SGE over `len` bytes of `mem` at `offset`, with the main MR's lkey.
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        Sge {
            addr: self.mem.addr() + offset as u64,
            length: len,
            lkey: self.mr.lkey,
        }
    }

    /// The remote address of byte `offset` of `mem` through the main MR.
    pub fn remote(&self, offset: usize) -> RemoteAddr {
        RemoteAddr {
            addr: self.mem.addr() + offset as u64,
            rkey: self.mr.rkey,
        }
    }

    /// Post send requests; panics if the post fails.
    #[track_caller]
    pub fn post_send(&self, h: &Harness<'_>, wrs: &[SendWr]) {
        if let Err(e) = h.host(self.side).post_send(self.qp, wrs) {
            panic!("post_send on the {} host: {e}", self.side);
        }
    }

    /// Post receives; panics if the post fails.
    #[track_caller]
    pub fn post_recv(&self, h: &Harness<'_>, wrs: &[RecvWr]) {
        if let Err(e) = h.host(self.side).post_recv(self.qp, wrs) {
            panic!("post_recv on the {} host: {e}", self.side);
        }
    }

    /// Post one receive per slot of `size` bytes of `mem`, slots
    /// `0..slots`, each with its slot number as its `wr_id`; panics if the
    /// post fails.
    #[track_caller]
    pub fn post_slot_recvs(&self, h: &Harness<'_>, slots: usize, size: usize) {
        let recvs: Vec<RecvWr> = (0..slots)
            .map(|slot| RecvWr {
                wr_id: slot as u64,
                sgl: self.sge(slot * size, size as u32).into(),
            })
            .collect();
        self.post_recv(h, &recvs);
    }

    /// Post receives to this end's SRQ; panics if the end has none or the
    /// post fails.
    #[track_caller]
    pub fn post_srq_recv(&self, h: &Harness<'_>, wrs: &[RecvWr]) {
        let Some(srq) = self.srq else {
            panic!("post_srq_recv: the {} end has no SRQ", self.side);
        };
        if let Err(e) = h.host(self.side).post_srq_recv(srq, wrs) {
            panic!("post_srq_recv({srq}) on the {} host: {e}", self.side);
        }
    }

    /// Register `[offset, offset+len)` of `mem` again with `access`; the MR
    /// is deregistered by teardown.
    #[track_caller]
    pub fn reg_extra_mr(
        &mut self,
        h: &Harness<'_>,
        offset: usize,
        len: u64,
        access: Access,
    ) -> MrInfo {
        let addr = self.mem.addr() + offset as u64;
        let mr = h
            .host(self.side)
            .reg_mr(self.pd, &self.mem, addr, len, access)
            .unwrap_or_else(|e| panic!("reg_mr({access:?}) on the {} host: {e}", self.side));
        assert_eq!(
            (mr.addr, mr.length, mr.access),
            (addr, len, access),
            "reg_mr must report the range and rights asked for"
        );
        self.extra_mrs.push(mr);
        mr
    }

    /// Allocate a memory window on this end's PD; deallocated by teardown.
    #[track_caller]
    pub fn alloc_mw(&mut self, h: &Harness<'_>, kind: MwType) -> MwInfo {
        let mw = h
            .host(self.side)
            .alloc_mw(self.pd, kind)
            .unwrap_or_else(|e| panic!("alloc_mw({kind:?}) on the {} host: {e}", self.side));
        assert_eq!(mw.kind, kind, "alloc_mw must report the type asked for");
        self.mws.push(mw);
        mw
    }

    /// Note that this end's device went away.
    pub fn mark_lost(&mut self) {
        self.lost = true;
    }

    /// Destroy everything in dependency order — QP, SRQ, MWs, MRs, CQs, PD,
    /// context, CM ids — checking each verbs destroy reports
    /// [`Destroyed::Released`] (or [`Destroyed::AlreadyReleased`] if the end
    /// is [`lost`](End::lost)). CM id destroys only have to succeed.
    #[track_caller]
    pub fn teardown(self, h: &Harness<'_>) {
        let host = h.host(self.side);
        let want = if self.lost {
            Destroyed::AlreadyReleased
        } else {
            Destroyed::Released
        };
        let side = self.side;
        let check = |what: String, r: Result<Destroyed, DestroyError>| match r {
            Ok(d) if d == want => {}
            other => {
                panic!("destroying {what} on the {side} host: want Ok({want:?}), got {other:?}")
            }
        };
        // Windows first: a bound type 2 window holds a reference to its QP
        // (rxe blocks in destroy_qp until it is released).
        for mw in &self.mws {
            check(format!("{}", mw.id), host.dealloc_mw(mw.id));
        }
        check(format!("{}", self.qp), host.destroy_qp(self.qp));
        if let Some(srq) = self.srq {
            check(format!("{srq}"), host.destroy_srq(srq));
        }
        for mr in self.extra_mrs.iter().rev().chain(Some(&self.mr)) {
            check(format!("{}", mr.id), host.dereg_mr(mr.id));
        }
        check(
            format!("send {}", self.send_cq),
            host.destroy_cq(self.send_cq),
        );
        check(
            format!("recv {}", self.recv_cq),
            host.destroy_cq(self.recv_cq),
        );
        check(format!("{}", self.pd), host.dealloc_pd(self.pd));
        check(format!("{}", self.ctx), host.close_device(self.ctx));
        destroy_id(h, side, self.id);
        for id in self.extra_ids {
            destroy_id(h, side, id);
        }
    }
}

/// Destroy a CM id; any `Ok` will do.
#[track_caller]
pub fn destroy_id(h: &Harness<'_>, side: Side, id: CmId) {
    if let Err(e) = h.host(side).cm_destroy_id(id) {
        panic!("cm_destroy_id({id}) on the {side} host: {e}");
    }
}

/// Both ends of an established connection and the target's listener.
#[derive(Debug)]
pub struct Pair {
    /// The initiator's end.
    pub initiator: End,
    /// The target's end.
    pub target: End,
    /// The listener the connection arrived on (destroyed by teardown).
    pub listener: Option<CmId>,
}

impl Pair {
    /// The end of `side`.
    pub fn end(&self, side: Side) -> &End {
        match side {
            Side::Initiator => &self.initiator,
            Side::Target => &self.target,
        }
    }

    /// The end of `side`, mutably.
    pub fn end_mut(&mut self, side: Side) -> &mut End {
        match side {
            Side::Initiator => &mut self.initiator,
            Side::Target => &mut self.target,
        }
    }

    /// Tear both ends down ([`End::teardown`]), destroy the listener, and
    /// assert that neither host has an object left.
    #[track_caller]
    pub fn teardown(self, h: &Harness<'_>) {
        self.initiator.teardown(h);
        self.target.teardown(h);
        if let Some(listener) = self.listener {
            destroy_id(h, Side::Target, listener);
        }
        assert_no_objects(h);
    }
}

/// Assert that neither host holds an object.
#[track_caller]
pub fn assert_no_objects(h: &Harness<'_>) {
    for side in Side::ALL {
        let counts = h.host(side).object_counts();
        assert_eq!(
            counts.total(),
            0,
            "objects left on the {side} host after teardown: {counts:?}"
        );
    }
}

/// The wildcard address of `addr`'s family.
pub fn wildcard_for(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// Where the target listens: its address, the rig's port.
pub fn target_addr(h: &Harness<'_>) -> SocketAddr {
    SocketAddr::new(h.rig().addr(Side::Target), h.rig().port())
}

/// Create a CM id on the target host, bind it to `addr` and listen.
/// A retryable error (`AddrInUse` while a just-destroyed listener is still
/// being released, `AddrNotAvailable` while a re-added device comes up) is
/// retried with a fresh id until the deadline.
#[track_caller]
pub fn listen(h: &mut Harness<'_>, addr: SocketAddr) -> CmId {
    let side = Side::Target;
    let host = h.host(side);
    let deadline = h.deadline(side);
    loop {
        let id = host
            .cm_create_id()
            .unwrap_or_else(|e| panic!("cm_create_id on the target host: {e}"));
        let result = host.cm_bind(id, addr).and_then(|bound| {
            assert_eq!(
                bound, addr,
                "cm_bind to an explicit port must bind that port"
            );
            host.cm_listen(id, 16)
        });
        match result {
            Ok(()) => return id,
            Err(e) if e.class() == ErrorClass::Retryable && h.now(side) < deadline => {
                tracing::debug!(target: "relink_testkit", %addr, error = %e, "listen: retrying");
                destroy_id(h, side, id);
                h.idle(side, RETRY_PAUSE);
            }
            Err(e) => panic!("listening on {addr} on the target host: {e}"),
        }
    }
}

/// Create a CM id on `side`'s host and resolve address and route to `dst`.
/// An `AddrError`/`RouteError` (a device just re-added may not answer yet)
/// is retried with a fresh id until the deadline.
#[track_caller]
pub fn resolve(h: &mut Harness<'_>, side: Side, dst: SocketAddr) -> CmId {
    let host = h.host(side);
    let timeout = h.rig().settle_time();
    let deadline = h.deadline(side);
    loop {
        let id = host
            .cm_create_id()
            .unwrap_or_else(|e| panic!("cm_create_id on the {side} host: {e}"));
        let retry = match host.cm_resolve_addr(id, None, dst, timeout) {
            Ok(()) => match h.next_cm(side, id, deadline) {
                CmEventKind::AddrResolved => {
                    if let Err(e) = host.cm_resolve_route(id, timeout) {
                        panic!("cm_resolve_route({dst}) on the {side} host: {e}");
                    }
                    match h.next_cm(side, id, deadline) {
                        CmEventKind::RouteResolved => return id,
                        CmEventKind::RouteError => "RouteError".to_string(),
                        other => panic!("resolving the route to {dst}: unexpected {other:?}"),
                    }
                }
                CmEventKind::AddrError => "AddrError".to_string(),
                other => panic!("resolving {dst}: unexpected {other:?}"),
            },
            Err(e) if e.class() == ErrorClass::Retryable => e.to_string(),
            Err(e) => panic!("cm_resolve_addr({dst}) on the {side} host: {e}"),
        };
        destroy_id(h, side, id);
        assert!(
            h.now(side) < deadline,
            "could not resolve {dst} from the {side} host before the deadline: last {retry}"
        );
        h.idle(side, RETRY_PAUSE);
    }
}

/// Open the device `id` is bound to on `side`'s host and create a PD, two
/// CQs, an RC QP (on the target, attached to a new SRQ if
/// [`PairOpts::target_srq`] asks for one), and memory registered as one MR
/// with [`FULL_ACCESS`].
#[track_caller]
pub fn open_end(h: &Harness<'_>, side: Side, id: CmId, opts: &PairOpts) -> End {
    let host = h.host(side);
    let device = host.cm_device(id).unwrap_or_else(|| {
        panic!("cm_device({id}) on the {side} host is None after resolve/request")
    });
    let ctx = host
        .open_device(&device)
        .unwrap_or_else(|e| panic!("open_device({device}) on the {side} host: {e}"));
    assert_eq!(
        host.context_device(ctx).as_ref(),
        Some(&device),
        "context_device must name the device opened"
    );
    let pd = host
        .alloc_pd(ctx)
        .unwrap_or_else(|e| panic!("alloc_pd on the {side} host: {e}"));
    let send_cq = host
        .create_cq(ctx, opts.cq_depth)
        .unwrap_or_else(|e| panic!("create_cq on the {side} host: {e}"));
    let recv_cq = host
        .create_cq(ctx, opts.cq_depth)
        .unwrap_or_else(|e| panic!("create_cq on the {side} host: {e}"));
    let srq = match (side, opts.target_srq) {
        (Side::Target, Some(init)) => Some(
            host.create_srq(pd, init)
                .unwrap_or_else(|e| panic!("create_srq({init:?}) on the {side} host: {e}")),
        ),
        _ => None,
    };
    let qp = host
        .create_qp(
            pd,
            QpInit {
                send_cq,
                recv_cq,
                srq,
                caps: opts.caps,
                sq_sig_all: false,
            },
        )
        .unwrap_or_else(|e| panic!("create_qp on the {side} host: {e}"));
    let mem = host
        .alloc_memory(opts.buf_len)
        .unwrap_or_else(|e| panic!("alloc_memory({}) on the {side} host: {e}", opts.buf_len));
    assert!(
        mem.len() >= opts.buf_len && mem.addr() % 8 == 0,
        "alloc_memory({}) must return at least that many 8-byte aligned bytes, got {} at {:#x}",
        opts.buf_len,
        mem.len(),
        mem.addr()
    );
    let len = opts.buf_len as u64;
    let mr = host
        .reg_mr(pd, &mem, mem.addr(), len, FULL_ACCESS)
        .unwrap_or_else(|e| panic!("reg_mr on the {side} host: {e}"));
    assert_eq!(
        (mr.addr, mr.length, mr.access),
        (mem.addr(), len, FULL_ACCESS),
        "reg_mr must report the range and rights asked for"
    );
    End {
        side,
        device,
        ctx,
        pd,
        send_cq,
        recv_cq,
        qp,
        srq,
        id,
        mem,
        mr,
        extra_mrs: Vec::new(),
        mws: Vec::new(),
        extra_ids: Vec::new(),
        lost: false,
    }
}

/// A connection request that arrived on a listener.
#[derive(Debug, Clone)]
pub struct Request {
    /// The new CM id of the request.
    pub id: CmId,
    /// The initiator's private data.
    pub private_data: Vec<u8>,
    /// The initiator's address.
    pub peer: SocketAddr,
    /// The local address the request was sent to.
    pub local: SocketAddr,
}

/// Wait for a `ConnectRequest` on `listener` of the target host.
#[track_caller]
pub fn wait_connect_request(h: &mut Harness<'_>, listener: CmId) -> Request {
    let deadline = h.deadline(Side::Target);
    let ev = h.wait_event(Side::Target, deadline, |ev| {
        matches!(ev, Event::Cm(CmEvent { kind: CmEventKind::ConnectRequest { listener: l, .. }, .. }) if *l == listener)
    });
    match ev {
        Event::Cm(CmEvent {
            id,
            kind:
                CmEventKind::ConnectRequest {
                    private_data,
                    peer,
                    local,
                    ..
                },
        }) => {
            assert_ne!(id, listener, "a ConnectRequest must carry a new CM id");
            Request {
                id,
                private_data,
                peer,
                local,
            }
        }
        _ => unreachable!("the predicate only accepts connect requests"),
    }
}

/// Listen on the target's address and [`connect_via`] that listener.
#[track_caller]
pub fn connect_pair(h: &mut Harness<'_>, opts: &PairOpts) -> Pair {
    let dst = target_addr(h);
    let listener = listen(h, dst);
    connect_via(h, listener, opts)
}

/// Connect the initiator to [`target_addr`] where `listener` (bound to the
/// target's address or the wildcard, on the rig's port) listens: resolve,
/// open the initiator's end, connect with [`PairOpts::connect_data`], take
/// the request, open the target's end on the request's device, accept with
/// [`PairOpts::accept_data`], and wait for `Established` on both sides.
/// The pair owns `listener` from then on.
#[track_caller]
pub fn connect_via(h: &mut Harness<'_>, listener: CmId, opts: &PairOpts) -> Pair {
    let dst = target_addr(h);
    let id = resolve(h, Side::Initiator, dst);
    let initiator = open_end(h, Side::Initiator, id, opts);
    if let Err(e) =
        h.host(Side::Initiator)
            .cm_connect(id, initiator.qp, opts.params, &opts.connect_data)
    {
        panic!("cm_connect({dst}) on the initiator host: {e}");
    }
    let req = wait_connect_request(h, listener);
    assert_private_data(&req.private_data, &opts.connect_data, "ConnectRequest");
    assert_eq!(
        req.local, dst,
        "ConnectRequest.local must be the address connected to"
    );
    assert_eq!(
        req.peer.ip(),
        h.rig().addr(Side::Initiator),
        "ConnectRequest.peer must be the initiator's device address"
    );
    let target = open_end(h, Side::Target, req.id, opts);
    if let Err(e) = h
        .host(Side::Target)
        .cm_accept(req.id, target.qp, &opts.accept_data)
    {
        panic!("cm_accept on the target host: {e}");
    }
    let deadline = h.deadline(Side::Initiator);
    match h.next_cm(Side::Initiator, id, deadline) {
        CmEventKind::Established { private_data } => {
            assert_private_data(&private_data, &opts.accept_data, "Established (initiator)");
        }
        other => panic!("connecting to {dst}: the initiator got {other:?}, not Established"),
    }
    let deadline = h.deadline(Side::Target);
    match h.next_cm(Side::Target, req.id, deadline) {
        CmEventKind::Established { .. } => {}
        other => panic!("accepting from {dst}: the target got {other:?}, not Established"),
    }
    Pair {
        initiator,
        target,
        listener: Some(listener),
    }
}
