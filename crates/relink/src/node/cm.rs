//! Connection management: which CM id belongs to what, where a session's
//! connection attempt is, listeners, and connect requests.
//!
//! CM events of a session's retired attempt (an older epoch or CM id) are
//! ignored; a session's core hears only of its current attempt.

use std::net::SocketAddr;
use std::time::Duration;

use relink_core::reason::{AttemptFailure, CmCall, ProviderFailure};
use relink_core::session::{HelloVerdict, RequestToken, Role, Session, SessionConfig};
use relink_core::state::DownCause;
use relink_core::wire;
use relink_core::Epoch;
use relink_fabric::{CmError, CmEventKind, CmId, ConnParams, Timestamp};

use super::index::{CmOwner, Phase};
use super::{Accepted, ListenerHandle, Node, PendingRequest, SessionHandle};

impl Node {
    /// Create, bind and listen the CM id of listener `handle`.
    /// `CmError::AddrNotAvailable`: no device owns its address now.
    pub(super) fn start_listener(&mut self, handle: u64) -> Result<(), CmError> {
        let p = self.provider.clone();
        let l = self.listeners.get_mut(&handle).expect("listener");
        let id = p.cm_create_id()?;
        let r = p.cm_bind(id, l.addr).and_then(|_| p.cm_listen(id, 128));
        match r {
            Ok(()) => {
                l.cm = Some(id);
                self.index.cm_belongs(id, CmOwner::Listener(handle));
                tracing::info!(addr = %l.addr, "listening");
                Ok(())
            }
            Err(e) => {
                let _ = p.cm_destroy_id(id);
                Err(e)
            }
        }
    }

    /// Route a CM event to the listener, request or session attempt that
    /// owns its id.
    pub(super) fn on_cm(&mut self, id: CmId, kind: CmEventKind, now: Timestamp) {
        if let CmEventKind::ConnectRequest {
            listener,
            private_data,
            peer,
            local,
        } = kind
        {
            self.on_connect_request(id, listener, private_data, (peer, local), now);
            return;
        }
        let Some(owner) = self.index.cm_owner(id) else {
            return;
        };
        match owner {
            CmOwner::Listener(handle) => {
                if kind == CmEventKind::DeviceRemoval {
                    // Bound to a device's address: destroy, listen again
                    // when a device that owns the address appears.
                    self.index.cm_gone(id);
                    let _ = self.provider.cm_destroy_id(id);
                    if let Some(l) = self.listeners.get_mut(&handle) {
                        tracing::info!(addr = %l.addr, "listener lost its device; will listen again");
                        l.cm = None;
                    }
                    // A device owning the address may already be back.
                    let back = self
                        .listeners
                        .get(&handle)
                        .is_some_and(|l| self.provider.devices().iter().any(|d| l.served_by(d)));
                    if back {
                        self.restart_listener(handle);
                    }
                }
            }
            CmOwner::Pending => {}
            CmOwner::Closing(handle) => {
                self.transports
                    .on_closing_cm(handle, &kind, &*self.provider, &mut self.index)
            }
            CmOwner::Session {
                handle,
                epoch,
                phase,
            } => self.on_session_cm(handle, epoch, phase, id, kind, now),
        }
    }

    /// Listen again on listener `handle` (its address's device came back);
    /// a failure leaves it waiting for the next device event.
    pub(super) fn restart_listener(&mut self, handle: u64) {
        if let Err(e) = self.start_listener(handle) {
            let addr = self.listeners.get(&handle).map(|l| l.addr);
            tracing::warn!(?addr, "cannot listen again: {e}");
        }
    }

