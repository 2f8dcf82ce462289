//! One opened fabric: a relink [`Node`] and every libfabric object made
//! from it — event and completion queues, passive and active endpoints,
//! memory registrations — behind one lock.
//!
//! An endpoint is a relink session. What libfabric calls a connection is
//! the session's life: `FI_CONNECTED` once it is first up (and, on the
//! connecting side, once the acceptor's answer came, module [`crate::cm`]),
//! `FI_SHUTDOWN` when it ends for good (a peer's `fi_shutdown`, the
//! give-up deadline, a peer that lost its state). A device loss between
//! the two is no event at all: relink recovers the session underneath,
//! replays what was not confirmed, and the operations complete once each.
//!
//! Progress is the application's (`FI_PROGRESS_MANUAL`): every read of a
//! queue, every post and every wait polls the node first, then moves
//! what the sessions produced into the queues.

#![forbid(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use relink::fabric::Provider;
use relink::{
    Completion, DeviceInfo, LocalRange, Node, OpId, OpKind, Outcome, Path, Policy, SessionEvent,
    SessionHandle, SessionOptions, State as SessionState, SubmitError,
};

use crate::cm::{Answer, CM_DATA_SIZE};
use crate::ffi::memory::UserIov;
use crate::ffi::sys::*;
use crate::frame;
use crate::params::{Backend, Params};
use crate::queues::{CompletionQueue, CqEntry, CqError, EqError, EqEvent, EventQueue, Head};

/// A libfabric error: the positive `FI_E*` errno and what happened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FiError {
    /// The positive errno (`FI_EINVAL`, ...).
    pub errno: u32,
    /// In words.
    pub message: String,
}

impl FiError {
    /// An error of `errno` saying `message`.
    pub fn new(errno: impl Into<u64>, message: impl Into<String>) -> FiError {
        FiError {
            errno: errno.into() as u32,
            message: message.into(),
        }
    }
}

/// `Err` of `errno` with a message.
fn fail<T>(errno: impl Into<u64>, message: impl Into<String>) -> Result<T, FiError> {
    Err(FiError::new(errno, message))
}

/// An object's number within its fabric.
pub type Id = u64;

/// One opened fabric.
pub struct Fabric {
    /// The parameters it was opened with.
    pub params: Params,
    state: Mutex<State>,
    /// The node's event fd, duplicated: sleeps on it happen without the
    /// lock.
    wake: Option<OwnedFd>,
    /// The rdma-core provider, on that backend: registrations of the
    /// application's memory are its adoptions.
    verbs: Option<Arc<relink_verbs::VerbsProvider>>,
    /// When the application last made progress itself (ms since `epoch`).
    app_progress: AtomicU64,
    epoch: Instant,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("params", &self.params)
            .finish()
    }
}

struct State {
    node: Node,
    params: Params,
    next_id: Id,
    eqs: HashMap<Id, EventQueue>,
    cqs: HashMap<Id, CompletionQueue>,
    peps: HashMap<Id, Pep>,
    eps: HashMap<Id, Ep>,
    connreqs: HashMap<Id, ConnReq>,
    mrs: HashMap<Id, relink::RegionId>,
    by_session: HashMap<SessionHandle, Owner>,
    scratch: Vec<u8>,
}

/// Who a session belongs to.
#[derive(Debug, Clone, Copy)]
enum Owner {
    /// A request not accepted or rejected yet.
    ConnReq(Id),
    /// An endpoint.
    Ep(Id),
    /// No object any more (a rejected request, a closed endpoint): its
    /// outputs are dropped until the session's end.
    Orphan,
}

struct Pep {
    fid: usize,
    eq: Option<Id>,
    addr: SocketAddrV4,
    listener: Option<relink::ListenerHandle>,
}

struct ConnReq {
    session: SessionHandle,
}

/// Where an endpoint's connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conn {
    /// Not connected yet.
    Idle,
    /// The connecting side, waiting for the acceptor's answer.
    Connecting,
    /// The accepting side, answered, until its session is up.
    Accepting,
    /// Up (and possibly recovering underneath).
    Connected,
    /// Ended: `FI_SHUTDOWN` (or the refusal) was reported.
    Down,
}

struct Ep {
    fid: usize,
    eq: Option<Id>,
    tx_cq: Option<Id>,
    rx_cq: Option<Id>,
    /// `FI_SELECTIVE_COMPLETION` on the transmit binding: only operations
    /// with `FI_COMPLETION` get a completion.
    tx_selective: bool,
    rx_selective: bool,
    local: SocketAddrV4,
    peer: Option<SocketAddrV4>,
    session: Option<SessionHandle>,
    connreq: Option<Id>,
    conn: Conn,
    pending: HashMap<OpId, Pending>,
    recvs: VecDeque<PostedRecv>,
    /// Bytes of the message under way into the front receive.
    partial: usize,
    /// Its remote CQ data.
    partial_data: Option<u64>,
    /// Remote addresses are the peer's virtual addresses
    /// (`FI_MR_VIRT_ADDR` in the endpoint's info), else offsets.
    virt_addr: bool,
    /// The peer's registrations' first bytes, as advertised.
    peer_bases: HashMap<relink::RegionId, u64>,
    /// The endpoint's default transmit completion is the peer's delivery
    /// (`FI_TRANSMIT_COMPLETE`/`FI_DELIVERY_COMPLETE` in its
    /// `tx_attr->op_flags`).
    tx_wait: bool,
}

/// An operation waiting for its completion.
#[derive(Debug, Clone, Copy)]
struct Pending {
    context: usize,
    flags: u64,
    len: usize,
    /// Whether it gets a completion entry (not an inject, not a
    /// selective-completion post without `FI_COMPLETION`).
    report: bool,
}

/// A receive the application posted.
struct PostedRecv {
    buf: UserIov,
    context: usize,
    report: bool,
}

