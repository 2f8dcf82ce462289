//! Work requests a session's core asks for (messages and one-sided
//! operations): queued in the session's backlog, then posted in one call
//! per session and poll round (or at once, from `Node::submit` of a
//! message, when the session's send queue is idle), in order, while send slots last, with
//! every [`SIGNAL_EVERY`]th request and the last of each batch signaled. An
//! application message of bytes is copied once on its way out: its header
//! and the payload the journal keeps go straight into its send slot. A
//! message from registered memory (`OpKind::MessageFrom`) is not copied:
//! its header goes into a send slot, and the request gathers the header
//! and then the message's ranges, in their regions' MRs on the current
//! transport (one SEND of its own). Messages
//! queued back to back, application and control messages alike, share one
//! send slot and one SEND, a frame (`relink_core::wire::frame_messages`),
//! while they fit the peer's receive slot: a burst of small messages costs
//! the fabric one request per frame, not one per message, and a resync's
//! `Promote` and advertisements arrive together.

use std::collections::{BTreeMap, VecDeque};

use relink_core::session::{Action, OneSided};
use relink_core::state::DownCause;
use relink_core::wire::{fetch_payload, FetchSource, MsgKind, FETCH_LEN, HEADER_LEN};
use relink_core::{LocalRange, LocalSgl, MessageBody, OpId, RegionId, Session};
use relink_fabric::{Memory, MrInfo, SendOp, SendWr, Sge, SgeList, Timestamp};

use super::entry::SessionEntry;
use super::transport::Transport;
use super::wr::{Pending, WrBatch, TAG_ONE_SIDED, TAG_SEND};
use super::Node;

/// Signal at least every this many requests (and the last request of each
/// batch), messages and one-sided requests alike: completions of the
/// unsignaled ones are inferred from RC order (a send queue completes in
/// order, so a request — a READ's data or an atomic's result included — is
/// done once a later one completes; a failed request always completes, with
/// its error). The last of a batch is signaled, so nothing waits on a
/// request that is never posted.
pub(super) const SIGNAL_EVERY: u32 = 16;

/// Where [`fill_batch`] reads the payloads of application messages and
/// hands back the bytes of encoded ones: the session's core.
pub(super) trait Payloads {
    /// The payload of message `op`; `None` once it left the journal.
    fn payload(&self, op: OpId) -> Option<MessageBody<'_>>;
    /// The bytes of a message copied into its slot, for reuse.
    fn recycle(&mut self, bytes: Vec<u8>);
    /// The longest frame the peer's receive slots hold
    /// ([`Session::peer_frame_max`]); 0: one message per SEND.
    fn peer_frame_max(&self) -> usize;
    /// `bytes` of an application message's payload were copied into a
    /// send slot ([`Session::count_copied`]).
    fn count_copied(&mut self, bytes: usize);
}

impl Payloads for Session {
    fn payload(&self, op: OpId) -> Option<MessageBody<'_>> {
        self.message_body(op)
    }

    fn recycle(&mut self, bytes: Vec<u8>) {
        Session::recycle(self, bytes);
    }

    fn peer_frame_max(&self) -> usize {
        Session::peer_frame_max(self)
    }

    fn count_copied(&mut self, bytes: usize) {
        Session::count_copied(self, bytes);
    }
}

/// A backlog without its session (a closing transport takes one with
/// every message encoded, [`encode_messages`]): no payload to read, the
/// bytes of sent messages are dropped.
pub(super) struct Detached;

impl Payloads for Detached {
    fn payload(&self, _op: OpId) -> Option<MessageBody<'_>> {
        None
    }

    fn recycle(&mut self, _bytes: Vec<u8>) {}

    fn peer_frame_max(&self) -> usize {
        0
    }

    fn count_copied(&mut self, _bytes: usize) {}
}

