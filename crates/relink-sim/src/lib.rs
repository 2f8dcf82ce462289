//! # relink-sim — the deterministic session simulator and the checked workload
//!
//! What every whole-stack test of relink needs, in one place:
//!
//! - [`sim`]: [`Sim`], a deterministic world of two hosts (more on
//!   request) — the in-process soft fabric ([`relink_soft::SoftFabric`]),
//!   one [`relink::Node`] per host, and a driver that advances virtual
//!   time only when no node can make progress. The same seed gives the
//!   same run, event for event; faults are injected through
//!   [`Sim::fabric`].
//! - [`workload`]: the one checked workload (the exactly-once oracle):
//!   [`Workload`] submits messages, WRITEs, READs, FETCH_ADDs, WRITEs
//!   with immediate data and flushes on a session (the target receiving by
//!   polling or through posted receives) and accounts for every byte and
//!   every completion; its `check_*` functions check the replay contract
//!   end to end.
//! - [`seeds`]: [`run_seeds`], a randomized suite run over many seeds
//!   on every core, a failing seed named with the command that replays it.
//! - [`tcp`]: [`TcpHosts`], the same two hosts over real TCP in one
//!   process (two soft device directories on loopback), for tests and
//!   benchmarks that need real time.
//!
//! The demo (`relink demo`), the simulation suites (`tests/sim_*.rs` of
//! this crate), the `relink` crate's integration tests and the benchmarks
//! run on [`Sim`]; the session scenarios on real devices (relink-verbs'
//! `sessions_verbs`) drive the same [`Workload`] between two verbs
//! nodes. This crate is a library of the product (the demo runs it), not
//! a test kit: it depends on no test or bench crate.
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

pub mod seeds;
pub mod sim;
pub mod tcp;
pub mod workload;

pub use seeds::run_seeds;
pub use sim::{Sim, INITIATOR, TARGET};
pub use tcp::TcpHosts;
pub use workload::Workload;