/// What a transmit's flags ask.
#[derive(Debug, Clone, Copy, Default)]
pub struct TxFlags {
    /// `FI_INJECT` (or `fi_inject`): no completion, the buffer is free at
    /// return.
    pub inject: bool,
    /// `FI_COMPLETION` (matters with selective completion).
    pub completion: bool,
    /// `FI_TRANSMIT_COMPLETE` or `FI_DELIVERY_COMPLETE`: a message
    /// completes once the peer's application has it (relink's own
    /// completion), not when its bytes were taken.
    pub wait: bool,
}

impl Fabric {
    /// Open a fabric with `params`: its node on the backend they name.
    pub fn open(params: Params) -> Result<Arc<Fabric>, FiError> {
        log_init();
        let (provider, verbs) = open_provider(&params)?;
        let node = Node::new(provider);
        let wake = node.event_fd().and_then(|fd| fd.try_clone_to_owned().ok());
        let fabric = Arc::new(Fabric {
            verbs,
            params: params.clone(),
            wake,
            app_progress: AtomicU64::new(0),
            epoch: Instant::now(),
            state: Mutex::new(State {
                node,
                params: params.clone(),
                next_id: 1,
                eqs: HashMap::new(),
                cqs: HashMap::new(),
                peps: HashMap::new(),
                eps: HashMap::new(),
                connreqs: HashMap::new(),
                mrs: HashMap::new(),
                by_session: HashMap::new(),
                scratch: Vec::new(),
            }),
        });
        let weak = Arc::downgrade(&fabric);
        std::thread::Builder::new()
            .name("relink-ofi".into())
            .spawn(move || progress_thread(weak))
            .map_err(|e| FiError::new(FI_ENOMEM, format!("no progress thread: {e}")))?;
        Ok(fabric)
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The rdma-core provider, when the fabric runs on it.
    pub fn verbs(&self) -> Option<&Arc<relink_verbs::VerbsProvider>> {
        self.verbs.as_ref()
    }

    /// The devices the node sees now.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        self.lock().node.provider().devices()
    }

