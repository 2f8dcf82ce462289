//! The provider trait: everything relink needs from an RDMA stack, the one
//! event stream it reports through, and the object counts of leak checks.

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
        /// The context the event is on: a device-wide event (fatal error,
        /// port change) comes once for every context open on the device; a
        /// QP or CQ event on the context that owns the object.
        ctx: ContextId,
        /// What happened.
        event: AsyncEvent,
    },
    /// A connection-manager event on one of this provider's CM ids.
    Cm(CmEvent),
    /// A CQ armed with [`Provider::req_notify_cq`] received a completion.
    CqReady(CqId),
}

/// Objects the caller created and has not destroyed yet, by kind, for leak
/// checks ([`Provider::object_counts`]). An object on a device that has
/// gone still counts until the caller destroys it (which then reports
/// [`Destroyed::AlreadyReleased`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ObjectCounts {
    /// Contexts opened and not closed.
    pub contexts: usize,
    /// Protection domains allocated and not freed.
    pub pds: usize,
    /// Completion queues created and not destroyed.
    pub cqs: usize,
    /// Shared receive queues created and not destroyed.
    pub srqs: usize,
    /// Memory regions registered and not deregistered.
    pub mrs: usize,
    /// Memory windows allocated and not freed.
    pub mws: usize,
    /// Queue pairs created and not destroyed.
    pub qps: usize,
    /// CM ids created and not destroyed (listeners and the ids of
    /// connection requests included).
    pub cm_ids: usize,
}

impl ObjectCounts {
    /// All objects of every kind; zero once the caller destroyed everything
    /// it created.
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
/// - An event loop can sleep on [`event_fd`](Provider::event_fd) instead of
///   calling `wait`, if the provider has one.
pub trait Provider: Send + Sync {
    /// Short name of the backend, e.g. `soft-inproc`, `soft-tcp`, `verbs`.
    fn kind(&self) -> &'static str;

    /// The provider's clock, which never goes back: virtual time on the
    /// in-process soft fabric, the monotonic clock otherwise. Deadlines given
    /// to [`wait`](Provider::wait) are on this clock.
    fn now(&self) -> Timestamp;

    /// Whether [`now`](Provider::now) is a virtual clock, one that moves
    /// only in [`wait`](Provider::wait) and the fabric's own calls (the
    /// in-process soft fabric). A caller that means to give something a
    /// moment of real time — a goodbye on its way out, when a node is
    /// dropped — does not wait on such a clock: waiting would move the
    /// whole simulated world. `false` (the default): the monotonic clock.
    fn has_virtual_clock(&self) -> bool {
        false
    }

    /// Block until an event may be ready (an event queued, a completion
    /// arrived) or `deadline` passed; `None` waits without a deadline. An
    /// event queued and not yet polled makes it return at once. A
    /// virtual-time provider advances its clock here. Spurious returns are
    /// allowed.
    fn wait(&self, deadline: Option<Timestamp>);

    /// Take the oldest queued event, if any; never blocks. Events stay
    /// queued until taken. Returning `None` clears the
    /// [`event_fd`](Provider::event_fd).
    fn poll_event(&self) -> Option<Event>;

    /// A file descriptor for an event loop (epoll, mio, tokio's `AsyncFd`)
    /// in place of [`wait`](Provider::wait): it polls readable (`POLLIN`)
    /// when something came that `wait` returns for — an event queued for
    /// [`poll_event`](Provider::poll_event), or a completion (on a CQ the
    /// caller arms with [`req_notify_cq`](Provider::req_notify_cq), its
    /// [`Event::CqReady`]; on a CQ the caller never arms, any completion).
    /// `None` (the default): the provider has no such fd, use `wait`.
    ///
    /// - **Level-triggered, cleared by the provider.** Once readable it
    ///   stays readable until `poll_event` returns `None`, which clears it;
    ///   the caller never reads it. Whatever comes after that clearing makes
    ///   it readable again (a new edge, for an edge-triggered registration).
    ///   `wait` neither needs nor clears it.
    /// - **A hint.** After readiness, take events until `poll_event`
    ///   returns `None`, *then* poll the CQs until they are empty: a
    ///   completion that came before the clearing is found by that polling,
    ///   one that came after makes the fd readable again. The fd may be
    ///   readable with nothing to do; it is never left unreadable while an
    ///   event is queued or after a completion that came since the last
    ///   clearing.
    /// - **One fd per provider**, created by the first call (readable until
    ///   the first clearing) and closed with the provider; borrowed, never
    ///   to be closed or read by the caller. `None` also if it could not be
    ///   created (no file descriptor left).
    /// - **Virtual time.** On a provider whose clock moves only in `wait`
    ///   (the in-process soft fabric) nothing arrives while the caller
    ///   sleeps on the fd: it becomes readable only through calls that run
    ///   the fabric, so a loop on such a provider keeps driving it with
    ///   `wait`.
    #[cfg(unix)]
    fn event_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    // ---- devices ----

    /// The devices registered now, each under its current [`DeviceId`]: a
    /// removed device is absent, one that came back is listed with its new
    /// generation.
    fn devices(&self) -> Vec<DeviceInfo>;

    /// Open a context on a device. Fails with [`OpenError::NoDevice`] if
    /// that registration is gone (removed, reset or replaced), even while a
    /// device of the same name is present.
    fn open_device(&self, device: &DeviceId) -> Result<ContextId, OpenError>;

    /// Close a context: `Busy` while PDs or CQs of it remain.
    fn close_device(&self, ctx: ContextId) -> Result<Destroyed, DestroyError>;

