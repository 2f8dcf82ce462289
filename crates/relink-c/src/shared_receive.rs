//! Shared receive queues: the sessions of a node may receive through one
//! shared receive queue instead of receives of their own; relink builds it
//! on each device that carries one of its sessions and rebuilds it after
//! every recovery. A queue also has a pool of receive buffers the
//! application posts (`relink_post_shared_receive`), in its registered
//! memory, which every session on the queue takes from once its own
//! posted buffers are used, and takes back (`relink_take_shared_receives`).

use relink_rs::{LocalRange, SharedReceiveError, SharedReceiveHandle, SharedReceiveOptions};

use crate::node::{node_mut, relink_node};
use crate::ops::{local, receive_len};
use crate::options::relink_options;
use crate::region::in_region;
use crate::status::*;

/// A shared receive queue of a node (`relink_shared_receive_new`).
pub type relink_shared_receive = u64;

/// Make a shared receive queue on `node` holding `depth` receives of
/// messages up to `max_message` bytes, for the sessions whose options name
/// it (`relink_options_set_shared_receive`). Each such session reserves
/// its receive slots (`relink_options_set_recv_slots`, 64 by default) out
/// of the depth for as long as it lives: a connect past the depth fails
/// with `RELINK_ERR_SESSION`, and a listener refuses the incoming session
/// as busy (the peer retries). One queue is built on each device that
/// carries one of its sessions, and rebuilt after every recovery.
/// Stores the queue in `*out`. `RELINK_ERR_OPTIONS` names a value out of
/// range (depth 9..=65536, max_message 8..=16 MiB).
///
/// # Safety
/// `node` is a live node; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_shared_receive_new(
    node: *mut relink_node,
    depth: u32,
    max_message: u32,
    out: *mut relink_shared_receive,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        // Before the queue is made: refused, the node has no queue more.
        non_null(out, "out")?;
        let opts = SharedReceiveOptions::builder()
            .depth(depth)
            .max_message(max_message)
            .build()?;
        let h = n.node.create_shared_receive(opts)?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", h.0) }?;
        Ok(RELINK_OK)
    })
}

/// Remove a shared receive queue no session or listener uses any more
/// and whose pool holds no buffer (`RELINK_ERR_SESSION` while a session or
/// listener uses it, or a buffer posted to it with
/// `relink_post_shared_receive` is neither taken by a message nor taken
/// back with `relink_take_shared_receives`; `RELINK_ERR_OPTIONS` for an
/// unknown one).
///
/// # Safety
/// `node` is a live node.
#[no_mangle]
pub unsafe extern "C" fn relink_shared_receive_free(
    node: *mut relink_node,
    queue: relink_shared_receive,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        n.node.remove_shared_receive(SharedReceiveHandle(queue))?;
        Ok(RELINK_OK)
    })
}

/// Sessions made with these options receive through `queue` (`use_it`
/// non-zero), or through receives of their own (`use_it` 0, the default).
/// The queue is checked when the options are used (`relink_connect`,
/// `relink_listen`).
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_shared_receive(
    options: *mut relink_options,
    queue: relink_shared_receive,
    use_it: i32,
) -> relink_status {
    guard(|| {
        non_null(options, "options")?;
        // SAFETY: non-NULL; the caller's contract.
        let o = unsafe { &mut *options };
        o.opts.shared_receive = (use_it != 0).then_some(SharedReceiveHandle(queue));
        Ok(RELINK_OK)
    })
}

/// A buffer of a shared receive queue's pool that no message took, handed
/// back by `relink_take_shared_receives` as it was posted
/// (`relink_post_shared_receive`): the `len` bytes at `offset` of the
/// node's registration `region`, and its `context`. 24 bytes, no padding.
///
/// Unlike the structs librelink fills one at a time, it never grows: an
/// array of them is the call's ABI (a later librelink that hands back more
/// adds a call).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct relink_posted_buffer {
    /// The context it was posted with.
    pub context: u64,
    /// Its registration (`relink_register`).
    pub region: u32,
    /// Its length in bytes.
    pub len: u32,
    /// Its offset in `region`.
    pub offset: u64,
}

#[cfg(target_pointer_width = "64")]
const _: () = assert!(
    std::mem::size_of::<relink_posted_buffer>() == 24
        && std::mem::offset_of!(relink_posted_buffer, region) == 8
        && std::mem::offset_of!(relink_posted_buffer, len) == 12
        && std::mem::offset_of!(relink_posted_buffer, offset) == 16
);

/// `RELINK_ERR_OPTIONS` for a queue the node does not have.
fn unknown(queue: relink_shared_receive) -> Fail {
    Fail::from(SharedReceiveError::Unknown(SharedReceiveHandle(queue)))
}

/// Why range `l` cannot go to a pool: its region is no registration of
/// the node (`RELINK_ERR_NO_REGION`), or the range is outside it
/// (`RELINK_ERR_RANGE`, with the registration's length).
fn not_registered(n: &relink_node, l: LocalRange) -> Fail {
    if let Some(r) = n.registrations.get(&l.region.0) {
        let size = r.memory.len() as u64;
        if let Err(f) = in_region("buffer", l.region.0, l.offset, u64::from(l.len), size) {
            return f;
        }
    }
    Fail::new(
        RELINK_ERR_NO_REGION,
        format!(
            "region {} is no registration of the node (relink_register): a shared receive \
             queue's buffers serve every session on it, and only the node's registrations \
             are in all of them",
            l.region.0
        ),
    )
}

