//! The application's calls on a [`Node`]: create sessions (connect,
//! listen), submit operations, take what one session produces
//! (completions, deliveries, events), inspect and close them. Node-wide
//! outputs (`accept`, `poll_output`) are in `output.rs`.
//!
//! Completions, deliveries and events wait in each session's core until
//! the application takes them, here or with [`Node::poll_output`];
//! [`Node::poll`] only makes progress.

use std::net::SocketAddr;

use relink_core::journal::{Completion, LocalRange, LocalSgl, OpKind};
use relink_core::session::{Counters, Path, Role, Session, SessionConfig, SessionEvent};
use relink_core::state::State;
use relink_core::{BufferToken, OpId, RegionId, Seq, SessionId};
use relink_fabric::{CmError, DeviceId, Memory};

use super::{
    CloseError, ConnectError, ListenError, ListenerEntry, ListenerHandle, Node, OptionsError,
    RegionError, SessionEntry, SessionHandle, SessionInfo, SessionOptions, SubmitError,
};

impl Node {
    /// Connect to a peer over one or more paths (tried in order; after a
    /// loss on the peer's side the next path is tried first). Returns the
    /// new session's handle at once; the session's id is new (from the
    /// node's randomness). Operations may be submitted right away: they are
    /// posted once the session is up.
    ///
    /// # The first connect
    ///
    /// The first attempt is immediate. Every attempt that fails is reported
    /// as [`SessionEvent::AttemptFailed`] with its typed reason — no device
    /// reaches the peer (the session waits for one, and tries at once when
    /// a device appears), nothing listens at the address, the peer is
    /// unreachable, the attempt timed out, ... — and retried with the
    /// policy's backoff. The session gives up
    /// [`Policy::first_connect_tmo`](crate::Policy::first_connect_tmo)
    /// (30 s by default) after this call: [`SessionEvent::GaveUp`], state
    /// `Failed`, and every operation submitted meanwhile completes
    /// `Failed(GaveUp)`. Once established, a loss is retried until
    /// [`Policy::ctrl_loss_tmo`](crate::Policy::ctrl_loss_tmo) instead.
    ///
    /// A refusal by the peer's relink is reported as
    /// [`SessionEvent::Refused`] with its reason. `Busy` and `StaleEpoch`
    /// are retried; any other reason cannot change by retrying
    /// ([`RefuseReason::is_final`](crate::RefuseReason::is_final)): the
    /// session fails at once ([`SessionEvent::PeerLost`], state `Failed`,
    /// its operations fail with `OpError::PeerLost`).
    ///
    /// # Errors
    /// Only for input that cannot work, before any session exists:
    /// [`ConnectError::NoPath`] if `paths` is empty,
    /// [`ConnectError::Options`] if the options are invalid (the key is
    /// named; a region no device can register, connect data longer than
    /// [`MAX_CONNECT_DATA`](crate::MAX_CONNECT_DATA)), [`ConnectError::Memory`] if the session's memory cannot be
    /// allocated, [`ConnectError::SharedReceive`] if its shared receive
    /// queue cannot take it (the credit rule: [`Node::create_shared_receive`]).
    pub fn connect(
        &mut self,
        paths: Vec<Path>,
        opts: SessionOptions,
    ) -> Result<SessionHandle, ConnectError> {
        if paths.is_empty() {
            return Err(ConnectError::NoPath);
        }
        opts.validate()?;
        let now = self.now();
        let connect_data = opts.connect_bytes()?;
        let cfg = SessionConfig {
            role: Role::Initiator,
            id: SessionId(self.rng.next_u64()),
            incarnation: self.incarnation,
            paths,
            policy: opts.policy.clone(),
            spec: opts.spec(),
            seed: self.rng.next_u64(),
            connect_data,
        };
        let mut core = Session::new(cfg, now).map_err(OptionsError::Policy)?;
        core.set_devices(self.provider.devices(), now);
        let handle = self.insert_session(core, opts)?;
        self.sessions
            .get_mut(&handle)
            .expect("inserted")
            .core
            .connect(now)
            .expect("a new initiator with a path connects");
        self.run_actions(handle);
        Ok(SessionHandle(handle))
    }

