//! The hot standby ([`Policy::standby`](crate::policy::Policy::standby)):
//! a second transport of an established session, on another device, kept
//! idle next to the current one, kept alive by keepalives, and its
//! promotion when the current one is lost.
//!
//! ```text
//! initiator                                  target
//! Established on path A
//!   ConnectStandby(S) on path B ── Standby(S, signed) ──▶ Established?
//!                               ◀── Resumed(S) ──────────  AcceptStandby(S)
//!   StandbyUp                                            StandbyUp
//!   ... idle; every keepalive period, at each end:
//!   ProbeStandby(S, probe n) ───────────────────────────▶ ProbeStandby(S, reply n)
//!   (and the other way); silence on S for two periods: S is torn down
//! loss of A (device, CM, completion, keepalive) — at either end:
//!   TearDown(A), Promote(S)
//!   Promote{S, last_delivered} ─────────────────────────▶ (a message on S:
//!   adverts, AdvertDone                                    the peer moved)
//!                               ◀── Promote{S, delivered}  TearDown(A), Promote(S)
//!                               ◀── adverts, AdvertDone
//!   journal replayed from the peer's last_delivered, Established on S
//!   (a new standby is built once a device allows)
//! ```
//!
//! A promotion is a recovery without the connection setup: the same
//! state path (`Recovering`, `Reconnecting`, `Resyncing`, `Established`),
//! the same journal replay from the peer's delivered sequence number (its
//! `Promote` carries what a `Resume` or `Resumed` would), the same
//! `Indeterminate` rules, the same [`SessionEvent::Resumed`]. A message on
//! the standby means the peer promoted it, so both ends promote, each on
//! its own detection or on the other's `Promote`, whichever comes first;
//! each sends one `Promote`, and each applies the other's once.
//!
//! While idle the standby carries only keepalives, with the session's
//! keepalive period ([`Policy::keepalive`](crate::policy::Policy::keepalive);
//! none when it is off): each end sends a probe every period and answers
//! the other's. A keepalive is a SEND with immediate data and no payload
//! ([`Action::ProbeStandby`]), which no message of the protocol is (every
//! message has a header), so a driver tells it from the peer's promotion
//! by its shape alone, and it never reaches the inbox, the journal or the
//! current transport's keepalive: sequence numbers, acknowledgements and
//! replay are the current transport's only. The immediate is the probe's
//! nonce, its top bit set in a reply. Anything heard on the standby (a
//! keepalive of either kind) re-arms its silence deadline of two periods;
//! a standby that stays silent past it (its peer or its path died without
//! an event, or its peer did not get to run for two periods) is torn down
//! ([`SessionEvent::StandbyLost`] with [`StandbyLoss::Silent`],
//! [`Counters::standbys_silent`](super::Counters::standbys_silent)) and,
//! at the initiator, built again after a backoff, the current transport
//! untouched.
//!
//! Other losses of the standby are seen by its CM, device and async
//! events, or by a keepalive's failed completion; a standby that died
//! between two keepalives is found at promotion, when the resync's
//! connect timeout falls back to an ordinary recovery. A loss of the
//! standby takes down only the standby. A drain, a suspend and the
//! session's end tear it down; after a resync a new one is built.

use std::fmt;

use relink_fabric::{DeviceId, DeviceInfo, Timestamp};

use super::{Action, LocalKeys, RequestToken, Role, Session, SessionEvent};
use crate::ids::{Epoch, Seq};
use crate::reason::DownCause;
use crate::state::{Cause, State};
use crate::timers::TimerKind;
use crate::wire;

/// The bit of a standby keepalive's immediate data that makes it a reply
/// (the rest is the probe's nonce).
const KEEPALIVE_REPLY: u32 = 1 << 31;

/// Why a standby connection went ([`SessionEvent::StandbyLost`]). More
/// kinds may come: a match needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StandbyLoss {
    /// Nothing was heard on it for two keepalive periods
    /// ([`Policy::keepalive`](crate::policy::Policy::keepalive)): its
    /// peer's half or its path died without an event reaching this end
    /// (the peer's device died and nobody told this one, the path is
    /// black-holed) — or the peer did not get to send its keepalives in
    /// time (a machine too busy to run it for two periods). Counted in
    /// [`Counters::standbys_silent`](super::Counters::standbys_silent).
    Silent,
    /// Its connection or its device was lost, as a current transport's
    /// would be: a device event (removed, fatal error, port down), a CM
    /// event (disconnect, device removal, address change), an error
    /// completion of one of its keepalives, a refused post.
    Down(DownCause),
    /// The session gave it up: a drain or a suspend began (a new one
    /// follows the resync), the policy turned the standby off, the session
    /// ended (closed or failed), the current transport was lost at a
    /// moment the standby could not take over (during a resync or a
    /// planned outage: the recovery builds the session anew), or, at a
    /// target, the initiator asked for a new standby or reconnected
    /// without it.
    Released,
}

