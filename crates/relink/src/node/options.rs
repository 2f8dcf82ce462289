//! What the application hands a [`Node`](super::Node) and gets back:
//! session and listener handles, session options and their builder, region
//! options, a session's snapshot, the node's footprint.

use std::collections::BTreeSet;

use relink_core::policy::Policy;
use relink_core::resources::{RegionSpec, SessionSpec};
use relink_core::session::{Counters, Plan, Role};
use relink_core::state::State;
use relink_core::wire::{self, ConnectBytes, MAX_CONNECT_DATA};
use relink_core::{Epoch, Incarnation, Seq, SessionId};
use relink_fabric::{DeviceInfo, Timestamp};

use super::{OptionsError, RegionOptions, SharedReceiveHandle};

/// Identifies a session of a [`Node`](super::Node); never reused by that
/// node, also after the session is gone (reaped once it ended and was
/// drained: [`Node::sessions`](super::Node::sessions)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionHandle(pub u64);

/// Identifies a listener of a [`Node`](super::Node); never reused by that
/// node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListenerHandle(pub u64);

/// How a session is built: made with [`SessionOptions::builder`] (or
/// [`SessionOptions::default`]); its fields are read-only outside this
/// crate (more options may come).
///
/// ```
/// use relink::{Policy, SessionOptions};
/// use std::time::Duration;
///
/// let opts = SessionOptions::builder()
///     .max_message(64 * 1024)
///     .policy(Policy::builder().ctrl_loss_tmo(Some(Duration::from_secs(30))).build()?)
///     .build()?;
/// assert_eq!(opts.recv_slots, 64); // the default
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SessionOptions {
    /// Recovery policy: backoffs, timeouts, which devices may take over,
    /// when to give up. Default: [`Policy::default`].
    pub policy: Policy,
    /// Receive slots (the peer's send credits); more than 8, which are kept
    /// for control messages. Default: 64.
    pub recv_slots: u32,
    /// Largest message payload in bytes, at least 8 (34 with an advertised
    /// region: control messages travel in the same slots), at most 1 GiB;
    /// a receive slot
    /// holds this plus relink's message header. Default: 4096.
    pub max_message: u32,
    /// The most one-sided operations in flight at once, at least 1.
    /// Default: 64.
    pub max_one_sided: u32,
    /// The most operations outstanding — submitted, their completion not
    /// yet taken ([`Node::poll_completion`](super::Node::poll_completion)
    /// or [`Node::poll_output`](super::Node::poll_output)) — at least 1.
    /// Past it a submit is refused with
    /// [`SubmitError::WouldBlock`](super::SubmitError::WouldBlock) until
    /// the application takes a completion;
    /// [`SessionEvent::Writable`](crate::SessionEvent::Writable) says when
    /// room returned. Bounds what an application can queue while the
    /// session cannot make progress (a message's bytes are held until the
    /// peer confirms it). Default: 4096.
    pub max_outstanding: u32,
    /// Application regions, registered with the session on every device
    /// (ids distinct, lengths above 0). Default: none.
    pub regions: Vec<RegionOptions>,
    /// Bytes for the peer's application, sent with the session's first
    /// connect (at most [`MAX_CONNECT_DATA`]); the accepting node hands
    /// them out with the session ([`Accepted`](super::Accepted),
    /// [`Node::connect_data`](super::Node::connect_data)). Resumes do not
    /// carry them. For [`Node::connect`](super::Node::connect) only: a
    /// listener's are not used. Empty by default.
    pub connect_data: Vec<u8>,
    /// Receive through this shared receive queue of the node
    /// ([`Node::create_shared_receive`](super::Node::create_shared_receive))
    /// instead of receive slots of the session's own; `recv_slots` is then
    /// the session's reservation out of the queue's depth (and still the
    /// peer's credits). `None` (the default): receive slots of its own.
    pub shared_receive: Option<SharedReceiveHandle>,
    /// Read the peer's messages from registered memory of at least this
    /// many bytes straight into this side's posted receives
    /// ([`Node::post_receive`](super::Node::post_receive), a *rendezvous*):
    /// the peer sends where the message is (its one range of a region or
    /// registration it exposes with [`Access::REMOTE_READ`](crate::fabric::Access::REMOTE_READ)),
    /// this node RDMA-READs it into the next posted buffer and only then
    /// counts it delivered, so no byte of it is copied on either side, and
    /// a message may be longer than [`max_message`](Self::max_message)
    /// (up to the sender's). Such a message waits for a posted buffer: a
    /// session with this set takes its messages through posted receives.
    /// Messages of bytes, of several ranges, or of memory the peer does
    /// not expose come in their SEND as usual. Costs a round trip per such
    /// message (the READ): for messages where a copy costs more. `None`
    /// (the default): every message comes in its SEND.
    pub rendezvous: Option<u32>,
}

