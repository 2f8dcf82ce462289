//! What a session hands out: the [`Action`]s its driver performs, the
//! [`SessionEvent`]s observers see, its [`Counters`], and the `poll_*`
//! calls that take them (with the operation completions and the delivered
//! messages).

use std::collections::VecDeque;
use std::time::Duration;

use relink_fabric::{DeviceId, RemoteAddr, Timestamp};

use super::{Path, RequestToken, Session};
use crate::buffers::SpareBuffers;
use crate::ids::{Epoch, OpId, Seq};
use crate::op::{Completion, LocalSgl};
use crate::reason::{AttemptFailure, DownCause, PeerLostReason};
use crate::state::Transition;
use crate::wire;
use crate::wire::Written;

/// One-sided operation kinds as posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OneSided {
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// FETCH_ADD.
    FetchAdd {
        /// Added (wrapping) to the remote 8-byte word; the word's old value
        /// lands in the local range.
        add: u64,
    },
    /// CMP_SWAP.
    CmpSwap {
        /// The value the remote word must hold for the swap to happen.
        compare: u64,
        /// Stored in the remote word if it held `compare`; the old value
        /// lands in the local range either way.
        swap: u64,
    },
}

/// What the core asks its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Destroy every provider object of `epoch` (destroy calls only; an
    /// object already released with its device is fine).
    TearDown {
        /// The epoch to tear down.
        epoch: Epoch,
    },
    /// Initiator: resolve `path`, build the session's resources
    /// ([`crate::resources::build_plan`] of [`Session::spec`]) on the
    /// resolved device, and connect with `private_data`. Report the result
    /// with [`Session::handle_connected`], [`Session::handle_rejected`] or
    /// [`Session::handle_attempt_failed`].
    Connect {
        /// The epoch the new transport belongs to.
        epoch: Epoch,
        /// The path to use.
        path: Path,
        /// CM private data (≤ 56 bytes).
        private_data: Vec<u8>,
    },
    /// Target: build the resources on the request's device and accept it.
    Accept {
        /// The epoch the new transport belongs to.
        epoch: Epoch,
        /// The connection request to accept, as the driver named it.
        request: RequestToken,
        /// CM private data (≤ 196 bytes).
        private_data: Vec<u8>,
    },
    /// Target: refuse a request.
    Reject {
        /// The connection request to refuse.
        request: RequestToken,
        /// CM private data (≤ 148 bytes).
        private_data: Vec<u8>,
    },
    /// Post a SEND of `bytes` (an encoded message: a control message, an
    /// application message goes as [`Action::SendMessage`]). `op` is the
    /// application operation it carries, if any; its completion is
    /// reported with [`Session::handle_send_completion`].
    Send {
        /// The transport to post on.
        epoch: Epoch,
        /// The application operation carried: `Some` for a data message,
        /// `None` for a control message (ack, advertisement, keepalive,
        /// close).
        op: Option<OpId>,
        /// The encoded message, header and payload; hand the buffer back
        /// with [`Session::recycle`] once posted.
        bytes: Vec<u8>,
    },
    /// Post a SEND of an application message: `header` (the encoded
    /// message header) followed by the payload of `op` as the journal
    /// keeps it ([`Session::message_payload`]). Copying both into the send
    /// buffer is the message's one copy on the way out; `op`'s completion
    /// is reported with [`Session::handle_send_completion`].
    SendMessage {
        /// The transport to post on.
        epoch: Epoch,
        /// The message's operation.
        op: OpId,
        /// The encoded header ([`wire::HEADER_LEN`] bytes).
        header: [u8; wire::HEADER_LEN],
    },
    /// Post a one-sided operation.
    OneSided {
        /// The transport to post on.
        epoch: Epoch,
        /// The application operation; report its work completion with
        /// [`Session::handle_send_completion`].
        op: OpId,
        /// Write, read, or an atomic with its operands.
        kind: OneSided,
        /// Local memory: the source of a write (gathered in order), where a
        /// read's data (scattered in order) or an atomic's old value (one
        /// range of 8 bytes) lands.
        local: LocalSgl,
        /// The peer's memory: the operation's token translated through the
        /// peer's advertisements of this epoch.
        remote: RemoteAddr,
    },
    /// Disconnect the transport of `epoch` (a close). The work requests
    /// asked for before it — the goodbye of [`Session::close`] above all —
    /// must leave first: the driver posts them, and disconnects once they
    /// completed (a disconnect moves the QP to the error state, which on
    /// real devices flushes a request not sent yet), or after a bound of
    /// its choosing, or at once if the transport is lost meanwhile. The
    /// [`Action::TearDown`] of the same epoch that follows leaves the
    /// transport to that disconnect.
    Disconnect {
        /// The transport to disconnect (the current one).
        epoch: Epoch,
    },
    /// Initiator: as [`Action::Connect`], for a standby transport
    /// ([`Policy::standby`](crate::policy::Policy::standby)): built and
    /// connected next to the current one, which stays. Its receives land
    /// in a receive area of their own (a message on one transport never
    /// overwrites one of the other). Reported as for a connect, with its
    /// epoch.
    ConnectStandby {
        /// The standby's epoch.
        epoch: Epoch,
        /// The path to use (another device than the current transport's).
        path: Path,
        /// CM private data (≤ 56 bytes).
        private_data: Vec<u8>,
    },
    /// Target: as [`Action::Accept`], for a standby transport kept next
    /// to the current one (its own receive area, as
    /// [`Action::ConnectStandby`]).
    AcceptStandby {
        /// The standby's epoch.
        epoch: Epoch,
        /// The connection request to accept, as the driver named it.
        request: RequestToken,
        /// CM private data (≤ 196 bytes).
        private_data: Vec<u8>,
    },
    /// The standby transport of `epoch` is the current one from now on
    /// (the old one's [`Action::TearDown`] came first): work requests of
    /// `epoch` go to it. Messages it received already are handed to the
    /// core as usual.
    Promote {
        /// The standby's epoch.
        epoch: Epoch,
    },
    /// A keepalive on the idle standby transport of `epoch`
    /// ([`Policy::keepalive`](crate::policy::Policy::keepalive)): post a
    /// SEND with immediate data `imm` and no payload on it (no send slot,
    /// a receive at the peer). Such a receive on a standby (no bytes, an
    /// immediate) is the peer's keepalive: hand it to
    /// [`Session::handle_standby_keepalive`]. Anything else received on a
    /// standby is the peer's promotion
    /// ([`Session::handle_standby_traffic`]). A failed post or completion
    /// is the standby's loss ([`Session::handle_transport_down`] with its
    /// epoch).
    ProbeStandby {
        /// The standby's epoch.
        epoch: Epoch,
        /// The immediate data to send.
        imm: u32,
    },
}

