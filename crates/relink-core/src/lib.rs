//! # relink-core — the sans-IO recovery core
//!
//! Everything relink decides lives here, and nothing here touches the
//! world: no syscalls, no threads, no clock reads, no OS randomness. Time
//! and randomness are arguments; effects are returned as
//! [`session::Action`]s for a driver (the `relink` crate) to perform against
//! a provider. That makes "recreate everything after a device loss" a plan
//! that tests check without hardware.
//!
//! # Map
//!
//! | module | holds |
//! |---|---|
//! | [`session`] | the session that ties the rest together; one file per part of its work: |
//! | ↳ `session/mod.rs` | [`Session`] and the parts it is made of (each defined in the file of its logic), its getters, [`SessionConfig`], [`SessionError`] |
//! | ↳ `session/output.rs` | [`Action`]s for the driver, [`SessionEvent`]s, [`Counters`], the `poll_*` calls |
//! | ↳ `session/paths.rs` | [`session::Path`]s to the peer and the devices that can carry them |
//! | ↳ `session/recovery.rs` | connect, transport loss, attempts and backoff, timers, give-up |
//! | ↳ `session/closing.rs` | the admin close, the graceful close (pending operations first), the peer's goodbye |
//! | ↳ `session/resync.rs` | the resume handshake of both roles and the advertisement exchange |
//! | ↳ `session/datapath.rs` | submit, posting within credits, completions, received messages, acks |
//! | ↳ `session/fetch.rs` | messages the receiver reads itself (a rendezvous): which go so, their landing, their rewind on a loss |
//! | [`state`] | the session state machine, declared in one table |
//! | [`policy`] | give-up deadlines, backoff, fast-fail, keepalive, device match; [`PolicyBuilder`] |
//! | [`reason`] | why the transport went down ([`DownCause`]), why an attempt failed ([`AttemptFailure`]) and why a peer is lost ([`PeerLostReason`]); [`state`] names them, they name nothing of it |
//! | [`timers`] | every timer of a session in one table |
//! | [`op`] | what an operation does ([`OpKind`]) and how it ends ([`Outcome`], [`OpError`]) |
//! | [`journal`] | the sender side: sequence numbers, replay, exactly one completion per operation |
//! | [`inbox`] | the receiver side: each message delivered once, in order |
//! | [`keys`] | stable buffer tokens → the peer's (addr, rkey) of the current epoch |
//! | [`resources`] | resource specs and the dependency-ordered recreate plan (a shared receive queue per device context, type 2 windows of regions, when a session opts in) |
//! | [`wire`] | the resume handshake and in-band messages, length-checked and fuzzed (`wire/{cursor, handshake, message}.rs`) |
//! | [`auth`] | the session secret and the authenticators of the handshake |
//! | [`ids`] | the ids every module shares ([`SessionId`], [`Epoch`], [`Seq`], [`OpId`], ...) |
//! | `buffers` (private) | bounded free lists of message buffers |
//!
//! The types a driver or an application names most are re-exported here
//! too (`relink_core::Session`, `relink_core::OpKind`, ...); every module
//! path keeps naming them as well.
//!
//! The contract a driver follows is in [`session`]'s module docs: inputs
//! `handle_*(…, now)`, commands `connect` / `submit` / `close` /
//! `close_gracefully`, outputs
//! `poll_action`, `poll_completion`, `poll_delivery`, `poll_event`,
//! `poll_timeout`. `docs/DESIGN.md` describes the design as built.
//!
//! ```
//! use relink_core::state::{allowed, State};
//! use relink_core::policy::Policy;
//! use std::time::Duration;
//!
//! // Recovery never jumps straight back to Established: it resyncs first.
//! assert!(!allowed(State::Recovering, State::Established));
//! // The first attempt is immediate; the backoff is capped.
//! let p = Policy::default();
//! assert_eq!(p.backoff(0, 42), Duration::ZERO);
//! assert!(p.backoff(50, 42) <= p.reconnect_delay);
//! ```

pub mod auth;
mod buffers;
pub mod ids;
pub mod inbox;
pub mod journal;
pub mod keys;
pub mod op;
pub mod policy;
pub mod reason;
pub mod resources;
pub mod session;
pub mod state;
pub mod timers;
pub mod wire;

pub use ids::*;
pub use op::{
    Arrival, Completion, LocalRange, LocalSgl, MessageBody, OpClass, OpError, OpKind, Outcome,
};
pub use policy::{Policy, PolicyBuilder, PolicyError};
pub use reason::{AttemptFailure, DownCause, PeerLostReason};
pub use resources::{RegionSpec, SessionSpec};
pub use session::{Action, Counters, Role, Session, SessionConfig, SessionError, SessionEvent};
pub use state::State;
