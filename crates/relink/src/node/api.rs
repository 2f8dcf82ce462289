//! The application's calls on a [`Node`]: create sessions (connect, listen,
//! accept), submit operations, take what sessions produce (completions,
//! deliveries, events), inspect and close them.
//!
//! Completions, deliveries and events wait in each session's core until
//! the application takes them here; [`Node::poll`] only makes progress.

use std::net::SocketAddr;

use relink_core::journal::{Completion, LocalRange, OpKind};
use relink_core::session::{Counters, Path, Role, Session, SessionConfig, SessionEvent};
use relink_core::state::State;
use relink_core::{BufferToken, OpId, RegionId, Seq, SessionId};
use relink_fabric::{DeviceId, Memory};

use super::{Error, ListenerHandle, ListenerSlot, Node, SessionHandle, SessionOptions, Slot};

impl Node {
    /// Connect to a peer over one or more paths. The first attempt is
    /// immediate; failures are retried by the policy (until its give-up
    /// deadline). The session's id is new (from the node's randomness).
    ///
    /// A refusal by the peer's relink is reported as
    /// [`SessionEvent::Refused`] with its reason. `Busy` and `StaleEpoch`
    /// are retried; any other reason cannot change by retrying
    /// ([`RefuseReason::is_final`](crate::RefuseReason::is_final)): the
    /// session fails at once ([`SessionEvent::PeerLost`], state `Failed`,
    /// its operations fail with `OpError::PeerLost`).
    ///
    /// # Errors
    /// If the policy is invalid or the session's memory cannot be
    /// allocated.
    pub fn connect(
        &mut self,
        paths: Vec<Path>,
        opts: SessionOptions,
    ) -> Result<SessionHandle, Error> {
        let now = self.now();
        let cfg = SessionConfig {
            role: Role::Initiator,
            id: SessionId(self.rng.next_u64()),
            incarnation: self.incarnation,
            paths,
            policy: opts.policy.clone(),
            spec: opts.spec(),
            seed: self.rng.next_u64(),
        };
        let mut core = Session::new(cfg, now)?;
        core.set_devices(self.provider.devices(), now);
        let key = self.insert_slot(core, opts)?;
        self.sessions
            .get_mut(&key)
            .expect("inserted")
            .core
            .connect(now)?;
        self.run_actions(key);
        Ok(SessionHandle(key))
    }

    /// Listen on `addr` (a device's address or the wildcard). Sessions
    /// that connect appear in [`Node::accept`]. A listener bound to a
    /// device's address listens again when a device owning it returns.
    pub fn listen(
        &mut self,
        addr: SocketAddr,
        opts: SessionOptions,
    ) -> Result<ListenerHandle, Error> {
        opts.policy.validate()?;
        let key = self.key();
        self.listeners.insert(
            key,
            ListenerSlot {
                addr,
                cm: None,
                opts,
            },
        );
        self.start_listener(key).map_err(Error::Provider)?;
        Ok(ListenerHandle(key))
    }

    /// The oldest session a listener accepted that was not taken yet;
    /// `None` when there is none. A session that ended before it was taken
    /// waits here until its [linger](Node::set_linger) runs out, then it is
    /// reaped and leaves the queue.
    pub fn accept(&mut self) -> Option<SessionHandle> {
        self.accepted.pop_front()
    }

    fn slot(&mut self, s: SessionHandle) -> Result<&mut Slot, Error> {
        self.sessions.get_mut(&s.0).ok_or(Error::NoSession(s))
    }

    /// Send a message (delivered exactly once, in order).
    ///
    /// # Errors
    /// [`Error::NoSession`] if there is no such session (never made, or
    /// reaped after it ended: [`Node::sessions`]); [`Error::Session`] if
    /// the session refuses it (ended, too large).
    pub fn send(&mut self, s: SessionHandle, payload: &[u8]) -> Result<OpId, Error> {
        // The copy the journal keeps until the peer confirms delivery, in
        // the allocation of an earlier, confirmed message if there is one.
        let mut bytes = self.slot(s)?.core.message_buffer(payload.len());
        bytes.extend_from_slice(payload);
        self.submit(s, OpKind::Message { payload: bytes })
    }

