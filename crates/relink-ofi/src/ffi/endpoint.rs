//! Passive and active endpoints: their objects and connection
//! management (the data path is `data.rs`).

use std::ffi::{c_int, c_void};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::domain::{DomainObj, FabricObj};
use super::info::{alloc_info, read_info, read_sockaddr, sockaddr};
use super::nosys::*;
use super::queues::{CqObj, EqObj};
use super::sys::*;
use super::{fid_header, guard, obj, ret, Ops, Shared};
use crate::cm::CM_DATA_SIZE;
use crate::fabric::{FiError, Id};
use crate::info::Info;

/// `struct fid_pep`.
#[repr(C)]
pub(super) struct PepObj {
    pub fid: fid_pep,
    pub fabric: Shared,
    pub id: Id,
    /// The info it was opened with: the base of each request's info.
    info: Info,
}

/// `struct fid_ep`.
#[repr(C)]
pub(super) struct EpObj {
    pub fid: fid_ep,
    pub fabric: Shared,
    pub id: Id,
    /// The request object the endpoint was opened for, freed with it.
    connreq: Mutex<Option<*mut ConnReqObj>>,
}

/// A connection request's handle (`info->handle` of `FI_CONNREQ`).
#[repr(C)]
pub(super) struct ConnReqObj {
    pub fid: fid,
    pub id: Id,
    /// An endpoint was opened for it (and frees it at its close).
    taken: AtomicBool,
}

static PEP_FID_OPS: Ops<fi_ops> = Ops(fi_ops {
    close: Some(pep_close),
    bind: Some(pep_bind),
    ..FID_NOSYS
});
static PEP_EP_OPS: Ops<fi_ops_ep> = Ops(fi_ops_ep {
    getopt: Some(getopt),
    setopt: Some(setopt),
    ..EP_NOSYS
});
static PEP_CM_OPS: Ops<fi_ops_cm> = Ops(fi_ops_cm {
    setname: Some(setname),
    getname: Some(getname),
    listen: Some(listen),
    reject: Some(reject),
    ..CM_NOSYS
});
static EP_FID_OPS: Ops<fi_ops> = Ops(fi_ops {
    close: Some(ep_close),
    bind: Some(ep_bind),
    control: Some(ep_control),
    ..FID_NOSYS
});
static EP_OPS: Ops<fi_ops_ep> = Ops(fi_ops_ep {
    cancel: Some(cancel),
    getopt: Some(getopt),
    setopt: Some(setopt),
    ..EP_NOSYS
});
static EP_CM_OPS: Ops<fi_ops_cm> = Ops(fi_ops_cm {
    getname: Some(getname),
    getpeer: Some(getpeer),
    connect: Some(connect),
    accept: Some(accept),
    shutdown: Some(shutdown),
    ..CM_NOSYS
});
static TAGGED_OPS: Ops<fi_ops_tagged> = Ops(TAGGED_NOSYS);
static CM_NOSYS_OPS: Ops<fi_ops_cm> = Ops(CM_NOSYS);
static RMA_NOSYS_OPS: Ops<fi_ops_rma> = Ops(RMA_NOSYS);
static ATOMIC_NOSYS_OPS: Ops<fi_ops_atomic> = Ops(ATOMIC_NOSYS);
static SRX_FID_OPS: Ops<fi_ops> = Ops(fi_ops {
    close: Some(srx_close),
    ..FID_NOSYS
});
static STX_FID_OPS: Ops<fi_ops> = Ops(fi_ops {
    close: Some(stx_close),
    ..FID_NOSYS
});

fn unspecified() -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)
}

pub(super) unsafe extern "C" fn passive_ep(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    out: *mut *mut fid_pep,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: `fabric` is our FabricObj.
        let f = match unsafe { obj::<FabricObj>(fabric.cast()) } {
            Ok(f) => f,
            Err(e) => return ret(Err(e)),
        };
        // SAFETY: libfabric's valid info (or NULL).
        let Some(info) = (unsafe { read_info(info) }) else {
            return -(FI_EINVAL as c_int);
        };
        if out.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let addr = info.src.unwrap_or_else(unspecified);
        let p = Box::into_raw(Box::new(PepObj {
            fid: fid_pep {
                fid: fid_header(FI_CLASS_PEP, context, PEP_FID_OPS.ptr()),
                ops: PEP_EP_OPS.ptr(),
                cm: PEP_CM_OPS.ptr(),
            },
            fabric: f.fabric.clone(),
            id: 0,
            info,
        }));
        // SAFETY: `p` is the fresh object, published only below.
        unsafe {
            (*p).id = (*p).fabric.pep_open(p as usize, addr);
            *out = p.cast();
        }
        0
    })
}

