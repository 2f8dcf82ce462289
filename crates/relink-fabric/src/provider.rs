//! The provider trait: everything relink needs from an RDMA stack.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::cm::CmEvent;
use crate::device::{DeviceEvent, DeviceId, DeviceInfo};
use crate::error::{
    CmError, CreateError, DestroyError, Destroyed, MemoryError, OpenError, PollError, PostError,
};
use crate::handles::{CmId, ContextId, CqId, MwId, PdId, QpId, SrqId};
use crate::memory::Memory;
use crate::time::Timestamp;
use crate::verbs::{
    Access, AsyncEvent, ConnParams, MrInfo, MwBind, MwInfo, MwType, QpInit, QpState, RecvWr,
    SendWr, SrqInit, WorkCompletion,
};

/// One entry of a provider's single event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A device was added, removed, reset, or changed its port or netdev.
    Device(DeviceEvent),
    /// An asynchronous event on an open context.
    Async {
        /// The context.
        ctx: ContextId,
        /// The event.
        event: AsyncEvent,
    },
    /// A connection-manager event.
    Cm(CmEvent),
    /// A CQ armed with [`Provider::req_notify_cq`] received a completion.
    CqReady(CqId),
}

/// Live object counts, for leak checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ObjectCounts {
    /// Open contexts.
    pub contexts: usize,
    /// Protection domains.
    pub pds: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Shared receive queues.
    pub srqs: usize,
    /// Memory regions.
    pub mrs: usize,
    /// Memory windows.
    pub mws: usize,
    /// Queue pairs.
    pub qps: usize,
    /// CM ids.
    pub cm_ids: usize,
}

impl ObjectCounts {
    /// Sum of all counts.
    pub fn total(&self) -> usize {
        self.contexts
            + self.pds
            + self.cqs
            + self.srqs
            + self.mrs
            + self.mws
            + self.qps
            + self.cm_ids
    }
}

/// An RDMA stack as one process sees it: devices, verbs objects, connection
/// management and one event stream.
///
/// Contract (checked by `relink-testkit`'s conformance suite):
/// - Calls never block; [`wait`](Provider::wait) is the only blocking call.
/// - RC semantics: requests execute in order at the responder; a requester's
///   completion means the responder acknowledged; rkey, rights and bounds are
///   checked (`RemAccessErr`); after an error the QP flushes the rest.
/// - On a device loss every outstanding request completes with
///   `WrFlushErr` — even one the responder already executed — every CM id on
///   the device gets `DeviceRemoval`, later creates fail with `DeviceLost`, and
///   destroy calls return [`Destroyed::AlreadyReleased`]. CQs stay pollable so
///   the flushed completions can be read.
/// - A device that comes back (reset, re-add) or is replaced shows a new
///   [`DeviceId::generation`]; a replacement also shows a new GUID.
pub trait Provider: Send + Sync {
    /// Short name of the backend, e.g. `soft-inproc`, `soft-tcp`, `verbs`.
    fn kind(&self) -> &'static str;

    /// The provider's clock.
    fn now(&self) -> Timestamp;

    /// Block until an event may be ready (an event queued, a completion
    /// arrived) or `deadline` passed. A virtual-time provider advances its
    /// clock here. Spurious returns are allowed.
    fn wait(&self, deadline: Option<Timestamp>);

    /// Next event, if any.
    fn poll_event(&self) -> Option<Event>;

    // ---- devices ----

    /// Devices present now.
    fn devices(&self) -> Vec<DeviceInfo>;

    /// Open a context on a device. Fails if that registration is gone.
    fn open_device(&self, device: &DeviceId) -> Result<ContextId, OpenError>;

    /// Close a context (all its objects must be destroyed first).
    fn close_device(&self, ctx: ContextId) -> Result<Destroyed, DestroyError>;

    /// The device a context is open on.
    fn context_device(&self, ctx: ContextId) -> Option<DeviceId>;

    /// Host memory that can be registered on any device of this provider.
    fn alloc_memory(&self, len: usize) -> Result<Memory, MemoryError>;

    // ---- verbs objects ----

    /// Allocate a protection domain.
    fn alloc_pd(&self, ctx: ContextId) -> Result<PdId, CreateError>;
    /// Free a protection domain.
    fn dealloc_pd(&self, pd: PdId) -> Result<Destroyed, DestroyError>;

