//! The resume handshake and the resync: the CM private data of both roles
//! (Hello / Welcome for a new session, Resume / Resumed to reconnect one,
//! Refused), then the advertisement exchange on the new transport. When
//! both sides have advertised, the journal's replay is posted and the
//! session is `Established` again.

use std::time::Duration;

use relink_fabric::{DeviceInfo, Timestamp};

use super::{Action, Session, SessionConfig, SessionError, SessionEvent, StandbyLoss};
use crate::auth::SessionSecret;
use crate::ids::{Epoch, Incarnation, RegionId, Seq};
use crate::op::OpError;
use crate::reason::DownCause;
use crate::reason::{AttemptFailure, PeerLostReason, ReplyFault};
use crate::resources::RegionSpec;
use crate::state::{Cause, State};
use crate::timers::TimerKind;
use crate::wire;

/// A pending connection request at the target, named by the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestToken(pub u64);

/// What a target does with a Hello that names a session it already has
/// ([`Session::handle_hello`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloVerdict {
    /// This session took the Hello: the initiator's earlier attempt is
    /// over, the session's first handshake starts again on the request
    /// (an [`Action::Accept`] is queued).
    Taken,
    /// This session is over (it was closed or failed); the Hello makes a
    /// new session ([`Session::accept_hello`]).
    Replaced,
    /// Refuse the request with this reason.
    Refuse(wire::RefuseReason),
}

/// Local keys of one region on the current device, as the driver
/// registered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalKeys {
    /// The region, by its stable id (the same on every device).
    pub region: RegionId,
    /// Its (fixed) address.
    pub addr: u64,
    /// rkey on the current device.
    pub rkey: u32,
}

/// The handshakes' secrets and the resync under way: the part of
/// [`Session`] this file owns. (The peer's advertised keys are the data
/// path's, which translates through them.)
#[derive(Debug, Default)]
pub(super) struct Handshake {
    /// The secret that authenticates resumes: issued by the target in its
    /// Welcome. `None` until the first connection; an initiator that has
    /// one sends a Resume, else a Hello.
    secret: Option<SessionSecret>,
    /// The peer's incarnation, learned in the first handshake. A Resumed
    /// with another one means the peer restarted and lost the session.
    peer_incarnation: Option<Incarnation>,
    /// The keys of our regions on the current device, as the driver
    /// registered them: what the advertisements carry.
    local_keys: Vec<LocalKeys>,
    /// The epoch whose advertisements were sent: a region added since is
    /// advertised on its own ([`Session::add_local_key`]).
    advertised: Option<Epoch>,
    /// Target only: the peer's `last_delivered` from the Resume being
    /// accepted, held from [`Session::handle_resume_request`] until the
    /// connection is up ([`Session::handle_accepted`]), when it is applied
    /// to the journal.
    pending_peer_delivered: Seq,
    /// Operations the current resume replays: counted when the resync
    /// starts, reported in [`SessionEvent::Resumed`] when it ends.
    replaying: u64,
}

impl Handshake {
    /// The session secret, once the first handshake issued it.
    pub(super) fn secret(&self) -> Option<&SessionSecret> {
        self.secret.as_ref()
    }

    /// The keys of our regions on the device now carrying the transport.
    pub(super) fn set_local_keys(&mut self, local: Vec<LocalKeys>) {
        self.local_keys = local;
    }
}

impl Session {
    /// Add a region to the session: a node-wide registration joining it.
    /// Every transport built from now on registers it (it is part of
    /// [`Session::spec`]); for the transports already built the driver
    /// registers it itself and gives its keys with
    /// [`Session::add_local_key`]. Submits may name it at once.
    ///
    /// # Errors
    /// [`SessionError::RegionExists`] if the session has a region of that
    /// id (nothing changes).
    pub fn add_region(&mut self, region: RegionSpec) -> Result<(), SessionError> {
        if self.cfg.spec.regions.iter().any(|r| r.id == region.id) {
            return Err(SessionError::RegionExists(region.id));
        }
        self.cfg.spec.regions.push(region);
        Ok(())
    }

