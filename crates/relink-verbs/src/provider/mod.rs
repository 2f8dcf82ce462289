//! The provider on rdma-core (see the crate docs for the design).
//!
//! This file is the map: the provider's state (the [`Inner`] tables behind
//! one mutex, shared with the event thread as [`Shared`]), the public types
//! [`VerbsProvider`] and [`RescanHandle`], and `impl Provider for
//! VerbsProvider`. Each `Provider` method forwards to an inherent method of
//! the same name in the file of its concern: an inherent method takes
//! precedence over a trait method, so `self.alloc_pd(ctx)` below calls the
//! one in `objects.rs` (were it missing, the call would recurse, which the
//! `unconditional_recursion` lint rejects).
//!
//! - `lifecycle.rs`: creating a provider (`with_config`), its device
//!   watcher, its public methods, and `Drop`.
//! - `events.rs`: the event thread (one `poll` over the CM channel, every
//!   context's async-event and completion fds and a wake-up eventfd), async
//!   events, `wait`, and the readiness eventfd of `event_fd`.
//! - `scan.rs`: the kernel's device list (sysfs, interface addresses), the
//!   process-wide registration generations, `Inner::rescan`, re-syncing
//!   librdmacm.
//! - `loss.rs`: a lost device: its contexts released with every object on
//!   them, outstanding requests flushed once, CM ids told; CM ids parked
//!   while their port is down.
//! - `context.rs`: `open_device`/`close_device`, the provider's own verbs
//!   context per opened device.
//! - `objects.rs`: create/destroy of PDs, CQs, SRQs, MRs, MWs and QPs, QP
//!   state, provider memory, object counts.
//! - `wr.rs`: posting work requests (send, receive, SRQ receive, type-1 MW
//!   binds) and the linked rdma-core request lists they are posted as.
//! - `completions.rs`: polling CQs into [`WorkCompletion`]s (with rxe's
//!   deviations), CQ notifications and the caller's arming.
//! - `cm.rs`: the caller's rdma_cm calls, and the QP transitions rdma_cm
//!   computes for a QP the id does not own.
//! - `cm_events.rs`: rdma_cm events translated into [`Event::Cm`], and the
//!   active side's RTR/RTS on a connect response.
//!
//! None of these files calls C: rdma-core, librdmacm and libc are reached
//! through the crate's FFI module (`crate::ffi`), whose handles the tables
//! below own (one handle per rdma-core object); each file has
//! `#![forbid(unsafe_code)]`.
//!
//! The provider's methods hold the one lock ([`Shared::lock`]) while they
//! touch the tables or call rdma-core, and the event thread takes it to
//! handle what it read: the tables and the rdma-core objects they hold
//! change only under it.

#![forbid(unsafe_code)]

mod cm;
mod cm_events;
mod completions;
mod context;
mod events;
mod lifecycle;
mod loss;
mod objects;
mod scan;
mod wr;

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::os::raw::c_int;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::errno;
use crate::ffi;
use crate::identity::{DeviceBook, RegKey};
use crate::memory::Allocations;
use crate::track::{Notify, RecvQueue, SendQueue};
use events::Ready;
use relink_fabric::{
    Access, CmError, CmId, ConnParams, ContextId, CqId, CreateError, DestroyError, Destroyed,
    DeviceId, DeviceInfo, Event, Memory, MemoryError, MrId, MrInfo, MwBind, MwId, MwInfo, MwType,
    ObjectCounts, OpenError, PdId, PollError, PostError, Provider, QpId, QpInit, QpState, RecvWr,
    SendWr, SrqId, SrqInit, Timestamp, WorkCompletion,
};
use scan::port_down_listed;

// ---------------------------------------------------------------------
// state
// ---------------------------------------------------------------------

// Every record names its parent objects by handle (`ctx`, `pd`: keys of
// the tables in `Inner`), and owns its rdma-core object as `raw` (the FFI
// module's handle): `None` once the object was released because its device
// is gone (the record stays until the caller destroys it).

