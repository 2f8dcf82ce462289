//! Regions: memory a session registers on every device it uses, named by
//! an id both sides of the application's protocol agree on. The peer
//! reaches an advertised region one-sidedly through tokens
//! (`relink_token`), which stay valid across every recovery, optionally
//! through a memory window relink binds anew on each connection; the
//! session reads and writes its own regions' bytes with
//! `relink_region_read` and `relink_region_write`. The program may also
//! register a buffer of its own with the node (`relink_register`, as
//! `ibv_reg_mr` does): every session of the node has it, under an id the
//! node gives, until `relink_deregister`.

use std::ptr::NonNull;

use relink_rs::{Access, BufferToken, Memory, RegionId, RegionOptions, SessionHandle};

use crate::host_memory::Registered;
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

/// The rights `access` (an or of `RELINK_ACCESS_*`) as a registration
/// takes them, or `RELINK_ERR_ARGUMENT` saying why not.
fn registration_access(access: u32) -> Result<Access, Fail> {
    let a = Access::from_bits(access).ok_or_else(|| {
        Fail::arg(format!(
            "`access` {access:#x} has bits no RELINK_ACCESS_* names"
        ))
    })?;
    if !a.is_valid_for_mr() {
        return Err(Fail::arg(format!(
            "`access` {access:#x}: RELINK_ACCESS_REMOTE_WRITE and RELINK_ACCESS_REMOTE_ATOMIC \
             need RELINK_ACCESS_LOCAL_WRITE (as ibv_reg_mr requires)"
        )));
    }
    Ok(a)
}

/// Register the caller's own buffer — the `len` bytes at `addr`, on the
/// stack, the heap or in a mapping — with the node, for every session of
/// the node (those made before and after), with the rights `access` (an
/// or of `RELINK_ACCESS_*`), as `ibv_reg_mr` registers memory; store its
/// id in `*id_out`.
///
/// The id (2^31 and up; a session's own regions take the ids below it)
/// names the buffer as the `region` of a local range in the operations of
/// any session of the node (`relink_write` reads the data to send from
/// it; `relink_read`, `relink_fetch_add` and `relink_cmp_swap` put the
/// data or old value in it, which needs `RELINK_ACCESS_LOCAL_WRITE`; and
/// `relink_post`), at offsets from `addr`. With a `RELINK_ACCESS_REMOTE_*`
/// right it is advertised to every session's peer, which reaches it
/// one-sidedly through a `relink_token` naming this id — once the program
/// told the peer the id, in a message for instance: a message sent after
/// this call travels behind the advertisement, so the peer can use the id
/// as soon as it has read it. Each session registers the buffer on every
/// device it uses, again after every reset, replacement and failover: the
/// id and the tokens naming it stay valid.
///
/// **The buffer's lifetime is the caller's, as with `ibv_reg_mr`.** It
/// must stay valid — mapped, not freed, not reused for anything else —
/// from this call until `relink_deregister` of the id returned `RELINK_OK`,
/// or until `relink_node_free` returned. In between, the device and the
/// peer may read and write it at any time (a peer's WRITE or atomic lands
/// whenever it arrives, also while the program runs its own code): read
/// it once a completion or a message says the data is there. Atomics,
/// the node's and the peer's, work on 8-byte aligned words: align the
/// buffer to 8 bytes, then an offset that is a multiple of 8 is one.
///
/// `RELINK_ERR_ARGUMENT` for a NULL `node` or `id_out`, a NULL `addr` with
/// a `len`, a `len` of 0, a buffer that wraps around the address space,
/// `access` bits no `RELINK_ACCESS_*` names, or rights no device grants
/// (`RELINK_ACCESS_REMOTE_WRITE` or `RELINK_ACCESS_REMOTE_ATOMIC` without
/// `RELINK_ACCESS_LOCAL_WRITE`); `RELINK_ERR_PROVIDER` if the device of a
/// live session refuses to register it (then no session has it, and the
/// buffer is the caller's again — unless the message says the device kept
/// it: then until `relink_node_free`); `RELINK_ERR_UNSUPPORTED` on an rdma-core
/// node of a librelink built without its `verbs` feature.
///
/// # Safety
/// `node` is a live node; `id_out` valid for a write; `addr` NULL or the
/// start of `len` bytes of this process's memory, valid for reads and
/// writes, which the caller keeps valid as said above.
#[no_mangle]
pub unsafe extern "C" fn relink_register(
    node: *mut relink_node,
    addr: *mut std::ffi::c_void,
    len: usize,
    access: u32,
    id_out: *mut u32,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        non_null(id_out, "id_out")?;
        if len == 0 {
            return Err(Fail::arg("`len` is 0: there is nothing to register"));
        }
        let base = NonNull::new(addr.cast::<u8>())
            .ok_or_else(|| Fail::arg(format!("`addr` is NULL with a `len` of {len}")))?;
        if isize::try_from(len).is_err() || (addr as usize).checked_add(len).is_none() {
            return Err(Fail::arg(format!(
                "{len} bytes at {addr:p} wrap around the address space: no buffer is that"
            )));
        }
        let access = registration_access(access)?;
        // SAFETY: `base` is non-NULL and its `len` bytes do not wrap; the
        // caller's contract keeps them valid until `relink_deregister`
        // gave them back (`Registered::release`) or the node is freed
        // (its registrations are dropped after its provider's last use:
        // `relink_node`'s field order). Rust holds no reference into them.
        let mut r = unsafe { Registered::new(base, len, n.verbs.as_ref())? };
        let id = match n.node.register(r.memory.clone(), access) {
            Ok(id) => id,
            Err(e) => {
                // No session has it: give it back at once (on verbs, an MR
                // over it left behind by the refusal goes too).
                let mut fail = Fail::from(e);
                if let Err(kept) = r.release() {
                    fail.message = format!(
                        "{}; and {}: keep the buffer valid until relink_node_free",
                        fail.message, kept.message
                    );
                    n.held_back.push(r);
                }
                return Err(fail);
            }
        };
        n.registrations.insert(id.0, r);
        // SAFETY: the caller's contract.
        unsafe { put(id_out, "id_out", id.0) }?;
        Ok(RELINK_OK)
    })
}