    /// Listen on `addr` (a device's address, or the wildcard address for
    /// every device). Sessions that connect appear in [`Node::accept`] (and
    /// [`Node::poll_output`]), each made with `opts` (application memory
    /// in its regions is shared by all of them).
    ///
    /// # When it listens
    ///
    /// A listener on the wildcard address covers every device, also ones
    /// added later; it listens at once (on a provider that binds the
    /// wildcard only with a device present, once a device is added). A
    /// listener on a device's address
    /// listens while a device owns the address: if none does yet, the call
    /// still succeeds and the listener starts listening when a device that
    /// owns the address appears (added, or given the address) — the same
    /// rule as after a loss, when a listener whose device went away listens
    /// again once a device owning its address is back.
    /// [`Node::listener_active`] says whether it listens now.
    ///
    /// # Errors
    /// Only for input that cannot work: [`ListenError::Options`] if the
    /// options are invalid (the key is named), [`ListenError::NoPort`] for
    /// port 0 (sessions resume to the address they connected to, so a
    /// listener keeps its port); [`ListenError::AddrInUse`] if another
    /// listener has the address now (retry once it is closed);
    /// [`ListenError::Provider`] if the provider refuses for another reason.
    pub fn listen(
        &mut self,
        addr: SocketAddr,
        opts: SessionOptions,
    ) -> Result<ListenerHandle, ListenError> {
        opts.validate()?;
        self.check_shared_receive(&opts)?;
        if addr.port() == 0 {
            return Err(ListenError::NoPort(addr));
        }
        let handle = self.new_handle();
        self.listeners.insert(
            handle,
            ListenerEntry {
                addr,
                cm: None,
                opts,
            },
        );
        match self.start_listener(handle) {
            Ok(()) => {}
            Err(CmError::AddrNotAvailable(_)) => {
                tracing::info!(%addr, "no device owns the address yet: listening once one does");
            }
            Err(error) => {
                self.listeners.remove(&handle);
                return Err(match error {
                    CmError::AddrInUse(_) => ListenError::AddrInUse(addr),
                    error => ListenError::Provider { addr, error },
                });
            }
        }
        Ok(ListenerHandle(handle))
    }

    /// Whether a listener listens now: `Some(true)` when it does,
    /// `Some(false)` while no device owns its address (it listens once one
    /// does: [`Node::listen`]), `None` when the node has no such listener
    /// (never made, or closed with [`Node::close_listener`]).
    #[must_use]
    pub fn listener_active(&self, l: ListenerHandle) -> Option<bool> {
        self.listeners
            .get(&l.0)
            .map(|listener| listener.cm.is_some())
    }

    fn entry(&mut self, s: SessionHandle) -> Option<&mut SessionEntry> {
        self.sessions.get_mut(&s.0)
    }

    /// Send a message: delivered to the peer's application exactly once,
    /// in order, also across recoveries. Its one completion comes from
    /// [`Node::poll_completion`]: `Success` once the peer's node confirmed
    /// delivery.
    ///
    /// # Errors
    /// [`SubmitError::NoSession`] if there is no such session (never made,
    /// or reaped after it ended: [`Node::sessions`]);
    /// [`SubmitError::Ended`] if it is closed or failed;
    /// [`SubmitError::TooLarge`] if `payload` exceeds the session's
    /// `max_message`. Nothing is sent then.
    pub fn send(&mut self, s: SessionHandle, payload: &[u8]) -> Result<OpId, SubmitError> {
        // The copy the journal keeps until the peer confirms delivery, in
        // the allocation of an earlier, confirmed message if there is one.
        let mut bytes = self
            .entry(s)
            .ok_or(SubmitError::NoSession(s))?
            .core
            .message_buffer(payload.len());
        bytes.extend_from_slice(payload);
        self.submit(s, OpKind::Message { payload: bytes })
    }