/// What observers see. More kinds of events may come: a match needs a
/// wildcard arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionEvent {
    /// A state change.
    Transition(Transition),
    /// The transport was lost.
    DeviceLost {
        /// What ended it: a device or CM event, a completion error, a
        /// timeout.
        cause: DownCause,
    },
    /// A manual session
    /// ([`RecoveryMode::Manual`](crate::policy::RecoveryMode::Manual))
    /// lost its transport and holds: its operations stay pending and it
    /// makes no attempt until the application calls
    /// [`Session::resume`](super::Session::resume) (or closes it, or the
    /// give-up deadline passes). Reported again whenever the candidates
    /// change (a device comes or goes, the device match changes).
    AwaitingDecision {
        /// What ended the transport.
        cause: DownCause,
        /// The paths a present device can carry at present, in order (empty:
        /// none yet).
        candidates: Vec<super::Candidate>,
    },
    /// A reconnection attempt started.
    Recovering {
        /// Attempt number (from 1).
        attempt: u32,
    },
    /// A connection attempt failed — of the first connect or of a
    /// recovery, on either side — or none could start (`NoDevice`). The
    /// session tries again after the backoff (at once on a device event,
    /// for `NoDevice`) until its give-up deadline: `first_connect_tmo`
    /// while it was never established, `ctrl_loss_tmo` after a loss. At
    /// the deadline [`SessionEvent::GaveUp`] follows.
    AttemptFailed {
        /// The attempt's number in its outage, from 1 (a target counts the
        /// connection it accepted); for `NoDevice`, the number of the
        /// attempt that could not start, which the next one takes.
        attempt: u32,
        /// Why it failed.
        reason: AttemptFailure,
    },
    /// Traffic flows again.
    Resumed {
        /// From the loss (or the first connect's first failure) to the
        /// resume.
        downtime: Duration,
        /// Operations this resume posted again: they were on the lost
        /// transport and not confirmed.
        replayed: u64,
        /// Duplicate messages the receiver dropped so far.
        deduplicated: u64,
        /// The device now carrying the session.
        device: Option<DeviceId>,
    },
    /// The give-up deadline passed (`first_connect_tmo` for a session
    /// never established, `ctrl_loss_tmo` after a loss): every pending
    /// operation completed (failed, or `Indeterminate`), the transition to
    /// `Failed` follows.
    GaveUp,
    /// The peer's relink refused a connection attempt (a Hello or a
    /// Resume) and said why. Busy and StaleEpoch are retried under the
    /// policy (`retrying`); every other reason is final
    /// ([`RefuseReason::is_final`](crate::wire::RefuseReason::is_final)):
    /// the session fails at once (a [`SessionEvent::PeerLost`] and the
    /// transition to `Failed` follow), the first connect included, instead
    /// of retrying until its give-up deadline.
    Refused {
        /// The reason the peer gave.
        reason: crate::wire::RefuseReason,
        /// Whether the session tries again (after the backoff).
        retrying: bool,
    },
    /// The peer lost its state (new incarnation) or refused us for good:
    /// the transition to `Failed` follows, pending operations fail with
    /// `PeerLost`.
    PeerLost {
        /// What showed it: a new incarnation, or a final refusal.
        reason: PeerLostReason,
    },
    /// A planned outage begins ([`Session::suspend`],
    /// [`Session::drain_device`], or the peer's): this end posts nothing
    /// new — operations submitted meanwhile wait — until the session is
    /// established again (a drain) or suspended (a suspend).
    Quiescing {
        /// What the outage is for.
        plan: super::Plan,
    },
    /// The session is suspended ([`State::Suspended`](crate::state::State::Suspended)):
    /// by this end's [`Session::suspend`], or by the initiator's (at the
    /// target). No attempt and no give-up deadline until the initiator
    /// resumes it ([`Session::resume`]).
    Suspended,
    /// A drain found no other present path for the session: it stays on
    /// the drained device (and is lost with it, then recovers as usual).
    DrainBlocked,
    /// The session is closed: by this side (`close`, a graceful close,
    /// a shutdown, a dropped node) or by the peer's goodbye (its side was
    /// closed and said so). Never a device loss: a loss is
    /// [`SessionEvent::DeviceLost`] and recovery.
    Disconnected,
    /// A standby connection is up on `device`
    /// ([`Policy::standby`](crate::policy::Policy::standby)): a loss of
    /// the current one switches to it.
    StandbyUp {
        /// The device carrying the standby.
        device: DeviceId,
    },
    /// The standby connection that was up ([`SessionEvent::StandbyUp`])
    /// is gone; the current one is unaffected. Reported once per standby,
    /// at each end that had it up, with where it was and why it went:
    ///
    /// - [`StandbyLoss::Silent`](super::StandbyLoss::Silent): no
    ///   keepalive heard on it for two
    ///   [`Policy::keepalive`](crate::policy::Policy::keepalive) periods —
    ///   its peer's half or its path died without telling this end, or the
    ///   peer could not send in time (a machine too busy to run it for two
    ///   periods); counted in [`Counters::standbys_silent`].
    /// - [`StandbyLoss::Down`](super::StandbyLoss::Down): its device or
    ///   connection was lost (the [`DownCause`] says how).
    /// - [`StandbyLoss::Released`](super::StandbyLoss::Released): the
    ///   session let it go (a drain, a suspend, the knob turned off, the
    ///   session's end, ...).
    ///
    /// Until a new one is up, a loss of the current connection is
    /// recovered by reconnecting (with connection attempts), not by a
    /// switch. The initiator builds a new one when a device allows (after
    /// a backoff for a silent one or one whose connection was lost);
    /// [`SessionEvent::StandbyUp`] follows.
    StandbyLost {
        /// The device that carried it.
        device: DeviceId,
        /// The initiator's path it took (one of the session's paths, as
        /// given to the connect); `None` at a target, which only accepted
        /// it (on `device`).
        path: Option<Path>,
        /// Why it went.
        cause: super::StandbyLoss,
    },
    /// The session takes operations again: a [`Session::submit`] was
    /// refused with [`SessionError::Full`](super::SessionError::Full), and
    /// since then the application took a completion that brought the
    /// operations outstanding below the session's `max_outstanding`. Once
    /// per refusal.
    Writable,
}