/// Turn every [`Pending::Message`] of `backlog` into a [`Pending::Send`]
/// of its encoded bytes, its payload read from `core` (a message from
/// registered memory: from its ranges in `regions`): for a backlog that
/// leaves its session (a closing transport's). Its operation completes
/// with the close, and the application may then change its memory; the
/// bytes leave as they were. A message that left the journal meanwhile
/// (completed), or whose memory is gone, is dropped: there is nothing to
/// send.
pub(super) fn encode_messages(
    backlog: &mut VecDeque<Pending>,
    core: &Session,
    regions: &BTreeMap<RegionId, Memory>,
) {
    backlog.retain_mut(|p| {
        let Pending::Message { op, header } = *p else {
            return true;
        };
        let mut bytes = Vec::new();
        match core.message_body(op) {
            None => return false,
            Some(MessageBody::Bytes(payload)) => {
                bytes.reserve_exact(HEADER_LEN + payload.len());
                bytes.extend_from_slice(&header);
                bytes.extend_from_slice(payload);
            }
            Some(MessageBody::Gather(local)) => {
                bytes.reserve_exact(HEADER_LEN + local.bytes() as usize);
                bytes.extend_from_slice(&header);
                for r in local.iter() {
                    let Some(m) = regions.get(&r.region) else {
                        return false;
                    };
                    let start = bytes.len();
                    bytes.resize(start + r.len as usize, 0);
                    if m.read(r.offset as usize, &mut bytes[start..]).is_err() {
                        return false;
                    }
                }
            }
        }
        *p = Pending::Send {
            op: Some(op),
            bytes,
        };
        true
    });
}

/// The request's SGL for a message from registered memory: its header
/// (`header`, in a send slot) and then each range of `local` in its
/// region's MR of `region_mrs`; `None` if a region has no MR on the
/// transport (deregistered meanwhile).
fn gather_sgl(
    header: Sge,
    local: &LocalSgl,
    region_mrs: &BTreeMap<RegionId, MrInfo>,
) -> Option<SgeList> {
    let mut sgl = SgeList::one(header);
    push_ranges(&mut sgl, local, region_mrs)?;
    Some(sgl)
}

/// Append each of `local`, in its region's MR of `region_mrs`, to `sgl`;
/// `None` if a region has no MR on the transport.
fn push_ranges(
    sgl: &mut SgeList,
    local: &[LocalRange],
    region_mrs: &BTreeMap<RegionId, MrInfo>,
) -> Option<()> {
    for r in local {
        let mr = region_mrs.get(&r.region)?;
        sgl.push(Sge {
            addr: mr.addr + r.offset,
            length: r.len,
            lkey: mr.lkey,
        });
    }
    Some(())
}

impl SessionEntry {
    /// Close the core ([`Session::close`]) with the messages of its
    /// backlog encoded first: the close ends their operations and empties
    /// the journal, and they still leave, ahead of the goodbye.
    pub(super) fn close(&mut self, now: Timestamp) {
        encode_messages(&mut self.backlog, &self.core, &self.memory.regions);
        self.core.close(now);
    }

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
            Action::SendMessage { epoch, op, header } => {
                if self.transport.as_ref().is_some_and(|t| t.epoch == epoch) {
                    self.backlog.push_back(Pending::Message { op, header });
                }
            }
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
                let mut sgl = SgeList::new();
                push_ranges(&mut sgl, &local, &t.region_mrs)?;
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
                    sgl,
                });
            }
            other => return Some(other),
        }
        None
    }
}

impl Node {
    /// Post the session's queued work at once if its send queue is idle
    /// (connected, nothing posted and not yet completed), instead of at
    /// the next poll round: a lone message or reply leaves in the
    /// application's call (`Node::submit` of a message). With requests in
    /// flight the work waits for the round, to go out in one batch with
    /// what else is queued by then. One-sided operations always wait for
    /// the round: they come in windows, and the first of a window posted
    /// alone costs a batch split and one more completion per window.
    pub(super) fn post_if_idle(&mut self, handle: u64) {
        let idle = self.sessions.get(&handle).is_some_and(|entry| {
            !entry.backlog.is_empty()
                && entry
                    .transport
                    .as_ref()
                    .is_some_and(|t| t.connected && t.posted.is_empty())
        });
        if !idle {
            return;
        }
        match self.post_backlog(handle) {
            // A failed post reports a loss to the core: collect its actions.
            Some(false) => self.run_actions(handle),
            Some(true)
                if self
                    .sessions
                    .get(&handle)
                    .is_some_and(|s| s.backlog.is_empty()) =>
            {
                self.index.work_posted(handle);
            }
            _ => {}
        }
    }

