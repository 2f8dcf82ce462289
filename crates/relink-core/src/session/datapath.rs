//! The data path: [`Session::submit`], posting messages and one-sided
//! operations in order within the peer's receive credits, their send
//! completions, received messages (deliveries, acknowledgements,
//! advertisements, keepalives, close) and the control messages and acks a
//! session sends.

use std::collections::BTreeSet;

use relink_fabric::{Access, Timestamp, WcStatus};

use super::{Action, OneSided, Session, SessionError};
use crate::buffers::SpareBuffers;
use crate::ids::{Epoch, OpId, Seq};
use crate::inbox::{Accept as InboxAccept, Inbox};
use crate::journal::Journal;
use crate::keys::{KeyError, PeerKeys, RemoteRegion};
use crate::op::{Arrival, OpError, OpKind};
use crate::reason::DownCause;
use crate::state::State;
use crate::timers::TimerKind;
use crate::wire::{self, MsgBody, WireError};

/// Receive slots kept free of data for control messages (acks, keepalives,
/// advertisements).
const CONTROL_RESERVE: u64 = 8;

/// Operations and messages on the wire: the part of [`Session`] this file
/// owns.
#[derive(Debug, Default)]
pub(super) struct DataPath {
    /// The sender side: every operation until its one completion.
    pub(super) journal: Journal,
    /// The receiver side: delivers each of the peer's messages once, in
    /// order.
    pub(super) inbox: Inbox,
    /// The peer's advertised regions, for the current epoch only: filled
    /// by its advertisements, begun anew with each transport.
    pub(super) peer_keys: PeerKeys,
    /// The highest of our sequence numbers the peer confirmed delivering
    /// (from the `ack` of its messages and from its handshake), already
    /// applied to the journal. Never decreases. Credit flow control counts
    /// messages above it.
    peer_delivered: Seq,
    /// The acknowledgement (our inbox's last delivered) the last message we
    /// sent carried. A bare ack is due while the inbox is ahead of it.
    last_ack_sent: Seq,
    /// The longest frame the peer's receive slots hold (its AdvertDone);
    /// 0 until it says.
    peer_frame_max: u32,
    /// The shortest message from registered memory the peer reads itself
    /// (its `Rendezvous`); 0: it reads none, or has not said.
    pub(super) peer_rendezvous_min: u32,
    /// One-sided operations posted on the current transport and not yet
    /// completed; at most `spec.max_one_sided`. Emptied on a loss.
    one_sided_inflight: BTreeSet<OpId>,
    /// Buffers of sent messages the driver handed back
    /// ([`Session::recycle`]), for the next ones.
    spare: SpareBuffers,
}

impl DataPath {
    /// The transport is gone: what was posted on it waits for replay.
    pub(super) fn transport_down(&mut self) {
        self.journal.transport_down();
        self.one_sided_inflight.clear();
    }

    /// Whether no one-sided operation waits for its completion.
    pub(super) fn one_sided_idle(&self) -> bool {
        self.one_sided_inflight.is_empty()
    }

    /// The peer's handshake says it delivered up to `seq` (applied to the
    /// journal by the caller).
    pub(super) fn raise_peer_delivered(&mut self, seq: Seq) {
        self.peer_delivered = self.peer_delivered.max(seq);
    }

    /// Keep the bytes of a performed send for a later message.
    pub(super) fn recycle(&mut self, bytes: Vec<u8>) {
        self.spare.put(bytes);
    }
}

impl Session {
    /// Operations not yet completed.
    pub fn pending_ops(&self) -> usize {
        self.data.journal.len()
    }

    /// Bytes of message payload the journal holds (for replay).
    pub fn journal_bytes(&self) -> usize {
        self.data.journal.payload_bytes()
    }

    /// The highest message sequence delivered to the application.
    pub fn last_delivered(&self) -> Seq {
        self.data.inbox.last_delivered()
    }

    /// The peer's advertised regions for the current epoch.
    pub fn peer_keys(&self) -> &PeerKeys {
        &self.data.peer_keys
    }

