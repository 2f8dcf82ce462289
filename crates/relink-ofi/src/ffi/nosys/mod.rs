//! Ops tables whose every entry answers `-FI_ENOSYS`: the provider's
//! own tables start from these, so no entry is NULL. Made by
//! `scripts/ofi/nosys.py` from `sys.rs`, one file per family of
//! objects; do not edit.

mod atomic;
mod data;
mod domain;
mod endpoint;
mod fabric;
mod queues;

pub use atomic::*;
pub use data::*;
pub use domain::*;
pub use endpoint::*;
pub use fabric::*;
pub use queues::*;