/// Deregister registration `id` (`relink_register`): every session of the
/// node lets go of it and deregisters it from its devices. Once this
/// returned `RELINK_OK`, neither a device nor relink touches the buffer
/// any more: it is the caller's to free or reuse. The peer's operations
/// that still name it fail (`RELINK_OUTCOME_FAILED`, `RELINK_OP_REMOTE`),
/// the node's own are refused (`RELINK_ERR_NO_REGION`).
///
/// `RELINK_ERR_BUSY` while an operation not yet completed names it as its
/// local range, a receive buffer posted in it (`relink_post_receive`)
/// has not ended, or a buffer in it is in a shared receive queue's pool
/// (`relink_post_shared_receive`) (nothing changed: take the operation's
/// completion, wait for the receive to end — a message fills it, or the
/// session's end flushes it —, or take the pool's buffers back with
/// `relink_take_shared_receives`, then call again);
/// `RELINK_ERR_NO_REGION` if the node has no registration `id`;
/// `RELINK_ERR_PROVIDER` if the device did not let go of the buffer
/// (rdma-core refused `ibv_dereg_mr`): no session has the registration any
/// more, but the buffer must stay valid — call again to retry, or keep it
/// until `relink_node_free` returned.
///
/// # Safety
/// `node` is a live node.
#[no_mangle]
pub unsafe extern "C" fn relink_deregister(node: *mut relink_node, id: u32) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        match n.node.deregister(RegionId(id)) {
            Ok(()) => {}
            // Deregistered by an earlier call whose buffer the device kept:
            // that call's `RELINK_ERR_PROVIDER` is retried.
            Err(relink_rs::RegisterError::Unknown(_)) if n.registrations.contains_key(&id) => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(r) = n.registrations.get_mut(&id) {
            r.release().map_err(|f| {
                Fail::new(
                    f.status,
                    format!(
                        "registration {id} is deregistered, but {}: keep the buffer valid, \
                         and call again (or free the node)",
                        f.message
                    ),
                )
            })?;
            n.registrations.remove(&id);
        }
        Ok(RELINK_OK)
    })
}
