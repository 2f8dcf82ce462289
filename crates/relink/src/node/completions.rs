//! Draining a session's CQ: send-queue completions retire their requests
//! in RC order (an unsignaled request is done once a later one completes),
//! a received message is copied out of its slot and handed to the core,
//! and its receive is posted again (to the shared receive queue, for a
//! session on one: whatever its status, the slot left the SRQ).

use relink_core::state::DownCause;
use relink_core::OpId;
use relink_fabric::{CqId, Memory, Provider, Timestamp, WcStatus, WorkCompletion};

use super::rendezvous::is_fetch;
use super::transport::Transport;
use super::wait::PollMode;
use super::wr::{TAG_LOCAL, TAG_MASK, TAG_ONE_SIDED, TAG_RECV, TAG_SEND};
use super::Node;

/// Completions taken from a CQ in one round at most.
const BATCH: usize = 64;

impl Node {
    /// Read up to a batch of completions of a session. A CQ found empty,
    /// or emptied by this batch, is armed (and checked once more, for a
    /// completion that raced the arming) — in [`PollMode::Busy`] it is
    /// looked at again next round instead; one that filled the batch stays
    /// dirty for the next round. Returns whether there were completions.
    /// `now`: the poll round's time, handed to the core with them.
    pub(super) fn poll_cq(&mut self, handle: u64, now: Timestamp) -> bool {
        if self.transports.is_closing(handle) {
            return self.transports.poll_closing_cq(
                handle,
                &*self.provider,
                &mut self.index,
                &mut self.wcs,
                &mut self.recv_batch,
                &mut self.send_batch,
            );
        }
        self.poll_cq_as(handle, false, now)
    }

    /// Drain a session's CQ to the end before its transport is reported
    /// down for `DISCONNECTED`: what arrived before the disconnect (the
    /// peer's goodbye above all, [`Node::close`]) is read first, so a
    /// `Close` is never mistaken for a loss. The flush errors the
    /// disconnect itself causes are not reported (the disconnect is the
    /// cause); any other completion is handled as in a poll round.
    pub(super) fn read_cq_before_loss(&mut self, handle: u64) {
        let now = self.now();
        while self.poll_cq_as(handle, true, now) {}
    }