/// Counters, for observability. Read-only outside this crate (more may
/// come).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Transport losses.
    pub losses: u64,
    /// Connection attempts this side made, the first connect's included:
    /// an initiator's connects and reconnects. A target makes none (it
    /// accepts), so its count stays 0.
    pub attempts: u64,
    /// Outages that ended with the session established (again).
    pub resumes: u64,
    /// Operations posted again after a loss, over every resume.
    pub replayed: u64,
    /// Duplicate messages (replays of ones already delivered) the inbox
    /// dropped.
    pub deduplicated: u64,
    /// Region advertisements sent (each advertised region, once per epoch).
    pub adverts_sent: u64,
    /// Total time without a transport, in nanoseconds.
    pub downtime_ns: u64,
    /// Messages delivered to the application.
    pub delivered: u64,
    /// Messages received in a frame behind another message (sharing its
    /// SEND and receive slot, [`wire::frame_messages`](crate::wire::frame_messages)).
    pub packed: u64,
    /// Planned outages taken (drains and suspends): connections taken down
    /// on purpose with nothing in flight, not counted in `losses`.
    pub planned: u64,
    /// Operations completed (each once, whatever its outcome), taken by the
    /// application or waiting for it.
    pub completed: u64,
    /// Standby connections established
    /// ([`Policy::standby`](crate::policy::Policy::standby)).
    pub standbys: u64,
    /// Losses that switched to the standby (with no connection attempt);
    /// each is counted in `losses` and `resumes` too.
    pub failovers: u64,
    /// Standbys that went silent: no keepalive heard on them for two
    /// keepalive periods; each was torn down (a
    /// [`SessionEvent::StandbyLost`] with
    /// [`StandbyLoss::Silent`](super::StandbyLoss::Silent)) and a new one
    /// built when a device allows.
    pub standbys_silent: u64,
    /// Keepalives (probes and replies) sent on standby transports.
    pub standby_keepalives_sent: u64,
    /// Keepalives (probes and replies) received on standby transports.
    pub standby_keepalives_received: u64,
    /// Bytes of application payload relink copied to send messages: into
    /// the journal (a message of bytes, [`OpKind::Message`](crate::OpKind::Message))
    /// and from there into a send slot ([`Session::count_copied`], by the
    /// driver), replays included. A message from registered memory
    /// ([`OpKind::MessageFrom`](crate::OpKind::MessageFrom)) adds nothing.
    pub send_copied_bytes: u64,
    /// Bytes of application payload relink copied to deliver messages:
    /// from a receive slot into a delivery or a posted buffer, and from a
    /// delivery into a buffer posted after it arrived.
    pub receive_copied_bytes: u64,
    /// Messages this side read from the peer's memory into a posted
    /// receive ([`wire::MsgKind::Fetch`], a rendezvous): delivered with no
    /// copy, counted in `delivered` too.
    pub fetched: u64,
    /// Reads of such messages given up with their transport (each read
    /// again after the replay).
    pub fetches_rewound: u64,
}

