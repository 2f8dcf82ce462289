//! Fault injection into the soft fabric, `relink_soft.h` (the `soft`
//! feature): reset, unplug, plug in again or replace a device of an
//! in-process fabric; reset, remove or replace a soft device of a
//! directory, which every process attached to the directory sees. For
//! tests and demonstrations of recovery: a program in production has its
//! devices reset by the hardware, not by itself.

use std::ffi::c_char;

use crate::soft_fabric::{fabric_mut, io, registry, relink_soft_fabric};
use crate::status::*;

/// A fault injected into a soft device of an in-process fabric.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_soft_fault {
    /// The device resets: everything on it is lost, it comes back at once
    /// with its GUID.
    RELINK_FAULT_RESET = 0,
    /// The device is unplugged.
    RELINK_FAULT_REMOVE = 1,
    /// A device unplugged before is plugged in again.
    RELINK_FAULT_READD = 2,
    /// The device is replaced: a new GUID, the same address.
    RELINK_FAULT_REPLACE = 3,
}

/// Inject `fault` (a `relink_soft_fault`) into device `device` of host `host`.
///
/// # Safety
/// `fabric` is a live fabric; `host` and `device` are NUL-terminated
/// strings.
#[no_mangle]
pub unsafe extern "C" fn relink_soft_fabric_fault(
    fabric: *mut relink_soft_fabric,
    host: *const c_char,
    device: *const c_char,
    fault: i32,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        let (f, host, device) = unsafe {
            (
                fabric_mut(fabric)?,
                c_str(host, "host")?,
                c_str(device, "device")?,
            )
        };
        let h = f
            .hosts
            .get(host)
            .ok_or_else(|| Fail::arg(format!("the fabric has no host {host:?}")))?;
        match fault {
            0 => f.fabric.reset_device(h, device),
            1 => f.fabric.remove_device(h, device),
            2 => f.fabric.readd_device(h, device),
            3 => f.fabric.replace_device(h, device, None),
            _ => {
                return Err(Fail::arg(format!(
                    "`fault` {fault} is no relink_soft_fault"
                )))
            }
        }
        Ok(RELINK_OK)
    })
}

/// What `relink_soft_device` does to a device.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_soft_device_op {
    /// Reset: every process using it loses everything on it; it comes back
    /// at once with its GUID.
    RELINK_DEVICE_RESET = 0,
    /// Unplug it (add it again with `relink_soft_device_add`).
    RELINK_DEVICE_REMOVE = 1,
    /// Replace it: a new GUID, the same address.
    RELINK_DEVICE_REPLACE = 2,
}

/// Reset, remove or replace (`op`, a `relink_soft_device_op`) soft device
/// `name` of directory `dir` (NULL: the default directory). Every process
/// attached to the directory sees it.
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string; `name` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn relink_soft_device(
    dir: *const c_char,
    name: *const c_char,
    op: i32,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        let (reg, name) = unsafe { (registry(dir)?, c_str(name, "name")?) };
        match op {
            0 => {
                reg.reset(name).map_err(|e| io("reset", name, e))?;
            }
            1 => {
                reg.remove(name).map_err(|e| io("remove", name, e))?;
            }
            2 => {
                reg.replace(name, None)
                    .map_err(|e| io("replace", name, e))?;
            }
            _ => return Err(Fail::arg(format!("`op` {op} is no relink_soft_device_op"))),
        }
        Ok(RELINK_OK)
    })
}
