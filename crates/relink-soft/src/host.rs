//! One host's view of the soft fabric: its devices, its verbs objects, the
//! RC engine of its QPs and its connection manager. Transport-independent:
//! every call takes an [`Outbox`] that collects the packets, timers and
//! transport requests the call produced; the in-process world or the TCP
//! transport carries them out.

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use relink_fabric::Timestamp;
use relink_fabric::{check_private_data, ConnParams};
use relink_fabric::{
    Access, AsyncEvent, CmError, CmEvent, CmEventKind, CreateError, DestroyError, Destroyed,
    DeviceEvent, DeviceEventKind, DeviceId, DeviceInfo, Event, Memory, MrInfo, MwBind, MwInfo,
    MwType, ObjectCounts, OpenError, PollError, PortState, PostError, QpInit, QpState, RecvWr,
    RejectReason, SendOp, SendWr, Sge, SrqInit, WcOpcode, WcStatus, WorkCompletion,
    MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA,
};
use relink_fabric::{CmId, ContextId, CqId, MrId, MwId, PdId, QpId, SrqId};

use crate::outbox::{Control, Outbox, Outgoing, Timer};
use crate::packet::{Body, CmMsg, NakCode, Packet, ReqOp, RespKind};
use crate::payload::{BufferPool, Payload, PoolStats};

/// Static configuration of a host.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// Name for logs.
    pub name: String,
    /// A number that makes this host's connection ids, QP numbers and keys
    /// differ from other hosts'.
    pub tag: u32,
    /// Virtual address where this host's memory allocations start.
    pub mem_base: u64,
    /// The wire never loses packets (TCP): no transport retransmission.
    pub reliable_wire: bool,
    /// How long a CM request waits for its reply.
    pub cm_timeout: Duration,
}

impl HostConfig {
    /// Defaults for a host called `name` with tag `tag`.
    pub fn new(name: impl Into<String>, tag: u32) -> HostConfig {
        HostConfig {
            name: name.into(),
            tag,
            mem_base: 0x7f00_0000_0000 + (u64::from(tag & 0xff) << 36),
            reliable_wire: false,
            cm_timeout: Duration::from_millis(1000),
        }
    }
}

struct Dev {
    info: DeviceInfo,
}

struct Ctx {
    dev: DeviceId,
}

struct Pd {
    ctx: u64,
    dev: DeviceId,
}

struct Cq {
    ctx: u64,
    dev: DeviceId,
    depth: u32,
    entries: VecDeque<WorkCompletion>,
    armed: Option<bool>,
}

struct Srq {
    pd: u64,
    dev: DeviceId,
    init: SrqInit,
    queue: VecDeque<RecvWr>,
}

struct Mr {
    pd: u64,
    dev: DeviceId,
    memory: Memory,
    info: MrInfo,
}

struct Mw {
    pd: u64,
    dev: DeviceId,
    kind: MwType,
    rkey: u32,
    bound: Option<MwBinding>,
}

#[derive(Clone, Copy)]
struct MwBinding {
    mr: u64,
    addr: u64,
    length: u64,
    access: Access,
    qp: Option<u64>,
}

struct SqEntry {
    wr_id: u64,
    op: SendOp,
    sgl: Vec<Sge>,
    signaled: bool,
    solicited: bool,
    psn: Option<u32>,
    req: Option<ReqOp>,
    sent: bool,
    done: Option<(WcStatus, u32)>,
}

struct Qp {
    pd: u64,
    dev: DeviceId,
    init: QpInit,
    qpn: u32,
    state: QpState,
    params: ConnParams,
    remote: Option<(IpAddr, u32)>,
    local_ip: Option<IpAddr>,
    conn: u64,
    sq: VecDeque<SqEntry>,
    next_psn: u32,
    retries_left: u8,
    rnr_left: u8,
    /// Generation of the QP's timers; bumped to make queued ones stale.
    timer_gen: u64,
    /// When the transport retransmission fires (None: nothing unacked).
    rto: Option<Timestamp>,
    /// A `Retransmit` timer of the current generation is queued.
    rto_queued: bool,
    rnr_wait: bool,
    rq: VecDeque<RecvWr>,
    expected_psn: u32,
    atomic_cache: VecDeque<(u32, u64)>,
    last_wqe_reported: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CmState {
    Idle,
    Bound,
    Listening,
    ResolvingAddr,
    AddrResolved,
    RouteResolved,
    Connecting,
    RequestReceived,
    Accepting,
    Connected,
    Disconnected,
    Removed,
    Failed,
}

struct CmIdState {
    state: CmState,
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
    device: Option<DeviceId>,
    qp: Option<u64>,
    conn: u64,
    initiator: bool,
    remote_qpn: u32,
    params: ConnParams,
    timer_gen: u64,
    bound: bool,
}

impl CmIdState {
    fn new() -> CmIdState {
        CmIdState {
            state: CmState::Idle,
            local: None,
            peer: None,
            device: None,
            qp: None,
            conn: 0,
            initiator: false,
            remote_qpn: 0,
            params: ConnParams::default(),
            timer_gen: 0,
            bound: false,
        }
    }
}

/// How a device leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Departure {
    /// Orderly: connected peers are sent a disconnect request.
    Orderly,
    /// Silent: the device vanishes; peers learn only by timeouts.
    Silent,
}

/// The state of one host (see the module docs).
pub struct HostState {
    cfg: HostConfig,
    devices: BTreeMap<String, Dev>,
    next_handle: u64,
    next_qpn: u32,
    next_key: u32,
    next_port: u16,
    next_conn: u32,
    next_mem: u64,
    ctxs: BTreeMap<u64, Ctx>,
    pds: BTreeMap<u64, Pd>,
    cqs: BTreeMap<u64, Cq>,
    srqs: BTreeMap<u64, Srq>,
    mrs: BTreeMap<u64, Mr>,
    mws: BTreeMap<u64, Mw>,
    /// MR handle by key (lkey == rkey for soft MRs).
    mr_keys: BTreeMap<u32, u64>,
    /// MW handle by current rkey.
    mw_keys: BTreeMap<u32, u64>,
    qps: BTreeMap<u64, Qp>,
    qpn_index: BTreeMap<u32, u64>,
    cm_ids: BTreeMap<u64, CmIdState>,
    events: VecDeque<Event>,
    activity: bool,
    /// Payload buffers of retired requests and consumed responses, for the
    /// next gather (bounded; see [`crate::payload`]).
    pool: BufferPool,
}

const ATOMIC_CACHE: usize = 16;

fn psn_le(a: u32, b: u32) -> bool {
    // 24-bit PSNs are not needed here: 32-bit wrapping comparison.
    b.wrapping_sub(a) < (1 << 31)
}

impl HostState {
    /// A host with no devices.
    pub fn new(cfg: HostConfig) -> HostState {
        let tag = cfg.tag;
        let mem = cfg.mem_base;
        HostState {
            cfg,
            devices: BTreeMap::new(),
            next_handle: 1,
            next_qpn: 0x100 + (tag & 0xff) * 0x1_0000,
            next_key: 0x10 + (tag & 0xfff) * 0x1000,
            next_port: 40000,
            next_conn: 1,
            next_mem: mem,
            ctxs: BTreeMap::new(),
            pds: BTreeMap::new(),
            cqs: BTreeMap::new(),
            srqs: BTreeMap::new(),
            mrs: BTreeMap::new(),
            mws: BTreeMap::new(),
            mr_keys: BTreeMap::new(),
            mw_keys: BTreeMap::new(),
            qps: BTreeMap::new(),
            qpn_index: BTreeMap::new(),
            cm_ids: BTreeMap::new(),
            events: VecDeque::new(),
            activity: false,
            pool: BufferPool::new(),
        }
    }

    /// The host's name.
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// Counters of the host's payload buffer pool.
    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// Whether something happened (event queued or completion added) since
    /// the last [`take_activity`](Self::take_activity).
    pub fn take_activity(&mut self) -> bool {
        std::mem::take(&mut self.activity)
    }

