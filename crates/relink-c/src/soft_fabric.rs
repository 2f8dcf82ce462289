//! The embedded soft fabric: relink's software RC fabric, the default
//! provider, which needs no RDMA hardware. In one process, a
//! `relink_soft_fabric` holds hosts and their devices on a virtual clock,
//! and `relink_node_new_soft` makes a node on one of its hosts; across
//! processes, the TCP soft fabric's devices live in a directory
//! (`relink_soft_device_add`, or `relink soft-device add`) that
//! `relink_node_new_tcp` opens. Injecting faults into either (a reset, an
//! unplug, a replacement) is `relink_soft.h`'s.
//!
//! The fault hooks are in `soft_hooks`, behind the `soft` feature; they
//! reach into the fabric and the directory through what is `pub(crate)`
//! here.

use std::collections::BTreeMap;
use std::ffi::c_char;
use std::sync::Arc;

use relink_soft::{Registry, SoftFabric, SoftHost};

use crate::node::relink_node;
use crate::status::*;

/// An in-process soft fabric: hosts and their devices, all in this
/// process, on a virtual clock that moves while a node of it waits (faults
/// are injected with `relink_soft_fabric_fault`, in `relink_soft.h`). For
/// tests and simulations of several nodes in one process. Made by `relink_soft_fabric_new`, freed by
/// `relink_soft_fabric_free` (after or before its nodes: a node keeps what
/// it needs alive).
pub struct relink_soft_fabric {
    pub(crate) fabric: SoftFabric,
    pub(crate) hosts: BTreeMap<String, SoftHost>,
}

/// The fabric behind a handle.
///
/// # Safety
/// `p` is NULL or a live fabric from `relink_soft_fabric_new`, not used by
/// another thread during the call.
pub(crate) unsafe fn fabric_mut<'a>(
    p: *mut relink_soft_fabric,
) -> Result<&'a mut relink_soft_fabric, Fail> {
    non_null(p, "fabric")?;
    // SAFETY: as above.
    Ok(unsafe { &mut *p })
}

/// Make an in-process soft fabric whose random choices all come from
/// `seed`; store it in `*out` (free it with `relink_soft_fabric_free`).
///
/// # Safety
/// `out` is valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn relink_soft_fabric_new(
    seed: u64,
    out: *mut *mut relink_soft_fabric,
) -> relink_status {
    guard(|| {
        // Before the fabric is made: refused, nothing is left behind.
        non_null(out, "out")?;
        let f = Box::new(relink_soft_fabric {
            fabric: SoftFabric::new(seed),
            hosts: BTreeMap::new(),
        });
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", Box::into_raw(f)) }?;
        Ok(RELINK_OK)
    })
}

/// Free a fabric made by `relink_soft_fabric_new`; NULL is ignored. Its
/// nodes go on working.
///
/// # Safety
/// `fabric` is NULL or a live fabric, not used again after the call.
#[no_mangle]
pub unsafe extern "C" fn relink_soft_fabric_free(fabric: *mut relink_soft_fabric) {
    if !fabric.is_null() {
        // SAFETY: made by `Box::into_raw` in `relink_soft_fabric_new`;
        // the caller gives up the pointer.
        let f = unsafe { Box::from_raw(fabric) };
        // Dropping a fabric runs relink code: keep a panic on this side.
        guard_free(move || drop(f));
    }
}

/// Add a device `device` owning `cidr` (e.g. `"10.0.0.1/24"`) to the host
/// `host` of the fabric (the host is made by its first device).
///
/// # Safety
/// `fabric` is a live fabric; `host`, `device` and `cidr` are
/// NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn relink_soft_fabric_add_device(
    fabric: *mut relink_soft_fabric,
    host: *const c_char,
    device: *const c_char,
    cidr: *const c_char,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        let (f, host, device, cidr) = unsafe {
            (
                fabric_mut(fabric)?,
                c_str(host, "host")?,
                c_str(device, "device")?,
                c_str(cidr, "cidr")?,
            )
        };
        if cidr.parse::<relink_fabric::IpNet>().is_err() {
            return Err(Fail::arg(format!(
                "`cidr` {cidr:?} is not an address with a prefix length (10.0.0.1/24)"
            )));
        }
        let h = f
            .hosts
            .entry(host.to_string())
            .or_insert_with(|| f.fabric.add_host(host))
            .clone();
        f.fabric.add_device(&h, device, cidr);
        Ok(RELINK_OK)
    })
}

/// Make a node on host `host` of an in-process fabric (the host is made if
/// it has no device yet); store it in `*out`.
///
/// # Safety
/// `fabric` is a live fabric; `host` a NUL-terminated string; `out` valid
/// for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn relink_node_new_soft(
    fabric: *mut relink_soft_fabric,
    host: *const c_char,
    out: *mut *mut relink_node,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        let (f, host) = unsafe { (fabric_mut(fabric)?, c_str(host, "host")?) };
        non_null(out, "out")?;
        let h = f
            .hosts
            .entry(host.to_string())
            .or_insert_with(|| f.fabric.add_host(host))
            .clone();
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", relink_node::boxed(Arc::new(h))) }?;
        Ok(RELINK_OK)
    })
}

/// The registry of `dir` (NULL: `$RELINK_SOFT_DIR` or the per-user runtime
/// directory).
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string.
pub(crate) unsafe fn registry(dir: *const c_char) -> Result<Registry, Fail> {
    // SAFETY: the caller's contract.
    let dir = unsafe { opt_c_str(dir, "dir")? };
    let dir = dir
        .map(std::path::PathBuf::from)
        .unwrap_or_else(Registry::default_dir);
    Registry::open(&dir).map_err(|e| {
        Fail::new(
            RELINK_ERR_IO,
            format!("soft device directory {}: {e}", dir.display()),
        )
    })
}

pub(crate) fn io(what: &str, name: &str, e: impl std::fmt::Display) -> Fail {
    Fail::new(
        RELINK_ERR_IO,
        format!("cannot {what} soft device {name:?}: {e}"),
    )
}

/// Add soft device `name` owning `cidr` (e.g. `"127.0.0.2/8"`) to the
/// directory `dir` (NULL: the default directory), as `relink soft-device
/// add` does; every process attached to the directory sees it
/// (`relink_soft_device`, in `relink_soft.h`, resets, removes or replaces
/// it).
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string; `name` and `cidr` are
/// NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn relink_soft_device_add(
    dir: *const c_char,
    name: *const c_char,
    cidr: *const c_char,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        let (reg, name, cidr) =
            unsafe { (registry(dir)?, c_str(name, "name")?, c_str(cidr, "cidr")?) };
        let net = cidr.parse::<relink_fabric::IpNet>().map_err(|_| {
            Fail::arg(format!(
                "`cidr` {cidr:?} is not an address with a prefix length (127.0.0.2/8)"
            ))
        })?;
        reg.add(name, vec![net], None, None)
            .map_err(|e| io("add", name, e))?;
        Ok(RELINK_OK)
    })
}