    /// The longest frame ([`wire::frame_messages`]) the peer's receive
    /// slots hold, from its `AdvertDone`; 0 until it has said: then one
    /// message per SEND. The driver also keeps a frame within its own send
    /// slot.
    pub fn peer_frame_max(&self) -> usize {
        self.data.peer_frame_max as usize
    }

    /// The longest message the peer's receive slots hold (its `AdvertDone`
    /// frame size less a header); `None` until it said.
    pub fn peer_max_message(&self) -> Option<usize> {
        (self.data.peer_frame_max > 0)
            .then(|| (self.data.peer_frame_max as usize).saturating_sub(wire::HEADER_LEN))
    }

    /// An empty buffer for a payload of `len` bytes of a message to
    /// [`submit`]: the allocation of a message the peer already confirmed,
    /// if a spare one fits (a new one otherwise).
    ///
    /// [`submit`]: Session::submit
    pub fn message_buffer(&mut self, len: usize) -> Vec<u8> {
        self.data.journal.message_buffer(len)
    }

    /// Whether an operation not yet completed names region `id` as its
    /// local range.
    pub fn uses_region(&self, id: crate::RegionId) -> bool {
        self.data.journal.uses_region(id)
    }

    /// Whether `l` lies inside one of the session's regions (its own, or a
    /// registration of the node it has).
    pub fn local_in_bounds(&self, l: &crate::LocalRange) -> bool {
        self.cfg.spec.regions.iter().any(|r| {
            r.id == l.region
                && l.offset
                    .checked_add(u64::from(l.len))
                    .is_some_and(|e| e <= r.len)
        })
    }

    /// Submit an operation. It completes exactly once (see
    /// [`crate::journal`]); while the session recovers it waits.
    pub fn submit(&mut self, kind: OpKind, now: Timestamp) -> Result<OpId, SessionError> {
        self.submit_with(kind, 0, now)
    }

    /// [`Session::submit`] with the application's `context`, returned in
    /// the operation's [`Completion`](crate::Completion).
    ///
    /// Refused, changing nothing: in a terminal state or while closing;
    /// for bad input (a message above `max_message`, a local range outside
    /// its region, a misaligned atomic); and with `max_outstanding`
    /// operations outstanding ([`SessionError::Full`], until the
    /// application takes completions; [`SessionEvent::Writable`](crate::SessionEvent::Writable) says when
    /// room returned).
    pub fn submit_with(
        &mut self,
        kind: OpKind,
        context: u64,
        now: Timestamp,
    ) -> Result<OpId, SessionError> {
        if self.state().is_terminal() {
            return Err(SessionError::Terminal(self.state()));
        }
        if self.closing.is_closing() {
            return Err(SessionError::Closing);
        }
        // Within this side's slots, and within the peer's once it said
        // how long they are (a message that does not fit them fails at
        // post time: `fail_oversize`).
        let max = match self.peer_max_message() {
            Some(peer) => self.max_message().min(peer),
            None => self.max_message(),
        };
        // A message the peer reads needs no room in either side's slots:
        // a work request's length bounds it.
        let fetched = u32::try_from(kind.bytes()).is_ok_and(|len| self.to_fetch(&kind, len));
        let max = if fetched { u32::MAX as usize } else { max };
        let payload = matches!(kind, OpKind::Message { .. } | OpKind::MessageFrom { .. });
        if payload && kind.bytes() > max as u64 {
            return Err(SessionError::TooLarge {
                len: usize::try_from(kind.bytes()).unwrap_or(usize::MAX),
                max,
            });
        }
        // A one-sided operation moves at most 4 GiB - 1 (a work request's
        // length is 32 bits).
        if !payload && kind.bytes() > u64::from(u32::MAX) {
            return Err(SessionError::TooLarge {
                len: usize::try_from(kind.bytes()).unwrap_or(usize::MAX),
                max: u32::MAX as usize,
            });
        }
        let atomic = kind.is_atomic();
        for l in kind.local_ranges() {
            if !self.local_in_bounds(l) || (atomic && l.len != 8) {
                return Err(SessionError::BadLocal(*l));
            }
        }
        // An atomic's 8 bytes must be 8-byte aligned, on both sides: a
        // device refuses a misaligned one only once it is posted, and the
        // transport is lost with it. Regions start page aligned, so the
        // offsets tell.
        if let OpKind::FetchAdd { local, remote, .. } | OpKind::CmpSwap { local, remote, .. } =
            &kind
        {
            for (what, offset) in [("local", local.offset), ("remote", remote.offset)] {
                if offset % 8 != 0 {
                    return Err(SessionError::Misaligned { what, offset });
                }
            }
        }
        if self.room() == 0 {
            self.out.refused_full = true;
            return Err(SessionError::Full {
                outstanding: self.outstanding(),
                max: self.cfg.spec.max_outstanding,
            });
        }
        if let OpKind::Message { payload } = &kind {
            // The caller's bytes, copied into the payload the journal keeps
            // (by `Node::send`, or by the application).
            self.counters.send_copied_bytes += payload.len() as u64;
        }
        let (op, _) = self.data.journal.submit_with(kind, context);
        if self.recovery.fast_failing() {
            let cs = self.data.journal.fail_queued(OpError::FastFail);
            self.out.complete(cs);
        } else {
            self.pump(now);
        }
        Ok(op)
    }

