//! The data path's entry points: messages (send, sendv, sendmsg,
//! inject, senddata, injectdata; recv, recvv, recvmsg) and RMA (read,
//! write and writedata, their v, msg and inject forms) of active endpoints.

use std::ffi::c_void;

use super::domain::desc;
use super::endpoint::EpObj;
use super::memory::UserIov;
use super::nosys::*;
use super::sys::*;
use super::{obj, sguard, sret, Ops};
use crate::fabric::{FiError, Rma, TxFlags};
use crate::info::IOV_LIMIT;

pub(super) static MSG_OPS: Ops<fi_ops_msg> = Ops(fi_ops_msg {
    recv: Some(recv),
    recvv: Some(recvv),
    recvmsg: Some(recvmsg),
    send: Some(send),
    sendv: Some(sendv),
    sendmsg: Some(sendmsg),
    inject: Some(inject),
    senddata: Some(senddata),
    injectdata: Some(injectdata),
    ..MSG_NOSYS
});
pub(super) static RMA_OPS: Ops<fi_ops_rma> = Ops(fi_ops_rma {
    read: Some(rma_read),
    readv: Some(rma_readv),
    readmsg: Some(rma_readmsg),
    write: Some(rma_write),
    writev: Some(rma_writev),
    writemsg: Some(rma_writemsg),
    inject: Some(rma_inject),
    writedata: Some(rma_writedata),
    injectdata: Some(rma_injectdata),
    ..RMA_NOSYS
});

/// The caller's iovecs as (pointer, length) pairs.
///
/// # Safety
/// `iov` is NULL or holds `count` iovecs.
unsafe fn iovecs(iov: *const iovec, count: usize) -> Result<Vec<(*mut u8, usize)>, FiError> {
    if count > IOV_LIMIT {
        return Err(FiError::new(
            FI_EINVAL,
            format!("{count} iovecs: the limit is {IOV_LIMIT}"),
        ));
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    if iov.is_null() {
        return Err(FiError::new(FI_EINVAL, "a NULL iovec array"));
    }
    // SAFETY: the caller's contract.
    let v = unsafe { std::slice::from_raw_parts(iov, count) };
    Ok(v.iter()
        .map(|i| (i.iov_base.cast::<u8>(), i.iov_len))
        .collect())
}

/// Post a receive of `parts`.
///
/// # Safety
/// `ep` is ours; the parts are the caller's buffers, valid until the
/// receive completes (libfabric's contract).
unsafe fn post_recv(
    ep: *mut fid_ep,
    parts: Vec<(*mut u8, usize)>,
    context: *mut c_void,
    completion: bool,
) -> isize {
    // SAFETY: the caller's contract.
    let e = match unsafe { obj::<EpObj>(ep.cast()) } {
        Ok(e) => e,
        Err(err) => return sret(Err(err)),
    };
    // SAFETY: the caller's contract is UserIov::new's.
    let buf = unsafe { UserIov::new(parts) };
    sret(e.fabric.recv(e.id, buf, context as usize, completion))
}

unsafe extern "C" fn recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    _src: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: libfabric's contract for fi_recv is post_recv's.
    sguard(|| unsafe { post_recv(ep, vec![(buf.cast(), len)], context, true) })
}

unsafe extern "C" fn recvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    _src: fi_addr_t,
    context: *mut c_void,
) -> isize {
    sguard(|| {
        // SAFETY: `iov` holds `count` iovecs (libfabric's contract).
        match unsafe { iovecs(iov, count) } {
            // SAFETY: as `recv`.
            Ok(parts) => unsafe { post_recv(ep, parts, context, true) },
            Err(e) => sret(Err(e)),
        }
    })
}

unsafe extern "C" fn recvmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    sguard(|| {
        // SAFETY: NULL or libfabric's valid message.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return -(FI_EINVAL as isize);
        };
        // SAFETY: `msg_iov` holds `iov_count` iovecs.
        match unsafe { iovecs(m.msg_iov, m.iov_count) } {
            // SAFETY: as `recv`.
            Ok(parts) => unsafe { post_recv(ep, parts, m.context, flags & FI_COMPLETION != 0) },
            Err(e) => sret(Err(e)),
        }
    })
}