    /// The driver registered region `keys.region` on the transport of
    /// `epoch` (after [`Session::add_region`]). For the current epoch the
    /// keys join what its advertisements carry; if they were sent already,
    /// an advertisement of this region follows on its own, so the peer can
    /// reach it without a new connection. Keys of the standby's epoch join
    /// what its promotion advertises (the driver gives a standby's keys
    /// when it comes up; these are of a region registered since).
    pub fn add_local_key(&mut self, epoch: Epoch, keys: LocalKeys) {
        if epoch != self.epoch {
            self.standby.add_local_key(epoch, keys);
            return;
        }
        let local = &mut self.handshake.local_keys;
        local.retain(|k| k.region != keys.region);
        local.push(keys);
        if self.handshake.advertised != Some(epoch) {
            return;
        }
        let advert = self
            .cfg
            .spec
            .regions
            .iter()
            .find(|r| r.id == keys.region)
            .and_then(|r| self.advert_of(r));
        if let Some(advert) = advert {
            self.counters.adverts_sent += 1;
            self.send_control(|ack, out| wire::encode_adverts(Seq(0), ack, &[advert], out));
        }
    }

    /// Take region `id` out of the session (a node-wide registration
    /// leaving it): no submit may name it any more, and the driver
    /// deregisters it from the session's transports. The peer's copy of
    /// its keys goes stale: what it still sends there is refused by the
    /// device (`REM_ACCESS_ERR`), as after `ibv_dereg_mr`.
    ///
    /// # Errors
    /// [`SessionError::RegionInUse`] while an operation not yet completed
    /// names it as its local range (nothing changes);
    /// [`SessionError::NoRegion`] if the session has no such region.
    pub fn remove_region(&mut self, id: RegionId) -> Result<(), SessionError> {
        if !self.cfg.spec.regions.iter().any(|r| r.id == id) {
            return Err(SessionError::NoRegion(id));
        }
        if self.data.journal.uses_region(id) {
            return Err(SessionError::RegionInUse(id));
        }
        self.cfg.spec.regions.retain(|r| r.id != id);
        self.handshake.local_keys.retain(|k| k.region != id);
        Ok(())
    }

    /// The peer's incarnation (a random id of its process), once the first
    /// handshake told it; `None` before.
    pub fn peer_incarnation(&self) -> Option<Incarnation> {
        self.handshake.peer_incarnation
    }

    /// The target's answer to a Resume or a standby request for `epoch`:
    /// a signed `Resumed` with what this end has delivered, as CM private
    /// data.
    pub(super) fn resumed_reply(&self, secret: &SessionSecret, epoch: Epoch) -> Vec<u8> {
        let reply = wire::Resumed::sign(
            secret,
            self.cfg.id,
            epoch,
            self.cfg.incarnation,
            self.data.inbox.last_delivered(),
        );
        wire::AcceptData::Resumed(reply).to_vec()
    }

    /// The CONNECT private data of the next attempt: a Resume signed with
    /// the session secret once there is one, a Hello before.
    pub(super) fn resume_private_data(&self) -> Vec<u8> {
        match self.handshake.secret() {
            Some(secret) => wire::ConnectData::Resume(wire::Resume::sign(
                secret,
                self.cfg.id,
                self.epoch,
                self.data.inbox.last_delivered(),
            ))
            .to_vec(),
            None => wire::ConnectData::Hello(wire::Hello {
                session: self.cfg.id,
                epoch: self.epoch,
                incarnation: self.cfg.incarnation,
                connect_data: self.cfg.connect_data,
            })
            .to_vec(),
        }
    }