    /// The registration a context was opened on, also after that device has
    /// gone; `None` for a handle that names no open context.
    fn context_device(&self, ctx: ContextId) -> Option<DeviceId>;

    /// Host memory that can be registered on any device of this provider.
    fn alloc_memory(&self, len: usize) -> Result<Memory, MemoryError>;

    // ---- verbs objects ----

    /// Allocate a protection domain on an open context.
    fn alloc_pd(&self, ctx: ContextId) -> Result<PdId, CreateError>;
    /// Free a protection domain: `Busy` while MRs, MWs, SRQs or QPs of it
    /// remain.
    fn dealloc_pd(&self, pd: PdId) -> Result<Destroyed, DestroyError>;

    /// Create a CQ of at least `depth` entries. More completions than that
    /// outstanding overrun it ([`AsyncEvent::CqErr`]).
    fn create_cq(&self, ctx: ContextId, depth: u32) -> Result<CqId, CreateError>;
    /// Destroy a CQ: `Busy` while a QP uses it.
    fn destroy_cq(&self, cq: CqId) -> Result<Destroyed, DestroyError>;
    /// Arm the CQ for one [`Event::CqReady`]: at its next completion, or
    /// with `solicited_only` at the next receive of a solicited message or
    /// the next unsuccessful completion. One arming, one event.
    fn req_notify_cq(&self, cq: CqId, solicited_only: bool) -> Result<(), PollError>;
    /// Move up to `max` completions, oldest first, to the end of `out`;
    /// returns how many. A CQ on a device that has gone still yields the
    /// completions flushed by the loss.
    fn poll_cq(
        &self,
        cq: CqId,
        max: usize,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize, PollError>;

    /// Create a shared receive queue.
    fn create_srq(&self, pd: PdId, init: SrqInit) -> Result<SrqId, CreateError>;
    /// Destroy a shared receive queue: `Busy` while a QP takes receives
    /// from it.
    fn destroy_srq(&self, srq: SrqId) -> Result<Destroyed, DestroyError>;
    /// Post receives to an SRQ, in order; any QP attached to it consumes
    /// them in posting order.
    fn post_srq_recv(&self, srq: SrqId, wrs: &[RecvWr]) -> Result<(), PostError>;

    /// Register `[addr, addr+length)` of `memory` (`ibv_reg_mr`), after the
    /// checks of [`check_reg_mr`](crate::check_reg_mr).
    fn reg_mr(
        &self,
        pd: PdId,
        memory: &Memory,
        addr: u64,
        length: u64,
        access: Access,
    ) -> Result<MrInfo, CreateError>;
    /// Deregister a memory region; its keys are refused from then on.
    fn dereg_mr(&self, mr: crate::handles::MrId) -> Result<Destroyed, DestroyError>;

    /// Allocate a memory window, unbound (its rkey grants nothing yet).
    fn alloc_mw(&self, pd: PdId, kind: MwType) -> Result<MwInfo, CreateError>;
    /// Bind a type 1 window through `qp` (`ibv_bind_mw`): returns the new
    /// rkey; the completion (`wr_id`) arrives on the send CQ.
    fn bind_mw(&self, qp: QpId, mw: MwId, wr_id: u64, bind: MwBind) -> Result<u32, PostError>;
    /// Free a memory window; its rkey is refused from then on.
    fn dealloc_mw(&self, mw: MwId) -> Result<Destroyed, DestroyError>;

    /// Create an RC queue pair (state `Init`; the CM moves it on).
    fn create_qp(&self, pd: PdId, init: QpInit) -> Result<QpId, CreateError>;
    /// Destroy a queue pair.
    fn destroy_qp(&self, qp: QpId) -> Result<Destroyed, DestroyError>;
    /// Current state of a QP.
    fn qp_state(&self, qp: QpId) -> Result<QpState, PollError>;
    /// Move a QP to the error state: everything outstanding flushes.
    fn qp_to_error(&self, qp: QpId) -> Result<(), PostError>;
    /// Post send-queue requests, executed in order. On error,
    /// [`PostError::posted`] says how many of `wrs` were accepted; those
    /// proceed as if posted alone, the rest were not posted. Posted to a QP
    /// in `Err`, requests are accepted and flush.
    fn post_send(&self, qp: QpId, wrs: &[SendWr]) -> Result<(), PostError>;
    /// Post receives, consumed in order; refused with `InvalidArgument` on
    /// a QP that takes its receives from an SRQ. Errors as for
    /// [`post_send`](Provider::post_send).
    fn post_recv(&self, qp: QpId, wrs: &[RecvWr]) -> Result<(), PostError>;

    // ---- connection management ----

    /// A new CM id, bound to nothing yet (see [`cm`](crate::cm) for the
    /// calls that follow on each side).
    fn cm_create_id(&self) -> Result<CmId, CmError>;
    /// Bind to a local address (wildcard IP allowed; port 0 picks one);
    /// returns the address bound. An id bound to a device's address belongs
    /// to that device and gets `DeviceRemoval` with it; a wildcard id
    /// belongs to none.
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
    /// The device the id is bound to, once its address was resolved, it was
    /// bound to a device's address, or it arrived with a connection request;
    /// `None` before that, for a wildcard listener, and for an unknown id.
    fn cm_device(&self, id: CmId) -> Option<DeviceId>;
    /// Local and peer addresses of the id, each `None` until known (a
    /// listener has no peer).
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

    /// Objects the caller created and has not destroyed yet, on live and
    /// dead devices alike; all zero once everything is destroyed.
    fn object_counts(&self) -> ObjectCounts;
}
