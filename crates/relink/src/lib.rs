//! # relink — RDMA sessions that survive their hardware
//!
//! A [`Node`] runs resilient sessions on any [`Provider`]: the soft fabric
//! (`relink_soft`, in-process or TCP), or real verbs (`relink_verbs`). A
//! session keeps its identity across device reset, hot-unplug and
//! replacement: relink tears down everything on the lost device, waits for
//! a device that reaches the peer, reconnects, recreates every resource
//! from its spec, re-exchanges buffer advertisements and replays what was
//! not confirmed — so every operation completes exactly once and every
//! message is delivered exactly once, in order.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use relink::{Node, Path, SessionOptions};
//! use relink_soft::SoftFabric;
//!
//! let fabric = SoftFabric::new(1);
//! let (a, b) = (fabric.add_host("a"), fabric.add_host("b"));
//! fabric.add_device(&a, "soft0", "10.0.0.1/24");
//! fabric.add_device(&b, "soft0", "10.0.0.2/24");
//! let mut target = Node::new(Arc::new(b.clone()));
//! let mut init = Node::new(Arc::new(a.clone()));
//! let addr = "10.0.0.2:7471".parse().unwrap();
//! target.listen(addr, SessionOptions::default()).unwrap();
//! let s = init.connect(vec![Path { local: None, peer: addr }], SessionOptions::default()).unwrap();
//! let op = init.send(s, b"hello").unwrap();
//! // Drive both nodes (one thread, virtual time).
//! let mut got = None;
//! for _ in 0..1000 {
//!     init.poll();
//!     target.poll();
//!     if let Some(a) = target.accept() { got = Some(a.session); }
//!     if let Some(t) = got { if let Some((_, msg)) = target.poll_delivery(t) { assert_eq!(msg, b"hello"); break; } }
//!     fabric.advance(Duration::from_micros(50));
//! }
//! // The sender's completion says the peer delivered it.
//! for _ in 0..1000 { init.poll(); target.poll(); fabric.advance(Duration::from_micros(50)); }
//! let c = init.poll_completion(s).unwrap();
//! assert_eq!(c.op, op);
//! assert!(c.outcome.is_success());
//! ```
//!
//! # Map
//!
//! | concept | where | what to know |
//! |---|---|---|
//! | the node | [`Node::new`], [`Node::seeded_for_simulation`] | one per provider; owns sessions and listeners; single-threaded: sessions make progress only in [`Node::poll`] (and the calls that poll) |
//! | sessions | [`Node::connect`] (initiator), [`Node::listen`] + [`Node::accept`] (target), [`SessionHandle`] | a session outlives its devices; its [`State`] says where it is; an ended one is reaped once drained ([`Node::sessions`]) |
//! | options and policy | [`SessionOptions::builder`], [`Policy::builder`] | slots, message size, regions ([`RegionOptions`]); when to retry and when to give up (`first_connect_tmo`, `ctrl_loss_tmo`, backoff, keepalive, ...) |
//! | frames | [`SessionOptions::max_message`], [`Counters::packed`] | messages queued together share one SEND while they fit the peer's receive slot (`max_message` plus the header): small messages on roomy slots cost the fabric one request per frame; nothing waits to fill a frame |
//! | resources recreated after every recovery | [`RegionOptions`], [`RegionOptions::window`], [`Node::create_shared_receive`] + [`SessionOptionsBuilder::shared_receive`] | every region is registered again on the new device and advertised again (tokens stay valid); a region may be exposed through a type 2 memory window relink binds on the session's QP; sessions may receive through one shared receive queue per device, each reserving its `recv_slots` of its depth (the credit rule) |
//! | who decides a recovery | [`Policy::recovery`], [`Node::resume`], [`Node::resume_on`], [`Node::set_policy`] | relink by default; with [`RecoveryMode::Manual`] the application, after [`SessionEvent::AwaitingDecision`] ("Who decides a recovery" below) |
//! | a standby connection | [`Policy::standby`], [`SessionEvent::StandbyUp`], [`SessionEvent::StandbyLost`] ([`StandbyLoss`]), [`Counters::failovers`], [`Counters::standbys_silent`] | a session with several paths may keep a second connection up on another device; a loss switches to it with no connection setup in the stall, then replays as any recovery; a standby that goes (silent past two keepalive periods, its device or connection lost, released) is reported with its device, path and cause, and until a new one is up a loss reconnects |
//! | planned outages | [`Node::suspend`], [`Node::resume`], [`Node::drain`], [`Node::undrain`], [`Node::sessions_on`] | a suspend parks a session ([`State::Suspended`]) until resumed; a drain moves sessions off a device before maintenance; both wait until nothing is in flight, so nothing is replayed or `Indeterminate` ("Planned outages" below) |
//! | operations | [`Node::send`], [`send_from`](Node::send_from) (a message gathered from registered memory, no copy), [`write`](Node::write), [`write_imm`](Node::write_imm) (a WRITE the peer is told of, once, in order), [`read`](Node::read), [`fetch_add`](Node::fetch_add), [`cmp_swap`](Node::cmp_swap), [`submit`](Node::submit), [`submit_with`](Node::submit_with) (and [`OpKind::Flush`], a barrier and fence) | each returns an [`OpId`] that completes exactly once; its [`Completion`] carries the context given to `submit_with`, the [`OpClass`] and the length, in the order [`Completion`] specifies; local memory by [`LocalRange`] ([`Node::region`]), the peer's by [`BufferToken`]; an atomic's 8 bytes must be 8-byte aligned (refused at submit otherwise) |
//! | memory the application registers | [`Node::register`], [`Node::deregister`], [`Node::alloc_memory`], [`REGISTERED_BASE`] | host memory registered once with the node, at any time, under an id every session of the node uses — in its [`LocalRange`]s, and the peer's [`BufferToken`]s once the application sent it the id (the advertisement travels first); registered again on every device after every recovery |
//! | receiving | [`Node::poll_delivery`], [`post_receive`](Node::post_receive) / [`poll_received`](Node::poll_received), [`poll_written`](Node::poll_written) | messages in order, each once: as owned bytes, or copied once into buffers of registered memory the application posted ([`Received`], truncation said, flushed at the session's end) — or, with [`SessionOptions::rendezvous`], read by this side straight from the peer's registered memory into them, no copy on either side; the notice of a peer's [`write_imm`](Node::write_imm) ([`Written`]) in order with them |
//! | backpressure | [`SessionOptions::max_outstanding`], [`Node::room`], [`SubmitError::WouldBlock`], [`SessionEvent::Writable`] | a session takes at most `max_outstanding` operations whose completion was not taken (default 4096); past it a submit is refused, changing nothing, and `Writable` says once when room returned: nothing queues without bound while a session cannot make progress; a flush ([`OpKind::Flush`]) completes once every earlier operation did and holds the later ones back until then |
//! | polls (outputs) | [`Node::poll_completion`], [`poll_delivery`](Node::poll_delivery), [`poll_event`](Node::poll_event), [`accept`](Node::accept) | take each until `None` after a poll round; `None` also answers a handle the node no longer has |
//! | inspection | [`Node::state`], [`counters`](Node::counters), [`session_info`](Node::session_info), [`options`](Node::options), [`device`](Node::device), [`listener_active`](Node::listener_active) | snapshots; `None` for an unknown handle |
//! | the event loop | [`Node::wait`], [`wait_for`](Node::wait_for), [`event_fd`](Node::event_fd) + [`next_deadline`](Node::next_deadline) + [`prepare_to_sleep`](Node::prepare_to_sleep), [`run_until`](Node::run_until), [`set_poll_mode`](Node::set_poll_mode) | sleep until something happens, then poll and take outputs ([`Node`]'s docs show the loop); a progress engine that polls without sleeping busy-polls ([`PollMode::Busy`]) |
//! | errors | [`ConnectError`], [`ListenError`], [`SubmitError`], [`OptionsError`], [`RegionError`], [`CloseError`], [`ResumeError`], [`SetPolicyError`], [`SuspendError`], [`SharedReceiveError`] | a call's error means it did nothing; what happens later to a session is a [`SessionEvent`] ([`AttemptFailed`](SessionEvent::AttemptFailed), [`GaveUp`](SessionEvent::GaveUp), [`PeerLost`](SessionEvent::PeerLost), ...) and an operation's end an [`Outcome`] |
//! | providers | [`Provider`], [`fabric`] | the interface a backend implements, re-exported whole as [`fabric`] |
//!
//! ## When to call what
//!
//! A driver loop, per node: (1) [`Node::poll`] — or [`Node::wait`], which
//! sleeps until something happens and polls; (2) take the outputs:
//! [`Node::accept`] until `None`, then for each session
//! [`poll_event`](Node::poll_event), [`poll_completion`](Node::poll_completion)
//! and [`poll_delivery`](Node::poll_delivery) until `None`; (3) submit what
//! the application wants (operations may be submitted at any time, also
//! while a session recovers: they are posted once it is up); (4) sleep
//! again — on the event fd only once [`Node::prepare_to_sleep`] says so.
//! [`Node::next_deadline`] changes with every call that does
//! something: read it after each poll round.
//!
//! # Who decides a recovery
//!
//! By default ([`RecoveryMode::Automatic`]) a session recovers on its own:
//! after a loss it reconnects as soon as a device can carry it, under the
//! backoff, until its give-up deadline. Software that runs a quorum or a
//! disaster recovery wants to be told and to decide — fail over, wait, or
//! resume — and sets [`Policy::recovery`] to [`RecoveryMode::Manual`]:
//!
//! - on a loss of an established session the initiator **holds**: its
//!   state is [`State::Recovering`], [`SessionInfo::awaiting_decision`] is
//!   true, every operation stays pending (new ones are taken and wait),
//!   and it makes no connection attempt;
//! - it reports [`SessionEvent::AwaitingDecision`] with the loss's
//!   [`DownCause`] and the [`Candidate`]s — the paths a present device can
//!   carry now, each with that device — and reports it again whenever
//!   they change (a device comes back, a replacement appears);
//! - [`Node::resume`] (or [`Node::resume_on`] a named path) lets it
//!   recover exactly as an automatic session does — replay, the
//!   re-advertisement of its regions, each message delivered once — until
//!   it is established again; a later loss holds it again. [`Node::close`]
//!   ends it; at the give-up deadline it fails as any session does.
//!
//! A first connect retries on its own in either mode (there is nothing to
//! keep yet), and a target accepts a valid resume in either mode: the
//! decision is the initiator's. [`Node::set_policy`] changes a session's
//! policy in an outage under way: a give-up deadline extended (re-armed
//! from the loss) or cancelled (`None`) keeps the session past the old
//! one — give the peer's session the same, or it gives up and refuses the
//! resume; switching a held session to automatic recovers at once.
//! `relink demo` shows a manual session (its session C) held after each
//! fault and resumed once its application's quorum agrees;
//! `tests/manual_recovery.rs` is such an application in a few lines.
//!
//! # Planned outages
//!
//! A loss costs replays, and `Indeterminate` outcomes for what was in
//! flight. An outage planned ahead costs neither: relink waits until
//! nothing is in flight before the connection goes.
//!
//! - [`Node::suspend`] (the initiator's): both ends stop posting, finish
//!   what is in flight, and the connection goes; both halves wait in
//!   [`State::Suspended`] — no attempt, no give-up deadline — and new
//!   operations queue. [`Node::resume`] (or [`Node::resume_on`] a path)
//!   reconnects; the session carries on, nothing replayed. A device reset
//!   or replacement while suspended costs nothing.
//! - [`Node::drain`] (planned maintenance: a firmware update, a card
//!   swap): every session on the device moves to another present path the
//!   same way — quiet, then reconnected at once — and no session of the
//!   node takes a path on that device any more. The [`DrainReport`] lists
//!   the sessions that move and those that cannot (no other path: they
//!   stay, and a removal of the device is then a loss for them).
//!   [`Node::sessions_on`] is empty once the device carries nothing: then
//!   take it away. A drain at a target asks each initiator to move.
//!
//! Each reports [`SessionEvent::Quiescing`], then
//! [`SessionEvent::Suspended`] or the usual
//! [`SessionEvent::Resumed`]; [`Counters::planned`] counts them and
//! [`Counters::losses`] does not. `relink_bench`'s `relink_drain` puts a
//! drain's stall next to an unplanned failover's.
//!
//! # The replay contract
//!
//! Every [`OpId`] a submit call returns gets **exactly one**
//! [`Completion`], from [`Node::poll_completion`] — across any number of
//! recoveries, and also when the session gives up, loses its peer or is
//! closed. A call that returns an error submitted nothing and has no
//! completion. What each kind of operation gets after a device loss:
//!
//! | operation | after a loss, relink... | its one [`Outcome`] |
//! |---|---|---|
//! | message ([`Node::send`]) | sends every unconfirmed message again on the new connection; the receiver drops duplicates: **each delivered exactly once, in order** | `Success` once the peer's *application* has it (its node confirmed delivery, not just the RC ack); `Indeterminate { executed: None }` if the session ended or failed fast after posting it and before the confirmation (after a fast failure a message of bytes may still arrive, once; one from registered memory arrived before or never will); `Failed(..)` if it never left. A message from registered memory ([`Node::send_from`]) is read again for its replay: its bytes stay unchanged until the completion |
//! | write, read ([`Node::write`], [`Node::read`]) | **replays** every unacknowledged one, in the original order (idempotent: twice is once) | `Success { replayed }` on the RC acknowledgement (a read's data landed); `Failed(..)` if the session ended first (a write's target range is then undefined) |
//! | fetch-add, cmp-swap ([`Node::fetch_add`], [`Node::cmp_swap`]) | does **not** replay an unacknowledged atomic (not idempotent) — unless [`Policy::replay_atomics`], which replays it (at-least-once) | `Success` when acknowledged with its result; else `Indeterminate { executed: Some(true) }` (a later confirmed message proves it ran; its result is lost) or `Indeterminate { executed: None }` (unknown); `Failed(..)` if never posted |
//!
//! **What to do with [`Outcome::Indeterminate`]**: relink cannot know
//! whether the operation took effect and will not retry it. The
//! application decides from its own state — read the remote word back,
//! or ask the peer with a message (messages *are* exactly once) — and
//! retries only if the effect is missing. `Failed(err)` carries an
//! [`OpError`]: `GaveUp` (the give-up deadline passed), `FastFail`
//! (`fast_io_fail_tmo` passed; recovery goes on), `PeerLost` (the peer
//! restarted or refused for good: nothing is replayed into a stranger),
//! `Disconnected` (closed), `Remote(status)` (the operation itself was
//! refused, e.g. a token the peer never advertised; never replayed).
//!
//! Remote memory is named by [`BufferToken`]s (region and offset), never
//! by rkeys: a token is translated through the peer's advertisements of
//! the current connection, so a stale key is never used.
//!
//! # Errors and events
//!
//! Calls fail only for what cannot work now — invalid input
//! ([`OptionsError`], [`ConnectError::NoPath`], [`ListenError::NoPort`]),
//! an unknown handle (`NoSession`), an ended session
//! ([`SubmitError::Ended`]), an address another listener holds
//! ([`ListenError::AddrInUse`]) — and each error type is
//! `#[non_exhaustive]` with typed sources. Everything a session meets
//! later is an event: each failed connection attempt
//! ([`SessionEvent::AttemptFailed`], with an [`AttemptFailure`]), a loss
//! ([`SessionEvent::DeviceLost`]), a resume, a refusal, the give-up, a
//! lost peer ([`PeerLostReason`]).

