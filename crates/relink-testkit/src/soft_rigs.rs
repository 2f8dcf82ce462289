//! Rigs for the soft provider: [`InProcRig`] (two hosts in one virtual-time
//! [`SoftFabric`]) and [`TcpRig`] (two [`TcpHost`]s, each with its own
//! runtime directory, on 127.0.0.1 and 127.0.0.2 — two hosts as far as the
//! fabric can tell). Faults go through the same paths a user takes: the
//! fabric's fault API in-process, the device registry (what `relink
//! soft-device` writes) over TCP.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use relink_fabric::{Guid, IpNet, Provider};
use relink_soft::{Registry, SoftFabric, SoftHost, TcpHost};

use crate::rig::{Rig, Side, Skip};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Two hosts on the in-process soft fabric, `10.0.0.1/24` and `10.0.0.2/24`,
/// each with device `soft0`.
pub struct InProcRig {
    fabric: SoftFabric,
    hosts: [SoftHost; 2],
    names: [Mutex<String>; 2],
}

/// The addresses of the in-process rig.
const INPROC_ADDRS: [&str; 2] = ["10.0.0.1/24", "10.0.0.2/24"];

impl InProcRig {
    /// A fresh world seeded with `seed`.
    pub fn new(seed: u64) -> InProcRig {
        let fabric = SoftFabric::new(seed);
        let a = fabric.add_host("initiator");
        let b = fabric.add_host("target");
        fabric.add_device(&a, "soft0", INPROC_ADDRS[0]);
        fabric.add_device(&b, "soft0", INPROC_ADDRS[1]);
        InProcRig {
            fabric,
            hosts: [a, b],
            names: [Mutex::new("soft0".into()), Mutex::new("soft0".into())],
        }
    }

    /// The world, for faults the [`Rig`] trait does not name.
    pub fn fabric(&self) -> &SoftFabric {
        &self.fabric
    }

    /// The soft host of a side.
    pub fn soft_host(&self, side: Side) -> &SoftHost {
        &self.hosts[side.index()]
    }

    fn name(&self, side: Side) -> String {
        lock(&self.names[side.index()]).clone()
    }
}

impl Rig for InProcRig {
    fn host(&self, side: Side) -> &dyn Provider {
        &self.hosts[side.index()]
    }
    fn device_name(&self, side: Side) -> String {
        self.name(side)
    }
    fn addr(&self, side: Side) -> IpAddr {
        INPROC_ADDRS[side.index()]
            .parse::<IpNet>()
            .expect("constant")
            .addr
    }
    fn port(&self) -> u16 {
        7471
    }
    fn remove_device(&self, side: Side) -> Result<(), Skip> {
        self.fabric
            .remove_device(&self.hosts[side.index()], &self.name(side));
        Ok(())
    }
    fn add_device_back(&self, side: Side) -> Result<(), Skip> {
        self.fabric
            .readd_device(&self.hosts[side.index()], &self.name(side));
        Ok(())
    }
    fn reset_device(&self, side: Side) -> Result<(), Skip> {
        self.fabric
            .reset_device(&self.hosts[side.index()], &self.name(side));
        Ok(())
    }
    fn replace_device(&self, side: Side) -> Result<(), Skip> {
        let old = self.name(side);
        let new = format!("{old}r");
        self.fabric
            .replace_device(&self.hosts[side.index()], &old, Some(&new));
        *lock(&self.names[side.index()]) = new;
        Ok(())
    }
    fn settle_time(&self) -> Duration {
        // Virtual time: generous costs nothing.
        Duration::from_secs(10)
    }
}

static TCP_RIGS: AtomicU64 = AtomicU64::new(0);

/// The addresses of the TCP rig: two loopback addresses.
const TCP_ADDRS: [&str; 2] = ["127.0.0.1/8", "127.0.0.2/8"];