    /// Initiator: the connection of `epoch` is established on `device`;
    /// `private_data` is the target's accept data; `local` are the rkeys of
    /// the regions the driver registered.
    pub fn handle_connected(
        &mut self,
        epoch: Epoch,
        device: DeviceInfo,
        private_data: &[u8],
        local: Vec<LocalKeys>,
        now: Timestamp,
    ) {
        if self.is_standby_epoch(epoch) {
            self.standby_connected(epoch, device, private_data, local, now);
            return;
        }
        if epoch != self.epoch || !matches!(self.state(), State::Connecting | State::Reconnecting) {
            return;
        }
        let reply = match wire::AcceptData::decode(private_data) {
            Ok(r) => r,
            Err(e) => {
                self.attempt_failed(AttemptFailure::BadReply(ReplyFault::Malformed(e)), now);
                return;
            }
        };
        match reply {
            wire::AcceptData::Welcome(wire::Welcome {
                session,
                incarnation,
                secret,
            }) => {
                if session != self.cfg.id || self.handshake.secret.is_some() {
                    self.attempt_failed(
                        AttemptFailure::BadReply(ReplyFault::UnexpectedWelcome),
                        now,
                    );
                    return;
                }
                self.handshake.secret = Some(secret);
                self.handshake.peer_incarnation = Some(incarnation);
                self.start_resync(device, local, Seq(0), now);
            }
            wire::AcceptData::Resumed(r) => {
                let Some(secret) = self.handshake.secret() else {
                    self.attempt_failed(
                        AttemptFailure::BadReply(ReplyFault::UnexpectedResumed),
                        now,
                    );
                    return;
                };
                if r.session != self.cfg.id || r.epoch != self.epoch || !r.verify(secret) {
                    self.attempt_failed(AttemptFailure::BadReply(ReplyFault::NotAuthentic), now);
                    return;
                }
                if self.handshake.peer_incarnation != Some(r.incarnation) {
                    self.peer_lost(PeerLostReason::NewIncarnation, now);
                    return;
                }
                self.start_resync(device, local, r.last_delivered, now);
            }
        }
    }

    /// Initiator: the target refused the connection of `epoch`.
    ///
    /// A refusal of the peer's relink is reported as
    /// [`SessionEvent::Refused`]. A final one
    /// ([`RefuseReason::is_final`](wire::RefuseReason::is_final)) fails the
    /// session at once with [`SessionEvent::PeerLost`] (its pending
    /// operations fail with `PeerLost`); Busy and StaleEpoch are retried
    /// after the backoff. A refusal without relink's reply (the peer's CM
    /// answered: no listener) is retried after `refused_backoff`.
    pub fn handle_rejected(&mut self, epoch: Epoch, private_data: &[u8], now: Timestamp) {
        if self.is_standby_epoch(epoch) {
            tracing::debug!(session = %self.cfg.id, %epoch, "the peer refused the standby");
            self.drop_standby(true, StandbyLoss::Released, now);
            return;
        }
        if epoch != self.epoch {
            return;
        }
        match wire::RejectData::decode(private_data).map(|wire::RejectData::Refused(r)| r.reason) {
            Ok(reason) => {
                let retrying = !reason.is_final();
                tracing::info!(session = %self.cfg.id, ?reason, retrying, "the peer refused the connection");
                self.out.emit(SessionEvent::Refused { reason, retrying });
                if retrying {
                    self.attempt_failed(AttemptFailure::Refused(reason), now);
                    return;
                }
                self.peer_lost(PeerLostReason::Refused(reason), now);
            }
            Err(_) => {
                // The peer's CM answered for it: host and device are there,
                // the application is not listening (yet).
                self.recovery.refused();
                self.attempt_failed_with(AttemptFailure::NoListener, now);
            }
        }
    }

    /// The peer is a stranger or refused us for good: report it and fail.
    fn peer_lost(&mut self, reason: PeerLostReason, now: Timestamp) {
        tracing::warn!(session = %self.cfg.id, %reason, "peer lost");
        self.out.emit(SessionEvent::PeerLost { reason });
        self.fail(Cause::PeerLost(reason), OpError::PeerLost, now);
    }

