//! The poll loop of a [`Node`] and the provider events it dispatches.
//!
//! One [`Node::poll`] round works, in this order: every provider event
//! (device, async, CM, CQ-ready), the CQs that signalled (or are not armed
//! yet; a closing transport's too), the sessions whose timer is due (an
//! ended session whose linger ran out is reaped there; a closing transport
//! whose goodbye bound passed is destroyed), the sessions with queued work
//! requests, and last the ended sessions whose outputs the application took
//! since the last round (reaped). The order is part of the node's behaviour: a run on the
//! simulated fabric with the same seed is the same run, event for event.
//!
//! One exception to "events before completions": a `DISCONNECTED` of a
//! session's established connection first reads that session's CQ to the end
//! (`Node::read_cq_before_loss`), so a message the peer sent before it
//! disconnected — the goodbye of [`Node::close`] above all — is read before
//! the transport is reported down.

use relink_core::session::Role;
use relink_core::state::DownCause;
use std::collections::BTreeMap;

use relink_fabric::{AsyncEvent, ContextId, DeviceEventKind, Event, Timestamp};

use super::closing::Ending;
use super::Node;

impl Node {
    /// The earliest time a session needs [`Node::poll`] for its timers (on
    /// the provider's clock, [`Node::now`]); `None` while no session has a
    /// timer. An event loop sleeps at most until then ([`Node::wait`] does
    /// so itself). Changes with every call that does something: read it
    /// again after each [`poll`](Node::poll) round. A time already past
    /// (`Timestamp(0)`) means a round is due at once: a connection the node
    /// gave up is destroyed in the round after the one that gave it up —
    /// one a promoted standby replaced, once the session completed an
    /// operation on the standby, and at the latest at the deadline this
    /// returns meanwhile (100 ms after the promotion).
    #[must_use]
    pub fn next_deadline(&self) -> Option<Timestamp> {
        // Connections given up wait for the next round to be destroyed;
        // one a promoted standby replaced, for its hold at the latest.
        let timer = self.index.next_timer();
        if !self.transports.has_retiring() {
            return timer;
        }
        let release = self.transports.next_release();
        [timer, release].into_iter().flatten().min()
    }

    /// Do everything that can be done now: provider events, completions,
    /// timers, actions. Returns whether anything happened. Never blocks
    /// ([`Node::wait`] blocks, then polls).
    ///
    /// `true` may leave more to do (a CQ that had more completions than a
    /// round takes, work a timer queued): call it again until it returns
    /// `false`, then sleep — on [`Node::wait`], or on
    /// [`Node::event_fd`] with a timer for [`Node::next_deadline`].
    ///
    /// A peer's disconnect is acted on only after the session's
    /// completions that came before it are read: the goodbye of a peer's
    /// [`Node::close`] closes the session (`SessionEvent::Disconnected`)
    /// however seldom `poll` is called, never starts a recovery.
    pub fn poll(&mut self) -> bool {
        // One clock reading serves the whole round: its events, completions
        // and timers are all handled at the time the round began.
        let now = self.now();
        self.rounds += 1;
        let mut progress = false;
        let mut by_ctx = None;
        while let Some(ev) = self.provider.poll_event() {
            progress = true;
            self.on_event(ev, now, &mut by_ctx);
        }
        // Only CQs that signalled (or were not yet armed) are polled; a CQ
        // that stays busy is marked again for the next round.
        self.index.begin_cq_round();
        for i in 0.. {
            let Some(handle) = self.index.round_handle(i) else {
                break;
            };
            progress |= self.poll_cq(handle, now);
        }
        self.index.end_round();
        // Only sessions with a due timer or queued work are visited.
        self.index.collect_due(now);
        for i in 0.. {
            let Some(handle) = self.index.due_handle(i) else {
                break;
            };
            if self.transports.is_closing(handle) {
                // A goodbye that did not leave within its bound.
                let p = &*self.provider;
                self.transports
                    .end_closing(handle, Ending::Expired, p, &mut self.index);
                progress = true;
                continue;
            }
            if self.index.linger_over(handle, now) {
                // Ended and its outputs not all taken within the linger: reaped with
                // whatever the application did not take.
                self.reap(handle);
                progress = true;
                continue;
            }
            let Some(entry) = self.sessions.get_mut(&handle) else {
                continue;
            };
            entry.core.handle_timeout(now);
            progress = true;
            self.run_actions(handle);
        }
        if self.index.begin_post_round() {
            for i in 0.. {
                let Some(handle) = self.index.round_handle(i) else {
                    break;
                };
                if self.post_queued(handle) {
                    progress = true;
                    // A failed post reports a loss to the core: collect its
                    // actions. Work still waiting for send slots is marked
                    // again when a completion frees them (poll_cq).
                    self.run_actions(handle);
                }
            }
            self.index.end_round();
        }
        // Sessions whose closing transport is gone: their completions
        // (held while it could reach their memory) are the application's.
        if self.transports.has_quiesced() {
            progress |= self.release_quiesced();
        }
        // Closed and failed sessions whose outputs the application
        // took are forgotten.
        self.reap_ended();
        if self.transports.has_retiring() {
            progress |= self.release_retiring(false, now);
        }
        progress
    }

    /// Release the outputs of the sessions whose closing transport was
    /// destroyed (`SessionEntry::quiescing`). Whether there were any.
    pub(super) fn release_quiesced(&mut self) -> bool {
        let ids = self.transports.take_quiesced();
        let mut any = false;
        for id in ids {
            for role in [Role::Initiator, Role::Target] {
                let Some(&handle) = self.by_id.get(&(id, role)) else {
                    continue;
                };
                let Some(entry) = self.sessions.get_mut(&handle) else {
                    continue;
                };
                if std::mem::take(&mut entry.quiescing) {
                    any = true;
                    if entry.has_output() {
                        self.index.has_output(handle);
                    }
                }
            }
        }
        any
    }

