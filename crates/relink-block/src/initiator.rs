//! The initiator engine: one session to a target, commands with a queue
//! depth, one completion per command ([`InitiatorEngine`]).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use relink::{
    BufferToken, Completion, ConnectError, Node, OpError, OpId, Outcome, Output, Path,
    SessionEvent, SessionHandle, State, Timestamp,
};

use crate::config::{ConfigError, InitiatorConfig, DATA_REGION};
use crate::error::{BlockError, SessionEnd};
use crate::wire::{Command, Extent, Extents, Opcode, Reply, Tag, VolumeInfo, WireError};

/// A block operation to submit ([`InitiatorEngine::submit`]). Offsets
/// and lengths are bytes, multiples of the volume's block size.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockOp {
    /// Describe the volume: completes with [`BlockReply::Volume`].
    Identify,
    /// Read `len` bytes (at most `max_io`) at `offset`: completes with
    /// [`BlockReply::Data`].
    Read {
        /// Offset in the volume.
        offset: u64,
        /// Bytes to read.
        len: u32,
    },
    /// Write `data` (at most `max_io` bytes) at `offset`; with `fua` it
    /// is durable when the command completes.
    Write {
        /// Offset in the volume.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
        /// Force unit access.
        fua: bool,
    },
    /// Make every write completed before this was submitted durable.
    Flush,
    /// Write `len` zeros at `offset` (no data moves; any length).
    WriteZeroes {
        /// Offset in the volume.
        offset: u64,
        /// Bytes to zero.
        len: u32,
        /// Force unit access.
        fua: bool,
    },
    /// Discard `len` bytes at `offset`: they read as zeros afterwards.
    Trim {
        /// Offset in the volume.
        offset: u64,
        /// Bytes to discard.
        len: u32,
    },
    /// Which parts of `len` bytes at `offset` are holes (any length):
    /// completes with [`BlockReply::Extents`].
    BlockStatus {
        /// Offset in the volume.
        offset: u64,
        /// Bytes to describe.
        len: u32,
    },
}

/// A command's success ([`InitiatorEngine::poll_completion`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockReply {
    /// A WRITE, FLUSH, WRITE_ZEROES or TRIM is done.
    Done,
    /// A READ's bytes.
    Data(Vec<u8>),
    /// IDENTIFY's answer.
    Volume(VolumeInfo),
    /// A BLOCK_STATUS's extents, from its offset, in order; they may end
    /// before its end (ask again from there).
    Extents(Vec<Extent>),
}

/// Why [`InitiatorEngine::submit`] took nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    /// The session ended: connect a new engine and resubmit.
    #[error("the session ended ({0:?})")]
    Ended(SessionEnd),
    /// A READ or WRITE longer than the engine's `max_io`.
    #[error("{len} bytes, at most {max} per command")]
    TooLarge {
        /// The command's length.
        len: usize,
        /// The engine's `max_io`.
        max: u32,
    },
}

/// Why [`InitiatorEngine::connect`] made no engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitiatorSetupError {
    /// The configuration is refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The node refused the session.
    #[error(transparent)]
    Connect(#[from] ConnectError),
}

/// What the engine met besides completions ([`InitiatorEngine::poll_event`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InitiatorEvent {
    /// A message of the target is not a reply: dropped, no command
    /// completes by it.
    BadReply(WireError),
    /// A reply for a tag not outstanding: dropped.
    UnknownTag(Tag),
    /// The session ended: every command outstanding or queued completed
    /// with [`BlockError::SessionEnded`].
    Ended(SessionEnd),
    /// Commands completed with [`BlockError::FastFail`] in the outage
    /// under way: once per outage, when its `fast_io_fail_tmo` passed (or
    /// at the resume, if relink failed commands first), with how many
    /// failed until then; commands submitted later in the outage fail at
    /// once too.
    FastFailed {
        /// Commands failed so far in this outage.
        commands: usize,
    },
}

/// What an outstanding command needs when its reply comes.
#[derive(Debug, Clone, Copy)]
struct Pending {
    slot: u32,
    opcode: Opcode,
    len: u32,
}

/// A completion: the command's tag and its result.
pub type BlockCompletion = (Tag, Result<BlockReply, BlockError>);