    /// Target: a new session from `hello` (`cfg.id` is its session id).
    /// `secret` must be 32 fresh random bytes. Returns the session with an
    /// [`Action::Accept`] queued.
    ///
    /// The session starts at the Hello's epoch, the initiator's attempt, so
    /// both sides advertise for the same epoch even when refused attempts
    /// came first (a Hello never carries `Epoch(0)`; one that does is taken
    /// as `Epoch(1)`). Its connect data is the Hello's, whatever
    /// `cfg.connect_data` holds.
    pub fn accept_hello(
        mut cfg: SessionConfig,
        request: RequestToken,
        hello: &wire::Hello,
        secret: [u8; 32],
        now: Timestamp,
    ) -> Result<Session, crate::policy::PolicyError> {
        cfg.connect_data = hello.connect_data;
        let mut s = Session::new(cfg, now)?;
        let secret = SessionSecret::from_bytes(secret);
        s.handshake.peer_incarnation = Some(hello.incarnation);
        s.epoch = hello.epoch.max(Epoch(1));
        s.go(State::Connecting, Cause::Connect, now);
        s.arm_first_connect_deadline(now);
        let pd = wire::AcceptData::Welcome(wire::Welcome {
            session: s.cfg.id,
            incarnation: s.cfg.incarnation,
            secret: secret.clone(),
        })
        .to_vec();
        s.handshake.secret = Some(secret);
        s.out.act(Action::Accept {
            epoch: s.epoch,
            request,
            private_data: pd,
        });
        s.timers.set(
            TimerKind::ConnectTimeout,
            now + s.cfg.policy.connect_timeout,
        );
        Ok(s)
    }

    /// Target: a Hello that names the id of `self` (`request` is its
    /// connection request). An initiator says Hello only until it holds
    /// the secret of its first handshake, so:
    ///
    /// - a closed or failed session is over: [`HelloVerdict::Replaced`]
    ///   (an initiator whose ids repeat, restarted with the same seed,
    ///   connects again after a close);
    /// - a target session never established whose Hello came from the same
    ///   incarnation takes a Hello with a newer epoch: the initiator's
    ///   attempt timed out before the Welcome reached it, so the handshake
    ///   starts again at the new epoch, with the same secret
    ///   ([`HelloVerdict::Taken`]; the old attempt's transport is torn
    ///   down; a session that had given that attempt up, in `Recovering`,
    ///   goes on to `Reconnecting`);
    /// - anything else is refused `Busy`, which the initiator retries: a
    ///   session that was established is never disturbed by a Hello (it
    ///   authenticates nothing and may be a recording), nor is a first
    ///   handshake by a Hello of another incarnation or an older attempt.
    pub fn handle_hello(
        &mut self,
        request: RequestToken,
        hello: &wire::Hello,
        now: Timestamp,
    ) -> HelloVerdict {
        let state = self.state();
        if state.is_terminal() {
            return HelloVerdict::Replaced;
        }
        let busy = HelloVerdict::Refuse(wire::RefuseReason::Busy);
        let epoch = hello.epoch.max(Epoch(1));
        let retried = self.cfg.role == super::Role::Target
            && !self.recovery.was_established()
            && self.handshake.peer_incarnation == Some(hello.incarnation)
            && epoch > self.epoch
            && matches!(state, State::Connecting | State::Recovering);
        if !retried {
            return busy;
        }
        let Some(secret) = self.handshake.secret.clone() else {
            debug_assert!(false, "a target has its secret from the start");
            return busy;
        };
        tracing::info!(session = %self.cfg.id, old = %self.epoch, new = %epoch, "the initiator said hello again: the handshake starts again");
        if state == State::Connecting {
            self.out.act(Action::TearDown { epoch: self.epoch });
        }
        self.devices.release();
        self.timers.stop(TimerKind::KeepaliveSend);
        self.timers.stop(TimerKind::KeepaliveDeadline);
        // A message read on the old transport is read again on the new.
        self.rewind_fetches();
        self.epoch = epoch;
        let pd = wire::AcceptData::Welcome(wire::Welcome {
            session: self.cfg.id,
            incarnation: self.cfg.incarnation,
            secret,
        })
        .to_vec();
        self.out.act(Action::Accept {
            epoch,
            request,
            private_data: pd,
        });
        if state == State::Recovering {
            self.go(State::Reconnecting, Cause::Attempt(1), now);
        }
        self.timers
            .set(TimerKind::ConnectTimeout, self.connect_deadline(now));
        HelloVerdict::Taken
    }