impl fmt::Display for StandbyLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StandbyLoss::Silent => f.write_str("silent for two keepalive periods"),
            StandbyLoss::Down(cause) => write!(f, "lost: {cause}"),
            StandbyLoss::Released => f.write_str("released by the session"),
        }
    }
}

/// The hot standby: the part of [`Session`] this file owns.
#[derive(Debug, Default)]
pub(super) struct Standby {
    /// The standby transport, being made or up; boxed, so a session
    /// without one pays a pointer.
    transport: Option<Box<StandbyTransport>>,
    /// The highest epoch a standby took: every later transport's epoch is
    /// above it.
    high: Epoch,
    /// Standby connections that failed in a row (their retry backs off).
    failures: u32,
    /// A promoted standby waits for the peer's `Promote` (what it
    /// delivered) before the journal is replayed.
    promoting: bool,
}

impl Standby {
    /// The driver registered a region on the standby transport of `epoch`
    /// after it came up: its keys join those a promotion advertises.
    pub(super) fn add_local_key(&mut self, epoch: Epoch, keys: LocalKeys) {
        if let Some(t) = self.transport.as_mut().filter(|t| t.epoch == epoch) {
            if let Some((_, local)) = t.up.as_mut() {
                local.retain(|k| k.region != keys.region);
                local.push(keys);
            }
        }
    }

    /// Whether a promoted standby waits for the peer's `Promote`.
    pub(super) fn is_promoting(&self) -> bool {
        self.promoting
    }

    /// The session left `Resyncing`: no promotion waits.
    pub(super) fn stop_promoting(&mut self) {
        self.promoting = false;
    }
}

/// The standby transport of a session.
#[derive(Debug)]
struct StandbyTransport {
    /// Its epoch: above the current one's.
    epoch: Epoch,
    /// The initiator's path it takes (`None` at a target).
    path: Option<usize>,
    /// Once established: its device and the keys of the regions the
    /// driver registered there.
    up: Option<(DeviceInfo, Vec<LocalKeys>)>,
}

impl Session {
    /// The device carrying the standby connection, once it is up.
    pub fn standby_device(&self) -> Option<&DeviceInfo> {
        self.standby
            .transport
            .as_ref()
            .and_then(|s| s.up.as_ref())
            .map(|u| &u.0)
    }

    /// The epoch of the next transport: above the current one and every
    /// standby's.
    pub(super) fn next_epoch(&self) -> Epoch {
        self.epoch.max(self.standby.high).next()
    }

    /// Whether `epoch` is the standby's.
    pub(super) fn is_standby_epoch(&self, epoch: Epoch) -> bool {
        self.standby
            .transport
            .as_ref()
            .is_some_and(|s| s.epoch == epoch)
    }

    /// Initiator: connect a standby if the policy asks for one, the session
    /// is established with nothing planned, and a viable path goes through
    /// another device (another peer address too, if one does, so a loss at
    /// the target is covered as well).
    pub(super) fn maybe_build_standby(&mut self, now: Timestamp) {
        if !self.cfg.policy.standby
            || self.cfg.role != Role::Initiator
            || self.cfg.spec.shared_receive
            || self.state() != State::Established
            || self.standby.transport.is_some()
            || self.planned.is_under_way()
            || self.closing.is_closing()
        {
            return;
        }
        let (Some(cur), Some(secret)) = (self.devices.current(), self.handshake.secret()) else {
            return;
        };
        let cur_peer = self.cfg.paths[self.recovery.path_index()].peer;
        let others: Vec<usize> = self
            .viable_paths()
            .into_iter()
            .filter(|&i| self.device_for_path(i).is_some_and(|d| d.id != cur.id))
            .collect();
        let pick = others
            .iter()
            .find(|&&i| self.cfg.paths[i].peer != cur_peer)
            .or(others.first());
        let Some(&pick) = pick else {
            return;
        };
        let epoch = self.next_epoch();
        let pd = wire::ConnectData::Standby(wire::Resume::sign_standby(
            secret,
            self.cfg.id,
            epoch,
            self.data.inbox.last_delivered(),
        ))
        .to_vec();
        tracing::info!(session = %self.cfg.id, %epoch, path = pick, "connecting a standby");
        self.standby.high = epoch;
        self.standby.transport = Some(Box::new(StandbyTransport {
            epoch,
            path: Some(pick),
            up: None,
        }));
        self.out.act(Action::ConnectStandby {
            epoch,
            path: self.attempt_path(pick),
            private_data: pd,
        });
        self.timers
            .set(TimerKind::Standby, now + self.cfg.policy.connect_timeout);
    }