/// Send the bytes of `parts` (copied now).
///
/// # Safety
/// `ep` is ours; each part is valid for reads for the call.
unsafe fn post_send(
    ep: *mut fid_ep,
    parts: &[(*mut u8, usize)],
    data: Option<u64>,
    context: *mut c_void,
    flags: TxFlags,
) -> isize {
    // SAFETY: the caller's contract.
    let e = match unsafe { obj::<EpObj>(ep.cast()) } {
        Ok(e) => e,
        Err(err) => return sret(Err(err)),
    };
    let r = match parts {
        [] => e.fabric.send_data(e.id, &[], data, context as usize, flags),
        [(p, len)] if p.is_null() && *len > 0 => Err(FiError::new(FI_EINVAL, "a NULL buffer")),
        [(p, len)] => {
            let bytes = if *len == 0 {
                &[][..]
            } else {
                // SAFETY: the caller's buffer of `len` bytes (non-NULL,
                // checked above), valid for the call.
                unsafe { std::slice::from_raw_parts(*p, *len) }
            };
            e.fabric
                .send_data(e.id, bytes, data, context as usize, flags)
        }
        _ => {
            let total: usize = parts.iter().map(|(_, l)| l).sum();
            if total > e.fabric.params.max_msg_size {
                Err(FiError::new(
                    FI_EMSGSIZE,
                    format!("a message of {total} bytes is over max_msg_size"),
                ))
            } else if parts.iter().any(|(p, l)| p.is_null() && *l > 0) {
                Err(FiError::new(FI_EINVAL, "a NULL buffer"))
            } else {
                let mut v = Vec::with_capacity(total);
                for &(p, len) in parts.iter().filter(|(_, l)| *l > 0) {
                    // SAFETY: the caller's buffers, valid for the call.
                    v.extend_from_slice(unsafe { std::slice::from_raw_parts(p, len) });
                }
                e.fabric.send_data(e.id, &v, data, context as usize, flags)
            }
        }
    };
    sret(r)
}

const SEND: TxFlags = TxFlags {
    inject: false,
    completion: true,
    wait: false,
};

/// What a `*msg` call's flags ask.
fn tx_flags(flags: u64) -> TxFlags {
    TxFlags {
        inject: flags & FI_INJECT != 0,
        completion: flags & FI_COMPLETION != 0,
        wait: flags & (FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE) != 0,
    }
}

unsafe extern "C" fn send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    _dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: libfabric's contract for fi_send is post_send's.
    sguard(|| unsafe { post_send(ep, &[(buf.cast_mut().cast(), len)], None, context, SEND) })
}

unsafe extern "C" fn sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    _dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    sguard(|| {
        // SAFETY: `iov` holds `count` iovecs.
        match unsafe { iovecs(iov, count) } {
            // SAFETY: as `send`.
            Ok(parts) => unsafe { post_send(ep, &parts, None, context, SEND) },
            Err(e) => sret(Err(e)),
        }
    })
}

unsafe extern "C" fn sendmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    sguard(|| {
        // SAFETY: NULL or libfabric's valid message.
        let Some(m) = (unsafe { msg.as_ref() }) else {
            return -(FI_EINVAL as isize);
        };
        let f = tx_flags(flags);
        // SAFETY: `msg_iov` holds `iov_count` iovecs.
        match unsafe { iovecs(m.msg_iov, m.iov_count) } {
            // SAFETY: as `send`.
            Ok(parts) => unsafe {
                let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
                post_send(ep, &parts, data, m.context, f)
            },
            Err(e) => sret(Err(e)),
        }
    })
}

