//! A session's standby transport (`Policy::standby`): built next to the
//! current one on the core's `ConnectStandby` / `AcceptStandby`, driven
//! through its CM events, kept alive by the core's `ProbeStandby`
//! keepalives (a SEND with immediate data and no payload: no send slot),
//! watched for the peer's promotion (a message received on it),
//! and swapped in as the current transport on the core's `Promote`. Its
//! receives land in the session's second receive area
//! (`SessionMemory::recv_alt`).
//!
//! The node never decides a standby's end itself: it reports what it
//! sees (a CM event, an error completion, a refused post) to the core,
//! whose standby silence timer also runs in the node's rounds; the core's
//! `TearDown` of the standby's epoch destroys it here, and the
//! application gets `SessionEvent::StandbyLost` with the device, the path
//! and the cause (`StandbyLoss::Silent` when no keepalive came for two
//! periods).

use std::sync::Arc;
use std::time::Duration;

use relink_core::reason::{AttemptFailure, CmCall, ProviderFailure, TransportObject};
use relink_core::session::{Path, RequestToken};
use relink_core::state::DownCause;
use relink_core::Epoch;
use relink_fabric::{
    CmEventKind, CmId, ConnParams, CqId, CreateError, Provider, RecvWr, SendOp, SendWr, Timestamp,
    WcStatus, WorkCompletion,
};

use super::actions::start_resolve;
use super::completions::{poll_or_arm, retire_through};
use super::entry::SessionEntry;
use super::index::{Index, Phase};
use super::transport::Transport;
use super::transports::{destroy, RETIRE_HOLD};
use super::wr::{WrBatch, TAG_LOCAL, TAG_MASK, TAG_RECV};
use super::Node;

/// The `wr_id` of a keepalive on a standby: a local request's tag (no send
/// slot, no operation; a completion of it that trails a promotion retires
/// as a control message's) with a bit no region's id reaches.
const PROBE_WR: u64 = TAG_LOCAL | (1 << 40);

/// Whether `wc`, from a standby's CQ, is the standby's own traffic rather
/// than the peer's promotion, which only a message received can be: a
/// send-queue completion (one of its keepalives, a window's bind), the
/// peer's keepalive (a receive with no bytes and an immediate; no message
/// is empty), or an error (the standby's QP failed).
fn is_standby_own(wc: &WorkCompletion) -> bool {
    wc.wr_id & TAG_MASK != TAG_RECV
        || wc.status != WcStatus::Success
        || (wc.byte_len == 0 && wc.imm.is_some())
}

impl SessionEntry {
    /// The session's second receive area, allocated with its first
    /// standby; `false` if it cannot be.
    fn ensure_recv_alt(&mut self, p: &dyn Provider) -> bool {
        if self.memory.recv_alt.is_some() {
            return true;
        }
        let len = self.spec.recv_slots as usize * self.spec.slot_size as usize;
        match p.alloc_memory(len) {
            Ok(m) => {
                self.memory.recv_alt = Some(m);
                true
            }
            Err(e) => {
                tracing::warn!("no memory for a standby's receive slots: {e}");
                false
            }
        }
    }

    /// A new standby transport of `epoch` on CM id `cm`, replacing one the
    /// session had; its receives take the receive area the current
    /// transport does not use.
    fn new_standby(&mut self, epoch: Epoch, cm: CmId, p: &dyn Provider, index: &mut Index) {
        if let Some(old) = self.standby.take() {
            destroy(p, *old, index);
        }
        let mut t = Transport::new(epoch, Some(cm), self.spec.send_slots);
        t.recv_alt = !self.transport.as_ref().is_some_and(|c| c.recv_alt);
        self.standby = Some(Box::new(t));
        self.standby_ready = false;
    }

    /// The core's `ConnectStandby` for session `handle`: resolve `path`; the
    /// rest follows its CM events ([`SessionEntry::on_standby_cm`]).
    pub fn connect_standby(
        &mut self,
        handle: u64,
        epoch: Epoch,
        path: Path,
        private_data: Vec<u8>,
        p: &dyn Provider,
        index: &mut Index,
    ) {
        let now = p.now();
        if !self.ensure_recv_alt(p) {
            self.core.handle_attempt_failed(epoch, no_recv_area(), now);
            return;
        }
        let id = match p.cm_create_id() {
            Ok(id) => id,
            Err(error) => {
                let why = ProviderFailure::Cm {
                    call: CmCall::CreateId,
                    error,
                };
                self.core.handle_attempt_failed(epoch, why.into(), now);
                return;
            }
        };
        self.new_standby(epoch, id, p, index);
        self.standby_connect = (private_data, Some(path));
        let timeout = self.opts.policy.connect_timeout;
        if let Err(why) = start_resolve(p, index, handle, epoch, id, path, timeout) {
            self.core.handle_attempt_failed(epoch, why.into(), now);
        }
    }

