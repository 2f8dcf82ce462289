//! What the real-verbs test binaries share: the host's device and network
//! commands (`rdma link`, `ip`), sysfs checks and the `DEV@ADDR[@NETDEV]`
//! settings.

#![allow(dead_code)] // each test binary uses its own subset

use std::net::IpAddr;
use std::process::Command;
use std::time::{Duration, Instant};

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