unsafe extern "C" fn pep_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: `f` is our PepObj.
        let p = match unsafe { obj::<PepObj>(f.cast()) } {
            Ok(p) => p,
            Err(e) => return ret(Err(e)),
        };
        p.fabric.pep_close(p.id);
        // SAFETY: ours, closed once.
        drop(unsafe { Box::from_raw(f.cast::<PepObj>()) });
        0
    })
}

unsafe extern "C" fn pep_bind(f: *mut fid, b: *mut fid, _flags: u64) -> c_int {
    guard(|| {
        // SAFETY: `f` is our PepObj; `b` one of our objects (its class
        // says which).
        let r = unsafe {
            obj::<PepObj>(f.cast()).and_then(|p| match b.as_ref().map(|b| b.fclass as u32) {
                Some(FI_CLASS_EQ) => p.fabric.pep_bind_eq(p.id, (*b.cast::<EqObj>()).id),
                _ => Err(FiError::new(
                    FI_EINVAL,
                    "a passive endpoint binds an event queue only",
                )),
            })
        };
        ret(r)
    })
}

/// The info of connection request `connreq` at passive endpoint `pep`:
/// the endpoint's own, with the request's addresses and handle.
///
/// # Safety
/// `pep` is an open PepObj of ours.
pub(super) unsafe fn connreq_info(
    pep: usize,
    connreq: Id,
    local: SocketAddrV4,
    peer: SocketAddrV4,
) -> Result<*mut fi_info, FiError> {
    // SAFETY: the caller's contract.
    let p = unsafe { &*(pep as *const PepObj) };
    let mut i = p.info.clone();
    i.src = Some(local);
    i.dest = Some(peer);
    let info = alloc_info(&i);
    if info.is_null() {
        return Err(FiError::new(
            FI_ENOMEM,
            "out of memory for a request's info",
        ));
    }
    let handle = Box::into_raw(Box::new(ConnReqObj {
        fid: fid_header(FI_CLASS_CONNREQ, std::ptr::null_mut(), FID_OPS_NONE.ptr()),
        id: connreq,
        taken: AtomicBool::new(false),
    }));
    // SAFETY: `info` is ours, fresh.
    unsafe { (*info).handle = handle.cast() };
    Ok(info)
}

static FID_OPS_NONE: Ops<fi_ops> = Ops(FID_NOSYS);

/// The request a handle names.
///
/// # Safety
/// `h` is NULL or a handle of ours from [`connreq_info`].
unsafe fn connreq(h: *mut fid) -> Option<&'static ConnReqObj> {
    // SAFETY: the caller's contract.
    let r = unsafe { h.as_ref() }?;
    // SAFETY: a fid of class CONNREQ is a ConnReqObj of ours.
    (r.fclass as u32 == FI_CLASS_CONNREQ).then(|| unsafe { &*h.cast::<ConnReqObj>() })
}

pub(super) unsafe extern "C" fn endpoint(
    domain: *mut fid_domain,
    info: *mut fi_info,
    out: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: `domain` is our DomainObj.
        let d = match unsafe { obj::<DomainObj>(domain.cast()) } {
            Ok(d) => d,
            Err(e) => return ret(Err(e)),
        };
        if info.is_null() || out.is_null() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: libfabric's valid info.
        let (i, handle) = unsafe { (read_info(info), (*info).handle) };
        let i = i.unwrap_or_default();
        // SAFETY: NULL or a handle of ours.
        let req = unsafe { connreq(handle) };
        // A passive endpoint as the handle: the new endpoint takes its
        // address (as fabtests' msg_sockets does).
        // SAFETY: a fid of class PEP is one of our PepObj.
        let pep_addr = unsafe {
            handle
                .as_ref()
                .filter(|h| h.fclass as u32 == FI_CLASS_PEP)
                .and_then(|_| {
                    let p = &*handle.cast::<PepObj>();
                    p.fabric.pep_getname(p.id).ok()
                })
        };
        let p = Box::into_raw(Box::new(EpObj {
            fid: fid_ep {
                fid: fid_header(FI_CLASS_EP, context, EP_FID_OPS.ptr()),
                ops: EP_OPS.ptr(),
                cm: EP_CM_OPS.ptr(),
                msg: super::data::MSG_OPS.ptr(),
                rma: super::data::RMA_OPS.ptr(),
                tagged: TAGGED_OPS.ptr(),
                atomic: super::atomic::ATOMIC_OPS.ptr(),
                // No collectives (FI_COLLECTIVE is not offered).
                collective: std::ptr::null_mut(),
            },
            fabric: d.fabric.clone(),
            id: 0,
            connreq: Mutex::new(None),
        }));
        // SAFETY: `p` is the fresh object, published only on success.
        let opened = unsafe {
            (*p).fabric.ep_open(
                p as usize,
                pep_addr.or(i.src).unwrap_or_else(unspecified),
                i.dest,
                req.map(|r| r.id),
                i.tx.op_flags,
                // FI_MR_BASIC: virtual addresses (and provider keys)
                i.domain.mr_mode & (FI_MR_VIRT_ADDR | FI_MR_BASIC as u64) != 0,
            )
        };
        match opened {
            Ok(id) => {
                // SAFETY: as above.
                unsafe {
                    (*p).id = id;
                    if let Some(r) = req {
                        if !r.taken.swap(true, Ordering::AcqRel) {
                            *(*p).connreq.lock().unwrap_or_else(|e| e.into_inner()) =
                                Some(handle.cast());
                        }
                    }
                    *out = p.cast();
                }
                0
            }
            Err(e) => {
                // SAFETY: never published.
                drop(unsafe { Box::from_raw(p) });
                ret(Err(e))
            }
        }
    })
}