/// A delivery: a message's bytes, or the notice of a WRITE with immediate
/// data ([`Session::poll_delivered`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    /// A message.
    Message(Vec<u8>),
    /// A WRITE with immediate data landed.
    Written(Written),
    /// A message for the receiver's driver to read from the peer's
    /// registered memory ([`wire::MsgKind::Fetch`]), arrived on the
    /// transport of `epoch`: it blocks the deliveries behind it until its
    /// data landed ([`Session::fetch_landed`]); [`Session::next_fetch`]
    /// shows it, no `poll_*` call takes it.
    Fetch {
        /// Where the message is.
        source: wire::FetchSource,
        /// The transport it came on (the READ goes on the same).
        epoch: Epoch,
    },
}

/// What a session hands out and its driver or application has not taken
/// yet: the part of [`Session`] this file owns. Every file queues its
/// actions, events and completions here; only the `poll_*` calls below
/// take them out.
#[derive(Debug, Default)]
pub(super) struct Outputs {
    /// For [`Session::poll_action`].
    actions: VecDeque<Action>,
    /// For [`Session::poll_event`].
    events: VecDeque<SessionEvent>,
    /// For [`Session::poll_completion`].
    completions: VecDeque<Completion>,
    /// Completions the application took ([`Session::poll_completion`]).
    completions_taken: u64,
    /// A submit was refused for want of room and no
    /// [`SessionEvent::Writable`] has said since that room returned.
    pub(super) refused_full: bool,
    /// For [`Session::poll_delivery`]: sequence number and payload.
    deliveries: VecDeque<(Seq, Delivered)>,
    /// Buffers the application handed back with
    /// [`Session::poll_delivery_into`], for the next deliveries.
    delivery_spare: SpareBuffers,
}