    /// The core's `AcceptStandby` for session `handle`, its connect request
    /// on CM id `cm`: build the standby on the request's device and accept
    /// it.
    pub fn accept_standby(
        &mut self,
        handle: u64,
        epoch: Epoch,
        cm: CmId,
        private_data: &[u8],
        p: &Arc<dyn Provider>,
        index: &mut Index,
    ) {
        let now = p.now();
        index.cm_phase(cm, handle, epoch, Phase::Accepting);
        if !self.ensure_recv_alt(&**p) {
            let _ = p.cm_reject(cm, &[]);
            index.cm_gone(cm);
            let _ = p.cm_destroy_id(cm);
            self.core.handle_attempt_failed(epoch, no_recv_area(), now);
            return;
        }
        self.new_standby(epoch, cm, &**p, index);
        let t = self.standby.as_mut().expect("just made");
        let device = p
            .cm_device(cm)
            .and_then(|d| p.devices().into_iter().find(|x| x.id == d));
        let built = match device {
            Some(d) => t.build(p, d, &self.spec, &self.memory, self.shared.as_ref()),
            None => Err(AttemptFailure::DeviceLost),
        };
        let accepted = built.and_then(|()| {
            p.cm_accept(cm, t.qp.expect("built"), private_data)
                .map_err(|error| {
                    ProviderFailure::Cm {
                        call: CmCall::Accept,
                        error,
                    }
                    .into()
                })
        });
        if let Err(e) = accepted {
            tracing::warn!("standby accept failed: {e}");
            self.core.handle_attempt_failed(epoch, e, now);
        }
    }

    /// The core's `ProbeStandby`: post a keepalive (a SEND with immediate
    /// `imm` and no payload) on the standby of `epoch`; a refused post is
    /// the standby's loss.
    pub fn probe_standby(&mut self, epoch: Epoch, imm: u32, p: &dyn Provider) {
        let Some(t) = self
            .standby
            .as_mut()
            .filter(|t| t.epoch == epoch && t.connected)
        else {
            return;
        };
        let Some(qp) = t.qp else {
            return;
        };
        let wr = SendWr::new(PROBE_WR, SendOp::SendWithImm { imm }, Vec::new());
        match p.post_send(qp, std::slice::from_ref(&wr)) {
            Ok(()) => t.posted.push_back(PROBE_WR),
            Err(e) => {
                tracing::debug!(session = %self.core.id(), %epoch, "standby keepalive not posted: {e}");
                self.core
                    .handle_transport_down(epoch, DownCause::DeviceRemoved, p.now());
            }
        }
    }

    /// The standby's own traffic `wcs` (see [`is_standby_own`]) of its
    /// standby of `epoch`: a send-queue completion retires its request, a
    /// received keepalive goes to the core and its receive is posted
    /// again, an error is the standby's loss. `recv_batch`: the node's,
    /// reused.
    fn standby_keepalives(
        &mut self,
        epoch: Epoch,
        wcs: &[WorkCompletion],
        p: &dyn Provider,
        recv_batch: &mut WrBatch<RecvWr>,
    ) {
        let now = p.now();
        let Some(t) = self.standby.as_mut().filter(|t| t.epoch == epoch) else {
            return;
        };
        recv_batch.clear();
        for wc in wcs {
            let recv = wc.wr_id & TAG_MASK == TAG_RECV;
            if !recv {
                retire_through(t, wc, |_, _, _| {});
            }
            if wc.status != WcStatus::Success {
                let cause = DownCause::Completion(wc.status);
                self.core.handle_transport_down(epoch, cause, now);
            } else if recv {
                if let Some(mr) = t.recv_mr {
                    let s = (wc.wr_id & !TAG_MASK) as u32;
                    recv_batch.push_recv(&mr, self.spec.slot_size, s);
                }
                self.core
                    .handle_standby_keepalive(epoch, wc.imm.unwrap_or(0), now);
            }
        }
        if let (false, Some(qp)) = (recv_batch.is_empty(), t.qp) {
            if p.post_recv(qp, recv_batch.as_slice()).is_err() {
                self.core
                    .handle_transport_down(epoch, DownCause::DeviceRemoved, now);
            }
        }
        recv_batch.clear();
    }