/// `fi_srx_context`: a shared receive context, an [`EpObj`] of class
/// `FI_CLASS_SRX_CTX` whose receive calls post to the shared queue.
pub(super) unsafe extern "C" fn srx_context(
    domain: *mut fid_domain,
    _attr: *mut fi_rx_attr,
    out: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: `domain` is our DomainObj.
        let d = match unsafe { obj::<DomainObj>(domain.cast()) } {
            Ok(d) => d,
            Err(e) => return ret(Err(e)),
        };
        if out.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let id = d.fabric.srx_open();
        let p = Box::into_raw(Box::new(EpObj {
            fid: fid_ep {
                fid: fid_header(FI_CLASS_SRX_CTX, context, SRX_FID_OPS.ptr()),
                ops: EP_OPS.ptr(),
                cm: CM_NOSYS_OPS.ptr(),
                msg: super::data::MSG_OPS.ptr(),
                rma: RMA_NOSYS_OPS.ptr(),
                tagged: TAGGED_OPS.ptr(),
                atomic: ATOMIC_NOSYS_OPS.ptr(),
                collective: std::ptr::null_mut(),
            },
            fabric: d.fabric.clone(),
            id,
            connreq: Mutex::new(None),
        }));
        // SAFETY: libfabric's out pointer.
        unsafe { *out = p.cast() };
        0
    })
}

unsafe extern "C" fn srx_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: `f` is our EpObj of class SRX_CTX.
        let e = match unsafe { obj::<EpObj>(f.cast()) } {
            Ok(e) => e,
            Err(err) => return ret(Err(err)),
        };
        e.fabric.srx_close(e.id);
        // SAFETY: ours, closed once.
        drop(unsafe { Box::from_raw(f.cast::<EpObj>()) });
        0
    })
}

/// `fi_stx_context`: a shared transmit context. Each endpoint transmits
/// on its own relink session, so it holds nothing: binding one is
/// accepted and changes nothing.
pub(super) unsafe extern "C" fn stx_context(
    _domain: *mut fid_domain,
    _attr: *mut fi_tx_attr,
    out: *mut *mut fid_stx,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let p = Box::into_raw(Box::new(fid_stx {
            fid: fid_header(FI_CLASS_STX_CTX, context, STX_FID_OPS.ptr()),
            ops: EP_OPS.ptr(),
        }));
        // SAFETY: libfabric's out pointer.
        unsafe { *out = p };
        0
    })
}

unsafe extern "C" fn stx_close(f: *mut fid) -> c_int {
    guard(|| {
        if f.is_null() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: `f` is a fid_stx of ours, closed once.
        drop(unsafe { Box::from_raw(f.cast::<fid_stx>()) });
        0
    })
}

unsafe extern "C" fn ep_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: `f` is our EpObj.
        let e = match unsafe { obj::<EpObj>(f.cast()) } {
            Ok(e) => e,
            Err(err) => return ret(Err(err)),
        };
        e.fabric.ep_close(e.id);
        if let Some(h) = e.connreq.lock().unwrap_or_else(|e| e.into_inner()).take() {
            // SAFETY: the endpoint owns the request object (taken once).
            drop(unsafe { Box::from_raw(h) });
        }
        // SAFETY: ours, closed once.
        drop(unsafe { Box::from_raw(f.cast::<EpObj>()) });
        0
    })
}