    /// Destroy the transports given up before this round and not held
    /// (`all`: every one; see `transports.rs`); a lost connection's records the moment
    /// in its session's recovery timeline (`released`); `now`: the round's
    /// time, against which holds are due. Whether one was.
    pub(super) fn release_retiring(&mut self, all: bool, now: Timestamp) -> bool {
        let sessions = &self.sessions;
        // A held transport's switch is over once its session completed an
        // operation after it (or ended, or is gone).
        let switched = |handle| {
            sessions.get(&handle).is_none_or(|s| {
                s.timeline.as_ref().is_none_or(|tl| tl.complete()) || s.core.state().is_terminal()
            })
        };
        let Some(gone) = self.transports.take_due(all, self.rounds, now, switched) else {
            return false;
        };
        let p = &*self.provider;
        for mut r in gone {
            r.transport.tear_down(p);
            let timeline = self
                .sessions
                .get_mut(&r.handle)
                .and_then(|s| s.timeline.as_mut());
            // The outage it was given up for, if that is still the last.
            if let Some(tl) = timeline.filter(|tl| r.lost == Some(tl.lost) && tl.released.is_none())
            {
                tl.released = Some(p.now());
            }
        }
        true
    }

    /// Hand a provider event to the sessions (and listeners) it concerns.
    /// `by_ctx` holds the sessions of each context, made at the round's
    /// first event of a context and shared by its others (a device reset
    /// brings one for each of its contexts: one lookup each, not a scan of
    /// every session each). `now`: the round's time.
    fn on_event(
        &mut self,
        ev: Event,
        now: Timestamp,
        by_ctx: &mut Option<BTreeMap<ContextId, Vec<u64>>>,
    ) {
        match ev {
            Event::Device(de) => {
                if matches!(
                    de.kind,
                    DeviceEventKind::Removed | DeviceEventKind::Fatal | DeviceEventKind::PortDown
                ) {
                    let p = &*self.provider;
                    self.transports.closing_device_lost(
                        Some(&de.device.id),
                        None,
                        p,
                        &mut self.index,
                    );
                }
                if de.kind == DeviceEventKind::Removed {
                    // A drained device that left is done with; what comes
                    // back under its name is a new device.
                    self.draining.retain(|d| *d != de.device.id);
                }
                let added = de.kind == DeviceEventKind::Added;
                for entry in self.sessions.values_mut() {
                    if let Some(tl) = entry.timeline.as_mut().filter(|tl| added && tl.out()) {
                        tl.device_visible = Some(now);
                    }
                    entry.core.handle_device_event(&de, now);
                }
                if matches!(
                    de.kind,
                    DeviceEventKind::Added
                        | DeviceEventKind::AddrChange
                        | DeviceEventKind::NetdevAttach
                ) {
                    // A device that owns a waiting listener's address
                    // appeared (or got the address): the listener listens,
                    // whether it never did yet or lost its device.
                    let idle: Vec<u64> = self
                        .listeners
                        .iter()
                        .filter(|(_, l)| l.cm.is_none() && l.served_by(&de.device))
                        .map(|(h, _)| *h)
                        .collect();
                    for h in idle {
                        self.restart_listener(h);
                    }
                }
                let handles: Vec<u64> = self.sessions.keys().copied().collect();
                for h in handles {
                    self.run_actions(h);
                }
            }
            Event::Async { ctx, event } => {
                let cause = match event {
                    AsyncEvent::DeviceFatal => Some(DownCause::DeviceFatal),
                    AsyncEvent::PortErr => Some(DownCause::PortDown),
                    _ => None,
                };
                if let Some(cause) = cause {
                    let p = &*self.provider;
                    self.transports
                        .closing_device_lost(None, Some(ctx), p, &mut self.index);
                    let sessions = &self.sessions;
                    let owners = by_ctx
                        .get_or_insert_with(|| {
                            let mut map: BTreeMap<ContextId, Vec<u64>> = BTreeMap::new();
                            for (h, s) in sessions {
                                for t in [s.transport.as_ref(), s.standby.as_deref()] {
                                    if let Some(c) = t.and_then(|t| t.ctx) {
                                        map.entry(c).or_default().push(*h);
                                    }
                                }
                            }
                            map
                        })
                        .get(&ctx)
                        .cloned()
                        .unwrap_or_default();
                    for h in owners {
                        let Some(entry) = self.sessions.get_mut(&h) else {
                            continue;
                        };
                        // The session's transport of now, if it is still on
                        // that context (one that left it since the map was
                        // made is not hit).
                        let Some(epoch) = [entry.transport.as_ref(), entry.standby.as_deref()]
                            .into_iter()
                            .flatten()
                            .find(|t| t.ctx == Some(ctx))
                            .map(|t| t.epoch)
                        else {
                            continue;
                        };
                        entry.core.handle_transport_down(epoch, cause, now);
                        self.run_actions(h);
                    }
                }
            }
            Event::Cm(ce) => self.on_cm(ce.id, ce.kind, now),
            Event::CqReady(cq) => {
                if let Some(h) = self.index.cq_owner(cq) {
                    self.index.cq_signalled(h);
                    if let Some(entry) = self.sessions.get_mut(&h) {
                        entry.note_standby_cq(cq);
                        if let Some(t) = entry.transport.as_mut().filter(|t| t.cq == Some(cq)) {
                            t.cq_armed = false;
                        }
                    }
                }
            }
        }
    }
}
