//! The driver: runs relink-core sessions on a provider.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use relink_core::journal::{Completion, LocalRange, OpKind};
use relink_core::policy::Policy;
use relink_core::resources::{RegionSpec, SessionSpec};
use relink_core::session::{
    Action, Counters, OneSided, Path, RequestToken, Role, Session, SessionConfig, SessionError,
    SessionEvent,
};
use relink_core::state::{DownCause, State};
use relink_core::wire;
use relink_core::{BufferToken, Epoch, Incarnation, OpId, RegionId, Seq, SessionId};
use relink_fabric::{
    Access, AsyncEvent, CmEventKind, CmId, ConnParams, DeviceEventKind, DeviceId, Event, Memory,
    Provider, SendOp, SendWr, Sge, Timestamp, WcStatus, WorkCompletion,
};

use crate::transport::{
    SessionMemory, Transport, WrBatch, TAG_MASK, TAG_ONE_SIDED, TAG_RECV, TAG_SEND,
};

/// Forget a transport's CM id and CQ and destroy its objects (destroy calls
/// only: after a device loss they report "already released").
fn retire_transport(
    p: &dyn Provider,
    mut t: Transport,
    cm: &mut BTreeMap<CmId, CmOwner>,
    cq_owner: &mut BTreeMap<relink_fabric::CqId, u64>,
) {
    if let Some(id) = t.cm {
        cm.remove(&id);
    }
    if let Some(cq) = t.cq {
        cq_owner.remove(&cq);
    }
    t.tear_down(p);
}

/// Identifies a session of a [`Node`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionHandle(pub u64);

/// Identifies a listener of a [`Node`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListenerHandle(pub u64);

/// A memory region a session registers on every device it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionOptions {
    /// Stable id, the same on both sides of the application's protocol.
    pub id: RegionId,
    /// Bytes.
    pub len: u64,
    /// Rights (exactly these, on every device).
    pub access: Access,
    /// Advertise it to the peer for one-sided access.
    pub advertise: bool,
}

/// How a session is built.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Recovery policy.
    pub policy: Policy,
    /// Receive slots (the peer's send credits).
    pub recv_slots: u32,
    /// Largest message payload.
    pub max_message: u32,
    /// Outstanding one-sided operations.
    pub max_one_sided: u32,
    /// Application regions.
    pub regions: Vec<RegionOptions>,
}

impl Default for SessionOptions {
    fn default() -> SessionOptions {
        SessionOptions {
            policy: Policy::default(),
            recv_slots: 64,
            max_message: 4096,
            max_one_sided: 64,
            regions: Vec::new(),
        }
    }
}

impl SessionOptions {
    fn spec(&self) -> SessionSpec {
        SessionSpec {
            recv_slots: self.recv_slots,
            slot_size: self.max_message + wire::HEADER_LEN as u32,
            send_slots: self.recv_slots + 16,
            max_one_sided: self.max_one_sided,
            regions: self
                .regions
                .iter()
                .map(|r| RegionSpec {
                    id: r.id,
                    len: r.len,
                    access: r.access,
                    advertise: r.advertise,
                })
                .collect(),
        }
    }
}

/// Errors of [`Node`] calls.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No such session (closed and reaped, or never created).
    #[error("no session {0:?}")]
    NoSession(SessionHandle),
    /// No such region in the session.
    #[error("no region {0}")]
    NoRegion(RegionId),
    /// The session refused the command.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The options are invalid (the key is named).
    #[error(transparent)]
    Policy(#[from] relink_core::policy::PolicyError),
    /// The provider refused a listener or memory.
    #[error("provider: {0}")]
    Provider(String),
}

/// What the initiator's CM id is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Resolving,
    Routing,
    Connecting,
    Accepting,
    Up,
}

#[derive(Debug, Clone, Copy)]
enum CmOwner {
    Session {
        key: u64,
        epoch: Epoch,
        phase: Phase,
    },
    Listener(u64),
    Pending,
}

struct Slot {
    core: Session,
    opts: SessionOptions,
    spec: SessionSpec,
    memory: SessionMemory,
    transport: Option<Transport>,
    /// Work requests waiting to be posted, in order (sends also wait for
    /// a free slot).
    backlog: VecDeque<Pending>,
    /// Pending connect private data of the current attempt.
    connect_data: Vec<u8>,
    path: Option<Path>,
    /// The session's entry in the node's `deadlines`.
    deadline: Option<Timestamp>,
}

impl Slot {
    /// The core's next action that needs the node: the work requests it
    /// asks for before that only join the backlog.
    fn next_action(&mut self) -> Option<Action> {
        while let Some(action) = self.core.poll_action() {
            if let Some(action) = self.queue(action) {
                return Some(action);
            }
        }
        None
    }