unsafe extern "C" fn ep_bind(f: *mut fid, b: *mut fid, flags: u64) -> c_int {
    guard(|| {
        // SAFETY: `f` is our EpObj; `b` one of our objects (class says).
        let r = unsafe {
            obj::<EpObj>(f.cast()).and_then(|e| match b.as_ref().map(|b| b.fclass as u32) {
                Some(FI_CLASS_EQ) => e.fabric.ep_bind_eq(e.id, (*b.cast::<EqObj>()).id),
                Some(FI_CLASS_CQ) => e.fabric.ep_bind_cq(e.id, (*b.cast::<CqObj>()).id, flags),
                // A shared receive context is an EpObj of class SRX_CTX.
                Some(FI_CLASS_SRX_CTX) => e.fabric.ep_bind_srx(e.id, (*b.cast::<EpObj>()).id),
                // Each endpoint transmits on its own session: a shared
                // transmit context changes nothing.
                Some(FI_CLASS_STX_CTX) => Ok(()),
                _ => Err(FiError::new(
                    FI_ENOSYS,
                    "an endpoint binds event and completion queues and shared contexts only",
                )),
            })
        };
        ret(r)
    })
}

unsafe extern "C" fn ep_control(f: *mut fid, command: c_int, _arg: *mut c_void) -> c_int {
    guard(|| {
        // SAFETY: `f` is our EpObj.
        let e = match unsafe { obj::<EpObj>(f.cast()) } {
            Ok(e) => e,
            Err(err) => return ret(Err(err)),
        };
        match command as u32 {
            FI_ENABLE => ret(e.fabric.ep_enable(e.id)),
            _ => -(FI_ENOSYS as c_int),
        }
    })
}

unsafe extern "C" fn cancel(_f: fid_t, _context: *mut c_void) -> isize {
    -(FI_ENOENT as isize)
}

unsafe extern "C" fn getopt(
    _f: fid_t,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut usize,
) -> c_int {
    guard(|| {
        if level as u32 != FI_OPT_ENDPOINT || name as u32 != FI_OPT_CM_DATA_SIZE {
            return -(FI_ENOPROTOOPT as c_int);
        }
        if val.is_null() || len.is_null() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: libfabric's out-pointers: a size_t and its length.
        unsafe {
            if *len < std::mem::size_of::<usize>() {
                return -(FI_ETOOSMALL as c_int);
            }
            *val.cast::<usize>() = CM_DATA_SIZE;
            *len = std::mem::size_of::<usize>();
        }
        0
    })
}

unsafe extern "C" fn setopt(
    _f: fid_t,
    _level: c_int,
    _name: c_int,
    _val: *const c_void,
    _len: usize,
) -> c_int {
    -(FI_ENOPROTOOPT as c_int)
}

/// Write `a` into the caller's address buffer.
///
/// # Safety
/// `addr` is valid for `*len` bytes; `len` is valid.
unsafe fn put_name(a: SocketAddrV4, addr: *mut c_void, len: *mut usize) -> c_int {
    let need = std::mem::size_of::<libc::sockaddr_in>();
    if len.is_null() {
        return -(FI_EINVAL as c_int);
    }
    // SAFETY: the caller's contract.
    unsafe {
        let have = *len;
        *len = need;
        if addr.is_null() || have < need {
            return -(FI_ETOOSMALL as c_int);
        }
        addr.cast::<libc::sockaddr_in>()
            .write_unaligned(sockaddr(a));
    }
    0
}

unsafe extern "C" fn getname(f: fid_t, addr: *mut c_void, len: *mut usize) -> c_int {
    guard(|| {
        // SAFETY: `f` is our endpoint or passive endpoint (class says).
        let a = unsafe {
            match f.as_ref().map(|f| f.fclass as u32) {
                Some(FI_CLASS_PEP) => {
                    let p = &*f.cast::<PepObj>();
                    p.fabric.pep_getname(p.id)
                }
                Some(FI_CLASS_EP) => {
                    let e = &*f.cast::<EpObj>();
                    e.fabric.ep_getname(e.id)
                }
                _ => Err(FiError::new(
                    FI_EINVAL,
                    "fi_getname of an object with no name",
                )),
            }
        };
        match a {
            // SAFETY: libfabric's address buffer and its length.
            Ok(a) => unsafe { put_name(a, addr, len) },
            Err(e) => ret(Err(e)),
        }
    })
}

