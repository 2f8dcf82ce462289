//! Ops tables answering `-FI_ENOSYS` in every entry, for
//! atomics.
//! Made by `scripts/ofi/nosys.py` from `sys.rs`; do not edit.

#![allow(clippy::too_many_arguments, unused_variables, dead_code)]

use super::super::sys::*;
use std::os::raw::{c_int, c_void};

extern "C" fn atomic_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    desc: *mut c_void,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn atomic_writev(
    ep: *mut fid_ep,
    iov: *const fi_ioc,
    desc: *mut *mut c_void,
    count: usize,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn atomic_writemsg(ep: *mut fid_ep, msg: *const fi_msg_atomic, flags: u64) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn atomic_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn atomic_readwrite(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    desc: *mut c_void,
    result: *mut c_void,
    result_desc: *mut c_void,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn atomic_readwritev(
    ep: *mut fid_ep,
    iov: *const fi_ioc,
    desc: *mut *mut c_void,
    count: usize,
    resultv: *mut fi_ioc,
    result_desc: *mut *mut c_void,
    result_count: usize,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn atomic_readwritemsg(
    ep: *mut fid_ep,
    msg: *const fi_msg_atomic,
    resultv: *mut fi_ioc,
    result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn atomic_compwrite(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    desc: *mut c_void,
    compare: *const c_void,
    compare_desc: *mut c_void,
    result: *mut c_void,
    result_desc: *mut c_void,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn atomic_compwritev(
    ep: *mut fid_ep,
    iov: *const fi_ioc,
    desc: *mut *mut c_void,
    count: usize,
    comparev: *const fi_ioc,
    compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut fi_ioc,
    result_desc: *mut *mut c_void,
    result_count: usize,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn atomic_compwritemsg(
    ep: *mut fid_ep,
    msg: *const fi_msg_atomic,
    comparev: *const fi_ioc,
    compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut fi_ioc,
    result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn atomic_writevalid(
    ep: *mut fid_ep,
    datatype: fi_datatype,
    op: fi_op,
    count: *mut usize,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn atomic_readwritevalid(
    ep: *mut fid_ep,
    datatype: fi_datatype,
    op: fi_op,
    count: *mut usize,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn atomic_compwritevalid(
    ep: *mut fid_ep,
    datatype: fi_datatype,
    op: fi_op,
    count: *mut usize,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
/// `fi_ops_atomic` answering `-FI_ENOSYS` everywhere.
pub const ATOMIC_NOSYS: fi_ops_atomic = fi_ops_atomic {
    size: std::mem::size_of::<fi_ops_atomic>(),
    write: Some(atomic_write),
    writev: Some(atomic_writev),
    writemsg: Some(atomic_writemsg),
    inject: Some(atomic_inject),
    readwrite: Some(atomic_readwrite),
    readwritev: Some(atomic_readwritev),
    readwritemsg: Some(atomic_readwritemsg),
    compwrite: Some(atomic_compwrite),
    compwritev: Some(atomic_compwritev),
    compwritemsg: Some(atomic_compwritemsg),
    writevalid: Some(atomic_writevalid),
    readwritevalid: Some(atomic_readwritevalid),
    compwritevalid: Some(atomic_compwritevalid),
};
