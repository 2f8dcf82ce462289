//! Ops tables answering `-FI_ENOSYS` in every entry, for
//! event queues, completion queues and counters.
//! Made by `scripts/ofi/nosys.py` from `sys.rs`; do not edit.

#![allow(clippy::too_many_arguments, unused_variables, dead_code)]

use super::super::sys::*;
use std::os::raw::{c_char, c_int, c_void};

extern "C" fn eq_read(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn eq_readerr(eq: *mut fid_eq, buf: *mut fi_eq_err_entry, flags: u64) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn eq_write(
    eq: *mut fid_eq,
    event: u32,
    buf: *const c_void,
    len: usize,
    flags: u64,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn eq_sread(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: c_int,
    flags: u64,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn eq_strerror(
    eq: *mut fid_eq,
    prov_errno: c_int,
    err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    std::ptr::null()
}
/// `fi_ops_eq` answering `-FI_ENOSYS` everywhere.
pub const EQ_NOSYS: fi_ops_eq = fi_ops_eq {
    size: std::mem::size_of::<fi_ops_eq>(),
    read: Some(eq_read),
    readerr: Some(eq_readerr),
    write: Some(eq_write),
    sread: Some(eq_sread),
    strerror: Some(eq_strerror),
};

extern "C" fn cq_read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn cq_readfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src_addr: *mut fi_addr_t,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, flags: u64) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn cq_sread(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    cond: *const c_void,
    timeout: c_int,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn cq_sreadfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src_addr: *mut fi_addr_t,
    cond: *const c_void,
    timeout: c_int,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn cq_signal(cq: *mut fid_cq) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn cq_strerror(
    cq: *mut fid_cq,
    prov_errno: c_int,
    err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    std::ptr::null()
}
/// `fi_ops_cq` answering `-FI_ENOSYS` everywhere.
pub const CQ_NOSYS: fi_ops_cq = fi_ops_cq {
    size: std::mem::size_of::<fi_ops_cq>(),
    read: Some(cq_read),
    readfrom: Some(cq_readfrom),
    readerr: Some(cq_readerr),
    sread: Some(cq_sread),
    sreadfrom: Some(cq_sreadfrom),
    signal: Some(cq_signal),
    strerror: Some(cq_strerror),
};

extern "C" fn cntr_read(cntr: *mut fid_cntr) -> u64 {
    0
}
extern "C" fn cntr_readerr(cntr: *mut fid_cntr) -> u64 {
    0
}
extern "C" fn cntr_add(cntr: *mut fid_cntr, value: u64) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn cntr_set(cntr: *mut fid_cntr, value: u64) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn cntr_wait(cntr: *mut fid_cntr, threshold: u64, timeout: c_int) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn cntr_adderr(cntr: *mut fid_cntr, value: u64) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn cntr_seterr(cntr: *mut fid_cntr, value: u64) -> c_int {
    -(FI_ENOSYS as c_int)
}
/// `fi_ops_cntr` answering `-FI_ENOSYS` everywhere.
pub const CNTR_NOSYS: fi_ops_cntr = fi_ops_cntr {
    size: std::mem::size_of::<fi_ops_cntr>(),
    read: Some(cntr_read),
    readerr: Some(cntr_readerr),
    add: Some(cntr_add),
    set: Some(cntr_set),
    wait: Some(cntr_wait),
    adderr: Some(cntr_adderr),
    seterr: Some(cntr_seterr),
};
