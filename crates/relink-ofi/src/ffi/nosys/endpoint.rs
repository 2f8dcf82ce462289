//! Ops tables answering `-FI_ENOSYS` in every entry, for
//! endpoints, their messages and connection management.
//! Made by `scripts/ofi/nosys.py` from `sys.rs`; do not edit.

#![allow(clippy::too_many_arguments, unused_variables, dead_code)]

use super::super::sys::*;
use std::os::raw::{c_int, c_void};

extern "C" fn ep_cancel(fid: fid_t, context: *mut c_void) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn ep_getopt(
    fid: fid_t,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut usize,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn ep_setopt(
    fid: fid_t,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: usize,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn ep_tx_ctx(
    sep: *mut fid_ep,
    index: c_int,
    attr: *mut fi_tx_attr,
    tx_ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn ep_rx_ctx(
    sep: *mut fid_ep,
    index: c_int,
    attr: *mut fi_rx_attr,
    rx_ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn ep_rx_size_left(ep: *mut fid_ep) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn ep_tx_size_left(ep: *mut fid_ep) -> isize {
    -(FI_ENOSYS as isize)
}
/// `fi_ops_ep` answering `-FI_ENOSYS` everywhere.
pub const EP_NOSYS: fi_ops_ep = fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: Some(ep_cancel),
    getopt: Some(ep_getopt),
    setopt: Some(ep_setopt),
    tx_ctx: Some(ep_tx_ctx),
    rx_ctx: Some(ep_rx_ctx),
    rx_size_left: Some(ep_rx_size_left),
    tx_size_left: Some(ep_tx_size_left),
};

extern "C" fn msg_recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src_addr: fi_addr_t,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn msg_recvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    src_addr: fi_addr_t,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn msg_recvmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn msg_send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    dest_addr: fi_addr_t,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn msg_sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    dest_addr: fi_addr_t,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn msg_sendmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn msg_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest_addr: fi_addr_t,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn msg_senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    data: u64,
    dest_addr: fi_addr_t,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn msg_injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest_addr: fi_addr_t,
) -> isize {
    -(FI_ENOSYS as isize)
}
/// `fi_ops_msg` answering `-FI_ENOSYS` everywhere.
pub const MSG_NOSYS: fi_ops_msg = fi_ops_msg {
    size: std::mem::size_of::<fi_ops_msg>(),
    recv: Some(msg_recv),
    recvv: Some(msg_recvv),
    recvmsg: Some(msg_recvmsg),
    send: Some(msg_send),
    sendv: Some(msg_sendv),
    sendmsg: Some(msg_sendmsg),
    inject: Some(msg_inject),
    senddata: Some(msg_senddata),
    injectdata: Some(msg_injectdata),
};

extern "C" fn cm_setname(fid: fid_t, addr: *mut c_void, addrlen: usize) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn cm_getname(fid: fid_t, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn cm_getpeer(ep: *mut fid_ep, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn cm_connect(
    ep: *mut fid_ep,
    addr: *const c_void,
    param: *const c_void,
    paramlen: usize,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn cm_listen(pep: *mut fid_pep) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn cm_accept(ep: *mut fid_ep, param: *const c_void, paramlen: usize) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn cm_reject(
    pep: *mut fid_pep,
    handle: fid_t,
    param: *const c_void,
    paramlen: usize,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn cm_shutdown(ep: *mut fid_ep, flags: u64) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn cm_join(
    ep: *mut fid_ep,
    addr: *const c_void,
    flags: u64,
    mc: *mut *mut fid_mc,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
/// `fi_ops_cm` answering `-FI_ENOSYS` everywhere.
pub const CM_NOSYS: fi_ops_cm = fi_ops_cm {
    size: std::mem::size_of::<fi_ops_cm>(),
    setname: Some(cm_setname),
    getname: Some(cm_getname),
    getpeer: Some(cm_getpeer),
    connect: Some(cm_connect),
    listen: Some(cm_listen),
    accept: Some(cm_accept),
    reject: Some(cm_reject),
    shutdown: Some(cm_shutdown),
    join: Some(cm_join),
};
