//! Hosts in network namespaces for the relinkd tests: two joined by a
//! veth pair ([`two_hosts`]), or one target and many initiators on a
//! bridge ([`star`]); each host's soft device registry managed with the
//! `relink soft-device` CLI inside its namespace, and relinkd processes
//! started there with their output collected.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use relinkd::control::protocol::{self, Response};

use relink_proctest::netns::{self, Netns};
use relink_skip::Skip;

use crate::common::{relink_bin, tool, Daemon, Root, STEP};

/// The port every export listens on (each namespace has its own).
pub const PORT: u16 = 7471;

/// The GUID of the target host's first `soft0`.
pub const T_GUID: &str = "0x0231000000000002";
/// The GUID of the initiator host's first `soft0`.
pub const I_GUID: &str = "0x0231000000000001";

/// One host: its namespace, its veth address and its soft device
/// registry directory.
pub struct Host {
    /// `T`, `I` or `I3`, for messages.
    pub what: &'static str,
    /// The namespace.
    pub ns: Netns,
    /// The address on the veth end (no prefix).
    pub addr: String,
    /// The soft device registry directory.
    pub soft_dir: PathBuf,
    relink: PathBuf,
}

impl Host {
    /// Host `what` in `ns`, its registry in `root/soft-WHAT`, with soft
    /// device `soft0` owning `addr`/24 (the address is already on one of
    /// the namespace's interfaces) with `guid`.
    fn new(
        root: &Root,
        relink: &Path,
        what: &'static str,
        ns: Netns,
        addr: String,
        guid: &str,
    ) -> Host {
        let h = Host {
            what,
            ns,
            soft_dir: root.0.join(format!("soft-{what}")),
            relink: relink.to_path_buf(),
            addr,
        };
        let cidr = format!("{}/24", h.addr);
        h.soft_device(&["add", "soft0", "--addr", &cidr, "--guid", guid]);
        h
    }

