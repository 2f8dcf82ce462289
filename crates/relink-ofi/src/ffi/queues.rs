//! Event queues and completion queues: their objects, and reads written
//! into libfabric's entry formats.

use std::ffi::{c_char, c_int, c_void, CString};
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::domain::{DomainObj, FabricObj};
use super::nosys::*;
use super::sys::*;
use super::{fid_header, guard, obj, ret, sguard, Ops, Shared};
use crate::fabric::{FiError, Id};
use crate::queues::{CqEntry, EqEvent};

/// `struct fid_eq`.
#[repr(C)]
pub(super) struct EqObj {
    pub fid: fid_eq,
    pub fabric: Shared,
    pub id: Id,
    /// The last error's CM data and words (valid until the next readerr).
    err_data: Mutex<Vec<u8>>,
    message: Mutex<CString>,
}

/// `struct fid_cq`.
#[repr(C)]
pub(super) struct CqObj {
    pub fid: fid_cq,
    pub fabric: Shared,
    pub id: Id,
    format: fi_cq_format,
    message: Mutex<CString>,
}

static EQ_FID_OPS: Ops<fi_ops> = Ops(fi_ops {
    close: Some(eq_close),
    control: Some(control),
    ..FID_NOSYS
});
static EQ_OPS: Ops<fi_ops_eq> = Ops(fi_ops_eq {
    read: Some(eq_read),
    readerr: Some(eq_readerr),
    sread: Some(eq_sread),
    strerror: Some(eq_strerror),
    ..EQ_NOSYS
});
static CQ_FID_OPS: Ops<fi_ops> = Ops(fi_ops {
    close: Some(cq_close),
    control: Some(control),
    ..FID_NOSYS
});
static CQ_OPS: Ops<fi_ops_cq> = Ops(fi_ops_cq {
    read: Some(cq_read),
    readfrom: Some(cq_readfrom),
    readerr: Some(cq_readerr),
    sread: Some(cq_sread),
    sreadfrom: Some(cq_sreadfrom),
    strerror: Some(cq_strerror),
    ..CQ_NOSYS
});

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The wait objects offered: none, or the node's fd.
fn wait_ok(w: fi_wait_obj) -> bool {
    matches!(w, FI_WAIT_NONE | FI_WAIT_UNSPEC | FI_WAIT_FD)
}

pub(super) unsafe extern "C" fn eq_open(
    fabric: *mut fid_fabric,
    attr: *mut fi_eq_attr,
    out: *mut *mut fid_eq,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: `fabric` is our FabricObj.
        let f = match unsafe { obj::<FabricObj>(fabric.cast()) } {
            Ok(f) => f,
            Err(e) => return ret(Err(e)),
        };
        // SAFETY: NULL or libfabric's valid attributes.
        if let Some(a) = unsafe { attr.as_ref() } {
            if !wait_ok(a.wait_obj) {
                return -(FI_ENOSYS as c_int);
            }
        }
        if out.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let id = f.fabric.eq_open();
        let o = Box::new(EqObj {
            fid: fid_eq {
                fid: fid_header(FI_CLASS_EQ, context, EQ_FID_OPS.ptr()),
                ops: EQ_OPS.ptr(),
            },
            fabric: f.fabric.clone(),
            id,
            err_data: Mutex::new(Vec::new()),
            message: Mutex::new(CString::default()),
        });
        // SAFETY: libfabric's non-NULL out-pointer.
        unsafe { *out = Box::into_raw(o).cast() };
        0
    })
}

unsafe extern "C" fn eq_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: `f` is our EqObj.
        let q = match unsafe { obj::<EqObj>(f.cast()) } {
            Ok(q) => q,
            Err(e) => return ret(Err(e)),
        };
        if let Err(e) = q.fabric.eq_close(q.id) {
            return ret(Err(e));
        }
        // SAFETY: ours, closed once.
        drop(unsafe { Box::from_raw(f.cast::<EqObj>()) });
        0
    })
}

