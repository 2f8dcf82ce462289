//! The same two hosts as [`Sim`](crate::Sim), over real TCP instead of
//! virtual time: two soft devices of this process, each in a runtime
//! directory of its own (so two hosts as far as the fabric can tell), on
//! loopback. For tests and benchmarks that need real time and real
//! sockets in one process; two processes use the same layout with one
//! directory each (see the README's "Sessions across two processes").

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use relink_soft::{Registry, TcpHost};

use crate::sim::{INITIATOR, TARGET};

/// Directories made by this process so far (they get distinct names).
static MADE: AtomicU64 = AtomicU64::new(0);

/// The hosts' device addresses: the initiator's `soft0` on 127.0.0.1/8,
/// the target's on 127.0.0.2/8, indexed by [`INITIATOR`] and [`TARGET`].
pub const ADDRS: [&str; 2] = ["127.0.0.1/8", "127.0.0.2/8"];

/// Two runtime directories, `initiator/` and `target/`, each with one soft
/// device `soft0` (see [`ADDRS`]), under a fresh directory of the system's
/// temporary directory that is removed on drop. Drop the hosts and nodes
/// made from it first.
pub struct TcpHosts {
    root: PathBuf,
}

impl TcpHosts {
    /// Fresh directories, named after `label` (which shows in the path),
    /// the process and a counter.
    ///
    /// # Panics
    /// If a directory or a device cannot be created.
    pub fn new(label: &str) -> TcpHosts {
        let n = MADE.fetch_add(1, Ordering::SeqCst);
        let root = std::env::temp_dir().join(format!("relink-{label}-{}-{n}", std::process::id()));
        let hosts = TcpHosts { root };
        for side in [INITIATOR, TARGET] {
            Registry::open(hosts.dir(side))
                .expect("a soft device registry in the temporary directory")
                .add(
                    "soft0",
                    vec![ADDRS[side].parse().expect("constant")],
                    None,
                    None,
                )
                .expect("add soft0");
        }
        hosts
    }

    /// The runtime directory of `side` ([`INITIATOR`] or [`TARGET`]): what
    /// `relink soft-device --dir` edits for faults.
    pub fn dir(&self, side: usize) -> PathBuf {
        self.root.join(if side == TARGET {
            "target"
        } else {
            "initiator"
        })
    }

    /// A new provider for `side`.
    ///
    /// # Panics
    /// If the host cannot open its directory.
    pub fn host(&self, side: usize) -> Arc<TcpHost> {
        Arc::new(TcpHost::open(self.dir(side)).expect("tcp host"))
    }

    /// The IP address of `side`'s device.
    pub fn addr(&self, side: usize) -> IpAddr {
        let net: relink_fabric::IpNet = ADDRS[side].parse().expect("constant");
        net.addr
    }

    /// The directory holding both runtime directories.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for TcpHosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