    /// A CM event of a session's attempt: advance the attempt, or tell
    /// the core it failed or its transport went down.
    fn on_session_cm(
        &mut self,
        handle: u64,
        epoch: Epoch,
        phase: Phase,
        id: CmId,
        kind: CmEventKind,
        now: Timestamp,
    ) {
        let p = self.provider.clone();
        let Some(entry) = self.sessions.get_mut(&handle) else {
            return;
        };
        if entry.is_standby_cm(epoch, id) {
            entry.on_standby_cm(handle, epoch, phase, id, kind, now, &p, &mut self.index);
            self.run_actions(handle);
            return;
        }
        let current = entry
            .transport
            .as_ref()
            .is_some_and(|t| t.epoch == epoch && t.cm == Some(id));
        if !current {
            tracing::debug!(?id, ?kind, "CM event of a retired attempt ignored");
            return;
        }
        if phase == Phase::Up && kind == CmEventKind::Disconnected {
            // The peer disconnected. A message it sent before (its goodbye,
            // when it closed the session) may wait in the CQ, raised in the
            // same poll round: read it before the transport goes, or the
            // admin close would look like a loss and be recovered from.
            self.read_cq_before_loss(handle);
            if let Some(entry) = self.sessions.get_mut(&handle) {
                entry
                    .core
                    .handle_transport_down(epoch, DownCause::CmDisconnected, now);
            }
            self.run_actions(handle);
            // The peer's goodbye closed the session: its transport went to
            // the closing transports, but the connection is gone already.
            if let Some(CmOwner::Closing(closing)) = self.index.cm_owner(id) {
                self.transports
                    .on_closing_cm(closing, &kind, &*self.provider, &mut self.index);
            }
            return;
        }
        let cm_failed = |call, error| AttemptFailure::Provider(ProviderFailure::Cm { call, error });
        match (phase, kind) {
            (Phase::Resolving, CmEventKind::AddrResolved) => {
                if let Some(tl) = entry.timeline.as_mut() {
                    tl.addr_resolved = Some(now);
                }
                if let Err(e) = p.cm_resolve_route(id, Duration::from_secs(2)) {
                    entry.core.handle_attempt_failed(
                        epoch,
                        cm_failed(CmCall::ResolveRoute, e),
                        now,
                    );
                } else {
                    self.index.cm_phase(id, handle, epoch, Phase::Routing);
                }
            }
            (Phase::Routing, CmEventKind::RouteResolved) => {
                if let Some(tl) = entry.timeline.as_mut() {
                    tl.route_resolved = Some(now);
                }
                let device = p
                    .cm_device(id)
                    .and_then(|d| p.devices().into_iter().find(|x| x.id == d));
                let Some(device) = device else {
                    entry
                        .core
                        .handle_attempt_failed(epoch, AttemptFailure::DeviceLost, now);
                    self.run_actions(handle);
                    return;
                };
                let t = entry.transport.as_mut().expect("current");
                let shared = entry.shared.as_ref();
                if let Err(e) = t.build(&p, device, &entry.spec, &entry.memory, shared) {
                    entry.core.handle_attempt_failed(epoch, e, now);
                    self.run_actions(handle);
                    return;
                }
                if let Some(tl) = entry.timeline.as_mut() {
                    tl.resources = Some(p.now());
                }
                let qp = t.qp.expect("built");
                let params = ConnParams::default();
                if let Err(e) = p.cm_connect(id, qp, params, &entry.connect_data) {
                    entry
                        .core
                        .handle_attempt_failed(epoch, cm_failed(CmCall::Connect, e), now);
                } else {
                    self.index.cm_phase(id, handle, epoch, Phase::Connecting);
                }
            }
            (Phase::Connecting, CmEventKind::Established { private_data }) => {
                let t = entry.transport.as_mut().expect("current");
                t.connected = true;
                let device = t.device.clone().expect("built");
                if let Err(e) = t.bind_windows(&*p) {
                    entry.core.handle_attempt_failed(epoch, e, now);
                    self.run_actions(handle);
                    return;
                }
                let keys = t.local_keys();
                if let Some(tl) = entry.timeline.as_mut() {
                    tl.connected = Some(now);
                }
                entry
                    .core
                    .handle_connected(epoch, device, &private_data, keys, now);
                self.index.cm_phase(id, handle, epoch, Phase::Up);
                // What arrived before this event waits in the CQ.
                self.index.cq_signalled(handle);
            }
            (Phase::Accepting, CmEventKind::Established { .. }) => {
                let t = entry.transport.as_mut().expect("current");
                t.connected = true;
                let device = t.device.clone().expect("built");
                if let Err(e) = t.bind_windows(&*p) {
                    entry.core.handle_attempt_failed(epoch, e, now);
                    self.run_actions(handle);
                    return;
                }
                let keys = t.local_keys();
                if let Some(tl) = entry.timeline.as_mut() {
                    tl.connected = Some(now);
                }
                entry.core.handle_accepted(epoch, device, keys, now);
                self.index.cm_phase(id, handle, epoch, Phase::Up);
                // What arrived before this event waits in the CQ.
                self.index.cq_signalled(handle);
            }
            (_, CmEventKind::Rejected { private_data, .. }) => {
                entry.core.handle_rejected(epoch, &private_data, now);
            }
            (
                Phase::Resolving | Phase::Routing | Phase::Connecting | Phase::Accepting,
                failed @ (CmEventKind::AddrError
                | CmEventKind::RouteError
                | CmEventKind::Unreachable
                | CmEventKind::ConnectError
                | CmEventKind::DeviceRemoval
                | CmEventKind::Disconnected),
            ) => {
                let why = match failed {
                    CmEventKind::AddrError => AttemptFailure::AddrUnresolved,
                    CmEventKind::RouteError => AttemptFailure::RouteUnresolved,
                    CmEventKind::Unreachable => AttemptFailure::Unreachable,
                    CmEventKind::ConnectError => AttemptFailure::ConnectError,
                    CmEventKind::DeviceRemoval => AttemptFailure::DeviceLost,
                    _ => AttemptFailure::Disconnected,
                };
                entry.core.handle_attempt_failed(epoch, why, now);
            }
            (Phase::Up, CmEventKind::DeviceRemoval) => {
                entry
                    .core
                    .handle_transport_down(epoch, DownCause::CmDeviceRemoval, now);
            }
            (Phase::Up, CmEventKind::AddrChange) => {
                entry
                    .core
                    .handle_transport_down(epoch, DownCause::AddrChange, now);
            }
            (phase, kind) => tracing::debug!(?id, ?phase, ?kind, "CM event ignored"),
        }
        self.run_actions(handle);
    }

