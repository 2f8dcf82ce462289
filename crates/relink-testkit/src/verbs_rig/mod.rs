//! The testkit rig on real devices: two [`VerbsProvider`]s of this process,
//! each on one RDMA device named in the environment, as a
//! [`crate::Rig`] — with device faults done by the host's
//! `rdma link delete` / `rdma link add` (Soft-RoCE). Behind the `verbs`
//! feature; it builds without relink-verbs's `rdma` feature too, and then
//! [`VerbsRig::from_env`] reports [`VerbsError::NotBuilt`] (as a reason to
//! skip).
//!
//! Used by the conformance suite on real verbs and the session scenarios
//! (relink-verbs's `tests/conformance_verbs.rs` and `tests/sessions_verbs.rs`:
//! the host commands, [`Topology`]) and by relink-bench's `rxe` benchmark.
//!
//! Settings, one environment variable per side ([`INITIATOR_ENV`],
//! [`TARGET_ENV`]), each `DEV@ADDR[@NETDEV]`:
//!
//! ```text
//! RELINK_VERBS_INITIATOR=rxe0@10.10.0.1 RELINK_VERBS_TARGET=rxe1@10.10.0.2
//! ```
//!
//! The netdev, needed to add a deleted rxe device back, defaults to the one
//! the device is attached to. CM ports are taken from [`PORT_ENV`]
//! (`RELINK_VERBS_PORT`, default 18515) upwards, one per rig
//! ([`fresh_port`]). Rigs are created one at a time in a process (a process
//! lock, held while a rig lives) because faults act on the host's real
//! devices; a removed device is added back when the rig drops.
//!
//! A replacement ([`Rig::replace_device`]) needs the host's [`Topology`]
//! (module `topology`: a spare netdev, [`SPARE_ENV`], and the policy-routing
//! tables, [`ROUTE_TABLES_ENV`]): the side's device is deleted, its address
//! moves to the spare netdev, and a new rxe device there (a new GUID) takes
//! over; the rig undoes that when it drops, while its providers still run
//! (deleting a device waits for librdmacm's cached context too, which only a
//! live provider's re-scan releases). Without a topology the case is
//! skipped with that reason.

use std::io::Write as _;
use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::{Quirk, Rig, Side, Skip};
use relink_fabric::Provider;

use relink_verbs::{VerbsConfig, VerbsError, VerbsProvider};

mod topology;

pub use topology::{Topology, PREFIX_ENV, ROUTE_TABLES_ENV, SECOND_ENV, SPARE_ENV};

/// Environment variable of the initiator's `DEV@ADDR[@NETDEV]`.
pub const INITIATOR_ENV: &str = "RELINK_VERBS_INITIATOR";
/// Environment variable of the target's `DEV@ADDR[@NETDEV]`.
pub const TARGET_ENV: &str = "RELINK_VERBS_TARGET";
/// Environment variable of the first CM port rigs use (default
/// [`DEFAULT_PORT`]).
pub const PORT_ENV: &str = "RELINK_VERBS_PORT";
/// The first CM port rigs use when [`PORT_ENV`] is not set.
pub const DEFAULT_PORT: u16 = 18_515;

/// Environment variable of each side's `DEV@ADDR[@NETDEV]`, indexed by
/// [`Side::index`].
const ENV: [&str; 2] = [INITIATOR_ENV, TARGET_ENV];

/// How long a device may take to leave or join the device list, and how
/// long `rdma link delete` may take once the provider released the device.
pub const FAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// One rig at a time: faults act on the host's devices.
static RIG_LOCK: Mutex<()> = Mutex::new(());

/// CM ports handed out so far ([`fresh_port`]).
static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// A CM port no rig or caller of this process was given before:
/// [`PORT_ENV`] (else [`DEFAULT_PORT`]) plus the number of ports handed out
/// so far.
pub fn fresh_port() -> u16 {
    let base: u16 = std::env::var(PORT_ENV)
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(DEFAULT_PORT);
    base.wrapping_add(NEXT_PORT.fetch_add(1, Ordering::SeqCst))
}