/// An opened device: the provider's own verbs context on it.
struct Ctx {
    device: DeviceId,
    /// `None` once released (the device was lost).
    raw: Option<ffi::Context>,
    /// The completion channel of every CQ on this context; `None` once
    /// released with the context.
    chan: Option<ffi::CompChannel>,
    /// The port QPs are created on (always 1).
    port: u8,
    /// Port 1's link layer (`IBV_LINK_LAYER_*`; 0 if the query failed).
    link_layer: u8,
    /// The device's `max_qp_rd_atom` (at most 255): the responder
    /// resources `cm_connect` offers, and the most `cm_accept` grants.
    max_qp_rd_atom: u8,
    /// The device's `max_qp_init_rd_atom` (at most 255): the initiator
    /// depth `cm_connect` offers, and the most `cm_accept` grants.
    max_qp_init_rd_atom: u8,
    /// Soft-RoCE (rxe) quirks apply (see [`context::RXE_VENDOR_ID`]).
    rxe: bool,
}

struct Pd {
    ctx: u64,
    raw: Option<ffi::Pd>,
}

struct Cq {
    ctx: u64,
    raw: Option<ffi::Cq>,
    /// The depth the caller asked for: the provider's own polls (for
    /// `wait`, the solicited scan) keep `pending` within it.
    depth: u32,
    /// Completions taken from the hardware (or made up by a flush) and
    /// not yet handed to the caller, oldest first.
    pending: VecDeque<WorkCompletion>,
    notify: Notify,
}

struct Srq {
    ctx: u64,
    pd: u64,
    raw: Option<ffi::Srq>,
    init: SrqInit,
}

struct Mr {
    ctx: u64,
    pd: u64,
    raw: Option<ffi::Mr>,
    /// Keeps the memory mapped while registered (and names it for
    /// `release_memory`).
    memory: Memory,
}

struct Mw {
    ctx: u64,
    pd: u64,
    raw: Option<ffi::Mw>,
    kind: MwType,
}

struct Qp {
    ctx: u64,
    pd: u64,
    raw: Option<ffi::Qp>,
    /// The QP number (the key of `Inner::qp_by_num` with `ctx`).
    qpn: u32,
    init: QpInit,
    /// The last state the provider knows of (set by its own transitions,
    /// error completions and async events; `qp_state` queries the device).
    state: QpState,
    /// Send requests posted and not completed yet.
    sq: SendQueue,
    /// Receives posted and not completed yet (empty with an SRQ).
    rq: RecvQueue,
    /// The CM id this QP is connected through, if any.
    cm: Option<u64>,
    /// `QpLastWqeReached` was reported (by the device, or by the provider
    /// on rxe): it is reported once.
    last_wqe_reported: bool,
}

struct CmRec {
    raw: ffi::CmId,
    /// The device the id is bound to; `None` until it is bound or
    /// resolved.
    device: Option<DeviceId>,
    /// The QP `cm_connect`/`cm_accept` bound to the id.
    qp: Option<u64>,
    /// The caller's parameters of `cm_connect` (used again at RTS).
    params: ConnParams,
    /// From the connection request: what the initiator asked for.
    req_responder_resources: u8,
    req_initiator_depth: u8,
    /// `DeviceRemoval` was reported for this id (it is reported once).
    removal_reported: bool,
    /// `Disconnected` was reported for this id (it is reported once).
    disconnect_reported: bool,
    /// The id's device is gone.
    lost: bool,
    /// A CM exchange began on this id (it sent a connection request or
    /// received one): destroying it, or disconnecting it, sends a message
    /// (DREQ, REJ) through the kernel's CM.
    wire: bool,
}

impl CmRec {
    /// Whether a CM message this id would send now must wait: an exchange
    /// began on it and its device is listed with its port down.
    fn must_defer_mads(&self) -> bool {
        self.wire
            && !self.lost
            && self
                .device
                .as_ref()
                .is_some_and(|d| port_down_listed(&d.name))
    }
}

/// A CM id the caller destroyed while its device's port was down, kept
/// until the port is ACTIVE again (or the device goes) and destroyed then.
struct ParkedId {
    raw: ffi::CmId,
    device: DeviceId,
}

