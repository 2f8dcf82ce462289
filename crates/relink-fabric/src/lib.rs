//! # relink-fabric — the provider interface
//!
//! relink's recovery logic never knows which RDMA stack it runs on. This
//! crate is the contract between the two: a [`Provider`] exposes devices and
//! a device event stream, the verbs objects (PD, CQ, SRQ, MR, MW, RC QP),
//! `rdma_cm`-style connection management with private data, posting and
//! polling — with the behaviour of a real RC fabric, including what a device
//! loss does:
//!
//! - every outstanding request completes with [`WcStatus::WrFlushErr`], even
//!   one the responder already executed (the ambiguity relink resolves);
//! - every CM id on the device gets [`CmEventKind::DeviceRemoval`];
//! - destroy calls report [`Destroyed::AlreadyReleased`] instead of failing;
//! - the device comes back with a new [`DeviceId::generation`].
//!
//! Providers: `relink-soft` (in-process and TCP, the embedded default) and,
//! behind a feature, real rdma-core. `relink-testkit` holds the conformance
//! suite every provider passes.
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
pub use time::Timestamp;
pub use verbs::{
    check_reg_mr, Access, AsyncEvent, ConnParams, MrInfo, MwBind, MwInfo, MwType, QpCaps, QpInit,
    QpState, RecvWr, RemoteAddr, SendOp, SendWr, Sge, SrqInit, WcOpcode, WcStatus, WorkCompletion,
};