    /// Send a message whose payload is the bytes of `local`, in order —
    /// ranges of registered memory (a session's region, or a registration
    /// of the node: [`Node::register`]) — without a copy: the SEND gathers
    /// them where they are. Delivered as [`Node::send`]'s are (the peer
    /// sees one message of their bytes). The journal keeps the ranges, not
    /// the bytes: leave them unchanged until the operation's completion (as
    /// with `ibv_post_send`); a replay after a loss reads them again.
    ///
    /// # Errors
    /// As [`Node::send`]; and [`SubmitError::BadLocal`] for a range
    /// outside its region.
    pub fn send_from(
        &mut self,
        s: SessionHandle,
        local: impl Into<LocalSgl>,
    ) -> Result<OpId, SubmitError> {
        self.submit(
            s,
            OpKind::MessageFrom {
                local: local.into(),
            },
        )
    }

    /// Submit any operation. Its one completion comes from
    /// [`Node::poll_completion`], also across recoveries (what each kind
    /// gets after a device loss: the [crate docs](crate#the-replay-contract)).
    ///
    /// An operation submitted before the session is established, or while
    /// it recovers, waits, and is posted once the peer's advertisements of
    /// the new connection have arrived. A one-sided operation's local range
    /// is read (WRITE) or written (READ, atomics) when it is posted — and
    /// again if it is replayed after a loss: leave it alone until the
    /// operation's completion. A token outside what the peer advertised
    /// completes `Failed(Remote(REM_ACCESS_ERR))`, as the peer's device
    /// would have answered.
    ///
    /// # Errors
    /// [`SubmitError::NoSession`] if there is no such session (never made,
    /// or reaped after it ended: [`Node::sessions`]);
    /// [`SubmitError::Ended`] if it is closed or failed;
    /// [`SubmitError::TooLarge`] for a message above `max_message`;
    /// [`SubmitError::BadLocal`] if the local range is outside its region.
    /// A remote token the peer did not advertise is not an error here: the
    /// operation completes `Failed(Remote(..))`.
    pub fn submit(&mut self, s: SessionHandle, kind: OpKind) -> Result<OpId, SubmitError> {
        self.submit_with(s, kind, 0)
    }

    /// [`Node::submit`] with the application's `context`: the operation's
    /// [`Completion`](crate::Completion) carries it back, with the
    /// operation's [`class`](crate::Completion::class) and
    /// [`len`](crate::Completion::len).
    ///
    /// # Errors
    /// As [`Node::submit`]; and [`SubmitError::WouldBlock`] with
    /// [`SessionOptions::max_outstanding`](crate::SessionOptions::max_outstanding)
    /// operations outstanding ([`Node::room`]).
    pub fn submit_with(
        &mut self,
        s: SessionHandle,
        kind: OpKind,
        context: u64,
    ) -> Result<OpId, SubmitError> {
        let now = self.now();
        let message = kind.is_message();
        let op = self
            .entry(s)
            .ok_or(SubmitError::NoSession(s))?
            .core
            .submit_with(kind, context, now)?;
        self.run_actions(s.0);
        if message {
            self.post_if_idle(s.0);
        }
        Ok(op)
    }

    /// How many more operations the session takes now before a submit is
    /// refused with [`SubmitError::WouldBlock`]:
    /// [`SessionOptions::max_outstanding`](crate::SessionOptions::max_outstanding)
    /// less the operations submitted whose completion was not taken.
    ///
    /// # Errors
    /// [`SubmitError::NoSession`] if there is no such session.
    pub fn room(&self, s: SessionHandle) -> Result<u64, SubmitError> {
        let entry = self.sessions.get(&s.0).ok_or(SubmitError::NoSession(s))?;
        Ok(entry.core.room())
    }