/// `fi_control` of a queue: its wait fd.
unsafe extern "C" fn control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(|| {
        if f.is_null() || arg.is_null() {
            return -(FI_EINVAL as c_int);
        }
        // SAFETY: `f` is one of our queue objects; both start with a fid
        // followed (after their ops pointer) by the fabric.
        let fabric = unsafe {
            match (*f).fclass as u32 {
                FI_CLASS_EQ => &(*f.cast::<EqObj>()).fabric,
                FI_CLASS_CQ => &(*f.cast::<CqObj>()).fabric,
                _ => return -(FI_EINVAL as c_int),
            }
        };
        match command as u32 {
            FI_GETWAIT => match fabric.wait_fd() {
                // SAFETY: FI_GETWAIT's argument is an int for an fd object.
                Some(fd) => unsafe {
                    *arg.cast::<c_int>() = fd.as_raw_fd();
                    0
                },
                None => -(FI_ENODATA as c_int),
            },
            FI_GETWAITOBJ => {
                // SAFETY: FI_GETWAITOBJ's argument is an enum fi_wait_obj.
                unsafe { *arg.cast::<fi_wait_obj>() = FI_WAIT_FD };
                0
            }
            _ => -(FI_ENOSYS as c_int),
        }
    })
}

/// The entry of `e` written into `buf` (`len` bytes): its event kind and
/// the bytes written.
///
/// # Safety
/// `buf` is valid for `len` bytes.
unsafe fn write_event(e: &EqEvent, buf: *mut c_void, len: usize) -> Result<(u32, usize), FiError> {
    let head = std::mem::size_of::<fi_eq_cm_entry>();
    if buf.is_null() || len < head {
        return Err(FiError::new(
            FI_ETOOSMALL,
            format!("fi_eq_read: a buffer of {len} bytes holds no CM entry ({head})"),
        ));
    }
    let (kind, fid, info, data): (u32, usize, *mut fi_info, &[u8]) = match e {
        EqEvent::ConnReq {
            fid,
            connreq,
            local,
            peer,
            data,
        } => (
            FI_CONNREQ,
            *fid,
            // SAFETY: the passive endpoint is open (closing it forgets its
            // events).
            unsafe { super::endpoint::connreq_info(*fid, *connreq, *local, *peer) }?,
            data,
        ),
        EqEvent::Connected { fid, data } => (FI_CONNECTED, *fid, std::ptr::null_mut(), data),
        EqEvent::Shutdown { fid } => (FI_SHUTDOWN, *fid, std::ptr::null_mut(), &[][..]),
    };
    let n = data.len().min(len - head);
    // SAFETY: `buf` holds `len` >= head + n bytes; written unaligned.
    unsafe {
        let entry = buf.cast::<fi_eq_cm_entry>();
        std::ptr::addr_of_mut!((*entry).fid).write_unaligned(fid as *mut fid);
        std::ptr::addr_of_mut!((*entry).info).write_unaligned(info);
        std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>().add(head), n);
    }
    Ok((kind, head + n))
}

fn eq_read_inner(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
    timeout: Option<Duration>,
) -> isize {
    // SAFETY: `eq` is our EqObj.
    let q = match unsafe { obj::<EqObj>(eq.cast()) } {
        Ok(q) => q,
        Err(e) => return super::sret(Err(e)),
    };
    let start = Instant::now();
    loop {
        match q.fabric.eq_read(q.id, flags & FI_PEEK != 0) {
            Ok(Some(e)) => {
                // SAFETY: libfabric's buffer of `len` bytes.
                return match unsafe { write_event(&e, buf, len) } {
                    Ok((kind, n)) => {
                        if !event.is_null() {
                            // SAFETY: libfabric's out-pointer.
                            unsafe { *event = kind };
                        }
                        n as isize
                    }
                    Err(e) => super::sret(Err(e)),
                };
            }
            Ok(None) => {}
            Err(e) => return -(e.errno as isize),
        }
        let left = match timeout {
            None => return -(FI_EAGAIN as isize),
            Some(t) => match t.checked_sub(start.elapsed()) {
                Some(l) if !l.is_zero() => l,
                _ => return -(FI_EAGAIN as isize),
            },
        };
        q.fabric.sleep(Some(left));
    }
}