    /// Put a work request (`Send`, `OneSided`) of the current transport in
    /// the backlog (one of an older transport is dropped); any other
    /// action is returned.
    fn queue(&mut self, action: Action) -> Option<Action> {
        match action {
            Action::Send { epoch, op, bytes } => {
                if self.transport.as_ref().is_some_and(|t| t.epoch == epoch) {
                    self.backlog.push_back(Pending::Send { op, bytes });
                }
            }
            Action::OneSided {
                epoch,
                op,
                kind,
                local,
                remote,
            } => {
                let t = self.transport.as_ref().filter(|t| t.epoch == epoch)?;
                let mr = t.region_mrs.get(&local.region)?;
                let sge = Sge {
                    addr: mr.addr + local.offset,
                    length: local.len,
                    lkey: mr.lkey,
                };
                let op_kind = match kind {
                    OneSided::Write => SendOp::Write { remote },
                    OneSided::Read => SendOp::Read { remote },
                    OneSided::FetchAdd { add } => SendOp::FetchAdd { remote, add },
                    OneSided::CmpSwap { compare, swap } => SendOp::CmpSwap {
                        remote,
                        compare,
                        swap,
                    },
                };
                self.backlog.push_back(Pending::OneSided {
                    wr_id: TAG_ONE_SIDED | op.0,
                    op: op_kind,
                    sge,
                });
            }
            other => return Some(other),
        }
        None
    }
}

/// A work request the core asked for, not yet posted.
enum Pending {
    /// A message (its bytes go into a send slot).
    Send { op: Option<OpId>, bytes: Vec<u8> },
    /// A one-sided operation, ready to post.
    OneSided {
        /// The request's wr_id.
        wr_id: u64,
        /// What it does.
        op: SendOp,
        /// Its local memory.
        sge: Sge,
    },
}

/// Signal at least every this many requests (and the last request of each
/// batch), messages and one-sided requests alike: completions of the
/// unsignaled ones are inferred from RC order (a send queue completes in
/// order, so a request — a READ's data or an atomic's result included — is
/// done once a later one completes; a failed request always completes, with
/// its error). The last of a batch is signaled, so nothing waits on a
/// request that is never posted.
///
/// One-sided requests were once always signaled: unsignaled, they cut the
/// in-process 64 KiB WRITE throughput about tenfold, which was the soft
/// fabric's payload allocation (fixed there: recycled, shared buffers).
const SIGNAL_EVERY: u32 = 16;

struct ListenerSlot {
    addr: SocketAddr,
    cm: Option<CmId>,
    opts: SessionOptions,
}

struct PendingRequest {
    cm: CmId,
}

/// A process's relink endpoint on one provider: it owns sessions and
/// listeners and drives them. Single-threaded: call [`Node::poll`] (or
/// [`Node::run_until`]) to make progress.
pub struct Node {
    provider: Arc<dyn Provider>,
    incarnation: Incarnation,
    rng: ChaCha8Rng,
    next_key: u64,
    sessions: BTreeMap<u64, Slot>,
    by_id: BTreeMap<SessionId, u64>,
    listeners: BTreeMap<u64, ListenerSlot>,
    cm: BTreeMap<CmId, CmOwner>,
    pending: BTreeMap<u64, PendingRequest>,
    accepted: VecDeque<SessionHandle>,
    wcs: Vec<WorkCompletion>,
    /// Which session a CQ belongs to (for `CqReady`).
    cq_owner: BTreeMap<relink_fabric::CqId, u64>,
    /// Sessions whose CQ may hold completions.
    dirty: std::collections::BTreeSet<u64>,
    /// Every session's next timer, ordered: `poll` visits only the due ones.
    deadlines: std::collections::BTreeSet<(Timestamp, u64)>,
    /// Sessions with work requests waiting to be posted.
    pending_drain: std::collections::BTreeSet<u64>,
    /// The set `poll` works through while `dirty` or `pending_drain`
    /// collect for the next round (swapped, so neither is reallocated).
    round: std::collections::BTreeSet<u64>,
    /// Sessions whose timer is due, collected by `poll`.
    due: Vec<u64>,
    /// The send requests of the batch being posted.
    send_batch: WrBatch<SendWr>,
    /// The receives being reposted.
    recv_batch: WrBatch<relink_fabric::RecvWr>,
    /// A received message, copied out of its slot.
    recv_buf: Vec<u8>,
}

impl Node {
    /// A node on `provider`; `seed` makes session ids, secrets and jitter
    /// reproducible (use a random seed in production).
    pub fn new(provider: Arc<dyn Provider>, seed: u64) -> Node {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        Node {
            provider,
            incarnation: Incarnation(rng.next_u64()),
            rng,
            next_key: 1,
            sessions: BTreeMap::new(),
            by_id: BTreeMap::new(),
            listeners: BTreeMap::new(),
            cm: BTreeMap::new(),
            pending: BTreeMap::new(),
            accepted: VecDeque::new(),
            wcs: Vec::with_capacity(64),
            cq_owner: BTreeMap::new(),
            dirty: std::collections::BTreeSet::new(),
            deadlines: std::collections::BTreeSet::new(),
            pending_drain: std::collections::BTreeSet::new(),
            round: std::collections::BTreeSet::new(),
            due: Vec::new(),
            send_batch: WrBatch::default(),
            recv_batch: WrBatch::default(),
            recv_buf: Vec::new(),
        }
    }

    /// The provider.
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// The provider's clock.
    pub fn now(&self) -> Timestamp {
        self.provider.now()
    }

    fn key(&mut self) -> u64 {
        let k = self.next_key;
        self.next_key += 1;
        k
    }

