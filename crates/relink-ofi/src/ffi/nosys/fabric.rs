//! Ops tables answering `-FI_ENOSYS` in every entry, for
//! the fabric and every object.
//! Made by `scripts/ofi/nosys.py` from `sys.rs`; do not edit.

#![allow(clippy::too_many_arguments, unused_variables, dead_code)]

use super::super::sys::*;
use std::os::raw::{c_char, c_int, c_void};

extern "C" fn fid_close(fid: *mut fid) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn fid_bind(fid: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn fid_control(fid: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn fid_ops_open(
    fid: *mut fid,
    name: *const c_char,
    flags: u64,
    ops: *mut *mut c_void,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn fid_tostr(fid: *const fid, buf: *mut c_char, len: usize) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn fid_ops_set(
    fid: *mut fid,
    name: *const c_char,
    flags: u64,
    ops: *mut c_void,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
/// `fi_ops` answering `-FI_ENOSYS` everywhere.
pub const FID_NOSYS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(fid_close),
    bind: Some(fid_bind),
    control: Some(fid_control),
    ops_open: Some(fid_ops_open),
    tostr: Some(fid_tostr),
    ops_set: Some(fid_ops_set),
};

extern "C" fn fabric_domain(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    dom: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn fabric_passive_ep(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    pep: *mut *mut fid_pep,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn fabric_eq_open(
    fabric: *mut fid_fabric,
    attr: *mut fi_eq_attr,
    eq: *mut *mut fid_eq,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn fabric_wait_open(
    fabric: *mut fid_fabric,
    attr: *mut fi_wait_attr,
    waitset: *mut *mut fid_wait,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn fabric_trywait(fabric: *mut fid_fabric, fids: *mut *mut fid, count: c_int) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn fabric_domain2(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    dom: *mut *mut fid_domain,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
/// `fi_ops_fabric` answering `-FI_ENOSYS` everywhere.
pub const FABRIC_NOSYS: fi_ops_fabric = fi_ops_fabric {
    size: std::mem::size_of::<fi_ops_fabric>(),
    domain: Some(fabric_domain),
    passive_ep: Some(fabric_passive_ep),
    eq_open: Some(fabric_eq_open),
    wait_open: Some(fabric_wait_open),
    trywait: Some(fabric_trywait),
    domain2: Some(fabric_domain2),
};

extern "C" fn wait_wait(waitset: *mut fid_wait, timeout: c_int) -> c_int {
    -(FI_ENOSYS as c_int)
}
/// `fi_ops_wait` answering `-FI_ENOSYS` everywhere.
pub const WAIT_NOSYS: fi_ops_wait = fi_ops_wait {
    size: std::mem::size_of::<fi_ops_wait>(),
    wait: Some(wait_wait),
};

extern "C" fn poll_poll(pollset: *mut fid_poll, context: *mut *mut c_void, count: c_int) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn poll_poll_add(pollset: *mut fid_poll, event_fid: *mut fid, flags: u64) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn poll_poll_del(pollset: *mut fid_poll, event_fid: *mut fid, flags: u64) -> c_int {
    -(FI_ENOSYS as c_int)
}
/// `fi_ops_poll` answering `-FI_ENOSYS` everywhere.
pub const POLL_NOSYS: fi_ops_poll = fi_ops_poll {
    size: std::mem::size_of::<fi_ops_poll>(),
    poll: Some(poll_poll),
    poll_add: Some(poll_poll_add),
    poll_del: Some(poll_poll_del),
};