    /// Tear the standby down (the current transport stays) for `cause`
    /// (reported with a [`SessionEvent::StandbyLost`] if it was up).
    /// `retry`: try again after a backoff (its connection failed);
    /// otherwise a new one is built when the session next allows.
    pub(super) fn drop_standby(&mut self, retry: bool, cause: StandbyLoss, now: Timestamp) {
        let Some(sb) = self.standby.transport.take() else {
            return;
        };
        tracing::info!(session = %self.cfg.id, epoch = %sb.epoch, retry, %cause, "standby torn down");
        self.out.act(Action::TearDown { epoch: sb.epoch });
        self.timers.stop(TimerKind::Standby);
        self.timers.stop(TimerKind::StandbySilence);
        if let Some((device, _)) = sb.up {
            self.out.emit(SessionEvent::StandbyLost {
                device: device.id,
                path: sb.path.and_then(|i| self.cfg.paths.get(i).copied()),
                cause,
            });
        }
        if retry && self.cfg.role == Role::Initiator && !self.state().is_terminal() {
            self.standby.failures = self.standby.failures.saturating_add(1);
            let r = self.jitter.next();
            let delay = self.cfg.policy.backoff(self.standby.failures, r);
            self.timers.set(TimerKind::Standby, now + delay);
        }
    }

    /// The standby timer fired: a standby still connecting is abandoned
    /// (and retried); one up is sent its next keepalive; with none, one is
    /// tried again.
    pub(super) fn standby_timer(&mut self, now: Timestamp) {
        match &self.standby.transport {
            Some(sb) if sb.up.is_none() => self.drop_standby(true, StandbyLoss::Released, now),
            Some(sb) => {
                let epoch = sb.epoch;
                let imm = (self.keepalive.next_nonce() as u32) & !KEEPALIVE_REPLY;
                self.probe_standby(epoch, imm);
                if let Some(k) = self.cfg.policy.keepalive {
                    self.timers.set(TimerKind::Standby, now + k);
                }
            }
            None => self.maybe_build_standby(now),
        }
    }

    /// Queue a keepalive (`imm`) on the standby of `epoch`.
    fn probe_standby(&mut self, epoch: Epoch, imm: u32) {
        self.counters.standby_keepalives_sent += 1;
        self.out.act(Action::ProbeStandby { epoch, imm });
    }

    /// Start (or restart, with the policy's period) the keepalives of the
    /// standby that is up, or stop them when the policy has none.
    pub(super) fn arm_standby_keepalive(&mut self, now: Timestamp) {
        if self
            .standby
            .transport
            .as_ref()
            .is_none_or(|s| s.up.is_none())
        {
            return;
        }
        match (
            self.cfg.policy.keepalive,
            self.cfg.policy.keepalive_deadline(),
        ) {
            (Some(k), Some(d)) => {
                self.timers.set(TimerKind::Standby, now + k);
                self.timers.set(TimerKind::StandbySilence, now + d);
            }
            _ => {
                self.timers.stop(TimerKind::Standby);
                self.timers.stop(TimerKind::StandbySilence);
            }
        }
    }

    /// Nothing was heard on the standby for two keepalive periods: its
    /// peer or its path is gone without an event. It is torn down (and,
    /// at the initiator, built again after a backoff).
    pub(super) fn standby_silent(&mut self, now: Timestamp) {
        let Some(epoch) = self
            .standby
            .transport
            .as_ref()
            .filter(|s| s.up.is_some())
            .map(|s| s.epoch)
        else {
            return;
        };
        tracing::warn!(session = %self.cfg.id, %epoch, "standby silent for two keepalive periods: torn down");
        self.counters.standbys_silent += 1;
        self.drop_standby(true, StandbyLoss::Silent, now);
    }

