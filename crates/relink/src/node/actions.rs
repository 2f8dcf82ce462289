//! Carrying out a session core's actions against the provider (connect,
//! accept, reject, tear down; a disconnect hands the transport to the
//! closing transports, `closing.rs`) and indexing what the session waits
//! for next: its CQ, its queued work requests, its next timer.

use relink_core::reason::{AttemptFailure, CmCall, ProviderFailure};
use relink_core::session::Action;
use relink_fabric::{CmId, Provider};

use super::backlog::encode_messages;
use super::closing::Goodbye;
use super::index::{Index, Phase};
use super::transport::Transport;
use super::transports::destroy;
use super::wr::Pending;
use super::Node;

impl Node {
    /// Perform the core's actions and index what the session now waits
    /// for (its CQ, queued work, its next timer). Completions, deliveries
    /// and events stay in the core until the application polls them; a
    /// session that has some joins the ready queue of
    /// [`Node::poll_output`].
    pub(super) fn run_actions(&mut self, handle: u64) {
        let probes = loop {
            let Some(entry) = self.sessions.get_mut(&handle) else {
                return;
            };
            let Some(action) = entry.next_action() else {
                entry.index_what_it_waits_for(handle, &mut self.index, &*self.provider);
                break entry.core.probe_peer().is_some();
            };
            if matches!(action, Action::Disconnect { .. } | Action::TearDown { .. }) {
                // Messages queued before a disconnect (the goodbye of an
                // admin close) go out first.
                self.post_queued(handle);
            }
            self.perform(handle, action);
        };
        // Nothing to coordinate while no session of the node probes.
        if probes || !self.probers.is_empty() {
            self.coordinate_probes(handle);
        }
    }

    /// Carry out one action of the core (not a work request: those join
    /// the backlog in `SessionEntry::next_action`).
    fn perform(&mut self, handle: u64, action: Action) {
        let p = &*self.provider;
        // Present: `run_actions` took the action from it just now.
        let Some(entry) = self.sessions.get_mut(&handle) else {
            return;
        };
        match action {
            Action::TearDown { epoch }
                if entry.standby.as_ref().is_some_and(|t| t.epoch == epoch) =>
            {
                if let Some(t) = entry.standby.take() {
                    destroy(p, *t, &mut self.index);
                }
                entry.standby_ready = false;
            }
            Action::ConnectStandby {
                epoch,
                path,
                private_data,
            } => entry.connect_standby(handle, epoch, path, private_data, p, &mut self.index),
            Action::AcceptStandby {
                epoch,
                request,
                private_data,
            } => self.accept_standby(handle, epoch, request, &private_data),
            Action::Promote { epoch } => self.promote_standby(handle, epoch),
            Action::ProbeStandby { epoch, imm } => entry.probe_standby(epoch, imm, p),
            Action::TearDown { epoch } => {
                entry.backlog.clear();
                if let Some(t) = entry.transport.take_if(|t| t.epoch == epoch) {
                    // Destroyed after the next round: what the session
                    // posts next goes out first.
                    let lost = entry.outage_begins(&t, p.now());
                    self.transports
                        .give_up(handle, t, self.rounds, lost, &mut self.index);
                }
            }
            Action::Connect {
                epoch,
                path,
                private_data,
            } => {
                if let Some(old) = entry.transport.take() {
                    destroy(p, old, &mut self.index);
                }
                let id = match p.cm_create_id() {
                    Ok(id) => id,
                    Err(error) => {
                        let why = ProviderFailure::Cm {
                            call: CmCall::CreateId,
                            error,
                        };
                        entry.core.handle_attempt_failed(epoch, why.into(), p.now());
                        return;
                    }
                };
                entry.transport = Some(Transport::new(epoch, Some(id), entry.spec.send_slots));
                if let Some(tl) = entry.timeline.as_mut() {
                    tl.attempt(p.now());
                }
                entry.connect_data = private_data;
                entry.path = Some(path);
                let timeout = entry.opts.policy.connect_timeout;
                if let Err(why) =
                    start_resolve(p, &mut self.index, handle, epoch, id, path, timeout)
                {
                    entry.core.handle_attempt_failed(epoch, why.into(), p.now());
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
                if let Some(old) = entry.transport.take() {
                    destroy(p, old, &mut self.index);
                }
                let mut t = Transport::new(epoch, Some(req.cm), entry.spec.send_slots);
                if let Some(tl) = entry.timeline.as_mut() {
                    tl.attempt(p.now());
                }
                let device = p
                    .cm_device(req.cm)
                    .and_then(|d| p.devices().into_iter().find(|x| x.id == d));
                let built = match device {
                    Some(d) => t.build(
                        &self.provider,
                        d,
                        &entry.spec,
                        &entry.memory,
                        entry.shared.as_ref(),
                    ),
                    None => Err(AttemptFailure::DeviceLost),
                };
                if let (Ok(()), Some(tl)) = (&built, entry.timeline.as_mut()) {
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
                self.index.cm_phase(req.cm, handle, epoch, Phase::Accepting);
                entry.transport = Some(t);
                if let Err(e) = accepted {
                    tracing::warn!("accept failed: {e}");
                    entry.core.handle_attempt_failed(epoch, e, p.now());
                }
            }
            Action::Reject {
                request,
                private_data,
            } => self.reject(request, &private_data),
            Action::Send { .. } | Action::SendMessage { .. } | Action::OneSided { .. } => {
                unreachable!("work requests go to the backlog in SessionEntry::next_action")
            }
            Action::Disconnect { epoch } => {
                // Disconnected once the goodbye posted before has left
                // (`closing.rs`); the TearDown that follows finds no
                // transport.
                if let Some(t) = entry.transport.take_if(|t| t.epoch == epoch) {
                    // Requests in flight may still reach the application's
                    // memory: its completions wait for the transport's end.
                    entry.quiescing = !t.posted.is_empty();
                    let mut backlog = std::mem::take(&mut entry.backlog);
                    // It leaves the session: messages take their payloads.
                    encode_messages(&mut backlog, &entry.core, &entry.memory.regions);
                    // The windows' invalidations follow the goodbye.
                    for (wr_id, op) in t.windows.invalidations() {
                        backlog.push_back(Pending::Local { wr_id, op });
                    }
                    let goodbye = Goodbye {
                        session: entry.core.id(),
                        transport: t,
                        backlog,
                        memory: entry.memory.clone(),
                        slot_size: entry.spec.slot_size,
                    };
                    let closing = self.next_handle;
                    self.next_handle += 1;
                    self.transports.begin_closing(
                        closing,
                        goodbye,
                        p.now(),
                        p,
                        &mut self.index,
                        &mut self.send_batch,
                    );
                }
            }
        }
    }
}

/// Starts resolving `path` on `id`, the CM id of attempt (or standby)
/// `epoch` of session `handle`, and files the id under that attempt; the
/// provider's refusal as the failure the core is told of.
pub(super) fn start_resolve(
    p: &dyn Provider,
    index: &mut Index,
    handle: u64,
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
    index.cm_phase(id, handle, epoch, Phase::Resolving);
    Ok(())
}