/// One session to a block target, with a data region of `queue_depth`
/// slots of `max_io` bytes advertised to it; each outstanding command
/// holds one slot (a READ's data lands there, a WRITE's is read from
/// there by the target), so at most `queue_depth` are outstanding and
/// the rest wait in the engine.
///
/// # Driving it
///
/// [`InitiatorEngine::connect`] makes the session (commands may be
/// submitted at once: they go once it is up). In the node's loop, after
/// every [`Node::poll`] (or [`Node::wait`]): take [`Node::poll_output`]
/// until `None` and hand each item to [`InitiatorEngine::handle`] (it
/// returns the items of other sessions), then take
/// [`InitiatorEngine::poll_completion`] and
/// [`InitiatorEngine::poll_event`] until `None`.
/// [`InitiatorEngine::submit`] at any time.
///
/// # The contract
///
/// Every tag [`submit`](InitiatorEngine::submit) returns completes
/// exactly once. Across a recovery (device reset, replacement, failover
/// to another path, on either side) the engine resends nothing: relink
/// delivers each command and each reply exactly once and re-advertises
/// the data region, so the target's transfers reach the same slots
/// through the same tokens. When the session ends — its give-up deadline
/// passed, the target restarted (a new incarnation), it was closed —
/// every outstanding and queued command completes with
/// [`BlockError::SessionEnded`]: it may or may not have taken effect
/// (an unflushed write may be on the volume). Connect a new engine and
/// resubmit what is needed.
///
/// With a `fast_io_fail_tmo` in the policy, the commands outstanding
/// when it passes in an outage complete with [`BlockError::FastFail`]
/// (and new ones fail at once) while the session keeps recovering
/// ([`InitiatorEvent::FastFailed`] says how many, once per outage). A
/// command whose message never left (relink failed it unsent) gives its
/// slot back at once; one whose message may still be delivered keeps its
/// slot until its reply comes ([`InitiatorEngine::quarantined`]) — relink
/// delivers or replays it once the session is back, and the target
/// answers it — so a late transfer never lands in a reused slot and no
/// slot stays held past that reply.
///
/// The engine follows the session's live policy: a `fast_io_fail_tmo`
/// set, changed or cancelled with [`Node::set_policy`] takes effect at
/// the engine's next [`InitiatorEngine::handle_timeout`] (in an outage
/// under way too, as in relink: from the loss, unless it passed already).
#[derive(Debug)]
pub struct InitiatorEngine {
    session: SessionHandle,
    config: InitiatorConfig,
    next_tag: u64,
    free: Vec<u32>,
    queued: VecDeque<(Tag, BlockOp)>,
    outstanding: HashMap<Tag, Pending>,
    /// Each outstanding command's message until its send completes.
    sends: HashMap<OpId, Tag>,
    /// Slots of fast-failed commands that may still reach the target:
    /// reserved until their reply comes.
    quarantined: HashMap<Tag, u32>,
    completions: VecDeque<BlockCompletion>,
    events: VecDeque<InitiatorEvent>,
    ended: Option<SessionEnd>,
    /// When the session lost its transport, while it is down.
    down_since: Option<Timestamp>,
    /// Whether this outage's `fast_io_fail_tmo` passed.
    fast_failed: bool,
    /// The session's `fast_io_fail_tmo`, as its live policy has it
    /// ([`Node::options`]).
    fast_io_fail_tmo: Option<Duration>,
    /// Commands completed `FastFail` in this outage.
    outage_fast_fails: usize,
    /// Whether [`InitiatorEvent::FastFailed`] was emitted for this outage.
    outage_reported: bool,
}

impl InitiatorEngine {
    /// Connect a session from `node` to the target over `paths` (tried in
    /// order, as [`Node::connect`]).
    ///
    /// # Errors
    /// [`InitiatorSetupError::Config`] for options out of range,
    /// [`InitiatorSetupError::Connect`] if the node refuses the session.
    pub fn connect(
        node: &mut Node,
        paths: Vec<Path>,
        config: InitiatorConfig,
    ) -> Result<InitiatorEngine, InitiatorSetupError> {
        let opts = config.session_options()?;
        let session = node.connect(paths, opts)?;
        Ok(InitiatorEngine {
            session,
            free: (0..u32::from(config.queue_depth)).rev().collect(),
            fast_io_fail_tmo: config.policy.fast_io_fail_tmo,
            config,
            next_tag: 1,
            queued: VecDeque::new(),
            outstanding: HashMap::new(),
            sends: HashMap::new(),
            quarantined: HashMap::new(),
            completions: VecDeque::new(),
            events: VecDeque::new(),
            ended: None,
            down_since: None,
            fast_failed: false,
            outage_fast_fails: 0,
            outage_reported: false,
        })
    }