#[cfg(all(unix, feature = "tokio"))]
mod async_node;
mod node;

#[cfg(all(unix, feature = "tokio"))]
pub use async_node::AsyncNode;

pub use node::{
    Accepted, CloseError, ConnectError, DrainReport, Footprint, ListenError, ListenerHandle, Node,
    OptionsError, Output, PollMode, ReceiveOutcome, Received, RecoveryTimeline, RegionError,
    RegionOptions, RegisterError, ResumeError, SessionHandle, SessionInfo, SessionOptions,
    SessionOptionsBuilder, SetPolicyError, SharedReceiveError, SharedReceiveHandle,
    SharedReceiveOptions, SharedReceiveOptionsBuilder, SharedReceiveUsage, ShutdownSummary,
    SubmitError, SuspendError, REGISTERED_BASE,
};
pub use relink_core::journal::{
    Completion, LocalRange, LocalSgl, MessageBody, OpError, OpKind, Outcome,
};
pub use relink_core::keys::KeyError;
pub use relink_core::policy::{
    AllowedDevice, DeviceMatch, Policy, PolicyBuilder, PolicyError, RecoveryMode,
};
pub use relink_core::reason::{
    AttemptFailure, CmCall, PeerLostReason, ProviderFailure, ReplyFault, TransportObject,
};
pub use relink_core::session::{
    Candidate, Counters, Path, Plan, Role, SessionError, SessionEvent, StandbyLoss,
};
pub use relink_core::state::{Cause, DownCause, IllegalTransition, State, Transition};
pub use relink_core::wire::Written;
pub use relink_core::wire::{RefuseReason, MAX_CONNECT_DATA};
pub use relink_core::Arrival;
pub use relink_core::{BufferToken, Epoch, Incarnation, OpClass, OpId, RegionId, Seq, SessionId};
pub use relink_fabric::{
    Access, CmError, CreateError, DeviceId, DeviceInfo, Guid, IpNet, Memory, MemoryError,
    PortState, PostError, Provider, Timestamp, WcStatus,
};

/// The wire formats' types an application meets: why a peer's handshake
/// reply did not decode ([`WireError`](wire::WireError), in
/// [`ReplyFault::Malformed`]) and the refusal reasons.
pub mod wire {
    pub use relink_core::wire::{MsgKind, RefuseReason, WireError, VERSION};
}

/// The provider interface (the `relink-fabric` crate), re-exported whole:
/// for a backend that implements [`Provider`], and for every type its
/// calls use.
pub mod fabric {
    #[doc(inline)]
    pub use relink_fabric::*;
}
