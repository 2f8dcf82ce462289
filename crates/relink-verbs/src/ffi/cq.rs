//! Completion channels and CQs: polling, arming, and the channel's CQ
//! events.

use std::os::fd::{BorrowedFd, RawFd};
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

use relink_verbs_sys as sys;

use super::device::{Context, CtxNode};
use super::{last_errno, Raw};
use crate::errno::codes;

/// The channel itself, held by its [`CompChannel`] and every CQ on it
/// (rule 2).
pub(super) struct ChanNode {
    raw: Raw<sys::ibv_comp_channel>,
    ctx: Arc<CtxNode>,
}

/// A completion channel.
pub(crate) struct CompChannel {
    node: Arc<ChanNode>,
}

pub(super) fn create_comp_channel(ctx: &Context) -> Result<CompChannel, i32> {
    // SAFETY: a live context (rule 1); the channel is destroyed once, by
    // `CompChannel::destroy` (or leaked).
    let raw = Raw::new(unsafe { sys::ibv_create_comp_channel(ctx.node.raw.get()) })
        .ok_or_else(last_errno)?;
    Ok(CompChannel {
        node: Arc::new(ChanNode {
            raw,
            ctx: ctx.node.clone(),
        }),
    })
}

impl CompChannel {
    /// The channel's fd (rdma-core's, open while the channel is).
    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: a live channel (rule 1); the fd is a plain field.
        unsafe { (*self.node.raw.get()).fd }
    }

    /// The channel's fd, borrowed for as long as the channel.
    pub(crate) fn fd_borrowed(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd is the channel's, open until it is destroyed,
        // which the borrow of `self` prevents meanwhile (rule 1).
        unsafe { BorrowedFd::borrow_raw(self.fd()) }
    }

    /// Create a CQ of `depth` entries on the channel's context, its
    /// notifications on this channel; the errno on failure.
    pub(crate) fn create_cq(&self, depth: c_int) -> Result<Cq, i32> {
        // SAFETY: a live context and its live channel (rule 2: the channel
        // holds the context); the CQ is destroyed once, by `Cq::destroy`
        // (or leaked).
        let raw = Raw::new(unsafe {
            sys::ibv_create_cq(
                self.node.ctx.raw.get(),
                depth,
                std::ptr::null_mut(),
                self.node.raw.get(),
                0,
            )
        })
        .ok_or_else(last_errno)?;
        let ptr = raw.0;
        Ok(Cq {
            ptr: Raw(ptr),
            node: Arc::new(CqNode {
                raw,
                _chan: self.node.clone(),
            }),
        })
    }

    /// Read one CQ event and acknowledge it at once; the address of the
    /// CQ it names (compare with [`Cq::key`]), or `None` if there is none
    /// (the fd is nonblocking).
    pub(crate) fn get_cq_event(&self) -> Option<usize> {
        let mut cq: *mut sys::ibv_cq = std::ptr::null_mut();
        let mut cq_ctx: *mut c_void = std::ptr::null_mut();
        // SAFETY: a live channel and two pointers to fill.
        if unsafe { sys::ibv_get_cq_event(self.node.raw.get(), &mut cq, &mut cq_ctx) } != 0 {
            return None;
        }
        // SAFETY: the event names a CQ of this channel, which
        // `ibv_destroy_cq` does not free before its events are acked: this
        // ack, the only one (rule 4).
        unsafe { sys::ibv_ack_cq_events(cq, 1) };
        Some(cq as usize)
    }

    /// Destroy the channel: once no CQ holds it (rule 2; otherwise `EBUSY`,
    /// nothing called); the errno on failure (the handle is gone either
    /// way: a channel that failed to go is leaked).
    pub(crate) fn destroy(self) -> Result<(), i32> {
        let node = match Arc::try_unwrap(self.node) {
            Ok(node) => node,
            Err(_still_held) => return Err(codes::EBUSY),
        };
        // SAFETY: a live channel with no CQ of ours on it, destroyed once
        // (`self` is consumed).
        let rc = unsafe { sys::ibv_destroy_comp_channel(node.raw.get()) };
        if rc != 0 {
            return Err(rc);
        }
        Ok(())
    }
}