    /// Whether an event is waiting.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    fn handle(&mut self) -> u64 {
        let h = self.next_handle;
        self.next_handle += 1;
        h
    }

    fn key(&mut self) -> u32 {
        let k = self.next_key;
        self.next_key = self.next_key.wrapping_add(1);
        (k << 8) | (k.wrapping_mul(0x9e37_79b9) >> 24)
    }

    fn push_event(&mut self, ev: Event) {
        self.events.push_back(ev);
        self.activity = true;
    }

    fn cm_event(&mut self, id: u64, kind: CmEventKind) {
        self.push_event(Event::Cm(CmEvent { id: CmId(id), kind }));
    }

    fn alive(&self, dev: &DeviceId) -> bool {
        self.devices
            .get(&dev.name)
            .is_some_and(|d| d.info.id == *dev)
    }

    fn device_info(&self, dev: &DeviceId) -> Option<&DeviceInfo> {
        self.devices
            .get(&dev.name)
            .map(|d| &d.info)
            .filter(|i| i.id == *dev)
    }

    fn port_active(&self, dev: &DeviceId) -> bool {
        self.device_info(dev)
            .is_some_and(|i| i.port_state == PortState::Active)
    }

    fn device_owning(&self, ip: IpAddr) -> Option<&DeviceInfo> {
        self.devices.values().map(|d| &d.info).find(|i| i.owns(ip))
    }

    // ------------------------------------------------------------------
    // devices
    // ------------------------------------------------------------------

    /// Devices present.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        self.devices.values().map(|d| d.info.clone()).collect()
    }

    /// The port state of the device that owns `ip`, if one does (no
    /// allocation: the in-process fabric asks this for every packet).
    pub fn addr_port(&self, ip: IpAddr) -> Option<PortState> {
        self.devices
            .values()
            .find(|d| d.info.owns(ip))
            .map(|d| d.info.port_state)
    }

    /// A device registered (new, back after a reset, or a replacement).
    pub fn add_device(&mut self, info: DeviceInfo, out: &mut Outbox) {
        if let Some(old) = self.devices.get(&info.id.name) {
            if old.info.id == info.id {
                return;
            }
            let name = info.id.name.clone();
            self.remove_device(&name, Departure::Orderly, out);
        }
        tracing::debug!(host = %self.cfg.name, device = %info.id, "device added");
        self.devices
            .insert(info.id.name.clone(), Dev { info: info.clone() });
        self.push_event(Event::Device(DeviceEvent {
            kind: DeviceEventKind::Added,
            device: info,
        }));
    }

    /// The device is about to be reset: its contexts see `DeviceFatal`.
    pub fn device_fatal(&mut self, name: &str) {
        let Some(info) = self.devices.get(name).map(|d| d.info.clone()) else {
            return;
        };
        let ctxs: Vec<u64> = self
            .ctxs
            .iter()
            .filter(|(_, c)| c.dev == info.id)
            .map(|(h, _)| *h)
            .collect();
        for c in ctxs {
            self.push_event(Event::Async {
                ctx: ContextId(c),
                event: AsyncEvent::DeviceFatal,
            });
        }
        self.push_event(Event::Device(DeviceEvent {
            kind: DeviceEventKind::Fatal,
            device: info,
        }));
    }

    /// The device unregistered: everything on it is lost.
    pub fn remove_device(&mut self, name: &str, how: Departure, out: &mut Outbox) {
        let Some(dev) = self.devices.remove(name) else {
            return;
        };
        let id = dev.info.id.clone();
        tracing::debug!(host = %self.cfg.name, device = %id, ?how, "device removed");
        // Connections: tell peers (orderly), then every id on the device
        // sees DEVICE_REMOVAL.
        let ids: Vec<u64> = self.cm_ids.keys().copied().collect();
        for h in ids {
            let cm = &self.cm_ids[&h];
            let on_dev = cm.device.as_ref() == Some(&id);
            let listener_on_dev =
                cm.state == CmState::Listening && cm.local.is_some_and(|a| dev.info.owns(a.ip()));
            if !(on_dev || listener_on_dev) {
                continue;
            }
            if matches!(cm.state, CmState::Removed | CmState::Failed) && on_dev {
                continue;
            }
            let was_connected = matches!(
                cm.state,
                CmState::Connected | CmState::Accepting | CmState::Connecting
            );
            let conn = cm.conn;
            let initiator = cm.initiator;
            let peer = cm.peer;
            let local = cm.local;
            let state = cm.state;
            if was_connected && how == Departure::Orderly {
                if let (Some(peer), Some(local)) = (peer, local) {
                    out.packets.push(Outgoing {
                        conn,
                        packet: Packet {
                            src: local.ip(),
                            dst: peer.ip(),
                            body: Body::Cm(CmMsg::Dreq {
                                conn_id: conn,
                                from_initiator: initiator,
                            }),
                        },
                    });
                }
            }
            if conn != 0 {
                out.controls.push(Control::Close(conn));
            }
            if state == CmState::Listening {
                if let Some(a) = local {
                    out.controls.push(Control::Unlisten(a));
                }
            }
            let cm = self.cm_ids.get_mut(&h).expect("present");
            cm.state = CmState::Removed;
            cm.timer_gen += 1;
            self.cm_event(h, CmEventKind::DeviceRemoval);
        }
        // Every QP flushes everything outstanding: the responder may or may
        // not have executed it.
        let qps: Vec<u64> = self
            .qps
            .iter()
            .filter(|(_, q)| q.dev == id)
            .map(|(h, _)| *h)
            .collect();
        for q in qps {
            self.qp_error(q, None);
            if let Some(qp) = self.qps.get_mut(&q) {
                qp.timer_gen += 1;
                qp.rto = None;
                qp.rto_queued = false;
            }
        }
        self.push_event(Event::Device(DeviceEvent {
            kind: DeviceEventKind::Removed,
            device: dev.info,
        }));
    }

    /// The port of a device went down or came up.
    pub fn set_port(&mut self, name: &str, state: PortState) {
        let Some(dev) = self.devices.get_mut(name) else {
            return;
        };
        if dev.info.port_state == state {
            return;
        }
        dev.info.port_state = state;
        let info = dev.info.clone();
        let ctxs: Vec<u64> = self
            .ctxs
            .iter()
            .filter(|(_, c)| c.dev == info.id)
            .map(|(h, _)| *h)
            .collect();
        let (async_ev, kind) = match state {
            PortState::Active => (AsyncEvent::PortActive, DeviceEventKind::PortUp),
            PortState::Down => (AsyncEvent::PortErr, DeviceEventKind::PortDown),
        };
        for c in ctxs {
            self.push_event(Event::Async {
                ctx: ContextId(c),
                event: async_ev,
            });
        }
        if state == PortState::Down {
            // rxe: the QP's outstanding request fails with LOC_QP_OP_ERR,
            // the rest flush; the QP stays in error after the port returns.
            let qps: Vec<u64> = self
                .qps
                .iter()
                .filter(|(_, q)| q.dev == info.id && q.state == QpState::Rts)
                .map(|(h, _)| *h)
                .collect();
            for q in qps {
                let first = self.qps[&q]
                    .sq
                    .iter()
                    .position(|e| e.done.is_none())
                    .map(|i| (i, WcStatus::LocQpOpErr));
                self.qp_error(q, first);
            }
        }
        self.push_event(Event::Device(DeviceEvent { kind, device: info }));
    }

    // ------------------------------------------------------------------
    // contexts, memory, PD, CQ
    // ------------------------------------------------------------------

    /// Open a device context.
    pub fn open_device(&mut self, id: &DeviceId) -> Result<ContextId, OpenError> {
        if !self.alive(id) {
            return Err(OpenError::NoDevice(id.to_string()));
        }
        let h = self.handle();
        self.ctxs.insert(h, Ctx { dev: id.clone() });
        Ok(ContextId(h))
    }

    /// Close a context.
    pub fn close_device(&mut self, ctx: ContextId) -> Result<Destroyed, DestroyError> {
        let Some(c) = self.ctxs.get(&ctx.0) else {
            return Err(DestroyError::InvalidHandle("context"));
        };
        if self.pds.values().any(|p| p.ctx == ctx.0) {
            return Err(DestroyError::Busy("context (PDs)"));
        }
        let _ = c;
        if self.cqs.values().any(|q| q.ctx == ctx.0) {
            return Err(DestroyError::Busy("context (CQs)"));
        }
        let dev = self.ctxs.remove(&ctx.0).expect("present").dev;
        Ok(self.destroyed(&dev))
    }

    fn destroyed(&self, dev: &DeviceId) -> Destroyed {
        if self.alive(dev) {
            Destroyed::Released
        } else {
            Destroyed::AlreadyReleased
        }
    }

    /// The device of a context.
    pub fn context_device(&self, ctx: ContextId) -> Option<DeviceId> {
        self.ctxs.get(&ctx.0).map(|c| c.dev.clone())
    }

    /// Host memory at a fresh, never reused, page-aligned address.
    pub fn alloc_memory(&mut self, len: usize) -> Memory {
        let addr = self.next_mem;
        let pages = (len as u64).div_ceil(4096).max(1);
        self.next_mem += (pages + 1) * 4096;
        Memory::new(std::sync::Arc::new(relink_fabric::HeapMemory::new(
            addr, len,
        )))
    }

    fn ctx_dev(&self, ctx: ContextId) -> Result<DeviceId, CreateError> {
        let c = self
            .ctxs
            .get(&ctx.0)
            .ok_or(CreateError::InvalidHandle("context"))?;
        if !self.alive(&c.dev) {
            return Err(CreateError::DeviceLost);
        }
        Ok(c.dev.clone())
    }

    fn pd_dev(&self, pd: PdId) -> Result<DeviceId, CreateError> {
        let p = self
            .pds
            .get(&pd.0)
            .ok_or(CreateError::InvalidHandle("PD"))?;
        if !self.alive(&p.dev) {
            return Err(CreateError::DeviceLost);
        }
        Ok(p.dev.clone())
    }

    /// Allocate a PD.
    pub fn alloc_pd(&mut self, ctx: ContextId) -> Result<PdId, CreateError> {
        let dev = self.ctx_dev(ctx)?;
        let h = self.handle();
        self.pds.insert(h, Pd { ctx: ctx.0, dev });
        Ok(PdId(h))
    }

    /// Free a PD.
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<Destroyed, DestroyError> {
        if !self.pds.contains_key(&pd.0) {
            return Err(DestroyError::InvalidHandle("PD"));
        }
        if self.mrs.values().any(|m| m.pd == pd.0)
            || self.mws.values().any(|m| m.pd == pd.0)
            || self.qps.values().any(|q| q.pd == pd.0)
            || self.srqs.values().any(|s| s.pd == pd.0)
        {
            return Err(DestroyError::Busy("PD"));
        }
        let dev = self.pds.remove(&pd.0).expect("present").dev;
        Ok(self.destroyed(&dev))
    }

    /// Create a CQ.
    pub fn create_cq(&mut self, ctx: ContextId, depth: u32) -> Result<CqId, CreateError> {
        let dev = self.ctx_dev(ctx)?;
        if depth == 0 || depth > 1 << 20 {
            return Err(CreateError::InvalidArgument(format!(
                "CQ depth {depth} (1..=1048576)"
            )));
        }
        let h = self.handle();
        self.cqs.insert(
            h,
            Cq {
                ctx: ctx.0,
                dev,
                depth,
                entries: VecDeque::new(),
                armed: None,
            },
        );
        Ok(CqId(h))
    }

    /// Destroy a CQ.
    pub fn destroy_cq(&mut self, cq: CqId) -> Result<Destroyed, DestroyError> {
        if !self.cqs.contains_key(&cq.0) {
            return Err(DestroyError::InvalidHandle("CQ"));
        }
        if self
            .qps
            .values()
            .any(|q| q.init.send_cq == cq || q.init.recv_cq == cq)
        {
            return Err(DestroyError::Busy("CQ"));
        }
        let dev = self.cqs.remove(&cq.0).expect("present").dev;
        Ok(self.destroyed(&dev))
    }

    /// Arm a CQ for one notification.
    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> Result<(), PollError> {
        let c = self.cqs.get_mut(&cq.0).ok_or(PollError::InvalidHandle)?;
        c.armed = Some(solicited_only);
        Ok(())
    }

    /// Poll a CQ.
    pub fn poll_cq(
        &mut self,
        cq: CqId,
        max: usize,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize, PollError> {
        let c = self.cqs.get_mut(&cq.0).ok_or(PollError::InvalidHandle)?;
        let n = max.min(c.entries.len());
        out.extend(c.entries.drain(..n));
        Ok(n)
    }

    fn complete(&mut self, cq: CqId, wc: WorkCompletion, solicited: bool) {
        let Some(c) = self.cqs.get_mut(&cq.0) else {
            return;
        };
        c.entries.push_back(wc);
        let overflow = c.entries.len() > c.depth as usize;
        let notify = match c.armed {
            Some(true) => solicited || !wc.status.is_ok(),
            Some(false) => true,
            None => false,
        };
        if notify {
            c.armed = None;
        }
        let ctx = c.ctx;
        self.activity = true;
        if notify {
            self.push_event(Event::CqReady(cq));
        }
        if overflow {
            self.push_event(Event::Async {
                ctx: ContextId(ctx),
                event: AsyncEvent::CqErr(cq),
            });
        }
    }

    // ------------------------------------------------------------------
    // SRQ, MR, MW
    // ------------------------------------------------------------------

    /// Create an SRQ.
    pub fn create_srq(&mut self, pd: PdId, init: SrqInit) -> Result<SrqId, CreateError> {
        let dev = self.pd_dev(pd)?;
        if init.max_wr == 0 || init.max_sge == 0 {
            return Err(CreateError::InvalidArgument(
                "SRQ max_wr and max_sge must be > 0".into(),
            ));
        }
        let h = self.handle();
        self.srqs.insert(
            h,
            Srq {
                pd: pd.0,
                dev,
                init,
                queue: VecDeque::new(),
            },
        );
        Ok(SrqId(h))
    }

    /// Destroy an SRQ.
    pub fn destroy_srq(&mut self, srq: SrqId) -> Result<Destroyed, DestroyError> {
        if !self.srqs.contains_key(&srq.0) {
            return Err(DestroyError::InvalidHandle("SRQ"));
        }
        if self.qps.values().any(|q| q.init.srq == Some(srq)) {
            return Err(DestroyError::Busy("SRQ"));
        }
        let dev = self.srqs.remove(&srq.0).expect("present").dev;
        Ok(self.destroyed(&dev))
    }

    /// Post receives to an SRQ.
    pub fn post_srq_recv(&mut self, srq: SrqId, wrs: &[RecvWr]) -> Result<(), PostError> {
        let s = self
            .srqs
            .get(&srq.0)
            .ok_or(PostError::InvalidHandle("SRQ"))?;
        if !self.alive(&s.dev) {
            return Err(PostError::DeviceLost { posted: 0 });
        }
        let s = self.srqs.get_mut(&srq.0).expect("present");
        for (i, wr) in wrs.iter().enumerate() {
            wr.check(s.init.max_sge, i)?;
            if s.queue.len() >= s.init.max_wr as usize {
                return Err(PostError::QueueFull { posted: i });
            }
            s.queue.push_back(wr.clone());
        }
        Ok(())
    }

    /// Register memory.
    pub fn reg_mr(
        &mut self,
        pd: PdId,
        memory: &Memory,
        addr: u64,
        length: u64,
        access: Access,
    ) -> Result<MrInfo, CreateError> {
        let dev = self.pd_dev(pd)?;
        relink_fabric::check_reg_mr(memory, addr, length, access)?;
        let h = self.handle();
        let key = self.key();
        let info = MrInfo {
            id: MrId(h),
            addr,
            length,
            lkey: key,
            rkey: key,
            access,
        };
        self.mr_keys.insert(key, h);
        self.mrs.insert(
            h,
            Mr {
                pd: pd.0,
                dev,
                memory: memory.clone(),
                info,
            },
        );
        Ok(info)
    }

    /// Deregister memory.
    pub fn dereg_mr(&mut self, mr: MrId) -> Result<Destroyed, DestroyError> {
        if !self.mrs.contains_key(&mr.0) {
            return Err(DestroyError::InvalidHandle("MR"));
        }
        if self
            .mws
            .values()
            .any(|w| w.bound.is_some_and(|b| b.mr == mr.0))
        {
            return Err(DestroyError::Busy("MR (bound memory windows)"));
        }
        let m = self.mrs.remove(&mr.0).expect("present");
        self.mr_keys.remove(&m.info.lkey);
        let dev = m.dev;
        Ok(self.destroyed(&dev))
    }

    /// Allocate a memory window.
    pub fn alloc_mw(&mut self, pd: PdId, kind: MwType) -> Result<MwInfo, CreateError> {
        let dev = self.pd_dev(pd)?;
        let h = self.handle();
        let rkey = self.key();
        self.mw_keys.insert(rkey, h);
        self.mws.insert(
            h,
            Mw {
                pd: pd.0,
                dev,
                kind,
                rkey,
                bound: None,
            },
        );
        Ok(MwInfo {
            id: MwId(h),
            rkey,
            kind,
        })
    }

    /// Free a memory window.
    pub fn dealloc_mw(&mut self, mw: MwId) -> Result<Destroyed, DestroyError> {
        let w = self
            .mws
            .remove(&mw.0)
            .ok_or(DestroyError::InvalidHandle("MW"))?;
        self.mw_keys.remove(&w.rkey);
        let dev = w.dev;
        Ok(self.destroyed(&dev))
    }

    /// Bind a type 1 window (`ibv_bind_mw`).
    pub fn bind_mw(
        &mut self,
        qp: QpId,
        mw: MwId,
        wr_id: u64,
        bind: MwBind,
        out: &mut Outbox,
    ) -> Result<u32, PostError> {
        let w = self.mws.get(&mw.0).ok_or(PostError::InvalidHandle("MW"))?;
        if w.kind != MwType::Type1 {
            return Err(PostError::InvalidArgument {
                reason: "bind_mw is for type 1 windows; use SendOp::BindMw".into(),
                posted: 0,
            });
        }
        let old = w.rkey;
        let rkey = (old & !0xff) | (old.wrapping_add(1) & 0xff);
        let wr = SendWr::new(wr_id, SendOp::BindMw { mw, rkey, bind }, Vec::new());
        self.post_send(qp, std::slice::from_ref(&wr), out)?;
        Ok(rkey)
    }

    /// Execute a bind; returns the error status if it fails.
    fn exec_bind(&mut self, qp: u64, mw: MwId, rkey: u32, bind: MwBind) -> Result<(), WcStatus> {
        let qpd = self.qps.get(&qp).map(|q| q.pd).ok_or(WcStatus::MwBindErr)?;
        let mr = self.mrs.get(&bind.mr.0).ok_or(WcStatus::MwBindErr)?;
        let w = self.mws.get(&mw.0).ok_or(WcStatus::MwBindErr)?;
        if w.pd != qpd || mr.pd != qpd {
            return Err(WcStatus::MwBindErr);
        }
        if !mr.info.access.contains(Access::MW_BIND) {
            return Err(WcStatus::MwBindErr);
        }
        if w.kind == MwType::Type2 && w.bound.is_some() {
            return Err(WcStatus::MwBindErr);
        }
        if w.kind == MwType::Type2 && (rkey & !0xff) != (w.rkey & !0xff) {
            return Err(WcStatus::MwBindErr);
        }
        let unbind = bind.length == 0;
        if !unbind {
            let end = bind.addr.checked_add(bind.length);
            let inside = bind.addr >= mr.info.addr
                && end.is_some_and(|e| e <= mr.info.addr + mr.info.length);
            // Remote write/atomic through a window need local write on the MR.
            let rights_ok = (!bind
                .access
                .intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
                || mr.info.access.contains(Access::LOCAL_WRITE))
                && !bind.access.contains(Access::MW_BIND);
            if !inside || !rights_ok {
                return Err(WcStatus::MwBindErr);
            }
        }
        let kind = w.kind;
        let w = self.mws.get_mut(&mw.0).expect("present");
        let old = std::mem::replace(&mut w.rkey, rkey);
        self.mw_keys.remove(&old);
        self.mw_keys.insert(rkey, mw.0);
        let w = self.mws.get_mut(&mw.0).expect("present");
        w.bound = if unbind {
            None
        } else {
            Some(MwBinding {
                mr: bind.mr.0,
                addr: bind.addr,
                length: bind.length,
                access: bind.access,
                qp: (kind == MwType::Type2).then_some(qp),
            })
        };
        Ok(())
    }

    /// Invalidate a type 2 window by rkey (LOCAL_INV or SEND_WITH_INV).
    fn invalidate(&mut self, pd: u64, rkey: u32) -> bool {
        let Some(w) = self.mw_keys.get(&rkey).and_then(|h| self.mws.get_mut(h)) else {
            return false;
        };
        if w.pd == pd && w.kind == MwType::Type2 && w.bound.is_some() {
            w.bound = None;
            return true;
        }
        false
    }

    fn mr_by_key(&self, key: u32) -> Option<&Mr> {
        self.mr_keys.get(&key).and_then(|h| self.mrs.get(h))
    }

    // ------------------------------------------------------------------
    // QPs: creation, posting
    // ------------------------------------------------------------------

    /// Create an RC QP.
    pub fn create_qp(&mut self, pd: PdId, init: QpInit) -> Result<QpId, CreateError> {
        let dev = self.pd_dev(pd)?;
        for cq in [init.send_cq, init.recv_cq] {
            let c = self
                .cqs
                .get(&cq.0)
                .ok_or(CreateError::InvalidHandle("CQ"))?;
            if c.dev != dev {
                return Err(CreateError::Mismatch("CQ on another device"));
            }
        }
        if let Some(srq) = init.srq {
            let s = self
                .srqs
                .get(&srq.0)
                .ok_or(CreateError::InvalidHandle("SRQ"))?;
            if s.pd != pd.0 {
                return Err(CreateError::Mismatch("SRQ of another PD"));
            }
        }
        let c = init.caps;
        if c.max_send_wr == 0 || c.max_send_sge == 0 || c.max_send_wr > 1 << 16 {
            return Err(CreateError::InvalidArgument(
                "max_send_wr must be 1..=65536 and max_send_sge > 0".into(),
            ));
        }
        if init.srq.is_none() && (c.max_recv_wr == 0 || c.max_recv_sge == 0) {
            return Err(CreateError::InvalidArgument(
                "max_recv_wr and max_recv_sge must be > 0 without an SRQ".into(),
            ));
        }
        let h = self.handle();
        let qpn = self.next_qpn;
        self.next_qpn += 1;
        self.qpn_index.insert(qpn, h);
        self.qps.insert(
            h,
            Qp {
                pd: pd.0,
                dev,
                init,
                qpn,
                state: QpState::Init,
                params: ConnParams::default(),
                remote: None,
                local_ip: None,
                conn: 0,
                sq: VecDeque::new(),
                next_psn: 0,
                retries_left: 7,
                rnr_left: 7,
                timer_gen: 0,
                rto: None,
                rto_queued: false,
                rnr_wait: false,
                rq: VecDeque::new(),
                expected_psn: 0,
                atomic_cache: VecDeque::new(),
                last_wqe_reported: false,
            },
        );
        Ok(QpId(h))
    }

    /// Destroy a QP (flushing nothing further: its completions are dropped).
    pub fn destroy_qp(&mut self, qp: QpId) -> Result<Destroyed, DestroyError> {
        let q = self
            .qps
            .remove(&qp.0)
            .ok_or(DestroyError::InvalidHandle("QP"))?;
        self.qpn_index.remove(&q.qpn);
        for w in self.mws.values_mut() {
            if w.bound.is_some_and(|b| b.qp == Some(qp.0)) {
                w.bound = None;
            }
        }
        for cm in self.cm_ids.values_mut() {
            if cm.qp == Some(qp.0) {
                cm.qp = None;
            }
        }
        Ok(self.destroyed(&q.dev))
    }

    /// A QP's state.
    pub fn qp_state(&self, qp: QpId) -> Result<QpState, PollError> {
        self.qps
            .get(&qp.0)
            .map(|q| q.state)
            .ok_or(PollError::InvalidHandle)
    }

    /// Move a QP to error.
    pub fn qp_to_error(&mut self, qp: QpId) -> Result<(), PostError> {
        if !self.qps.contains_key(&qp.0) {
            return Err(PostError::InvalidHandle("QP"));
        }
        self.qp_error(qp.0, None);
        Ok(())
    }

    fn check_local(&self, pd: u64, sge: &Sge, write: bool) -> bool {
        self.mr_by_key(sge.lkey).is_some_and(|m| {
            m.pd == pd
                && sge.addr >= m.info.addr
                && sge
                    .addr
                    .checked_add(u64::from(sge.length))
                    .is_some_and(|e| e <= m.info.addr + m.info.length)
                && (!write || m.info.access.contains(Access::LOCAL_WRITE))
        })
    }

    fn local_memory(&self, lkey: u32) -> Option<&Memory> {
        self.mr_by_key(lkey).map(|m| &m.memory)
    }

    /// The bytes `sgl` names, in one payload: a recycled buffer from the
    /// pool, filled by one copy (never zero-filled first).
    fn gather(&mut self, sgl: &[Sge]) -> Payload {
        let total: usize = sgl.iter().map(|s| s.length as usize).sum();
        let mut payload = self.pool.take(total);
        let data = payload
            .get_mut()
            .expect("a buffer fresh from the pool is not shared");
        let mut start = 0;
        for s in sgl {
            let seg = &mut data[start..start + s.length as usize];
            start += seg.len();
            // Checked by check_local before; a segment that cannot be read
            // anyway reads as zeros, never as a recycled buffer's old bytes.
            let read = self
                .local_memory(s.lkey)
                .and_then(|m| m.read((s.addr - m.addr()) as usize, seg).ok());
            if read.is_none() {
                seg.fill(0);
            }
        }
        payload
    }

    /// Give a retired request's payload back to the pool (kept only if no
    /// packet in flight still shares it).
    fn recycle_req(&mut self, req: ReqOp) {
        if let ReqOp::Send { data, .. } | ReqOp::Write { data, .. } = req {
            self.pool.recycle(data);
        }
    }

    /// Scatter `data` over `sgl`; false if it does not fit.
    fn scatter(&self, sgl: &[Sge], data: &[u8]) -> bool {
        let cap: usize = sgl.iter().map(|s| s.length as usize).sum();
        if data.len() > cap {
            return false;
        }
        let mut rest = data;
        for s in sgl {
            if rest.is_empty() {
                break;
            }
            let n = rest.len().min(s.length as usize);
            if let Some(m) = self.local_memory(s.lkey) {
                let _ = m.write((s.addr - m.addr()) as usize, &rest[..n]);
            }
            rest = &rest[n..];
        }
        true
    }

    /// Post send requests.
    pub fn post_send(
        &mut self,
        qp: QpId,
        wrs: &[SendWr],
        out: &mut Outbox,
    ) -> Result<(), PostError> {
        let q = self.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        if !self.alive(&q.dev) {
            return Err(PostError::DeviceLost { posted: 0 });
        }
        let state = q.state;
        if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(PostError::BadState { state, posted: 0 });
        }
        let caps = q.init.caps;
        for (i, wr) in wrs.iter().enumerate() {
            let q = self.qps.get(&qp.0).expect("present");
            wr.check(caps.max_send_sge, i)?;
            if q.sq.len() >= caps.max_send_wr as usize {
                return Err(PostError::QueueFull { posted: i });
            }
            let signaled = wr.signaled || q.init.sq_sig_all;
            let q = self.qps.get_mut(&qp.0).expect("present");
            q.sq.push_back(SqEntry {
                wr_id: wr.wr_id,
                op: wr.op,
                sgl: wr.sgl.clone(),
                signaled,
                solicited: wr.solicited,
                psn: None,
                req: None,
                sent: false,
                done: if state == QpState::Rts {
                    None
                } else {
                    Some((WcStatus::WrFlushErr, 0))
                },
            });
        }
        self.pump(qp.0, out);
        Ok(())
    }

    /// Post receives.
    pub fn post_recv(&mut self, qp: QpId, wrs: &[RecvWr]) -> Result<(), PostError> {
        let q = self.qps.get(&qp.0).ok_or(PostError::InvalidHandle("QP"))?;
        if !self.alive(&q.dev) {
            return Err(PostError::DeviceLost { posted: 0 });
        }
        if q.init.srq.is_some() {
            return Err(PostError::InvalidArgument {
                reason: "QP uses an SRQ".into(),
                posted: 0,
            });
        }
        let caps = q.init.caps;
        let err = q.state == QpState::Err;
        let recv_cq = q.init.recv_cq;
        for (i, wr) in wrs.iter().enumerate() {
            wr.check(caps.max_recv_sge, i)?;
            if err {
                self.complete(
                    recv_cq,
                    WorkCompletion {
                        wr_id: wr.wr_id,
                        status: WcStatus::WrFlushErr,
                        opcode: WcOpcode::Recv,
                        qp,
                        byte_len: 0,
                        imm: None,
                        invalidated_rkey: None,
                    },
                    false,
                );
                continue;
            }
            let q = self.qps.get_mut(&qp.0).expect("present");
            if q.rq.len() >= caps.max_recv_wr as usize {
                return Err(PostError::QueueFull { posted: i });
            }
            q.rq.push_back(wr.clone());
        }
        Ok(())
    }

    /// Transmit what can be transmitted, execute local operations that
    /// reached the head, and report finished requests in order.
    fn pump(&mut self, qp: u64, out: &mut Outbox) {
        loop {
            // Report completed requests at the head, in order.
            self.drain_sq(qp);
            let Some(q) = self.qps.get(&qp) else { return };
            if q.state != QpState::Rts || q.rnr_wait {
                return;
            }
            let Some(idx) = q.sq.iter().position(|e| !e.sent) else {
                return;
            };
            let pd = q.pd;
            let entry = &q.sq[idx];
            let op = entry.op;
            let solicited = entry.solicited;
            let sgl = entry.sgl.clone();
            let writes_local = matches!(
                op,
                SendOp::Read { .. } | SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. }
            );
            if !sgl.iter().all(|s| self.check_local(pd, s, writes_local)) {
                self.qp_error(qp, Some((idx, WcStatus::LocProtErr)));
                continue;
            }
            match op {
                SendOp::BindMw { mw, rkey, bind } => {
                    if idx != 0 {
                        return; // waits for everything before it
                    }
                    let status = match self.exec_bind(qp, mw, rkey, bind) {
                        Ok(()) => WcStatus::Success,
                        Err(s) => s,
                    };
                    self.finish_local(qp, status);
                }
                SendOp::LocalInv { rkey } => {
                    if idx != 0 {
                        return;
                    }
                    let status = if self.invalidate(pd, rkey) {
                        WcStatus::Success
                    } else {
                        WcStatus::MwBindErr
                    };
                    self.finish_local(qp, status);
                }
                _ => {
                    let req = match op {
                        SendOp::Send => ReqOp::Send {
                            data: self.gather(&sgl),
                            imm: None,
                            invalidate: None,
                            solicited,
                        },
                        SendOp::SendWithImm { imm } => ReqOp::Send {
                            data: self.gather(&sgl),
                            imm: Some(imm),
                            invalidate: None,
                            solicited,
                        },
                        SendOp::SendWithInv { rkey } => ReqOp::Send {
                            data: self.gather(&sgl),
                            imm: None,
                            invalidate: Some(rkey),
                            solicited,
                        },
                        SendOp::Write { remote } => ReqOp::Write {
                            addr: remote.addr,
                            rkey: remote.rkey,
                            data: self.gather(&sgl),
                            imm: None,
                            solicited: false,
                        },
                        SendOp::WriteWithImm { remote, imm } => ReqOp::Write {
                            addr: remote.addr,
                            rkey: remote.rkey,
                            data: self.gather(&sgl),
                            imm: Some(imm),
                            solicited,
                        },
                        SendOp::Read { remote } => ReqOp::Read {
                            addr: remote.addr,
                            rkey: remote.rkey,
                            len: sgl.iter().map(|s| s.length).sum(),
                        },
                        SendOp::FetchAdd { remote, add } => ReqOp::FetchAdd {
                            addr: remote.addr,
                            rkey: remote.rkey,
                            add,
                        },
                        SendOp::CmpSwap {
                            remote,
                            compare,
                            swap,
                        } => ReqOp::CmpSwap {
                            addr: remote.addr,
                            rkey: remote.rkey,
                            compare,
                            swap,
                        },
                        SendOp::BindMw { .. } | SendOp::LocalInv { .. } => unreachable!(),
                    };
                    let q = self.qps.get_mut(&qp).expect("present");
                    let psn = q.next_psn;
                    q.next_psn = q.next_psn.wrapping_add(1);
                    let e = &mut q.sq[idx];
                    e.psn = Some(psn);
                    e.sent = true;
                    // Kept for a retransmission: the clone shares the
                    // payload with the packet, no bytes are copied.
                    e.req = Some(req.clone());
                    self.transmit(qp, psn, req, out);
                    self.arm_retransmit(qp, out);
                }
            }
        }
    }

    fn finish_local(&mut self, qp: u64, status: WcStatus) {
        let q = self.qps.get_mut(&qp).expect("present");
        let e = &mut q.sq[0];
        e.sent = true;
        e.done = Some((status, 0));
        if !status.is_ok() {
            self.qp_error(qp, None);
        }
    }

    fn transmit(&mut self, qp: u64, psn: u32, op: ReqOp, out: &mut Outbox) {
        let q = &self.qps[&qp];
        let (Some((rip, rqpn)), Some(lip)) = (q.remote, q.local_ip) else {
            return;
        };
        out.packets.push(Outgoing {
            conn: q.conn,
            packet: Packet {
                src: lip,
                dst: rip,
                body: Body::Request {
                    dst_qpn: rqpn,
                    src_qpn: q.qpn,
                    psn,
                    op,
                },
            },
        });
    }

    /// Start the retransmission clock if it is not running (a new request
    /// does not restart it: the oldest unacknowledged one counts).
    fn arm_retransmit(&mut self, qp: u64, out: &mut Outbox) {
        let q = self.qps.get_mut(&qp).expect("present");
        if q.rto.is_none() {
            self.restart_retransmit(qp, out);
        }
    }

    /// (Re)start the retransmission clock from now. One timer per QP is
    /// queued at a time; when it fires early (the deadline moved on), it is
    /// queued again for the new deadline — no pile of stale timers.
    fn restart_retransmit(&mut self, qp: u64, out: &mut Outbox) {
        if self.cfg.reliable_wire {
            return;
        }
        let q = self.qps.get_mut(&qp).expect("present");
        let at = out.now + q.params.ack_timeout_duration();
        q.rto = Some(at);
        if !q.rto_queued {
            q.rto_queued = true;
            out.timers.push((
                at,
                Timer::Retransmit {
                    qp,
                    gen: q.timer_gen,
                },
            ));
        }
    }

    fn drain_sq(&mut self, qp: u64) {
        loop {
            let Some(q) = self.qps.get_mut(&qp) else {
                return;
            };
            let Some(front) = q.sq.front() else { return };
            let Some((status, byte_len)) = front.done else {
                return;
            };
            let e = q.sq.pop_front().expect("front");
            let cq = q.init.send_cq;
            if e.signaled || !status.is_ok() {
                self.complete(
                    cq,
                    WorkCompletion {
                        wr_id: e.wr_id,
                        status,
                        opcode: e.op.wc_opcode(),
                        qp: QpId(qp),
                        byte_len,
                        imm: None,
                        invalidated_rkey: None,
                    },
                    false,
                );
            }
            if let Some(req) = e.req {
                self.recycle_req(req);
            }
        }
    }

    /// Put a QP in the error state: `first` (index into the send queue)
    /// completes with the given status, everything else not finished flushes.
    fn qp_error(&mut self, qp: u64, first: Option<(usize, WcStatus)>) {
        let Some(q) = self.qps.get_mut(&qp) else {
            return;
        };
        q.state = QpState::Err;
        q.timer_gen += 1;
        q.rto = None;
        q.rto_queued = false;
        q.rnr_wait = false;
        for (i, e) in q.sq.iter_mut().enumerate() {
            if e.done.is_none() {
                let status = match first {
                    Some((fi, s)) if fi == i => s,
                    _ => WcStatus::WrFlushErr,
                };
                e.done = Some((status, 0));
                e.sent = true;
            }
        }
        let rq: Vec<RecvWr> = q.rq.drain(..).collect();
        let recv_cq = q.init.recv_cq;
        let srq = q.init.srq;
        let report_last = srq.is_some() && !q.last_wqe_reported;
        q.last_wqe_reported = true;
        // An affiliated event: it goes to the context that owns the QP.
        let ctx = self.pds.get(&q.pd).map(|p| p.ctx);
        self.drain_sq(qp);
        for wr in rq {
            self.complete(
                recv_cq,
                WorkCompletion {
                    wr_id: wr.wr_id,
                    status: WcStatus::WrFlushErr,
                    opcode: WcOpcode::Recv,
                    qp: QpId(qp),
                    byte_len: 0,
                    imm: None,
                    invalidated_rkey: None,
                },
                false,
            );
        }
        if let (true, Some(ctx)) = (report_last, ctx) {
            self.push_event(Event::Async {
                ctx: ContextId(ctx),
                event: AsyncEvent::QpLastWqeReached(QpId(qp)),
            });
        }
    }

    // ------------------------------------------------------------------
    // RC engine: the responder
    // ------------------------------------------------------------------

    fn resolve_remote(
        &self,
        qp: u64,
        rkey: u32,
        addr: u64,
        len: u64,
        right: Access,
    ) -> Result<(Memory, usize), NakCode> {
        let q = &self.qps[&qp];
        let in_range = |base: u64, blen: u64| {
            addr >= base && addr.checked_add(len).is_some_and(|e| e <= base + blen)
        };
        if let Some(m) = self.mr_by_key(rkey) {
            if m.dev == q.dev
                && m.pd == q.pd
                && m.info.access.contains(right)
                && in_range(m.info.addr, m.info.length)
            {
                return Ok((m.memory.clone(), (addr - m.memory.addr()) as usize));
            }
            return Err(NakCode::RemoteAccess);
        }
        if let Some(w) = self.mw_keys.get(&rkey).and_then(|h| self.mws.get(h)) {
            if let Some(b) = w.bound {
                let qp_ok = b.qp.is_none_or(|bq| bq == qp);
                if w.dev == q.dev
                    && w.pd == q.pd
                    && qp_ok
                    && b.access.contains(right)
                    && in_range(b.addr, b.length)
                {
                    if let Some(m) = self.mrs.get(&b.mr) {
                        return Ok((m.memory.clone(), (addr - m.memory.addr()) as usize));
                    }
                }
            }
        }
        Err(NakCode::RemoteAccess)
    }

    fn take_recv(&mut self, qp: u64) -> Option<RecvWr> {
        let q = self.qps.get_mut(&qp)?;
        match q.init.srq {
            Some(srq) => self.srqs.get_mut(&srq.0)?.queue.pop_front(),
            None => q.rq.pop_front(),
        }
    }

    fn respond(&mut self, qp: u64, psn: u32, kind: RespKind, out: &mut Outbox) {
        let q = &self.qps[&qp];
        let (Some((rip, rqpn)), Some(lip)) = (q.remote, q.local_ip) else {
            return;
        };
        out.packets.push(Outgoing {
            conn: q.conn,
            packet: Packet {
                src: lip,
                dst: rip,
                body: Body::Response {
                    dst_qpn: rqpn,
                    src_qpn: q.qpn,
                    psn,
                    kind,
                },
            },
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn recv_completion(
        &mut self,
        qp: u64,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm: Option<u32>,
        invalidated_rkey: Option<u32>,
        solicited: bool,
    ) {
        let cq = self.qps[&qp].init.recv_cq;
        self.complete(
            cq,
            WorkCompletion {
                wr_id,
                status,
                opcode,
                qp: QpId(qp),
                byte_len,
                imm,
                invalidated_rkey,
            },
            solicited,
        );
    }

    /// Responder error of class C: NAK, then the responder QP goes to error.
    fn responder_fail(&mut self, qp: u64, psn: u32, code: NakCode, out: &mut Outbox) {
        self.respond(qp, psn, RespKind::Nak(code), out);
        self.qp_error(qp, None);
    }

    fn on_request(
        &mut self,
        src: IpAddr,
        src_qpn: u32,
        dst_qpn: u32,
        psn: u32,
        op: &ReqOp,
        out: &mut Outbox,
    ) {
        let Some(&qp) = self.qpn_index.get(&dst_qpn) else {
            return;
        };
        let q = &self.qps[&qp];
        if q.remote != Some((src, src_qpn))
            || !matches!(q.state, QpState::Rtr | QpState::Rts)
            || !self.port_active(&q.dev)
        {
            return;
        }
        let expected = q.expected_psn;
        if psn != expected {
            if psn_le(psn, expected.wrapping_sub(1)) {
                self.on_duplicate(qp, psn, op, out);
            }
            // Out of order (a lost packet before it): drop, the requester
            // retransmits on timeout.
            return;
        }
        match *op {
            ReqOp::Send {
                ref data,
                imm,
                invalidate,
                solicited,
            } => {
                let Some(wr) = self.take_recv(qp) else {
                    self.respond(qp, psn, RespKind::Nak(NakCode::Rnr), out);
                    return;
                };
                let pd = self.qps[&qp].pd;
                if !wr.sgl.iter().all(|s| self.check_local(pd, s, true)) {
                    self.recv_completion(
                        qp,
                        wr.wr_id,
                        WcStatus::LocProtErr,
                        WcOpcode::Recv,
                        0,
                        None,
                        None,
                        false,
                    );
                    self.responder_fail(qp, psn, NakCode::RemoteOperation, out);
                    return;
                }
                if !self.scatter(&wr.sgl, data) {
                    self.recv_completion(
                        qp,
                        wr.wr_id,
                        WcStatus::LocLenErr,
                        WcOpcode::Recv,
                        0,
                        None,
                        None,
                        false,
                    );
                    self.responder_fail(qp, psn, NakCode::InvalidRequest, out);
                    return;
                }
                if let Some(rkey) = invalidate {
                    if !self.invalidate(pd, rkey) {
                        self.recv_completion(
                            qp,
                            wr.wr_id,
                            WcStatus::RemInvReqErr,
                            WcOpcode::Recv,
                            0,
                            None,
                            None,
                            false,
                        );
                        self.responder_fail(qp, psn, NakCode::InvalidRequest, out);
                        return;
                    }
                }
                self.qps.get_mut(&qp).expect("present").expected_psn = psn.wrapping_add(1);
                self.recv_completion(
                    qp,
                    wr.wr_id,
                    WcStatus::Success,
                    WcOpcode::Recv,
                    data.len() as u32,
                    imm,
                    invalidate,
                    solicited,
                );
                self.respond(qp, psn, RespKind::Ack, out);
            }
            ReqOp::Write {
                addr,
                rkey,
                ref data,
                imm,
                solicited,
            } => {
                let target = if data.is_empty() {
                    None
                } else {
                    match self.resolve_remote(
                        qp,
                        rkey,
                        addr,
                        data.len() as u64,
                        Access::REMOTE_WRITE,
                    ) {
                        Ok(t) => Some(t),
                        Err(code) => {
                            self.responder_fail(qp, psn, code, out);
                            return;
                        }
                    }
                };
                let wr = if imm.is_some() {
                    match self.take_recv(qp) {
                        Some(wr) => Some(wr),
                        None => {
                            self.respond(qp, psn, RespKind::Nak(NakCode::Rnr), out);
                            return;
                        }
                    }
                } else {
                    None
                };
                if let Some((mem, off)) = target {
                    let _ = mem.write(off, data);
                }
                self.qps.get_mut(&qp).expect("present").expected_psn = psn.wrapping_add(1);
                if let Some(wr) = wr {
                    self.recv_completion(
                        qp,
                        wr.wr_id,
                        WcStatus::Success,
                        WcOpcode::RecvRdmaWithImm,
                        data.len() as u32,
                        imm,
                        None,
                        solicited,
                    );
                }
                self.respond(qp, psn, RespKind::Ack, out);
            }
            ReqOp::Read { .. } | ReqOp::FetchAdd { .. } | ReqOp::CmpSwap { .. } => {
                match self.execute_read_atomic(qp, psn, op) {
                    Ok(kind) => {
                        self.qps.get_mut(&qp).expect("present").expected_psn = psn.wrapping_add(1);
                        self.respond(qp, psn, kind, out);
                    }
                    Err(code) => self.responder_fail(qp, psn, code, out),
                }
            }
        }
    }

    fn execute_read_atomic(&mut self, qp: u64, psn: u32, op: &ReqOp) -> Result<RespKind, NakCode> {
        match *op {
            ReqOp::Read { addr, rkey, len } => {
                if len == 0 {
                    return Ok(RespKind::ReadData(Payload::empty()));
                }
                let (mem, off) =
                    self.resolve_remote(qp, rkey, addr, u64::from(len), Access::REMOTE_READ)?;
                let mut data = self.pool.take(len as usize);
                let buf = data
                    .get_mut()
                    .expect("a buffer fresh from the pool is not shared");
                if mem.read(off, buf).is_err() {
                    self.pool.recycle(data);
                    return Err(NakCode::RemoteAccess);
                }
                Ok(RespKind::ReadData(data))
            }
            ReqOp::FetchAdd { addr, rkey, .. } | ReqOp::CmpSwap { addr, rkey, .. } => {
                if addr % 8 != 0 {
                    return Err(NakCode::InvalidRequest);
                }
                let (mem, off) = self.resolve_remote(qp, rkey, addr, 8, Access::REMOTE_ATOMIC)?;
                let orig = match *op {
                    ReqOp::FetchAdd { add, .. } => mem.fetch_add(off, add),
                    ReqOp::CmpSwap { compare, swap, .. } => mem.compare_swap(off, compare, swap),
                    _ => unreachable!(),
                }
                .map_err(|_| NakCode::InvalidRequest)?;
                let q = self.qps.get_mut(&qp).expect("present");
                q.atomic_cache.push_back((psn, orig));
                if q.atomic_cache.len() > ATOMIC_CACHE {
                    q.atomic_cache.pop_front();
                }
                Ok(RespKind::AtomicOrig(orig))
            }
            _ => Err(NakCode::InvalidRequest),
        }
    }

    /// A retransmitted request that already executed: answer it again
    /// without executing it twice (reads re-read, atomics replay the saved
    /// result).
    fn on_duplicate(&mut self, qp: u64, psn: u32, op: &ReqOp, out: &mut Outbox) {
        let kind = match op {
            ReqOp::Read { .. } => match self.execute_read_atomic(qp, psn, op) {
                Ok(k) => k,
                Err(_) => return,
            },
            ReqOp::FetchAdd { .. } | ReqOp::CmpSwap { .. } => {
                match self.qps[&qp].atomic_cache.iter().find(|(p, _)| *p == psn) {
                    Some((_, v)) => RespKind::AtomicOrig(*v),
                    None => return,
                }
            }
            _ => RespKind::Ack,
        };
        self.respond(qp, psn, kind, out);
    }

    // ------------------------------------------------------------------
    // RC engine: the requester
    // ------------------------------------------------------------------

    fn on_response(
        &mut self,
        src: IpAddr,
        src_qpn: u32,
        dst_qpn: u32,
        psn: u32,
        kind: RespKind,
        out: &mut Outbox,
    ) {
        let Some(&qp) = self.qpn_index.get(&dst_qpn) else {
            return;
        };
        let q = &self.qps[&qp];
        if q.remote != Some((src, src_qpn)) || q.state != QpState::Rts || !self.port_active(&q.dev)
        {
            return;
        }
        // Entries up to (excluding) `psn` are acknowledged by any response
        // for `psn`; an ACK also covers `psn` itself.
        let mut progress = false;
        let mut target: Option<usize> = None;
        {
            let q = self.qps.get_mut(&qp).expect("present");
            for (i, e) in q.sq.iter_mut().enumerate() {
                let Some(ep) = e.psn else { continue };
                if e.done.is_some() {
                    continue;
                }
                if ep == psn {
                    target = Some(i);
                    break;
                }
                if !psn_le(ep, psn) {
                    break;
                }
                // An earlier request: a SEND/WRITE is implicitly acknowledged;
                // a READ/atomic still needs its own response.
                if matches!(
                    e.req,
                    Some(ReqOp::Read { .. } | ReqOp::FetchAdd { .. } | ReqOp::CmpSwap { .. })
                ) {
                    break;
                }
                e.done = Some((WcStatus::Success, e.sgl.iter().map(|s| s.length).sum()));
                progress = true;
            }
        }
        if let Some(i) = target {
            let q = &self.qps[&qp];
            let e = &q.sq[i];
            let sgl = e.sgl.clone();
            let is_read_atomic = matches!(
                e.req,
                Some(ReqOp::Read { .. } | ReqOp::FetchAdd { .. } | ReqOp::CmpSwap { .. })
            );
            let outcome = match kind {
                RespKind::Ack if !is_read_atomic => {
                    Some((WcStatus::Success, sgl.iter().map(|s| s.length).sum()))
                }
                RespKind::Ack => None,
                RespKind::ReadData(data) => {
                    let len = data.len() as u32;
                    let fits = self.scatter(&sgl, &data);
                    self.pool.recycle(data);
                    if fits {
                        Some((WcStatus::Success, len))
                    } else {
                        Some((WcStatus::LocLenErr, 0))
                    }
                }
                RespKind::AtomicOrig(v) => {
                    self.scatter(&sgl, &v.to_ne_bytes());
                    Some((WcStatus::Success, 8))
                }
                RespKind::Nak(NakCode::Rnr) => {
                    // The responder is alive: the transport retry budget
                    // starts again.
                    let q = self.qps.get_mut(&qp).expect("present");
                    q.retries_left = q.params.retry_count;
                    self.start_rnr_wait(qp, i, out);
                    None
                }
                RespKind::Nak(code) => {
                    let status = match code {
                        NakCode::RemoteAccess => WcStatus::RemAccessErr,
                        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                        NakCode::RemoteOperation | NakCode::Rnr => WcStatus::RemOpErr,
                    };
                    self.qp_error(qp, Some((i, status)));
                    self.drain_sq(qp);
                    return;
                }
            };
            if let Some(done) = outcome {
                if let Some(q) = self.qps.get_mut(&qp) {
                    q.sq[i].done = Some(done);
                    progress = true;
                    if !done.0.is_ok() {
                        self.qp_error(qp, None);
                        return;
                    }
                }
            }
        }
        if progress {
            let q = self.qps.get_mut(&qp).expect("present");
            q.retries_left = q.params.retry_count;
            q.rnr_left = q.params.rnr_retry_count;
            if !q.rnr_wait {
                let outstanding = q.sq.iter().any(|e| e.sent && e.done.is_none());
                if outstanding {
                    self.restart_retransmit(qp, out);
                } else {
                    q.rto = None;
                }
            }
        }
        self.pump(qp, out);
    }

    fn start_rnr_wait(&mut self, qp: u64, idx: usize, out: &mut Outbox) {
        let q = self.qps.get_mut(&qp).expect("present");
        if q.params.rnr_retry_count != 7 {
            if q.rnr_left == 0 {
                self.qp_error(qp, Some((idx, WcStatus::RnrRetryExcErr)));
                return;
            }
            q.rnr_left -= 1;
        }
        q.rnr_wait = true;
        q.timer_gen += 1;
        q.rto = None;
        q.rto_queued = false;
        out.timers.push((
            out.now + Duration::from_micros(640),
            Timer::Rnr {
                qp,
                gen: q.timer_gen,
            },
        ));
    }

    fn retransmit_unacked(&mut self, qp: u64, out: &mut Outbox) {
        let q = &self.qps[&qp];
        let resend: Vec<(u32, ReqOp)> =
            q.sq.iter()
                .filter(|e| e.sent && e.done.is_none())
                .filter_map(|e| Some((e.psn?, e.req.clone()?)))
                .collect();
        for (psn, req) in resend {
            self.transmit(qp, psn, req, out);
        }
    }

    /// A timer the host asked for fired.
    pub fn fire(&mut self, timer: Timer, out: &mut Outbox) {
        match timer {
            Timer::Retransmit { qp, gen } => {
                let Some(q) = self.qps.get_mut(&qp) else {
                    return;
                };
                if q.timer_gen != gen {
                    return; // stale
                }
                q.rto_queued = false;
                if q.state != QpState::Rts {
                    return;
                }
                match q.rto {
                    None => return,
                    Some(at) if at > out.now => {
                        // The clock restarted since this timer was queued.
                        q.rto_queued = true;
                        out.timers.push((at, Timer::Retransmit { qp, gen }));
                        return;
                    }
                    Some(_) => q.rto = None,
                }
                let Some(first) = q.sq.iter().position(|e| e.sent && e.done.is_none()) else {
                    return;
                };
                if q.retries_left == 0 {
                    self.qp_error(qp, Some((first, WcStatus::RetryExcErr)));
                    return;
                }
                q.retries_left -= 1;
                self.retransmit_unacked(qp, out);
                self.restart_retransmit(qp, out);
            }
            Timer::Rnr { qp, gen } => {
                let Some(q) = self.qps.get_mut(&qp) else {
                    return;
                };
                if q.timer_gen != gen || q.state != QpState::Rts {
                    return;
                }
                q.rnr_wait = false;
                self.retransmit_unacked(qp, out);
                self.restart_retransmit(qp, out);
                self.pump(qp, out);
            }
            Timer::Cm { id, gen } => self.cm_timeout(id, gen, out),
        }
    }

    // ------------------------------------------------------------------
    // connection management
    // ------------------------------------------------------------------

    fn cm(&self, id: CmId) -> Result<&CmIdState, CmError> {
        self.cm_ids
            .get(&id.0)
            .ok_or(CmError::InvalidHandle("CM id"))
    }

    fn cm_mut(&mut self, id: CmId) -> Result<&mut CmIdState, CmError> {
        self.cm_ids
            .get_mut(&id.0)
            .ok_or(CmError::InvalidHandle("CM id"))
    }

    fn send_cm(&self, conn: u64, src: IpAddr, dst: IpAddr, msg: CmMsg, out: &mut Outbox) {
        out.packets.push(Outgoing {
            conn,
            packet: Packet {
                src,
                dst,
                body: Body::Cm(msg),
            },
        });
    }

    fn arm_cm_timer(&mut self, id: u64, out: &mut Outbox) {
        let timeout = self.cfg.cm_timeout;
        let cm = self.cm_ids.get_mut(&id).expect("present");
        cm.timer_gen += 1;
        out.timers.push((
            out.now + timeout,
            Timer::Cm {
                id,
                gen: cm.timer_gen,
            },
        ));
    }

    fn ephemeral_port(&mut self) -> u16 {
        loop {
            let p = self.next_port;
            self.next_port = if self.next_port >= 60999 {
                40000
            } else {
                self.next_port + 1
            };
            if !self
                .cm_ids
                .values()
                .any(|c| c.bound && c.local.is_some_and(|a| a.port() == p))
            {
                return p;
            }
        }
    }

    /// A new CM id.
    pub fn cm_create_id(&mut self) -> CmId {
        let h = self.handle();
        self.cm_ids.insert(h, CmIdState::new());
        CmId(h)
    }

    /// Bind an id to a local address.
    pub fn cm_bind(&mut self, id: CmId, addr: SocketAddr) -> Result<SocketAddr, CmError> {
        if self.cm(id)?.state != CmState::Idle {
            return Err(CmError::BadState("bind needs a fresh id"));
        }
        let device = if addr.ip().is_unspecified() {
            None
        } else {
            Some(
                self.device_owning(addr.ip())
                    .ok_or(CmError::AddrNotAvailable(addr.ip()))?
                    .id
                    .clone(),
            )
        };
        let port = if addr.port() == 0 {
            self.ephemeral_port()
        } else {
            addr.port()
        };
        let clash = self.cm_ids.values().any(|c| {
            c.bound
                && !matches!(c.state, CmState::Removed | CmState::Failed)
                && c.local.is_some_and(|l| {
                    l.port() == port
                        && (l.ip() == addr.ip()
                            || l.ip().is_unspecified()
                            || addr.ip().is_unspecified())
                })
        });
        let local = SocketAddr::new(addr.ip(), port);
        if clash {
            return Err(CmError::AddrInUse(local));
        }
        let cm = self.cm_mut(id)?;
        cm.local = Some(local);
        cm.device = device;
        cm.state = CmState::Bound;
        cm.bound = true;
        Ok(local)
    }

    /// Listen on the bound address.
    pub fn cm_listen(&mut self, id: CmId, _backlog: u32, out: &mut Outbox) -> Result<(), CmError> {
        let cm = self.cm(id)?;
        if cm.state != CmState::Bound {
            return Err(CmError::BadState("listen needs a bound id"));
        }
        if let Some(d) = &cm.device {
            if !self.alive(d) {
                return Err(CmError::DeviceLost);
            }
        }
        let local = cm.local.expect("bound");
        self.cm_mut(id)?.state = CmState::Listening;
        out.controls.push(Control::Listen(local));
        Ok(())
    }

    /// Resolve a destination to a local device.
    pub fn cm_resolve_addr(
        &mut self,
        id: CmId,
        src: Option<IpAddr>,
        dst: SocketAddr,
        timeout: Duration,
        out: &mut Outbox,
    ) -> Result<(), CmError> {
        let cm = self.cm(id)?;
        if !matches!(cm.state, CmState::Idle | CmState::Bound) {
            return Err(CmError::BadState("resolve_addr needs a fresh or bound id"));
        }
        let bound_port = cm.local.map(|a| a.port());
        let src = src.or(cm.local.map(|a| a.ip()).filter(|i| !i.is_unspecified()));
        let dev = match src {
            Some(s) => Some(
                self.device_owning(s)
                    .ok_or(CmError::AddrNotAvailable(s))?
                    .clone(),
            ),
            None => self.route(dst.ip()).cloned(),
        };
        let Some(dev) = dev.filter(|d| d.port_state == PortState::Active) else {
            self.cm_mut(id)?.state = CmState::Failed;
            self.cm_event(id.0, CmEventKind::AddrError);
            return Ok(());
        };
        let lip = match src {
            Some(s) => s,
            None => dev
                .addrs
                .iter()
                .find(|n| n.contains(dst.ip()))
                .or(dev.addrs.first())
                .map(|n| n.addr)
                .ok_or(CmError::AddrNotAvailable(dst.ip()))?,
        };
        let port = match bound_port {
            Some(p) => p,
            None => self.ephemeral_port(),
        };
        let cm = self.cm_mut(id)?;
        cm.device = Some(dev.id.clone());
        cm.local = Some(SocketAddr::new(lip, port));
        cm.peer = Some(dst);
        cm.state = CmState::ResolvingAddr;
        cm.timer_gen += 1;
        out.timers.push((
            out.now + timeout,
            Timer::Cm {
                id: id.0,
                gen: cm.timer_gen,
            },
        ));
        self.send_cm_arp(id.0, lip, dst.ip(), out);
        Ok(())
    }

    fn send_cm_arp(&self, id: u64, src: IpAddr, dst: IpAddr, out: &mut Outbox) {
        out.packets.push(Outgoing {
            conn: 0,
            packet: Packet {
                src,
                dst,
                body: Body::ArpRequest { cookie: id },
            },
        });
    }

    /// The local device that reaches `dst`: one that owns it, else the
    /// longest matching prefix.
    fn route(&self, dst: IpAddr) -> Option<&DeviceInfo> {
        if let Some(d) = self.device_owning(dst) {
            return Some(d);
        }
        self.devices
            .values()
            .map(|d| &d.info)
            .filter_map(|i| {
                i.addrs
                    .iter()
                    .filter(|n| n.contains(dst))
                    .map(|n| n.prefix)
                    .max()
                    .map(|p| (p, i))
            })
            .max_by_key(|(p, _)| *p)
            .map(|(_, i)| i)
    }

    /// Resolve the route of a resolved id.
    pub fn cm_resolve_route(&mut self, id: CmId) -> Result<(), CmError> {
        let cm = self.cm(id)?;
        if cm.state != CmState::AddrResolved {
            return Err(CmError::BadState("resolve_route needs a resolved address"));
        }
        let ok = cm.device.as_ref().is_some_and(|d| self.port_active(d));
        if ok {
            self.cm_mut(id)?.state = CmState::RouteResolved;
            self.cm_event(id.0, CmEventKind::RouteResolved);
        } else {
            self.cm_mut(id)?.state = CmState::Failed;
            self.cm_event(id.0, CmEventKind::RouteError);
        }
        Ok(())
    }

    /// The device of an id.
    pub fn cm_device(&self, id: CmId) -> Option<DeviceId> {
        self.cm_ids.get(&id.0).and_then(|c| c.device.clone())
    }

    /// Local and peer addresses of an id.
    pub fn cm_addrs(&self, id: CmId) -> (Option<SocketAddr>, Option<SocketAddr>) {
        self.cm_ids
            .get(&id.0)
            .map(|c| (c.local, c.peer))
            .unwrap_or((None, None))
    }

    fn check_cm_qp(&self, cm: &CmIdState, qp: QpId) -> Result<(), CmError> {
        let q = self.qps.get(&qp.0).ok_or(CmError::InvalidHandle("QP"))?;
        let dev = cm
            .device
            .as_ref()
            .ok_or(CmError::BadState("id has no device"))?;
        if !self.alive(dev) {
            return Err(CmError::DeviceLost);
        }
        if q.dev != *dev {
            return Err(CmError::BadState("QP is on another device than the id"));
        }
        if q.state != QpState::Init || q.conn != 0 {
            return Err(CmError::BadState("QP already used"));
        }
        Ok(())
    }

    /// Tie a QP to connection `conn`; returns its QP number.
    fn bind_qp(&mut self, qp: QpId, conn: u64, params: ConnParams, local: IpAddr) -> u32 {
        let q = self.qps.get_mut(&qp.0).expect("checked");
        q.conn = conn;
        q.params = params;
        q.retries_left = params.retry_count;
        q.rnr_left = params.rnr_retry_count;
        q.local_ip = Some(local);
        q.qpn
    }

    /// Connect to the resolved peer.
    pub fn cm_connect(
        &mut self,
        id: CmId,
        qp: QpId,
        params: ConnParams,
        private_data: &[u8],
        out: &mut Outbox,
    ) -> Result<(), CmError> {
        check_private_data(private_data, MAX_CONNECT_PRIVATE_DATA)?;
        let cm = self.cm(id)?;
        if cm.state != CmState::RouteResolved {
            return Err(CmError::BadState("connect needs a resolved route"));
        }
        self.check_cm_qp(cm, qp)?;
        let local = cm.local.expect("resolved");
        let peer = cm.peer.expect("resolved");
        let conn = (u64::from(self.cfg.tag) << 32) | u64::from(self.next_conn);
        self.next_conn += 1;
        let qpn = self.bind_qp(qp, conn, params, local.ip());
        let cm = self.cm_mut(id)?;
        cm.conn = conn;
        cm.qp = Some(qp.0);
        cm.initiator = true;
        cm.params = params;
        cm.state = CmState::Connecting;
        self.arm_cm_timer(id.0, out);
        self.send_cm(
            conn,
            local.ip(),
            peer.ip(),
            CmMsg::Req {
                conn_id: conn,
                src_port: local.port(),
                dst_port: peer.port(),
                qpn,
                params,
                private_data: private_data.to_vec(),
            },
            out,
        );
        Ok(())
    }

    /// Accept a connection request.
    pub fn cm_accept(
        &mut self,
        id: CmId,
        qp: QpId,
        private_data: &[u8],
        out: &mut Outbox,
    ) -> Result<(), CmError> {
        check_private_data(private_data, MAX_ACCEPT_PRIVATE_DATA)?;
        let cm = self.cm(id)?;
        if cm.state != CmState::RequestReceived {
            return Err(CmError::BadState("accept needs a connection request"));
        }
        self.check_cm_qp(cm, qp)?;
        let local = cm.local.expect("request");
        let peer = cm.peer.expect("request");
        let (conn, rqpn, params) = (cm.conn, cm.remote_qpn, cm.params);
        let qpn = self.bind_qp(qp, conn, params, local.ip());
        let q = self.qps.get_mut(&qp.0).expect("checked");
        q.remote = Some((peer.ip(), rqpn));
        q.state = QpState::Rts;
        let cm = self.cm_mut(id)?;
        cm.qp = Some(qp.0);
        cm.state = CmState::Accepting;
        self.arm_cm_timer(id.0, out);
        self.send_cm(
            conn,
            local.ip(),
            peer.ip(),
            CmMsg::Rep {
                conn_id: conn,
                qpn,
                private_data: private_data.to_vec(),
            },
            out,
        );
        Ok(())
    }

    /// Reject a connection request.
    pub fn cm_reject(
        &mut self,
        id: CmId,
        private_data: &[u8],
        out: &mut Outbox,
    ) -> Result<(), CmError> {
        check_private_data(private_data, MAX_REJECT_PRIVATE_DATA)?;
        let cm = self.cm(id)?;
        if cm.state != CmState::RequestReceived {
            return Err(CmError::BadState("reject needs a connection request"));
        }
        let (local, peer, conn) = (cm.local.expect("req"), cm.peer.expect("req"), cm.conn);
        self.send_cm(
            conn,
            local.ip(),
            peer.ip(),
            CmMsg::Rej {
                conn_id: conn,
                reason: RejectReason::Consumer,
                private_data: private_data.to_vec(),
            },
            out,
        );
        out.controls.push(Control::Close(conn));
        self.cm_mut(id)?.state = CmState::Failed;
        Ok(())
    }

    fn end_connection(&mut self, id: u64, notify_peer: bool, out: &mut Outbox) {
        let cm = &self.cm_ids[&id];
        let (conn, initiator, local, peer, qp) = (cm.conn, cm.initiator, cm.local, cm.peer, cm.qp);
        let dev_alive = cm.device.as_ref().is_some_and(|d| self.alive(d));
        if notify_peer && dev_alive {
            if let (Some(l), Some(p)) = (local, peer) {
                self.send_cm(
                    conn,
                    l.ip(),
                    p.ip(),
                    CmMsg::Dreq {
                        conn_id: conn,
                        from_initiator: initiator,
                    },
                    out,
                );
            }
        }
        out.controls.push(Control::Close(conn));
        if let Some(qp) = qp {
            self.qp_error(qp, None);
        }
        let cm = self.cm_ids.get_mut(&id).expect("present");
        cm.state = CmState::Disconnected;
        cm.timer_gen += 1;
    }

    /// Disconnect.
    pub fn cm_disconnect(&mut self, id: CmId, out: &mut Outbox) -> Result<(), CmError> {
        match self.cm(id)?.state {
            CmState::Connected | CmState::Accepting | CmState::Connecting => {
                self.end_connection(id.0, true, out);
                self.cm_event(id.0, CmEventKind::Disconnected);
                Ok(())
            }
            CmState::Disconnected | CmState::Removed => Ok(()),
            _ => Err(CmError::BadState("not connected")),
        }
    }

    /// Destroy an id.
    pub fn cm_destroy_id(&mut self, id: CmId, out: &mut Outbox) -> Result<Destroyed, DestroyError> {
        let Some(cm) = self.cm_ids.get(&id.0) else {
            return Err(DestroyError::InvalidHandle("CM id"));
        };
        match cm.state {
            CmState::Connected | CmState::Accepting | CmState::Connecting => {
                self.end_connection(id.0, true, out)
            }
            CmState::Listening => out
                .controls
                .push(Control::Unlisten(cm.local.expect("bound"))),
            _ => {}
        }
        let cm = self.cm_ids.remove(&id.0).expect("present");
        Ok(match cm.device {
            Some(d) => self.destroyed(&d),
            None => Destroyed::Released,
        })
    }

    fn cm_timeout(&mut self, id: u64, gen: u64, out: &mut Outbox) {
        let Some(cm) = self.cm_ids.get(&id) else {
            return;
        };
        if cm.timer_gen != gen {
            return;
        }
        match cm.state {
            CmState::ResolvingAddr => {
                self.cm_ids.get_mut(&id).expect("present").state = CmState::Failed;
                self.cm_event(id, CmEventKind::AddrError);
            }
            CmState::Connecting => {
                let conn = cm.conn;
                out.controls.push(Control::Close(conn));
                self.cm_ids.get_mut(&id).expect("present").state = CmState::Failed;
                self.cm_event(id, CmEventKind::Unreachable);
            }
            CmState::Accepting => {
                self.end_connection(id, false, out);
                self.cm_ids.get_mut(&id).expect("present").state = CmState::Failed;
                self.cm_event(id, CmEventKind::ConnectError);
            }
            _ => {}
        }
    }

    fn find_conn(&self, conn: u64, initiator: bool) -> Option<u64> {
        self.cm_ids
            .iter()
            .find(|(_, c)| c.conn == conn && c.initiator == initiator)
            .map(|(h, _)| *h)
    }

    fn on_cm(&mut self, src: IpAddr, dst: IpAddr, msg: CmMsg, out: &mut Outbox) {
        match msg {
            CmMsg::Req {
                conn_id,
                src_port,
                dst_port,
                qpn,
                params,
                private_data,
            } => {
                if self.find_conn(conn_id, false).is_some() {
                    return; // a retransmitted request
                }
                let Some(dev) = self.device_owning(dst).map(|d| d.id.clone()) else {
                    return;
                };
                let listener = self
                    .listener_for(dst, dst_port)
                    .filter(|l| self.cm_ids[l].device.as_ref().is_none_or(|d| self.alive(d)));
                let Some(listener) = listener else {
                    self.send_cm(
                        conn_id,
                        dst,
                        src,
                        CmMsg::Rej {
                            conn_id,
                            reason: RejectReason::NoListener,
                            private_data: Vec::new(),
                        },
                        out,
                    );
                    out.controls.push(Control::Close(conn_id));
                    return;
                };
                let h = self.handle();
                let local = SocketAddr::new(dst, dst_port);
                let peer = SocketAddr::new(src, src_port);
                let mut cm = CmIdState::new();
                cm.state = CmState::RequestReceived;
                cm.device = Some(dev);
                cm.local = Some(local);
                cm.peer = Some(peer);
                cm.conn = conn_id;
                cm.remote_qpn = qpn;
                cm.params = params;
                self.cm_ids.insert(h, cm);
                self.cm_event(
                    h,
                    CmEventKind::ConnectRequest {
                        listener: CmId(listener),
                        private_data,
                        peer,
                        local,
                    },
                );
            }
            CmMsg::Rep {
                conn_id,
                qpn,
                private_data,
            } => {
                let Some(id) = self.find_conn(conn_id, true) else {
                    return;
                };
                let cm = &self.cm_ids[&id];
                if cm.state != CmState::Connecting {
                    return;
                }
                let local = cm.local.expect("connecting");
                let Some(qp) = cm.qp.filter(|q| self.qps.contains_key(q)) else {
                    self.send_cm(
                        conn_id,
                        local.ip(),
                        src,
                        CmMsg::Rej {
                            conn_id,
                            reason: RejectReason::NoResources,
                            private_data: Vec::new(),
                        },
                        out,
                    );
                    return;
                };
                let q = self.qps.get_mut(&qp).expect("present");
                q.remote = Some((src, qpn));
                q.state = QpState::Rts;
                let cm = self.cm_ids.get_mut(&id).expect("present");
                cm.state = CmState::Connected;
                cm.remote_qpn = qpn;
                cm.timer_gen += 1;
                self.send_cm(conn_id, local.ip(), src, CmMsg::Rtu { conn_id }, out);
                self.cm_event(id, CmEventKind::Established { private_data });
                self.pump(qp, out);
            }
            CmMsg::Rtu { conn_id } => {
                let Some(id) = self.find_conn(conn_id, false) else {
                    return;
                };
                let cm = self.cm_ids.get_mut(&id).expect("present");
                if cm.state != CmState::Accepting {
                    return;
                }
                cm.state = CmState::Connected;
                cm.timer_gen += 1;
                self.cm_event(
                    id,
                    CmEventKind::Established {
                        private_data: Vec::new(),
                    },
                );
            }
            CmMsg::Rej {
                conn_id,
                reason,
                private_data,
            } => {
                let Some(id) = self.find_conn(conn_id, true) else {
                    return;
                };
                let cm = self.cm_ids.get_mut(&id).expect("present");
                if cm.state != CmState::Connecting {
                    return;
                }
                cm.state = CmState::Failed;
                cm.timer_gen += 1;
                out.controls.push(Control::Close(conn_id));
                self.cm_event(
                    id,
                    CmEventKind::Rejected {
                        reason,
                        private_data,
                    },
                );
            }
            CmMsg::Dreq {
                conn_id,
                from_initiator,
            } => {
                let Some(id) = self.find_conn(conn_id, !from_initiator) else {
                    return;
                };
                if !matches!(
                    self.cm_ids[&id].state,
                    CmState::Connected | CmState::Accepting | CmState::Connecting
                ) {
                    return;
                }
                self.end_connection(id, false, out);
                self.cm_event(id, CmEventKind::Disconnected);
            }
        }
    }

    fn listener_for(&self, ip: IpAddr, port: u16) -> Option<u64> {
        let listening = |c: &CmIdState| c.state == CmState::Listening;
        self.cm_ids
            .iter()
            .find(|(_, c)| listening(c) && c.local == Some(SocketAddr::new(ip, port)))
            .or_else(|| {
                self.cm_ids.iter().find(|(_, c)| {
                    listening(c)
                        && c.local.is_some_and(|l| {
                            l.port() == port
                                && l.ip().is_unspecified()
                                && l.ip().is_ipv4() == ip.is_ipv4()
                        })
                })
            })
            .map(|(h, _)| *h)
    }

    /// The transport lost connection `conn` (TCP stream closed).
    pub fn conn_lost(&mut self, conn: u64, out: &mut Outbox) {
        let ids: Vec<u64> = self
            .cm_ids
            .iter()
            .filter(|(_, c)| c.conn == conn)
            .map(|(h, _)| *h)
            .collect();
        for id in ids {
            match self.cm_ids[&id].state {
                CmState::Connected | CmState::Accepting => {
                    self.end_connection(id, false, out);
                    self.cm_event(id, CmEventKind::Disconnected);
                }
                CmState::Connecting => {
                    self.cm_ids.get_mut(&id).expect("present").state = CmState::Failed;
                    self.cm_event(id, CmEventKind::Unreachable);
                }
                _ => {}
            }
        }
    }

    // ------------------------------------------------------------------
    // packets in, events out
    // ------------------------------------------------------------------

    /// A packet arrived for one of this host's addresses.
    pub fn receive(&mut self, pkt: Packet, out: &mut Outbox) {
        let Some(dev) = self.device_owning(pkt.dst) else {
            return;
        };
        if dev.port_state != PortState::Active {
            return;
        }
        match pkt.body {
            Body::ArpRequest { cookie } => out.packets.push(Outgoing {
                conn: 0,
                packet: Packet {
                    src: pkt.dst,
                    dst: pkt.src,
                    body: Body::ArpReply { cookie },
                },
            }),
            Body::ArpReply { cookie } => self.on_arp_reply(cookie),
            Body::Cm(msg) => self.on_cm(pkt.src, pkt.dst, msg, out),
            Body::Request {
                dst_qpn,
                src_qpn,
                psn,
                op,
            } => {
                self.on_request(pkt.src, src_qpn, dst_qpn, psn, &op, out);
                // Executed (or dropped): the payload's buffer can serve this
                // host's next request, unless the requester still shares it
                // (in-process; it recycles the buffer when it retires the
                // request).
                self.recycle_req(op);
            }
            Body::Response {
                dst_qpn,
                src_qpn,
                psn,
                kind,
            } => self.on_response(pkt.src, src_qpn, dst_qpn, psn, kind, out),
        }
    }

    /// Address resolution answered for id `cookie`.
    pub fn on_arp_reply(&mut self, cookie: u64) {
        let Some(cm) = self.cm_ids.get_mut(&cookie) else {
            return;
        };
        if cm.state != CmState::ResolvingAddr {
            return;
        }
        cm.state = CmState::AddrResolved;
        cm.timer_gen += 1;
        self.cm_event(cookie, CmEventKind::AddrResolved);
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Live objects.
    pub fn object_counts(&self) -> ObjectCounts {
        ObjectCounts {
            contexts: self.ctxs.len(),
            pds: self.pds.len(),
            cqs: self.cqs.len(),
            srqs: self.srqs.len(),
            mrs: self.mrs.len(),
            mws: self.mws.len(),
            qps: self.qps.len(),
            cm_ids: self.cm_ids.len(),
        }
    }
}