    fn memory(&self, opts: &SessionOptions, spec: &SessionSpec) -> Result<SessionMemory, Error> {
        let p = &self.provider;
        let err = |e: relink_fabric::MemoryError| Error::Provider(e.to_string());
        let send = p
            .alloc_memory(spec.send_slots as usize * spec.slot_size as usize)
            .map_err(err)?;
        let recv = p
            .alloc_memory(spec.recv_slots as usize * spec.slot_size as usize)
            .map_err(err)?;
        let mut regions = BTreeMap::new();
        for r in &opts.regions {
            regions.insert(r.id, p.alloc_memory(r.len as usize).map_err(err)?);
        }
        Ok(SessionMemory {
            send,
            recv,
            regions,
        })
    }

    fn insert_slot(&mut self, core: Session, opts: SessionOptions) -> Result<u64, Error> {
        let spec = core.spec().clone();
        let memory = self.memory(&opts, &spec)?;
        let key = self.key();
        self.by_id.insert(core.id(), key);
        self.sessions.insert(
            key,
            Slot {
                core,
                opts,
                spec,
                memory,
                transport: None,
                backlog: VecDeque::new(),
                connect_data: Vec::new(),
                path: None,
                deadline: None,
            },
        );
        Ok(key)
    }

    /// Connect to a peer over one or more paths. The first attempt is
    /// immediate; failures are retried by the policy.
    pub fn connect(
        &mut self,
        paths: Vec<Path>,
        opts: SessionOptions,
    ) -> Result<SessionHandle, Error> {
        let now = self.now();
        let cfg = SessionConfig {
            role: Role::Initiator,
            id: SessionId(self.rng.next_u64()),
            incarnation: self.incarnation,
            paths,
            policy: opts.policy.clone(),
            spec: opts.spec(),
            seed: self.rng.next_u64(),
        };
        let mut core = Session::new(cfg, now)?;
        core.set_devices(self.provider.devices(), now);
        let key = self.insert_slot(core, opts)?;
        self.sessions
            .get_mut(&key)
            .expect("inserted")
            .core
            .connect(now)?;
        self.run_actions(key);
        Ok(SessionHandle(key))
    }

    /// Listen on `addr` (a device's address or the wildcard). Sessions
    /// that connect appear in [`Node::accept`]. A listener bound to a
    /// device's address listens again when a device owning it returns.
    pub fn listen(
        &mut self,
        addr: SocketAddr,
        opts: SessionOptions,
    ) -> Result<ListenerHandle, Error> {
        opts.policy.validate()?;
        let key = self.key();
        self.listeners.insert(
            key,
            ListenerSlot {
                addr,
                cm: None,
                opts,
            },
        );
        self.start_listener(key).map_err(Error::Provider)?;
        Ok(ListenerHandle(key))
    }

    fn start_listener(&mut self, key: u64) -> Result<(), String> {
        let p = self.provider.clone();
        let l = self.listeners.get_mut(&key).expect("listener");
        let id = p.cm_create_id().map_err(|e| e.to_string())?;
        let r = p.cm_bind(id, l.addr).and_then(|_| p.cm_listen(id, 128));
        match r {
            Ok(()) => {
                l.cm = Some(id);
                self.cm.insert(id, CmOwner::Listener(key));
                tracing::info!(addr = %l.addr, "listening");
                Ok(())
            }
            Err(e) => {
                let _ = p.cm_destroy_id(id);
                Err(format!("listen on {}: {e}", l.addr))
            }
        }
    }

    /// A session a listener accepted, if any.
    pub fn accept(&mut self) -> Option<SessionHandle> {
        self.accepted.pop_front()
    }

    fn slot(&mut self, s: SessionHandle) -> Result<&mut Slot, Error> {
        self.sessions.get_mut(&s.0).ok_or(Error::NoSession(s))
    }

    /// Send a message (delivered exactly once, in order).
    pub fn send(&mut self, s: SessionHandle, payload: &[u8]) -> Result<OpId, Error> {
        // The copy the journal keeps until the peer confirms delivery, in
        // the allocation of an earlier, confirmed message if there is one.
        let mut bytes = self.slot(s)?.core.message_buffer(payload.len());
        bytes.extend_from_slice(payload);
        self.submit(s, OpKind::Message { payload: bytes })
    }

    /// Submit any operation.
    pub fn submit(&mut self, s: SessionHandle, kind: OpKind) -> Result<OpId, Error> {
        let now = self.now();
        let op = self.slot(s)?.core.submit(kind, now)?;
        self.run_actions(s.0);
        Ok(op)
    }

    /// RDMA WRITE `local` to the peer's `remote`.
    pub fn write(
        &mut self,
        s: SessionHandle,
        local: LocalRange,
        remote: BufferToken,
    ) -> Result<OpId, Error> {
        self.submit(s, OpKind::Write { local, remote })
    }

    /// RDMA READ the peer's `remote` into `local`.
    pub fn read(
        &mut self,
        s: SessionHandle,
        local: LocalRange,
        remote: BufferToken,
    ) -> Result<OpId, Error> {
        self.submit(s, OpKind::Read { local, remote })
    }