impl Default for SessionOptions {
    fn default() -> SessionOptions {
        SessionOptions {
            policy: Policy::default(),
            recv_slots: 64,
            max_message: 4096,
            max_one_sided: 64,
            max_outstanding: 4096,
            regions: Vec::new(),
            connect_data: Vec::new(),
            shared_receive: None,
            rendezvous: None,
        }
    }
}

/// Receive slots kept for control messages (the core's credit reserve).
const CONTROL_SLOTS: u32 = 8;

/// The smallest [`SessionOptions::max_message`] whose slots hold an
/// advertisement of one region (its count and the advert): a session with
/// less advertises nothing.
pub(super) const MIN_ADVERT_MESSAGE: u32 = 2 + wire::ADVERT_LEN as u32;

/// The largest [`SessionOptions::max_message`]: 1 GiB (a receive slot is
/// the message plus its header, in a `u32`).
const MAX_MESSAGE: u32 = 1 << 30;

impl SessionOptions {
    /// A builder that starts from the defaults.
    pub fn builder() -> SessionOptionsBuilder {
        SessionOptionsBuilder {
            opts: SessionOptions::default(),
        }
    }

    /// A builder that starts from these options.
    pub fn to_builder(&self) -> SessionOptionsBuilder {
        SessionOptionsBuilder { opts: self.clone() }
    }

    /// Check every option and the policy.
    ///
    /// # Errors
    /// [`OptionsError::Policy`] naming a policy key out of range;
    /// [`OptionsError::Invalid`] naming `recv_slots` (must be > 8),
    /// `max_message` (≥ 8, ≥ 34 with an advertised region or a rendezvous,
    /// ≤ 1 GiB), `rendezvous` (≥ 1, not with a shared receive queue) or
    /// `max_one_sided` (≥ 1); [`OptionsError::DuplicateRegion`],
    /// [`OptionsError::EmptyRegion`].
    pub fn validate(&self) -> Result<(), OptionsError> {
        self.policy.validate()?;
        let invalid = |key, reason| Err(OptionsError::Invalid { key, reason });
        if self.recv_slots <= CONTROL_SLOTS {
            return invalid(
                "recv_slots",
                "must be > 8 (8 are kept for control messages)",
            );
        }
        if self.max_message < 8 {
            return invalid("max_message", "must be >= 8");
        }
        if self.max_message > MAX_MESSAGE {
            return invalid("max_message", "must be <= 1073741824 (1 GiB)");
        }
        if self.max_message < MIN_ADVERT_MESSAGE && self.regions.iter().any(|r| r.advertise) {
            return invalid(
                "max_message",
                "must be >= 34 with an advertised region (its advertisement travels in a slot)",
            );
        }
        if self.max_one_sided == 0 {
            return invalid("max_one_sided", "must be >= 1");
        }
        if self.max_outstanding == 0 {
            return invalid("max_outstanding", "must be >= 1");
        }
        if self.rendezvous == Some(0) {
            return invalid("rendezvous", "must be >= 1 byte (None: no rendezvous)");
        }
        if self.rendezvous.is_some() && self.shared_receive.is_some() {
            return invalid(
                "rendezvous",
                "not with a shared receive queue: a message is read into the session's own posted receives",
            );
        }
        if self.rendezvous.is_some() && self.max_message < MIN_ADVERT_MESSAGE {
            return invalid(
                "max_message",
                "must be >= 34 with a rendezvous (the peer's advertisements of the memory to read travel in a slot)",
            );
        }
        let mut seen = BTreeSet::new();
        for r in &self.regions {
            if !seen.insert(r.id) {
                return Err(OptionsError::DuplicateRegion(r.id));
            }
            if r.len == 0 {
                return Err(OptionsError::EmptyRegion(r.id));
            }
        }
        self.check_regions()?;
        self.connect_bytes()?;
        Ok(())
    }

    /// The connect data as the Hello carries it.
    pub(super) fn connect_bytes(&self) -> Result<ConnectBytes, OptionsError> {
        ConnectBytes::new(&self.connect_data).map_err(|_| OptionsError::ConnectDataTooLong {
            len: self.connect_data.len(),
            max: MAX_CONNECT_DATA,
        })
    }