    /// The engine's session (for [`Node::state`], [`Node::close`], ...).
    pub fn session(&self) -> SessionHandle {
        self.session
    }

    /// Commands sent and not answered.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// Slots held by fast-failed commands that may still reach the target
    /// ([`BlockError::FastFail`]): each is released when its reply comes
    /// (relink delivers or replays the command once the session is back).
    pub fn quarantined(&self) -> usize {
        self.quarantined.len()
    }

    /// Commands waiting in the engine for a free slot.
    pub fn queued(&self) -> usize {
        self.queued.len()
    }

    /// How the session ended; `None` while it lives.
    pub fn ended(&self) -> Option<SessionEnd> {
        self.ended
    }

    /// Submit `op`: it is sent at once if a slot is free (a WRITE's data
    /// copied into the slot), else queued until one is; in an outage whose
    /// `fast_io_fail_tmo` passed ([`InitiatorEngine::handle_timeout`]) it
    /// completes with [`BlockError::FastFail`] at once. Returns its tag,
    /// which completes exactly once ([`InitiatorEngine::poll_completion`]).
    ///
    /// # Errors
    /// [`SubmitError::Ended`] once the session ended;
    /// [`SubmitError::TooLarge`] for a READ or WRITE above `max_io`.
    /// Nothing is submitted then.
    pub fn submit(&mut self, node: &mut Node, op: BlockOp) -> Result<Tag, SubmitError> {
        if let Some(end) = self.ended {
            return Err(SubmitError::Ended(end));
        }
        let len = match &op {
            BlockOp::Read { len, .. } => *len as usize,
            BlockOp::Write { data, .. } => data.len(),
            _ => 0,
        };
        if len > self.config.max_io as usize {
            return Err(SubmitError::TooLarge {
                len,
                max: self.config.max_io,
            });
        }
        let tag = Tag(self.next_tag);
        self.next_tag += 1;
        if self.fast_failed {
            self.fast_fail(tag);
            return Ok(tag);
        }
        self.queued.push_back((tag, op));
        self.pump(node);
        Ok(tag)
    }

    /// Submit a WRITE of `data` (at most `max_io` bytes) at `offset`, as
    /// [`submit`](Self::submit) does [`BlockOp::Write`], copying `data`
    /// straight into a free slot when one is free and nothing waits ahead
    /// of it (the caller keeps its buffer: no copy of its own); only a
    /// command that must wait for a slot takes a copy.
    ///
    /// # Errors
    /// As [`submit`](Self::submit).
    pub fn submit_write(
        &mut self,
        node: &mut Node,
        offset: u64,
        data: &[u8],
        fua: bool,
    ) -> Result<Tag, SubmitError> {
        let owned = || BlockOp::Write {
            offset,
            data: data.to_vec(),
            fua,
        };
        let direct = self.ended.is_none()
            && !self.fast_failed
            && !self.free.is_empty()
            && self.queued.is_empty()
            && data.len() <= self.config.max_io as usize;
        if !direct {
            return self.submit(node, owned());
        }
        let tag = Tag(self.next_tag);
        self.next_tag += 1;
        let fields = (Opcode::Write, offset, data.len() as u32, fua);
        if !self.send_now(node, tag, fields, data) {
            self.queued.push_back((tag, owned()));
        }
        Ok(tag)
    }

    /// Send queued commands while slots are free.
    fn pump(&mut self, node: &mut Node) {
        while !self.free.is_empty() && self.ended.is_none() {
            let Some((tag, op)) = self.queued.pop_front() else {
                return;
            };
            let data: &[u8] = match &op {
                BlockOp::Write { data, .. } => data,
                _ => &[],
            };
            let fields = command_fields(&op);
            if !self.send_now(node, tag, fields, data) {
                self.queued.push_front((tag, op));
                return;
            }
        }
    }