/// Parse `DEV@ADDR[@NETDEV]` from the environment variable `var`.
pub fn parse_side(var: &str) -> Result<(String, IpAddr, Option<String>), String> {
    let v = std::env::var(var).map_err(|_| {
        format!(
            "{var} is not set (want DEV@ADDR[@NETDEV] for each side, e.g. \
             RELINK_VERBS_INITIATOR=rxe0@10.10.0.1 RELINK_VERBS_TARGET=rxe1@10.10.0.2)"
        )
    })?;
    parse_spec(var, &v)
}

/// Parse one `DEV@ADDR[@NETDEV]` (named `var` in errors).
pub fn parse_spec(var: &str, v: &str) -> Result<(String, IpAddr, Option<String>), String> {
    let mut parts = v.split('@');
    let dev = parts.next().filter(|d| !d.is_empty());
    let addr = parts.next().and_then(|a| a.parse::<IpAddr>().ok());
    match (dev, addr) {
        (Some(d), Some(a)) => Ok((d.to_string(), a, parts.next().map(str::to_string))),
        _ => Err(format!("{var}={v:?} is not DEV@ADDR[@NETDEV]")),
    }
}

/// Whether the kernel lists `device` as a verbs device (a uverbs char
/// device exists for it), straight from sysfs.
pub fn uverbs_listed(device: &str) -> bool {
    let Ok(dir) = std::fs::read_dir("/sys/class/infiniband_verbs") else {
        return false;
    };
    dir.flatten()
        .any(|e| std::fs::read_to_string(e.path().join("ibdev")).is_ok_and(|s| s.trim() == device))
}

/// Poll `f` every 20 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Run a command to completion; its stderr is the error.
pub fn run(prog: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(prog)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `{prog} {}`: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{prog} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `rdma ARGS...`.
pub fn rdma(args: &[&str]) -> Result<(), String> {
    run("rdma", args)
}

/// `ip ARGS...`.
pub fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

/// One side of a [`VerbsRig`]: its device, the address the device owns and
/// the netdev it is attached to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideCfg {
    /// The RDMA device, e.g. `rxe0`.
    pub device: String,
    /// The side's address (owned by `device`).
    pub addr: IpAddr,
    /// The netdev under the device (to add a deleted rxe device back).
    pub netdev: String,
}

/// A device whose `rdma link delete` was started.
struct Deleting {
    child: Child,
    started: Instant,
}

/// Two [`VerbsProvider`]s in this process, each using one real device (see
/// the [module docs](self)). Each provider resolves from its own side's
/// address ([`VerbsConfig::default_source`]), so that two hosts share one
/// kernel without their connections turning into loopback on one device.
pub struct VerbsRig {
    hosts: Vec<VerbsProvider>,
    sides: [SideCfg; 2],
    port: u16,
    deleting: [Mutex<Option<Deleting>>; 2],
    /// The host's topology ([`Topology::from_env`]), for a replacement.
    topology: Result<Topology, String>,
    /// The replacement device of each side, once replaced.
    replaced: [Mutex<Option<String>>; 2],
    _lock: MutexGuard<'static, ()>,
}