/// The provider's tables, under [`Shared::lock`].
struct Inner {
    /// The next handle to give out; one series for every kind of object.
    next_handle: u64,
    book: DeviceBook,
    /// The registrations of the last scan (to see one leave).
    last_scan: Vec<RegKey>,
    /// librdmacm must re-sync at the next scan (a lost device may still be
    /// listed, its cached context not closed yet).
    resync_pending: bool,
    /// librdmacm must re-sync as soon as the lock is released (a device
    /// left): the event thread does it without the lock — librdmacm's own
    /// mutex guards its device list — so the caller's calls do not wait
    /// for the devices it opens and closes (milliseconds under emulation,
    /// on the recovery path).
    resync_now: bool,
    /// The event thread's wake-up eventfd ([`Shared::kick`], shared with
    /// [`Shared::wake`]), to have it carry out `resync_now` when another
    /// thread found the device gone.
    wake: Arc<OwnedFd>,
    /// The rdma_cm event channel every CM id of the provider is on; taken
    /// out only while the event thread reads its events, and when the
    /// provider is dropped.
    channel: Option<ffi::EventChannel>,
    /// Someone asked for a re-scan; the event thread does it next.
    rescan_requested: bool,
    /// The threads destroying lost devices' objects (`Inner::reap`),
    /// joined when the provider is dropped.
    reapers: Vec<JoinHandle<()>>,
    /// Events for `poll_event`, oldest first.
    events: VecDeque<Event>,
    /// Something happened that `wait` should return for (an event or a
    /// completion); `wait` clears it.
    activity: bool,
    /// The readiness fd of `event_fd`, made readable wherever `activity`
    /// is set.
    ready: Ready,
    /// The set of fds the event thread polls changed (a context opened or
    /// closed).
    fds_changed: bool,
    ctxs: HashMap<u64, Ctx>,
    pds: HashMap<u64, Pd>,
    cqs: HashMap<u64, Cq>,
    srqs: HashMap<u64, Srq>,
    mrs: HashMap<u64, Mr>,
    mws: HashMap<u64, Mw>,
    qps: HashMap<u64, Qp>,
    cms: HashMap<u64, CmRec>,
    /// Handles by rdma-core object address (the FFI handles' `key`), for
    /// events that name the object.
    cq_by_ptr: HashMap<usize, u64>,
    qp_by_ptr: HashMap<usize, u64>,
    srq_by_ptr: HashMap<usize, u64>,
    /// QP handles by (context, QP number), for completions.
    qp_by_num: HashMap<(u64, u32), u64>,
    cm_by_ptr: HashMap<usize, u64>,
    /// CM ids destroyed by the caller while their port was down. Destroying
    /// a connected id sends a DREQ (a connecting one a REJ) through the
    /// port's GSI QP; with the netdev down the kernel finds no route, and
    /// rxe (6.1, 6.12) then moves QP1 to the error state for good: no
    /// connection can be made on that device again, and `rdma link delete`
    /// of it hangs. So such ids are destroyed once the port is ACTIVE again
    /// (at a re-scan), or at once when the device goes.
    parked: Vec<ParkedId>,
    /// The provider's memory mappings (`reg_mr` accepts only these).
    allocs: Allocations,
    /// The request lists of the post calls, reused from one call to the
    /// next so that posting allocates nothing once warm.
    scratch: Scratch,
}

/// What the provider and its event thread share.
struct Shared {
    inner: Mutex<Inner>,
    /// Signalled by the event thread when it queued an event or saw
    /// activity; `wait` sleeps on it.
    cond: Condvar,
    /// The origin of [`Timestamp`]s.
    start: Instant,
    /// The event thread stops when set.
    stop: AtomicBool,
    /// An eventfd that wakes the event thread.
    wake: Arc<OwnedFd>,
    /// The readiness eventfd handed out by `event_fd` (also in
    /// [`Inner::ready`]), created by its first call.
    ready_fd: OnceLock<Arc<OwnedFd>>,
    /// The fd of the rdma_cm event channel ([`Inner::channel`]), open
    /// until the provider is dropped, after the event thread stopped.
    chan_fd: RawFd,
    rescan_interval: Duration,
    default_source: Option<IpAddr>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> Timestamp {
        Timestamp(self.start.elapsed().as_nanos() as u64)
    }

    /// Wake the event thread (the set of fds changed, a rescan is wanted,
    /// or it must stop).
    fn kick(&self) {
        ffi::write_eventfd(self.wake.as_fd());
    }
}

/// The request lists of the post calls, one of each kind, kept in the
/// provider's [`Inner`] and used under its lock.
#[derive(Default)]
struct Scratch {
    send: ffi::SendBatch,
    recv: ffi::RecvBatch,
}

