//! The atomic entry points of active endpoints: what relink's FETCH_ADD
//! and CMP_SWAP carry — one 8-byte word (`FI_UINT64`, `FI_INT64`; count
//! 1), `FI_SUM` (`fi_atomic`, `fi_inject_atomic`, `fi_fetch_atomic`),
//! `FI_ATOMIC_READ` (`fi_fetch_atomic`) and `FI_CSWAP`
//! (`fi_compare_atomic`). The `*valid` queries say so; anything else is
//! `-FI_EOPNOTSUPP`. An atomic is not idempotent: one in flight when a
//! connection is lost completes with `FI_EIO` ("may have taken effect",
//! relink's `Indeterminate`), never twice.

use std::ffi::{c_int, c_void};

use super::domain::desc;
use super::endpoint::EpObj;
use super::nosys::*;
use super::sys::*;
use super::{obj, sguard, sret, Ops};
use crate::fabric::{Atomic, FiError, TxFlags};

pub(super) static ATOMIC_OPS: Ops<fi_ops_atomic> = Ops(fi_ops_atomic {
    write: Some(write),
    inject: Some(inject),
    readwrite: Some(readwrite),
    compwrite: Some(compwrite),
    writevalid: Some(writevalid),
    readwritevalid: Some(readwritevalid),
    compwritevalid: Some(compwritevalid),
    ..ATOMIC_NOSYS
});

const SEND: TxFlags = TxFlags {
    inject: false,
    completion: true,
    wait: false,
};

/// Which calls carry (`datatype`, `op`): 0 none, else the kinds below.
const WRITE: u8 = 1;
const FETCH: u8 = 2;
const COMPARE: u8 = 4;

fn supported(datatype: fi_datatype, op: fi_op) -> u8 {
    if !matches!(datatype, FI_UINT64 | FI_INT64) {
        return 0;
    }
    match op {
        FI_SUM => WRITE | FETCH,
        FI_ATOMIC_READ => FETCH,
        FI_CSWAP => COMPARE,
        _ => 0,
    }
}

/// Refuses what relink cannot carry, naming it.
fn check(datatype: fi_datatype, op: fi_op, count: usize, kind: u8) -> Result<(), FiError> {
    if supported(datatype, op) & kind == 0 {
        return Err(FiError::new(
            FI_EOPNOTSUPP,
            format!(
                "atomic op {op} on datatype {datatype}: relink carries FI_SUM, \
                 FI_ATOMIC_READ and FI_CSWAP on one FI_UINT64 or FI_INT64"
            ),
        ));
    }
    if count != 1 {
        return Err(FiError::new(
            FI_EINVAL,
            format!("{count} atomic elements: relink carries one 8-byte word"),
        ));
    }
    Ok(())
}

/// The 8-byte operand at `p`.
///
/// # Safety
/// `p` is NULL or points at 8 readable bytes.
unsafe fn word(p: *const c_void, what: &str) -> Result<u64, FiError> {
    if p.is_null() {
        return Err(FiError::new(FI_EINVAL, format!("a NULL {what}")));
    }
    // SAFETY: the caller's contract; the caller's buffer may be unaligned.
    Ok(unsafe { p.cast::<u64>().read_unaligned() })
}

/// Submit `op` on `ep`, its old value into `result` (described by
/// `result_desc`) or nowhere.
///
/// # Safety
/// `ep` is ours; `result_desc` NULL or one of our MRs' descriptors, and
/// `result` the caller's buffer, valid until completion.
#[allow(clippy::too_many_arguments)]
unsafe fn submit(
    ep: *mut fid_ep,
    op: Atomic,
    result: Option<(*mut c_void, *mut c_void)>,
    addr: u64,
    key: u64,
    context: *mut c_void,
    flags: TxFlags,
) -> Result<(), FiError> {
    // SAFETY: the caller's contract.
    let e = unsafe { obj::<EpObj>(ep.cast()) }?;
    let result = match result {
        None => None,
        // SAFETY: the caller's contract.
        Some((buf, d)) => Some(unsafe { desc(d, buf, 8) }?.ok_or_else(|| {
            FiError::new(
                FI_EINVAL,
                "an atomic's result buffer needs its registration's descriptor",
            )
        })?),
    };
    e.fabric
        .atomic(e.id, op, result, key, addr, context as usize, flags)
}

