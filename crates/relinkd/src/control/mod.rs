//! The control plane: the control socket's protocol ([`protocol`]), its
//! server (a Unix stream socket, mode 0600, each peer's uid checked) and
//! the Prometheus exposition of the daemon's state ([`metrics`]).

pub mod metrics;
pub mod protocol;
pub(crate) mod server;
