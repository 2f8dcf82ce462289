//! The shape of relink's work requests: what a `wr_id` says, [`Pending`],
//! a request the core asked for and not posted yet, and [`WrBatch`], the
//! requests reused from one post to the next.

use relink_core::wire::HEADER_LEN;
use relink_core::OpId;
use relink_fabric::{MrInfo, RecvWr, SendOp, SendWr, Sge, SgeList};

// A `wr_id` carries a tag in its top two bits; below it, the send slot
// (`TAG_SEND`), the receive slot (`TAG_RECV`), the operation's id
// (`TAG_ONE_SIDED`) or the region whose window a local operation binds or
// invalidates (`TAG_LOCAL`).

/// A local operation on the send queue: a window's bind or invalidation
/// (the region's id below the tag).
pub(super) const TAG_LOCAL: u64 = 0;
/// A message in a send slot (the slot below the tag).
pub(super) const TAG_SEND: u64 = 1 << 62;
/// A receive of a receive slot (the slot below the tag).
pub(super) const TAG_RECV: u64 = 2 << 62;
/// A one-sided operation (its `OpId` below the tag).
pub(super) const TAG_ONE_SIDED: u64 = 3 << 62;
/// The tag bits.
pub(super) const TAG_MASK: u64 = 3 << 62;

/// A work request the core asked for, not yet posted.
pub(super) enum Pending {
    /// An application message: its header and then its payload, read from
    /// the session's journal, go into a free send slot when it is posted.
    Message {
        /// The message's operation.
        op: OpId,
        /// Its encoded header.
        header: [u8; HEADER_LEN],
    },
    /// A message of encoded bytes (a control message, or an application
    /// message handed over with its payload): its bytes go into a free
    /// send slot when it is posted.
    Send {
        /// The application operation it carries; `None` for relink's
        /// control messages.
        op: Option<OpId>,
        /// The encoded message, header included.
        bytes: Vec<u8>,
    },
    /// A one-sided operation, ready to post.
    OneSided {
        /// `TAG_ONE_SIDED` and the operation's id.
        wr_id: u64,
        /// The operation, with the peer's address and key.
        op: SendOp,
        /// The local ranges, each in its region's MR on the current
        /// transport.
        sgl: SgeList,
    },
    /// A local operation on the send queue without data: the
    /// invalidation of a region's memory window (`windows.rs`).
    Local {
        /// `TAG_LOCAL` and the region's id.
        wr_id: u64,
        /// The operation.
        op: SendOp,
    },
}

/// Work requests kept from one post to the next: a batch reuses the
/// requests of earlier batches (their one-element SGE lists are inline),
/// so posting allocates nothing once the batch has been as large before.
pub(super) struct WrBatch<T> {
    /// Every request ever needed; the first `len` are the current batch.
    wrs: Vec<T>,
    len: usize,
}

impl<T> Default for WrBatch<T> {
    fn default() -> Self {
        WrBatch {
            wrs: Vec::new(),
            len: 0,
        }
    }
}

impl<T> WrBatch<T> {
    /// Empty the batch (its requests are kept for reuse).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Whether the batch holds no request.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The batch, to post.
    pub fn as_slice(&self) -> &[T] {
        &self.wrs[..self.len]
    }

    /// The batch, to adjust before posting.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.wrs[..self.len]
    }

    /// Append a request: one of an earlier batch, or `fresh()`. The caller
    /// overwrites all of it.
    fn next(&mut self, fresh: impl FnOnce() -> T) -> &mut T {
        if self.len == self.wrs.len() {
            self.wrs.push(fresh());
        }
        self.len += 1;
        &mut self.wrs[self.len - 1]
    }
}

impl WrBatch<SendWr> {
    /// Append the signaled request `wr_id` of `op` on `sgl` (a single
    /// SGE, or a message's header and its ranges of registered memory).
    pub fn push_send(&mut self, wr_id: u64, op: SendOp, sgl: impl Into<SgeList>) {
        let wr = self.next(|| SendWr::new(0, SendOp::Send, SgeList::new()));
        *wr = SendWr::new(wr_id, op, sgl);
    }

    /// Append the signaled request `wr_id` of `op`, which carries no data
    /// (a window's bind or invalidation).
    pub fn push_local(&mut self, wr_id: u64, op: SendOp) {
        let wr = self.next(|| SendWr::new(0, SendOp::Send, SgeList::new()));
        *wr = SendWr::new(wr_id, op, SgeList::new());
    }
}

impl WrBatch<RecvWr> {
    /// Append the receive of slot `slot` of the receive slots `mr`.
    pub fn push_recv(&mut self, mr: &MrInfo, slot_size: u32, slot: u32) {
        let wr = self.next(|| RecvWr::new(0, SgeList::new()));
        *wr = RecvWr::new(
            TAG_RECV | u64::from(slot),
            Sge {
                addr: mr.addr + u64::from(slot) * u64::from(slot_size),
                length: slot_size,
                lkey: mr.lkey,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use relink_fabric::{Access, MrId};

    use super::*;

    #[test]
    fn a_batch_reuses_the_requests_of_earlier_batches() {
        let mr = MrInfo {
            id: MrId(1),
            addr: 0x4000,
            length: 4 * 32,
            lkey: 5,
            rkey: 6,
            access: Access::LOCAL_WRITE,
        };
        let mut batch = WrBatch::<RecvWr>::default();
        for slot in 0..3 {
            batch.push_recv(&mr, 32, slot);
        }
        batch.clear();
        assert!(batch.is_empty());
        batch.push_recv(&mr, 32, 3);
        let wr = &batch.as_slice()[0];
        assert_eq!(batch.as_slice().len(), 1);
        assert_eq!(wr.wr_id, TAG_RECV | 3);
        assert_eq!(
            (wr.sgl.len(), wr.sgl[0].addr, wr.sgl[0].length),
            (1, 0x4000 + 96, 32)
        );
        assert!(!wr.sgl.spilled(), "a one-element list needs no allocation");

        let mut sends = WrBatch::<SendWr>::default();
        let sge = Sge {
            addr: 0x4000,
            length: 8,
            lkey: 5,
        };
        sends.push_send(TAG_SEND | 1, SendOp::Send, sge);
        sends.clear();
        sends.push_send(TAG_ONE_SIDED | 9, SendOp::Send, sge);
        assert_eq!(sends.as_slice()[0].wr_id, TAG_ONE_SIDED | 9);
        assert_eq!(sends.as_slice()[0].sgl.as_slice(), &[sge]);
        assert!(!sends.as_slice()[0].sgl.spilled());
    }
}