/// `fi_inject`/`fi_injectdata`: the bytes are copied now, and no
/// completion comes.
///
/// # Safety
/// As `post_send` for one part of `len` bytes at `buf`.
unsafe fn post_inject(ep: *mut fid_ep, buf: *const c_void, len: usize, data: Option<u64>) -> isize {
    // SAFETY: the caller's contract: `ep` is ours.
    if let Ok(e) = unsafe { obj::<EpObj>(ep.cast()) } {
        if len > e.fabric.params.inject_size() {
            return -(FI_EMSGSIZE as isize);
        }
    }
    let f = TxFlags {
        inject: true,
        completion: false,
        wait: false,
    };
    // SAFETY: the caller's contract.
    unsafe {
        post_send(
            ep,
            &[(buf.cast_mut().cast(), len)],
            data,
            std::ptr::null_mut(),
            f,
        )
    }
}

unsafe extern "C" fn inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _dest: fi_addr_t,
) -> isize {
    // SAFETY: libfabric's contract for fi_inject is post_inject's.
    sguard(|| unsafe { post_inject(ep, buf, len, None) })
}

unsafe extern "C" fn senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    _dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: libfabric's contract for fi_senddata is post_send's.
    sguard(|| unsafe {
        post_send(
            ep,
            &[(buf.cast_mut().cast(), len)],
            Some(data),
            context,
            SEND,
        )
    })
}

unsafe extern "C" fn injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    _dest: fi_addr_t,
) -> isize {
    // SAFETY: libfabric's contract for fi_injectdata is post_inject's.
    sguard(|| unsafe { post_inject(ep, buf, len, Some(data)) })
}

/// An RMA of one local range and one remote range.
///
/// # Safety
/// `ep` is ours; `desc` NULL or one of our MRs' descriptors; the local
/// buffer the caller's, valid until completion.
#[allow(clippy::too_many_arguments)]
unsafe fn post_rma(
    ep: *mut fid_ep,
    kind: Rma,
    buf: *const c_void,
    len: usize,
    d: *mut c_void,
    addr: u64,
    key: u64,
    context: *mut c_void,
    flags: TxFlags,
) -> isize {
    // SAFETY: the caller's contract.
    let r = unsafe {
        obj::<EpObj>(ep.cast()).and_then(|e| {
            let (mr, offset) = desc(d, buf, len)?.ok_or_else(|| {
                FiError::new(
                    FI_EINVAL,
                    "an RMA needs the descriptor of the local buffer's registration (FI_MR_LOCAL)",
                )
            })?;
            e.fabric.rma(
                e.id,
                kind,
                mr,
                offset,
                len,
                key,
                addr,
                context as usize,
                flags,
            )
        })
    };
    sret(r)
}

/// `fi_readv`/`fi_writev`/`fi_writemsg`...: an RMA whose local side is
/// libfabric's iovecs and descriptors, of one range.
///
/// # Safety
/// `iov` holds `count` iovecs and `desc` NULL or `count` descriptors; as
/// `post_rma`.
#[allow(clippy::too_many_arguments)]
unsafe fn post_rma_iov(
    ep: *mut fid_ep,
    kind: Rma,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    addr: u64,
    key: u64,
    context: *mut c_void,
    flags: TxFlags,
) -> isize {
    if count != 1 || iov.is_null() {
        return sret(Err(FiError::new(
            FI_EINVAL,
            "an RMA of one local range (rma iov_limit 1)",
        )));
    }
    // SAFETY: the caller's contract: one iovec, and NULL or one descriptor.
    let (v, d) = unsafe {
        (
            &*iov,
            if desc.is_null() {
                std::ptr::null_mut()
            } else {
                *desc
            },
        )
    };
    // SAFETY: the caller's contract is post_rma's.
    unsafe {
        post_rma(
            ep, kind, v.iov_base, v.iov_len, d, addr, key, context, flags,
        )
    }
}

unsafe extern "C" fn rma_read(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    _src: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: libfabric's contract for fi_read is post_rma's.
    sguard(|| unsafe { post_rma(ep, Rma::Read, buf, len, desc, addr, key, context, SEND) })
}

unsafe extern "C" fn rma_readv(
    ep: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    _src: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: libfabric's contract for fi_readv is post_rma_iov's.
    sguard(|| unsafe { post_rma_iov(ep, Rma::Read, iov, desc, count, addr, key, context, SEND) })
}