    /// A connect request to a listener: a hello is refused `ShuttingDown`
    /// while the node shuts down; a hello of an unknown session makes
    /// a new session; a hello of a known one goes to that session's core
    /// (`Session::handle_hello`: it restarts its first handshake, or is
    /// over and replaced by a new session, or refuses); a resume goes to
    /// the session it names (whose core accepts or rejects it); anything
    /// else is refused; a standby request goes to the session it names,
    /// as a resume.
    /// `addrs` are the initiator's address and the local one.
    fn on_connect_request(
        &mut self,
        id: CmId,
        listener: CmId,
        private_data: Vec<u8>,
        addrs: (SocketAddr, SocketAddr),
        now: Timestamp,
    ) {
        let Some(CmOwner::Listener(lk)) = self.index.cm_owner(listener) else {
            let _ = self.provider.cm_reject(id, &[]);
            let _ = self.provider.cm_destroy_id(id);
            return;
        };
        let token = self.new_handle();
        self.index.cm_belongs(id, CmOwner::Pending);
        self.pending.insert(token, PendingRequest { cm: id });
        let refuse = |node: &mut Node, reason| {
            let data = wire::RejectData::Refused(wire::Refused { reason }).to_vec();
            node.reject(RequestToken(token), &data);
        };
        match wire::ConnectData::decode(&private_data) {
            Ok(wire::ConnectData::Hello(h)) => {
                if self.shutting_down {
                    // No new session while the node shuts down (a resume
                    // of one it has still reaches that session).
                    refuse(self, wire::RefuseReason::ShuttingDown);
                    return;
                }
                if let Some(old) = self.by_id.get(&(h.session, Role::Target)).copied() {
                    // A session of this id exists here: it takes the Hello
                    // (a retried first handshake), gives way to a new
                    // session (it is over), or refuses (`handle_hello`).
                    let entry = self.sessions.get_mut(&old).expect("indexed");
                    let verdict = entry.core.handle_hello(RequestToken(token), &h, now);
                    self.run_actions(old);
                    match verdict {
                        HelloVerdict::Taken => return,
                        HelloVerdict::Refuse(reason) => {
                            refuse(self, reason);
                            return;
                        }
                        HelloVerdict::Replaced => {
                            self.by_id.remove(&(h.session, Role::Target));
                        }
                    }
                }
                let opts = self.listeners[&lk].opts.clone();
                let cfg = SessionConfig {
                    role: Role::Target,
                    id: h.session,
                    incarnation: self.incarnation,
                    paths: Vec::new(),
                    policy: opts.policy.clone(),
                    spec: opts.spec(),
                    seed: self.rng.next_u64(),
                    connect_data: h.connect_data,
                };
                let mut secret = [0u8; 32];
                self.rng.fill_bytes(&mut secret);
                match Session::accept_hello(cfg, RequestToken(token), &h, secret, now) {
                    Ok(mut core) => {
                        core.set_devices(self.provider.devices(), now);
                        match self.insert_session(core, opts) {
                            Ok(handle) => {
                                self.accepted.push_back(Accepted {
                                    session: SessionHandle(handle),
                                    listener: ListenerHandle(lk),
                                    peer: addrs.0,
                                    local: addrs.1,
                                    connect_data: h.connect_data.to_vec(),
                                });
                                self.run_actions(handle);
                            }
                            Err(e) => {
                                tracing::warn!("accept: {e}");
                                refuse(self, wire::RefuseReason::Busy);
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!("accept: {e}");
                        refuse(self, wire::RefuseReason::Busy);
                    }
                }
            }
            Ok(wire::ConnectData::Resume(r)) => {
                match self.by_id.get(&(r.session, Role::Target)).copied() {
                    Some(handle) => {
                        let entry = self.sessions.get_mut(&handle).expect("indexed");
                        entry
                            .core
                            .handle_resume_request(RequestToken(token), &r, now);
                        self.run_actions(handle);
                    }
                    None => refuse(self, wire::RefuseReason::UnknownSession),
                }
            }
            Ok(wire::ConnectData::Standby(r)) => {
                match self.by_id.get(&(r.session, Role::Target)).copied() {
                    Some(handle) => {
                        let entry = self.sessions.get_mut(&handle).expect("indexed");
                        entry
                            .core
                            .handle_standby_request(RequestToken(token), &r, now);
                        self.run_actions(handle);
                    }
                    None => refuse(self, wire::RefuseReason::UnknownSession),
                }
            }
            Err(e) => {
                tracing::debug!("connect request with bad private data: {e}");
                refuse(self, wire::RefuseReason::UnsupportedVersion);
            }
        }
    }

    /// Reject a connect request with `data` and forget its CM id.
    pub(super) fn reject(&mut self, request: RequestToken, data: &[u8]) {
        if let Some(req) = self.pending.remove(&request.0) {
            self.index.cm_gone(req.cm);
            let _ = self.provider.cm_reject(req.cm, data);
            let _ = self.provider.cm_destroy_id(req.cm);
        }
    }
}