    /// Create a CQ of at least `depth` entries.
    fn create_cq(&self, ctx: ContextId, depth: u32) -> Result<CqId, CreateError>;
    /// Destroy a CQ.
    fn destroy_cq(&self, cq: CqId) -> Result<Destroyed, DestroyError>;
    /// Ask for one [`Event::CqReady`] at the next (solicited) completion.
    fn req_notify_cq(&self, cq: CqId, solicited_only: bool) -> Result<(), PollError>;
    /// Move up to `max` completions into `out`; returns how many.
    fn poll_cq(
        &self,
        cq: CqId,
        max: usize,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize, PollError>;

    /// Create a shared receive queue.
    fn create_srq(&self, pd: PdId, init: SrqInit) -> Result<SrqId, CreateError>;
    /// Destroy a shared receive queue.
    fn destroy_srq(&self, srq: SrqId) -> Result<Destroyed, DestroyError>;
    /// Post receives to an SRQ.
    fn post_srq_recv(&self, srq: SrqId, wrs: &[RecvWr]) -> Result<(), PostError>;

    /// Register `[addr, addr+length)` of `memory` (`ibv_reg_mr`).
    fn reg_mr(
        &self,
        pd: PdId,
        memory: &Memory,
        addr: u64,
        length: u64,
        access: Access,
    ) -> Result<MrInfo, CreateError>;
    /// Deregister a memory region.
    fn dereg_mr(&self, mr: crate::handles::MrId) -> Result<Destroyed, DestroyError>;

    /// Allocate a memory window.
    fn alloc_mw(&self, pd: PdId, kind: MwType) -> Result<MwInfo, CreateError>;
    /// Bind a type 1 window through `qp` (`ibv_bind_mw`): returns the new
    /// rkey; the completion (`wr_id`) arrives on the send CQ.
    fn bind_mw(&self, qp: QpId, mw: MwId, wr_id: u64, bind: MwBind) -> Result<u32, PostError>;
    /// Free a memory window.
    fn dealloc_mw(&self, mw: MwId) -> Result<Destroyed, DestroyError>;

    /// Create an RC queue pair (state `Init`; the CM moves it on).
    fn create_qp(&self, pd: PdId, init: QpInit) -> Result<QpId, CreateError>;
    /// Destroy a queue pair.
    fn destroy_qp(&self, qp: QpId) -> Result<Destroyed, DestroyError>;
    /// Current state of a QP.
    fn qp_state(&self, qp: QpId) -> Result<QpState, PollError>;
    /// Move a QP to the error state: everything outstanding flushes.
    fn qp_to_error(&self, qp: QpId) -> Result<(), PostError>;
    /// Post send-queue requests in order.
    fn post_send(&self, qp: QpId, wrs: &[SendWr]) -> Result<(), PostError>;
    /// Post receives.
    fn post_recv(&self, qp: QpId, wrs: &[RecvWr]) -> Result<(), PostError>;

    // ---- connection management ----

    /// A new CM id.
    fn cm_create_id(&self) -> Result<CmId, CmError>;
    /// Bind to a local address (wildcard IP allowed; port 0 picks one).
    fn cm_bind(&self, id: CmId, addr: SocketAddr) -> Result<SocketAddr, CmError>;
    /// Listen on the bound address.
    fn cm_listen(&self, id: CmId, backlog: u32) -> Result<(), CmError>;
    /// Resolve `dst` to a local device (event `AddrResolved` / `AddrError`).
    fn cm_resolve_addr(
        &self,
        id: CmId,
        src: Option<IpAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<(), CmError>;
    /// Resolve the route (event `RouteResolved` / `RouteError`).
    fn cm_resolve_route(&self, id: CmId, timeout: Duration) -> Result<(), CmError>;
    /// The device the id is bound to, once resolved, bound or requested.
    fn cm_device(&self, id: CmId) -> Option<DeviceId>;
    /// Local and peer addresses of the id, as far as known.
    fn cm_addrs(&self, id: CmId) -> (Option<SocketAddr>, Option<SocketAddr>);
    /// Connect `qp` to the resolved peer with at most 56 bytes of private data.
    fn cm_connect(
        &self,
        id: CmId,
        qp: QpId,
        params: ConnParams,
        private_data: &[u8],
    ) -> Result<(), CmError>;
    /// Accept a connection request on its new id with `qp`
    /// (at most 196 bytes of private data).
    fn cm_accept(&self, id: CmId, qp: QpId, private_data: &[u8]) -> Result<(), CmError>;
    /// Reject a connection request (at most 148 bytes of private data).
    fn cm_reject(&self, id: CmId, private_data: &[u8]) -> Result<(), CmError>;
    /// Disconnect: the QP goes to error, the peer sees `Disconnected`.
    fn cm_disconnect(&self, id: CmId) -> Result<(), CmError>;
    /// Destroy an id (disconnecting it first if connected).
    fn cm_destroy_id(&self, id: CmId) -> Result<Destroyed, DestroyError>;

    // ---- introspection ----

    /// Objects not yet destroyed by the caller (on live or dead devices).
    fn object_counts(&self) -> ObjectCounts;
}