    /// Whether `cq` is the standby's: then it is looked at in the next
    /// round.
    pub fn note_standby_cq(&mut self, cq: CqId) {
        if self.standby.as_ref().and_then(|t| t.cq) == Some(cq) {
            self.standby_ready = true;
        }
    }

    /// Whether CM id `id` of epoch `epoch` is the standby's.
    pub fn is_standby_cm(&self, epoch: Epoch, id: CmId) -> bool {
        self.standby
            .as_ref()
            .is_some_and(|t| t.epoch == epoch && t.cm == Some(id))
    }

    /// A CM event of session `handle`'s standby: advance its connection, or
    /// tell the core it failed or went down (which tears down only the
    /// standby). The node runs the core's actions after.
    #[allow(clippy::too_many_arguments)]
    pub fn on_standby_cm(
        &mut self,
        handle: u64,
        epoch: Epoch,
        phase: Phase,
        id: CmId,
        kind: CmEventKind,
        now: Timestamp,
        p: &Arc<dyn Provider>,
        index: &mut Index,
    ) {
        let cm_failed = |call, error| AttemptFailure::Provider(ProviderFailure::Cm { call, error });
        match (phase, kind) {
            (Phase::Resolving, CmEventKind::AddrResolved) => {
                if let Err(e) = p.cm_resolve_route(id, Duration::from_secs(2)) {
                    self.core
                        .handle_attempt_failed(epoch, cm_failed(CmCall::ResolveRoute, e), now);
                } else {
                    index.cm_phase(id, handle, epoch, Phase::Routing);
                }
            }
            (Phase::Routing, CmEventKind::RouteResolved) => {
                let device = p
                    .cm_device(id)
                    .and_then(|d| p.devices().into_iter().find(|x| x.id == d));
                let t = self.standby.as_mut().expect("checked");
                let built = match device {
                    Some(d) => t.build(p, d, &self.spec, &self.memory, self.shared.as_ref()),
                    None => Err(AttemptFailure::DeviceLost),
                };
                let connected = built.and_then(|()| {
                    let qp = t.qp.expect("built");
                    p.cm_connect(id, qp, ConnParams::default(), &self.standby_connect.0)
                        .map_err(|e| cm_failed(CmCall::Connect, e))
                });
                match connected {
                    Ok(()) => index.cm_phase(id, handle, epoch, Phase::Connecting),
                    Err(e) => self.core.handle_attempt_failed(epoch, e, now),
                }
            }
            (
                phase @ (Phase::Connecting | Phase::Accepting),
                CmEventKind::Established { private_data },
            ) => {
                let t = self.standby.as_mut().expect("checked");
                t.connected = true;
                let device = t.device.clone().expect("built");
                if let Err(e) = t.bind_windows(&**p) {
                    self.core.handle_attempt_failed(epoch, e, now);
                } else {
                    let keys = t.local_keys();
                    if phase == Phase::Connecting {
                        self.core
                            .handle_connected(epoch, device, &private_data, keys, now);
                    } else {
                        self.core.handle_accepted(epoch, device, keys, now);
                    }
                    // Look at its CQ once (arming it): the peer may have
                    // promoted it already.
                    self.standby_ready = true;
                    index.cq_signalled(handle);
                    index.cm_phase(id, handle, epoch, Phase::Up);
                }
            }
            (_, CmEventKind::Rejected { private_data, .. }) => {
                self.core.handle_rejected(epoch, &private_data, now);
            }
            (Phase::Up, CmEventKind::Disconnected) => {
                self.core
                    .handle_transport_down(epoch, DownCause::CmDisconnected, now);
            }
            (Phase::Up, CmEventKind::DeviceRemoval) => {
                self.core
                    .handle_transport_down(epoch, DownCause::CmDeviceRemoval, now);
            }
            (Phase::Up, CmEventKind::AddrChange) => {
                self.core
                    .handle_transport_down(epoch, DownCause::AddrChange, now);
            }
            (
                Phase::Resolving | Phase::Routing | Phase::Connecting | Phase::Accepting,
                CmEventKind::AddrError
                | CmEventKind::RouteError
                | CmEventKind::Unreachable
                | CmEventKind::ConnectError
                | CmEventKind::DeviceRemoval
                | CmEventKind::Disconnected,
            ) => {
                self.core
                    .handle_attempt_failed(epoch, AttemptFailure::Disconnected, now);
            }
            (phase, kind) => tracing::debug!(?id, ?phase, ?kind, "standby CM event ignored"),
        }
    }
}