    /// Post what may be posted: queued and replayed operations in order,
    /// within the peer's receive credits.
    pub(super) fn pump(&mut self, _now: Timestamp) {
        if self.state() != State::Established || self.quiescing() {
            return;
        }
        let credits = u64::from(self.cfg.spec.recv_slots)
            .saturating_sub(CONTROL_RESERVE)
            .max(1);
        while let Some((op, kind, seq)) = self.data.journal.next_unposted() {
            let one_sided = !kind.is_message() || matches!(kind, OpKind::WriteImm { .. });
            if one_sided
                && self.data.one_sided_inflight.len() >= self.cfg.spec.max_one_sided as usize
            {
                break; // the send queue holds no more; order is kept
            }
            let action = match kind {
                OpKind::Flush => match self.data.journal.complete_flush() {
                    Some(c) => {
                        self.out.complete_one(c);
                        continue;
                    }
                    // Operations ahead of it: it and everything behind it
                    // wait (their completions pump again).
                    None => break,
                },
                OpKind::Message { .. } | OpKind::MessageFrom { .. } => {
                    let seq = seq.expect("messages are sequenced");
                    if seq.0.saturating_sub(self.data.peer_delivered.0) > credits {
                        break; // wait for the peer to deliver
                    }
                    let ack = self.data.inbox.last_delivered();
                    // The header only: the driver puts the payload behind
                    // it itself, copied from the journal or gathered from
                    // registered memory (`message_body`). An orphan
                    // without its payload (`Journal::is_void`) goes as a
                    // skip of its number. Payload sizes are checked at submit,
                    // sequence numbers start at 1.
                    let len = kind.bytes() as u32;
                    // A message the peer reads needs no room in its slots.
                    let fetch = self.to_fetch(kind, len);
                    if !fetch
                        && self
                            .peer_max_message()
                            .is_some_and(|peer| len as usize > peer)
                        && !self.data.journal.is_orphan(op)
                    {
                        // Submitted before the peer said its size: it
                        // fails, and its number goes as a skip.
                        tracing::warn!(session = %self.cfg.id, %op, len, "message longer than the peer's receive slots: failed");
                        if let Some(c) =
                            self.data.journal.fail_message(op, OpError::TooLargeForPeer)
                        {
                            self.out.complete_one(c);
                        }
                        continue;
                    }
                    let header = if len == 0 && self.data.journal.is_void(op) {
                        wire::MsgHeader {
                            kind: wire::MsgKind::Skip,
                            seq,
                            ack,
                            len,
                        }
                        .to_bytes()
                        .expect("a valid skip header")
                    } else if fetch {
                        // The peer reads it: the driver sends where its one
                        // range is (`wire::fetch_payload`) behind the header.
                        wire::fetch_header(seq, ack)
                    } else {
                        wire::MsgHeader {
                            kind: wire::MsgKind::Data,
                            seq,
                            ack,
                            len,
                        }
                        .to_bytes()
                        .expect("a valid data header")
                    };
                    self.data.last_ack_sent = ack;
                    Action::SendMessage {
                        epoch: self.epoch,
                        op,
                        header,
                    }
                }
                OpKind::WriteImm { local, remote, imm } => {
                    let seq = seq.expect("sequenced");
                    if seq.0.saturating_sub(self.data.peer_delivered.0) > credits {
                        break; // wait for the peer to deliver
                    }
                    let (local, remote, imm) = (local.clone(), *remote, *imm);
                    let len = local.bytes();
                    let addr = match self.data.peer_keys.translate(
                        remote,
                        len,
                        Access::REMOTE_WRITE,
                    ) {
                        Ok(addr) => addr,
                        Err(e) => {
                            // It fails alone; its number goes as a skip.
                            tracing::warn!(session = %self.cfg.id, %op, "token does not translate: {e}");
                            let err = OpError::Remote(WcStatus::RemAccessErr);
                            if let Some(c) = self.data.journal.fail_message(op, err) {
                                self.out.complete_one(c);
                            }
                            continue;
                        }
                    };
                    // The WRITE, then its notice on the same send queue:
                    // RC delivers the notice after the bytes landed.
                    self.out.act(Action::OneSided {
                        epoch: self.epoch,
                        op,
                        kind: OneSided::Write,
                        local,
                        remote: addr,
                    });
                    let ack = self.data.inbox.last_delivered();
                    let notice = wire::MsgBody::Written(wire::Written {
                        imm,
                        region: remote.region,
                        offset: remote.offset,
                        len: len as u32, // at most u32::MAX: checked at submit
                    });
                    let mut bytes = self.data.spare.take(wire::HEADER_LEN + wire::WRITTEN_LEN);
                    wire::encode_body(seq, ack, &notice, &mut bytes).expect("a valid notice");
                    self.data.last_ack_sent = ack;
                    self.data.one_sided_inflight.insert(op);
                    Action::Send {
                        epoch: self.epoch,
                        op: Some(op),
                        bytes,
                    }
                }
                OpKind::Write { local, remote } | OpKind::Read { local, remote } => {
                    let (kind, right) = if matches!(kind, OpKind::Write { .. }) {
                        (OneSided::Write, Access::REMOTE_WRITE)
                    } else {
                        (OneSided::Read, Access::REMOTE_READ)
                    };
                    let local = local.clone();
                    match self.data.peer_keys.translate(*remote, local.bytes(), right) {
                        Ok(addr) => Action::OneSided {
                            epoch: self.epoch,
                            op,
                            kind,
                            local,
                            remote: addr,
                        },
                        Err(e) => {
                            if self.key_error(op, e) {
                                continue;
                            }
                            break;
                        }
                    }
                }
                OpKind::FetchAdd { local, remote, add } => {
                    let local = *local;
                    let add = *add;
                    match self
                        .data
                        .peer_keys
                        .translate(*remote, 8, Access::REMOTE_ATOMIC)
                    {
                        Ok(addr) => Action::OneSided {
                            epoch: self.epoch,
                            op,
                            kind: OneSided::FetchAdd { add },
                            local: local.into(),
                            remote: addr,
                        },
                        Err(e) => {
                            if self.key_error(op, e) {
                                continue;
                            }
                            break;
                        }
                    }
                }
                OpKind::CmpSwap {
                    local,
                    remote,
                    compare,
                    swap,
                } => {
                    let (local, compare, swap) = (*local, *compare, *swap);
                    match self
                        .data
                        .peer_keys
                        .translate(*remote, 8, Access::REMOTE_ATOMIC)
                    {
                        Ok(addr) => Action::OneSided {
                            epoch: self.epoch,
                            op,
                            kind: OneSided::CmpSwap { compare, swap },
                            local: local.into(),
                            remote: addr,
                        },
                        Err(e) => {
                            if self.key_error(op, e) {
                                continue;
                            }
                            break;
                        }
                    }
                }
            };
            self.data.journal.mark_posted(op);
            if matches!(action, Action::OneSided { .. }) {
                self.data.one_sided_inflight.insert(op);
            }
            self.out.act(action);
        }
    }