unsafe extern "C" fn write(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    _dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
    context: *mut c_void,
) -> isize {
    sguard(|| {
        sret(check(datatype, op, count, WRITE).and_then(|()| {
            // SAFETY: libfabric's contract: `buf` holds the operand.
            let add = unsafe { word(buf, "operand") }?;
            // SAFETY: `ep` is ours.
            unsafe { submit(ep, Atomic::Add(add), None, addr, key, context, SEND) }
        }))
    })
}

unsafe extern "C" fn inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
) -> isize {
    let flags = TxFlags {
        inject: true,
        ..SEND
    };
    sguard(|| {
        sret(check(datatype, op, count, WRITE).and_then(|()| {
            // SAFETY: libfabric's contract: `buf` holds the operand.
            let add = unsafe { word(buf, "operand") }?;
            // SAFETY: `ep` is ours.
            unsafe {
                submit(
                    ep,
                    Atomic::Add(add),
                    None,
                    addr,
                    key,
                    std::ptr::null_mut(),
                    flags,
                )
            }
        }))
    })
}

unsafe extern "C" fn readwrite(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    result: *mut c_void,
    result_desc: *mut c_void,
    _dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
    context: *mut c_void,
) -> isize {
    sguard(|| {
        sret(check(datatype, op, count, FETCH).and_then(|()| {
            let a = if op == FI_ATOMIC_READ {
                Atomic::Read
            } else {
                // SAFETY: libfabric's contract: `buf` holds the operand.
                Atomic::Add(unsafe { word(buf, "operand") }?)
            };
            // SAFETY: libfabric's contract for fi_fetch_atomic is submit's.
            unsafe { submit(ep, a, Some((result, result_desc)), addr, key, context, SEND) }
        }))
    })
}

unsafe extern "C" fn compwrite(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    compare: *const c_void,
    _compare_desc: *mut c_void,
    result: *mut c_void,
    result_desc: *mut c_void,
    _dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: fi_datatype,
    op: fi_op,
    context: *mut c_void,
) -> isize {
    sguard(|| {
        sret(check(datatype, op, count, COMPARE).and_then(|()| {
            // SAFETY: libfabric's contract: `buf` and `compare` hold the
            // operands.
            let (swap, compare) =
                unsafe { (word(buf, "operand")?, word(compare, "compare value")?) };
            // SAFETY: libfabric's contract for fi_compare_atomic is submit's.
            unsafe {
                submit(
                    ep,
                    Atomic::Swap { compare, swap },
                    Some((result, result_desc)),
                    addr,
                    key,
                    context,
                    SEND,
                )
            }
        }))
    })
}

/// A `*valid` query's answer: 0 with `*count` = 1, or `-FI_EOPNOTSUPP`.
///
/// # Safety
/// `count` is NULL or writable.
unsafe fn valid(datatype: fi_datatype, op: fi_op, count: *mut usize, kind: u8) -> c_int {
    if supported(datatype, op) & kind == 0 {
        return -(FI_EOPNOTSUPP as c_int);
    }
    if !count.is_null() {
        // SAFETY: the caller's contract.
        unsafe { *count = 1 };
    }
    0
}

unsafe extern "C" fn writevalid(
    _ep: *mut fid_ep,
    datatype: fi_datatype,
    op: fi_op,
    count: *mut usize,
) -> c_int {
    // SAFETY: libfabric's `count`.
    unsafe { valid(datatype, op, count, WRITE) }
}

unsafe extern "C" fn readwritevalid(
    _ep: *mut fid_ep,
    datatype: fi_datatype,
    op: fi_op,
    count: *mut usize,
) -> c_int {
    // SAFETY: libfabric's `count`.
    unsafe { valid(datatype, op, count, FETCH) }
}

unsafe extern "C" fn compwritevalid(
    _ep: *mut fid_ep,
    datatype: fi_datatype,
    op: fi_op,
    count: *mut usize,
) -> c_int {
    // SAFETY: libfabric's `count`.
    unsafe { valid(datatype, op, count, COMPARE) }
}