/// Log, at debug level, a nonzero return code that is ignored: a release
/// goes ahead anyway (and fails as expected on a lost device), and a failed
/// CQ arming is only logged.
fn log_rc(what: &str, rc: c_int) {
    if rc != 0 {
        tracing::debug!(target: "relink_verbs", call = what, error = %errno::describe(rc.abs()), "ignored during release");
    }
}

impl Inner {
    /// A new handle, never given out before by this provider.
    fn handle(&mut self) -> u64 {
        let h = self.next_handle;
        self.next_handle += 1;
        h
    }

    /// Queue `ev` for `poll_event` (and wake `wait`).
    fn push(&mut self, ev: Event) {
        tracing::debug!(target: "relink_verbs", event = ?ev, "event");
        self.events.push_back(ev);
        self.note_activity();
    }

    /// Something happened that `wait` returns for: set `activity` and make
    /// the readiness fd readable.
    fn note_activity(&mut self) {
        self.activity = true;
        self.ready.signal();
    }

    /// Whether context `ctx` exists and its device is not lost.
    fn ctx_alive(&self, ctx: u64) -> bool {
        self.ctxs.get(&ctx).is_some_and(|c| c.raw.is_some())
    }
}

// ---------------------------------------------------------------------
// the public types
// ---------------------------------------------------------------------

/// Asks a provider's event thread to re-scan the device list now: the hook
/// for an external device watcher (RDMA netlink, uevents). Holds the
/// provider's state alive, not its thread.
#[derive(Clone)]
pub struct RescanHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RescanHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RescanHandle")
    }
}

impl RescanHandle {
    /// Re-scan soon (the event thread does it at once).
    pub fn rescan(&self) {
        self.shared.lock().rescan_requested = true;
        self.shared.kick();
    }
}

/// The rdma-core provider (see the crate docs).
pub struct VerbsProvider {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The device watcher that asks for re-scans (dropped first).
    watcher: Option<relink_devwatch::watch::DeviceWatcher>,
}

impl std::fmt::Debug for VerbsProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsProvider").finish_non_exhaustive()
    }
}

impl VerbsProvider {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.shared.lock()
    }
}

// ---------------------------------------------------------------------
// the Provider: forwarding to the files of each concern
// ---------------------------------------------------------------------

