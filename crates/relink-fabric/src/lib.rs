//! # relink-fabric — the provider interface
//!
//! relink's recovery logic never knows which RDMA stack it runs on. This
//! crate is the contract between the two: a [`Provider`] exposes devices and
//! a device event stream, the verbs objects (PD, CQ, SRQ, MR, MW, RC QP),
//! `rdma_cm`-style connection management with private data, posting and
//! polling — with the behaviour of a real RC fabric, including what a device
//! loss does. Every backend implements it: `relink-soft` (in-process on
//! virtual time, and across processes over TCP; the embedded default) and
//! `relink-verbs` (rdma-core, behind its `rdma` feature).
//!
//! ## Map
//!
//! - [`provider`]: the [`Provider`] trait, its one [`Event`] stream and the
//!   [`ObjectCounts`] of leak checks. Start here.
//! - [`device`]: what a process sees of a device ([`DeviceInfo`]), how one
//!   registration is told from the next ([`DeviceId`]: name, index,
//!   generation) and the device events ([`DeviceEvent`]).
//! - [`verbs`]: the data of the verbs calls in `libibverbs` names — access
//!   flags, work requests ([`SendWr`], [`RecvWr`]), completions
//!   ([`WorkCompletion`]), QP, SRQ and connection attributes — and the
//!   argument checks every provider makes the same way ([`check_reg_mr`],
//!   [`SendWr::check`], [`RecvWr::check`]).
//! - [`sgl`]: [`SgeList`], a request's scatter/gather list, which holds
//!   the usual one or two elements without allocating.
//! - [`cm`]: connection management as in `rdma_cm`: the calls of each side
//!   in order, the [`CmEvent`]s they produce, the private-data limits
//!   ([`check_private_data`]).
//! - [`memory`]: the host memory operations read and write ([`Memory`]),
//!   the trait its backing store implements ([`HostMemory`]), and
//!   [`HeapMemory`] for a provider that needs no pinned pages.
//! - [`handles`]: the typed handles of provider objects.
//! - [`error`]: one error enum per kind of call, each variant classed by
//!   [`ErrorClass`] (retry, recover, or give up).
//! - [`time`]: the provider's clock ([`Timestamp`]).
//!
//! ## The contract
//!
//! What every provider keeps (the details are on [`Provider`] and in the
//! module docs). `relink-testkit`'s conformance suite checks it: a new
//! backend implements the testkit's `Rig` (two hosts, one device each, and
//! the faults it can inject) and runs every case with
//! `relink_testkit::conformance_tests!(MyRig::new())`.
//!
//! - **Only [`Provider::wait`] blocks.** Every other call returns at once.
//!   `wait` returns when an event or a completion may be ready, or at its
//!   deadline; a virtual-time provider advances its clock there.
//! - **An event loop can sleep on a file descriptor instead**
//!   ([`Provider::event_fd`], optional): readable when `wait` would return
//!   at once, level-triggered, cleared by the provider when
//!   [`Provider::poll_event`] returns `None`; a hint, so after readiness the
//!   caller takes events until `None`, then polls its CQs until empty. The
//!   in-process soft fabric has one too, but its virtual time moves only in
//!   `wait`.
//! - **One event stream.** Device changes, asynchronous events, CM events
//!   and CQ notifications all come out of [`Provider::poll_event`].
//! - **RC semantics.** Requests execute in order at the responder; a
//!   requester's completion means the responder acknowledged it; rkey,
//!   rights and bounds are checked ([`WcStatus::RemAccessErr`], nothing
//!   written); after an error completion the QP is in [`QpState::Err`] and
//!   every request behind it flushes.
//! - **A device loss is reported, never hidden:**
//!   - every outstanding request completes with [`WcStatus::WrFlushErr`],
//!     even one the responder already executed (the ambiguity relink
//!     resolves), and the CQs stay pollable so these completions can be
//!     read;
//!   - every CM id on the device gets [`CmEventKind::DeviceRemoval`];
//!   - creates on the dead context fail with a
//!     [`DeviceFatal`](ErrorClass::DeviceFatal) error;
//!   - destroy calls report [`Destroyed::AlreadyReleased`] instead of
//!     failing.
//! - **A device that comes back is a new device.** A reset or re-add shows
//!   a new [`DeviceId::generation`] with the same name and GUID, a
//!   replacement a new GUID too; the old registration cannot be opened
//!   again, and rkeys from before are refused.
//! - **Handles are never reused**, so a stale one fails with
//!   `InvalidHandle` instead of naming a new object.
//! - **Memory belongs to the host**: a [`Memory`] outlives the device it was
//!   registered on and is registered again on the one that replaces it.
//! - **Nothing leaks**: [`Provider::object_counts`] counts what the caller
//!   has not destroyed, on live and dead devices alike.
//!
//! ```
//! use relink_fabric::{Access, IpNet};
//! assert!(!(Access::REMOTE_WRITE).is_valid_for_mr());
//! assert!((Access::LOCAL_WRITE | Access::REMOTE_WRITE).is_valid_for_mr());
//! let net: IpNet = "10.0.0.1/24".parse().unwrap();
//! assert!(net.contains("10.0.0.9".parse().unwrap()));
//! ```

pub mod cm;
pub mod device;
pub mod error;
pub mod handles;
pub mod memory;
pub mod provider;
pub mod sgl;
pub mod time;
pub mod verbs;

pub use cm::{
    check_private_data, CmEvent, CmEventKind, RejectReason, MAX_ACCEPT_PRIVATE_DATA,
    MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA,
};
pub use device::{DeviceEvent, DeviceEventKind, DeviceId, DeviceInfo, Guid, IpNet, PortState};
pub use error::{
    CmError, CreateError, DestroyError, Destroyed, ErrorClass, MemoryError, OpenError, PollError,
    PostError,
};
pub use handles::{CmId, ContextId, CqId, MrId, MwId, PdId, QpId, SrqId};
pub use memory::{HeapMemory, HostMemory, Memory};
pub use provider::{Event, ObjectCounts, Provider};
pub use sgl::SgeList;
pub use time::Timestamp;
pub use verbs::{
    check_reg_mr, Access, AsyncEvent, ConnParams, MrInfo, MwBind, MwInfo, MwType, QpCaps, QpInit,
    QpState, RecvWr, RemoteAddr, SendOp, SendWr, Sge, SrqInit, WcOpcode, WcStatus, WorkCompletion,
};