    /// A keepalive arrived on the standby of `epoch`: a receive there with
    /// no bytes and immediate data `imm` (see [`Action::ProbeStandby`]).
    /// It re-arms the standby's silence deadline; a probe is answered.
    /// Nothing happens for an epoch that is not an established standby's
    /// (a keepalive that trails a promotion, say): it never counts as a
    /// message of the current transport.
    pub fn handle_standby_keepalive(&mut self, epoch: Epoch, imm: u32, now: Timestamp) {
        let up = self
            .standby
            .transport
            .as_ref()
            .is_some_and(|s| s.epoch == epoch && s.up.is_some());
        if !up {
            return;
        }
        self.counters.standby_keepalives_received += 1;
        if let Some(d) = self.cfg.policy.keepalive_deadline() {
            self.timers.set(TimerKind::StandbySilence, now + d);
        }
        if imm & KEEPALIVE_REPLY == 0 {
            self.probe_standby(epoch, imm | KEEPALIVE_REPLY);
        }
    }

    /// The standby is established on `device`.
    fn standby_up(&mut self, device: DeviceInfo, local: Vec<LocalKeys>, now: Timestamp) {
        let Some(sb) = self.standby.transport.as_mut() else {
            return;
        };
        tracing::info!(session = %self.cfg.id, epoch = %sb.epoch, device = %device.id, "standby up");
        self.out.emit(SessionEvent::StandbyUp {
            device: device.id.clone(),
        });
        sb.up = Some((device, local));
        self.timers.stop(TimerKind::Standby);
        self.counters.standbys += 1;
        self.standby.failures = 0;
        self.arm_standby_keepalive(now);
    }

    /// Initiator: the standby's connection is established; `private_data`
    /// is the target's accept data, a [`wire::Resumed`] of its epoch.
    pub(super) fn standby_connected(
        &mut self,
        epoch: Epoch,
        device: DeviceInfo,
        private_data: &[u8],
        local: Vec<LocalKeys>,
        now: Timestamp,
    ) {
        let authentic = match (
            wire::AcceptData::decode(private_data),
            self.handshake.secret(),
        ) {
            (Ok(wire::AcceptData::Resumed(r)), Some(secret)) => {
                r.session == self.cfg.id
                    && r.epoch == epoch
                    && r.verify(secret)
                    && self.peer_incarnation() == Some(r.incarnation)
            }
            _ => false,
        };
        if !authentic {
            tracing::warn!(session = %self.cfg.id, %epoch, "the standby's reply is not the peer's");
            self.drop_standby(true, StandbyLoss::Released, now);
            return;
        }
        self.standby_up(device, local, now);
    }

    /// Target: the accepted standby's connection is established.
    pub(super) fn standby_accepted(
        &mut self,
        device: DeviceInfo,
        local: Vec<LocalKeys>,
        now: Timestamp,
    ) {
        self.standby_up(device, local, now);
    }

    /// Target: a standby request naming the id of `self`. Verifies it and
    /// queues an [`Action::AcceptStandby`] (or an [`Action::Reject`]: the
    /// session is not established, or is planning an outage, or is on a
    /// shared receive queue — `Busy`, which the initiator retries).
    pub fn handle_standby_request(
        &mut self,
        request: RequestToken,
        standby: &wire::Resume,
        now: Timestamp,
    ) {
        let refuse = |s: &mut Session, reason| {
            s.out.act(Action::Reject {
                request,
                private_data: wire::RejectData::Refused(wire::Refused { reason }).to_vec(),
            });
        };
        let Some(secret) = self
            .handshake
            .secret()
            .filter(|_| !self.state().is_terminal())
            .cloned()
        else {
            refuse(self, wire::RefuseReason::UnknownSession);
            return;
        };
        if !standby.verify_standby(&secret) {
            refuse(self, wire::RefuseReason::BadAuthenticator);
            return;
        }
        if standby.epoch < self.next_epoch() {
            refuse(self, wire::RefuseReason::StaleEpoch);
            return;
        }
        if self.cfg.role != Role::Target
            || self.state() != State::Established
            || self.planned.is_under_way()
            || self.closing.is_closing()
            || self.cfg.spec.shared_receive
        {
            refuse(self, wire::RefuseReason::Busy);
            return;
        }
        // A newer standby replaces an older one (the initiator gave that
        // one up).
        self.drop_standby(false, StandbyLoss::Released, now);
        self.standby.high = standby.epoch;
        self.standby.transport = Some(Box::new(StandbyTransport {
            epoch: standby.epoch,
            path: None,
            up: None,
        }));
        self.out.act(Action::AcceptStandby {
            epoch: standby.epoch,
            request,
            private_data: self.resumed_reply(&secret, standby.epoch),
        });
        self.timers
            .set(TimerKind::Standby, now + self.cfg.policy.connect_timeout);
    }