    /// The fd that becomes readable when the node has something to do
    /// (`FI_GETWAIT`); `None` if the backend has none.
    pub fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.wake.as_ref().map(|fd| fd.as_fd())
    }

    /// Poll the node and move what it produced into the queues.
    pub fn progress(&self) {
        self.lock().progress();
    }

    /// The lock, for a call of the application's: it makes progress, so
    /// the progress thread may stay asleep.
    fn app_lock(&self) -> MutexGuard<'_, State> {
        self.app_progress.store(self.now_ms(), Ordering::Relaxed);
        self.lock()
    }

    /// `fi_trywait`: `true` when the caller may sleep on the wait fd now
    /// (nothing waits in `cqs`/`eqs` and the node is armed).
    pub fn trywait(&self, cqs: &[Id], eqs: &[Id]) -> bool {
        let mut st = self.lock();
        st.progress();
        let empty = cqs
            .iter()
            .all(|c| st.cqs.get(c).is_none_or(|q| q.is_empty()))
            && eqs
                .iter()
                .all(|e| st.eqs.get(e).is_none_or(|q| q.is_empty()));
        empty && st.node.prepare_to_sleep()
    }

    /// Sleep until the node has something to do or `timeout` passed;
    /// the lock is not held while asleep.
    pub fn sleep(&self, timeout: Option<Duration>) {
        let until = {
            let mut st = self.lock();
            if !st.node.prepare_to_sleep() {
                return;
            }
            let now = st.node.now();
            st.node.next_deadline().map(|d| d.saturating_since(now))
        };
        let wait = match (timeout, until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match &self.wake {
            Some(fd) => {
                use rustix::event::{poll, PollFd, PollFlags};
                let mut fds = [PollFd::new(fd, PollFlags::IN)];
                let ts = wait.map(|d| {
                    rustix::event::Timespec::try_from(d.min(Duration::from_secs(1))).unwrap_or(
                        rustix::event::Timespec {
                            tv_sec: 1,
                            tv_nsec: 0,
                        },
                    )
                });
                let ts = ts.unwrap_or(rustix::event::Timespec {
                    tv_sec: 1,
                    tv_nsec: 0,
                });
                let _ = poll(&mut fds, Some(&ts));
            }
            None => {
                let mut st = self.lock();
                let _ = st.node.wait_for(wait.unwrap_or(Duration::from_millis(10)));
            }
        }
    }

    // ---- event queues ----

    /// `fi_eq_open`.
    pub fn eq_open(&self) -> Id {
        let mut st = self.lock();
        let id = st.id();
        st.eqs.insert(id, EventQueue::default());
        id
    }

    /// `fi_eq_read`: the next event (taken unless `peek`), `Ok(None)` if
    /// none, `Err(FI_EAVAIL)` when an error entry is at the head.
    pub fn eq_read(&self, eq: Id, peek: bool) -> Result<Option<EqEvent>, FiError> {
        let mut st = self.app_lock();
        st.progress();
        let q = st.eqs.get_mut(&eq).ok_or_else(|| bad_fid("event queue"))?;
        match q.read(peek) {
            Head::Empty => Ok(None),
            Head::Entry(e) => Ok(Some(e)),
            Head::Error(()) => fail(FI_EAVAIL, "an error entry waits: fi_eq_readerr"),
        }
    }

    /// `fi_eq_readerr`.
    pub fn eq_readerr(&self, eq: Id) -> Option<EqError> {
        self.lock().eqs.get_mut(&eq)?.read_error()
    }

    /// `fi_close` of an event queue.
    pub fn eq_close(&self, eq: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        if st.eps.values().any(|e| e.eq == Some(eq)) || st.peps.values().any(|p| p.eq == Some(eq)) {
            return fail(FI_EBUSY, "an endpoint is still bound to the event queue");
        }
        st.eqs.remove(&eq);
        Ok(())
    }

    // ---- completion queues ----

    /// `fi_cq_open`.
    pub fn cq_open(&self) -> Id {
        let mut st = self.lock();
        let id = st.id();
        st.cqs.insert(id, CompletionQueue::default());
        id
    }

    /// `fi_cq_read`: up to `max` completions; empty when none.
    pub fn cq_read(&self, cq: Id, max: usize) -> Result<Vec<CqEntry>, FiError> {
        let mut st = self.app_lock();
        st.progress();
        let q = st
            .cqs
            .get_mut(&cq)
            .ok_or_else(|| bad_fid("completion queue"))?;
        match q.read(max) {
            Head::Empty => {
                drop(st);
                // Nothing yet: what comes next is carried by the fabric's
                // threads (the soft fabric's, the kernel's); an application
                // that polls in a loop gives them the CPU.
                std::thread::yield_now();
                Ok(Vec::new())
            }
            Head::Entry(v) => Ok(v),
            Head::Error(()) => fail(FI_EAVAIL, "an error completion waits: fi_cq_readerr"),
        }
    }

    /// `fi_cq_readerr`.
    pub fn cq_readerr(&self, cq: Id) -> Option<CqError> {
        self.lock().cqs.get_mut(&cq)?.read_error()
    }

    /// `fi_close` of a completion queue.
    pub fn cq_close(&self, cq: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        if st
            .eps
            .values()
            .any(|e| e.tx_cq == Some(cq) || e.rx_cq == Some(cq))
        {
            return fail(
                FI_EBUSY,
                "an endpoint is still bound to the completion queue",
            );
        }
        st.cqs.remove(&cq);
        Ok(())
    }

    // ---- memory ----

    /// `fi_mr_reg`: register `memory` with the node under a key every
    /// session uses; the key (relink's registration id) stays the same
    /// across every reset and replacement.
    pub fn mr_reg(
        &self,
        memory: relink::Memory,
        access: relink::Access,
    ) -> Result<(Id, u64), FiError> {
        let mut st = self.lock();
        let region = st
            .node
            .register(memory, access)
            .map_err(|e| FiError::new(FI_EINVAL, format!("fi_mr_reg: {e}")))?;
        let id = st.id();
        st.mrs.insert(id, region);
        Ok((id, u64::from(region.0)))
    }

    /// `fi_close` of a registration.
    pub fn mr_close(&self, mr: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        let Some(&region) = st.mrs.get(&mr) else {
            return Ok(());
        };
        st.node
            .deregister(region)
            .map_err(|e| FiError::new(FI_EBUSY, format!("fi_close(mr): {e}")))?;
        st.mrs.remove(&mr);
        Ok(())
    }

    /// The registration behind descriptor `mr` (for local ranges).
    fn region(st: &State, mr: Id) -> Result<relink::RegionId, FiError> {
        st.mrs
            .get(&mr)
            .copied()
            .ok_or_else(|| FiError::new(FI_EINVAL, "unknown memory descriptor"))
    }

    // ---- passive endpoints ----

    /// `fi_passive_ep` at `addr` (its port 0: one is chosen at listen).
    pub fn pep_open(&self, fid: usize, addr: SocketAddrV4) -> Id {
        let mut st = self.lock();
        let id = st.id();
        st.peps.insert(
            id,
            Pep {
                fid,
                eq: None,
                addr,
                listener: None,
            },
        );
        id
    }

    /// `fi_pep_bind` of an event queue.
    pub fn pep_bind_eq(&self, pep: Id, eq: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        if !st.eqs.contains_key(&eq) {
            return Err(bad_fid("event queue"));
        }
        st.peps
            .get_mut(&pep)
            .ok_or_else(|| bad_fid("passive endpoint"))?
            .eq = Some(eq);
        Ok(())
    }

    /// `fi_setname` of a passive endpoint.
    pub fn pep_setname(&self, pep: Id, addr: SocketAddrV4) -> Result<(), FiError> {
        let mut st = self.lock();
        let p = st
            .peps
            .get_mut(&pep)
            .ok_or_else(|| bad_fid("passive endpoint"))?;
        if p.listener.is_some() {
            return fail(FI_EBUSY, "the passive endpoint listens already");
        }
        p.addr = addr;
        Ok(())
    }

    /// `fi_getname` of a passive endpoint.
    pub fn pep_getname(&self, pep: Id) -> Result<SocketAddrV4, FiError> {
        let st = self.lock();
        Ok(st
            .peps
            .get(&pep)
            .ok_or_else(|| bad_fid("passive endpoint"))?
            .addr)
    }

    /// `fi_listen`: relink listens at the address (a port is chosen if it
    /// is 0).
    pub fn listen(&self, pep: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        let opts = st.session_options(Vec::new())?;
        let p = st
            .peps
            .get(&pep)
            .ok_or_else(|| bad_fid("passive endpoint"))?;
        if p.eq.is_none() {
            return fail(FI_ENOEQ, "fi_listen: no event queue is bound");
        }
        if p.listener.is_some() {
            return Ok(());
        }
        let mut addr = p.addr;
        if addr.port() == 0 {
            addr.set_port(pick_port(addr));
        }
        let l = st
            .node
            .listen(SocketAddr::V4(addr), opts)
            .map_err(|e| match e {
                relink::ListenError::AddrInUse(_) => {
                    FiError::new(FI_EADDRINUSE, format!("fi_listen: {e}"))
                }
                _ => FiError::new(FI_EINVAL, format!("fi_listen: {e}")),
            })?;
        let p = st
            .peps
            .get_mut(&pep)
            .ok_or_else(|| bad_fid("passive endpoint"))?;
        p.listener = Some(l);
        p.addr = addr;
        Ok(())
    }

    /// `fi_reject`: the requester gets an error event with `data`.
    pub fn reject(&self, connreq: Id, data: &[u8]) -> Result<(), FiError> {
        check_cm_data(data)?;
        let mut st = self.lock();
        let c = st
            .connreqs
            .remove(&connreq)
            .ok_or_else(|| FiError::new(FI_EINVAL, "fi_reject: unknown connection request"))?;
        st.by_session.insert(c.session, Owner::Orphan);
        let _ = st
            .node
            .send(c.session, &Answer::Reject(data.to_vec()).encode());
        let _ = st.node.close_gracefully(c.session, Duration::from_secs(5));
        Ok(())
    }

    /// `fi_close` of a passive endpoint.
    pub fn pep_close(&self, pep: Id) {
        let mut st = self.lock();
        if let Some(p) = st.peps.remove(&pep) {
            if let Some(l) = p.listener {
                st.node.close_listener(l);
            }
            if let Some(eq) = p.eq.and_then(|e| st.eqs.get_mut(&e)) {
                eq.forget(p.fid);
            }
        }
    }

    // ---- endpoints ----

    /// `fi_endpoint`: at `local`, for `peer` (from the info), answering
    /// connection request `connreq` if the info came with one.
    pub fn ep_open(
        &self,
        fid: usize,
        local: SocketAddrV4,
        peer: Option<SocketAddrV4>,
        connreq: Option<Id>,
        tx_op_flags: u64,
        virt_addr: bool,
    ) -> Result<Id, FiError> {
        let mut st = self.lock();
        if let Some(c) = connreq {
            if !st.connreqs.contains_key(&c) {
                return fail(
                    FI_EINVAL,
                    "fi_endpoint: the info's handle is no pending request",
                );
            }
        }
        let id = st.id();
        st.eps.insert(
            id,
            Ep {
                fid,
                eq: None,
                tx_cq: None,
                rx_cq: None,
                tx_selective: false,
                rx_selective: false,
                local,
                peer,
                session: None,
                connreq,
                conn: Conn::Idle,
                pending: HashMap::new(),
                recvs: VecDeque::new(),
                partial: 0,
                partial_data: None,
                virt_addr,
                peer_bases: HashMap::new(),
                tx_wait: tx_op_flags & (FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE) != 0,
            },
        );
        Ok(id)
    }

    /// `fi_ep_bind` of an event queue.
    pub fn ep_bind_eq(&self, ep: Id, eq: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        if !st.eqs.contains_key(&eq) {
            return Err(bad_fid("event queue"));
        }
        st.ep_mut(ep)?.eq = Some(eq);
        Ok(())
    }

    /// `fi_ep_bind` of a completion queue with `FI_TRANSMIT`/`FI_RECV`
    /// and `FI_SELECTIVE_COMPLETION` flags.
    pub fn ep_bind_cq(&self, ep: Id, cq: Id, flags: u64) -> Result<(), FiError> {
        let mut st = self.lock();
        if !st.cqs.contains_key(&cq) {
            return Err(bad_fid("completion queue"));
        }
        if flags & (FI_TRANSMIT | FI_RECV) == 0 {
            return fail(FI_EINVAL, "fi_ep_bind(cq): neither FI_TRANSMIT nor FI_RECV");
        }
        let selective = flags & FI_SELECTIVE_COMPLETION != 0;
        let e = st.ep_mut(ep)?;
        if flags & FI_TRANSMIT != 0 {
            e.tx_cq = Some(cq);
            e.tx_selective = selective;
        }
        if flags & FI_RECV != 0 {
            e.rx_cq = Some(cq);
            e.rx_selective = selective;
        }
        Ok(())
    }

    /// `fi_enable`: the bindings an endpoint needs are there.
    pub fn ep_enable(&self, ep: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        let e = st.ep_mut(ep)?;
        if e.eq.is_none() {
            return fail(FI_ENOEQ, "fi_enable: no event queue is bound");
        }
        if e.tx_cq.is_none() && e.rx_cq.is_none() {
            return fail(FI_ENOCQ, "fi_enable: no completion queue is bound");
        }
        Ok(())
    }

    /// `fi_connect` to `dest` with CM `data`.
    pub fn connect(&self, ep: Id, dest: SocketAddrV4, data: &[u8]) -> Result<(), FiError> {
        check_cm_data(data)?;
        let mut st = self.lock();
        let opts = st.session_options(data.to_vec())?;
        let e = st.ep_mut(ep)?;
        if e.conn != Conn::Idle || e.connreq.is_some() {
            return fail(
                FI_EOPBADSTATE,
                "fi_connect: the endpoint is connected or connecting",
            );
        }
        let local = (!e.local.ip().is_unspecified()).then_some(std::net::IpAddr::V4(*e.local.ip()));
        let s = st
            .node
            .connect(
                vec![Path {
                    local,
                    peer: SocketAddr::V4(dest),
                }],
                opts,
            )
            .map_err(|e| FiError::new(FI_EINVAL, format!("fi_connect: {}", chain(&e))))?;
        st.by_session.insert(s, Owner::Ep(ep));
        let e = st.ep_mut(ep)?;
        e.session = Some(s);
        e.peer = Some(dest);
        e.conn = Conn::Connecting;
        Ok(())
    }

    /// `fi_accept` with CM `data`: the request the endpoint was opened
    /// for becomes its connection.
    pub fn accept(&self, ep: Id, data: &[u8]) -> Result<(), FiError> {
        check_cm_data(data)?;
        let mut st = self.lock();
        let e = st.ep_mut(ep)?;
        let Some(c) = e.connreq else {
            return fail(
                FI_EOPBADSTATE,
                "fi_accept: the endpoint was not opened for a request",
            );
        };
        if e.conn != Conn::Idle {
            return fail(FI_EOPBADSTATE, "fi_accept: accepted already");
        }
        let Some(req) = st.connreqs.remove(&c) else {
            return fail(FI_EINVAL, "fi_accept: the request is gone");
        };
        let s = req.session;
        st.node
            .send(s, &Answer::Accept(data.to_vec()).encode())
            .map_err(|e| submit_error("fi_accept", e))?;
        st.by_session.insert(s, Owner::Ep(ep));
        let e = st.ep_mut(ep)?;
        e.session = Some(s);
        e.conn = Conn::Accepting;
        // FI_CONNECTED once the session is up (`session_outputs`); the
        // answer's completion is the provider's, not the application's.
        st.session_outputs(ep, s);
        Ok(())
    }

    /// `fi_shutdown`: the connection ends (what was posted completes
    /// first, within a bound); the peer gets `FI_SHUTDOWN`.
    pub fn shutdown(&self, ep: Id) -> Result<(), FiError> {
        let mut st = self.lock();
        let e = st.ep_mut(ep)?;
        let Some(s) = e.session else {
            return fail(FI_ENOTCONN, "fi_shutdown: not connected");
        };
        let was = std::mem::replace(&mut e.conn, Conn::Down);
        let (fid, eq) = (e.fid, e.eq);
        let _ = st.node.close_gracefully(s, Duration::from_secs(5));
        // The endpoint's own FI_SHUTDOWN, as rdma_cm's disconnect gives
        // both sides one (the peer's comes when its session closes).
        if was != Conn::Down {
            if let Some(q) = eq.and_then(|q| st.eqs.get_mut(&q)) {
                q.push(EqEvent::Shutdown { fid });
            }
        }
        Ok(())
    }

    /// `fi_close` of an endpoint: its session is closed.
    pub fn ep_close(&self, ep: Id) {
        let mut st = self.lock();
        if let Some(e) = st.eps.remove(&ep) {
            if let Some(s) = e.session {
                st.by_session.insert(s, Owner::Orphan);
                let _ = st.node.close_gracefully(s, Duration::from_secs(5));
            }
            if let Some(c) = e.connreq {
                if let Some(req) = st.connreqs.remove(&c) {
                    let _ = st.node.close(req.session);
                }
            }
            if let Some(eq) = e.eq.and_then(|q| st.eqs.get_mut(&q)) {
                eq.forget(e.fid);
            }
        }
    }

    /// `fi_getname` of an endpoint.
    pub fn ep_getname(&self, ep: Id) -> Result<SocketAddrV4, FiError> {
        let mut st = self.lock();
        Ok(st.ep_mut(ep)?.local)
    }

    /// `fi_getpeer`.
    pub fn ep_getpeer(&self, ep: Id) -> Result<SocketAddrV4, FiError> {
        let mut st = self.lock();
        st.ep_mut(ep)?
            .peer
            .ok_or_else(|| FiError::new(FI_ENOTCONN, "fi_getpeer: not connected"))
    }

    // ---- data ----

    /// `fi_send` (and `fi_sendv`, `fi_inject`, ...): the message's bytes
    /// are copied; the completion comes once the peer's application has
    /// the message.
    pub fn send(
        &self,
        ep: Id,
        bytes: &[u8],
        context: usize,
        flags: TxFlags,
    ) -> Result<(), FiError> {
        self.send_data(ep, bytes, None, context, flags)
    }

    /// `fi_senddata`/`fi_injectdata`: a message with remote CQ data, which
    /// the peer's receive completion carries (`FI_REMOTE_CQ_DATA`).
    pub fn send_data(
        &self,
        ep: Id,
        bytes: &[u8],
        data: Option<u64>,
        context: usize,
        flags: TxFlags,
    ) -> Result<(), FiError> {
        let mut st = self.lock();
        let max = self.params.max_msg_size;
        if bytes.len() > max {
            return fail(
                FI_EMSGSIZE,
                format!(
                    "a message of {} bytes is over max_msg_size ({max})",
                    bytes.len()
                ),
            );
        }
        let (s, selective) = st.connected(ep)?;
        let parts: Vec<_> = frame::fragments(bytes.len(), self.params.fragment()).collect();
        if st.node.room(s).unwrap_or(0) < parts.len() as u64 {
            return fail(
                FI_EAGAIN,
                "fi_send: the transmit queue is full (take completions)",
            );
        }
        let mut last = None;
        for (start, end, more) in parts {
            let first = start == 0;
            let payload = frame::encode(more, data.filter(|_| first), &bytes[start..end]);
            last = Some(
                st.node
                    .submit(s, OpKind::Message { payload })
                    .map_err(|e| submit_error("fi_send", e))?,
            );
        }
        let report = !flags.inject && (!selective || flags.completion);
        let e = st.ep_mut(ep)?;
        let wait = flags.wait || e.tx_wait;
        let entry = CqEntry {
            context,
            flags: FI_SEND | FI_MSG,
            len: bytes.len(),
            data: 0,
        };
        if let Some(op) = last {
            e.pending.insert(
                op,
                Pending {
                    context,
                    flags: entry.flags,
                    len: entry.len,
                    // Reported now (the bytes are relink's: the buffer is
                    // free), or when the peer's application has them.
                    report: report && wait,
                },
            );
        }
        if report && !wait {
            let tx = e.tx_cq;
            if let Some(q) = tx.and_then(|c| st.cqs.get_mut(&c)) {
                q.push(entry);
            }
        }
        Ok(())
    }

    /// `fi_recv`/`fi_recvv`: the next message is copied into `buf`.
    pub fn recv(
        &self,
        ep: Id,
        buf: UserIov,
        context: usize,
        completion: bool,
    ) -> Result<(), FiError> {
        let mut st = self.lock();
        let e = st.ep_mut(ep)?;
        if e.conn == Conn::Down {
            return fail(FI_ENOTCONN, "fi_recv: the connection ended");
        }
        if e.recvs.len() >= self.params.queue_size {
            return fail(FI_EAGAIN, "fi_recv: the receive queue is full");
        }
        let report = !e.rx_selective || completion;
        e.recvs.push_back(PostedRecv {
            buf,
            context,
            report,
        });
        st.deliver(ep);
        Ok(())
    }

    /// `fi_write`/`fi_read` of `len` bytes at `offset` of registration
    /// `mr` to/from offset `remote` of the peer's registration `key`.
    #[allow(clippy::too_many_arguments)]
    pub fn rma(
        &self,
        ep: Id,
        write: bool,
        mr: Id,
        offset: u64,
        len: usize,
        key: u64,
        remote: u64,
        context: usize,
        flags: TxFlags,
    ) -> Result<(), FiError> {
        let mut st = self.lock();
        let (s, selective) = st.connected(ep)?;
        let region = Self::region(&st, mr)?;
        let len32 =
            u32::try_from(len).map_err(|_| FiError::new(FI_EMSGSIZE, "an RMA of 4 GiB or more"))?;
        let key32 = u32::try_from(key)
            .map_err(|_| FiError::new(FI_EKEYREJECTED, format!("key {key:#x} is no relink key")))?;
        let local = LocalRange {
            region,
            offset,
            len: len32,
        };
        let peer_region = relink::RegionId(key32);
        let remote = if st.ep_mut(ep)?.virt_addr {
            remote
                .checked_sub(st.peer_base(ep, s, peer_region)?)
                .ok_or_else(|| {
                    FiError::new(
                        FI_EINVAL,
                        format!("address {remote:#x} is below the start of key {key:#x}"),
                    )
                })?
        } else {
            remote
        };
        let token = relink::BufferToken {
            region: peer_region,
            offset: remote,
        };
        let kind = if write {
            OpKind::Write {
                local: local.into(),
                remote: token,
            }
        } else {
            OpKind::Read {
                local: local.into(),
                remote: token,
            }
        };
        let op = st
            .node
            .submit(s, kind)
            .map_err(|e| submit_error(if write { "fi_write" } else { "fi_read" }, e))?;
        let report = !flags.inject && (!selective || flags.completion);
        st.ep_mut(ep)?.pending.insert(
            op,
            Pending {
                context,
                flags: FI_RMA | if write { FI_WRITE } else { FI_READ },
                len,
                report,
            },
        );
        Ok(())
    }
}