    /// Target: a resume request naming the id of `self`. Verifies it and queues
    /// an [`Action::Accept`] (or [`Action::Reject`]). A connection that was
    /// up is lost by it; an accepted attempt that never came up (in
    /// `Reconnecting`: the initiator timed out before the accept reached
    /// it) fails as an attempt ([`SessionEvent::AttemptFailed`]), costing
    /// no loss.
    pub fn handle_resume_request(
        &mut self,
        request: RequestToken,
        resume: &wire::Resume,
        now: Timestamp,
    ) {
        let refuse = |s: &mut Session, reason| {
            s.out.act(Action::Reject {
                request,
                private_data: wire::RejectData::Refused(wire::Refused { reason }).to_vec(),
            });
        };
        if self.state().is_terminal() {
            refuse(self, wire::RefuseReason::UnknownSession);
            return;
        }
        let Some(secret) = self.handshake.secret.clone() else {
            refuse(self, wire::RefuseReason::UnknownSession);
            return;
        };
        if !resume.verify(&secret) {
            refuse(self, wire::RefuseReason::BadAuthenticator);
            return;
        }
        if resume.epoch < self.next_epoch() {
            refuse(self, wire::RefuseReason::StaleEpoch);
            return;
        }
        // The initiator reconnects on its own: a standby it had is not
        // used (its own side tore it down).
        self.drop_standby(false, StandbyLoss::Released, now);
        // The initiator reconnected: whatever we thought of the old
        // transport, it is gone (or it took it down as planned). An
        // attempt this end accepted that never came up (the initiator's
        // attempt timed out before the accept reached it) was no
        // connection: it failed, and nothing was lost.
        match self.state() {
            State::Recovering | State::Suspended => {}
            State::Reconnecting => self.attempt_failed(AttemptFailure::Timeout, now),
            _ => self.lose_transport(DownCause::CmDisconnected, now),
        }
        self.resumed_by_peer(now);
        // A message read on the old transport is read again on the new.
        self.rewind_fetches();
        self.epoch = resume.epoch;
        self.out.act(Action::Accept {
            epoch: self.epoch,
            request,
            private_data: self.resumed_reply(&secret, self.epoch),
        });
        self.handshake.pending_peer_delivered = resume.last_delivered;
        self.go(State::Reconnecting, Cause::Attempt(1), now);
        self.timers
            .set(TimerKind::ConnectTimeout, self.connect_deadline(now));
    }

    /// Target: the accepted connection of `epoch` is established.
    pub fn handle_accepted(
        &mut self,
        epoch: Epoch,
        device: DeviceInfo,
        local: Vec<LocalKeys>,
        now: Timestamp,
    ) {
        if self.is_standby_epoch(epoch) {
            self.standby_accepted(device, local, now);
            return;
        }
        if epoch != self.epoch || !matches!(self.state(), State::Connecting | State::Reconnecting) {
            return;
        }
        let delivered = self.handshake.pending_peer_delivered;
        self.start_resync(device, local, delivered, now);
    }

    /// The transport of the current epoch is up (CM established) and the
    /// handshake checked out: exchange advertisements.
    fn start_resync(
        &mut self,
        device: DeviceInfo,
        local: Vec<LocalKeys>,
        peer_delivered: Seq,
        now: Timestamp,
    ) {
        // The connect timeout keeps running through the in-band handshake:
        // a connection that CM established but that carries nothing (a
        // broken data path) is abandoned after it, not after the keepalive.
        self.timers
            .set(TimerKind::ConnectTimeout, self.connect_deadline(now));
        self.timers.stop(TimerKind::Backoff);
        self.devices.carry(device);
        self.handshake.local_keys = local;
        self.data.peer_keys.begin(self.epoch);
        let first = self.state() == State::Connecting;
        if !first {
            self.replay_from(peer_delivered);
            self.go(State::Resyncing, Cause::Accepted, now);
        } else {
            self.confirm_delivered(peer_delivered);
        }
        self.advertise(now);
    }

