//! The fabric, domain and memory registration objects.

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::Arc;

use super::memory::CallerMemory;
use super::nosys::*;
use super::sys::*;
use super::{fid_header, guard, obj, params, ret, Ops, Shared};
use crate::fabric::{Fabric, FiError};
use crate::info::FABRIC_NAME;

/// `struct fid_fabric` and its fabric.
#[repr(C)]
pub(super) struct FabricObj {
    pub fid: fid_fabric,
    pub fabric: Shared,
}

/// `struct fid_domain`: one device of the fabric's node.
#[repr(C)]
pub(super) struct DomainObj {
    pub fid: fid_domain,
    pub fabric: Shared,
}

/// `struct fid_mr`: a registration of the node.
#[repr(C)]
pub(super) struct MrObj {
    pub fid: fid_mr,
    pub fabric: Shared,
    pub id: crate::fabric::Id,
    /// Where the buffer starts and its length.
    base: u64,
    len: usize,
    backing: Backing,
}

/// Who reads and writes a registration's buffer until it is given back.
enum Backing {
    /// The soft fabric, through the handle.
    Caller(Arc<CallerMemory>),
    /// rdma-core, which adopted the buffer.
    #[cfg(feature = "verbs")]
    Verbs(Arc<relink_verbs::VerbsProvider>, relink::Memory),
}

impl Backing {
    /// Give the buffer back: nothing touches it once this returned `Ok`.
    fn release(&self) -> Result<(), FiError> {
        match self {
            Backing::Caller(m) => {
                m.release();
                Ok(())
            }
            #[cfg(feature = "verbs")]
            Backing::Verbs(p, m) => p.release_memory(m).map(|_| ()).map_err(|e| {
                FiError::new(
                    FI_EBUSY,
                    format!("the device did not let go of the memory: {e}"),
                )
            }),
        }
    }
}

static FABRIC_FID_OPS: Ops<fi_ops> = Ops(fi_ops {
    close: Some(fabric_close),
    ..FID_NOSYS
});
static FABRIC_OPS: Ops<fi_ops_fabric> = Ops(fi_ops_fabric {
    domain: Some(domain_open),
    passive_ep: Some(super::endpoint::passive_ep),
    eq_open: Some(super::queues::eq_open),
    trywait: Some(super::queues::trywait),
    ..FABRIC_NOSYS
});
static DOMAIN_FID_OPS: Ops<fi_ops> = Ops(fi_ops {
    close: Some(domain_close),
    ..FID_NOSYS
});
static DOMAIN_OPS: Ops<fi_ops_domain> = Ops(fi_ops_domain {
    cq_open: Some(super::queues::cq_open),
    endpoint: Some(super::endpoint::endpoint),
    srx_ctx: Some(super::endpoint::srx_context),
    stx_ctx: Some(super::endpoint::stx_context),
    ..DOMAIN_NOSYS
});
static MR_OPS: Ops<fi_ops_mr> = Ops(fi_ops_mr {
    reg: Some(mr_reg),
    regv: Some(mr_regv),
    regattr: Some(mr_regattr),
    ..MR_NOSYS
});
static MR_FID_OPS: Ops<fi_ops> = Ops(fi_ops {
    close: Some(mr_close),
    ..FID_NOSYS
});

/// The provider's `fabric`: a node on the backend of the parameters.
pub(super) unsafe extern "C" fn fabric(
    attr: *mut fi_fabric_attr,
    out: *mut *mut fid_fabric,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: libfabric passes NULL or a valid attribute structure.
        if let Some(a) = unsafe { attr.as_ref() } {
            // SAFETY: NULL or a NUL-terminated string of libfabric's.
            if let Some(name) = unsafe { super::c_str(a.name) } {
                if name != FABRIC_NAME {
                    return -(FI_ENODATA as c_int);
                }
            }
        }
        let fabric = match params().and_then(Fabric::open) {
            Ok(f) => f,
            Err(e) => return ret(Err(e)),
        };
        let obj = Box::new(FabricObj {
            fid: fid_fabric {
                fid: fid_header(FI_CLASS_FABRIC, context, FABRIC_FID_OPS.ptr()),
                ops: FABRIC_OPS.ptr(),
                api_version: crate::info::API_VERSION,
            },
            fabric,
        });
        // SAFETY: `out` is libfabric's non-NULL out-pointer.
        unsafe { *out = Box::into_raw(obj).cast() };
        0
    })
}

