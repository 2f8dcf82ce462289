//! Ops tables answering `-FI_ENOSYS` in every entry, for
//! domains, address vectors and memory regions.
//! Made by `scripts/ofi/nosys.py` from `sys.rs`; do not edit.

#![allow(clippy::too_many_arguments, unused_variables, dead_code)]

use super::super::sys::*;
use std::os::raw::{c_char, c_int, c_void};

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