/// The CQ itself, held by its [`Cq`] and every QP using it (rule 2).
pub(super) struct CqNode {
    raw: Raw<sys::ibv_cq>,
    _chan: Arc<ChanNode>,
}

/// A completion queue.
pub(crate) struct Cq {
    /// The node's pointer, kept here too so the data path reads it without
    /// going through the `Arc`.
    ptr: Raw<sys::ibv_cq>,
    pub(super) node: Arc<CqNode>,
}

impl Cq {
    /// The address (the key of the provider's table of CQs by pointer).
    #[inline]
    pub(crate) fn key(&self) -> usize {
        self.ptr.key()
    }

    /// The raw pointer, for a QP's creation.
    pub(super) fn raw(&self) -> *mut sys::ibv_cq {
        self.node.raw.get()
    }

    /// Poll up to `wcs.len()` completions into `wcs`: the number polled,
    /// or a negative value on failure (`ibv_poll_cq`).
    #[inline]
    pub(crate) fn poll(&self, wcs: &mut [Wc]) -> c_int {
        let n = c_int::try_from(wcs.len()).unwrap_or(c_int::MAX);
        // SAFETY: a live CQ (rule 1); `wcs` has room for `n` entries, and
        // `Wc` is `ibv_wc` (transparent).
        unsafe { sys::ibv_poll_cq(self.ptr.get(), n, wcs.as_mut_ptr().cast()) }
    }

    /// Arm the CQ for its next completion (`solicited_only`: the next
    /// solicited one or error); returns `ibv_req_notify_cq`'s code.
    #[inline]
    pub(crate) fn req_notify(&self, solicited_only: bool) -> c_int {
        // SAFETY: a live CQ.
        unsafe { sys::ibv_req_notify_cq(self.ptr.get(), c_int::from(solicited_only)) }
    }

    /// Destroy the CQ: once no QP holds it (rule 2; otherwise `EBUSY`,
    /// nothing called); on failure the handle comes back with the errno.
    /// `ibv_destroy_cq` waits until every event of the CQ was acked, which
    /// `CompChannel::get_cq_event` does at once.
    pub(crate) fn destroy(self) -> Result<(), (Cq, i32)> {
        let Cq { ptr, node } = self;
        let node = match Arc::try_unwrap(node) {
            Ok(node) => node,
            Err(node) => return Err((Cq { ptr, node }, codes::EBUSY)),
        };
        // SAFETY: a live CQ with no QP of ours on it, destroyed once: on
        // success the node is dropped below (rule 1).
        let rc = unsafe { sys::ibv_destroy_cq(node.raw.get()) };
        if rc != 0 {
            return Err((
                Cq {
                    ptr,
                    node: Arc::new(node),
                },
                rc,
            ));
        }
        Ok(())
    }
}

/// One work completion (`ibv_wc`), as [`Cq::poll`] fills it.
#[repr(transparent)]
#[derive(Default, Clone, Copy)]
pub(crate) struct Wc(sys::ibv_wc);

impl Wc {
    /// The request's id.
    #[inline]
    pub(crate) fn wr_id(&self) -> u64 {
        self.0.wr_id
    }
    /// `IBV_WC_*` status.
    #[inline]
    pub(crate) fn status(&self) -> u32 {
        self.0.status
    }
    /// `IBV_WC_*` opcode (undefined for an error completion).
    #[inline]
    pub(crate) fn opcode(&self) -> u32 {
        self.0.opcode
    }
    /// The QP number.
    #[inline]
    pub(crate) fn qp_num(&self) -> u32 {
        self.0.qp_num
    }
    /// Bytes received.
    #[inline]
    pub(crate) fn byte_len(&self) -> u32 {
        self.0.byte_len
    }
    /// `IBV_WC_*` flags.
    #[inline]
    pub(crate) fn wc_flags(&self) -> u32 {
        self.0.wc_flags
    }
    /// The immediate data or the invalidated rkey (one union: which one,
    /// the flags say), as stored.
    #[inline]
    pub(crate) fn imm_or_inv(&self) -> u32 {
        // SAFETY: both members of the union are a plain u32.
        unsafe { self.0.__bindgen_anon_1.imm_data }
    }
}