    /// [`poll_cq`](Self::poll_cq); `before_loss`: drop flush errors (see
    /// [`read_cq_before_loss`](Self::read_cq_before_loss)).
    fn poll_cq_as(&mut self, handle: u64, before_loss: bool, now: Timestamp) -> bool {
        let Some(mut entry) = self.sessions.get_mut(&handle) else {
            return false;
        };
        // Completions on the standby: the peer promoted it, and so does
        // this end; they are the (new) current transport's first ones.
        let mut promoted = false;
        if entry.standby_ready && !before_loss {
            promoted = self.standby_promoted_by_peer(handle);
            let Some(s) = self.sessions.get_mut(&handle) else {
                return false;
            };
            entry = s;
        }
        let p = &*self.provider;
        let Some(t) = entry.transport.as_mut() else {
            return false;
        };
        if promoted {
            self.index.cq_signalled(handle);
        } else {
            if !t.connected {
                // Nothing is read before the CM reports the connection up: the
                // peer's first messages (its advertisements, sent at its own
                // establishment) may come before ours is reported — on rxe a
                // target's RTU can trail them — and the core, not yet told,
                // would drop them. They wait in the CQ; the establishment
                // marks the CQ for the next look.
                return false;
            }
            let Some(cq) = t.cq else { return false };
            self.wcs.clear();
            let n = p.poll_cq(cq, BATCH, &mut self.wcs).unwrap_or(0);
            if self.poll_mode == PollMode::Busy {
                // Not armed here: looked at again next round, unless it is
                // armed already (its event marks it). `Node::prepare_to_sleep`
                // arms it before the node sleeps.
                if n == BATCH || !t.cq_armed {
                    self.index.cq_signalled(handle);
                }
                if n == 0 {
                    return false;
                }
            } else if n == 0 {
                let _ = p.req_notify_cq(cq, false);
                t.cq_armed = true;
                if p.poll_cq(cq, BATCH, &mut self.wcs).unwrap_or(0) == 0 {
                    return false;
                }
                self.index.cq_signalled(handle);
            } else if n < BATCH {
                // Drained: armed now rather than found empty next round; what
                // came before the arming is taken with this batch.
                let _ = p.req_notify_cq(cq, false);
                t.cq_armed = true;
                let room = BATCH - n;
                if p.poll_cq(cq, room, &mut self.wcs).unwrap_or(0) == room {
                    self.index.cq_signalled(handle);
                }
            } else {
                self.index.cq_signalled(handle);
            }
        }
        let epoch = t.epoch;
        self.recv_batch.clear();
        // The core's calls below never replace the driver's transport.
        for wc in &self.wcs {
            match wc.wr_id & TAG_MASK {
                TAG_SEND | TAG_ONE_SIDED | TAG_LOCAL => {
                    let fetching = &mut self.fetched;
                    retire_through(t, wc, |wr_id, op, status| {
                        if is_fetch(wr_id) && status == WcStatus::Success {
                            // A message read (`rendezvous.rs`): ended
                            // after this batch's receives.
                            fetching.push(wr_id);
                        }
                        if !(before_loss && status == WcStatus::WrFlushErr) {
                            entry.core.handle_send_completion(epoch, op, status, now)
                        }
                    });
                }
                TAG_RECV => {
                    let s = (wc.wr_id & !TAG_MASK) as u32;
                    let shared = t.shared.as_ref().map(|a| &a.device);
                    if let Some(d) = shared.and_then(|d| Some((d.recv_mr?, d.slot_size))) {
                        // A slot of the shared receive queue goes back to
                        // it whatever happened to the message.
                        self.recv_batch.push_recv(&d.0, d.1, s);
                    }
                    if before_loss && wc.status == WcStatus::WrFlushErr {
                        continue;
                    }
                    if wc.status != WcStatus::Success {
                        entry.core.handle_transport_down(
                            epoch,
                            DownCause::Completion(wc.status),
                            now,
                        );
                        continue;
                    }
                    let (recv, size) = match shared {
                        Some(d) => (&d.memory, d.slot_size),
                        None => (entry.memory.recv_of(t.recv_alt), entry.spec.slot_size),
                    };
                    if let (Some(mr), None) = (t.recv_mr, shared) {
                        self.recv_batch.push_recv(&mr, entry.spec.slot_size, s);
                    }
                    // The message is read in its slot where the memory
                    // lends it (the receive is posted again only after this
                    // loop), else through a scratch copy.
                    // Each message goes into the next buffer the application
                    // posted, if any (`posted_receives.rs`).
                    let core = &mut entry.core;
                    let posted = &mut entry.posted;
                    let regions = &entry.memory.regions;
                    let mut pool = entry
                        .opts
                        .shared_receive
                        .and_then(|h| self.shared_posted.get_mut(&h.0));
                    read_slot(recv, s, size, wc.byte_len, &mut self.recv_buf, |bytes| {
                        core.handle_received_into(epoch, bytes, now, &mut |seq, arrival| {
                            posted.place(seq, arrival, regions, pool.as_deref_mut())
                        });
                    });
                }
                _ => {}
            }
        }
        if !self.recv_batch.is_empty() {
            let srq = t.shared.as_ref().and_then(|a| a.device.srq);
            let posted = match (srq, t.qp) {
                (Some(srq), _) => Some(p.post_srq_recv(srq, self.recv_batch.as_slice())),
                (None, Some(qp)) => Some(p.post_recv(qp, self.recv_batch.as_slice())),
                (None, None) => None,
            };
            if posted.is_some_and(|r| r.is_err()) {
                entry
                    .core
                    .handle_transport_down(epoch, DownCause::DeviceRemoved, now);
            }
        }
        if !self.fetched.is_empty() {
            for &wr_id in &self.fetched {
                if let Some(seq) = entry.fetch_of(epoch, wr_id) {
                    entry.fetch_done(epoch, seq, now);
                }
            }
            self.fetched.clear();
        }
        self.run_actions(handle);
        true
    }
}

/// Retire the send-queue requests posted up to and including `wc`'s, in
/// order: RC completes in order, so every unsignaled request posted before
/// it succeeded, and `wc`'s status is its own. `done` gets each request's
/// `wr_id`, operation (`None` for a control message or a message's READ)
/// and status.
pub(super) fn retire_through(
    t: &mut Transport,
    wc: &WorkCompletion,
    mut done: impl FnMut(u64, Option<OpId>, WcStatus),
) {
    while let Some(w) = t.posted.pop_front() {
        let status = if w == wc.wr_id {
            wc.status
        } else {
            WcStatus::Success
        };
        let op = t.retire(w);
        done(w, op, status);
        if w == wc.wr_id {
            break;
        }
    }
}

