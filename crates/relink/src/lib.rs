//! # relink — RDMA sessions that survive their hardware
//!
//! A [`Node`] runs resilient sessions on any [`relink_fabric::Provider`]:
//! the soft fabric (in-process or TCP), or real verbs. A session keeps its
//! identity across device reset, hot-unplug and replacement: relink tears
//! down everything on the lost device, waits for a device that reaches the
//! peer, reconnects, recreates every resource from its spec, re-exchanges
//! buffer advertisements and replays what was not confirmed — so every
//! operation completes exactly once and every message is delivered exactly
//! once, in order.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use relink::{Node, Path, SessionOptions};
//! use relink_soft::SoftFabric;
//!
//! let fabric = SoftFabric::new(1);
//! let (a, b) = (fabric.add_host("a"), fabric.add_host("b"));
//! fabric.add_device(&a, "soft0", "10.0.0.1/24");
//! fabric.add_device(&b, "soft0", "10.0.0.2/24");
//! let mut target = Node::new(Arc::new(b.clone()));
//! let mut init = Node::new(Arc::new(a.clone()));
//! let addr = "10.0.0.2:7471".parse().unwrap();
//! target.listen(addr, SessionOptions::default()).unwrap();
//! let s = init.connect(vec![Path { local: None, peer: addr }], SessionOptions::default()).unwrap();
//! let op = init.send(s, b"hello").unwrap();
//! // Drive both nodes (one thread, virtual time).
//! let mut got = None;
//! for _ in 0..1000 {
//!     init.poll();
//!     target.poll();
//!     if let Some(t) = target.accept() { got = Some(t); }
//!     if let Some(t) = got { if let Some((_, msg)) = target.poll_delivery(t) { assert_eq!(msg, b"hello"); break; } }
//!     fabric.advance(Duration::from_micros(50));
//! }
//! // The sender's completion says the peer delivered it.
//! for _ in 0..1000 { init.poll(); target.poll(); fabric.advance(Duration::from_micros(50)); }
//! let c = init.poll_completion(s).unwrap();
//! assert_eq!(c.op, op);
//! assert!(c.outcome.is_success());
//! ```

mod node;

pub use node::{
    Error, Footprint, ListenerHandle, Node, RegionOptions, SessionHandle, SessionOptions,
    ShutdownSummary,
};
pub use relink_core::journal::{Completion, LocalRange, OpError, OpKind, Outcome};
pub use relink_core::policy::{AllowedDevice, DeviceMatch, Policy};
pub use relink_core::session::{Counters, Path, SessionEvent};
pub use relink_core::state::{DownCause, State};
pub use relink_core::wire::RefuseReason;
pub use relink_core::{BufferToken, OpId, RegionId, Seq, SessionId};
pub use relink_fabric::{Access, Memory, Provider, Timestamp};
