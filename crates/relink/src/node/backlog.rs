//! Work requests a session's core asks for (messages and one-sided
//! operations): queued in the session's backlog, then posted in one call
//! per session and poll round, in order, while send slots last, with every
//! [`SIGNAL_EVERY`]th request and the last of each batch signaled.

use std::collections::VecDeque;

use relink_core::session::{Action, OneSided};
use relink_core::state::DownCause;
use relink_core::OpId;
use relink_fabric::{Memory, MrInfo, SendOp, SendWr, Sge};

use super::transport::Transport;
use super::wr::{WrBatch, TAG_ONE_SIDED, TAG_SEND};
use super::{Node, Slot};

/// A work request the core asked for, not yet posted.
pub(super) enum Pending {
    /// A message: its bytes go into a free send slot when it is posted.
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
        /// The local range, in its region's MR on the current transport.
        sge: Sge,
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

/// Signal at least every this many requests (and the last request of each
/// batch), messages and one-sided requests alike: completions of the
/// unsignaled ones are inferred from RC order (a send queue completes in
/// order, so a request — a READ's data or an atomic's result included — is
/// done once a later one completes; a failed request always completes, with
/// its error). The last of a batch is signaled, so nothing waits on a
/// request that is never posted.
pub(super) const SIGNAL_EVERY: u32 = 16;

impl Slot {
    /// The core's next action that needs the node: the work requests it
    /// asks for before that only join the backlog.
    pub(super) fn next_action(&mut self) -> Option<Action> {
        while let Some(action) = self.core.poll_action() {
            if let Some(action) = self.queue(action) {
                return Some(action);
            }
        }
        None
    }