    /// Submit any operation. Its one completion comes from
    /// [`Node::poll_completion`], also across recoveries.
    ///
    /// # Errors
    /// [`Error::NoSession`] if there is no such session (never made, or
    /// reaped after it ended: [`Node::sessions`]); [`Error::Session`] if
    /// the session refuses it (ended, a bad local range or token).
    pub fn submit(&mut self, s: SessionHandle, kind: OpKind) -> Result<OpId, Error> {
        let now = self.now();
        let op = self.slot(s)?.core.submit(kind, now)?;
        self.run_actions(s.0);
        Ok(op)
    }

    /// RDMA WRITE `local` to the peer's `remote`.
    ///
    /// # Errors
    /// As [`Node::submit`] (a reaped session: [`Error::NoSession`]).
    pub fn write(
        &mut self,
        s: SessionHandle,
        local: LocalRange,
        remote: BufferToken,
    ) -> Result<OpId, Error> {
        self.submit(s, OpKind::Write { local, remote })
    }

    /// RDMA READ the peer's `remote` into `local`.
    ///
    /// # Errors
    /// As [`Node::submit`] (a reaped session: [`Error::NoSession`]).
    pub fn read(
        &mut self,
        s: SessionHandle,
        local: LocalRange,
        remote: BufferToken,
    ) -> Result<OpId, Error> {
        self.submit(s, OpKind::Read { local, remote })
    }

    /// FETCH_ADD on the peer's `remote`; the old value lands in `local` (8 bytes).
    ///
    /// # Errors
    /// As [`Node::submit`] (a reaped session: [`Error::NoSession`]).
    pub fn fetch_add(
        &mut self,
        s: SessionHandle,
        local: LocalRange,
        remote: BufferToken,
        add: u64,
    ) -> Result<OpId, Error> {
        self.submit(s, OpKind::FetchAdd { local, remote, add })
    }

    /// CMP_SWAP on the peer's `remote`; the old value lands in `local` (8 bytes).
    ///
    /// # Errors
    /// As [`Node::submit`] (a reaped session: [`Error::NoSession`]).
    pub fn cmp_swap(
        &mut self,
        s: SessionHandle,
        local: LocalRange,
        remote: BufferToken,
        compare: u64,
        swap: u64,
    ) -> Result<OpId, Error> {
        self.submit(
            s,
            OpKind::CmpSwap {
                local,
                remote,
                compare,
                swap,
            },
        )
    }

    /// The host memory of a region (read and write it directly).
    ///
    /// # Errors
    /// [`Error::NoSession`] if there is no such session (never made, or
    /// reaped: [`Node::sessions`]); [`Error::NoRegion`] if it has no such
    /// region.
    pub fn region(&self, s: SessionHandle, id: RegionId) -> Result<Memory, Error> {
        let slot = self.sessions.get(&s.0).ok_or(Error::NoSession(s))?;
        slot.memory
            .regions
            .get(&id)
            .cloned()
            .ok_or(Error::NoRegion(id))
    }

    /// Next completion of a session; `None` when none is waiting or there
    /// is no such session (never made, or reaped: [`Node::sessions`]).
    pub fn poll_completion(&mut self, s: SessionHandle) -> Option<Completion> {
        let c = self.sessions.get_mut(&s.0)?.core.poll_completion();
        self.taken(s.0);
        c
    }

    /// Next delivered message of a session and its sequence number (from
    /// 1, in order); `None` when none is waiting or there is no such
    /// session (never made, or reaped: [`Node::sessions`]).
    pub fn poll_delivery(&mut self, s: SessionHandle) -> Option<(Seq, Vec<u8>)> {
        let d = self.sessions.get_mut(&s.0)?.core.poll_delivery();
        self.taken(s.0);
        d
    }

    /// Next delivered message of a session, swapped into `buf` (whose old
    /// contents are gone): like [`Node::poll_delivery`], but the allocation
    /// `buf` held takes a later message, so a receiver that keeps one
    /// buffer makes no allocation per message.
    pub fn poll_delivery_into(&mut self, s: SessionHandle, buf: &mut Vec<u8>) -> Option<Seq> {
        let seq = self.sessions.get_mut(&s.0)?.core.poll_delivery_into(buf);
        self.taken(s.0);
        seq
    }