    /// `op`'s token does not translate through the peer's advertisement of
    /// this epoch: it fails alone and is never posted, with the error the
    /// peer's device would have given it (`Failed(Remote(REM_ACCESS_ERR))`),
    /// and leaves the journal, so the pump moves on to the next operation.
    /// Returns whether it left (always, for the operation `next_unposted`
    /// returns; a `false` stops the pump rather than spin on it).
    fn key_error(&mut self, op: OpId, e: KeyError) -> bool {
        // Only called while Established, when the advertisement is complete.
        debug_assert!(!matches!(e, KeyError::NotReady(_)), "{e}");
        tracing::warn!(session = %self.cfg.id, %op, "token does not translate: {e}");
        let err = OpError::Remote(WcStatus::RemAccessErr);
        match self.data.journal.fail_unpostable(op, err) {
            Some(c) => {
                self.out.complete_one(c);
                true
            }
            None => {
                debug_assert!(false, "{op} stayed in the journal");
                tracing::error!(session = %self.cfg.id, %op, "unpostable operation stayed in the journal");
                false
            }
        }
    }

    /// A send-queue completion of `epoch`; `op` is what the driver was
    /// given in the action (None for control messages).
    pub fn handle_send_completion(
        &mut self,
        epoch: Epoch,
        op: Option<OpId>,
        status: WcStatus,
        now: Timestamp,
    ) {
        if epoch != self.epoch {
            return;
        }
        let freed = op.is_some_and(|op| self.data.one_sided_inflight.remove(&op));
        match status {
            WcStatus::Success => {
                if let Some(op) = op {
                    if let Some(c) = self.data.journal.on_success(op) {
                        self.out.complete_one(c);
                    }
                }
            }
            WcStatus::RemAccessErr
            | WcStatus::RemInvReqErr
            | WcStatus::LocProtErr
            | WcStatus::LocLenErr
            | WcStatus::RemOpErr => {
                // The operation itself is bad: it fails alone, and the QP
                // is dead, so the transport is rebuilt.
                if let Some(op) = op {
                    if let Some(c) = self.data.journal.on_remote_error(op, status) {
                        self.out.complete_one(c);
                    }
                }
                self.lose_transport(DownCause::Completion(status), now);
            }
            _ => self.lose_transport(DownCause::Completion(status), now),
        }
        // Only a finished one-sided operation makes room for queued work
        // (a message's send completion frees no credit; after a loss the
        // session is not established).
        if freed {
            self.pump(now);
            self.settle_quiesce(now);
        }
        self.settle_closing(now);
    }

