//! The one FFI module of relink-verbs: every call into libibverbs,
//! librdmacm and libc made by the crate is in here, behind safe functions
//! and small owned handle types; every other module of the crate has
//! `#![forbid(unsafe_code)]`.
//!
//! - `device.rs`: the kernel's device list, verbs contexts (queries, async
//!   events) and librdmacm's device list.
//! - `pd.rs`: protection domains, memory regions and memory windows.
//! - `cq.rs`: completion channels, CQs (polling, arming, CQ events).
//! - `qp.rs`: SRQs and QPs (create, modify, query, type 1 window binds).
//! - `wr.rs`: the linked work request lists of the post calls.
//! - `cm.rs`: the rdma_cm event channel, CM ids and their events.
//! - `memory.rs`: the provider's `mmap`'d memory, and the application's
//!   memory it adopts (`VerbsProvider::adopt_foreign`).
//! - `os.rs`: socket addresses, fds, `poll`, eventfds, interface
//!   addresses.
//!
//! # The safety argument, made once
//!
//! 1. **One owner per object.** Every rdma-core object is held by exactly
//!    one handle ([`Context`], [`Pd`], [`Cq`], [`Qp`], [`CmId`], ...), which
//!    is neither `Clone` nor `Copy`. A destroy consumes the handle, so no
//!    object is used after it is destroyed, nor destroyed twice; every
//!    method that uses an object borrows its handle, so nothing can destroy
//!    it during the call. A destroy that fails hands the handle back
//!    (`Err((handle, errno))`); dropping a handle without destroying it
//!    only leaks the object (handles have no `Drop`: when and in which
//!    order objects are destroyed stays the provider's explicit decision,
//!    which device loss handling depends on).
//! 2. **Parents outlive children.** rdma-core requires a child's parents
//!    (its context, PD, CQs, SRQ, completion channel, event channel) to be
//!    destroyed after it: the child's calls go through them. Each parent
//!    that has children is a node behind an `Arc`, of which every child
//!    handle holds a clone; a parent's destroy refuses (`EBUSY`, no call
//!    made) while any child still holds it. So a wrong order can only leak,
//!    never free a parent under a live child. These `Arc`s are cloned when
//!    an object is created, never on the data path.
//! 3. **Pointers handed to C come from here.** Work request lists
//!    ([`SendList`](wr::SendList), [`RecvBatch`]) are built by this
//!    module, with their SGE arrays and links pointing into their own
//!    vectors, and the windows and MRs of a bind borrowed from their
//!    handles for as long as the list lives. No
//!    request carries `IBV_SEND_INLINE`, so user space never reads the
//!    memory an SGE names: the device checks it against the lkey's MR. And
//!    an MR can only register memory of this provider's own mappings
//!    ([`MappedMemory`]) — or memory of the application's that it adopted
//!    through the unsafe `VerbsProvider::adopt_foreign`, whose caller
//!    keeps it valid until `VerbsProvider::release_memory` deregistered
//!    every MR over it — which Rust never references, only copies through
//!    raw pointers, so the device writing it at any time is sound.
//! 4. **Events are acknowledged exactly once.** Async and CQ events are
//!    acknowledged inside the call that reads them; a CM event is a guard
//!    ([`CmEventRef`]) that acknowledges on `ack` or drop, after its last
//!    use (its private data is copied out).
//! 5. **Threads.** libibverbs is thread-safe, and so are the verbs
//!    handles (`Send` and `Sync`); the one field rdma-core writes after a
//!    create, a type 1 window's rkey, is written only by a bind that
//!    borrows the window mutably. librdmacm writes a CM id's fields (its
//!    device, addresses, route) inside calls on the id and inside
//!    `rdma_get_cm_event`, so every call on an id and every read of its
//!    fields borrows the id's [`EventChannel`], which is `Send` but not
//!    `Sync`: they never run concurrently. (The provider makes all these
//!    calls under its lock anyway, except for the objects of a lost
//!    device, which it moves out of its tables to the one reaper thread
//!    that destroys them.)
//!
//! Every `unsafe` block below carries a `// SAFETY:` comment that points
//! back to these rules where they are what it relies on.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod cm;
mod cq;
mod device;
mod memory;
mod os;
mod pd;
mod qp;
mod wr;

use std::ptr::NonNull;

pub(crate) use cm::{resync_librdmacm, CmEventRef, CmId, ConnParam, EventChannel};
pub(crate) use cq::{CompChannel, Cq, Wc};
pub(crate) use device::{AsyncEventInfo, Context, Device, DeviceList};
pub(crate) use memory::MappedMemory;
pub(crate) use os::{
    interface_addrs, new_eventfd, poll, read_eventfd, set_nonblocking, write_eventfd,
};
pub(crate) use pd::{Mr, Mw, Pd};
pub(crate) use qp::{Qp, Srq};
pub(crate) use wr::{RecvBatch, SendBatch};

/// `errno` of the call that just failed (`EIO` if the OS reports none).
pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(crate::errno::codes::EIO)
}

/// A non-null pointer to an rdma-core object, owned by the handle or node
/// that holds it (rule 1).
struct Raw<T>(NonNull<T>);

// SAFETY: rdma-core objects may be used from any thread (libibverbs and
// librdmacm are thread-safe, rule 5); a `Raw` is only reached through the
// one handle or node that owns it.
unsafe impl<T> Send for Raw<T> {}
// SAFETY: as above; every use through a shared reference is a call
// rdma-core allows concurrently, or happens under the provider's lock.
unsafe impl<T> Sync for Raw<T> {}

impl<T> Raw<T> {
    /// `None` for a null pointer (a failed create).
    fn new(p: *mut T) -> Option<Raw<T>> {
        NonNull::new(p).map(Raw)
    }

    /// The pointer, for rdma-core calls.
    #[inline]
    fn get(&self) -> *mut T {
        self.0.as_ptr()
    }

    /// The address: the key the provider's tables find the object by.
    #[inline]
    fn key(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

impl<T> std::fmt::Debug for Raw<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:p}", self.0)
    }
}