    /// RDMA WRITE `local` — one range, or a [`LocalSgl`] of up to
    /// [`LocalSgl::MAX`] gathered in order — to the peer's `remote`. Keep
    /// `local` unchanged
    /// until the completion: a replay after a loss reads it again
    /// ([`Node::submit`]).
    ///
    /// # Errors
    /// As [`Node::submit`].
    pub fn write(
        &mut self,
        s: SessionHandle,
        local: impl Into<LocalSgl>,
        remote: BufferToken,
    ) -> Result<OpId, SubmitError> {
        let local = local.into();
        self.submit(s, OpKind::Write { local, remote })
    }

    /// RDMA WRITE `local` to the peer's `remote` with immediate data `imm`:
    /// the peer's application is told once the bytes landed, with `imm`
    /// and where, in order with the messages ([`Node::poll_written`], or a
    /// buffer it posted: [`Node::post_receive`]). Completes as a message
    /// does: `Success` once the peer's node delivered the notice. Keep
    /// `local` unchanged until the completion.
    ///
    /// # Errors
    /// As [`Node::submit`].
    pub fn write_imm(
        &mut self,
        s: SessionHandle,
        local: impl Into<LocalSgl>,
        remote: BufferToken,
        imm: u32,
    ) -> Result<OpId, SubmitError> {
        let local = local.into();
        self.submit(s, OpKind::WriteImm { local, remote, imm })
    }

    /// RDMA READ the peer's `remote` into `local` (one range, or a
    /// [`LocalSgl`] the bytes are scattered over in order).
    ///
    /// # Errors
    /// As [`Node::submit`].
    pub fn read(
        &mut self,
        s: SessionHandle,
        local: impl Into<LocalSgl>,
        remote: BufferToken,
    ) -> Result<OpId, SubmitError> {
        let local = local.into();
        self.submit(s, OpKind::Read { local, remote })
    }

    /// FETCH_ADD on the peer's `remote`; the old value lands in `local` (8 bytes).
    ///
    /// # Errors
    /// As [`Node::submit`].
    pub fn fetch_add(
        &mut self,
        s: SessionHandle,
        local: LocalRange,
        remote: BufferToken,
        add: u64,
    ) -> Result<OpId, SubmitError> {
        self.submit(s, OpKind::FetchAdd { local, remote, add })
    }