    /// FETCH_ADD on the peer's `remote`; the old value lands in `local` (8 bytes).
    pub fn fetch_add(
        &mut self,
        s: SessionHandle,
        local: LocalRange,
        remote: BufferToken,
        add: u64,
    ) -> Result<OpId, Error> {
        self.submit(s, OpKind::FetchAdd { local, remote, add })
    }

    /// CMP_SWAP on the peer's `remote`; the old value lands in `local` (8 bytes).
    pub fn cmp_swap(
        &mut self,
        s: SessionHandle,
        local: LocalRange,
        remote: BufferToken,
        compare: u64,
        swap: u64,
    ) -> Result<OpId, Error> {
        self.submit(
            s,
            OpKind::CmpSwap {
                local,
                remote,
                compare,
                swap,
            },
        )
    }

    /// The host memory of a region (read and write it directly).
    pub fn region(&self, s: SessionHandle, id: RegionId) -> Result<Memory, Error> {
        let slot = self.sessions.get(&s.0).ok_or(Error::NoSession(s))?;
        slot.memory
            .regions
            .get(&id)
            .cloned()
            .ok_or(Error::NoRegion(id))
    }

    /// Next completion of a session.
    pub fn poll_completion(&mut self, s: SessionHandle) -> Option<Completion> {
        self.sessions.get_mut(&s.0)?.core.poll_completion()
    }

    /// Next delivered message of a session.
    pub fn poll_delivery(&mut self, s: SessionHandle) -> Option<(Seq, Vec<u8>)> {
        self.sessions.get_mut(&s.0)?.core.poll_delivery()
    }

    /// Next delivered message of a session, swapped into `buf` (whose old
    /// contents are gone): like [`Node::poll_delivery`], but the allocation
    /// `buf` held takes a later message, so a receiver that keeps one
    /// buffer makes no allocation per message.
    pub fn poll_delivery_into(&mut self, s: SessionHandle, buf: &mut Vec<u8>) -> Option<Seq> {
        self.sessions.get_mut(&s.0)?.core.poll_delivery_into(buf)
    }

    /// Next event of a session.
    pub fn poll_event(&mut self, s: SessionHandle) -> Option<SessionEvent> {
        self.sessions.get_mut(&s.0)?.core.poll_event()
    }

    /// State of a session.
    pub fn state(&self, s: SessionHandle) -> Option<State> {
        self.sessions.get(&s.0).map(|x| x.core.state())
    }

    /// Counters of a session.
    pub fn counters(&self, s: SessionHandle) -> Option<Counters> {
        self.sessions.get(&s.0).map(|x| x.core.counters())
    }

    /// The session's core (read-only), for introspection.
    pub fn session(&self, s: SessionHandle) -> Option<&Session> {
        self.sessions.get(&s.0).map(|x| &x.core)
    }

    /// Every session handle.
    pub fn sessions(&self) -> Vec<SessionHandle> {
        self.sessions.keys().map(|k| SessionHandle(*k)).collect()
    }

    /// Close a session: recovery stops, pending operations fail.
    pub fn close(&mut self, s: SessionHandle) -> Result<(), Error> {
        let now = self.now();
        self.slot(s)?.core.close(now);
        self.run_actions(s.0);
        Ok(())
    }

    /// Stop a listener.
    pub fn close_listener(&mut self, l: ListenerHandle) {
        if let Some(slot) = self.listeners.remove(&l.0) {
            if let Some(id) = slot.cm {
                self.cm.remove(&id);
                let _ = self.provider.cm_destroy_id(id);
            }
        }
    }