    /// Send the command `(opcode, offset, len, fua)` (`tag`) in a free
    /// slot (there is one), a WRITE's bytes `data` copied into it first.
    /// `false` if it could not go (the session is gone, or has
    /// `max_outstanding` messages whose completions the engine has not
    /// taken yet): the slot is free again and the caller keeps the
    /// command.
    fn send_now(
        &mut self,
        node: &mut Node,
        tag: Tag,
        (opcode, offset, len, fua): (Opcode, u64, u32, bool),
        data: &[u8],
    ) -> bool {
        let slot = self.free.pop().expect("a free slot");
        let offset_in_region = u64::from(slot) * u64::from(self.config.max_io);
        if opcode == Opcode::Write {
            let copied = node
                .region(self.session, DATA_REGION)
                .map(|mem| mem.write(offset_in_region as usize, data));
            if !matches!(copied, Ok(Ok(()))) {
                // The session is gone (reaped): its end is known or
                // comes; keep the command for that.
                self.free.push(slot);
                return false;
            }
        }
        let cmd = Command {
            tag,
            opcode,
            fua,
            offset,
            len,
            buffer: BufferToken {
                region: DATA_REGION,
                offset: offset_in_region,
            },
        };
        match node.send(self.session, &cmd.encode()) {
            Ok(op) => {
                // Its completion tells whether a fast failure kept it
                // from leaving ([`InitiatorEngine::on_sent`]).
                self.sends.insert(op, tag);
            }
            Err(e) => {
                // The session ended (its end event fails every command),
                // or it has `max_outstanding` messages whose completions
                // the engine has not taken yet (`WouldBlock`: its
                // `Writable` event pumps again).
                tracing::debug!(session = self.session.0, %e, "command not sent");
                self.free.push(slot);
                return false;
            }
        }
        self.outstanding.insert(tag, Pending { slot, opcode, len });
        true
    }

    /// Handle one output of the node: `None` when it was the engine's (of
    /// its session), `Some(output)` back when it is not.
    pub fn handle(&mut self, node: &mut Node, output: Output) -> Option<Output> {
        if output.session() != self.session {
            return Some(output);
        }
        self.sync_policy(node);
        match output {
            Output::Delivery { payload, .. } => self.on_reply(node, &payload),
            // Room again after a refused send: the queued commands go.
            Output::Event {
                event: SessionEvent::Writable,
                ..
            } => self.pump(node),
            Output::Event { event, .. } => self.on_event(node, &event),
            Output::Completion { completion, .. } => self.on_sent(node, completion),
            _ => {}
        }
        None
    }

    /// A command's message completed. Success: its reply is what counts.
    /// A failure while the session lives is relink's fast failure
    /// (`fast_io_fail_tmo`): the command completes `FastFail` now; its
    /// slot is free again if the message never left (`Failed`), and
    /// reserved until the reply if it may still be delivered
    /// (`Indeterminate`). A failure because the session ended is left to
    /// the end event.
    fn on_sent(&mut self, node: &mut Node, c: Completion) {
        let Some(tag) = self.sends.remove(&c.op) else {
            return;
        };
        if c.outcome == Outcome::Failed(OpError::FastFail) {
            // Never left, never delivered: a fast-failed command's slot
            // is free again.
            if let Some(slot) = self.quarantined.remove(&tag) {
                self.free.push(slot);
                self.pump(node);
                return;
            }
        }
        if c.outcome.is_success()
            || matches!(
                node.state(self.session),
                None | Some(State::Failed | State::Closed)
            )
        {
            return;
        }
        let Some(p) = self.outstanding.remove(&tag) else {
            return;
        };
        match c.outcome {
            Outcome::Failed(OpError::FastFail) => self.free.push(p.slot),
            _ => {
                self.quarantined.insert(tag, p.slot);
            }
        }
        self.fast_fail(tag);
        self.pump(node);
    }