/// A libfabric timeout in ms (negative: forever) as a duration.
fn timeout(ms: c_int) -> Duration {
    if ms < 0 {
        Duration::from_secs(u64::MAX / 4)
    } else {
        Duration::from_millis(ms as u64)
    }
}

unsafe extern "C" fn eq_read(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
) -> isize {
    sguard(|| eq_read_inner(eq, event, buf, len, flags, None))
}

unsafe extern "C" fn eq_sread(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    ms: c_int,
    flags: u64,
) -> isize {
    sguard(|| eq_read_inner(eq, event, buf, len, flags, Some(timeout(ms))))
}

unsafe extern "C" fn eq_readerr(eq: *mut fid_eq, buf: *mut fi_eq_err_entry, _flags: u64) -> isize {
    sguard(|| {
        // SAFETY: `eq` is our EqObj.
        let q = match unsafe { obj::<EqObj>(eq.cast()) } {
            Ok(q) => q,
            Err(e) => return super::sret(Err(e)),
        };
        if buf.is_null() {
            return -(FI_EINVAL as isize);
        }
        let Some(e) = q.fabric.eq_readerr(q.id) else {
            return -(FI_EAGAIN as isize);
        };
        *lock(&q.message) = CString::new(e.message.replace('\0', " ")).unwrap_or_default();
        let mut data = lock(&q.err_data);
        *data = e.data;
        let fidp = e.fid as *mut fid;
        // SAFETY: the endpoint is open (closing it forgets its events);
        // `buf` is libfabric's entry, whose err_data the caller may have
        // set to a buffer of err_data_size bytes.
        unsafe {
            let out = &mut *buf;
            let user = (!out.err_data.is_null() && out.err_data_size > 0)
                .then_some((out.err_data, out.err_data_size));
            out.fid = fidp;
            out.context = if fidp.is_null() {
                std::ptr::null_mut()
            } else {
                (*fidp).context
            };
            out.data = 0;
            out.err = e.err as c_int;
            out.prov_errno = e.err as c_int;
            match user {
                Some((p, size)) => {
                    let n = data.len().min(size);
                    std::ptr::copy_nonoverlapping(data.as_ptr(), p.cast::<u8>(), n);
                    out.err_data_size = n;
                }
                None => {
                    out.err_data = if data.is_empty() {
                        std::ptr::null_mut()
                    } else {
                        data.as_mut_ptr().cast()
                    };
                    out.err_data_size = data.len();
                }
            }
        }
        std::mem::size_of::<fi_eq_err_entry>() as isize
    })
}

/// Copy `msg` into the caller's `buf` if it gave one; the string to
/// return.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes.
unsafe fn strerror_into(msg: &CString, buf: *mut c_char, len: usize) -> *const c_char {
    if buf.is_null() || len == 0 {
        return msg.as_ptr();
    }
    let bytes = msg.as_bytes();
    let n = bytes.len().min(len - 1);
    // SAFETY: `buf` holds `len` > n bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    buf
}

unsafe extern "C" fn eq_strerror(
    eq: *mut fid_eq,
    _prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    // SAFETY: `eq` is our EqObj.
    match unsafe { obj::<EqObj>(eq.cast()) } {
        // SAFETY: the caller's buffer of `len` bytes (or NULL); the
        // message lives in the queue until the next readerr.
        Ok(q) => unsafe { strerror_into(&lock(&q.message), buf, len) },
        Err(_) => c"relink: no such event queue".as_ptr(),
    }
}