impl Provider for VerbsProvider {
    fn kind(&self) -> &'static str {
        "verbs"
    }

    fn now(&self) -> Timestamp {
        self.shared.now()
    }

    fn poll_event(&self) -> Option<Event> {
        let mut inner = self.lock();
        let ev = inner.events.pop_front();
        if ev.is_none() {
            inner.drained();
        }
        ev
    }

    fn devices(&self) -> Vec<DeviceInfo> {
        self.lock().book.list()
    }

    // events.rs

    fn wait(&self, deadline: Option<Timestamp>) {
        self.wait(deadline)
    }

    fn event_fd(&self) -> Option<BorrowedFd<'_>> {
        self.event_fd()
    }

    // context.rs

    fn open_device(&self, device: &DeviceId) -> Result<ContextId, OpenError> {
        self.open_device(device)
    }

    fn close_device(&self, ctx: ContextId) -> Result<Destroyed, DestroyError> {
        self.close_device(ctx)
    }

    fn context_device(&self, ctx: ContextId) -> Option<DeviceId> {
        self.context_device(ctx)
    }

    // objects.rs

    fn alloc_memory(&self, len: usize) -> Result<Memory, MemoryError> {
        self.alloc_memory(len)
    }

    fn alloc_pd(&self, ctx: ContextId) -> Result<PdId, CreateError> {
        self.alloc_pd(ctx)
    }

    fn dealloc_pd(&self, pd: PdId) -> Result<Destroyed, DestroyError> {
        self.dealloc_pd(pd)
    }

    fn create_cq(&self, ctx: ContextId, depth: u32) -> Result<CqId, CreateError> {
        self.create_cq(ctx, depth)
    }

    fn destroy_cq(&self, cq: CqId) -> Result<Destroyed, DestroyError> {
        self.destroy_cq(cq)
    }

    fn create_srq(&self, pd: PdId, init: SrqInit) -> Result<SrqId, CreateError> {
        self.create_srq(pd, init)
    }

    fn destroy_srq(&self, srq: SrqId) -> Result<Destroyed, DestroyError> {
        self.destroy_srq(srq)
    }

    fn reg_mr(
        &self,
        pd: PdId,
        memory: &Memory,
        addr: u64,
        length: u64,
        access: Access,
    ) -> Result<MrInfo, CreateError> {
        self.reg_mr(pd, memory, addr, length, access)
    }

    fn dereg_mr(&self, mr: MrId) -> Result<Destroyed, DestroyError> {
        self.dereg_mr(mr)
    }

    fn alloc_mw(&self, pd: PdId, kind: MwType) -> Result<MwInfo, CreateError> {
        self.alloc_mw(pd, kind)
    }

    fn dealloc_mw(&self, mw: MwId) -> Result<Destroyed, DestroyError> {
        self.dealloc_mw(mw)
    }

    fn create_qp(&self, pd: PdId, init: QpInit) -> Result<QpId, CreateError> {
        self.create_qp(pd, init)
    }

    fn destroy_qp(&self, qp: QpId) -> Result<Destroyed, DestroyError> {
        self.destroy_qp(qp)
    }

    fn qp_state(&self, qp: QpId) -> Result<QpState, PollError> {
        self.qp_state(qp)
    }

    fn qp_to_error(&self, qp: QpId) -> Result<(), PostError> {
        self.qp_to_error(qp)
    }

    fn object_counts(&self) -> ObjectCounts {
        self.object_counts()
    }

    // wr.rs

    fn post_send(&self, qp: QpId, wrs: &[SendWr]) -> Result<(), PostError> {
        self.post_send(qp, wrs)
    }

    fn post_recv(&self, qp: QpId, wrs: &[RecvWr]) -> Result<(), PostError> {
        self.post_recv(qp, wrs)
    }

    fn post_srq_recv(&self, srq: SrqId, wrs: &[RecvWr]) -> Result<(), PostError> {
        self.post_srq_recv(srq, wrs)
    }

    fn bind_mw(&self, qp: QpId, mw: MwId, wr_id: u64, bind: MwBind) -> Result<u32, PostError> {
        self.bind_mw(qp, mw, wr_id, bind)
    }

    // completions.rs

    fn req_notify_cq(&self, cq: CqId, solicited_only: bool) -> Result<(), PollError> {
        self.req_notify_cq(cq, solicited_only)
    }

    fn poll_cq(
        &self,
        cq: CqId,
        max: usize,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize, PollError> {
        self.poll_cq(cq, max, out)
    }

    // cm.rs

    fn cm_create_id(&self) -> Result<CmId, CmError> {
        self.cm_create_id()
    }

    fn cm_bind(&self, id: CmId, addr: SocketAddr) -> Result<SocketAddr, CmError> {
        self.cm_bind(id, addr)
    }

    fn cm_listen(&self, id: CmId, backlog: u32) -> Result<(), CmError> {
        self.cm_listen(id, backlog)
    }

    fn cm_resolve_addr(
        &self,
        id: CmId,
        src: Option<IpAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<(), CmError> {
        self.cm_resolve_addr(id, src, dst, timeout)
    }

    fn cm_resolve_route(&self, id: CmId, timeout: Duration) -> Result<(), CmError> {
        self.cm_resolve_route(id, timeout)
    }

    fn cm_device(&self, id: CmId) -> Option<DeviceId> {
        self.cm_device(id)
    }

    fn cm_addrs(&self, id: CmId) -> (Option<SocketAddr>, Option<SocketAddr>) {
        self.cm_addrs(id)
    }

    fn cm_connect(
        &self,
        id: CmId,
        qp: QpId,
        params: ConnParams,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        self.cm_connect(id, qp, params, private_data)
    }

    fn cm_accept(&self, id: CmId, qp: QpId, private_data: &[u8]) -> Result<(), CmError> {
        self.cm_accept(id, qp, private_data)
    }

    fn cm_reject(&self, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        self.cm_reject(id, private_data)
    }

    fn cm_disconnect(&self, id: CmId) -> Result<(), CmError> {
        self.cm_disconnect(id)
    }

    fn cm_destroy_id(&self, id: CmId) -> Result<Destroyed, DestroyError> {
        self.cm_destroy_id(id)
    }
}