    /// The resources a session of these options needs on each device.
    pub(super) fn spec(&self) -> SessionSpec {
        SessionSpec {
            recv_slots: self.recv_slots,
            slot_size: self.max_message + wire::HEADER_LEN as u32,
            send_slots: self.recv_slots + 16,
            max_one_sided: self.max_one_sided,
            max_outstanding: self.max_outstanding,
            regions: self
                .regions
                .iter()
                .map(|r| RegionSpec {
                    id: r.id,
                    len: r.len,
                    access: r.access,
                    advertise: r.advertise,
                    window: r.window,
                })
                .collect(),
            shared_receive: self.shared_receive.is_some(),
            rendezvous_min: self.rendezvous.unwrap_or(0),
        }
    }
}

/// Makes [`SessionOptions`]: starts from the defaults
/// ([`SessionOptions::builder`]) or from options
/// ([`SessionOptions::to_builder`]), one setter per option, checked by
/// [`build`](SessionOptionsBuilder::build).
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct SessionOptionsBuilder {
    opts: SessionOptions,
}

impl SessionOptionsBuilder {
    /// [`SessionOptions::policy`]: the recovery policy (made with
    /// [`Policy::builder`]).
    pub fn policy(mut self, policy: Policy) -> SessionOptionsBuilder {
        self.opts.policy = policy;
        self
    }

    /// [`SessionOptions::recv_slots`]: receive slots, more than 8.
    pub fn recv_slots(mut self, n: u32) -> SessionOptionsBuilder {
        self.opts.recv_slots = n;
        self
    }

    /// [`SessionOptions::max_message`]: largest message payload in bytes.
    pub fn max_message(mut self, bytes: u32) -> SessionOptionsBuilder {
        self.opts.max_message = bytes;
        self
    }

    /// [`SessionOptions::max_outstanding`]: operations submitted whose
    /// completion was not taken.
    pub fn max_outstanding(mut self, n: u32) -> SessionOptionsBuilder {
        self.opts.max_outstanding = n;
        self
    }

    /// [`SessionOptions::max_one_sided`]: one-sided operations in flight
    /// at most.
    pub fn max_one_sided(mut self, n: u32) -> SessionOptionsBuilder {
        self.opts.max_one_sided = n;
        self
    }

    /// [`SessionOptions::rendezvous`]: read the peer's messages from
    /// registered memory of at least `min_len` bytes into posted receives.
    pub fn rendezvous(mut self, min_len: Option<u32>) -> SessionOptionsBuilder {
        self.opts.rendezvous = min_len;
        self
    }

    /// [`SessionOptions::regions`]: every application region (replaces
    /// those set before).
    pub fn regions(mut self, regions: Vec<RegionOptions>) -> SessionOptionsBuilder {
        self.opts.regions = regions;
        self
    }

    /// Add one application region to [`SessionOptions::regions`].
    pub fn region(mut self, region: RegionOptions) -> SessionOptionsBuilder {
        self.opts.regions.push(region);
        self
    }

    /// [`SessionOptions::connect_data`]: bytes for the peer's application
    /// with the first connect, at most [`MAX_CONNECT_DATA`].
    pub fn connect_data(mut self, data: impl Into<Vec<u8>>) -> SessionOptionsBuilder {
        self.opts.connect_data = data.into();
        self
    }

    /// [`SessionOptions::shared_receive`]: receive through this shared
    /// receive queue of the node the session is made on (the node checks
    /// the handle when the session or listener is made:
    /// [`SharedReceiveError`](crate::SharedReceiveError)).
    pub fn shared_receive(mut self, queue: SharedReceiveHandle) -> SessionOptionsBuilder {
        self.opts.shared_receive = Some(queue);
        self
    }

    /// The options, checked.
    ///
    /// # Errors
    /// The first option out of range ([`SessionOptions::validate`] lists
    /// the rules).
    pub fn build(self) -> Result<SessionOptions, OptionsError> {
        self.opts.validate()?;
        Ok(self.opts)
    }
}