    fn on_reply(&mut self, node: &mut Node, payload: &[u8]) {
        let reply = match Reply::decode(payload) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(session = self.session.0, %e, "a message that is not a reply");
                self.events.push_back(InitiatorEvent::BadReply(e));
                return;
            }
        };
        let Some(p) = self.outstanding.remove(&reply.tag) else {
            if let Some(slot) = self.quarantined.remove(&reply.tag) {
                // A fast-failed command reached the target after all.
                self.free.push(slot);
                self.pump(node);
            } else {
                self.events.push_back(InitiatorEvent::UnknownTag(reply.tag));
            }
            return;
        };
        let result = match reply.status {
            Err(e) => Err(BlockError::Target(e)),
            Ok(Some(info)) => Ok(BlockReply::Volume(info)),
            Ok(None) if p.opcode == Opcode::Read => {
                let at = u64::from(p.slot) * u64::from(self.config.max_io);
                match node
                    .region(self.session, DATA_REGION)
                    .map(|mem| mem.read_vec(at as usize, p.len as usize))
                {
                    Ok(Ok(data)) => Ok(BlockReply::Data(data)),
                    _ => Err(BlockError::Target(crate::TargetError::Transfer)),
                }
            }
            Ok(None) if p.opcode == Opcode::BlockStatus => {
                let at = (u64::from(p.slot) * u64::from(self.config.max_io)) as usize;
                let max_io = self.config.max_io as usize;
                let extents = node.region(self.session, DATA_REGION).ok().and_then(|mem| {
                    // The count, then as many extents as it says (within
                    // the slot).
                    let head = mem.read_vec(at, 4).ok()?;
                    let count = u32::from_be_bytes(head.try_into().ok()?) as usize;
                    let len = count.saturating_mul(12).saturating_add(4).min(max_io);
                    Extents::decode(&mem.read_vec(at, len).ok()?).ok()
                });
                match extents {
                    Some(e) if !e.is_empty() => Ok(BlockReply::Extents(e)),
                    _ => Err(BlockError::Target(crate::TargetError::Transfer)),
                }
            }
            Ok(None) => Ok(BlockReply::Done),
        };
        self.free.push(p.slot);
        self.completions.push_back((reply.tag, result));
        self.pump(node);
    }

    /// When [`InitiatorEngine::handle_timeout`] has work: the session's
    /// `fast_io_fail_tmo` after the start of an outage under way. `None`
    /// with no such policy, while the session is up, or once that work is
    /// done for this outage. It changes with [`InitiatorEngine::handle`]
    /// (a loss, a resume) and with the session's policy
    /// ([`Node::set_policy`], taken at [`InitiatorEngine::handle_timeout`]):
    /// read it after those calls, and wake the loop by the earlier of it
    /// and [`Node::next_deadline`].
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let tmo = self.fast_io_fail_tmo?;
        match (self.down_since, self.fast_failed, self.ended) {
            (Some(since), false, None) => Some(since + tmo),
            _ => None,
        }
    }

    /// Act on [`InitiatorEngine::poll_timeout`] if it passed
    /// ([`Node::now`]); does nothing otherwise. Call it after every poll
    /// round. When it passed, every outstanding and queued command
    /// completes with [`BlockError::FastFail`] (relink fails the messages
    /// it still holds in the same way, so commands submitted until the
    /// session is back fail at once too); the slot of a command the
    /// target may have received stays reserved until its reply comes
    /// ([`InitiatorEngine::quarantined`]); one relink failed unsent gets
    /// its slot back. [`InitiatorEvent::FastFailed`] tells how many
    /// failed. It also takes the session's live `fast_io_fail_tmo`
    /// ([`Node::set_policy`]).
    pub fn handle_timeout(&mut self, node: &mut Node) {
        self.sync_policy(node);
        match self.poll_timeout() {
            Some(at) if at <= node.now() => {}
            _ => return,
        }
        self.fast_failed = true;
        let mut tags: Vec<(Tag, Pending)> = self.outstanding.drain().collect();
        tags.sort_by_key(|(tag, _)| *tag);
        for (tag, p) in tags {
            self.quarantined.insert(tag, p.slot);
            self.fast_fail(tag);
        }
        let queued: Vec<Tag> = self.queued.drain(..).map(|(tag, _)| tag).collect();
        for tag in queued {
            self.fast_fail(tag);
        }
        self.report_fast_fails();
    }

    /// Take the session's live `fast_io_fail_tmo` (a policy set on the
    /// node since); kept as it is once the session is gone.
    fn sync_policy(&mut self, node: &Node) {
        if let Some(opts) = node.options(self.session) {
            self.fast_io_fail_tmo = opts.policy.fast_io_fail_tmo;
        }
    }

    /// Complete `tag` with [`BlockError::FastFail`], counted for the
    /// outage's report.
    fn fast_fail(&mut self, tag: Tag) {
        self.outage_fast_fails += 1;
        self.completions.push_back((tag, Err(BlockError::FastFail)));
    }

    /// [`InitiatorEvent::FastFailed`], once per outage, if any failed.
    fn report_fast_fails(&mut self) {
        if self.outage_reported || self.outage_fast_fails == 0 {
            return;
        }
        self.outage_reported = true;
        tracing::debug!(
            session = self.session.0,
            commands = self.outage_fast_fails,
            slots_held = self.quarantined.len(),
            "commands fast-failed in the outage"
        );
        self.events.push_back(InitiatorEvent::FastFailed {
            commands: self.outage_fast_fails,
        });
    }

    fn on_event(&mut self, node: &Node, event: &SessionEvent) {
        match event {
            SessionEvent::DeviceLost { .. } | SessionEvent::AwaitingDecision { .. } => {
                self.down_since.get_or_insert_with(|| node.now());
            }
            SessionEvent::Resumed { .. } => {
                // Commands relink failed before the engine's own deadline
                // (the session resumed in between) are reported too.
                self.report_fast_fails();
                self.down_since = None;
                self.fast_failed = false;
                self.outage_fast_fails = 0;
                self.outage_reported = false;
            }
            _ => {}
        }
        let end = match event {
            SessionEvent::GaveUp => SessionEnd::GaveUp,
            SessionEvent::PeerLost { .. } => SessionEnd::PeerLost,
            SessionEvent::Disconnected => SessionEnd::Closed,
            SessionEvent::Transition(t) if t.to == State::Failed => SessionEnd::GaveUp,
            SessionEvent::Transition(t) if t.to == State::Closed => SessionEnd::Closed,
            _ => return,
        };
        if self.ended.is_some() {
            return;
        }
        self.ended = Some(end);
        self.sends.clear();
        self.quarantined.clear();
        let failed = BlockError::SessionEnded(end);
        let mut tags: Vec<Tag> = self.outstanding.drain().map(|(tag, _)| tag).collect();
        tags.sort();
        tags.extend(self.queued.drain(..).map(|(tag, _)| tag));
        self.completions
            .extend(tags.into_iter().map(|tag| (tag, Err(failed))));
        self.events.push_back(InitiatorEvent::Ended(end));
    }

    /// The next completed command: its tag and its result (a READ's data,
    /// IDENTIFY's volume). `Some` while one waits — each tag completes
    /// exactly once; `None` when none waits now (more may come with later
    /// [`InitiatorEngine::handle`] calls; after the session ended, none
    /// will).
    #[must_use]
    pub fn poll_completion(&mut self) -> Option<BlockCompletion> {
        self.completions.pop_front()
    }

    /// The next event; `None` when none waits now.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<InitiatorEvent> {
        self.events.pop_front()
    }
}

/// The opcode, offset, length and FUA flag of the command that carries
/// `op` (a WRITE's length is its bytes').
fn command_fields(op: &BlockOp) -> (Opcode, u64, u32, bool) {
    match op {
        BlockOp::Identify => (Opcode::Identify, 0, 0, false),
        BlockOp::Read { offset, len } => (Opcode::Read, *offset, *len, false),
        BlockOp::Write { offset, data, fua } => (Opcode::Write, *offset, data.len() as u32, *fua),
        BlockOp::Flush => (Opcode::Flush, 0, 0, false),
        BlockOp::WriteZeroes { offset, len, fua } => (Opcode::WriteZeroes, *offset, *len, *fua),
        BlockOp::Trim { offset, len } => (Opcode::Trim, *offset, *len, false),
        BlockOp::BlockStatus { offset, len } => (Opcode::BlockStatus, *offset, *len, false),
    }
}