impl VerbsRig {
    /// The rig [`INITIATOR_ENV`] and [`TARGET_ENV`] describe, on a
    /// [`fresh_port`]. Waits for any other rig of this process to drop
    /// first. A device of the rig that a previous rig left deleted (a panic
    /// before it could add it back) is added back first.
    ///
    /// # Errors
    /// Why there is no rig here, to be reported as a skip: the crate was
    /// built without `rdma`, a variable is missing or malformed, the
    /// providers cannot start, a device is missing or does not own its
    /// address, or its netdev is unknown.
    pub fn from_env() -> Result<VerbsRig, String> {
        if !relink_verbs::BUILT_WITH_RDMA {
            return Err(VerbsError::NotBuilt.to_string());
        }
        let cfg = [parse_side(ENV[0])?, parse_side(ENV[1])?];
        let lock = RIG_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        // A previous rig may have left a device deleted (a panic before it
        // could add it back): restore it first.
        for (dev, _, netdev) in &cfg {
            if !uverbs_listed(dev) {
                if let Some(nd) = netdev {
                    let _ = rdma(&["link", "add", dev, "type", "rxe", "netdev", nd]);
                    wait_until(FAULT_TIMEOUT, || uverbs_listed(dev));
                }
            }
        }
        let hosts = vec![
            VerbsProvider::with_config(host_config(cfg[0].1)).map_err(|e| e.to_string())?,
            VerbsProvider::with_config(host_config(cfg[1].1)).map_err(|e| e.to_string())?,
        ];
        let mut sides = Vec::new();
        for (i, (dev, addr, netdev)) in cfg.into_iter().enumerate() {
            let devices = hosts[i].devices();
            let Some(info) = devices.iter().find(|d| d.id.name == dev) else {
                let names: Vec<String> = devices.iter().map(|d| d.id.to_string()).collect();
                return Err(format!(
                    "{}: no RDMA device {dev} (devices here: {names:?})",
                    ENV[i]
                ));
            };
            if !info.owns(addr) {
                return Err(format!(
                    "{}: device {dev} does not own {addr} (its addresses: {:?})",
                    ENV[i], info.addrs
                ));
            }
            let netdev = netdev.or_else(|| info.netdev.clone()).ok_or_else(|| {
                format!(
                    "{}: device {dev} has no netdev; give DEV@ADDR@NETDEV",
                    ENV[i]
                )
            })?;
            sides.push(SideCfg {
                device: dev,
                addr,
                netdev,
            });
        }
        let sides: [SideCfg; 2] = sides.try_into().expect("two sides");
        Ok(VerbsRig {
            hosts,
            sides,
            port: fresh_port(),
            deleting: [Mutex::new(None), Mutex::new(None)],
            topology: Topology::from_env(),
            replaced: [Mutex::new(None), Mutex::new(None)],
            _lock: lock,
        })
    }

    /// The settings of `side`.
    pub fn side(&self, side: Side) -> &SideCfg {
        &self.sides[side.index()]
    }

    /// The provider settings of `side`'s host (its address as the default
    /// source).
    pub fn config(&self, side: Side) -> VerbsConfig {
        host_config(self.side(side).addr)
    }

    /// Another provider like `side`'s host, on the same devices: for a user
    /// of the devices beside the rig's own hosts (a relink node next to the
    /// raw pairs of a benchmark), which must not share a provider with them
    /// (a provider's events go to whoever polls it).
    ///
    /// # Errors
    /// If the provider cannot start.
    pub fn new_provider(&self, side: Side) -> Result<VerbsProvider, VerbsError> {
        VerbsProvider::with_config(self.config(side))
    }

    /// Wait for a started `rdma link delete` to return: it returns only
    /// once every process closed the device, so this is the check that the
    /// providers released it.
    fn finish_delete(&self, side: Side, timeout: Duration) -> Result<(), String> {
        let Some(mut d) = self.deleting[side.index()]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return Ok(());
        };
        let dev = &self.side(side).device;
        let end = Instant::now() + timeout;
        loop {
            match d.child.try_wait() {
                Ok(Some(st)) => {
                    let mut err = String::new();
                    if let Some(mut e) = d.child.stderr.take() {
                        let _ = std::io::Read::read_to_string(&mut e, &mut err);
                    }
                    eprintln!(
                        "verbs rig: `rdma link delete {dev}` returned after {:?} ({st})",
                        d.started.elapsed()
                    );
                    return if st.success() {
                        Ok(())
                    } else {
                        Err(format!(
                            "`rdma link delete {dev}` failed ({st}): {}",
                            err.trim()
                        ))
                    };
                }
                Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    return Err(format!(
                        "`rdma link delete {dev}` has not returned after {:?}: some context \
                         on the device is still open (the providers did not release it)",
                        d.started.elapsed()
                    ))
                }
                Err(e) => return Err(format!("waiting for `rdma link delete {dev}`: {e}")),
            }
        }
    }

    fn add_back(&self, side: Side) -> Result<(), String> {
        self.finish_delete(side, FAULT_TIMEOUT)?;
        let s = self.side(side);
        if uverbs_listed(&s.device) {
            return Ok(());
        }
        rdma(&["link", "add", &s.device, "type", "rxe", "netdev", &s.netdev])?;
        if !wait_until(FAULT_TIMEOUT, || uverbs_listed(&s.device)) {
            return Err(format!("{} did not appear after `rdma link add`", s.device));
        }
        Ok(())
    }
}