    /// Post the queued work requests in one call, in order, while send
    /// slots last; signal every [`SIGNAL_EVERY`]th and the last one.
    /// Returns whether it posted anything (a failed post included: it
    /// reports a loss to the core).
    pub(super) fn post_queued(&mut self, handle: u64) -> bool {
        self.post_backlog(handle).is_some()
    }

    /// [`Node::post_queued`]: `None` if nothing was posted, else whether
    /// the post succeeded.
    fn post_backlog(&mut self, handle: u64) -> Option<bool> {
        let p = &*self.provider;
        let entry = self.sessions.get_mut(&handle)?;
        if entry.backlog.is_empty() {
            return None;
        }
        let Some(t) = entry.transport.as_mut() else {
            entry.backlog.clear();
            return None;
        };
        let (Some(qp), Some(mr)) = (t.qp, t.send_mr) else {
            return None;
        };
        let size = entry.spec.slot_size;
        let batch = &mut self.send_batch;
        batch.clear();
        fill_batch(
            &mut entry.backlog,
            t,
            &entry.memory.send,
            mr,
            size,
            batch,
            &mut entry.core,
        );
        if batch.is_empty() {
            return None;
        }
        mark_signaled(batch.as_mut_slice(), &mut t.unsignaled);
        if let Err(e) = p.post_send(qp, batch.as_slice()) {
            tracing::debug!("post send: {e}");
            let epoch = t.epoch;
            entry.backlog.clear();
            entry
                .core
                .handle_transport_down(epoch, DownCause::DeviceRemoved, p.now());
            return Some(false);
        }
        Some(true)
    }
}