/// `fi_readmsg` / `fi_writemsg` (with `FI_REMOTE_CQ_DATA`: the write
/// carries `msg.data`).
///
/// # Safety
/// `msg` is NULL or libfabric's valid message; as `post_rma_iov`.
unsafe fn rma_msg(ep: *mut fid_ep, write: bool, msg: *const fi_msg_rma, flags: u64) -> isize {
    // SAFETY: the caller's contract.
    let Some(m) = (unsafe { msg.as_ref() }) else {
        return -(FI_EINVAL as isize);
    };
    if m.rma_iov_count != 1 || m.rma_iov.is_null() {
        return sret(Err(FiError::new(
            FI_EINVAL,
            "an RMA of one remote range (rma_iov_limit 1)",
        )));
    }
    // SAFETY: `rma_iov` holds one entry.
    let r = unsafe { &*m.rma_iov };
    let kind = match (write, flags & FI_REMOTE_CQ_DATA != 0) {
        (false, _) => Rma::Read,
        (true, false) => Rma::Write,
        (true, true) => Rma::WriteData(m.data),
    };
    let f = tx_flags(flags);
    // SAFETY: as `post_rma_iov`.
    unsafe {
        post_rma_iov(
            ep,
            kind,
            m.msg_iov,
            m.desc,
            m.iov_count,
            r.addr,
            r.key,
            m.context,
            f,
        )
    }
}

unsafe extern "C" fn rma_readmsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    // SAFETY: libfabric's contract is rma_msg's.
    sguard(|| unsafe { rma_msg(ep, false, msg, flags) })
}

unsafe extern "C" fn rma_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    _dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: libfabric's contract for fi_write is post_rma's.
    sguard(|| unsafe { post_rma(ep, Rma::Write, buf, len, desc, addr, key, context, SEND) })
}

unsafe extern "C" fn rma_writev(
    ep: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    _dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: libfabric's contract for fi_writev is post_rma_iov's.
    sguard(|| unsafe { post_rma_iov(ep, Rma::Write, iov, desc, count, addr, key, context, SEND) })
}

unsafe extern "C" fn rma_writemsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    // SAFETY: libfabric's contract is rma_msg's.
    sguard(|| unsafe { rma_msg(ep, true, msg, flags) })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_writedata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    data: u64,
    _dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    let kind = Rma::WriteData(data);
    // SAFETY: libfabric's contract for fi_writedata is post_rma's.
    sguard(|| unsafe { post_rma(ep, kind, buf, len, desc, addr, key, context, SEND) })
}

/// `fi_inject_write`/`fi_inject_writedata`: the bytes are copied before
/// it returns.
///
/// # Safety
/// `ep` is ours; `buf` holds `len` bytes (or `len` is 0).
unsafe fn rma_inject_any(
    ep: *mut fid_ep,
    kind: Rma,
    buf: *const c_void,
    len: usize,
    addr: u64,
    key: u64,
) -> isize {
    if buf.is_null() && len > 0 {
        return sret(Err(FiError::new(FI_EINVAL, "a NULL buffer")));
    }
    let bytes: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract: `len` bytes at `buf`, read now.
        unsafe { std::slice::from_raw_parts(buf.cast(), len) }
    };
    // SAFETY: the caller's contract.
    let r = unsafe { obj::<EpObj>(ep.cast()) }
        .and_then(|e| e.fabric.rma_inject(e.id, kind, bytes, key, addr));
    sret(r)
}

unsafe extern "C" fn rma_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    // SAFETY: libfabric's contract for fi_inject_write is rma_inject_any's.
    sguard(|| unsafe { rma_inject_any(ep, Rma::Write, buf, len, addr, key) })
}

unsafe extern "C" fn rma_injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    _dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    let kind = Rma::WriteData(data);
    // SAFETY: libfabric's contract for fi_inject_writedata is rma_inject_any's.
    sguard(|| unsafe { rma_inject_any(ep, kind, buf, len, addr, key) })
}
