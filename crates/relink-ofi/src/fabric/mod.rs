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

mod connection;
mod data;
mod objects;
#[cfg(test)]
mod tests;

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
    srxs: HashMap<Id, Srx>,
    by_session: HashMap<SessionHandle, Owner>,
    scratch: Vec<u8>,
    /// The bounce buffers of RMA injects, made at the first.
    inject: Option<InjectPool>,
}

/// Registered memory of the fabric that RMA injects (`fi_inject_write`,
/// `fi_inject_writedata`) copy their bytes into: a WRITE's source must be
/// registered, and an inject's buffer is the caller's again at return.
/// One slot of `inject_size` bytes per operation in flight, up to the
/// queue size; a slot is free again at its operation's completion (also
/// when its endpoint was closed before).
struct InjectPool {
    memory: relink::Memory,
    region: relink::RegionId,
    slot: usize,
    free: Vec<u32>,
    held: HashMap<relink::OpId, u32>,
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
    /// The shared receive context its receives come from, if bound.
    srx: Option<Id>,
    /// The receive the message under way fills (taken at its first
    /// fragment).
    current: Option<PostedRecv>,
    /// Bytes of the message under way into `current`.
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
    /// `FI_COMPLETION` (or a call without flags): with selective
    /// completion on the endpoint that takes it, only these are reported.
    completion: bool,
}

impl PostedRecv {
    /// The error completion of a receive that will not be filled.
    fn failed(&self, err: u32, message: String) -> CqError {
        CqError {
            entry: CqEntry {
                context: self.context,
                flags: FI_RECV | FI_MSG,
                len: 0,
                data: 0,
            },
            err,
            olen: 0,
            message,
        }
    }
}

/// A shared receive context (`fi_srx_context`): receives posted once for
/// every endpoint bound to it; whichever endpoint's next message comes
/// first takes the front one.
struct Srx {
    recvs: VecDeque<PostedRecv>,
}

/// An RMA operation (`fi_read`, `fi_write`, `fi_writedata`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rma {
    /// Read the peer's memory.
    Read,
    /// Write the peer's memory.
    Write,
    /// Write the peer's memory and tell the peer's application, in order
    /// with the messages, with this remote CQ data: relink's WRITE with
    /// immediate data.
    WriteData(u64),
}

/// An atomic on one 8-byte word of the peer's (`fi_atomic`,
/// `fi_fetch_atomic`, `fi_compare_atomic` on `FI_UINT64` or `FI_INT64`):
/// relink's FETCH_ADD and CMP_SWAP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Atomic {
    /// `FI_SUM`: add (wrapping), the old value fetched.
    Add(u64),
    /// `FI_ATOMIC_READ`: the word fetched (a FETCH_ADD of 0).
    Read,
    /// `FI_CSWAP`: store `swap` if the word is `compare`, the old value
    /// fetched.
    Swap {
        /// The value expected.
        compare: u64,
        /// The value stored.
        swap: u64,
    },
}

/// The remote CQ data that travels: its low
/// [`CQ_DATA_SIZE`](crate::info::CQ_DATA_SIZE) bytes.
pub(crate) fn cq_data(data: u64) -> u32 {
    data as u32
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
                srxs: HashMap::new(),
                by_session: HashMap::new(),
                scratch: Vec::new(),
                inject: None,
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

    /// The options of the provider's sessions.
    fn session_options(&self, connect_data: Vec<u8>) -> Result<SessionOptions, FiError> {
        session_options(&self.params, connect_data)
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

fn submit_error(call: &str, e: SubmitError) -> FiError {
    let errno = match e {
        SubmitError::WouldBlock { .. } => FI_EAGAIN,
        SubmitError::Ended(_) => FI_ENOTCONN,
        _ => FI_EINVAL,
    };
    FiError::new(errno, format!("{call}: {e}"))
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
