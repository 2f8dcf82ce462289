//! `fi_getinfo`'s entry point, and `struct fi_info` read into
//! [`Info`] and written from it.
//!
//! Everything handed to libfabric is allocated with libc (`calloc`,
//! `strdup`, `malloc`): libfabric frees it with `fi_freeinfo`, which calls
//! `free()` on each part.

use std::ffi::{c_char, c_int, c_void, CString};
use std::net::{Ipv4Addr, SocketAddrV4};

use super::sys::*;
use super::{c_str, guard, params};
use crate::fabric::list_devices;
use crate::info::{getinfo as answer, DomainAttr, EpAttr, FabricAttr, Info, Query, RxAttr, TxAttr};

/// The provider's `getinfo`.
pub(super) unsafe extern "C" fn getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info,
    info: *mut *mut fi_info,
) -> c_int {
    guard(|| {
        if info.is_null() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: libfabric passes NULL or a NUL-terminated string.
        let (node, service) = unsafe { (c_str(node), c_str(service)) };
        let hints_ptr = hints;
        // SAFETY: libfabric passes NULL or a valid fi_info.
        let hints = unsafe { read_info(hints) };
        let params = match params() {
            Ok(p) => p,
            Err(e) => {
                super::log(&e);
                return -(e.errno as c_int);
            }
        };
        let devices = match list_devices(&params) {
            Ok(d) => d,
            Err(e) => {
                super::log(&e);
                return -(FI_ENODATA as c_int);
            }
        };
        let query = Query {
            node,
            service,
            source: flags & FI_SOURCE != 0,
            version,
        };
        let answers = match answer(&devices, &query, hints.as_ref(), &params) {
            Ok(a) => a,
            Err(e) => {
                super::log(&crate::fabric::FiError::new(
                    e.errno().unsigned_abs(),
                    e.to_string(),
                ));
                return e.errno();
            }
        };
        // The hints' handle (a passive endpoint whose address an active
        // endpoint takes over) is handed back in every answer.
        // SAFETY: libfabric passes NULL or a valid fi_info.
        let handle = unsafe { hints_handle(hints_ptr) };
        let mut head: *mut fi_info = std::ptr::null_mut();
        for a in answers.iter().rev() {
            let i = alloc_info(a);
            if i.is_null() {
                // SAFETY: `head` is a list this function allocated.
                unsafe { free_info(head) };
                return -(FI_ENOMEM as c_int);
            }
            // SAFETY: `i` was just allocated and is exclusively ours.
            unsafe {
                (*i).next = head;
                (*i).handle = handle;
            }
            head = i;
        }
        // SAFETY: `info` is non-NULL (checked) and libfabric's out-pointer.
        unsafe { *info = head };
        0
    })
}

/// The handle of the hints, if any.
///
/// # Safety
/// `h` is NULL or a valid `fi_info`.
unsafe fn hints_handle(h: *const fi_info) -> fid_t {
    // SAFETY: the caller's contract.
    unsafe { h.as_ref() }.map_or(std::ptr::null_mut(), |h| h.handle)
}

/// The hints (or any fi_info) as an [`Info`]; `None` for NULL.
///
/// # Safety
/// `h` is NULL or a valid `fi_info` whose non-NULL pointers are valid.
pub(super) unsafe fn read_info(h: *const fi_info) -> Option<Info> {
    if h.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    let h = unsafe { &*h };
    let mut i = Info {
        caps: h.caps,
        mode: h.mode,
        addr_format: h.addr_format,
        // SAFETY: libfabric's addresses are `*_addrlen` bytes.
        src: unsafe { read_sockaddr(h.src_addr, h.src_addrlen) },
        // SAFETY: as above.
        dest: unsafe { read_sockaddr(h.dest_addr, h.dest_addrlen) },
        ..Info::default()
    };
    // SAFETY: each attribute pointer is NULL or valid (the contract).
    unsafe {
        if let Some(t) = h.tx_attr.as_ref() {
            i.tx = TxAttr {
                caps: t.caps,
                mode: t.mode,
                op_flags: t.op_flags,
                msg_order: t.msg_order,
                comp_order: t.comp_order,
                inject_size: t.inject_size,
                size: t.size,
                iov_limit: t.iov_limit,
                rma_iov_limit: t.rma_iov_limit,
            };
        }
        if let Some(r) = h.rx_attr.as_ref() {
            i.rx = RxAttr {
                caps: r.caps,
                mode: r.mode,
                op_flags: r.op_flags,
                msg_order: r.msg_order,
                comp_order: r.comp_order,
                total_buffered_recv: r.total_buffered_recv,
                size: r.size,
                iov_limit: r.iov_limit,
            };
        }
        if let Some(e) = h.ep_attr.as_ref() {
            i.ep = EpAttr {
                ep_type: e.type_,
                protocol: e.protocol,
                protocol_version: e.protocol_version,
                max_msg_size: e.max_msg_size,
                msg_prefix_size: e.msg_prefix_size,
                mem_tag_format: e.mem_tag_format,
                tx_ctx_cnt: e.tx_ctx_cnt,
                rx_ctx_cnt: e.rx_ctx_cnt,
            };
        }
        if let Some(d) = h.domain_attr.as_ref() {
            i.domain_given = true;
            i.domain = DomainAttr {
                name: c_str(d.name).map(str::to_string),
                threading: d.threading,
                control_progress: d.control_progress,
                data_progress: d.data_progress,
                resource_mgmt: d.resource_mgmt,
                av_type: d.av_type,
                mr_mode: d.mr_mode as u64,
                mr_key_size: d.mr_key_size,
                cq_data_size: d.cq_data_size,
                cq_cnt: d.cq_cnt,
                ep_cnt: d.ep_cnt,
                tx_ctx_cnt: d.tx_ctx_cnt,
                rx_ctx_cnt: d.rx_ctx_cnt,
                max_ep_tx_ctx: d.max_ep_tx_ctx,
                max_ep_rx_ctx: d.max_ep_rx_ctx,
                max_ep_stx_ctx: d.max_ep_stx_ctx,
                max_ep_srx_ctx: d.max_ep_srx_ctx,
                mr_iov_limit: d.mr_iov_limit,
                caps: d.caps,
                mode: d.mode,
                mr_cnt: d.mr_cnt,
            };
        }
        if let Some(f) = h.fabric_attr.as_ref() {
            i.fabric = FabricAttr {
                name: c_str(f.name).map(str::to_string),
                prov_name: c_str(f.prov_name).map(str::to_string),
                prov_version: f.prov_version,
                api_version: f.api_version,
            };
        }
    }
    Some(i)
}

