//! # relink-soft — the soft RDMA fabric
//!
//! A software RC fabric behind the [`relink_fabric::Provider`] interface, in
//! two modes:
//!
//! - in-process ([`SoftFabric`]): every host lives in one process, time is
//!   virtual and one seeded RNG decides every random choice, so a run replays
//!   exactly; every fault can be injected at any point;
//! - across processes over TCP: host-wide soft devices kept in a runtime
//!   directory, like Soft-RoCE's `rdma link add/delete`.
//!
//! Both modes share one engine ([`host::HostState`]): in-order execution at
//! the responder, completion only on acknowledgement, rkey/rights/bounds
//! checks, RNR and transport retries, and on a device loss every outstanding
//! request flushed — even one the responder already executed.

mod delegate;
pub mod host;
pub mod outbox;
pub mod packet;
pub mod payload;
pub mod registry;
pub mod tcp;
pub mod wire;
pub mod world;

pub use host::{Departure, HostConfig, HostState};
pub use payload::{BufferPool, Payload, PoolStats};
pub use registry::Registry;
pub use tcp::TcpHost;
pub use world::{Fault, HostIdx, LinkConfig, SoftFabric, SoftHost};