impl VerbsRig {
    /// The replacement of `side` ([`Rig::replace_device`]): its device is
    /// deleted (in the background, as for a removal), its address moves to
    /// the spare netdev, a new device is added there (a new GUID, from the
    /// netdev's MAC) and the policy routes follow.
    fn replace(&self, side: Side) -> Result<(), Skip> {
        let t = self.topology.as_ref().map_err(|e| {
            Skip::new(format!(
                "replacing a device needs the host's topology ({SPARE_ENV} and the sides \
                 as DEV@ADDR@NETDEV): {e}"
            ))
        })?;
        let Some((spare, spare_nd)) = t.spare.clone() else {
            return Err(Skip::new(format!(
                "replacing a device needs {SPARE_ENV}=DEV@NETDEV (a spare netdev on the same link)"
            )));
        };
        self.remove_device(side)?;
        let s = self.side(side);
        let fail = |e: String| -> ! { panic!("replacing the {side} device {}: {e}", s.device) };
        t.move_address(s.addr, &s.netdev, &spare_nd)
            .unwrap_or_else(|e| fail(e));
        rdma(&["link", "add", &spare, "type", "rxe", "netdev", &spare_nd])
            .unwrap_or_else(|e| fail(e));
        if !wait_until(FAULT_TIMEOUT, || uverbs_listed(&spare)) {
            fail(format!("{spare} did not appear after `rdma link add`"));
        }
        let (a, b) = match side {
            Side::Initiator => (spare_nd.as_str(), self.sides[1].netdev.as_str()),
            Side::Target => (self.sides[0].netdev.as_str(), spare_nd.as_str()),
        };
        t.routes(a, b).unwrap_or_else(|e| fail(e));
        *self.replaced[side.index()]
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(spare);
        Ok(())
    }

    /// Delete the replacement devices and move their addresses back (the
    /// original devices are added back by the caller).
    fn undo_replacements(&self) -> Result<(), String> {
        let Ok(t) = &self.topology else { return Ok(()) };
        let mut any = false;
        for side in Side::ALL {
            let Some(spare) = self.replaced[side.index()]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            else {
                continue;
            };
            any = true;
            if uverbs_listed(&spare) {
                rdma(&["link", "delete", &spare])?;
            }
            if let Some((_, spare_nd)) = &t.spare {
                let s = self.side(side);
                t.move_address(s.addr, spare_nd, &s.netdev)?;
            }
        }
        if any {
            t.routes(&self.sides[0].netdev, &self.sides[1].netdev)?;
        }
        Ok(())
    }
}

/// The settings of a host that resolves from `addr`: two hosts in one
/// kernel must each resolve from their own address (else routing picks the
/// destination's own device, a loopback).
fn host_config(addr: IpAddr) -> VerbsConfig {
    VerbsConfig {
        default_source: Some(addr),
        ..VerbsConfig::default()
    }
}