impl Outputs {
    /// Queue an action for the driver.
    pub(super) fn act(&mut self, action: Action) {
        self.actions.push_back(action);
    }

    /// Queue an event for observers.
    pub(super) fn emit(&mut self, event: SessionEvent) {
        self.events.push_back(event);
    }

    /// Queue completions for the application.
    pub(super) fn complete(&mut self, cs: impl IntoIterator<Item = Completion>) {
        self.completions.extend(cs);
    }

    /// Queue one completion for the application.
    pub(super) fn complete_one(&mut self, c: Completion) {
        self.completions.push_back(c);
    }

    /// Queue a delivered message (its bytes copied into a spare buffer).
    /// Queue the notice of a WRITE with immediate data.
    pub(super) fn deliver_written(&mut self, seq: Seq, w: Written) {
        self.deliveries.push_back((seq, Delivered::Written(w)));
    }

    /// Whether no delivery waits for the application.
    pub(super) fn no_deliveries_waiting(&self) -> bool {
        self.deliveries.is_empty()
    }

    /// Whether a delivery the application can take waits (not a message
    /// still being read, nor one behind it).
    pub(super) fn delivery_waits(&self) -> bool {
        !self.deliveries.is_empty() && !self.fetch_next()
    }

    /// The next delivery, not taken.
    pub(super) fn front_delivery(&self) -> Option<&(Seq, Delivered)> {
        self.deliveries.front()
    }

    /// Take the next delivery (one [`Session::fetch_landed`] settled).
    pub(super) fn pop_delivery(&mut self) {
        self.deliveries.pop_front();
    }

    /// Whether a message being read is next ([`Delivered::Fetch`]).
    pub(super) fn fetch_next(&self) -> bool {
        matches!(self.deliveries.front(), Some((_, Delivered::Fetch { .. })))
    }

    /// Queue a message to read ([`Delivered::Fetch`]).
    pub(super) fn deliver_fetch(&mut self, seq: Seq, source: wire::FetchSource, epoch: Epoch) {
        self.deliveries
            .push_back((seq, Delivered::Fetch { source, epoch }));
    }

    /// Drop the deliveries after `seq` (given back by a rewind of the
    /// inbox: a replay brings them again). How many messages and notices
    /// were dropped (the fetches among them were never counted).
    pub(super) fn drop_deliveries_after(&mut self, seq: Seq) -> u64 {
        let mut counted = 0;
        while self.deliveries.back().is_some_and(|(s, _)| *s > seq) {
            if let Some((_, d)) = self.deliveries.pop_back() {
                counted += u64::from(!matches!(d, Delivered::Fetch { .. }));
            }
        }
        counted
    }