/// An IPv4 socket address of the caller's, if that is what it is.
///
/// # Safety
/// `p` is NULL or valid for `len` bytes.
pub(super) unsafe fn read_sockaddr(p: *const c_void, len: usize) -> Option<SocketAddrV4> {
    if p.is_null() || len < std::mem::size_of::<libc::sockaddr_in>() {
        return None;
    }
    // SAFETY: `len` bytes are readable (the contract), at least a
    // sockaddr_in; read unaligned, as callers may pass any buffer.
    let sa = unsafe { std::ptr::read_unaligned(p.cast::<libc::sockaddr_in>()) };
    if i32::from(sa.sin_family) != libc::AF_INET {
        return None;
    }
    Some(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
        u16::from_be(sa.sin_port),
    ))
}

/// `a` as a `sockaddr_in` (its `sin_zero` zeroed).
pub(super) fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// A zeroed allocation of libc's, of room for a `T` twice over (a
/// libfabric newer than the headers the provider was built with may read
/// fields it appended; they read as 0).
fn calloc<T>() -> *mut T {
    // SAFETY: calloc of a non-zero size; the result is checked by callers.
    unsafe { libc::calloc(2, std::mem::size_of::<T>()).cast() }
}

/// `s` as a libc string (NULL for `None`).
fn strdup(s: Option<&str>) -> *mut c_char {
    match s.and_then(|s| CString::new(s).ok()) {
        // SAFETY: `c` is a valid NUL-terminated string.
        Some(c) => unsafe { libc::strdup(c.as_ptr()) },
        None => std::ptr::null_mut(),
    }
}

/// A malloc'd copy of `a` as a `sockaddr_in`, and its length.
fn alloc_sockaddr(a: Option<SocketAddrV4>) -> (*mut c_void, usize) {
    let Some(a) = a else {
        return (std::ptr::null_mut(), 0);
    };
    let p = calloc::<libc::sockaddr_in>();
    if p.is_null() {
        return (std::ptr::null_mut(), 0);
    }
    // SAFETY: `p` is a fresh allocation of room for a sockaddr_in.
    unsafe { p.write(sockaddr(a)) };
    (p.cast(), std::mem::size_of::<libc::sockaddr_in>())
}

