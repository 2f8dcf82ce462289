//! Regions: memory a session registers on every device it uses, named by
//! an id both sides of the application's protocol agree on. The peer
//! reaches an advertised region one-sidedly through tokens
//! (`relink_token`), which stay valid across every recovery, optionally
//! through a memory window relink binds anew on each connection; the
//! session reads and writes its own regions' bytes with
//! `relink_region_read` and `relink_region_write`.

use relink_rs::{Access, BufferToken, RegionId, RegionOptions, SessionHandle};

use crate::node::{node_mut, relink_node};
use crate::options::{change, relink_options};
use crate::session::relink_session;
use crate::status::*;

/// Local write access (needed for a region that receives READ data or an
/// atomic's old value).
pub const RELINK_ACCESS_LOCAL_WRITE: u32 = 1;
/// The peer may RDMA WRITE into the region.
pub const RELINK_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
/// The peer may RDMA READ the region.
pub const RELINK_ACCESS_REMOTE_READ: u32 = 1 << 2;
/// The peer may run atomics on the region.
pub const RELINK_ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;

/// A stable name for a byte of the peer's memory: its region (by the id
/// both sides agreed on) and an offset. Tokens stay valid across every
/// recovery: relink translates them to the peer's current address and key
/// when it posts. Send them to the peer in messages as the application's
/// protocol likes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct relink_token {
    /// The peer's region.
    pub region: u32,
    /// Offset into it.
    pub offset: u64,
}

impl From<relink_token> for BufferToken {
    fn from(t: relink_token) -> BufferToken {
        BufferToken {
            region: RegionId(t.region),
            offset: t.offset,
        }
    }
}

/// Add a region of `len` bytes, allocated by relink (zeroed), registered
/// with the session on every device it uses. `id` names it on both sides
/// of the application's protocol; `access` is an or of
/// `RELINK_ACCESS_*`; `advertise` (non-zero) lets the peer reach it
/// one-sidedly through tokens (`relink_token`) naming `id`.
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_add_region(
    options: *mut relink_options,
    id: u32,
    len: u64,
    access: u32,
    advertise: i32,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            let access = Access::from_bits(access).ok_or_else(|| {
                Fail::arg(format!(
                    "`access` {access:#x} has bits no RELINK_ACCESS_* names"
                ))
            })?;
            o.regions
                .push(RegionOptions::new(RegionId(id), len, access).advertise(advertise != 0));
            Ok(())
        })
    }
}

/// Expose the region `id` (added with `relink_options_add_region`,
/// advertised, with at least one `RELINK_ACCESS_REMOTE_*` right) through a
/// type 2 memory window (`window` non-zero) that relink binds on the
/// session's connection before each advertisement and invalidates at its
/// end: the region's own registration then grants the peer nothing.
/// `RELINK_ERR_OPTIONS` if no region has that id or it cannot be windowed.
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_region_window(
    options: *mut relink_options,
    id: u32,
    window: i32,
) -> relink_status {
    guard(|| {
        non_null(options, "options")?;
        // SAFETY: non-NULL; the caller's contract.
        let o = unsafe { &mut *options };
        let mut next = o.opts.clone();
        let r = next
            .regions
            .iter_mut()
            .find(|r| r.id.0 == id)
            .ok_or_else(|| Fail::new(RELINK_ERR_OPTIONS, format!("no region {id}")))?;
        *r = r.clone().window(window != 0);
        next.validate()?;
        o.opts = next;
        Ok(RELINK_OK)
    })
}

/// Copy `len` bytes from `buf` into the session's own region `region` at
/// `offset` (what a later WRITE sends, or what the peer reads).
///
/// # Safety
/// `node` is a live node; `buf` valid for reads of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn relink_region_write(
    node: *mut relink_node,
    session: relink_session,
    region: u32,
    offset: u64,
    buf: *const std::ffi::c_void,
    len: usize,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        non_null(buf, "buf")?;
        // SAFETY: non-NULL, valid for `len` bytes by the contract.
        let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        let mem = n.node.region(SessionHandle(session), RegionId(region))?;
        let offset = usize::try_from(offset).map_err(|_| Fail::arg("`offset` too large"))?;
        mem.write(offset, data)
            .map_err(|e| Fail::arg(format!("region {region}: {e}")))?;
        Ok(RELINK_OK)
    })
}

/// Copy `len` bytes of the session's own region `region` at `offset` into
/// `buf` (what the peer wrote, or a READ or atomic brought).
///
/// # Safety
/// `node` is a live node; `buf` valid for writes of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn relink_region_read(
    node: *mut relink_node,
    session: relink_session,
    region: u32,
    offset: u64,
    buf: *mut std::ffi::c_void,
    len: usize,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        non_null(buf, "buf")?;
        // SAFETY: non-NULL, valid for writes of `len` bytes by the
        // contract, and not aliased during the call.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        let mem = n.node.region(SessionHandle(session), RegionId(region))?;
        let offset = usize::try_from(offset).map_err(|_| Fail::arg("`offset` too large"))?;
        mem.read(offset, out)
            .map_err(|e| Fail::arg(format!("region {region}: {e}")))?;
        Ok(RELINK_OK)
    })
}