    /// A receive completion of `epoch` with the bytes received: a frame of
    /// one or more messages ([`wire::frame_messages`]), handled in order.
    /// A malformed message is dropped with the rest of its frame.
    pub fn handle_received(&mut self, epoch: Epoch, bytes: &[u8], now: Timestamp) {
        self.handle_received_into(epoch, bytes, now, &mut |_, _| false);
    }

    /// [`Session::handle_received`], offering each message to deliver to
    /// `place` first: it returns `true` when it took the payload (the
    /// driver copied it into a buffer the application posted), `false` to
    /// leave it to the session's own delivery queue
    /// ([`Session::poll_delivery`]). A message is offered only while that
    /// queue is empty, so deliveries stay in order across the two.
    pub fn handle_received_into(
        &mut self,
        epoch: Epoch,
        bytes: &[u8],
        now: Timestamp,
        place: &mut dyn FnMut(Seq, Arrival<'_>) -> bool,
    ) {
        if bytes.is_empty() {
            // No message is empty: a standby keepalive that trailed the
            // standby's promotion (`handle_standby_keepalive`), or a slot
            // the driver could not read.
            return;
        }
        if epoch != self.epoch && !self.peer_promoted(epoch, now) {
            return;
        }
        self.keepalive_heard(now);
        let mut credited = false;
        for (i, msg) in wire::frame_messages(bytes).enumerate() {
            let handled = msg.and_then(wire::decode_typed).map(|(h, body)| {
                if i > 0 {
                    self.counters.packed += 1;
                }
                self.handle_message(h, body, now, place)
            });
            match handled {
                Ok(Some(c)) => credited |= c,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(session = %self.cfg.id, "malformed message dropped with the rest of its frame: {e}");
                    break;
                }
            }
        }
        // Confirmed deliveries give credits back: queued messages may go.
        // (The end of a resync pumps by itself.)
        if credited {
            self.pump(now);
        }
        self.settle_closing(now);
    }

