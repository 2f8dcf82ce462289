//! # relink-core — the sans-IO recovery core
pub mod auth;
pub mod ids;
pub mod journal;
pub mod keys;
pub mod policy;
pub mod resources;
pub mod session;
pub mod state;
pub mod timers;
pub mod wire;

pub use ids::*;
