//! The control plane: the control socket's protocol ([`protocol`], the
//! `relinkd-control` crate, which clients such as the `relink` CLI use
//! too), its server (a Unix stream socket, mode 0600, each peer's uid
//! checked) and the Prometheus exposition of the daemon's state
//! ([`metrics`]).

pub mod metrics;
pub(crate) mod server;

/// The control protocol: requests, responses, their wire form, and a
/// blocking client (the `relinkd-control` crate).
pub use relinkd_control as protocol;