unsafe extern "C" fn setname(f: fid_t, addr: *mut c_void, len: usize) -> c_int {
    guard(|| {
        // SAFETY: `f` is our passive endpoint; `addr` holds `len` bytes.
        let r = unsafe {
            match (
                f.as_ref().map(|f| f.fclass as u32),
                read_sockaddr(addr, len),
            ) {
                (Some(FI_CLASS_PEP), Some(a)) => {
                    let p = &*f.cast::<PepObj>();
                    p.fabric.pep_setname(p.id, a)
                }
                (Some(FI_CLASS_PEP), None) => Err(FiError::new(FI_EINVAL, "not a sockaddr_in")),
                _ => Err(FiError::new(FI_ENOSYS, "fi_setname of an active endpoint")),
            }
        };
        ret(r)
    })
}

unsafe extern "C" fn getpeer(ep: *mut fid_ep, addr: *mut c_void, len: *mut usize) -> c_int {
    guard(|| {
        // SAFETY: `ep` is our EpObj.
        match unsafe { obj::<EpObj>(ep.cast()) }.and_then(|e| e.fabric.ep_getpeer(e.id)) {
            // SAFETY: libfabric's buffer and length.
            Ok(a) => unsafe { put_name(a, addr, len) },
            Err(e) => ret(Err(e)),
        }
    })
}

unsafe extern "C" fn listen(pep: *mut fid_pep) -> c_int {
    // SAFETY: `pep` is our PepObj.
    guard(|| ret(unsafe { obj::<PepObj>(pep.cast()) }.and_then(|p| p.fabric.listen(p.id))))
}

/// The caller's CM data.
///
/// # Safety
/// `param` is NULL or valid for `len` bytes.
unsafe fn cm_data<'a>(param: *const c_void, len: usize) -> Result<&'a [u8], FiError> {
    if len > CM_DATA_SIZE {
        return Err(FiError::new(
            FI_EINVAL,
            format!("CM data of {len} bytes is over FI_OPT_CM_DATA_SIZE ({CM_DATA_SIZE})"),
        ));
    }
    if param.is_null() || len == 0 {
        return Ok(&[]);
    }
    // SAFETY: the caller's contract; len <= CM_DATA_SIZE.
    Ok(unsafe { std::slice::from_raw_parts(param.cast::<u8>(), len) })
}

unsafe extern "C" fn reject(
    pep: *mut fid_pep,
    handle: fid_t,
    param: *const c_void,
    len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: `pep` is ours, `handle` NULL or a request handle of
        // ours, `param` the caller's `len` bytes.
        let r = unsafe {
            obj::<PepObj>(pep.cast()).and_then(|p| {
                let req = connreq(handle)
                    .ok_or_else(|| FiError::new(FI_EINVAL, "fi_reject: not a request handle"))?;
                // CM data too long: refused, the handle stays the caller's
                // to answer again.
                let data = cm_data(param, len)?;
                let r = p.fabric.reject(req.id, data);
                if req.taken.swap(true, Ordering::AcqRel) {
                    // An endpoint holds the handle (it frees it at its
                    // close).
                    return r;
                }
                // The request is over: refused now, or gone already (its
                // requester ended first, which is no error: nothing is
                // left to refuse). Its handle is freed either way.
                drop(Box::from_raw(handle.cast::<ConnReqObj>()));
                Ok(())
            })
        };
        ret(r)
    })
}

unsafe extern "C" fn connect(
    ep: *mut fid_ep,
    addr: *const c_void,
    param: *const c_void,
    len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: `ep` is ours; `addr` a sockaddr of the caller's;
        // `param` its `len` bytes.
        let r = unsafe {
            obj::<EpObj>(ep.cast()).and_then(|e| {
                let dest = read_sockaddr(addr, std::mem::size_of::<libc::sockaddr_in>())
                    .ok_or_else(|| FiError::new(FI_EINVAL, "fi_connect: not a sockaddr_in"))?;
                e.fabric.connect(e.id, dest, cm_data(param, len)?)
            })
        };
        ret(r)
    })
}

unsafe extern "C" fn accept(ep: *mut fid_ep, param: *const c_void, len: usize) -> c_int {
    guard(|| {
        // SAFETY: `ep` is ours; `param` the caller's `len` bytes.
        let r = unsafe {
            obj::<EpObj>(ep.cast()).and_then(|e| e.fabric.accept(e.id, cm_data(param, len)?))
        };
        ret(r)
    })
}

unsafe extern "C" fn shutdown(ep: *mut fid_ep, _flags: u64) -> c_int {
    // SAFETY: `ep` is our EpObj.
    guard(|| ret(unsafe { obj::<EpObj>(ep.cast()) }.and_then(|e| e.fabric.shutdown(e.id))))
}
