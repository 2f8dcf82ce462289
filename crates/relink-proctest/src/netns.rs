//! Hosts as network namespaces: [`Netns`] (deleted on drop) and a
//! [`Star`] of one hub namespace and up to 8 spokes on a bridge, for the
//! tests that run many hosts on one machine (needs root and `ip`).

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A network namespace, deleted on drop (with the veth ends inside it).
pub struct Netns {
    /// Its name (`ip netns` name).
    pub name: String,
}

impl Netns {
    /// `ip netns add NAME`, or why it failed (no `ip`, or not root).
    pub fn add(name: String) -> Result<Netns, String> {
        let out = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .map_err(|e| format!("ip netns add {name} not runnable: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "ip netns add {name} failed (needs root): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Netns { name })
    }

    /// `ip netns exec NAME program`.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// `ip -n NAME ARGS`, which must succeed.
    #[track_caller]
    pub fn ip(&self, args: &[&str]) {
        let out = Command::new("ip")
            .args(["-n", &self.name])
            .args(args)
            .output()
            .expect("run ip");
        assert!(
            out.status.success(),
            "ip -n {} {args:?}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// One hub namespace with a bridge `br0` holding the hub's address
/// (10.233.N.1/24) and one veth pair per spoke, whose other end is the
/// spoke's `veth0` (10.233.N.(10 + k), k from 1); loopback up everywhere.
/// N differs for every star a process makes, so stars never share a
/// subnet.
pub struct Star {
    /// The hub's namespace.
    pub hub: Netns,
    /// The hub's address (no prefix).
    pub hub_addr: String,
    /// The spokes' namespaces and addresses.
    pub spokes: Vec<(Netns, String)>,
}

impl Star {
    /// A star of `spokes` (at most 8) spokes, its namespaces named
    /// `PREFIX-hub`, `PREFIX-1`, ...; or why it cannot be made here.
    pub fn new(prefix: &str, spokes: usize) -> Result<Star, String> {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        assert!((1..=8).contains(&spokes), "1 to 8 spokes");
        let net = 10 + NEXT.fetch_add(1, Ordering::Relaxed) % 240;
        let hub = Netns::add(format!("{prefix}-hub"))?;
        hub.ip(&["link", "set", "lo", "up"]);
        hub.ip(&["link", "add", "br0", "type", "bridge"]);
        let hub_addr = format!("10.233.{net}.1");
        hub.ip(&["addr", "add", &format!("{hub_addr}/24"), "dev", "br0"]);
        hub.ip(&["link", "set", "br0", "up"]);
        let mut list = Vec::new();
        for k in 1..=spokes {
            let ns = Netns::add(format!("{prefix}-{k}"))?;
            // The pair is made inside the hub with its peer in the
            // spoke: no name in the root namespace.
            let port = format!("v{k}");
            hub.ip(&[
                "link", "add", &port, "type", "veth", "peer", "name", "veth0", "netns", &ns.name,
            ]);
            hub.ip(&["link", "set", &port, "master", "br0"]);
            hub.ip(&["link", "set", &port, "up"]);
            let addr = format!("10.233.{net}.{}", 10 + k);
            ns.ip(&["link", "set", "lo", "up"]);
            ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", "veth0"]);
            ns.ip(&["link", "set", "veth0", "up"]);
            list.push((ns, addr));
        }
        Ok(Star {
            hub,
            hub_addr,
            spokes: list,
        })
    }
}