/// Post a receive buffer to shared receive queue `queue`'s pool: the `len`
/// bytes at `offset` of registration `region` of the node
/// (`relink_register`; a session's own region is in one session only, so
/// it cannot be), with `context`. A session on the queue
/// (`relink_options_set_shared_receive`) puts its next message — or the
/// notice of the peer's next WRITE with immediate data — into a buffer it
/// posted itself (`relink_post_receive`) while it has one, and else into
/// the pool's oldest buffer; the receive then ends on that session, as one
/// of its own buffers' does (`relink_poll_received` of that session, or
/// `RELINK_OUTPUT_RECEIVED` with its `session`): the application learns
/// which session the message came on. A message that waits for a buffer
/// on such a session takes this one at once.
///
/// The buffer is relink's from this call until a message took it (its
/// receive ended) or `relink_take_shared_receives` handed it back: leave
/// it alone, and its registration cannot be deregistered until then
/// (`relink_deregister` is `RELINK_ERR_BUSY`), nor the queue removed
/// (`relink_shared_receive_free` is `RELINK_ERR_SESSION`). The pool's
/// buffers belong to the queue, not to a session: a session's end flushes
/// its own buffers only, and the pool's stay posted for the others.
///
/// Refused, posting nothing: `RELINK_ERR_TOO_LARGE` for a `len` over
/// `UINT32_MAX` (as `relink_post_receive`'s); `RELINK_ERR_OPTIONS` for a
/// queue the node does not have (as `relink_shared_receive_free`'s);
/// `RELINK_ERR_NO_REGION` for a `region` that is no registration of the
/// node (a session's own region included); `RELINK_ERR_RANGE` for
/// `offset` + `len` past the registration's end.
///
/// # Safety
/// `node` is a live node.
#[no_mangle]
pub unsafe extern "C" fn relink_post_shared_receive(
    node: *mut relink_node,
    queue: relink_shared_receive,
    region: u32,
    offset: u64,
    len: u64,
    context: u64,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let len = receive_len(len)?;
        n.node
            .post_shared_receive(
                SharedReceiveHandle(queue),
                local(region, offset, len),
                context,
            )
            .map_err(|e| match e {
                SharedReceiveError::NotRegistered(l) => not_registered(n, l),
                e => e.into(),
            })?;
        Ok(RELINK_OK)
    })
}

/// Take back the buffers of shared receive queue `queue`'s pool that no
/// message took (`relink_post_shared_receive`), oldest first: at most
/// `cap` of them are written to `out`, in the order they were posted, and
/// their number to `*n`. Those handed back are the application's again
/// (their registration can be deregistered once no other buffer is in
/// it); the rest stay posted, in order, for messages to take and for the
/// next call to hand back. So no buffer is lost: when `*n` is `cap`, more
/// may be left; call again until `*n` is less than `cap`. A `cap` of 0
/// takes nothing (`out` may be NULL then). An empty pool gives `*n` 0 and
/// `RELINK_OK`.
///
/// `RELINK_ERR_ARGUMENT` for a NULL `n`, or a NULL `out` with a `cap`;
/// `RELINK_ERR_OPTIONS` for a queue the node does not have. Nothing is
/// taken then.
///
/// # Safety
/// `node` is a live node; `out` NULL or valid for writes of `cap`
/// `relink_posted_buffer`s; `n` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_take_shared_receives(
    node: *mut relink_node,
    queue: relink_shared_receive,
    out: *mut relink_posted_buffer,
    cap: usize,
    n: *mut usize,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let node = unsafe { node_mut(node)? };
        non_null(n, "n")?;
        if cap != 0 {
            non_null(out, "out")?;
        }
        let h = SharedReceiveHandle(queue);
        if node.node.shared_receive_usage(h).is_none() {
            return Err(unknown(queue));
        }
        let mut given = 0;
        if cap != 0 {
            let mut all = node.node.take_shared_receives(h).into_iter();
            for (l, context) in all.by_ref().take(cap) {
                let b = relink_posted_buffer {
                    context,
                    region: l.region.0,
                    len: l.len,
                    offset: l.offset,
                };
                // SAFETY: `out` is non-NULL and valid for `cap` elements by
                // the contract; `given` < `cap`.
                unsafe { out.add(given).write(b) };
                given += 1;
            }
            // The rest go back to the pool, in order: the queue is there
            // and their registrations could not go while they were in it.
            for (l, context) in all {
                node.node.post_shared_receive(h, l, context).map_err(|e| {
                    Fail::new(
                        RELINK_ERR_INTERNAL,
                        format!("a buffer could not go back to its pool: {e}"),
                    )
                })?;
            }
        }
        // SAFETY: the caller's contract.
        unsafe { put(n, "n", given) }?;
        Ok(RELINK_OK)
    })
}
