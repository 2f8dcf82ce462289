//! The soft devices of a directory (the TCP soft fabric's host-wide
//! devices): add, remove, reset, replace — what `relink soft-device` does,
//! for a C program that manages its own devices or injects faults.

use std::ffi::c_char;

use relink_soft::Registry;

use crate::status::*;

/// The registry of `dir` (NULL: `$RELINK_SOFT_DIR` or the per-user runtime
/// directory).
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string.
unsafe fn registry(dir: *const c_char) -> Result<Registry, Fail> {
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

fn io(what: &str, name: &str, e: impl std::fmt::Display) -> Fail {
    Fail::new(
        RELINK_ERR_IO,
        format!("cannot {what} soft device {name:?}: {e}"),
    )
}

/// Add soft device `name` owning `cidr` (e.g. `"127.0.0.2/8"`) to the
/// directory `dir` (NULL: the default directory).
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

/// Reset, remove or replace (`op`, a `relink_soft_device_op`) soft device `name` of directory `dir` (NULL:
/// the default directory). Every process attached to the directory sees it.
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