    /// CMP_SWAP on the peer's `remote`; the old value lands in `local` (8 bytes).
    ///
    /// # Errors
    /// As [`Node::submit`].
    pub fn cmp_swap(
        &mut self,
        s: SessionHandle,
        local: LocalRange,
        remote: BufferToken,
        compare: u64,
        swap: u64,
    ) -> Result<OpId, SubmitError> {
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

    /// The host memory of a region (read and write it directly): relink's,
    /// or the application's own handle for a region made
    /// [`with_memory`](crate::RegionOptions::with_memory).
    ///
    /// # Errors
    /// [`RegionError::NoSession`] if there is no such session (never made,
    /// or reaped: [`Node::sessions`]); [`RegionError::NoRegion`] if it has
    /// no such region.
    pub fn region(&self, s: SessionHandle, id: RegionId) -> Result<Memory, RegionError> {
        let entry = self.sessions.get(&s.0).ok_or(RegionError::NoSession(s))?;
        entry
            .memory
            .regions
            .get(&id)
            .cloned()
            .ok_or(RegionError::NoRegion(id))
    }

    /// The peer's advertisement of its region `id` on the session's
    /// current connection: the address of the region's first byte on the
    /// peer and its length. For memory the peer registered with
    /// [`Node::register`] the address is the peer's buffer's in its
    /// process, the same on every device, so an application that names
    /// the peer's memory by address (libfabric's `FI_MR_VIRT_ADDR`) takes
    /// the offset for a [`BufferToken`] from it. `None` when there is no
    /// such session, or no advertisement of the region now: the peer never
    /// advertised it, or the session is between connections (the next
    /// connection's advertisements come with its handshake).
    #[must_use]
    pub fn peer_region(&self, s: SessionHandle, id: RegionId) -> Option<(u64, u64)> {
        let keys = self.sessions.get(&s.0)?.core.peer_keys();
        if !keys.is_complete() {
            return None;
        }
        keys.regions()
            .find(|(r, _)| *r == id)
            .map(|(_, r)| (r.addr, r.len))
    }

    /// Next completion of a session: `Some` while one waits — each
    /// operation the session accepted completes exactly once, also across
    /// recoveries, a give-up and a close. `None` when none waits now (more
    /// may come after a [`Node::poll`]), or when there is no such session:
    /// it never existed, or it ended and was reaped ([`Node::sessions`];
    /// [`Node::state`] tells the two apart: `None` for no session).
    #[must_use]
    pub fn poll_completion(&mut self, s: SessionHandle) -> Option<Completion> {
        let entry = self.sessions.get_mut(&s.0)?;
        if entry.quiescing {
            return None;
        }
        let c = entry.core.poll_completion()?;
        let more = entry.has_output();
        self.index.output_taken(s.0, more);
        Some(c)
    }

    /// Next delivered message of a session and its sequence number (from
    /// 1, each once, in order): `Some` while one waits. `None` when none
    /// waits now (more may come after a [`Node::poll`]), or when there is
    /// no such session: it never existed, or it ended and was reaped
    /// ([`Node::sessions`]).
    #[must_use]
    pub fn poll_delivery(&mut self, s: SessionHandle) -> Option<(Seq, Vec<u8>)> {
        let entry = self.sessions.get_mut(&s.0)?;
        let d = entry.core.poll_delivery()?;
        let more = entry.has_output();
        self.index.output_taken(s.0, more);
        Some(d)
    }

    /// Next delivered message of a session, swapped into `buf` (whose old
    /// contents are gone): like [`Node::poll_delivery`], but the allocation
    /// `buf` held takes a later message, so a receiver that keeps one
    /// buffer makes no allocation per message. `Some(seq)` when a message
    /// was swapped in; `None` (with `buf` untouched) when none waits now,
    /// or when there is no such session (never existed, or reaped).
    #[must_use]
    pub fn poll_delivery_into(&mut self, s: SessionHandle, buf: &mut Vec<u8>) -> Option<Seq> {
        let entry = self.sessions.get_mut(&s.0)?;
        let seq = entry.core.poll_delivery_into(buf)?;
        let more = entry.has_output();
        self.index.output_taken(s.0, more);
        Some(seq)
    }

    /// Next event of a session (state transitions, device loss, failed
    /// attempts, recovery, resumption, refusals, give-up, lost peer,
    /// close), in the order they happened: `Some` while one waits. `None`
    /// when none waits now (more may come after a [`Node::poll`]), or when
    /// there is no such session: it never existed, or it ended and was
    /// reaped ([`Node::sessions`]).
    #[must_use]
    pub fn poll_event(&mut self, s: SessionHandle) -> Option<SessionEvent> {
        let entry = self.sessions.get_mut(&s.0)?;
        if entry.quiescing {
            return None;
        }
        let e = entry.core.poll_event()?;
        let more = entry.has_output();
        self.index.output_taken(s.0, more);
        Some(e)
    }

    /// State of a session: `Some` while the node has it (live, or ended and
    /// not yet reaped); `None` when there is no such session (never made,
    /// or reaped after it ended: [`Node::sessions`]).
    #[must_use]
    pub fn state(&self, s: SessionHandle) -> Option<State> {
        self.sessions.get(&s.0).map(|x| x.core.state())
    }

    /// Counters of a session: `Some` while the node has it; `None` when
    /// there is no such session (never made, or reaped:
    /// [`Node::sessions`]). Read them before taking a closed session's
    /// last output if they are wanted.
    #[must_use]
    pub fn counters(&self, s: SessionHandle) -> Option<Counters> {
        self.sessions.get(&s.0).map(|x| x.core.counters())
    }

    /// A snapshot of a session (id, role, state, epoch, device, peer
    /// incarnation, pending operations, journal, timers, outputs waiting,
    /// counters):
    /// `Some` while the node has it; `None` when there is no such session
    /// (never made, or reaped: [`Node::sessions`]).
    #[must_use]
    pub fn session_info(&self, s: SessionHandle) -> Option<SessionInfo> {
        let entry = self.sessions.get(&s.0)?;
        let core = &entry.core;
        Some(SessionInfo {
            id: core.id(),
            role: core.role(),
            state: core.state(),
            epoch: core.epoch(),
            device: core.device().cloned(),
            peer_incarnation: core.peer_incarnation(),
            pending_ops: core.pending_ops(),
            journal_bytes: core.journal_bytes(),
            last_delivered: core.last_delivered(),
            next_timeout: core.poll_timeout(),
            timers_armed: core.timers_armed(),
            outputs_waiting: core.outputs_waiting(),
            closing_deadline: core.closing_deadline(),
            awaiting_decision: core.awaiting_decision(),
            planned: core.planned(),
            counters: core.counters(),
            last_recovery: entry.timeline,
        })
    }

    /// The options a session was made with (its policy among them): `Some`
    /// while the node has it; `None` when there is no such session (never
    /// made, or reaped: [`Node::sessions`]).
    #[must_use]
    pub fn options(&self, s: SessionHandle) -> Option<&SessionOptions> {
        self.sessions.get(&s.0).map(|x| &x.opts)
    }

    /// Every session of the node, in creation order: the live ones, and
    /// the closed and failed ones not yet reaped.
    ///
    /// A session that ended (state `Closed` or `Failed`) is reaped — its
    /// entry, memory and index entries freed — at the first [`Node::poll`]
    /// after the application took everything it produced (every
    /// completion, delivery and event; an accepted session must also have
    /// been taken with [`Node::accept`]), or
    /// [`linger`](Node::set_linger) (60 s by default) after it ended if
    /// the application never does. From then on its handle is unknown:
    /// calls that submit or close return a `NoSession` error, the `poll_*`
    /// calls and `state`, `counters`, `session_info`, `options` and
    /// `device` return `None`.
    /// Handles are never reused.
    pub fn sessions(&self) -> Vec<SessionHandle> {
        self.sessions.keys().map(|h| SessionHandle(*h)).collect()
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
    /// Requests already on the transport's send queue (a message from
    /// registered memory, a WRITE's source, a READ's destination) may
    /// still be read or written by the device until that transport is
    /// destroyed: the completions of the session — which hand such memory
    /// back — and its events wait until then (a poll round after the
    /// goodbye left, or the goodbye bound).
    ///
    /// # Errors
    /// [`CloseError::NoSession`] if there is no such session (never made,
    /// or reaped: [`Node::sessions`]). Closing a session already closed
    /// (and not reaped yet) does nothing; a failed one moves to `Closed`.
    pub fn close(&mut self, s: SessionHandle) -> Result<(), CloseError> {
        let now = self.now();
        self.entry(s).ok_or(CloseError::NoSession(s))?.close(now);
        self.run_actions(s.0);
        Ok(())
    }

    /// Stop a listener (sessions it accepted go on); an unknown handle is
    /// ignored.
    pub fn close_listener(&mut self, l: ListenerHandle) {
        if let Some(listener) = self.listeners.remove(&l.0) {
            if let Some(id) = listener.cm {
                self.index.cm_gone(id);
                let _ = self.provider.cm_destroy_id(id);
            }
        }
    }

    /// The device of a session's current transport, also during an
    /// attempt once its route resolved: `Some` then; `None` while it has
    /// none (before the first attempt's resolution, between a loss and the
    /// next one's) or when there is no such session (never made, or reaped:
    /// [`Node::sessions`]). [`SessionInfo::device`] is the device of the
    /// established connection only.
    #[must_use]
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