/// A snapshot of one session, for introspection
/// ([`Node::session_info`](super::Node::session_info)). Read-only outside
/// this crate (more may come).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionInfo {
    /// The session's id, the same on both sides.
    pub id: SessionId,
    /// Whether this side connected ([`Role::Initiator`]) or accepted
    /// ([`Role::Target`]).
    pub role: Role,
    /// The session's state.
    pub state: State,
    /// The epoch of its current transport, or of the attempt under way
    /// (`Epoch(0)` before the first attempt); it grows with every attempt.
    pub epoch: Epoch,
    /// The device carrying the session while it is connected (from the
    /// connection's establishment until it is lost or closed).
    pub device: Option<DeviceInfo>,
    /// The peer's incarnation (a random id of its process), once the first
    /// handshake told it.
    pub peer_incarnation: Option<Incarnation>,
    /// Operations submitted and not yet completed.
    pub pending_ops: usize,
    /// Bytes of message payload kept for replay until the peer confirms
    /// delivery.
    pub journal_bytes: usize,
    /// The sequence number of the last message delivered to this side's
    /// application.
    pub last_delivered: Seq,
    /// The session's next timer (on the provider's clock); `None` while it
    /// has none.
    pub next_timeout: Option<Timestamp>,
    /// How many of the session's timers are armed (a fixed table of one
    /// per kind: backoff, give-up, keepalive, acknowledgement, ...), so at
    /// most a dozen whatever the session went through.
    pub timers_armed: usize,
    /// Completions, deliveries and events waiting for the application
    /// (not yet taken with `poll_completion`, `poll_delivery`,
    /// `poll_event` or `poll_output`).
    pub outputs_waiting: usize,
    /// While the session closes gracefully
    /// ([`Node::close_gracefully`](super::Node::close_gracefully)): when it
    /// closes whatever is still pending.
    pub closing_deadline: Option<Timestamp>,
    /// Whether the session is held for the application's decision
    /// ([`RecoveryMode::Manual`](crate::RecoveryMode::Manual)):
    /// [`Node::resume`](super::Node::resume) lets it recover.
    pub awaiting_decision: bool,
    /// The planned outage under way ([`Node::suspend`](super::Node::suspend),
    /// [`Node::drain`](super::Node::drain), or the peer's), while both ends
    /// quiesce; `None` otherwise. A suspended session's state is
    /// [`State::Suspended`].
    pub planned: Option<Plan>,
    /// The session's counters.
    pub counters: Counters,
    /// The phases of its last outage (the one under way while it is out);
    /// `None` before the first.
    pub last_recovery: Option<super::RecoveryTimeline>,
}

/// How many entries the tables of a [`Node`](super::Node) hold
/// ([`Node::footprint`](super::Node::footprint)): what a leak check counts.
/// Every session's memory (its send and receive slots, the regions relink
/// allocated for it) goes with its entry in `sessions`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Footprint {
    /// Sessions, live and ended but not yet reaped.
    pub sessions: usize,
    /// Session ids known (for connect requests).
    pub session_ids: usize,
    /// Listeners.
    pub listeners: usize,
    /// CM ids the node owns (listeners, attempts, connections, requests,
    /// closing transports).
    pub cm_ids: usize,
    /// Connect requests waiting for their session's answer.
    pub requests: usize,
    /// Accepted sessions not yet taken with [`Node::accept`](super::Node::accept).
    pub accepted: usize,
    /// CQs indexed to their session (or closing transport).
    pub cqs: usize,
    /// Sessions (and closing transports) with a timer indexed.
    pub deadlines: usize,
    /// Ended (closed or failed) sessions not yet reaped.
    pub ended: usize,
    /// Sessions in the queue of those with output for
    /// [`Node::poll_output`](super::Node::poll_output) (each at most once).
    pub ready: usize,
    /// Closed sessions' transports waiting for their goodbye to leave
    /// ([`Node::set_goodbye_timeout`](super::Node::set_goodbye_timeout)).
    pub closing: usize,
    /// Bytes of host memory relink allocated for its sessions and
    /// registers on their devices: every session's send and receive slots
    /// and the regions relink allocates ([`RegionOptions::new`]; not the
    /// application's, [`RegionOptions::with_memory`]). What the sessions
    /// hold besides is ordinary heap.
    pub session_memory_bytes: usize,
    /// Shared receive queues ([`Node::create_shared_receive`](super::Node::create_shared_receive)).
    pub shared_receive_queues: usize,
    /// Their SRQs on devices: one per device context a session of the
    /// queue is on (none left once no transport uses the device).
    pub shared_receive_srqs: usize,
    /// Bytes of host memory those SRQs' receive slots hold (registered on
    /// their devices; not part of `session_memory_bytes`).
    pub shared_receive_memory_bytes: usize,
}
