//! Ops tables whose every entry answers `-FI_ENOSYS`: the provider's
//! own tables start from these, so no entry is NULL. Made by
//! `scripts/ofi/nosys.py` from `sys.rs`; do not edit.

#![allow(clippy::too_many_arguments, unused_variables, dead_code)]

use super::sys::*;
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

extern "C" fn av_insert(
    av: *mut fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn av_insertsvc(
    av: *mut fid_av,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn av_insertsym(
    av: *mut fid_av,
    node: *const c_char,
    nodecnt: usize,
    service: *const c_char,
    svccnt: usize,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn av_remove(
    av: *mut fid_av,
    fi_addr: *mut fi_addr_t,
    count: usize,
    flags: u64,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn av_lookup(
    av: *mut fid_av,
    fi_addr: fi_addr_t,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn av_straddr(
    av: *mut fid_av,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    std::ptr::null()
}
extern "C" fn av_av_set(
    av: *mut fid_av,
    attr: *mut fi_av_set_attr,
    av_set: *mut *mut fid_av_set,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
/// `fi_ops_av` answering `-FI_ENOSYS` everywhere.
pub const AV_NOSYS: fi_ops_av = fi_ops_av {
    size: std::mem::size_of::<fi_ops_av>(),
    insert: Some(av_insert),
    insertsvc: Some(av_insertsvc),
    insertsym: Some(av_insertsym),
    remove: Some(av_remove),
    lookup: Some(av_lookup),
    straddr: Some(av_straddr),
    av_set: Some(av_av_set),
};

extern "C" fn domain_av_open(
    domain: *mut fid_domain,
    attr: *mut fi_av_attr,
    av: *mut *mut fid_av,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn domain_cq_open(
    domain: *mut fid_domain,
    attr: *mut fi_cq_attr,
    cq: *mut *mut fid_cq,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn domain_endpoint(
    domain: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn domain_scalable_ep(
    domain: *mut fid_domain,
    info: *mut fi_info,
    sep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn domain_cntr_open(
    domain: *mut fid_domain,
    attr: *mut fi_cntr_attr,
    cntr: *mut *mut fid_cntr,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn domain_poll_open(
    domain: *mut fid_domain,
    attr: *mut fi_poll_attr,
    pollset: *mut *mut fid_poll,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn domain_stx_ctx(
    domain: *mut fid_domain,
    attr: *mut fi_tx_attr,
    stx: *mut *mut fid_stx,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn domain_srx_ctx(
    domain: *mut fid_domain,
    attr: *mut fi_rx_attr,
    rx_ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn domain_query_atomic(
    domain: *mut fid_domain,
    datatype: fi_datatype,
    op: fi_op,
    attr: *mut fi_atomic_attr,
    flags: u64,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn domain_query_collective(
    domain: *mut fid_domain,
    coll: fi_collective_op,
    attr: *mut fi_collective_attr,
    flags: u64,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn domain_endpoint2(
    domain: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
/// `fi_ops_domain` answering `-FI_ENOSYS` everywhere.
pub const DOMAIN_NOSYS: fi_ops_domain = fi_ops_domain {
    size: std::mem::size_of::<fi_ops_domain>(),
    av_open: Some(domain_av_open),
    cq_open: Some(domain_cq_open),
    endpoint: Some(domain_endpoint),
    scalable_ep: Some(domain_scalable_ep),
    cntr_open: Some(domain_cntr_open),
    poll_open: Some(domain_poll_open),
    stx_ctx: Some(domain_stx_ctx),
    srx_ctx: Some(domain_srx_ctx),
    query_atomic: Some(domain_query_atomic),
    query_collective: Some(domain_query_collective),
    endpoint2: Some(domain_endpoint2),
};

extern "C" fn mr_reg(
    fid: *mut fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn mr_regv(
    fid: *mut fid,
    iov: *const iovec,
    count: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
extern "C" fn mr_regattr(
    fid: *mut fid,
    attr: *const fi_mr_attr,
    flags: u64,
    mr: *mut *mut fid_mr,
) -> c_int {
    -(FI_ENOSYS as c_int)
}
/// `fi_ops_mr` answering `-FI_ENOSYS` everywhere.
pub const MR_NOSYS: fi_ops_mr = fi_ops_mr {
    size: std::mem::size_of::<fi_ops_mr>(),
    reg: Some(mr_reg),
    regv: Some(mr_regv),
    regattr: Some(mr_regattr),
};

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

extern "C" fn rma_read(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src_addr: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn rma_readv(
    ep: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    src_addr: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn rma_readmsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn rma_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn rma_writev(
    ep: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn rma_writemsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn rma_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn rma_writedata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    data: u64,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn rma_injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    -(FI_ENOSYS as isize)
}
/// `fi_ops_rma` answering `-FI_ENOSYS` everywhere.
pub const RMA_NOSYS: fi_ops_rma = fi_ops_rma {
    size: std::mem::size_of::<fi_ops_rma>(),
    read: Some(rma_read),
    readv: Some(rma_readv),
    readmsg: Some(rma_readmsg),
    write: Some(rma_write),
    writev: Some(rma_writev),
    writemsg: Some(rma_writemsg),
    inject: Some(rma_inject),
    writedata: Some(rma_writedata),
    injectdata: Some(rma_injectdata),
};

extern "C" fn tagged_recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src_addr: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn tagged_recvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    src_addr: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn tagged_recvmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn tagged_send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    dest_addr: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn tagged_sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    dest_addr: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn tagged_sendmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn tagged_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest_addr: fi_addr_t,
    tag: u64,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn tagged_senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    data: u64,
    dest_addr: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    -(FI_ENOSYS as isize)
}
extern "C" fn tagged_injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest_addr: fi_addr_t,
    tag: u64,
) -> isize {
    -(FI_ENOSYS as isize)
}
/// `fi_ops_tagged` answering `-FI_ENOSYS` everywhere.
pub const TAGGED_NOSYS: fi_ops_tagged = fi_ops_tagged {
    size: std::mem::size_of::<fi_ops_tagged>(),
    recv: Some(tagged_recv),
    recvv: Some(tagged_recvv),
    recvmsg: Some(tagged_recvmsg),
    send: Some(tagged_send),
    sendv: Some(tagged_sendv),
    sendmsg: Some(tagged_sendmsg),
    inject: Some(tagged_inject),
    senddata: Some(tagged_senddata),
    injectdata: Some(tagged_injectdata),
};

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