    /// `relink soft-device --dir DIR ARGS` inside the namespace; its
    /// stdout.
    #[track_caller]
    pub fn soft_device(&self, args: &[&str]) -> String {
        let out = self
            .ns
            .command(&self.relink)
            .arg("soft-device")
            .arg("--dir")
            .arg(&self.soft_dir)
            .args(args)
            .output()
            .expect("run relink soft-device");
        assert!(
            out.status.success(),
            "relink soft-device {args:?} on host {}: {}",
            self.what,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts `relinkd CONFIG` inside the namespace.
    pub fn relinkd(&self, what: &'static str, config: &Path) -> Daemon {
        Daemon::spawn(
            what,
            self.ns.command(env!("CARGO_BIN_EXE_relinkd")).arg(config),
        )
    }
}

/// The two hosts (target `t`, initiator `i`) joined by a veth pair in
/// 10.231.N.0/24, each with soft device `soft0` owning its address, and
/// a scratch directory. Declared in this order, the daemons a test
/// starts later drop (are killed) before the namespaces are deleted.
pub struct TwoHosts {
    /// The scratch directory.
    pub root: Root,
    /// The target's host (10.231.N.2).
    pub t: Host,
    /// The initiator's host (10.231.N.1).
    pub i: Host,
}

/// Why the programs the hosts and their tests need cannot be used here:
/// `ip` (iproute2), qemu-img and qemu-io (qemu-utils), each a
/// [`Skip::missing`].
fn find_programs() -> Result<(), Skip> {
    relink_skip::find_program("ip", "iproute2")?;
    tool("qemu-img")?;
    tool("qemu-io")?;
    Ok(())
}

/// `name` in the temporary directory, created empty.
fn scratch(name: &str) -> Root {
    let root = std::env::temp_dir().join(name);
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    Root(root)
}

/// The two hosts, or why they cannot be made here: no `ip`, qemu-img,
/// qemu-io or `relink` binary next to relinkd's ([`Skip::missing`]), or
/// no root (`ip netns add` refused, [`Skip::new`]).
pub fn two_hosts(tag: &str) -> Result<TwoHosts, Skip> {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    find_programs()?;
    let relink = relink_bin()?;
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let root = scratch(&format!("relinkd-netns-{tag}-{pid}"));
    let t_ns = Netns::add(format!("relinkd-{pid}-{n}-t")).map_err(Skip::new)?;
    let i_ns = Netns::add(format!("relinkd-{pid}-{n}-i")).map_err(Skip::new)?;
    // The pair is made inside T with its peer in I: no name in the root
    // namespace, so parallel tests cannot clash.
    t_ns.ip(&[
        "link", "add", "veth0", "type", "veth", "peer", "name", "veth0", "netns", &i_ns.name,
    ]);
    let host = |what, ns: Netns, addr: String, guid: &str| {
        ns.ip(&["link", "set", "lo", "up"]);
        ns.ip(&["addr", "add", &format!("{addr}/24"), "dev", "veth0"]);
        ns.ip(&["link", "set", "veth0", "up"]);
        Host::new(&root, &relink, what, ns, addr, guid)
    };
    let net = 10 + n;
    let t = host("T", t_ns, format!("10.231.{net}.2"), T_GUID);
    let i = host("I", i_ns, format!("10.231.{net}.1"), I_GUID);
    Ok(TwoHosts { root, t, i })
}

/// Runs `command` on the control socket at `socket` (a file, reachable
/// from any namespace): its typed result, or a panic with the error.
#[track_caller]
pub fn control<T: serde::de::DeserializeOwned>(socket: &Path, command: protocol::Command) -> T {
    let what = format!("{command:?}");
    let mut s = UnixStream::connect(socket)
        .unwrap_or_else(|e| panic!("connect to {}: {e}", socket.display()));
    s.set_read_timeout(Some(STEP)).unwrap();
    s.write_all(protocol::Request::new(command).to_line().as_bytes())
        .unwrap();
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("{what}: no response: {e}"));
    let r: Response =
        serde_json::from_str(line.trim_end()).unwrap_or_else(|e| panic!("response {line:?}: {e}"));
    r.into_result().unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// One target host and `n` initiator hosts ([`netns::Star`]: the
/// target's namespace is the hub, 10.233.N.1, the initiators' the
/// spokes, 10.233.N.(10 + k)). Each host has soft device `soft0` owning
/// its address, with the GUID [`star_guid`] gives it.
pub struct Star {
    /// The scratch directory.
    pub root: Root,
    /// The target's host.
    pub t: Host,
    /// The initiators' hosts, `I1` to `In`.
    pub initiators: Vec<Host>,
}

/// The names of a star's initiator hosts, for messages.
pub const INITIATORS: [&str; 8] = ["I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8"];

/// The GUID of `soft0` on host `k` of a star (0 = the target).
pub fn star_guid(k: usize) -> String {
    format!("0x02330000000000{:02x}", k + 0x10)
}

/// A star of one target and `n` (at most 8) initiators, or why it cannot
/// be made here (as [`two_hosts`]).
pub fn star(tag: &str, n: usize) -> Result<Star, Skip> {
    assert!((1..=INITIATORS.len()).contains(&n), "1 to 8 initiators");
    find_programs()?;
    let relink = relink_bin()?;
    let pid = std::process::id();
    let root = scratch(&format!("relinkd-star-{tag}-{pid}"));
    let net = netns::Star::new(&format!("relinkd-{pid}-{tag}"), n).map_err(Skip::new)?;
    let mut initiators = Vec::new();
    for (k, (ns, addr)) in net.spokes.into_iter().enumerate() {
        initiators.push(Host::new(
            &root,
            &relink,
            INITIATORS[k],
            ns,
            addr,
            &star_guid(k + 1),
        ));
    }
    let t = Host::new(&root, &relink, "T", net.hub, net.hub_addr, &star_guid(0));
    Ok(Star {
        root,
        t,
        initiators,
    })
}
