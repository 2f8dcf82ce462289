//! Regions: memory a session registers on every device it uses, named by
//! an id both sides of the application's protocol agree on. The peer
//! reaches an advertised region one-sidedly through tokens
//! (`relink_token`), which stay valid across every recovery, optionally
//! through a memory window relink binds anew on each connection; the
//! session reads and writes its own regions' bytes with
//! `relink_region_read` and `relink_region_write`.

use relink_rs::{Access, BufferToken, Memory, RegionId, RegionOptions, SessionHandle};

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
/// `RELINK_ERR_NO_REGION` if no region has that id, `RELINK_ERR_OPTIONS`
/// if it cannot be windowed.
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
            .ok_or_else(|| {
                Fail::new(
                    RELINK_ERR_NO_REGION,
                    format!("the options have no region {id}"),
                )
            })?;
        *r = r.clone().window(window != 0);
        next.validate()?;
        o.opts = next;
        Ok(RELINK_OK)
    })
}

/// `offset` + `len` inside a region of `size` bytes, or `RELINK_ERR_RANGE`
/// naming the range (`what`: "range", "local range") and the region.
pub(crate) fn in_region(
    what: &str,
    region: u32,
    offset: u64,
    len: u64,
    size: u64,
) -> Result<(), Fail> {
    if offset.checked_add(len).is_some_and(|end| end <= size) {
        Ok(())
    } else {
        Err(Fail::new(
            RELINK_ERR_RANGE,
            format!("{what} {offset:#x}+{len} is outside region {region} ({size} bytes)"),
        ))
    }
}

/// The memory of region `region` of a session, and `offset` as an index
/// into it, once `offset` + `len` is checked to be inside it: before the
/// caller's buffer is touched.
fn checked_region(
    n: &relink_node,
    session: relink_session,
    region: u32,
    offset: u64,
    len: usize,
) -> Result<(Memory, usize), Fail> {
    let mem = n.node.region(SessionHandle(session), RegionId(region))?;
    let size = u64::try_from(mem.len()).unwrap_or(u64::MAX);
    in_region(
        "range",
        region,
        offset,
        u64::try_from(len).unwrap_or(u64::MAX),
        size,
    )?;
    // Inside a region of `usize` bytes: it fits.
    let offset = usize::try_from(offset).map_err(|_| {
        Fail::new(
            RELINK_ERR_RANGE,
            format!("offset {offset:#x} is outside region {region}"),
        )
    })?;
    Ok((mem, offset))
}

/// Copy `len` bytes from `buf` into the session's own region `region` at
/// `offset` (what a later WRITE sends, or what the peer reads).
/// `RELINK_ERR_NO_SESSION`, `RELINK_ERR_NO_REGION` for an unknown session
/// or region; `RELINK_ERR_RANGE` if `offset` + `len` is past the region's
/// end (checked before `buf` is read).
///
/// # Safety
/// `node` is a live node; `buf` valid for reads of `len` bytes (NULL only
/// if `len` is 0).
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
        if len != 0 {
            non_null(buf, "buf")?;
        }
        let (mem, offset) = checked_region(n, session, region, offset, len)?;
        if len == 0 {
            return Ok(RELINK_OK);
        }
        // SAFETY: non-NULL, valid for `len` bytes by the contract; `len`
        // fits in the region, so it is no larger than an allocation.
        let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        mem.write(offset, data)
            .map_err(|e| Fail::new(RELINK_ERR_RANGE, format!("region {region}: {e}")))?;
        Ok(RELINK_OK)
    })
}

/// Copy `len` bytes of the session's own region `region` at `offset` into
/// `buf` (what the peer wrote, or a READ or atomic brought). Errors as
/// `relink_region_write`'s.
///
/// # Safety
/// `node` is a live node; `buf` valid for writes of `len` bytes (NULL only
/// if `len` is 0).
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
        if len != 0 {
            non_null(buf, "buf")?;
        }
        let (mem, offset) = checked_region(n, session, region, offset, len)?;
        if len == 0 {
            return Ok(RELINK_OK);
        }
        // SAFETY: non-NULL, valid for writes of `len` bytes by the
        // contract, and not aliased during the call; `len` fits in the
        // region, so it is no larger than an allocation.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        mem.read(offset, out)
            .map_err(|e| Fail::new(RELINK_ERR_RANGE, format!("region {region}: {e}")))?;
        Ok(RELINK_OK)
    })
}