/// Move requests from the front of `backlog` into `batch`, in order, until
/// the backlog is empty or a message finds no free send slot of `t` (the
/// requests behind it wait too). A message is copied into its slot of
/// `send` (registered as `mr`, slots of `slot_size` bytes): its header and
/// the payload `core` keeps, or its encoded bytes, which then go back to
/// `core`. An application message whose payload left the journal (it
/// completed meanwhile) is not posted. Every posted request's wr_id joins
/// `t.posted`.
pub(super) fn fill_batch(
    backlog: &mut VecDeque<Pending>,
    t: &mut Transport,
    send: &Memory,
    mr: MrInfo,
    slot_size: u32,
    batch: &mut WrBatch<SendWr>,
    core: &mut impl Payloads,
) {
    // A frame fits the send slot and the peer's receive slot.
    let frame_max = core.peer_frame_max().min(slot_size as usize);
    while let Some(front) = backlog.front() {
        if matches!(front, Pending::Send { .. } | Pending::Message { .. })
            && t.free_slots.is_empty()
        {
            break;
        }
        let (wr_id, op, sgl) = match backlog.pop_front().expect("front") {
            Pending::Message { op, header } => {
                let payload = match core.payload(op) {
                    None => continue,
                    Some(MessageBody::Bytes(payload)) => payload,
                    Some(MessageBody::Gather(local)) if header[1] == MsgKind::Fetch.code() => {
                        // The peer reads it (a rendezvous): the header and
                        // where its one range is, in a slot, a SEND of its
                        // own; no byte of the payload moves here.
                        let [r] = &local[..] else {
                            debug_assert!(false, "{op}: a fetch of more than one range");
                            continue;
                        };
                        let source = FetchSource {
                            region: r.region,
                            offset: r.offset,
                            len: r.len,
                        };
                        let s = t.free_slots.pop().expect("checked");
                        let off = s as usize * slot_size as usize;
                        let _ = send.write_parts(off, &[&header, &fetch_payload(&source)]);
                        t.slot_op[s as usize] = Some(op);
                        let sge = Sge {
                            addr: mr.addr + off as u64,
                            length: (HEADER_LEN + FETCH_LEN) as u32,
                            lkey: mr.lkey,
                        };
                        batch.push_send(TAG_SEND | u64::from(s), SendOp::Send, SgeList::one(sge));
                        t.posted.push_back(TAG_SEND | u64::from(s));
                        continue;
                    }
                    Some(MessageBody::Gather(local)) => {
                        // The header in a slot, the payload where it is:
                        // a SEND of its own.
                        let s = *t.free_slots.last().expect("checked");
                        let off = s as usize * slot_size as usize;
                        let header_sge = Sge {
                            addr: mr.addr + off as u64,
                            length: HEADER_LEN as u32,
                            lkey: mr.lkey,
                        };
                        let Some(sgl) = gather_sgl(header_sge, local, &t.region_mrs) else {
                            // Deregistration waits for the operations
                            // naming a registration: a bug.
                            debug_assert!(false, "{op}: a region of its payload has no MR");
                            tracing::error!(%op, "a region of the message's payload has no MR; not posted");
                            continue;
                        };
                        t.free_slots.pop();
                        let _ = send.write(off, &header);
                        t.slot_op[s as usize] = Some(op);
                        batch.push_send(TAG_SEND | u64::from(s), SendOp::Send, sgl);
                        t.posted.push_back(TAG_SEND | u64::from(s));
                        continue;
                    }
                };
                let s = t.free_slots.pop().expect("checked");
                let off = s as usize * slot_size as usize;
                let _ = send.write_parts(off, &[&header, payload]);
                let copied = payload.len();
                core.count_copied(copied);
                let len = join_frame(backlog, send, off, HEADER_LEN + copied, frame_max, core);
                // The frame's send completion stands for its first message
                // (a message's completes nothing: the peer's confirmation
                // does).
                t.slot_op[s as usize] = Some(op);
                let sge = Sge {
                    addr: mr.addr + off as u64,
                    length: len as u32,
                    lkey: mr.lkey,
                };
                (TAG_SEND | u64::from(s), SendOp::Send, SgeList::one(sge))
            }
            Pending::Send { op, bytes } => {
                let s = t.free_slots.pop().expect("checked");
                let off = s as usize * slot_size as usize;
                let _ = send.write(off, &bytes);
                let len = bytes.len();
                core.recycle(bytes);
                let len = join_frame(backlog, send, off, len, frame_max, core);
                t.slot_op[s as usize] = op;
                let sge = Sge {
                    addr: mr.addr + off as u64,
                    length: len as u32,
                    lkey: mr.lkey,
                };
                (TAG_SEND | u64::from(s), SendOp::Send, SgeList::one(sge))
            }
            Pending::OneSided { wr_id, op, sgl } => (wr_id, op, sgl),
            Pending::Local { wr_id, op } => {
                batch.push_local(wr_id, op);
                t.posted.push_back(wr_id);
                continue;
            }
        };
        batch.push_send(wr_id, op, sgl);
        t.posted.push_back(wr_id);
    }
}

/// The messages queued right behind a frame's first (at `off` in `send`,
/// `len` bytes so far) join it while the frame fits `frame_max`: an
/// application message of bytes (one that completed meanwhile has nothing
/// to send and is dropped) or a control message. A message of encoded
/// bytes that carries an operation starts a frame of its own: its send
/// completion is what ends its operation; so does a message from
/// registered memory (its payload is not in the slot). Returns the frame's
/// length.
fn join_frame(
    backlog: &mut VecDeque<Pending>,
    send: &Memory,
    off: usize,
    mut len: usize,
    frame_max: usize,
    core: &mut impl Payloads,
) -> usize {
    loop {
        match backlog.front() {
            Some(&Pending::Message { op, header }) => match core.payload(op) {
                Some(MessageBody::Gather(_)) => break,
                Some(MessageBody::Bytes(p)) if len + HEADER_LEN + p.len() > frame_max => break,
                Some(MessageBody::Bytes(p)) => {
                    let _ = send.write_parts(off + len, &[&header, p]);
                    len += HEADER_LEN + p.len();
                    let copied = p.len();
                    core.count_copied(copied);
                }
                None => {}
            },
            Some(Pending::Send { op: None, bytes }) if len + bytes.len() <= frame_max => {
                let _ = send.write(off + len, bytes);
                len += bytes.len();
            }
            _ => break,
        }
        // Joined (or completed meanwhile): a control message's bytes go
        // back to the core.
        if let Some(Pending::Send { bytes, .. }) = backlog.pop_front() {
            core.recycle(bytes);
        }
    }
    len
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
mod tests;