pub(super) unsafe extern "C" fn cq_open(
    domain: *mut fid_domain,
    attr: *mut fi_cq_attr,
    out: *mut *mut fid_cq,
    context: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: `domain` is our DomainObj.
        let d = match unsafe { obj::<DomainObj>(domain.cast()) } {
            Ok(d) => d,
            Err(e) => return ret(Err(e)),
        };
        // SAFETY: NULL or libfabric's valid attributes.
        let Some(a) = (unsafe { attr.as_mut() }) else {
            return -(FI_EINVAL as c_int);
        };
        if !wait_ok(a.wait_obj) {
            return -(FI_ENOSYS as c_int);
        }
        if a.format == FI_CQ_FORMAT_UNSPEC {
            a.format = FI_CQ_FORMAT_CONTEXT;
        }
        if !matches!(
            a.format,
            FI_CQ_FORMAT_CONTEXT | FI_CQ_FORMAT_MSG | FI_CQ_FORMAT_DATA | FI_CQ_FORMAT_TAGGED
        ) {
            return -(FI_ENOSYS as c_int);
        }
        if out.is_null() {
            return -(FI_EINVAL as c_int);
        }
        let id = d.fabric.cq_open();
        let o = Box::new(CqObj {
            fid: fid_cq {
                fid: fid_header(FI_CLASS_CQ, context, CQ_FID_OPS.ptr()),
                ops: CQ_OPS.ptr(),
            },
            fabric: d.fabric.clone(),
            id,
            format: a.format,
            message: Mutex::new(CString::default()),
        });
        // SAFETY: libfabric's non-NULL out-pointer.
        unsafe { *out = Box::into_raw(o).cast() };
        0
    })
}

unsafe extern "C" fn cq_close(f: *mut fid) -> c_int {
    guard(|| {
        // SAFETY: `f` is our CqObj.
        let q = match unsafe { obj::<CqObj>(f.cast()) } {
            Ok(q) => q,
            Err(e) => return ret(Err(e)),
        };
        if let Err(e) = q.fabric.cq_close(q.id) {
            return ret(Err(e));
        }
        // SAFETY: ours, closed once.
        drop(unsafe { Box::from_raw(f.cast::<CqObj>()) });
        0
    })
}

/// Completions written in the queue's format into `buf`.
///
/// # Safety
/// `buf` holds room for `entries.len()` entries of `format`.
unsafe fn write_entries(format: fi_cq_format, entries: &[CqEntry], buf: *mut c_void) {
    for (i, e) in entries.iter().enumerate() {
        let ctx = e.context as *mut c_void;
        // SAFETY: entry `i` is inside the caller's buffer; written
        // unaligned, whole structs.
        unsafe {
            match format {
                FI_CQ_FORMAT_CONTEXT => buf
                    .cast::<fi_cq_entry>()
                    .add(i)
                    .write_unaligned(fi_cq_entry { op_context: ctx }),
                FI_CQ_FORMAT_MSG => {
                    buf.cast::<fi_cq_msg_entry>()
                        .add(i)
                        .write_unaligned(fi_cq_msg_entry {
                            op_context: ctx,
                            flags: e.flags,
                            len: e.len,
                        })
                }
                FI_CQ_FORMAT_DATA => {
                    buf.cast::<fi_cq_data_entry>()
                        .add(i)
                        .write_unaligned(fi_cq_data_entry {
                            op_context: ctx,
                            flags: e.flags,
                            len: e.len,
                            buf: std::ptr::null_mut(),
                            data: e.data,
                        })
                }
                _ => buf
                    .cast::<fi_cq_tagged_entry>()
                    .add(i)
                    .write_unaligned(fi_cq_tagged_entry {
                        op_context: ctx,
                        flags: e.flags,
                        len: e.len,
                        buf: std::ptr::null_mut(),
                        data: e.data,
                        tag: 0,
                    }),
            }
        }
    }
}

fn cq_read_inner(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
    wait: Option<Duration>,
) -> isize {
    // SAFETY: `cq` is our CqObj.
    let q = match unsafe { obj::<CqObj>(cq.cast()) } {
        Ok(q) => q,
        Err(e) => return super::sret(Err(e)),
    };
    if buf.is_null() && count > 0 {
        return -(FI_EINVAL as isize);
    }
    let start = Instant::now();
    loop {
        match q.fabric.cq_read(q.id, count) {
            Ok(v) if !v.is_empty() => {
                // SAFETY: `buf` holds `count` >= v.len() entries of the
                // queue's format (libfabric's contract).
                unsafe { write_entries(q.format, &v, buf) };
                if !src.is_null() {
                    for i in 0..v.len() {
                        // SAFETY: `src` holds `count` addresses.
                        unsafe { *src.add(i) = FI_ADDR_NOTAVAIL_VALUE };
                    }
                }
                return v.len() as isize;
            }
            Ok(_) => {}
            Err(e) => return -(e.errno as isize),
        }
        let left = match wait {
            None => return -(FI_EAGAIN as isize),
            Some(t) => match t.checked_sub(start.elapsed()) {
                Some(l) if !l.is_zero() => l,
                _ => return -(FI_EAGAIN as isize),
            },
        };
        q.fabric.sleep(Some(left));
    }
}