unsafe extern "C" fn fabric_close(f: *mut fid) -> c_int {
    guard(|| {
        if f.is_null() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: `f` is a FabricObj of ours (`fabric`), closed once:
        // libfabric's fi_close is the last use of it.
        drop(unsafe { Box::from_raw(f.cast::<FabricObj>()) });
        0
    })
}

unsafe extern "C" fn domain_open(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    out: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: `fabric` is our FabricObj (libfabric calls through it).
        let f = match unsafe { obj::<FabricObj>(fabric.cast()) } {
            Ok(f) => f,
            Err(e) => return ret(Err(e)),
        };
        if out.is_null() || info.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let obj = Box::new(DomainObj {
            fid: fid_domain {
                fid: fid_header(FI_CLASS_DOMAIN, context, DOMAIN_FID_OPS.ptr()),
                ops: DOMAIN_OPS.ptr(),
                mr: MR_OPS.ptr(),
            },
            fabric: f.fabric.clone(),
        });
        // SAFETY: `out` is libfabric's non-NULL out-pointer.
        unsafe { *out = Box::into_raw(obj).cast() };
        0
    })
}

unsafe extern "C" fn domain_close(d: *mut fid) -> c_int {
    guard(|| {
        if d.is_null() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: `d` is a DomainObj of ours, closed once.
        drop(unsafe { Box::from_raw(d.cast::<DomainObj>()) });
        0
    })
}

/// libfabric's access bits as relink's. libfabric has no bit of its own
/// for atomics: a peer's atomic needs `FI_REMOTE_WRITE` (and
/// `FI_REMOTE_READ` for the value it fetches), so remote write access
/// takes atomics too.
fn access(a: u64) -> relink::Access {
    let mut out = relink::Access::LOCAL_WRITE;
    if a & FI_REMOTE_READ != 0 {
        out |= relink::Access::REMOTE_READ;
    }
    if a & FI_REMOTE_WRITE != 0 {
        out |= relink::Access::REMOTE_WRITE | relink::Access::REMOTE_ATOMIC;
    }
    out
}

/// Register `len` bytes at `buf`.
///
/// # Safety
/// `domain` is our DomainObj; `[buf, buf + len)` is the application's
/// memory, valid until the MR is closed (libfabric's contract).
unsafe fn register(
    domain: *mut fid,
    buf: *const c_void,
    len: usize,
    acc: u64,
    out: *mut *mut fid_mr,
    context: *mut c_void,
) -> Result<(), FiError> {
    // SAFETY: the caller's contract.
    let d = unsafe { obj::<DomainObj>(domain.cast()) }?;
    if out.is_null() {
        return Err(FiError::new(FI_EINVAL, "fi_mr_reg: NULL out-pointer"));
    }
    let base = NonNull::new(buf.cast_mut().cast::<u8>())
        .ok_or_else(|| FiError::new(FI_EINVAL, "fi_mr_reg: a NULL buffer"))?;
    if len == 0 || len > isize::MAX as usize {
        return Err(FiError::new(
            FI_EINVAL,
            "fi_mr_reg: a length of 0 or over isize::MAX",
        ));
    }
    let (memory, backing) = match d.fabric.verbs() {
        None => {
            // SAFETY: the caller's contract is CallerMemory::new's
            // (released at the MR's close).
            let m = Arc::new(unsafe { CallerMemory::new(base, len) });
            (relink::Memory::new(m.clone()), Backing::Caller(m))
        }
        #[cfg(feature = "verbs")]
        Some(p) => {
            // SAFETY: the caller's contract is adopt_foreign's: the buffer
            // stays valid until release_memory of it returned Ok (the MR's
            // close), or the provider is dropped with the fabric.
            let m = unsafe { p.adopt_foreign(base, len) };
            (m.clone(), Backing::Verbs(p.clone(), m))
        }
        #[cfg(not(feature = "verbs"))]
        Some(_) => {
            return Err(FiError::new(
                FI_ENOSYS,
                "fi_mr_reg: this provider was built without its `verbs` feature",
            ))
        }
    };
    let registered = d.fabric.mr_reg(memory, access(acc));
    let (id, key) = match registered {
        Ok(r) => r,
        Err(e) => {
            let _ = backing.release();
            return Err(e);
        }
    };
    let obj = Box::new(MrObj {
        fid: fid_mr {
            fid: fid_header(FI_CLASS_MR, context, MR_FID_OPS.ptr()),
            mem_desc: std::ptr::null_mut(),
            key,
        },
        fabric: d.fabric.clone(),
        id,
        base: base.as_ptr() as u64,
        len,
        backing,
    });
    let p = Box::into_raw(obj);
    // SAFETY: `p` is the fresh object; its descriptor is itself, which
    // the data path recognises (`desc`).
    unsafe {
        (*p).fid.mem_desc = p.cast();
        *out = p.cast();
    }
    Ok(())
}

