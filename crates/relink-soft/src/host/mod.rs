//! One host's view of the soft fabric: its devices, its verbs objects, the
//! RC engine of its QPs and its connection manager. Transport-independent:
//! every call takes an [`Outbox`](crate::outbox::Outbox) that collects the
//! packets, timers and transport requests the call produced; the in-process
//! world or the TCP transport carries them out.
//!
//! This file holds [`HostState`], its configuration and the per-object
//! records; the methods of `HostState` live by concern:
//!
//! | file           | concern                                                     |
//! |----------------|-------------------------------------------------------------|
//! | `devices.rs`   | devices added, hit by a fatal error, removed; port state    |
//! | `context.rs`   | contexts, host memory, PDs, CQs and completion delivery     |
//! | `srq_mr_mw.rs` | SRQs, memory regions and windows, key lookup, bind          |
//! | `qp.rs`        | QPs, posting, the send-queue pump, retransmit arming, flush |
//! | `responder.rs` | RC responder: check, execute in order, ack/NAK, duplicates  |
//! | `requester.rs` | RC requester: responses, NAKs, RNR waits, timers firing     |
//! | `cm.rs`        | connection manager: ids, resolution, REQ..DREQ, timeouts    |
//! | `packets.rs`   | packets in (dispatch), events out                           |
//! | `index.rs`     | users of each object, connections, bound CM ids (lookups)   |

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use relink_fabric::CmId;
use relink_fabric::ConnParams;
use relink_fabric::Timestamp;
use relink_fabric::{
    Access, CmEvent, CmEventKind, DeviceId, DeviceInfo, Event, Memory, MrInfo, MwType, PortState,
    QpInit, QpState, RecvWr, SendOp, SgeList, SrqInit, WcStatus, WorkCompletion,
};

use crate::packet::ReqOp;
use crate::payload::{BufferPool, Payload, PoolStats};

mod cm;
mod context;
mod devices;
mod index;
mod packets;
mod qp;
mod requester;
mod responder;
mod srq_mr_mw;

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
    /// The registration hit a fatal error (`HostState::device_fatal`): it
    /// takes no new work until it is removed — what comes back is a new
    /// generation (see `HostState::usable`).
    fatal: bool,
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
    /// The request's list, copied without allocating when it is inline.
    sgl: SgeList,
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
    /// Lookups that would otherwise scan every object.
    index: index::Index,
    events: VecDeque<Event>,
    activity: bool,
    /// Something came for the caller (as for `activity`) since the
    /// transport last took it, for the readiness fd ([`crate::ready`]).
    ready: bool,
    /// `poll_event` found no event since the transport last took it: the
    /// caller drained the stream, the readiness fd is cleared.
    drained: bool,
    /// Payload buffers of retired requests and consumed responses, for the
    /// next gather (bounded; see [`crate::payload`]).
    pool: BufferPool,
}

/// Whether PSN `a` is at or before `b` (32-bit wrapping comparison: the soft
/// fabric's PSNs are not limited to 24 bits).
fn psn_le(a: u32, b: u32) -> bool {
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
            index: index::Index::default(),
            events: VecDeque::new(),
            activity: false,
            ready: false,
            drained: false,
            pool: BufferPool::new(),
        }
    }

    /// Give a payload the transport is done with back to the host's pool
    /// (a READ response's, lent to a peer and released).
    pub fn recycle_payload(&mut self, p: Payload) {
        self.pool.recycle(p);
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

    /// Whether something happened since the last
    /// [`take_activity`](Self::take_activity), leaving it to be taken.
    pub fn has_activity(&self) -> bool {
        self.activity
    }

    /// Whether something came for the caller (an event queued, a
    /// completion added) since the last call: the readiness fd is to be
    /// made readable.
    pub fn take_ready(&mut self) -> bool {
        std::mem::take(&mut self.ready)
    }

    /// Whether [`poll_event`](Self::poll_event) found no event since the
    /// last call: the readiness fd is to be cleared.
    pub fn take_drained(&mut self) -> bool {
        std::mem::take(&mut self.drained)
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
        self.note_activity();
    }

    /// Something came for the caller: `wait` returns, the readiness fd
    /// becomes readable.
    fn note_activity(&mut self) {
        self.activity = true;
        self.ready = true;
    }

    fn cm_event(&mut self, id: u64, kind: CmEventKind) {
        self.push_event(Event::Cm(CmEvent { id: CmId(id), kind }));
    }

    /// The registration is present (it may have hit a fatal error).
    fn alive(&self, dev: &DeviceId) -> bool {
        self.devices
            .get(&dev.name)
            .is_some_and(|d| d.info.id == *dev)
    }

    /// The registration is present and has not hit a fatal error: it takes
    /// new work (contexts, objects, posts, listens, resolutions,
    /// connections). A device that hit a fatal error stays registered until
    /// its removal (over TCP, a watcher may see the fatal marker of a reset
    /// one scan before the new generation) but is as dead as a real HCA in
    /// its internal-error state: a session that came back on it would be
    /// lost again when it leaves, so nothing new may start on it.
    fn usable(&self, dev: &DeviceId) -> bool {
        self.devices
            .get(&dev.name)
            .is_some_and(|d| d.info.id == *dev && !d.fatal)
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
}