    /// A resume (or a promotion) goes on from what the peer delivered:
    /// the journal confirms what it delivered and replays the rest, and
    /// the replays are counted for the [`SessionEvent::Resumed`] that ends
    /// the resync.
    pub(super) fn replay_from(&mut self, peer_delivered: Seq) {
        let cs = self
            .data
            .journal
            .resume(peer_delivered, self.cfg.policy.replay_atomics);
        self.out.complete(cs);
        self.handshake.replaying = self.data.journal.pending_replays() as u64;
        self.data.raise_peer_delivered(peer_delivered);
    }

    /// The advertisement of region `r` for the current epoch, if it is
    /// advertised and the driver gave its keys.
    fn advert_of(&self, r: &RegionSpec) -> Option<wire::Advert> {
        if !r.advertise {
            return None;
        }
        let k = self
            .handshake
            .local_keys
            .iter()
            .find(|k| k.region == r.id)?;
        Some(wire::Advert {
            epoch: self.epoch,
            region: r.id,
            addr: k.addr,
            len: r.len,
            rkey: k.rkey,
            access: r.access.bits(),
        })
    }

    /// Advertise every advertised region for the current epoch, then say
    /// done; keepalives start.
    pub(super) fn advertise(&mut self, now: Timestamp) {
        let adverts: Vec<wire::Advert> = self
            .cfg
            .spec
            .regions
            .iter()
            .filter_map(|r| self.advert_of(r))
            .collect();
        self.handshake.advertised = Some(self.epoch);
        // An advertisement message is a 2-byte count and the adverts.
        let per_message = self.max_message().saturating_sub(2) / wire::ADVERT_LEN;
        for chunk in adverts.chunks(per_message.clamp(1, wire::MAX_ADVERTS_PER_MESSAGE)) {
            self.counters.adverts_sent += chunk.len() as u64;
            self.send_control(|ack, out| wire::encode_adverts(Seq(0), ack, chunk, out));
        }
        let (epoch, frame_max) = (self.epoch, self.cfg.spec.slot_size);
        let min = self.cfg.spec.rendezvous_min;
        if min > 0 {
            // Before the AdvertDone: the peer knows it when it resumes.
            self.send_control(|ack, out| {
                wire::encode_body(Seq(0), ack, &wire::MsgBody::Rendezvous { min }, out)
            });
        }
        self.send_control(|ack, out| wire::encode_advert_done(Seq(0), ack, epoch, frame_max, out));
        self.arm_keepalive(now);
        // The handshake's confirmations may have emptied the journal of a
        // session closing gracefully: it says goodbye after advertising.
        self.settle_closing(now);
    }

    /// Both sides advertised: traffic flows.
    pub(super) fn finish_resync(&mut self, now: Timestamp) {
        let first = self.state() == State::Connecting;
        let downtime = self.recovery.established(now);
        self.timers.stop(TimerKind::GiveUp);
        self.timers.stop(TimerKind::FastFail);
        self.timers.stop(TimerKind::ConnectTimeout);
        self.decision.established();
        self.go(
            State::Established,
            if first {
                Cause::Accepted
            } else {
                Cause::Resynced
            },
            now,
        );
        if !first || downtime > Duration::ZERO {
            self.counters.resumes += 1;
            self.counters.downtime_ns += u64::try_from(downtime.as_nanos()).unwrap_or(u64::MAX);
            let replayed = std::mem::take(&mut self.handshake.replaying);
            self.counters.replayed += replayed;
            self.out.emit(SessionEvent::Resumed {
                downtime,
                replayed,
                deduplicated: self.data.inbox.duplicates(),
                device: self.devices.current().map(|d| d.id.clone()),
            });
        }
        self.pump(now);
        // A plan asked for while the session was not established.
        self.send_quiesce(now);
        self.start_pending_drain(now);
        self.maybe_build_standby(now);
    }
}
