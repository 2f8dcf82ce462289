//! What the real-verbs test binaries share: the host's device and network
//! commands (`rdma link`, `ip`), sysfs checks and the `DEV@ADDR[@NETDEV]`
//! settings — all from [`relink_verbs::rig`] (feature `testkit`, which this
//! crate's tests always have), re-exported here under their old names.

#![allow(dead_code, unused_imports)] // each test binary uses its own subset

pub use relink_verbs::rig::{ip, parse_side, parse_spec, rdma, run, uverbs_listed, wait_until};