/// Call `f` with the message a receive completion put in slot `s` of
/// `recv` (slots of `slot_size` bytes): its `byte_len` bytes, at most a
/// slot, in place where the memory lends them, else copied into
/// `scratch` (its allocation reused); empty when the slot cannot be read.
fn read_slot(
    recv: &Memory,
    s: u32,
    slot_size: u32,
    byte_len: u32,
    scratch: &mut Vec<u8>,
    f: impl FnOnce(&[u8]),
) {
    let size = slot_size as usize;
    let len = (byte_len as usize).min(size);
    let mut f = Some(f);
    let read = recv.read_with(s as usize * size, len, scratch, |bytes| {
        if let Some(f) = f.take() {
            f(bytes);
        }
    });
    if let (Err(_), Some(f)) = (read, f) {
        f(&[]);
    }
}

/// Takes up to a batch of `cq`'s completions into `wcs` (cleared first);
/// finding none, arms the CQ and looks once more, so a completion that
/// came before the arming does not wait for an event that never comes.
/// Whether any came.
pub(super) fn poll_or_arm(p: &dyn Provider, cq: CqId, wcs: &mut Vec<WorkCompletion>) -> bool {
    wcs.clear();
    if p.poll_cq(cq, BATCH, wcs).unwrap_or(0) > 0 {
        return true;
    }
    let _ = p.req_notify_cq(cq, false);
    p.poll_cq(cq, BATCH, wcs).unwrap_or(0) > 0
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use relink_core::Epoch;
    use relink_fabric::{HeapMemory, QpId, WcOpcode};

    use super::*;

    fn wc(wr_id: u64, status: WcStatus) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode: WcOpcode::Send,
            qp: QpId(1),
            byte_len: 0,
            imm: None,
            invalidated_rkey: None,
        }
    }

    /// Post a message of `op` in the next free slot, as the backlog does.
    fn post_message(t: &mut Transport, op: Option<u64>) -> u64 {
        let s = t.free_slots.pop().expect("a free slot");
        t.slot_op[s as usize] = op.map(OpId);
        t.posted.push_back(TAG_SEND | u64::from(s));
        TAG_SEND | u64::from(s)
    }

    #[test]
    fn a_completion_retires_the_unsignaled_requests_before_it() {
        let mut t = Transport::new(Epoch(1), None, 4);
        let _m1 = post_message(&mut t, Some(1));
        t.posted.push_back(TAG_ONE_SIDED | 7);
        let control = post_message(&mut t, None);
        let m2 = post_message(&mut t, Some(2));
        let m3 = post_message(&mut t, Some(3));
        assert!(t.free_slots.is_empty());

        let mut seen = Vec::new();
        retire_through(&mut t, &wc(control, WcStatus::Success), |_, op, s| {
            seen.push((op, s))
        });
        assert_eq!(
            seen,
            [
                (Some(OpId(1)), WcStatus::Success),
                (Some(OpId(7)), WcStatus::Success),
                (None, WcStatus::Success),
            ]
        );
        assert_eq!(t.posted, [m2, m3]);
        assert_eq!(
            t.free_slots.len(),
            2,
            "the two message slots are free again"
        );

        // A failed request carries its own status; the one before it is
        // inferred done, the one after it stays posted (it flushes later).
        let m4 = post_message(&mut t, Some(4));
        seen.clear();
        retire_through(&mut t, &wc(m3, WcStatus::RemAccessErr), |_, op, s| {
            seen.push((op, s))
        });
        assert_eq!(
            seen,
            [
                (Some(OpId(2)), WcStatus::Success),
                (Some(OpId(3)), WcStatus::RemAccessErr),
            ]
        );
        assert_eq!(t.posted, [m4]);
        assert_eq!(t.free_slots.len(), 3);
    }

    #[test]
    fn a_received_message_is_read_in_its_slot() {
        const SLOT: u32 = 16;
        let recv = Memory::new(Arc::new(HeapMemory::new(0x2000, 4 * SLOT as usize)));
        recv.write(2 * SLOT as usize, b"hello, world").unwrap();
        recv.write(3 * SLOT as usize, b"0123456789abcdef").unwrap();
        let mut scratch = Vec::new();
        let mut read = |s, len| {
            let mut got = None;
            read_slot(&recv, s, SLOT, len, &mut scratch, |b| {
                got = Some(b.to_vec())
            });
            got.expect("called once")
        };

        assert_eq!(read(2, 12), b"hello, world");
        // A shorter message shows none of the longer one's bytes.
        assert_eq!(read(2, 5), b"hello");
        // A length past the slot is cut to the slot.
        assert_eq!(read(3, 99), b"0123456789abcdef");
        // A slot outside the memory reads as nothing.
        assert_eq!(read(4, 4), b"");
    }
}