/// `FI_ADDR_NOTAVAIL`: `((uint64_t) -1)`.
const FI_ADDR_NOTAVAIL_VALUE: fi_addr_t = u64::MAX;

unsafe extern "C" fn cq_read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    sguard(|| cq_read_inner(cq, buf, count, std::ptr::null_mut(), None))
}

unsafe extern "C" fn cq_readfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
) -> isize {
    sguard(|| cq_read_inner(cq, buf, count, src, None))
}

unsafe extern "C" fn cq_sread(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    _cond: *const c_void,
    ms: c_int,
) -> isize {
    sguard(|| cq_read_inner(cq, buf, count, std::ptr::null_mut(), Some(timeout(ms))))
}

unsafe extern "C" fn cq_sreadfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
    _cond: *const c_void,
    ms: c_int,
) -> isize {
    sguard(|| cq_read_inner(cq, buf, count, src, Some(timeout(ms))))
}

unsafe extern "C" fn cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, _flags: u64) -> isize {
    sguard(|| {
        // SAFETY: `cq` is our CqObj.
        let q = match unsafe { obj::<CqObj>(cq.cast()) } {
            Ok(q) => q,
            Err(e) => return super::sret(Err(e)),
        };
        if buf.is_null() {
            return -(FI_EINVAL as isize);
        }
        let Some(e) = q.fabric.cq_readerr(q.id) else {
            return -(FI_EAGAIN as isize);
        };
        *lock(&q.message) = CString::new(e.message.replace('\0', " ")).unwrap_or_default();
        // SAFETY: libfabric's entry; err_data is left as the caller set it
        // (the provider has no error data of its own) with size 0.
        unsafe {
            let out = &mut *buf;
            out.op_context = e.entry.context as *mut c_void;
            out.flags = e.entry.flags;
            out.len = e.entry.len;
            out.buf = std::ptr::null_mut();
            out.data = e.entry.data;
            out.tag = 0;
            out.olen = e.olen;
            out.err = e.err as c_int;
            out.prov_errno = e.err as c_int;
            out.err_data_size = 0;
        }
        1
    })
}

unsafe extern "C" fn cq_strerror(
    cq: *mut fid_cq,
    _prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    // SAFETY: `cq` is our CqObj.
    match unsafe { obj::<CqObj>(cq.cast()) } {
        // SAFETY: the caller's buffer of `len` bytes (or NULL).
        Ok(q) => unsafe { strerror_into(&lock(&q.message), buf, len) },
        Err(_) => c"relink: no such completion queue".as_ptr(),
    }
}

/// `fi_trywait`: 0 when the caller may sleep on the queues' wait fd.
pub(super) unsafe extern "C" fn trywait(
    fabric: *mut fid_fabric,
    fids: *mut *mut fid,
    count: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: `fabric` is our FabricObj.
        let f = match unsafe { obj::<FabricObj>(fabric.cast()) } {
            Ok(f) => f,
            Err(e) => return ret(Err(e)),
        };
        let (mut cqs, mut eqs) = (Vec::new(), Vec::new());
        for i in 0..count.max(0) as usize {
            // SAFETY: `fids` holds `count` fids of ours.
            let p = unsafe { *fids.add(i) };
            if p.is_null() {
                return -(FI_EINVAL as c_int);
            }
            // SAFETY: each is one of our queues (class says which).
            unsafe {
                match (*p).fclass as u32 {
                    FI_CLASS_CQ => cqs.push((*p.cast::<CqObj>()).id),
                    FI_CLASS_EQ => eqs.push((*p.cast::<EqObj>()).id),
                    _ => return -(FI_EINVAL as c_int),
                }
            }
        }
        if f.fabric.trywait(&cqs, &eqs) {
            0
        } else {
            -(FI_EAGAIN as c_int)
        }
    })
}