impl State {
    fn id(&mut self) -> Id {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn ep_mut(&mut self, ep: Id) -> Result<&mut Ep, FiError> {
        self.eps.get_mut(&ep).ok_or_else(|| bad_fid("endpoint"))
    }

    /// The address of the first byte of the peer's registration `region`
    /// (`FI_MR_VIRT_ADDR`: remote addresses are the peer's), kept once
    /// known: a registration's memory stays where it is across every
    /// reconnection. `FI_EAGAIN` while the session is between connections
    /// and the address was never seen (the next connection advertises it).
    fn peer_base(
        &mut self,
        ep: Id,
        s: SessionHandle,
        region: relink::RegionId,
    ) -> Result<u64, FiError> {
        if let Some(&b) = self.ep_mut(ep)?.peer_bases.get(&region) {
            return Ok(b);
        }
        match self.node.peer_region(s, region) {
            Some((addr, _)) => {
                self.ep_mut(ep)?.peer_bases.insert(region, addr);
                Ok(addr)
            }
            None if self.node.state(s) == Some(SessionState::Established) => fail(
                FI_EKEYREJECTED,
                format!("the peer advertised no registration of key {:#x}", region.0),
            ),
            None => fail(FI_EAGAIN, "the connection is being recovered: try again"),
        }
    }

    /// The session of a connected endpoint and its transmit selectivity.
    fn connected(&mut self, ep: Id) -> Result<(SessionHandle, bool), FiError> {
        let e = self.ep_mut(ep)?;
        match (e.conn, e.session) {
            (Conn::Connected, Some(s)) => Ok((s, e.tx_selective)),
            (Conn::Down, _) => fail(FI_ENOTCONN, "the connection ended"),
            _ => fail(FI_ENOTCONN, "not connected yet"),
        }
    }

    /// The options of the provider's sessions.
    fn session_options(&self, connect_data: Vec<u8>) -> Result<SessionOptions, FiError> {
        session_options(&self.params, connect_data)
    }

    /// Poll the node and move outputs into the queues.
    fn progress(&mut self) {
        self.node.poll();
        while let Some(a) = self.node.accept() {
            self.accepted(a);
        }
        let sessions: Vec<(SessionHandle, Owner)> =
            self.by_session.iter().map(|(s, o)| (*s, *o)).collect();
        for (s, owner) in sessions {
            match owner {
                Owner::Ep(ep) => self.session_outputs(ep, s),
                Owner::ConnReq(_) => {
                    // Outputs wait for the accept (events: a loss before it
                    // is relink's to recover).
                    while let Some(ev) = self.node.poll_event(s) {
                        if ends(&ev) {
                            self.request_gone(s);
                            break;
                        }
                    }
                }
                Owner::Orphan => {
                    while self.node.poll_completion(s).is_some() {}
                    while self.node.poll_delivery(s).is_some() {}
                    while let Some(ev) = self.node.poll_event(s) {
                        if ends(&ev) {
                            self.by_session.remove(&s);
                        }
                    }
                }
            }
        }
    }

    /// A listener's new session: a connection request for its passive
    /// endpoint.
    fn accepted(&mut self, a: relink::Accepted) {
        let Some((pep_id, pep)) = self
            .peps
            .iter()
            .find(|(_, p)| p.listener == Some(a.listener))
        else {
            let _ = self.node.close(a.session);
            return;
        };
        let (fid, eq) = (pep.fid, pep.eq);
        let _ = pep_id;
        let id = self.id();
        self.connreqs.insert(id, ConnReq { session: a.session });
        self.by_session.insert(a.session, Owner::ConnReq(id));
        if let Some(q) = eq.and_then(|q| self.eqs.get_mut(&q)) {
            q.push(EqEvent::ConnReq {
                fid,
                connreq: id,
                local: v4(a.local),
                peer: v4(a.peer),
                data: a.connect_data,
            });
        }
    }

    /// A request's session ended before it was accepted.
    fn request_gone(&mut self, s: SessionHandle) {
        if let Some(Owner::ConnReq(c)) = self.by_session.remove(&s) {
            self.connreqs.remove(&c);
        }
    }

    /// Completions, the answer (connecting side), deliveries and events of
    /// endpoint `ep`'s session `s`.
    fn session_outputs(&mut self, ep: Id, s: SessionHandle) {
        if self.eps.get(&ep).is_some_and(|e| e.conn == Conn::Accepting)
            && self.node.state(s) == Some(SessionState::Established)
        {
            if let Some(e) = self.eps.get_mut(&ep) {
                e.conn = Conn::Connected;
                let (fid, eq) = (e.fid, e.eq);
                if let Some(q) = eq.and_then(|q| self.eqs.get_mut(&q)) {
                    q.push(EqEvent::Connected {
                        fid,
                        data: Vec::new(),
                    });
                }
            }
        }
        while let Some(c) = self.node.poll_completion(s) {
            self.completed(ep, c);
        }
        if self
            .eps
            .get(&ep)
            .is_some_and(|e| e.conn == Conn::Connecting)
        {
            if let Some((_, m)) = self.node.poll_delivery(s) {
                self.answered(ep, s, &m);
            }
        }
        self.deliver(ep);
        while let Some(ev) = self.node.poll_event(s) {
            if ends(&ev) {
                self.ended(ep, s, &ev);
            }
        }
    }

    /// The acceptor's answer reached the connecting endpoint.
    fn answered(&mut self, ep: Id, s: SessionHandle, m: &[u8]) {
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        let (fid, eq) = (e.fid, e.eq);
        let q = eq.and_then(|q| self.eqs.get_mut(&q));
        match Answer::decode(m) {
            Ok(Answer::Accept(data)) => {
                e.conn = Conn::Connected;
                if let Some(q) = q {
                    q.push(EqEvent::Connected { fid, data });
                }
            }
            Ok(Answer::Reject(data)) => {
                e.conn = Conn::Down;
                if let Some(q) = q {
                    q.push_error(EqError {
                        fid,
                        err: FI_ECONNREFUSED as u32,
                        data,
                        message: "the peer rejected the connection".into(),
                    });
                }
                let _ = self.node.close(s);
            }
            Err(err) => {
                e.conn = Conn::Down;
                if let Some(q) = q {
                    q.push_error(EqError {
                        fid,
                        err: FI_EOTHER,
                        data: Vec::new(),
                        message: err.to_string(),
                    });
                }
                let _ = self.node.close(s);
            }
        }
    }

    /// Messages into the receives posted, in order, while both are there.
    fn deliver(&mut self, ep: Id) {
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        let (Some(s), Conn::Connected | Conn::Accepting) = (e.session, e.conn) else {
            return;
        };
        while !e.recvs.is_empty() {
            if self.node.poll_delivery_into(s, &mut self.scratch).is_none() {
                break;
            }
            let f = match frame::decode(&self.scratch) {
                Ok(f) => f,
                Err(err) => {
                    let Some(r) = e.recvs.pop_front() else { break };
                    e.partial = 0;
                    if let Some(q) = e.rx_cq.and_then(|c| self.cqs.get_mut(&c)) {
                        q.push_error(CqError {
                            entry: CqEntry {
                                context: r.context,
                                flags: FI_RECV | FI_MSG,
                                len: 0,
                                data: 0,
                            },
                            err: FI_EOTHER,
                            olen: 0,
                            message: err.to_string(),
                        });
                    }
                    continue;
                }
            };
            let Some(r) = e.recvs.front() else { break };
            r.buf.write_at(e.partial, f.part);
            e.partial += f.part.len();
            if f.data.is_some() {
                e.partial_data = f.data;
            }
            if f.more > 0 {
                continue;
            }
            let total = std::mem::take(&mut e.partial);
            let data = e.partial_data.take();
            let Some(r) = e.recvs.pop_front() else { break };
            let n = total.min(r.buf.len());
            let entry = CqEntry {
                context: r.context,
                flags: FI_RECV | FI_MSG | if data.is_some() { FI_REMOTE_CQ_DATA } else { 0 },
                len: n,
                data: data.unwrap_or(0),
            };
            let Some(q) = e.rx_cq.and_then(|c| self.cqs.get_mut(&c)) else {
                continue;
            };
            if n < total {
                q.push_error(CqError {
                    entry,
                    err: FI_ETRUNC,
                    olen: total - n,
                    message: format!(
                        "a message of {total} bytes was cut to the {n} bytes of the receive buffer"
                    ),
                });
            } else if r.report {
                q.push(entry);
            }
        }
    }

    /// An operation's one completion into its queue.
    fn completed(&mut self, ep: Id, c: Completion) {
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        let Some(p) = e.pending.remove(&c.op) else {
            // The provider's own message (the answer).
            return;
        };
        let Some(q) = e.tx_cq.and_then(|c| self.cqs.get_mut(&c)) else {
            return;
        };
        let entry = CqEntry {
            context: p.context,
            flags: p.flags,
            len: p.len,
            data: 0,
        };
        match c.outcome {
            Outcome::Success { .. } => {
                if p.report {
                    q.push(entry);
                }
            }
            Outcome::Failed(err) => q.push_error(CqError {
                entry,
                err: match err {
                    relink::OpError::Disconnected => FI_ECANCELED,
                    relink::OpError::Remote(_) => FI_EREMOTEIO,
                    relink::OpError::TooLargeForPeer => FI_EMSGSIZE,
                    _ => FI_EIO,
                } as u32,
                olen: 0,
                message: err.to_string(),
            }),
            Outcome::Indeterminate { executed } => q.push_error(CqError {
                entry,
                err: FI_EIO as u32,
                olen: 0,
                message: format!(
                    "the connection ended before the operation was confirmed \
                     (it may have taken effect{})",
                    match executed {
                        Some(true) => ": it did",
                        _ => "",
                    }
                ),
            }),
            _ => q.push_error(CqError {
                entry,
                err: FI_EIO as u32,
                olen: 0,
                message: "the operation ended without success".into(),
            }),
        }
    }

    /// The session of endpoint `ep` ended for good.
    fn ended(&mut self, ep: Id, s: SessionHandle, ev: &SessionEvent) {
        self.by_session.remove(&s);
        let Some(e) = self.eps.get_mut(&ep) else {
            return;
        };
        let was = e.conn;
        e.conn = Conn::Down;
        // Receives posted and not filled are cancelled.
        let rx = e.rx_cq;
        let cancelled: Vec<PostedRecv> = e.recvs.drain(..).collect();
        let (fid, eq) = (e.fid, e.eq);
        if let Some(q) = rx.and_then(|c| self.cqs.get_mut(&c)) {
            for r in cancelled {
                q.push_error(CqError {
                    entry: CqEntry {
                        context: r.context,
                        flags: FI_RECV | FI_MSG,
                        len: 0,
                        data: 0,
                    },
                    err: FI_ECANCELED as u32,
                    olen: 0,
                    message: "the connection ended".into(),
                });
            }
        }
        let Some(q) = eq.and_then(|q| self.eqs.get_mut(&q)) else {
            return;
        };
        match was {
            Conn::Connecting | Conn::Accepting => q.push_error(EqError {
                fid,
                err: match ev {
                    SessionEvent::GaveUp => FI_ETIMEDOUT,
                    _ => FI_ECONNREFUSED,
                } as u32,
                data: Vec::new(),
                message: format!("the connection could not be made: {ev}"),
            }),
            Conn::Connected => q.push(EqEvent::Shutdown { fid }),
            Conn::Idle | Conn::Down => {}
        }
    }
}

/// Whether an event ends the session.
fn ends(ev: &SessionEvent) -> bool {
    match ev {
        SessionEvent::GaveUp | SessionEvent::PeerLost { .. } | SessionEvent::Disconnected => true,
        SessionEvent::Transition(t) => matches!(t.to, SessionState::Failed | SessionState::Closed),
        _ => false,
    }
}

fn v4(a: SocketAddr) -> SocketAddrV4 {
    match a {
        SocketAddr::V4(v) => v,
        SocketAddr::V6(v) => SocketAddrV4::new(
            v.ip()
                .to_ipv4_mapped()
                .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
            v.port(),
        ),
    }
}

fn bad_fid(what: &str) -> FiError {
    FiError::new(FI_EINVAL, format!("no such {what} (closed already?)"))
}

fn check_cm_data(data: &[u8]) -> Result<(), FiError> {
    if data.len() > CM_DATA_SIZE {
        return fail(
            FI_EINVAL,
            format!(
                "CM data of {} bytes is over FI_OPT_CM_DATA_SIZE ({CM_DATA_SIZE})",
                data.len()
            ),
        );
    }
    Ok(())
}

fn submit_error(call: &str, e: SubmitError) -> FiError {
    let errno = match e {
        SubmitError::WouldBlock { .. } => FI_EAGAIN,
        SubmitError::Ended(_) => FI_ENOTCONN,
        _ => FI_EINVAL,
    };
    FiError::new(errno, format!("{call}: {e}"))
}

/// A free port for a listener at `addr`: a TCP port the kernel hands
/// out, so two processes of one host pick different ones.
fn pick_port(addr: SocketAddrV4) -> u16 {
    std::net::TcpListener::bind(SocketAddrV4::new(*addr.ip(), 0))
        .or_else(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(40_000)
}

/// The options of the provider's sessions, from its parameters.
fn session_options(p: &Params, connect_data: Vec<u8>) -> Result<SessionOptions, FiError> {
    let policy = Policy::builder()
        .ctrl_loss_tmo(p.give_up)
        .first_connect_tmo(p.connect_timeout)
        .build()
        .map_err(|e| FiError::new(FI_EINVAL, format!("relink policy: {e}")))?;
    SessionOptions::builder()
        .policy(policy)
        .max_message(p.slot_size as u32)
        .max_outstanding(p.queue_size as u32)
        .connect_data(connect_data)
        .build()
        .map_err(|e| FiError::new(FI_EINVAL, format!("relink session options: {e}")))
}

/// The node's provider for `params`.
/// A node's provider, and the rdma-core provider when it is that.
type Opened = (Arc<dyn Provider>, Option<Arc<relink_verbs::VerbsProvider>>);

fn open_provider(params: &Params) -> Result<Opened, FiError> {
    match params.backend {
        Backend::Soft => {
            let dir = params
                .soft_dir
                .clone()
                .unwrap_or_else(relink_soft::Registry::default_dir);
            let host = relink_soft::TcpHost::open(&dir).map_err(|e| {
                FiError::new(
                    FI_ENODEV,
                    format!("cannot open the soft devices of {}: {e}", dir.display()),
                )
            })?;
            Ok((Arc::new(host), None))
        }
        Backend::Verbs => {
            let p = Arc::new(
                relink_verbs::VerbsProvider::new()
                    .map_err(|e| FiError::new(FI_ENODEV, format!("rdma-core: {e}")))?,
            );
            Ok((p.clone(), Some(p)))
        }
    }
}

/// The devices the backend of `params` has now (for `fi_getinfo`).
pub fn list_devices(params: &Params) -> Result<Vec<DeviceInfo>, FiError> {
    match params.backend {
        Backend::Soft => {
            let dir = params
                .soft_dir
                .clone()
                .unwrap_or_else(relink_soft::Registry::default_dir);
            relink_soft::Registry::open(&dir)
                .and_then(|r| r.list())
                .map_err(|e| {
                    FiError::new(
                        FI_ENODATA,
                        format!("the soft devices of {}: {e}", dir.display()),
                    )
                })
        }
        Backend::Verbs => relink_verbs::VerbsProvider::new()
            .map(|p| p.devices())
            .map_err(|e| FiError::new(FI_ENODATA, format!("rdma-core: {e}"))),
    }
}

/// relink's own logs on stderr when `FI_RELINK_LOG` names a filter
/// (`info`, `relink=debug`, ...): off otherwise, so the provider prints
/// nothing of its own.
fn log_init() {
    if let Ok(filter) = std::env::var("FI_RELINK_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init();
    }
}

/// The fabric's progress thread: sessions recover, answer their peers and
/// say goodbye while the application is busy elsewhere (computing, or
/// blocked in its own I/O). It sleeps on the node's fd and polls when the
/// application has not made progress itself for a while; it ends when the
/// fabric is closed.
fn progress_thread(fabric: Weak<Fabric>) {
    const IDLE: Duration = Duration::from_millis(10);
    loop {
        let Some(f) = fabric.upgrade() else { return };
        let last = f.app_progress.load(Ordering::Relaxed);
        if f.now_ms().saturating_sub(last) < IDLE.as_millis() as u64 {
            drop(f);
            std::thread::sleep(IDLE);
            continue;
        }
        f.sleep(Some(Duration::from_millis(50)));
        f.progress();
    }
}

/// An error and its sources, in one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}
