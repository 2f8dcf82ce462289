//! The data path: [`Session::submit`], posting messages and one-sided
//! operations in order within the peer's receive credits, their send
//! completions, received messages (deliveries, acknowledgements,
//! advertisements, keepalives, close) and the control messages and acks a
//! session sends.

use relink_fabric::{Access, Timestamp, WcStatus};

use super::{Action, OneSided, Session, SessionError};
use crate::ids::{Epoch, OpId, Seq};
use crate::inbox::Accept as InboxAccept;
use crate::keys::{KeyError, RemoteRegion};
use crate::op::{OpError, OpKind};
use crate::state::{DownCause, State};
use crate::timers::TimerKind;
use crate::wire::{self, MsgBody, WireError};

/// Receive slots kept free of data for control messages (acks, keepalives,
/// advertisements).
const CONTROL_RESERVE: u64 = 8;

impl Session {
    /// An empty buffer for a payload of `len` bytes of a message to
    /// [`submit`]: the allocation of a message the peer already confirmed,
    /// if a spare one fits (a new one otherwise).
    ///
    /// [`submit`]: Session::submit
    pub fn message_buffer(&mut self, len: usize) -> Vec<u8> {
        self.journal.message_buffer(len)
    }

    /// Submit an operation. It completes exactly once (see
    /// [`crate::journal`]); while the session recovers it waits.
    pub fn submit(&mut self, kind: OpKind, now: Timestamp) -> Result<OpId, SessionError> {
        if self.state().is_terminal() {
            return Err(SessionError::Terminal(self.state()));
        }
        if self.closing.is_some() {
            return Err(SessionError::Closing);
        }
        if let OpKind::Message { payload } = &kind {
            if payload.len() > self.max_message() {
                return Err(SessionError::TooLarge {
                    len: payload.len(),
                    max: self.max_message(),
                });
            }
        }
        let local = match &kind {
            OpKind::Message { .. } => None,
            OpKind::Write { local, .. }
            | OpKind::Read { local, .. }
            | OpKind::FetchAdd { local, .. }
            | OpKind::CmpSwap { local, .. } => Some(*local),
        };
        if let Some(l) = local {
            let ok = self.cfg.spec.regions.iter().any(|r| {
                r.id == l.region
                    && l.offset
                        .checked_add(u64::from(l.len))
                        .is_some_and(|e| e <= r.len)
            });
            let atomic = matches!(kind, OpKind::FetchAdd { .. } | OpKind::CmpSwap { .. });
            if !ok || (atomic && l.len != 8) {
                return Err(SessionError::BadLocal(l));
            }
        }
        let (op, _) = self.journal.submit(kind);
        if self.fast_failing {
            let cs = self.journal.fail_queued(OpError::FastFail);
            self.complete(cs);
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
        while let Some((op, kind, seq)) = self.journal.next_unposted() {
            if !kind.is_message()
                && self.one_sided_inflight.len() >= self.cfg.spec.max_one_sided as usize
            {
                break; // the send queue holds no more; order is kept
            }
            let action = match kind {
                OpKind::Message { payload } => {
                    let seq = seq.expect("messages are sequenced");
                    if seq.0.saturating_sub(self.peer_delivered.0) > credits {
                        break; // wait for the peer to deliver
                    }
                    let ack = self.inbox.last_delivered();
                    // The header only: the driver copies the payload from
                    // the journal into the send buffer itself
                    // (`message_payload`). Payload sizes are checked at
                    // submit, sequence numbers start at 1.
                    let header = wire::MsgHeader {
                        kind: wire::MsgKind::Data,
                        seq,
                        ack,
                        len: payload.len() as u32,
                    }
                    .to_bytes()
                    .expect("a valid data header");
                    self.last_ack_sent = ack;
                    self.timers.stop(TimerKind::AckDelay);
                    Action::SendMessage {
                        epoch: self.epoch,
                        op,
                        header,
                    }
                }
                OpKind::Write { local, remote } | OpKind::Read { local, remote } => {
                    let (kind, right) = if matches!(kind, OpKind::Write { .. }) {
                        (OneSided::Write, Access::REMOTE_WRITE)
                    } else {
                        (OneSided::Read, Access::REMOTE_READ)
                    };
                    let local = *local;
                    match self
                        .peer_keys
                        .translate(*remote, u64::from(local.len), right)
                    {
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
                    match self.peer_keys.translate(*remote, 8, Access::REMOTE_ATOMIC) {
                        Ok(addr) => Action::OneSided {
                            epoch: self.epoch,
                            op,
                            kind: OneSided::FetchAdd { add },
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
                OpKind::CmpSwap {
                    local,
                    remote,
                    compare,
                    swap,
                } => {
                    let (local, compare, swap) = (*local, *compare, *swap);
                    match self.peer_keys.translate(*remote, 8, Access::REMOTE_ATOMIC) {
                        Ok(addr) => Action::OneSided {
                            epoch: self.epoch,
                            op,
                            kind: OneSided::CmpSwap { compare, swap },
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
            };
            self.journal.mark_posted(op);
            if matches!(action, Action::OneSided { .. }) {
                self.one_sided_inflight.insert(op);
            }
            self.actions.push_back(action);
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
        match self.journal.fail_unpostable(op, err) {
            Some(c) => {
                self.completions.push_back(c);
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
        let freed = op.is_some_and(|op| self.one_sided_inflight.remove(&op));
        match status {
            WcStatus::Success => {
                if let Some(op) = op {
                    if let Some(c) = self.journal.on_success(op) {
                        self.completions.push_back(c);
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
                    if let Some(c) = self.journal.on_remote_error(op, status) {
                        self.completions.push_back(c);
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
        if bytes.is_empty() {
            // No message is empty: a standby keepalive that trailed the
            // standby's promotion (`handle_standby_keepalive`), or a slot
            // the driver could not read.
            return;
        }
        if epoch != self.epoch && !self.peer_promoted(epoch, now) {
            return;
        }
        if let Some(d) = self.cfg.policy.keepalive_deadline() {
            if self.timers.get(TimerKind::KeepaliveDeadline).is_some() {
                self.timers.set(TimerKind::KeepaliveDeadline, now + d);
            }
        }
        let mut credited = false;
        for (i, msg) in wire::frame_messages(bytes).enumerate() {
            let handled = msg.and_then(wire::decode_typed).map(|(h, body)| {
                if i > 0 {
                    self.counters.packed += 1;
                }
                self.handle_message(h, body, now)
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
        let credited = h.ack > self.peer_delivered;
        if credited {
            self.peer_delivered = h.ack;
            let completions = &mut self.completions;
            self.journal
                .on_peer_delivered_with(h.ack, |c| completions.push_back(c));
        }
        match body {
            MsgBody::Data(payload) => match self.inbox.accept(h.seq) {
                InboxAccept::Deliver => {
                    self.counters.delivered += 1;
                    let mut bytes = self.delivery_spare.take(payload.len());
                    bytes.extend_from_slice(payload);
                    self.deliveries.push_back((h.seq, bytes));
                    self.maybe_ack(now);
                }
                InboxAccept::Duplicate => {}
                InboxAccept::Gap { expected } => {
                    tracing::error!(session = %self.cfg.id, got = %h.seq, %expected, "sequence gap: protocol violation");
                }
            },
            MsgBody::Adverts(adverts) => {
                for a in adverts {
                    self.peer_keys.insert(
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
            MsgBody::AdvertDone { epoch, frame_max } => {
                self.peer_frame_max = frame_max;
                if self.peer_keys.finish(epoch)
                    && !self.promoting
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
            MsgBody::Keepalive { nonce } => {
                self.send_control(|ack, out| {
                    wire::encode_keepalive_reply(ack, nonce, out);
                    Ok(())
                });
            }
        }
        Some(credited)
    }

    /// Queue an unsequenced control message; `build` encodes it with the
    /// piggybacked acknowledgement.
    pub(super) fn send_control(
        &mut self,
        build: impl FnOnce(Seq, &mut Vec<u8>) -> Result<(), WireError>,
    ) {
        let mut bytes = self.spare.take(wire::HEADER_LEN + 16);
        let ack = self.inbox.last_delivered();
        if let Err(e) = build(ack, &mut bytes) {
            // Sizes are checked when the session is created: a bug.
            debug_assert!(false, "control message: {e}");
            tracing::error!(session = %self.cfg.id, "control message not encodable: {e}");
            return;
        }
        self.last_ack_sent = ack;
        self.timers.stop(TimerKind::AckDelay);
        self.actions.push_back(Action::Send {
            epoch: self.epoch,
            op: None,
            bytes,
        });
    }

    /// Acknowledge at once after a quarter of the receive slots, else
    /// within `ack_delay` (unless an outgoing message carries it first).
    fn maybe_ack(&mut self, now: Timestamp) {
        let delivered = self.inbox.last_delivered();
        let every = (u64::from(self.cfg.spec.recv_slots) / 4).max(1);
        if delivered.0.saturating_sub(self.last_ack_sent.0) >= every {
            self.send_ack();
        } else if delivered > self.last_ack_sent && self.timers.get(TimerKind::AckDelay).is_none() {
            self.timers
                .set(TimerKind::AckDelay, now + self.cfg.policy.ack_delay);
        }
    }

    /// Send a bare acknowledgement now.
    pub(super) fn send_ack(&mut self) {
        self.timers.stop(TimerKind::AckDelay);
        self.send_control(|ack, out| {
            wire::encode_ack(ack, out);
            Ok(())
        });
    }
}
