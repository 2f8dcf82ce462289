//! # relink-core — the sans-IO recovery core
//!
//! Everything relink decides lives here, and nothing here touches the
//! world: no syscalls, no threads, no clock reads, no OS randomness. Time
//! and randomness are arguments; effects are returned as
//! [`session::Action`]s for a driver (the `relink` crate) to perform against
//! a provider. That makes "recreate everything after a device loss" a plan
//! that tests check without hardware.
//!
//! | module | holds |
//! |---|---|
//! | [`state`] | the session state machine, declared in one table |
//! | [`policy`] | give-up deadline, backoff, fast-fail, keepalive, device match |
//! | [`timers`] | every timer of a session in one table |
//! | [`journal`] | sequence numbers, exactly-once delivery, replay, `Indeterminate` |
//! | [`keys`] | stable buffer tokens → the peer's (addr, rkey) of the current epoch |
//! | [`resources`] | resource specs and the dependency-ordered recreate plan |
//! | [`wire`], [`auth`] | the resume handshake and in-band messages, length-checked and fuzzed |
//! | [`session`] | the session that ties them together |
//!
//! The contract a driver follows is in [`session`]'s module docs: inputs
//! `handle_*(…, now)`, commands `connect` / `submit` / `close`, outputs
//! `poll_action`, `poll_completion`, `poll_delivery`, `poll_event`,
//! `poll_timeout`.
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
pub mod resources;
pub mod session;
pub mod state;
pub mod timers;
pub mod wire;

pub use ids::*;