impl Node {
    /// The core's `AcceptStandby` for session `handle`: its connect request
    /// goes to the session's entry, which builds the standby and accepts.
    pub(super) fn accept_standby(
        &mut self,
        handle: u64,
        epoch: Epoch,
        request: RequestToken,
        private_data: &[u8],
    ) {
        let Some(req) = self.pending.remove(&request.0) else {
            return;
        };
        if let Some(entry) = self.sessions.get_mut(&handle) {
            entry.accept_standby(
                handle,
                epoch,
                req.cm,
                private_data,
                &self.provider,
                &mut self.index,
            );
        }
    }

    /// The core's `Promote`: session `handle`'s standby of `epoch` becomes
    /// the current transport; the one it replaces retires, held until the
    /// switch is over. What the standby received already waits in its CQ,
    /// read in the next poll round.
    pub(super) fn promote_standby(&mut self, handle: u64, epoch: Epoch) {
        let Some(entry) = self.sessions.get_mut(&handle) else {
            return;
        };
        let Some(t) = entry.standby.take_if(|t| t.epoch == epoch) else {
            return;
        };
        let old = entry.transport.replace(*t);
        if let Some(path) = entry.standby_connect.1.take() {
            entry.path = Some(path);
        }
        entry.standby_ready = false;
        let p = &*self.provider;
        if let Some(old) = old {
            let lost = entry.outage_begins(&old, p.now());
            self.transports
                .give_up(handle, old, self.rounds, lost, &mut self.index);
        }
        self.transports.hold(handle, p.now() + RETIRE_HOLD);
        if let Some(tl) = entry.timeline.as_mut().filter(|tl| tl.out()) {
            tl.promoted = Some(p.now());
        }
        self.index.cq_signalled(handle);
    }

    /// Before a poll round reads session `handle`'s CQ, when its standby's CQ
    /// signalled (`standby_ready`): its own traffic is handled
    /// (`SessionEntry::standby_keepalives`); anything else in it means the
    /// peer promoted the standby. The core is told (it promotes the standby
    /// here too) and the node performs that; the completions from the
    /// first one that is not a keepalive's are left in the node's buffer
    /// for the round, which reads them as the current transport's.
    /// Returns whether it did.
    pub(super) fn standby_promoted_by_peer(&mut self, handle: u64) -> bool {
        let p = self.provider.clone();
        let Some(mut entry) = self.sessions.get_mut(&handle) else {
            return false;
        };
        if !std::mem::take(&mut entry.standby_ready) {
            return false;
        }
        let Some((cq, epoch)) = entry
            .standby
            .as_ref()
            .filter(|t| t.connected)
            .and_then(|t| Some((t.cq?, t.epoch)))
        else {
            return false;
        };
        loop {
            if !poll_or_arm(&*p, cq, &mut self.wcs) {
                return false;
            }
            let other = self.wcs.iter().position(|wc| !is_standby_own(wc));
            let n = other.unwrap_or(self.wcs.len());
            entry.standby_keepalives(epoch, &self.wcs[..n], &*p, &mut self.recv_batch);
            self.wcs.drain(..n);
            let wcs = std::mem::take(&mut self.wcs);
            self.run_actions(handle);
            self.wcs = wcs;
            let Some(again) = self
                .sessions
                .get_mut(&handle)
                .filter(|s| s.standby.as_ref().is_some_and(|t| t.epoch == epoch))
            else {
                // Torn down (its QP failed): nothing to promote.
                return false;
            };
            entry = again;
            if other.is_some() {
                break;
            }
        }
        tracing::debug!(session = %entry.core.id(), %epoch, "traffic on the standby: the peer promoted it");
        entry.core.handle_standby_traffic(epoch, p.now());
        let wcs = std::mem::take(&mut self.wcs);
        self.run_actions(handle);
        self.wcs = wcs;
        self.sessions
            .get(&handle)
            .and_then(|s| s.transport.as_ref())
            .is_some_and(|t| t.epoch == epoch)
    }
}

/// The standby's receive area could not be allocated.
fn no_recv_area() -> AttemptFailure {
    ProviderFailure::Create {
        object: TransportObject::RecvSlots,
        error: CreateError::Exhausted("memory for a standby's receive slots"),
    }
    .into()
}