    /// A device left (or failed, or its port went down: `cause`): a
    /// standby on it goes, and another is tried at once on what remains.
    pub(super) fn standby_device_lost(&mut self, id: &DeviceId, cause: DownCause, now: Timestamp) {
        let on_it = self
            .standby
            .transport
            .as_ref()
            .and_then(|s| s.up.as_ref().map(|u| &u.0.id))
            .is_some_and(|d| d == id);
        if on_it {
            self.drop_standby(false, StandbyLoss::Down(cause), now);
            self.maybe_build_standby(now);
        }
    }

    /// The current transport is lost (`cause`): switch to the standby if
    /// one is up on another device. Returns whether it did; if it did not,
    /// a standby still being made is torn down (the recovery that follows
    /// builds the session anew).
    pub(super) fn promote_standby(&mut self, cause: DownCause, now: Timestamp) -> bool {
        let usable = self.state() == State::Established
            && !self.planned.is_under_way()
            && self.standby.transport.as_ref().is_some_and(|s| {
                s.up.as_ref()
                    .is_some_and(|(d, _)| self.devices.current().is_none_or(|c| c.id != d.id))
            });
        if !usable {
            self.drop_standby(false, StandbyLoss::Released, now);
            return false;
        }
        let sb = self.standby.transport.take().expect("checked");
        let (device, local) = sb.up.expect("checked");
        tracing::info!(session = %self.cfg.id, %cause, from = %self.epoch, to = %sb.epoch, device = %device.id, "transport lost: promoting the standby");
        self.counters.failovers += 1;
        self.count_loss(cause);
        self.timers.stop(TimerKind::Standby);
        self.timers.stop(TimerKind::StandbySilence);
        self.start_outage(now);
        self.go(State::Recovering, Cause::TransportDown(cause), now);
        self.recovery.reset_attempts();
        if let Some(p) = sb.path {
            self.recovery.set_path(p);
        }
        // A message read on the old transport is read again on the new.
        self.rewind_fetches();
        self.epoch = sb.epoch;
        self.out.act(Action::Promote { epoch: self.epoch });
        self.go(State::Reconnecting, Cause::Promote, now);
        // The resync of a recovery, but the peer's delivered count comes
        // in its Promote, not in a Resume or Resumed: the journal is
        // resumed when it arrives (`on_promote`).
        self.standby.promoting = true;
        self.timers.set(
            TimerKind::ConnectTimeout,
            now + self.cfg.policy.connect_timeout,
        );
        self.devices.carry(device);
        self.handshake.set_local_keys(local);
        self.data.peer_keys.begin(self.epoch);
        self.go(State::Resyncing, Cause::Accepted, now);
        let (epoch, delivered) = (self.epoch, self.data.inbox.last_delivered());
        self.send_control(|ack, out| {
            wire::encode_body(
                Seq(0),
                ack,
                &wire::MsgBody::Promote {
                    epoch,
                    last_delivered: delivered,
                },
                out,
            )
        });
        self.advertise(now);
        true
    }

    /// Something completed on the standby transport of `epoch` (a
    /// driver that reads the standby's completion queue only to learn
    /// this calls it before handing the completions on): nothing is sent
    /// there until a promotion, so the peer promoted it. The standby is
    /// promoted here too ([`Action::Promote`] follows the old transport's
    /// [`Action::TearDown`]); its messages then go to
    /// [`Session::handle_received`] with `epoch`. Nothing happens for an
    /// epoch that is not an established standby's.
    pub fn handle_standby_traffic(&mut self, epoch: Epoch, now: Timestamp) {
        if epoch != self.epoch {
            self.peer_promoted(epoch, now);
        }
    }

    /// A message arrived on the standby of `epoch`: the peer promoted it.
    /// Promote it here too (the current transport is given up). Returns
    /// whether the message belongs to the (new) current epoch.
    pub(super) fn peer_promoted(&mut self, epoch: Epoch, now: Timestamp) -> bool {
        let up = self
            .standby
            .transport
            .as_ref()
            .is_some_and(|s| s.epoch == epoch && s.up.is_some());
        up && self.promote_standby(DownCause::PeerFailover, now)
    }

    /// The peer's `Promote` on the promoted transport: replay from what it
    /// delivered, as a resume does; the resync ends with its
    /// advertisements.
    pub(super) fn on_promote(&mut self, epoch: Epoch, last_delivered: Seq, now: Timestamp) {
        if !self.standby.promoting || epoch != self.epoch || self.state() != State::Resyncing {
            return;
        }
        self.standby.promoting = false;
        self.replay_from(last_delivered);
        if self.data.peer_keys.is_complete() {
            self.finish_resync(now);
        }
    }
}
