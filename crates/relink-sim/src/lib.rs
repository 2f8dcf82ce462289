//! # relink-sim — the deterministic session simulator and the checked workload
//!
//! Two things every whole-stack test of relink needs, in one place:
//!
//! - [`Sim`]: a deterministic two-host world — the in-process soft fabric
//!   ([`relink_soft::SoftFabric`]), one [`relink::Node`] per host, and a
//!   driver that advances virtual time only when no node can make
//!   progress. The same seed gives the same run, event for event; faults
//!   are injected through [`Sim::fabric`].
//! - [`workload`]: the one checked workload (the exactly-once oracle):
//!   messages, WRITEs, READs and FETCH_ADDs whose every byte and every
//!   completion is accounted for, and the checks of the replay contract.
//!
//! The demo (`relink demo`), the simulation suites (`tests/sim_*.rs` of
//! this crate), the session scenarios on real devices and the benchmarks
//! all use them. This crate is a library of the product (the demo runs
//! it), not a test kit: it depends on no test or bench crate.
//!
//! ```
//! use std::time::Duration;
//! use relink::State;
//! use relink_sim::{Sim, INITIATOR};
//!
//! let (mut sim, s, _t) = Sim::with_session(7);
//! sim.run_for(Duration::from_millis(1));
//! assert_eq!(sim.node(INITIATOR).state(s), Some(State::Established));
//! ```

pub mod sim;
pub mod workload;

pub use sim::{Sim, INITIATOR, TARGET};
pub use workload::Workload;
