//! Carrying out a session core's actions against the provider (connect,
//! accept, reject, tear down; a disconnect hands the transport to the
//! closing transports, `closing.rs`) and indexing what the session waits
//! for next: its CQ, its queued work requests, its next timer.

use std::collections::BTreeMap;

use relink_core::reason::{AttemptFailure, CmCall, ProviderFailure};
use relink_core::session::Action;
use relink_core::state::State;
use relink_fabric::{CmId, CqId, Provider};

use super::backlog::encode_messages;
use super::cm::{CmOwner, Phase};
use super::timeline::RecoveryTimeline;
use super::transport::Transport;
use super::{Node, Retiring, RETIRE_HOLD};

/// Forget a transport's CM id and CQ and destroy its objects (destroy calls
/// only: after a device loss they report "already released").
pub(super) fn retire_transport(
    p: &dyn Provider,
    mut t: Transport,
    cm: &mut BTreeMap<CmId, CmOwner>,
    cq_owner: &mut BTreeMap<CqId, u64>,
) {
    detach_transport(&t, cm, cq_owner);
    t.tear_down(p);
}

/// Forget a transport's CM id and CQ: nothing that comes from them reaches
/// its session any more. Its objects stay until [`Transport::tear_down`].
pub(super) fn detach_transport(
    t: &Transport,
    cm: &mut BTreeMap<CmId, CmOwner>,
    cq_owner: &mut BTreeMap<CqId, u64>,
) {
    if let Some(id) = t.cm {
        cm.remove(&id);
    }
    if let Some(cq) = t.cq {
        cq_owner.remove(&cq);
    }
}

impl Node {
    /// Give up session `key`'s transport `t`: detach it at once and destroy
    /// it at the end of the next poll round (`Node::retiring`), so what
    /// the session posts next goes out first. A connected one begins the
    /// session's new outage in its recovery timeline.
    pub(super) fn give_up(&mut self, key: u64, t: Transport) {
        let lost = t.connected.then(|| self.provider.now());
        if let (Some(at), Some(slot)) = (lost, self.sessions.get_mut(&key)) {
            slot.timeline = Some(RecoveryTimeline::new(at));
        }
        detach_transport(&t, &mut self.cm, &mut self.cq_owner);
        self.retiring.push(Retiring {
            key,
            round: self.rounds,
            hold: None,
            lost,
            transport: t,
        });
    }

    /// Hold session `key`'s transports given up so far — the one a
    /// promotion replaces — until the session completed an operation on
    /// the standby (its recovery timeline is complete), or [`RETIRE_HOLD`]
    /// from now, whichever comes first: their destruction waits until the
    /// switch (the peer's `Promote`, the resync, the replay) is over.
    pub(super) fn hold_retiring(&mut self, key: u64) {
        let by = self.provider.now() + RETIRE_HOLD;
        for r in self.retiring.iter_mut().filter(|r| r.key == key) {
            r.hold.get_or_insert(by);
        }
    }

    /// Perform the core's actions and index what the session now waits
    /// for (its CQ, queued work, its next timer). Completions, deliveries
    /// and events stay in the core until the application polls them; a
    /// session that has some joins the ready queue of
    /// [`Node::poll_output`].
    pub(super) fn run_actions(&mut self, key: u64) {
        loop {
            let Some(slot) = self.sessions.get_mut(&key) else {
                return;
            };
            let Some(action) = slot.next_action() else {
                break;
            };
            if matches!(action, Action::Disconnect { .. } | Action::TearDown { .. }) {
                // Messages queued before a disconnect (the goodbye of an
                // admin close) go out first.
                self.drain_backlog(key);
            }
            self.perform(key, action);
        }
        let slot = self.sessions.get_mut(&key).expect("present");
        if let Some(tl) = slot.timeline.as_mut().filter(|tl| !tl.complete()) {
            if slot.core.state() == State::Established {
                tl.established(self.provider.now(), slot.core.counters().completed);
            }
        }
        // A CQ built since the last call: poll (and so arm) it.
        if let Some(t) = slot.transport.as_mut().filter(|t| !t.cq_indexed) {
            if let Some(cq) = t.cq {
                t.cq_indexed = true;
                self.cq_owner.insert(cq, key);
                self.dirty.insert(key);
            }
        }
        // A standby's CQ: indexed too, armed once it is connected.
        if let Some(t) = slot.standby.as_mut().filter(|t| !t.cq_indexed) {
            if let Some(cq) = t.cq {
                t.cq_indexed = true;
                self.cq_owner.insert(cq, key);
            }
        }
        if !slot.backlog.is_empty() {
            self.pending_drain.insert(key);
        }
        if slot.core.has_output() {
            self.ready.push(key);
        }
        // An ended session is reaped once drained (`poll`), or when its
        // linger runs out: that is its last deadline.
        if slot.core.state().is_terminal() && !self.ended.contains_key(&key) {
            self.ended.insert(key, self.provider.now());
            self.reap_check.insert(key);
        }
        // Re-index the session's next timer.
        let mut next = slot.core.poll_timeout();
        if let Some(at) = self.ended.get(&key) {
            let reap = *at + self.linger;
            next = Some(next.map_or(reap, |n| n.min(reap)));
        }
        if slot.deadline != next {
            if let Some(old) = slot.deadline.take() {
                self.deadlines.remove(&(old, key));
            }
            if let Some(t) = next {
                slot.deadline = Some(t);
                self.deadlines.insert((t, key));
            }
        }
        self.coordinate_probes(key);
    }

