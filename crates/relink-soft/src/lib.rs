//! # relink-soft — the soft RDMA fabric
//!
//! A software RC fabric behind the [`relink_fabric::Provider`] interface, in
//! two modes:
//!
//! - in-process ([`SoftFabric`]): every host lives in one process, time is
//!   virtual and one seeded RNG decides every random choice, so a run replays
//!   exactly; every fault can be injected at any point;
//! - across processes over TCP ([`TcpHost`]): host-wide soft devices kept in a runtime
//!   directory, like Soft-RoCE's `rdma link add/delete`.
//!
//! Both modes share one engine (the crate-private `HostState`): in-order
//! execution at the responder, completion only on acknowledgement,
//! rkey/rights/bounds checks, RNR and transport retries, and on a device loss
//! every outstanding request flushed — even one the responder already
//! executed.
//!
//! The public surface is what the root re-exports, plus [`registry`] (the
//! host-wide device directory that `relink soft-device` manages). Inside, by
//! module:
//!
//! - `world`: the in-process fabric and its virtual-time queue;
//! - `tcp/`: the TCP transport, one stream per RC connection (`stream.rs`:
//!   its writer and reader threads);
//! - `accept`: a listening socket of the TCP transport and its accepting thread;
//! - `direct`: same-host transfers of the TCP transport (a payload read
//!   from the sending process's memory instead of the stream);
//! - `delegate`: the `Provider` methods both transports forward to the engine;
//! - `host/`: the engine, one `HostState` per host (see its module docs for
//!   the files);
//! - `packet`, `outbox`: what the engine exchanges with its transport;
//! - `wire/`: the TCP codec of packets;
//! - `payload`: payload bytes shared between copies, and their buffer pool;
//! - `ready`: the readiness fd of a host (`Provider::event_fd`);
//! - `registry/`: the device directory.

mod accept;
mod delegate;
mod direct;
mod host;
mod outbox;
mod packet;
mod payload;
mod ready;
pub mod registry;
mod tcp;
// The TCP codec is public only for the fuzz targets (feature `fuzzing`),
// and never in the crate's documentation (whose links are to private
// items of the crate).
#[cfg(all(feature = "fuzzing", not(doc)))]
#[doc(hidden)]
pub mod wire;
#[cfg(any(not(feature = "fuzzing"), doc))]
mod wire;
mod world;

pub use payload::{BufferPool, Payload, PoolStats};
pub use registry::Registry;
pub use tcp::TcpHost;
pub use wire::MAX_PAYLOAD;
pub use world::{Fault, HostIdx, LinkConfig, SoftFabric, SoftHost};