    /// Next event of a session (state transitions, device loss, recovery,
    /// resumption, refusals, give-up, close); `None` when none is waiting
    /// or there is no such session (never made, or reaped:
    /// [`Node::sessions`]).
    pub fn poll_event(&mut self, s: SessionHandle) -> Option<SessionEvent> {
        let e = self.sessions.get_mut(&s.0)?.core.poll_event();
        self.taken(s.0);
        e
    }

    /// State of a session; `None` when there is no such session (never
    /// made, or reaped after it ended: [`Node::sessions`]).
    pub fn state(&self, s: SessionHandle) -> Option<State> {
        self.sessions.get(&s.0).map(|x| x.core.state())
    }

    /// Counters of a session; `None` when there is no such session (never
    /// made, or reaped: [`Node::sessions`]). Read them before taking a
    /// closed session's last output if they are wanted.
    pub fn counters(&self, s: SessionHandle) -> Option<Counters> {
        self.sessions.get(&s.0).map(|x| x.core.counters())
    }

    /// The session's core (read-only), for introspection; `None` when
    /// there is no such session (never made, or reaped:
    /// [`Node::sessions`]).
    pub fn session(&self, s: SessionHandle) -> Option<&Session> {
        self.sessions.get(&s.0).map(|x| &x.core)
    }

    /// Every session of the node, in creation order: the live ones, and
    /// the closed and failed ones not yet reaped.
    ///
    /// A session that ended (state `Closed` or `Failed`) is reaped — its
    /// slot, memory and index entries freed — at the first [`Node::poll`]
    /// after the application took everything it produced (every
    /// completion, delivery and event; an accepted session must also have
    /// been taken with [`Node::accept`]), or
    /// [`linger`](Node::set_linger) (60 s by default) after it ended if
    /// the application never does. From then on its handle is unknown:
    /// calls that submit or close return [`Error::NoSession`], the `poll_*`
    /// calls and `state`, `counters`, `session` and `device` return `None`.
    /// Handles are never reused.
    pub fn sessions(&self) -> Vec<SessionHandle> {
        self.sessions.keys().map(|k| SessionHandle(*k)).collect()
    }

    /// Close a session now: recovery stops, pending operations fail
    /// (`Disconnected`, or `Indeterminate` where they may have taken
    /// effect); the session is reaped once drained ([`Node::sessions`]).
    /// An established session says goodbye first (a `Close` message; the
    /// disconnect follows once its send completed, at most
    /// [the goodbye bound](Node::set_goodbye_timeout) later): the peer's
    /// node closes its half (`SessionEvent::Disconnected`) instead of
    /// recovering. [`Node::close_gracefully`] lets the pending operations
    /// finish first.
    ///
    /// # Errors
    /// [`Error::NoSession`] if there is no such session (never made, or
    /// reaped: [`Node::sessions`]). Closing a session already closed (and
    /// not reaped yet) does nothing; a failed one moves to `Closed`.
    pub fn close(&mut self, s: SessionHandle) -> Result<(), Error> {
        let now = self.now();
        self.slot(s)?.core.close(now);
        self.run_actions(s.0);
        Ok(())
    }

    /// Stop a listener (sessions it accepted go on); an unknown handle is
    /// ignored.
    pub fn close_listener(&mut self, l: ListenerHandle) {
        if let Some(slot) = self.listeners.remove(&l.0) {
            if let Some(id) = slot.cm {
                self.cm.remove(&id);
                let _ = self.provider.cm_destroy_id(id);
            }
        }
    }

    /// The device of a session's current transport; `None` while it has
    /// none (between a loss and the next attempt's resolution) or there is
    /// no such session (never made, or reaped: [`Node::sessions`]).
    pub fn device(&self, s: SessionHandle) -> Option<DeviceId> {
        self.sessions
            .get(&s.0)?
            .transport
            .as_ref()?
            .device
            .as_ref()
            .map(|d| d.id.clone())
    }
}