    /// The earliest time a session needs [`Node::poll`] for its timers.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.deadlines.first().map(|(t, _)| *t)
    }

    /// Do everything that can be done now: provider events, completions,
    /// timers, actions. Returns whether anything happened.
    pub fn poll(&mut self) -> bool {
        let mut progress = false;
        while let Some(ev) = self.provider.poll_event() {
            progress = true;
            self.on_event(ev);
        }
        // Only CQs that signalled (or were not yet armed) are polled; a CQ
        // that stays busy is marked again for the next round.
        std::mem::swap(&mut self.dirty, &mut self.round);
        while let Some(key) = self.round.pop_first() {
            progress |= self.poll_cq(key);
        }
        // Only sessions with a due timer or queued work are visited.
        let now = self.now();
        self.due.clear();
        self.due.extend(
            self.deadlines
                .iter()
                .take_while(|(t, _)| *t <= now)
                .map(|(_, k)| *k),
        );
        for i in 0..self.due.len() {
            let key = self.due[i];
            let Some(slot) = self.sessions.get_mut(&key) else {
                continue;
            };
            slot.core.handle_timeout(now);
            progress = true;
            self.run_actions(key);
        }
        std::mem::swap(&mut self.pending_drain, &mut self.round);
        while let Some(key) = self.round.pop_first() {
            if self.drain_backlog(key) {
                progress = true;
                // A failed post reports a loss to the core: collect its
                // actions. Work still waiting for send slots is marked
                // again when a completion frees them (poll_cq).
                self.run_actions(key);
            }
        }
        progress
    }

    /// Poll until idle, then wait on the provider until the next deadline
    /// or event, until `until`.
    pub fn run_until(&mut self, until: Timestamp) {
        loop {
            while self.poll() {}
            let now = self.now();
            if now >= until {
                return;
            }
            let d = self.next_deadline().map_or(until, |d| d.min(until));
            self.provider.wait(Some(d.max(now)));
        }
    }

    /// [`run_until`](Self::run_until) `now + d`.
    pub fn run_for(&mut self, d: Duration) {
        let until = self.now() + d;
        self.run_until(until);
    }

    // -----------------------------------------------------------------
    // provider events
    // -----------------------------------------------------------------

    fn on_event(&mut self, ev: Event) {
        let now = self.now();
        match ev {
            Event::Device(de) => {
                for slot in self.sessions.values_mut() {
                    slot.core.handle_device_event(&de, now);
                }
                if de.kind == DeviceEventKind::Added {
                    // Listeners that lost their device listen again.
                    let idle: Vec<u64> = self
                        .listeners
                        .iter()
                        .filter(|(_, l)| l.cm.is_none() && de.device.owns(l.addr.ip()))
                        .map(|(k, _)| *k)
                        .collect();
                    for k in idle {
                        if let Err(e) = self.start_listener(k) {
                            tracing::warn!("re-listen: {e}");
                        }
                    }
                }
                let keys: Vec<u64> = self.sessions.keys().copied().collect();
                for k in keys {
                    self.run_actions(k);
                }
            }
            Event::Async { ctx, event } => {
                let cause = match event {
                    AsyncEvent::DeviceFatal => Some(DownCause::DeviceFatal),
                    AsyncEvent::PortErr => Some(DownCause::PortDown),
                    _ => None,
                };
                if let Some(cause) = cause {
                    let hit: Vec<(u64, Epoch)> = self
                        .sessions
                        .iter()
                        .filter_map(|(k, s)| {
                            let t = s.transport.as_ref()?;
                            (t.ctx == Some(ctx)).then_some((*k, t.epoch))
                        })
                        .collect();
                    for (k, epoch) in hit {
                        self.sessions
                            .get_mut(&k)
                            .expect("present")
                            .core
                            .handle_transport_down(epoch, cause, now);
                        self.run_actions(k);
                    }
                }
            }
            Event::Cm(ce) => self.on_cm(ce.id, ce.kind, now),
            Event::CqReady(cq) => {
                if let Some(k) = self.cq_owner.get(&cq) {
                    self.dirty.insert(*k);
                }
            }
        }
    }

    fn on_cm(&mut self, id: CmId, kind: CmEventKind, now: Timestamp) {
        if let CmEventKind::ConnectRequest {
            listener,
            private_data,
            ..
        } = kind
        {
            self.on_connect_request(id, listener, private_data, now);
            return;
        }
        let Some(owner) = self.cm.get(&id).copied() else {
            return;
        };
        match owner {
            CmOwner::Listener(k) => {
                if kind == CmEventKind::DeviceRemoval {
                    // Bound to a device's address: destroy, listen again
                    // when a device that owns the address appears.
                    self.cm.remove(&id);
                    let _ = self.provider.cm_destroy_id(id);
                    if let Some(l) = self.listeners.get_mut(&k) {
                        tracing::info!(addr = %l.addr, "listener lost its device; will listen again");
                        l.cm = None;
                    }
                    // A device owning the address may already be back.
                    let back = self.listeners.get(&k).is_some_and(|l| {
                        self.provider.devices().iter().any(|d| d.owns(l.addr.ip()))
                    });
                    if back {
                        let _ = self.start_listener(k);
                    }
                }
            }
            CmOwner::Pending => {}
            CmOwner::Session { key, epoch, phase } => {
                self.on_session_cm(key, epoch, phase, id, kind, now)
            }
        }
    }

    fn set_phase(&mut self, id: CmId, key: u64, epoch: Epoch, phase: Phase) {
        self.cm.insert(id, CmOwner::Session { key, epoch, phase });
    }

    fn on_session_cm(
        &mut self,
        key: u64,
        epoch: Epoch,
        phase: Phase,
        id: CmId,
        kind: CmEventKind,
        now: Timestamp,
    ) {
        let p = self.provider.clone();
        let Some(slot) = self.sessions.get_mut(&key) else {
            return;
        };
        let current = slot
            .transport
            .as_ref()
            .is_some_and(|t| t.epoch == epoch && t.cm == Some(id));
        if !current {
            tracing::debug!(?id, ?kind, "CM event of a retired attempt ignored");
            return;
        }
        let what = format!("{kind:?}");
        match (phase, kind) {
            (Phase::Resolving, CmEventKind::AddrResolved) => {
                if let Err(e) = p.cm_resolve_route(id, Duration::from_secs(2)) {
                    slot.core
                        .handle_attempt_failed(epoch, &format!("resolve route: {e}"), now);
                } else {
                    self.set_phase(id, key, epoch, Phase::Routing);
                }
            }
            (Phase::Routing, CmEventKind::RouteResolved) => {
                let device = p
                    .cm_device(id)
                    .and_then(|d| p.devices().into_iter().find(|x| x.id == d));
                let Some(device) = device else {
                    slot.core
                        .handle_attempt_failed(epoch, "resolved device is gone", now);
                    self.run_actions(key);
                    return;
                };
                let t = slot.transport.as_mut().expect("current");
                if let Err(e) = t.build(&*p, device, &slot.spec, &slot.memory) {
                    slot.core.handle_attempt_failed(epoch, &e.0, now);
                    self.run_actions(key);
                    return;
                }
                let qp = t.qp.expect("built");
                let params = ConnParams::default();
                if let Err(e) = p.cm_connect(id, qp, params, &slot.connect_data) {
                    slot.core
                        .handle_attempt_failed(epoch, &format!("connect: {e}"), now);
                } else {
                    self.set_phase(id, key, epoch, Phase::Connecting);
                }
            }
            (Phase::Connecting, CmEventKind::Established { private_data }) => {
                let t = slot.transport.as_mut().expect("current");
                t.connected = true;
                let device = t.device.clone().expect("built");
                let keys = t.local_keys();
                slot.core
                    .handle_connected(epoch, device, &private_data, keys, now);
                self.set_phase(id, key, epoch, Phase::Up);
            }
            (Phase::Accepting, CmEventKind::Established { .. }) => {
                let t = slot.transport.as_mut().expect("current");
                t.connected = true;
                let device = t.device.clone().expect("built");
                let keys = t.local_keys();
                slot.core.handle_accepted(epoch, device, keys, now);
                self.set_phase(id, key, epoch, Phase::Up);
            }
            (_, CmEventKind::Rejected { private_data, .. }) => {
                slot.core.handle_rejected(epoch, &private_data, now);
            }
            (
                Phase::Resolving | Phase::Routing | Phase::Connecting | Phase::Accepting,
                CmEventKind::AddrError
                | CmEventKind::RouteError
                | CmEventKind::Unreachable
                | CmEventKind::ConnectError
                | CmEventKind::DeviceRemoval
                | CmEventKind::Disconnected,
            ) => {
                slot.core.handle_attempt_failed(epoch, &what, now);
            }
            (Phase::Up, CmEventKind::DeviceRemoval) => {
                slot.core
                    .handle_transport_down(epoch, DownCause::CmDeviceRemoval, now);
            }
            (Phase::Up, CmEventKind::Disconnected) => {
                slot.core
                    .handle_transport_down(epoch, DownCause::CmDisconnected, now);
            }
            (Phase::Up, CmEventKind::AddrChange) => {
                slot.core
                    .handle_transport_down(epoch, DownCause::AddrChange, now);
            }
            (phase, kind) => tracing::debug!(?id, ?phase, ?kind, "CM event ignored"),
        }
        self.run_actions(key);
    }

    fn on_connect_request(
        &mut self,
        id: CmId,
        listener: CmId,
        private_data: Vec<u8>,
        now: Timestamp,
    ) {
        let Some(CmOwner::Listener(lk)) = self.cm.get(&listener).copied() else {
            let _ = self.provider.cm_reject(id, &[]);
            let _ = self.provider.cm_destroy_id(id);
            return;
        };
        let token = self.key();
        self.cm.insert(id, CmOwner::Pending);
        self.pending.insert(token, PendingRequest { cm: id });
        let refuse = |node: &mut Node, reason| {
            let data = wire::RejectData::Refused(wire::Refused { reason }).to_vec();
            node.reject(RequestToken(token), &data);
        };
        match wire::ConnectData::decode(&private_data) {
            Ok(wire::ConnectData::Hello(h)) => {
                if self.by_id.contains_key(&h.session) {
                    refuse(self, wire::RefuseReason::Busy);
                    return;
                }
                let opts = self.listeners[&lk].opts.clone();
                let cfg = SessionConfig {
                    role: Role::Target,
                    id: h.session,
                    incarnation: self.incarnation,
                    paths: Vec::new(),
                    policy: opts.policy.clone(),
                    spec: opts.spec(),
                    seed: self.rng.next_u64(),
                };
                let mut secret = [0u8; 32];
                self.rng.fill_bytes(&mut secret);
                match Session::accept_hello(cfg, RequestToken(token), h.incarnation, secret, now) {
                    Ok(mut core) => {
                        core.set_devices(self.provider.devices(), now);
                        match self.insert_slot(core, opts) {
                            Ok(key) => {
                                self.accepted.push_back(SessionHandle(key));
                                self.run_actions(key);
                            }
                            Err(e) => {
                                tracing::warn!("accept: {e}");
                                refuse(self, wire::RefuseReason::Busy);
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!("accept: {e}");
                        refuse(self, wire::RefuseReason::Busy);
                    }
                }
            }
            Ok(wire::ConnectData::Resume(r)) => match self.by_id.get(&r.session).copied() {
                Some(key) => {
                    let slot = self.sessions.get_mut(&key).expect("indexed");
                    slot.core
                        .handle_resume_request(RequestToken(token), &r, now);
                    self.run_actions(key);
                }
                None => refuse(self, wire::RefuseReason::UnknownSession),
            },
            Err(e) => {
                tracing::debug!("connect request with bad private data: {e}");
                refuse(self, wire::RefuseReason::UnsupportedVersion);
            }
        }
    }

    fn reject(&mut self, request: RequestToken, data: &[u8]) {
        if let Some(req) = self.pending.remove(&request.0) {
            self.cm.remove(&req.cm);
            let _ = self.provider.cm_reject(req.cm, data);
            let _ = self.provider.cm_destroy_id(req.cm);
        }
    }

    // -----------------------------------------------------------------
    // completions
    // -----------------------------------------------------------------

    /// Drain up to a batch of completions of a session. An empty CQ is
    /// armed (and checked once more, for a completion that raced the
    /// arming); a non-empty one stays dirty for the next round.
    fn poll_cq(&mut self, key: u64) -> bool {
        let p = &*self.provider;
        let Some(slot) = self.sessions.get_mut(&key) else {
            return false;
        };
        let Some(t) = slot.transport.as_mut() else {
            return false;
        };
        let Some(cq) = t.cq else { return false };
        self.wcs.clear();
        if p.poll_cq(cq, 64, &mut self.wcs).unwrap_or(0) == 0 {
            let _ = p.req_notify_cq(cq, false);
            if p.poll_cq(cq, 64, &mut self.wcs).unwrap_or(0) == 0 {
                return false;
            }
        }
        self.dirty.insert(key);
        let now = p.now();
        let epoch = t.epoch;
        self.recv_batch.clear();
        // The core's calls below never replace the driver's transport.
        for wc in &self.wcs {
            match wc.wr_id & TAG_MASK {
                TAG_SEND | TAG_ONE_SIDED => {
                    // RC completes in order: every unsignaled request posted
                    // before this one succeeded.
                    while let Some(w) = t.posted.pop_front() {
                        let status = if w == wc.wr_id {
                            wc.status
                        } else {
                            WcStatus::Success
                        };
                        let op = t.retire(w);
                        slot.core.handle_send_completion(epoch, op, status, now);
                        if w == wc.wr_id {
                            break;
                        }
                    }
                }
                TAG_RECV => {
                    if wc.status != WcStatus::Success {
                        slot.core.handle_transport_down(
                            epoch,
                            DownCause::Completion(wc.status),
                            now,
                        );
                        continue;
                    }
                    let s = (wc.wr_id & !TAG_MASK) as u32;
                    let size = slot.spec.slot_size as usize;
                    let buf = &mut self.recv_buf;
                    buf.resize((wc.byte_len as usize).min(size), 0);
                    let bytes: &[u8] = match slot.memory.recv.read(s as usize * size, buf) {
                        Ok(()) => buf,
                        Err(_) => &[],
                    };
                    if let Some(mr) = t.recv_mr {
                        self.recv_batch.push_recv(&mr, slot.spec.slot_size, s);
                    }
                    slot.core.handle_received(epoch, bytes, now);
                }
                _ => {}
            }
        }
        if !self.recv_batch.is_empty() {
            if let Some(qp) = t.qp {
                if p.post_recv(qp, self.recv_batch.as_slice()).is_err() {
                    slot.core
                        .handle_transport_down(epoch, DownCause::DeviceRemoved, now);
                }
            }
        }
        self.run_actions(key);
        true
    }

    // -----------------------------------------------------------------
    // actions
    // -----------------------------------------------------------------

    /// Perform the core's actions and index what the session now waits
    /// for (its CQ, queued work, its next timer). Completions, deliveries
    /// and events stay in the core until the application polls them.
    fn run_actions(&mut self, key: u64) {
        loop {
            let Some(slot) = self.sessions.get_mut(&key) else {
                return;
            };
            let Some(action) = slot.next_action() else {
                break;
            };
            if matches!(action, Action::Disconnect { .. } | Action::TearDown { .. }) {
                // Messages queued before a disconnect (the goodbye of an
                // admin close) go out first.
                self.drain_backlog(key);
            }
            self.perform(key, action);
        }
        let slot = self.sessions.get_mut(&key).expect("present");
        // A CQ built since the last call: poll (and so arm) it.
        if let Some(t) = slot.transport.as_mut().filter(|t| !t.cq_indexed) {
            if let Some(cq) = t.cq {
                t.cq_indexed = true;
                self.cq_owner.insert(cq, key);
                self.dirty.insert(key);
            }
        }
        if !slot.backlog.is_empty() {
            self.pending_drain.insert(key);
        }
        // Re-index the session's next timer.
        let next = slot.core.poll_timeout();
        if slot.deadline != next {
            if let Some(old) = slot.deadline.take() {
                self.deadlines.remove(&(old, key));
            }
            if let Some(t) = next {
                slot.deadline = Some(t);
                self.deadlines.insert((t, key));
            }
        }
    }

    fn perform(&mut self, key: u64, action: Action) {
        let p = &*self.provider;
        let slot = self.sessions.get_mut(&key).expect("present");
        match action {
            Action::TearDown { epoch } => {
                if let Some(t) = slot.transport.take_if(|t| t.epoch == epoch) {
                    retire_transport(p, t, &mut self.cm, &mut self.cq_owner);
                }
                slot.backlog.clear();
            }
            Action::Connect {
                epoch,
                path,
                private_data,
            } => {
                if let Some(old) = slot.transport.take() {
                    retire_transport(p, old, &mut self.cm, &mut self.cq_owner);
                }
                let id = match p.cm_create_id() {
                    Ok(id) => id,
                    Err(e) => {
                        let why = format!("create CM id: {e}");
                        slot.core.handle_attempt_failed(epoch, &why, p.now());
                        return;
                    }
                };
                slot.transport = Some(Transport::new(epoch, Some(id), slot.spec.send_slots));
                slot.connect_data = private_data;
                slot.path = Some(path);
                let timeout = slot.opts.policy.connect_timeout;
                match p.cm_resolve_addr(id, path.local, path.peer, timeout) {
                    Ok(()) => {
                        self.cm.insert(
                            id,
                            CmOwner::Session {
                                key,
                                epoch,
                                phase: Phase::Resolving,
                            },
                        );
                    }
                    Err(e) => {
                        let why = format!("resolve: {e}");
                        slot.core.handle_attempt_failed(epoch, &why, p.now());
                    }
                }
            }
            Action::Accept {
                epoch,
                request,
                private_data,
            } => {
                let Some(req) = self.pending.remove(&request.0) else {
                    return;
                };
                if let Some(old) = slot.transport.take() {
                    retire_transport(p, old, &mut self.cm, &mut self.cq_owner);
                }
                let mut t = Transport::new(epoch, Some(req.cm), slot.spec.send_slots);
                let device = p
                    .cm_device(req.cm)
                    .and_then(|d| p.devices().into_iter().find(|x| x.id == d));
                let built = match device {
                    Some(d) => t.build(p, d, &slot.spec, &slot.memory).map_err(|e| e.0),
                    None => Err("the request's device is gone".into()),
                };
                let accepted = built.and_then(|()| {
                    p.cm_accept(req.cm, t.qp.expect("built"), &private_data)
                        .map_err(|e| e.to_string())
                });
                self.cm.insert(
                    req.cm,
                    CmOwner::Session {
                        key,
                        epoch,
                        phase: Phase::Accepting,
                    },
                );
                slot.transport = Some(t);
                if let Err(e) = accepted {
                    tracing::warn!("accept failed: {e}");
                    slot.core.handle_attempt_failed(epoch, &e, p.now());
                }
            }
            Action::Reject {
                request,
                private_data,
            } => self.reject(request, &private_data),
            Action::Send { .. } | Action::OneSided { .. } => {
                unreachable!("work requests go to the backlog in Slot::next_action")
            }
            Action::Disconnect { epoch } => {
                if let Some(t) = slot.transport.as_ref().filter(|t| t.epoch == epoch) {
                    if let Some(cm) = t.cm {
                        let _ = p.cm_disconnect(cm);
                    }
                }
            }
        }
    }

    /// Post the queued work requests in one call, in order, while send
    /// slots last; signal every [`SIGNAL_EVERY`]th and the last one.
    fn drain_backlog(&mut self, key: u64) -> bool {
        let p = &*self.provider;
        let Some(slot) = self.sessions.get_mut(&key) else {
            return false;
        };
        if slot.backlog.is_empty() {
            return false;
        }
        let Some(t) = slot.transport.as_mut() else {
            slot.backlog.clear();
            return false;
        };
        let (Some(qp), Some(mr)) = (t.qp, t.send_mr) else {
            return false;
        };
        let size = slot.spec.slot_size;
        let batch = &mut self.send_batch;
        batch.clear();
        while let Some(front) = slot.backlog.front() {
            if matches!(front, Pending::Send { .. }) && t.free_slots.is_empty() {
                break;
            }
            let (wr_id, op, sge) = match slot.backlog.pop_front().expect("front") {
                Pending::Send { op, bytes } => {
                    let s = t.free_slots.pop().expect("checked");
                    let off = u64::from(s) * u64::from(size);
                    let _ = slot.memory.send.write(off as usize, &bytes);
                    t.slot_op[s as usize] = op;
                    let sge = Sge {
                        addr: mr.addr + off,
                        length: bytes.len() as u32,
                        lkey: mr.lkey,
                    };
                    slot.core.recycle(bytes);
                    (TAG_SEND | u64::from(s), SendOp::Send, sge)
                }
                Pending::OneSided { wr_id, op, sge } => (wr_id, op, sge),
            };
            batch.push_send(wr_id, op, sge);
            t.posted.push_back(wr_id);
        }
        if batch.is_empty() {
            return false;
        }
        let last = batch.as_slice().len() - 1;
        for (i, wr) in batch.as_mut_slice().iter_mut().enumerate() {
            t.unsignaled += 1;
            wr.signaled = i == last || t.unsignaled >= SIGNAL_EVERY;
            if wr.signaled {
                t.unsignaled = 0;
            }
        }
        if let Err(e) = p.post_send(qp, batch.as_slice()) {
            tracing::debug!("post send: {e}");
            let epoch = t.epoch;
            slot.backlog.clear();
            slot.core
                .handle_transport_down(epoch, DownCause::DeviceRemoved, p.now());
        }
        true
    }

    /// The device of a session's current transport.
    pub fn device(&self, s: SessionHandle) -> Option<DeviceId> {
        self.sessions
            .get(&s.0)?
            .transport
            .as_ref()?
            .device
            .as_ref()
            .map(|d| d.id.clone())
    }
}
