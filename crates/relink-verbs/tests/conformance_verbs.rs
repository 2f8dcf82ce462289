//! The conformance suite on real verbs (rdma-core), with real device
//! faults: `rdma link delete` / `rdma link add` (Soft-RoCE).
//!
//! Needs the `rdma` feature, RDMA devices and two environment variables
//! naming the device and address of each side:
//!
//! ```text
//! RELINK_VERBS_INITIATOR=rxe0@10.10.0.1 RELINK_VERBS_TARGET=rxe1@10.10.0.2 \
//!     cargo test -p relink-verbs --features rdma --test conformance_verbs -- --test-threads=1
//! ```
//!
//! (`DEV@ADDR[@NETDEV]`; the netdev, needed to add a deleted rxe device
//! back, defaults to the one the device is attached to.) Both hosts are
//! [`VerbsProvider`]s in this process; cases run one at a time (a process
//! lock) because faults act on the host's real devices. A removed device is
//! added back when the case's rig drops, so the next case finds it.
//!
//! On a machine without RDMA, the project's Soft-RoCE VM rig runs it (see
//! `shared/rig/README.md`): build with `cargo test -p relink-verbs --features
//! rdma --test conformance_verbs --no-run`, pack the binary with `ci.sh -t
//! rust -x <binary>` and run it from a `-r` hook with the two variables set
//! to `rxe0@10.10.0.1` and `rxe1@10.10.0.2`.
//!
//! Without the feature, the variables or the devices, every case prints
//! `SKIPPED: <case> on verbs: <why>` to stderr and returns — never a silent
//! pass; `RELINK_TESTKIT_FAIL_ON_SKIP=1` turns skips into failures.

use std::io::Write as _;
use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod common;

use common::{parse_side, rdma, uverbs_listed, wait_until};
use relink_fabric::Provider;
use relink_testkit::{Quirk, Rig, Side, Skip, FAIL_ON_SKIP_ENV};
use relink_verbs::{VerbsConfig, VerbsProvider};

/// Environment variable of each side's `DEV@ADDR[@NETDEV]`.
const ENV: [&str; 2] = ["RELINK_VERBS_INITIATOR", "RELINK_VERBS_TARGET"];

/// How long a device may take to leave or join the device list, and how
/// long `rdma link delete` may take once the provider released the device.
const FAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// One case at a time: faults act on the host's devices.
static RIG_LOCK: Mutex<()> = Mutex::new(());

/// CM ports, one per rig.
static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

#[derive(Debug, Clone)]
struct SideCfg {
    device: String,
    addr: IpAddr,
    netdev: String,
}

/// A device whose `rdma link delete` was started.
struct Deleting {
    child: Child,
    started: Instant,
}

/// Two [`VerbsProvider`]s in this process, each using one real device.
struct VerbsRig {
    hosts: Vec<VerbsProvider>,
    sides: [SideCfg; 2],
    port: u16,
    deleting: [Mutex<Option<Deleting>>; 2],
    _lock: MutexGuard<'static, ()>,
}

impl VerbsRig {
    fn from_env() -> Result<VerbsRig, String> {
        if !relink_verbs::BUILT_WITH_RDMA {
            return Err(relink_verbs::VerbsError::NotBuilt.to_string());
        }
        let cfg = [parse_side(ENV[0])?, parse_side(ENV[1])?];
        let lock = RIG_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        // A previous case may have left a device deleted (a panic before its
        // rig could add it back): restore it first.
        for (dev, _, netdev) in &cfg {
            if !uverbs_listed(dev) {
                if let Some(nd) = netdev {
                    let _ = rdma(&["link", "add", dev, "type", "rxe", "netdev", nd]);
                    wait_until(FAULT_TIMEOUT, || uverbs_listed(dev));
                }
            }
        }
        // Two hosts in one kernel: each resolves from its own address (else
        // routing would pick the destination's own device, a loopback).
        let host = |addr: IpAddr| {
            VerbsProvider::with_config(VerbsConfig {
                default_source: Some(addr),
                ..VerbsConfig::default()
            })
            .map_err(|e| e.to_string())
        };
        let hosts = vec![host(cfg[0].1)?, host(cfg[1].1)?];
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
        let base: u16 = std::env::var("RELINK_VERBS_PORT")
            .ok()
            .and_then(|p| p.parse().ok())
            .unwrap_or(18_515);
        let port = base.wrapping_add(NEXT_PORT.fetch_add(1, Ordering::SeqCst));
        Ok(VerbsRig {
            hosts,
            sides,
            port,
            deleting: [Mutex::new(None), Mutex::new(None)],
            _lock: lock,
        })
    }

    fn side(&self, side: Side) -> &SideCfg {
        &self.sides[side.index()]
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

impl Drop for VerbsRig {
    fn drop(&mut self) {
        // Release the devices first, then put back what a case removed.
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
        self.side(side).device.clone()
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

    fn replace_device(&self, _side: Side) -> Result<(), Skip> {
        Err(Skip::new(
            "replacing a device needs a second netdev that takes over the address; \
             this rig does not set one up",
        ))
    }

    fn settle_time(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn has_quirk(&self, quirk: Quirk) -> bool {
        // Soft-RoCE (rdma_rxe) deviations, seen on kernel 6.1.
        let rxe = [Side::Initiator, Side::Target]
            .iter()
            .all(|s| self.device_name(*s).starts_with("rxe"));
        rxe && matches!(
            quirk,
            Quirk::BadLkeyIsLocQpOpErr | Quirk::MwBoundsCheckedAgainstMr
        )
    }

    fn quiet_time(&self) -> Duration {
        Duration::from_millis(1500)
    }
}

/// Print the loud skip line for the running case (or fail, if skips must
/// fail).
fn skip_case(why: &str) {
    let case = std::thread::current()
        .name()
        .map(|n| n.rsplit("::").next().unwrap_or(n).to_string())
        .filter(|n| n != "main")
        .unwrap_or_else(|| "a conformance case".to_string());
    if std::env::var(FAIL_ON_SKIP_ENV).is_ok_and(|v| v == "1") {
        panic!("{case} on verbs: would be SKIPPED ({why}) but {FAIL_ON_SKIP_ENV}=1");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED: {case} on verbs: {why}");
}

/// The rig, or a loud skip of the calling test.
macro_rules! verbs_rig {
    () => {
        match VerbsRig::from_env() {
            Ok(rig) => rig,
            Err(why) => {
                skip_case(&why);
                return;
            }
        }
    };
}

/// Says once, up front, whether the suite below runs on real devices.
#[test]
fn verbs_rig_available() {
    let rig = verbs_rig!();
    for side in Side::ALL {
        let host = rig.host(side);
        eprintln!(
            "verbs rig: {side}: {} at {} — devices: {:?}",
            rig.device_name(side),
            rig.addr(side),
            host.devices()
                .iter()
                .map(|d| format!("{} guid {} {:?}", d.id, d.node_guid, d.addrs))
                .collect::<Vec<_>>()
        );
    }
}

relink_testkit::conformance_tests!(verbs_rig!());
