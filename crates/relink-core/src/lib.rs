//! # relink-core — the sans-IO recovery core
pub mod ids;
pub mod policy;
pub mod state;
pub mod timers;

pub use ids::*;
