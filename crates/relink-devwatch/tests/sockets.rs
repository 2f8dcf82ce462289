//! The sockets themselves, on this host's kernel.
//!
//! The RDMA netlink cases check the answer this kernel must give: on a
//! kernel without the RDMA core (no `/sys/class/infiniband`, as on a host
//! without RDMA) opening fails as `Unsupported` naming `NETLINK_RDMA` — the
//! answer the watcher's fallback to uevents relies on; with the RDMA core
//! the device dump succeeds, and the monitor opens, or, on a kernel before
//! 6.12 (which has none), fails as `Unsupported` saying the monitor is
//! absent. A uevent case that cannot run here (not root, no uevents in this
//! network namespace) reports a skip through relink-skip.
//!
//! `RELINK_DEVWATCH_EXPECT_BACKEND=rdma-netlink|uevent|rescan` makes
//! `watcher_picks_a_backend_and_says_which` assert the backend chosen (the
//! VM tier sets it: netlink on kernel 6.12, uevent on 6.1).

use std::io::Write;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use netlink_sys::{Socket, SocketAddr};
use relink_devwatch::netlink::{list_devices, NetlinkMonitor, OpenError};
use relink_devwatch::uevent::{parse_uevent, UeventMonitor, NETLINK_KOBJECT_UEVENT};
use relink_devwatch::watch::{DeviceWatcher, WatchConfig};
use relink_devwatch::Backend;
use relink_skip::Skip;

/// Reports `case` as skipped on this host, for `why`.
fn skip(case: &str, why: impl std::fmt::Display) {
    relink_skip::skip_test(case, &Skip::new(why.to_string()));
}

/// Whether this kernel runs the RDMA core: `ib_core` registers the
/// `infiniband` device class when it loads, devices or not.
fn kernel_has_rdma_core() -> bool {
    std::path::Path::new("/sys/class/infiniband").exists()
}

/// This kernel's (major, minor) version.
fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    let mut parts = release
        .trim()
        .split(['.', '-', '+'])
        .map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// Checks an `Unsupported` answer from RDMA netlink: right on a kernel
/// without the RDMA core (naming `NETLINK_RDMA`), and for the monitor on a
/// kernel before 6.12 (naming the absent monitor); wrong otherwise.
fn unsupported(what: &str, reason: &str, monitor: bool) {
    let version = kernel_version();
    if !kernel_has_rdma_core() {
        assert!(
            reason.contains("NETLINK_RDMA is not available"),
            "{what}: a kernel without the RDMA core: the reason names NETLINK_RDMA: {reason}"
        );
        println!("no RDMA core in this kernel; {what} says why: {reason}");
    } else if monitor && version < (6, 12) {
        assert!(
            reason.contains("no RDMA monitor"),
            "{what}: kernel {version:?} has the RDMA core but no monitor: {reason}"
        );
        println!(
            "kernel {version:?}: no RDMA netlink monitor before 6.12; {what} says why: {reason}"
        );
    } else {
        panic!("{what}: unsupported on kernel {version:?} with the RDMA core: {reason}");
    }
}

#[test]
fn rdma_netlink_monitor_opens_or_says_why_not() {
    match NetlinkMonitor::open() {
        Ok(m) => {
            // A kernel >= 6.12 with ib_core: the monitor is there.
            assert!(m.set_nonblocking(true).is_ok());
            println!("RDMA netlink monitor opened");
        }
        Err(OpenError::Unsupported { reason }) => unsupported("the monitor", &reason, true),
        Err(e) => panic!("opening the RDMA netlink monitor failed: {e}"),
    }
}

#[test]
fn rdma_netlink_device_dump_or_says_why_not() {
    match list_devices() {
        Ok(devs) => {
            for d in &devs {
                assert!(!d.name.is_empty());
            }
            println!("RDMA netlink lists {} device(s): {devs:?}", devs.len());
        }
        Err(OpenError::Unsupported { reason }) => unsupported("the device dump", &reason, false),
        Err(e) => panic!("RDMA_NLDEV_CMD_GET dump failed: {e}"),
    }
}

#[test]
fn uevent_monitor_opens() {
    match UeventMonitor::open() {
        Ok(m) => assert!(m.set_nonblocking(true).is_ok()),
        Err(e) => skip(
            "uevent_monitor_opens",
            format!("NETLINK_KOBJECT_UEVENT unavailable: {e}"),
        ),
    }
}

/// Has the kernel send a real uevent (`change` on the loopback netdev) and
/// parses it: the parser against the kernel's own format. Needs root.
#[test]
fn parses_a_real_kernel_uevent() {
    let mut sock = match Socket::new(NETLINK_KOBJECT_UEVENT) {
        Ok(s) => s,
        Err(e) => return skip("parses_a_real_kernel_uevent", format!("socket: {e}")),
    };
    if let Err(e) = sock.bind(&SocketAddr::new(0, 1)) {
        return skip("parses_a_real_kernel_uevent", format!("bind: {e}"));
    }
    sock.set_non_blocking(true).unwrap();
    let trigger = std::fs::OpenOptions::new()
        .write(true)
        .open("/sys/class/net/lo/uevent")
        .and_then(|mut f| f.write_all(b"change"));
    if let Err(e) = trigger {
        return skip(
            "parses_a_real_kernel_uevent",
            format!("cannot trigger a uevent (not root?): {e}"),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = Vec::with_capacity(8192);
    while Instant::now() < deadline {
        buf.clear();
        match sock.recv_from(&mut buf, 0) {
            Ok((_, from)) if from.port_number() == 0 => {
                let ev = parse_uevent(&buf).expect("a kernel uevent parses");
                if ev.devpath.ends_with("/net/lo") && ev.action == "change" {
                    assert_eq!(ev.subsystem(), Some("net"));
                    assert!(ev.get("SEQNUM").is_some());
                    assert_eq!(relink_devwatch::uevent::classify(&ev), Ok(None));
                    return;
                }
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let fd = sock.as_fd();
                let mut fds = [rustix::event::PollFd::new(
                    &fd,
                    rustix::event::PollFlags::IN,
                )];
                let ts = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 100_000_000,
                };
                let _ = rustix::event::poll(&mut fds, Some(&ts));
            }
            Err(e) => panic!("recv: {e}"),
        }
    }
    skip(
        "parses_a_real_kernel_uevent",
        "no uevent arrived (another network namespace?)",
    );
}

#[test]
fn watcher_picks_a_backend_and_says_which() {
    let root = tempfile::tempdir().unwrap();
    let config = WatchConfig {
        class_root: root.path().into(),
        ..WatchConfig::default()
    };
    let (w, _rx) = DeviceWatcher::channel(config).expect("some backend always works");
    let info = w.info().clone();
    println!(
        "watcher backend: {} (prompt removal: {}); skipped: {:?}",
        info.backend, info.prompt_removal, info.skipped
    );
    // Everything before the chosen backend says why it was skipped.
    match info.backend {
        Backend::Netlink => assert!(info.skipped.is_empty()),
        Backend::Uevent => assert_eq!(info.skipped.len(), 1),
        Backend::Rescan => assert_eq!(info.skipped.len(), 2),
    }
    assert!(info.initial.is_empty());
    if let Ok(want) = std::env::var("RELINK_DEVWATCH_EXPECT_BACKEND") {
        assert_eq!(info.backend.to_string(), want, "backend chosen");
    }
    w.stop();
}