unsafe extern "C" fn mr_reg(
    domain: *mut fid,
    buf: *const c_void,
    len: usize,
    acc: u64,
    _offset: u64,
    _requested_key: u64,
    _flags: u64,
    out: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: libfabric's contract for fi_mr_reg is `register`'s.
    guard(|| ret(unsafe { register(domain, buf, len, acc, out, context) }))
}

unsafe extern "C" fn mr_regv(
    domain: *mut fid,
    iov: *const iovec,
    count: usize,
    acc: u64,
    _offset: u64,
    _requested_key: u64,
    _flags: u64,
    out: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        if count != 1 || iov.is_null() {
            return ret(Err(FiError::new(
                FI_EINVAL,
                "fi_mr_regv: one range per registration (mr_iov_limit 1)",
            )));
        }
        // SAFETY: `iov` holds `count` (1) iovecs (libfabric's contract).
        let v = unsafe { &*iov };
        // SAFETY: as `mr_reg`.
        ret(unsafe { register(domain, v.iov_base, v.iov_len, acc, out, context) })
    })
}

unsafe extern "C" fn mr_regattr(
    domain: *mut fid,
    attr: *const fi_mr_attr,
    _flags: u64,
    out: *mut *mut fid_mr,
) -> c_int {
    guard(|| {
        // SAFETY: libfabric passes NULL or a valid attribute structure.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return -(FI_EINVAL as c_int);
        };
        if a.iov_count != 1 || a.mr_iov.is_null() {
            return ret(Err(FiError::new(
                FI_EINVAL,
                "fi_mr_regattr: one range per registration (mr_iov_limit 1)",
            )));
        }
        // SAFETY: `mr_iov` holds `iov_count` (1) iovecs.
        let v = unsafe { &*a.mr_iov };
        // SAFETY: as `mr_reg`.
        ret(unsafe { register(domain, v.iov_base, v.iov_len, a.access, out, a.context) })
    })
}

unsafe extern "C" fn mr_close(m: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: `m` is an MrObj of ours.
        let mr = match unsafe { obj::<MrObj>(m.cast()) } {
            Ok(mr) => mr,
            Err(e) => return ret(Err(e)),
        };
        if let Err(e) = mr.fabric.mr_close(mr.id) {
            return ret(Err(e));
        }
        if let Err(e) = mr.backing.release() {
            return ret(Err(e));
        }
        // SAFETY: `m` is an MrObj of ours, closed once (deregistered now).
        drop(unsafe { Box::from_raw(m.cast::<MrObj>()) });
        0
    })
}

/// The registration and offset a descriptor names for `buf`: `None` when
/// there is no descriptor.
///
/// # Safety
/// `desc` is NULL or the `mem_desc` of one of our open MRs.
pub(super) unsafe fn desc(
    desc: *mut c_void,
    buf: *const c_void,
    len: usize,
) -> Result<Option<(crate::fabric::Id, u64)>, FiError> {
    if desc.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract: `desc` is an MrObj.
    let mr = unsafe { &*desc.cast::<MrObj>() };
    let (base, size) = (mr.base, mr.len as u64);
    let at = (buf as u64).wrapping_sub(base);
    if (buf as u64) < base || at.checked_add(len as u64).is_none_or(|end| end > size) {
        return Err(FiError::new(
            FI_EINVAL,
            "a buffer outside the memory registration its descriptor names",
        ));
    }
    Ok(Some((mr.id, at)))
}