/// Two TCP soft hosts in this process, each watching its own runtime
/// directory (removed when the rig drops), with device `soft0` on
/// 127.0.0.1 and 127.0.0.2.
pub struct TcpRig {
    hosts: [TcpHost; 2],
    regs: [Registry; 2],
    names: [Mutex<String>; 2],
    guids: [Mutex<Option<Guid>>; 2],
    port: u16,
    dir: PathBuf,
}

impl TcpRig {
    /// A fresh pair of runtime directories and hosts.
    ///
    /// # Panics
    /// If the directories cannot be created or no loopback port is free.
    pub fn new() -> TcpRig {
        let n = TCP_RIGS.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("relink-rig-{}-{n}", std::process::id()));
        let dirs = [dir.join("initiator"), dir.join("target")];
        let regs = [
            Registry::open(&dirs[0]).expect("registry"),
            Registry::open(&dirs[1]).expect("registry"),
        ];
        for (r, addr) in regs.iter().zip(TCP_ADDRS) {
            r.add("soft0", vec![addr.parse().expect("constant")], None, None)
                .expect("add soft0");
        }
        let hosts = [
            TcpHost::open(&dirs[0]).expect("tcp host"),
            TcpHost::open(&dirs[1]).expect("tcp host"),
        ];
        let port = std::net::TcpListener::bind("127.0.0.2:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        TcpRig {
            hosts,
            regs,
            names: [Mutex::new("soft0".into()), Mutex::new("soft0".into())],
            guids: [Mutex::new(None), Mutex::new(None)],
            port,
            dir,
        }
    }

    /// The device registry of a side (what `relink soft-device --dir` edits).
    pub fn registry(&self, side: Side) -> &Registry {
        &self.regs[side.index()]
    }

    /// The TCP soft host of a side.
    pub fn tcp_host(&self, side: Side) -> &TcpHost {
        &self.hosts[side.index()]
    }

    fn name(&self, side: Side) -> String {
        lock(&self.names[side.index()]).clone()
    }
}

impl Default for TcpRig {
    fn default() -> TcpRig {
        TcpRig::new()
    }
}

impl Drop for TcpRig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn skip(e: impl std::fmt::Display) -> Skip {
    Skip::new(format!("soft registry: {e}"))
}

impl Rig for TcpRig {
    fn host(&self, side: Side) -> &dyn Provider {
        &self.hosts[side.index()]
    }
    fn device_name(&self, side: Side) -> String {
        self.name(side)
    }
    fn addr(&self, side: Side) -> IpAddr {
        TCP_ADDRS[side.index()]
            .parse::<IpNet>()
            .expect("constant")
            .addr
    }
    fn port(&self) -> u16 {
        self.port
    }
    fn remove_device(&self, side: Side) -> Result<(), Skip> {
        let d = self.regs[side.index()]
            .remove(&self.name(side))
            .map_err(skip)?;
        *lock(&self.guids[side.index()]) = Some(d.node_guid);
        Ok(())
    }
    fn add_device_back(&self, side: Side) -> Result<(), Skip> {
        let guid = *lock(&self.guids[side.index()]);
        let addr = TCP_ADDRS[side.index()].parse().expect("constant");
        self.regs[side.index()]
            .add(&self.name(side), vec![addr], guid, None)
            .map_err(skip)?;
        Ok(())
    }
    fn reset_device(&self, side: Side) -> Result<(), Skip> {
        self.regs[side.index()]
            .reset(&self.name(side))
            .map_err(skip)?;
        Ok(())
    }
    fn replace_device(&self, side: Side) -> Result<(), Skip> {
        let old = self.name(side);
        let new = format!("{old}r");
        self.regs[side.index()]
            .replace(&old, Some(&new))
            .map_err(skip)?;
        *lock(&self.names[side.index()]) = new;
        Ok(())
    }
    fn settle_time(&self) -> Duration {
        // A bound on a hang, not a wait: real threads and sockets on a
        // machine that may be busy with other jobs.
        Duration::from_secs(30)
    }
    fn quiet_time(&self) -> Duration {
        // What must not happen shows within this on loopback.
        Duration::from_millis(750)
    }
}