impl Drop for VerbsRig {
    fn drop(&mut self) {
        // A replacement device goes while the providers still run: deleting
        // it waits for every open context, librdmacm's cached one too, which
        // only a live provider's re-scan makes librdmacm drop.
        if let Err(e) = self.undo_replacements() {
            let _ = writeln!(std::io::stderr(), "verbs rig: undoing a replacement: {e}");
            if !std::thread::panicking() {
                panic!("verbs rig: undoing a replacement: {e}");
            }
        }
        // Release the devices, then put back what a case removed.
        self.hosts.clear();
        for side in Side::ALL {
            let pending = self.deleting[side.index()]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some();
            if pending || !uverbs_listed(&self.side(side).device) {
                if let Err(e) = self.add_back(side) {
                    let _ = writeln!(std::io::stderr(), "verbs rig: restoring {side}: {e}");
                    if !std::thread::panicking() {
                        panic!("verbs rig: restoring the {side} device: {e}");
                    }
                }
            }
        }
    }
}

impl Rig for VerbsRig {
    fn host(&self, side: Side) -> &dyn Provider {
        &self.hosts[side.index()]
    }

    fn device_name(&self, side: Side) -> String {
        self.replaced[side.index()]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_else(|| self.side(side).device.clone())
    }

    fn addr(&self, side: Side) -> IpAddr {
        self.side(side).addr
    }

    fn port(&self) -> u16 {
        self.port
    }

    fn remove_device(&self, side: Side) -> Result<(), Skip> {
        let dev = self.side(side).device.clone();
        // `rdma link delete` blocks until every context on the device is
        // closed, so it runs in the background while the case tears down.
        let child = Command::new("rdma")
            .args(["link", "delete", &dev])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Skip::new(format!("cannot run `rdma link delete {dev}`: {e}")))?;
        *self.deleting[side.index()]
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Deleting {
            child,
            started: Instant::now(),
        });
        if !wait_until(FAULT_TIMEOUT, || !uverbs_listed(&dev)) {
            panic!("{dev} still listed {FAULT_TIMEOUT:?} after `rdma link delete`");
        }
        Ok(())
    }

    fn add_device_back(&self, side: Side) -> Result<(), Skip> {
        if let Err(e) = self.add_back(side) {
            panic!("adding the {side} device back: {e}");
        }
        Ok(())
    }

    fn reset_device(&self, _side: Side) -> Result<(), Skip> {
        Err(Skip::new(
            "Soft-RoCE has no device reset (no IBV_EVENT_DEVICE_FATAL can be injected); \
             remove + add is covered by the other cases",
        ))
    }

    fn replace_device(&self, side: Side) -> Result<(), Skip> {
        self.replace(side)
    }

    fn settle_time(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn has_quirk(&self, quirk: Quirk) -> bool {
        // Soft-RoCE (rdma_rxe) deviations, seen on kernels 6.1 and 6.12.
        let rxe = [Side::Initiator, Side::Target]
            .iter()
            .all(|s| self.device_name(*s).starts_with("rxe"));
        rxe && matches!(
            quirk,
            Quirk::BadLkeyIsLocQpOpErr
                | Quirk::MwBoundsCheckedAgainstMr
                | Quirk::AtomicResultLostOnReplay
        )
    }

    fn quiet_time(&self) -> Duration {
        Duration::from_millis(1500)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_settings_parse() {
        let (d, a, n) = parse_spec("X", "rxe0@10.10.0.1@veth0").unwrap();
        assert_eq!(
            (d.as_str(), a, n.as_deref()),
            ("rxe0", "10.10.0.1".parse().unwrap(), Some("veth0"))
        );
        let (_, a, n) = parse_spec("X", "mlx5_0@fe80::1").unwrap();
        assert_eq!((a, n), ("fe80::1".parse().unwrap(), None));
        for bad in ["", "rxe0", "@10.0.0.1", "rxe0@nope"] {
            let e = parse_spec("X", bad).unwrap_err();
            assert!(e.contains("is not DEV@ADDR[@NETDEV]"), "{e}");
        }
    }
}