    /// One message of a received frame. Returns whether its ack confirmed
    /// new deliveries, or `None` if the frame ends here (the peer's
    /// close).
    fn handle_message(
        &mut self,
        h: wire::MsgHeader,
        body: MsgBody<'_>,
        now: Timestamp,
        place: &mut dyn FnMut(Seq, Arrival<'_>) -> bool,
    ) -> Option<bool> {
        if let MsgBody::Promote {
            epoch,
            last_delivered,
        } = body
        {
            // Before its header's ack: the journal resumes from it. The
            // advertisements that follow it in its frame are handled next.
            self.on_promote(epoch, last_delivered, now);
            return Some(false);
        }
        let credited = h.ack > self.data.peer_delivered;
        if credited {
            self.data.peer_delivered = h.ack;
            let out = &mut self.out;
            self.data
                .journal
                .on_peer_delivered_with(h.ack, |c| out.complete_one(c));
        }
        match body {
            MsgBody::Data(payload) => {
                if self.accept_in_order(h.seq) {
                    self.counters.delivered += 1;
                    self.counters.receive_copied_bytes += payload.len() as u64;
                    if !(self.out.no_deliveries_waiting()
                        && place(h.seq, Arrival::Message(payload)))
                    {
                        self.out.deliver(h.seq, payload);
                    }
                    self.maybe_ack(now);
                }
            }
            MsgBody::Written(w) => {
                if self.accept_in_order(h.seq) {
                    self.counters.delivered += 1;
                    if !(self.out.no_deliveries_waiting() && place(h.seq, Arrival::Written(w))) {
                        self.out.deliver_written(h.seq, w);
                    }
                    self.maybe_ack(now);
                }
            }
            MsgBody::Skip => {
                if self.accept_in_order(h.seq) {
                    self.maybe_ack(now);
                }
            }
            MsgBody::Fetch(source) => {
                // Taken in order now (the messages behind it queue behind
                // it), delivered once the driver read it (`fetch_landed`).
                if self.accept_in_order(h.seq) {
                    self.data.inbox.begin_fetch(h.seq);
                    self.out.deliver_fetch(h.seq, source, self.epoch);
                }
            }
            MsgBody::Adverts(adverts) => {
                for a in adverts {
                    self.data.peer_keys.insert(
                        a.epoch,
                        a.region,
                        RemoteRegion {
                            addr: a.addr,
                            len: a.len,
                            rkey: a.rkey,
                            access: Access::from_bits_truncate(a.access),
                        },
                    );
                }
            }
            MsgBody::Rendezvous { min } => {
                self.data.peer_rendezvous_min = min;
            }
            MsgBody::AdvertDone { epoch, frame_max } => {
                self.data.peer_frame_max = frame_max;
                if self.data.peer_keys.finish(epoch)
                    && !self.standby.is_promoting()
                    && matches!(self.state(), State::Resyncing | State::Connecting)
                {
                    self.finish_resync(now);
                }
            }
            // Handled above, before the ack.
            MsgBody::Ack | MsgBody::KeepaliveReply { .. } | MsgBody::Promote { .. } => {}
            MsgBody::Close => {
                // The peer closed on purpose: no recovery, our half ends too.
                tracing::info!(session = %self.cfg.id, "peer closed the session");
                self.close_inner(now, false);
                return None;
            }
            MsgBody::Quiesce { purpose } => self.on_quiesce(purpose, now),
            MsgBody::Quiesced => self.on_quiesced(now),
            MsgBody::MoveRequest => self.on_move_request(now),
            MsgBody::Keepalive { nonce } => self.answer_keepalive(nonce),
        }
        Some(credited)
    }

    /// Whether sequenced message `seq` is the next to deliver (a duplicate
    /// is dropped; a gap is a protocol violation, logged and dropped).
    fn accept_in_order(&mut self, seq: Seq) -> bool {
        match self.data.inbox.accept(seq) {
            InboxAccept::Deliver => true,
            InboxAccept::Duplicate => false,
            InboxAccept::Gap { expected } => {
                tracing::error!(session = %self.cfg.id, got = %seq, %expected, "sequence gap: protocol violation");
                false
            }
        }
    }

    /// Queue an unsequenced control message; `build` encodes it with the
    /// piggybacked acknowledgement.
    pub(super) fn send_control(
        &mut self,
        build: impl FnOnce(Seq, &mut Vec<u8>) -> Result<(), WireError>,
    ) {
        let mut bytes = self.data.spare.take(wire::HEADER_LEN + 16);
        let ack = self.data.inbox.last_delivered();
        if let Err(e) = build(ack, &mut bytes) {
            // Sizes are checked when the session is created: a bug.
            debug_assert!(false, "control message: {e}");
            tracing::error!(session = %self.cfg.id, "control message not encodable: {e}");
            return;
        }
        self.data.last_ack_sent = ack;
        self.out.act(Action::Send {
            epoch: self.epoch,
            op: None,
            bytes,
        });
    }

    /// Acknowledge at once after a quarter of the receive slots, else
    /// within `ack_delay` (unless an outgoing message carries it first).
    ///
    /// The ack-delay timer is lazy: a message that carries the
    /// acknowledgement leaves it armed, and when it fires it acknowledges
    /// only what no message carried since ([`Self::ack_delay_passed`]). So
    /// a busy session arms it once per `ack_delay`, not once per message
    /// (which moved the session's deadline, and the node's index of
    /// deadlines, twice per delivery); a delivery that finds it armed is
    /// acknowledged sooner than `ack_delay`, never later.
    pub(super) fn maybe_ack(&mut self, now: Timestamp) {
        let delivered = self.data.inbox.last_delivered();
        let every = (u64::from(self.cfg.spec.recv_slots) / 4).max(1);
        if delivered.0.saturating_sub(self.data.last_ack_sent.0) >= every {
            self.send_ack();
        } else if delivered > self.data.last_ack_sent
            && self.timers.get(TimerKind::AckDelay).is_none()
        {
            self.timers
                .set(TimerKind::AckDelay, now + self.cfg.policy.ack_delay);
        }
    }

    /// The peer's handshake confirmed our messages up to `seq` (a first
    /// connection: nothing to replay): complete what it confirms.
    pub(super) fn confirm_delivered(&mut self, seq: Seq) {
        let out = &mut self.out;
        self.data
            .journal
            .on_peer_delivered_with(seq, |c| out.complete_one(c));
        self.data.raise_peer_delivered(seq);
    }

    /// The ack delay passed: acknowledge what was delivered since the last
    /// message we sent, unless the session is not connected.
    pub(super) fn ack_delay_passed(&mut self) {
        if matches!(self.state(), State::Established | State::Resyncing)
            && self.data.inbox.last_delivered() > self.data.last_ack_sent
        {
            self.send_ack();
        }
    }

    /// Send a bare acknowledgement now.
    pub(super) fn send_ack(&mut self) {
        self.send_control(|ack, out| {
            wire::encode_ack(ack, out);
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests;