/// A libfabric `fi_info` of `i`, with every part allocated by libc (NULL
/// if memory ran out; nothing leaks then).
pub(super) fn alloc_info(i: &Info) -> *mut fi_info {
    let info = calloc::<fi_info>();
    let tx = calloc::<fi_tx_attr>();
    let rx = calloc::<fi_rx_attr>();
    let ep = calloc::<fi_ep_attr>();
    let dom = calloc::<fi_domain_attr>();
    let fab = calloc::<fi_fabric_attr>();
    if info.is_null()
        || tx.is_null()
        || rx.is_null()
        || ep.is_null()
        || dom.is_null()
        || fab.is_null()
    {
        for p in [
            info.cast::<c_void>(),
            tx.cast(),
            rx.cast(),
            ep.cast(),
            dom.cast(),
            fab.cast(),
        ] {
            // SAFETY: NULL or a calloc'd block of ours, freed once.
            unsafe { libc::free(p) };
        }
        return std::ptr::null_mut();
    }
    let (src, src_len) = alloc_sockaddr(i.src);
    let (dest, dest_len) = alloc_sockaddr(i.dest);
    // SAFETY: every pointer was just allocated, zeroed, and is ours; the
    // fields written are plain data of their structs.
    unsafe {
        let t = &mut *tx;
        t.caps = i.tx.caps;
        t.mode = i.tx.mode;
        t.op_flags = i.tx.op_flags;
        t.msg_order = i.tx.msg_order;
        t.comp_order = i.tx.comp_order;
        t.inject_size = i.tx.inject_size;
        t.size = i.tx.size;
        t.iov_limit = i.tx.iov_limit;
        t.rma_iov_limit = i.tx.rma_iov_limit;
        let r = &mut *rx;
        r.caps = i.rx.caps;
        r.mode = i.rx.mode;
        r.op_flags = i.rx.op_flags;
        r.msg_order = i.rx.msg_order;
        r.comp_order = i.rx.comp_order;
        r.total_buffered_recv = i.rx.total_buffered_recv;
        r.size = i.rx.size;
        r.iov_limit = i.rx.iov_limit;
        let e = &mut *ep;
        e.type_ = i.ep.ep_type;
        e.protocol = i.ep.protocol;
        e.protocol_version = i.ep.protocol_version;
        e.max_msg_size = i.ep.max_msg_size;
        e.msg_prefix_size = i.ep.msg_prefix_size;
        e.mem_tag_format = i.ep.mem_tag_format;
        e.tx_ctx_cnt = i.ep.tx_ctx_cnt;
        e.rx_ctx_cnt = i.ep.rx_ctx_cnt;
        let d = &mut *dom;
        d.name = strdup(i.domain.name.as_deref());
        d.threading = i.domain.threading;
        d.control_progress = i.domain.control_progress;
        d.data_progress = i.domain.data_progress;
        d.resource_mgmt = i.domain.resource_mgmt;
        d.av_type = i.domain.av_type;
        d.mr_mode = i.domain.mr_mode as c_int;
        d.mr_key_size = i.domain.mr_key_size;
        d.cq_data_size = i.domain.cq_data_size;
        d.cq_cnt = i.domain.cq_cnt;
        d.ep_cnt = i.domain.ep_cnt;
        d.tx_ctx_cnt = i.domain.tx_ctx_cnt;
        d.rx_ctx_cnt = i.domain.rx_ctx_cnt;
        d.max_ep_tx_ctx = i.domain.max_ep_tx_ctx;
        d.max_ep_rx_ctx = i.domain.max_ep_rx_ctx;
        d.max_ep_stx_ctx = i.domain.max_ep_stx_ctx;
        d.max_ep_srx_ctx = i.domain.max_ep_srx_ctx;
        d.mr_iov_limit = i.domain.mr_iov_limit;
        d.caps = i.domain.caps;
        d.mode = i.domain.mode;
        d.mr_cnt = i.domain.mr_cnt;
        let f = &mut *fab;
        f.name = strdup(i.fabric.name.as_deref());
        // NULL in getinfo's answers (libfabric names the provider, and
        // layers ofi_rxm's name on it); the pep's own in a connection
        // request's info, which libfabric does not touch (ofi_rxm reads it).
        f.prov_name = strdup(i.fabric.prov_name.as_deref());
        f.prov_version = i.fabric.prov_version;
        f.api_version = i.fabric.api_version;
        let n = &mut *info;
        n.caps = i.caps;
        n.mode = i.mode;
        n.addr_format = i.addr_format;
        n.src_addr = src;
        n.src_addrlen = src_len;
        n.dest_addr = dest;
        n.dest_addrlen = dest_len;
        n.tx_attr = tx;
        n.rx_attr = rx;
        n.ep_attr = ep;
        n.domain_attr = dom;
        n.fabric_attr = fab;
    }
    info
}

/// Free a list of fi_info this module allocated (as `fi_freeinfo` would).
///
/// # Safety
/// `i` is NULL or a list from [`alloc_info`] not handed out.
pub(super) unsafe fn free_info(mut i: *mut fi_info) {
    while !i.is_null() {
        // SAFETY: the caller's contract: each part is ours, freed once.
        unsafe {
            let n = &*i;
            let next = n.next;
            if !n.domain_attr.is_null() {
                libc::free((*n.domain_attr).name.cast());
            }
            if !n.fabric_attr.is_null() {
                libc::free((*n.fabric_attr).name.cast());
            }
            for p in [
                n.src_addr,
                n.dest_addr,
                n.tx_attr.cast(),
                n.rx_attr.cast(),
                n.ep_attr.cast(),
                n.domain_attr.cast(),
                n.fabric_attr.cast(),
            ] {
                libc::free(p);
            }
            libc::free(i.cast());
            i = next;
        }
    }
}