    /// Put a work request (`Send`, `OneSided`) of the current transport in
    /// the backlog (one of an older transport is dropped); any other
    /// action is returned.
    fn queue(&mut self, action: Action) -> Option<Action> {
        match action {
            Action::Send { epoch, op, bytes } => {
                if self.transport.as_ref().is_some_and(|t| t.epoch == epoch) {
                    self.backlog.push_back(Pending::Send { op, bytes });
                }
            }
            Action::OneSided {
                epoch,
                op,
                kind,
                local,
                remote,
            } => {
                let t = self.transport.as_ref().filter(|t| t.epoch == epoch)?;
                let mr = t.region_mrs.get(&local.region)?;
                let sge = Sge {
                    addr: mr.addr + local.offset,
                    length: local.len,
                    lkey: mr.lkey,
                };
                let op_kind = match kind {
                    OneSided::Write => SendOp::Write { remote },
                    OneSided::Read => SendOp::Read { remote },
                    OneSided::FetchAdd { add } => SendOp::FetchAdd { remote, add },
                    OneSided::CmpSwap { compare, swap } => SendOp::CmpSwap {
                        remote,
                        compare,
                        swap,
                    },
                };
                self.backlog.push_back(Pending::OneSided {
                    wr_id: TAG_ONE_SIDED | op.0,
                    op: op_kind,
                    sge,
                });
            }
            other => return Some(other),
        }
        None
    }
}

impl Node {
    /// Post the queued work requests in one call, in order, while send
    /// slots last; signal every [`SIGNAL_EVERY`]th and the last one.
    /// Returns whether it posted anything (a failed post included: it
    /// reports a loss to the core).
    pub(super) fn drain_backlog(&mut self, key: u64) -> bool {
        let p = &*self.provider;
        let Some(slot) = self.sessions.get_mut(&key) else {
            return false;
        };
        if slot.backlog.is_empty() {
            return false;
        }
        let Some(t) = slot.transport.as_mut() else {
            slot.backlog.clear();
            return false;
        };
        let (Some(qp), Some(mr)) = (t.qp, t.send_mr) else {
            return false;
        };
        let size = slot.spec.slot_size;
        let batch = &mut self.send_batch;
        batch.clear();
        fill_batch(
            &mut slot.backlog,
            t,
            &slot.memory.send,
            mr,
            size,
            batch,
            |bytes| slot.core.recycle(bytes),
        );
        if batch.is_empty() {
            return false;
        }
        mark_signaled(batch.as_mut_slice(), &mut t.unsignaled);
        if let Err(e) = p.post_send(qp, batch.as_slice()) {
            tracing::debug!("post send: {e}");
            let epoch = t.epoch;
            slot.backlog.clear();
            slot.core
                .handle_transport_down(epoch, DownCause::DeviceRemoved, p.now());
        }
        true
    }
}

/// Move requests from the front of `backlog` into `batch`, in order, until
/// the backlog is empty or a message finds no free send slot of `t` (the
/// requests behind it wait too). A message is copied into its slot of
/// `send` (registered as `mr`, slots of `slot_size` bytes) and its bytes
/// are handed to `recycle`; every request's wr_id joins `t.posted`.
pub(super) fn fill_batch(
    backlog: &mut VecDeque<Pending>,
    t: &mut Transport,
    send: &Memory,
    mr: MrInfo,
    slot_size: u32,
    batch: &mut WrBatch<SendWr>,
    mut recycle: impl FnMut(Vec<u8>),
) {
    while let Some(front) = backlog.front() {
        if matches!(front, Pending::Send { .. }) && t.free_slots.is_empty() {
            break;
        }
        let (wr_id, op, sge) = match backlog.pop_front().expect("front") {
            Pending::Send { op, bytes } => {
                let s = t.free_slots.pop().expect("checked");
                let off = u64::from(s) * u64::from(slot_size);
                let _ = send.write(off as usize, &bytes);
                t.slot_op[s as usize] = op;
                let sge = Sge {
                    addr: mr.addr + off,
                    length: bytes.len() as u32,
                    lkey: mr.lkey,
                };
                recycle(bytes);
                (TAG_SEND | u64::from(s), SendOp::Send, sge)
            }
            Pending::OneSided { wr_id, op, sge } => (wr_id, op, sge),
            Pending::Local { wr_id, op } => {
                batch.push_local(wr_id, op);
                t.posted.push_back(wr_id);
                continue;
            }
        };
        batch.push_send(wr_id, op, sge);
        t.posted.push_back(wr_id);
    }
}

/// Mark which requests of a batch are signaled: the last one, and each one
/// that makes [`SIGNAL_EVERY`] since the last signaled request
/// (`unsignaled` counts those, across batches).
pub(super) fn mark_signaled(wrs: &mut [SendWr], unsignaled: &mut u32) {
    let Some(last) = wrs.len().checked_sub(1) else {
        return;
    };
    for (i, wr) in wrs.iter_mut().enumerate() {
        *unsignaled += 1;
        wr.signaled = i == last || *unsignaled >= SIGNAL_EVERY;
        if wr.signaled {
            *unsignaled = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use relink_core::Epoch;
    use relink_fabric::{Access, HeapMemory, MrId, RemoteAddr};

    use super::*;

    const SLOT: u32 = 64;

    fn send_mr() -> MrInfo {
        MrInfo {
            id: MrId(1),
            addr: 0x1000,
            length: 2 * u64::from(SLOT),
            lkey: 7,
            rkey: 8,
            access: Access::LOCAL_WRITE,
        }
    }

    fn message(op: Option<u64>, bytes: &[u8]) -> Pending {
        Pending::Send {
            op: op.map(OpId),
            bytes: bytes.to_vec(),
        }
    }

    fn write(op: u64) -> Pending {
        Pending::OneSided {
            wr_id: TAG_ONE_SIDED | op,
            op: SendOp::Write {
                remote: RemoteAddr {
                    addr: 0x9000,
                    rkey: 3,
                },
            },
            sge: Sge {
                addr: 0x5000,
                length: 8,
                lkey: 9,
            },
        }
    }

    #[test]
    fn a_batch_takes_requests_in_order_while_send_slots_last() {
        // Two send slots: the third message waits, and so does the WRITE
        // queued behind it.
        let mut t = Transport::new(Epoch(1), None, 2);
        let send = Memory::new(Arc::new(HeapMemory::new(0x1000, 2 * SLOT as usize)));
        let mut backlog = VecDeque::from([
            message(Some(1), b"one"),
            write(9),
            message(None, b"two"),
            message(Some(3), b"three"),
            write(10),
        ]);
        let mut batch = WrBatch::default();
        let mut recycled = Vec::new();
        fill_batch(
            &mut backlog,
            &mut t,
            &send,
            send_mr(),
            SLOT,
            &mut batch,
            |b| recycled.push(b),
        );

        let posted: Vec<u64> = batch.as_slice().iter().map(|w| w.wr_id).collect();
        assert_eq!(posted, [TAG_SEND, TAG_ONE_SIDED | 9, TAG_SEND | 1]);
        assert_eq!(t.posted, posted, "posted in the order of the batch");
        assert_eq!(
            backlog.len(),
            2,
            "a message without a slot and what follows it wait"
        );
        assert!(matches!(
            backlog[0],
            Pending::Send {
                op: Some(OpId(3)),
                ..
            }
        ));
        assert!(t.free_slots.is_empty());
        assert_eq!(t.slot_op, [Some(OpId(1)), None]);

        // Each message is in its slot; its SGE covers exactly its bytes.
        let wrs = batch.as_slice();
        assert_eq!(send.read_vec(0, 3).unwrap(), b"one");
        assert_eq!(send.read_vec(SLOT as usize, 3).unwrap(), b"two");
        let sge = |i: usize| wrs[i].sgl[0];
        assert_eq!((sge(0).addr, sge(0).length, sge(0).lkey), (0x1000, 3, 7));
        assert_eq!(sge(2).addr, 0x1000 + u64::from(SLOT));
        assert_eq!(sge(1).addr, 0x5000, "a one-sided request keeps its SGE");
        assert!(matches!(wrs[0].op, SendOp::Send));
        assert!(matches!(wrs[1].op, SendOp::Write { .. }));
        assert_eq!(recycled, [b"one".to_vec(), b"two".to_vec()]);

        // A completion frees a slot: the next batch goes on from there.
        assert_eq!(t.retire(TAG_SEND), Some(OpId(1)));
        batch.clear();
        fill_batch(
            &mut backlog,
            &mut t,
            &send,
            send_mr(),
            SLOT,
            &mut batch,
            drop,
        );
        let posted: Vec<u64> = batch.as_slice().iter().map(|w| w.wr_id).collect();
        assert_eq!(posted, [TAG_SEND, TAG_ONE_SIDED | 10]);
        assert!(backlog.is_empty());
        assert_eq!(send.read_vec(0, 5).unwrap(), b"three");
    }

    fn batch_of(n: usize) -> Vec<SendWr> {
        (0..n as u64)
            .map(|i| SendWr::new(i, SendOp::Send, Vec::new()))
            .collect()
    }

    fn signaled(wrs: &[SendWr]) -> Vec<u64> {
        wrs.iter().filter(|w| w.signaled).map(|w| w.wr_id).collect()
    }

    #[test]
    fn every_sixteenth_request_and_the_last_of_a_batch_are_signaled() {
        let mut unsignaled = 0;
        let mut wrs = batch_of(40);
        mark_signaled(&mut wrs, &mut unsignaled);
        assert_eq!(signaled(&wrs), [15, 31, 39]);
        assert_eq!(unsignaled, 0, "the last of a batch is signaled");

        let mut wrs = batch_of(1);
        mark_signaled(&mut wrs, &mut unsignaled);
        assert_eq!(signaled(&wrs), [0]);

        // The count goes on from requests posted before.
        let mut unsignaled = 10;
        let mut wrs = batch_of(8);
        mark_signaled(&mut wrs, &mut unsignaled);
        assert_eq!(signaled(&wrs), [5, 7]);

        let mut none: [SendWr; 0] = [];
        mark_signaled(&mut none, &mut unsignaled);
        assert_eq!(unsignaled, 0);
    }
}