    /// Carry out one action of the core (not a work request: those join
    /// the backlog in `Slot::next_action`).
    fn perform(&mut self, key: u64, action: Action) {
        let p = &*self.provider;
        let slot = self.sessions.get_mut(&key).expect("present");
        match action {
            Action::TearDown { epoch }
                if slot.standby.as_ref().is_some_and(|t| t.epoch == epoch) =>
            {
                if let Some(t) = slot.standby.take() {
                    retire_transport(p, *t, &mut self.cm, &mut self.cq_owner);
                }
                slot.standby_ready = false;
            }
            Action::ConnectStandby {
                epoch,
                path,
                private_data,
            } => self.connect_standby(key, epoch, path, private_data),
            Action::AcceptStandby {
                epoch,
                request,
                private_data,
            } => self.accept_standby(key, epoch, request, &private_data),
            Action::Promote { epoch } => self.promote_standby(key, epoch),
            Action::ProbeStandby { epoch, imm } => self.probe_standby(key, epoch, imm),
            Action::TearDown { epoch } => {
                slot.backlog.clear();
                if let Some(t) = slot.transport.take_if(|t| t.epoch == epoch) {
                    self.give_up(key, t);
                }
            }
            Action::Connect {
                epoch,
                path,
                private_data,
            } => {
                if let Some(old) = slot.transport.take() {
                    retire_transport(p, old, &mut self.cm, &mut self.cq_owner);
                }
                let id = match p.cm_create_id() {
                    Ok(id) => id,
                    Err(error) => {
                        let why = ProviderFailure::Cm {
                            call: CmCall::CreateId,
                            error,
                        };
                        slot.core.handle_attempt_failed(epoch, why.into(), p.now());
                        return;
                    }
                };
                slot.transport = Some(Transport::new(epoch, Some(id), slot.spec.send_slots));
                if let Some(tl) = slot.timeline.as_mut() {
                    tl.attempt(p.now());
                }
                slot.connect_data = private_data;
                slot.path = Some(path);
                let timeout = slot.opts.policy.connect_timeout;
                if let Err(why) = start_resolve(p, &mut self.cm, key, epoch, id, path, timeout) {
                    slot.core.handle_attempt_failed(epoch, why.into(), p.now());
                }
            }
            Action::Accept {
                epoch,
                request,
                private_data,
            } => {
                let Some(req) = self.pending.remove(&request.0) else {
                    return;
                };
                if let Some(old) = slot.transport.take() {
                    retire_transport(p, old, &mut self.cm, &mut self.cq_owner);
                }
                let mut t = Transport::new(epoch, Some(req.cm), slot.spec.send_slots);
                if let Some(tl) = slot.timeline.as_mut() {
                    tl.attempt(p.now());
                }
                let device = p
                    .cm_device(req.cm)
                    .and_then(|d| p.devices().into_iter().find(|x| x.id == d));
                let built = match device {
                    Some(d) => t.build(
                        &self.provider,
                        d,
                        &slot.spec,
                        &slot.memory,
                        slot.shared.as_ref(),
                    ),
                    None => Err(AttemptFailure::DeviceLost),
                };
                if let (Ok(()), Some(tl)) = (&built, slot.timeline.as_mut()) {
                    tl.resources = Some(p.now());
                }
                let accepted = built.and_then(|()| {
                    p.cm_accept(req.cm, t.qp.expect("built"), &private_data)
                        .map_err(|error| {
                            ProviderFailure::Cm {
                                call: CmCall::Accept,
                                error,
                            }
                            .into()
                        })
                });
                self.cm.insert(
                    req.cm,
                    CmOwner::Session {
                        key,
                        epoch,
                        phase: Phase::Accepting,
                    },
                );
                slot.transport = Some(t);
                if let Err(e) = accepted {
                    tracing::warn!("accept failed: {e}");
                    slot.core.handle_attempt_failed(epoch, e, p.now());
                }
            }
            Action::Reject {
                request,
                private_data,
            } => self.reject(request, &private_data),
            Action::Send { .. } | Action::SendMessage { .. } | Action::OneSided { .. } => {
                unreachable!("work requests go to the backlog in Slot::next_action")
            }
            Action::Disconnect { epoch } => {
                // Disconnected once the goodbye posted before has left
                // (`closing.rs`); the TearDown that follows finds no
                // transport.
                if let Some(t) = slot.transport.take_if(|t| t.epoch == epoch) {
                    let mut backlog = std::mem::take(&mut slot.backlog);
                    // It leaves the session: messages take their payloads.
                    encode_messages(&mut backlog, &slot.core);
                    // The windows' invalidations follow the goodbye.
                    t.queue_invalidations(&mut backlog);
                    let memory = slot.memory.clone();
                    let (id, size) = (slot.core.id(), slot.spec.slot_size);
                    self.begin_closing(id, t, backlog, memory, size);
                }
            }
        }
    }
}

/// Starts resolving `path` on `id`, the CM id of attempt (or standby)
/// `epoch` of session `key`, and files the id under that attempt; the
/// provider's refusal as the failure the core is told of.
pub(super) fn start_resolve(
    p: &dyn Provider,
    cm: &mut BTreeMap<CmId, CmOwner>,
    key: u64,
    epoch: relink_core::ids::Epoch,
    id: CmId,
    path: relink_core::session::Path,
    timeout: std::time::Duration,
) -> Result<(), ProviderFailure> {
    p.cm_resolve_addr(id, path.local, path.peer, timeout)
        .map_err(|error| ProviderFailure::Cm {
            call: CmCall::ResolveAddr,
            error,
        })?;
    let phase = Phase::Resolving;
    cm.insert(id, CmOwner::Session { key, epoch, phase });
    Ok(())
}