    /// Queue a delivery; its bytes are copied from `payload`.
    pub(super) fn deliver(&mut self, seq: Seq, payload: &[u8]) {
        let mut bytes = self.delivery_spare.take(payload.len());
        bytes.extend_from_slice(payload);
        self.deliveries.push_back((seq, Delivered::Message(bytes)));
    }
}

impl Session {
    /// The driver copied `bytes` of application payload (a message's,
    /// into a send slot): counted in [`Counters::send_copied_bytes`].
    pub fn count_copied(&mut self, bytes: usize) {
        self.counters.send_copied_bytes += bytes as u64;
    }

    /// The driver copied `bytes` of a delivered message once more (from
    /// the delivery queue into a buffer the application posted later):
    /// counted in [`Counters::receive_copied_bytes`].
    pub fn count_received_copy(&mut self, bytes: usize) {
        self.counters.receive_copied_bytes += bytes as u64;
    }

    /// Counters since creation.
    pub fn counters(&self) -> Counters {
        Counters {
            deduplicated: self.data.inbox.duplicates(),
            completed: self.out.completions_taken + self.out.completions.len() as u64,
            ..self.counters
        }
    }

    /// Next action for the driver: `Some` while one waits, in the order
    /// they were asked for; `None` when none waits (inputs, commands and
    /// timeouts queue more).
    #[must_use]
    #[inline]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.out.actions.pop_front()
    }

    /// The payload of message `op` as the journal keeps it until the peer
    /// confirms delivery: what follows the header of its
    /// [`Action::SendMessage`]. `None` if `op` is not a message in the
    /// journal (it completed or failed since the action was handed out:
    /// nothing is to be posted for it then).
    #[must_use]
    pub fn message_payload(&self, op: OpId) -> Option<&[u8]> {
        self.data.journal.message_payload(op)
    }

    /// The payload of message `op` of an [`Action::SendMessage`]: the
    /// bytes the journal owns ([`OpKind::Message`](crate::OpKind::Message))
    /// or the registered memory to gather it from
    /// ([`OpKind::MessageFrom`](crate::OpKind::MessageFrom)); `None` as for
    /// [`Session::message_payload`].
    #[must_use]
    pub fn message_body(&self, op: OpId) -> Option<crate::MessageBody<'_>> {
        self.data.journal.message_body(op)
    }

    /// Hand back the bytes of a performed [`Action::Send`] (once they are
    /// in the send slot): a later message is encoded into the same
    /// allocation. Optional; a driver that drops them only allocates more.
    pub fn recycle(&mut self, bytes: Vec<u8>) {
        self.data.recycle(bytes);
    }

    /// Next operation completion for the application: `Some` while one
    /// waits (each operation completes exactly once, in the order they
    /// were settled); `None` when none waits.
    #[must_use]
    #[inline]
    pub fn poll_completion(&mut self) -> Option<Completion> {
        let c = self.out.completions.pop_front();
        self.out.completions_taken += u64::from(c.is_some());
        if c.is_some() && self.out.refused_full && self.room() > 0 {
            self.out.refused_full = false;
            self.out.events.push_back(SessionEvent::Writable);
        }
        c
    }

    /// Operations submitted whose completion the application has not
    /// taken yet ([`Session::poll_completion`]): what counts against the
    /// session's `max_outstanding`.
    #[inline]
    pub fn outstanding(&self) -> u64 {
        self.data.journal.submitted() - self.out.completions_taken
    }

    /// How many more operations [`Session::submit`] takes now before it
    /// refuses with [`SessionError::Full`](super::SessionError::Full).
    #[inline]
    pub fn room(&self) -> u64 {
        u64::from(self.cfg.spec.max_outstanding).saturating_sub(self.outstanding())
    }

    /// Next delivered message for the application and its sequence number
    /// (from 1, in order, each once): `Some` while one waits; `None` when
    /// none waits.
    ///
    /// A notice of a WRITE with immediate data
    /// ([`OpKind::WriteImm`](crate::OpKind::WriteImm)) is not a message:
    /// while one is next, this says `None` and [`Session::poll_written`]
    /// takes it (or [`Session::poll_delivered`] takes either).
    #[must_use]
    #[inline]
    pub fn poll_delivery(&mut self) -> Option<(Seq, Vec<u8>)> {
        match self.out.deliveries.front()? {
            (_, Delivered::Message(_)) => match self.out.deliveries.pop_front()? {
                (seq, Delivered::Message(bytes)) => Some((seq, bytes)),
                _ => None,
            },
            (_, Delivered::Written(_) | Delivered::Fetch { .. }) => None,
        }
    }

    /// The next notice of a WRITE with immediate data the peer made
    /// ([`OpKind::WriteImm`](crate::OpKind::WriteImm)), in order with the
    /// messages (sequence numbers are shared): `Some` while one is next;
    /// `None` when none waits or a message is next.
    #[must_use]
    pub fn poll_written(&mut self) -> Option<(Seq, Written)> {
        match self.out.deliveries.front()? {
            (seq, Delivered::Written(w)) => {
                let r = (*seq, *w);
                self.out.deliveries.pop_front();
                Some(r)
            }
            (_, Delivered::Message(_) | Delivered::Fetch { .. }) => None,
        }
    }

    /// The next delivery, message or notice, in order; `None` also while
    /// a message being read is next ([`Session::next_fetch`]).
    #[must_use]
    pub fn poll_delivered(&mut self) -> Option<(Seq, Delivered)> {
        if self.out.fetch_next() {
            return None;
        }
        self.out.deliveries.pop_front()
    }

    /// Next delivered message, swapped into `buf` (whose old contents are
    /// gone): the allocation `buf` held takes a later message, so an
    /// application that receives into one buffer makes no allocation per
    /// message. `Some(seq)` when a message was swapped in; `None` when
    /// none waits (`buf` is untouched).
    #[must_use]
    #[inline]
    pub fn poll_delivery_into(&mut self, buf: &mut Vec<u8>) -> Option<Seq> {
        let (seq, mut bytes) = self.poll_delivery()?;
        std::mem::swap(buf, &mut bytes);
        self.out.delivery_spare.put(bytes);
        Some(seq)
    }

    /// Next event for observers: `Some` while one waits, in the order they
    /// happened; `None` when none waits.
    #[must_use]
    #[inline]
    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.out.events.pop_front()
    }

    /// Whether everything the session produced was taken: no action,
    /// completion, delivery or event waits. A driver may forget a closed
    /// or failed session once they all are.
    pub fn all_taken(&self) -> bool {
        self.out.actions.is_empty()
            && self.out.completions.is_empty()
            && !self.out.delivery_waits()
            && self.out.events.is_empty()
    }

    /// Whether a completion, delivery or event waits for the application
    /// (actions are the driver's, not counted).
    #[must_use]
    #[inline]
    pub fn has_output(&self) -> bool {
        let o = &self.out;
        !(o.completions.is_empty() && !o.delivery_waits() && o.events.is_empty())
    }

    /// Whether a delivery (message or notice) waits.
    #[must_use]
    #[inline]
    pub fn has_deliveries(&self) -> bool {
        self.out.delivery_waits()
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called:
    /// `Some` of the earliest armed timer (it may be in the past: call it
    /// now); `None` when no timer is armed (an idle session without
    /// keepalive, or an ended one). Read it again after every input,
    /// command and `handle_timeout`: each may arm or disarm timers.
    #[must_use]
    #[inline]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.timers.next()
    }

    /// How many of the session's timers are armed (one per
    /// [`TimerKind`](crate::timers::TimerKind) at most): a figure for a
    /// long run to watch, [`poll_timeout`](Self::poll_timeout) being the
    /// earliest of them.
    #[must_use]
    pub fn timers_armed(&self) -> usize {
        self.timers.armed()
    }

    /// Outputs waiting for the application: completions, deliveries
    /// (messages and notices) and events not yet taken. What piles up
    /// when the application takes nothing; actions, the driver's, are not
    /// counted.
    #[must_use]
    pub fn outputs_waiting(&self) -> usize {
        let o = &self.out;
        o.completions.len() + o.deliveries.len() + o.events.len()
    }
}
