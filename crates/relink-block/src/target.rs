//! The target engine: serves one [`Volume`] to every session a listener
//! of a [`Node`] accepts, driven by the caller's loop
//! ([`TargetEngine::handle`] for each [`Node::poll_output`] item).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;

use relink::{
    Completion, ListenError, ListenerHandle, LocalRange, Node, OpError, OpId, Outcome, Output,
    SessionEvent, SessionHandle, State,
};

use crate::config::{ConfigError, TargetConfig, STAGING_REGION};
use crate::error::{SessionEnd, TargetError};
use crate::volume::Volume;
use crate::wire::{peek_tag, Command, Extents, Opcode, Reply, Tag, VolumeInfo, WireError};

/// The most extents one BLOCK_STATUS answers (the initiator asks again
/// from where they end).
const MAX_EXTENTS: usize = 1024;

/// Why [`TargetEngine::listen`] made no engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TargetSetupError {
    /// The configuration is refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The node refused the listener.
    #[error(transparent)]
    Listen(#[from] ListenError),
}

/// What happened to the target's sessions ([`TargetEngine::poll_event`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TargetEvent {
    /// The listener accepted a session: it is served from now on.
    Connected(SessionHandle),
    /// A session ended: its commands in progress are dropped (their
    /// initiator fails them itself).
    Ended {
        /// The session.
        session: SessionHandle,
        /// How it ended.
        end: SessionEnd,
    },
    /// A message of the initiator is not a command. If its first 12 bytes
    /// came, it is answered with `BadCommand` under the tag they hold;
    /// the session goes on.
    BadCommand {
        /// The session it came on.
        session: SessionHandle,
        /// Why it does not decode.
        error: WireError,
    },
}

/// Counts of the engine's work, for observability and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TargetStats {
    /// Commands answered (every reply sent, errors included).
    pub replies: u64,
    /// RDMA transfers (WRITE for a READ command, READ for a WRITE) in
    /// progress now, all sessions.
    pub in_flight: usize,
    /// The most transfers one session had in progress at once: at most
    /// the queue depth (one staging slot each).
    pub peak_in_flight: usize,
    /// The most commands one session had waiting for a staging slot.
    pub peak_waiting: usize,
    /// Messages that were not commands.
    pub bad_commands: u64,
    /// Replies sent again after a resume (they failed without leaving:
    /// `fast_io_fail_tmo`).
    pub replies_resent: u64,
}

/// A command moving data, between its staging slot's allocation and its
/// reply.
#[derive(Debug, Clone, Copy)]
struct Transfer {
    slot: u32,
    cmd: Command,
}

/// One served session.
#[derive(Debug)]
struct Conn {
    /// Staging slots not in use.
    free: Vec<u32>,
    /// READ and WRITE commands waiting for a slot, in arrival order.
    waiting: VecDeque<Command>,
    /// The one-sided operation of each command holding a slot.
    transfers: HashMap<OpId, Transfer>,
    /// Each reply's message until it completes.
    replies: HashMap<OpId, Vec<u8>>,
    /// Replies that failed without leaving (`fast_io_fail_tmo` in an
    /// outage): sent again once the session resumes.
    unsent: Vec<Vec<u8>>,
}

/// Serves one volume over relink sessions: commands arrive as messages,
/// data moves by the target's RDMA READ (from the initiator's buffer,
/// for WRITE) and RDMA WRITE (to it, for READ) through a bounded staging
/// region, and each command gets one reply message. The file is read
/// into and written from the staging slots themselves (`pread`/`pwrite`
/// on the registered memory, [`Volume::read_into`] and
/// [`Volume::write_from`]): a block's bytes cross the target with no copy
/// of its own.
///
/// # Driving it
///
/// Make it with [`TargetEngine::listen`] (which makes the listener).
/// Then, in the node's loop, after every [`Node::poll`] (or
/// [`Node::wait`]): take [`Node::poll_output`] until `None` and hand each
/// item to [`TargetEngine::handle`], which returns the items that are not
/// the engine's (other listeners' sessions) for the caller to handle.
/// The engine submits through the node as it goes; its replies and
/// transfers go out at the node's next poll. [`TargetEngine::poll_event`]
/// tells what happened to its sessions.
///
/// # Ordering and durability
///
/// - A READ's reply is sent once the RDMA WRITE of its data *completed
///   successfully* (was acknowledged): the reply never overtakes the
///   data, also across a recovery, where relink replays the WRITE but
///   not in a fixed order with messages.
/// - A WRITE's reply is sent once its data is in the file (`pwrite`) and,
///   with FUA, synced (`fdatasync`).
/// - FLUSH syncs the file when it arrives: every write acknowledged
///   before the FLUSH was sent is in the file then, so it is durable
///   when FLUSH's reply comes. Commands outstanding at once are not
///   ordered with each other (as in NVMe): order by waiting for replies.
///
/// # Recoveries
///
/// The engine resends nothing relink carries. relink replays the
/// target's unacknowledged RDMA READs and WRITEs on the new connection,
/// translating the initiator's buffer tokens through its new
/// advertisements; a replay is harmless because both are idempotent
/// here: a READ command's WRITE puts the same staged bytes into a buffer
/// the initiator leaves alone until the reply, and a WRITE command's READ
/// fetches bytes the initiator leaves alone until the reply. So relink
/// never reports them `Indeterminate` (that is for atomics and
/// messages): each completes `Success` or `Failed` (the session ended,
/// or its `fast_io_fail_tmo` passed; the command is then answered
/// `Transfer`). Replies are messages: each is delivered exactly once.
///
/// With a `fast_io_fail_tmo` in the policy, relink fails the replies
/// that had not left when it passed (`Failed(FastFail)`: never
/// delivered). The engine keeps those and sends them again when the
/// session resumes, so the initiator's slots of the commands it
/// fast-failed are released.
#[derive(Debug)]
pub struct TargetEngine {
    volume: Volume,
    config: TargetConfig,
    listener: ListenerHandle,
    conns: BTreeMap<SessionHandle, Conn>,
    /// Sessions that ended but whose remaining outputs may still come.
    ended: BTreeSet<SessionHandle>,
    events: VecDeque<TargetEvent>,
    stats: TargetStats,
    /// This host's boot id, told in IDENTIFY ([`VolumeInfo::host_boot`]).
    host_boot: u128,
}

/// This host's boot id (`/proc/sys/kernel/random/boot_id`, a UUID), 0 if
/// it cannot be read.
fn host_boot_id() -> u128 {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .and_then(|s| {
            let hex: String = s.trim().chars().filter(|c| *c != '-').collect();
            u128::from_str_radix(&hex, 16).ok()
        })
        .unwrap_or(0)
}

impl TargetEngine {
    /// Listen on `addr` of `node` and serve `volume` to every session
    /// accepted there, with `config`.
    ///
    /// # Errors
    /// [`TargetSetupError::Config`] for options out of range,
    /// [`TargetSetupError::Listen`] if the node refuses the listener.
    pub fn listen(
        node: &mut Node,
        addr: SocketAddr,
        volume: Volume,
        config: TargetConfig,
    ) -> Result<TargetEngine, TargetSetupError> {
        let opts = config.session_options()?;
        let listener = node.listen(addr, opts)?;
        Ok(TargetEngine {
            host_boot: host_boot_id(),
            volume,
            config,
            listener,
            conns: BTreeMap::new(),
            ended: BTreeSet::new(),
            events: VecDeque::new(),
            stats: TargetStats::default(),
        })
    }

    /// The listener the engine made.
    pub fn listener(&self) -> ListenerHandle {
        self.listener
    }

    /// The volume served.
    pub fn volume(&self) -> &Volume {
        &self.volume
    }

    /// The sessions served now.
    pub fn sessions(&self) -> Vec<SessionHandle> {
        self.conns.keys().copied().collect()
    }

    /// Counts of the engine's work.
    pub fn stats(&self) -> TargetStats {
        self.stats
    }

    /// Handle one output of the node: `None` when it was the engine's
    /// (a session of its listener), `Some(output)` back when it is not,
    /// for the caller to handle.
    pub fn handle(&mut self, node: &mut Node, output: Output) -> Option<Output> {
        match output {
            Output::Accepted(a) if a.listener == self.listener => {
                self.ended.retain(|s| node.state(*s).is_some());
                let conn = Conn {
                    free: (0..u32::from(self.config.queue_depth)).rev().collect(),
                    waiting: VecDeque::new(),
                    transfers: HashMap::new(),
                    replies: HashMap::new(),
                    unsent: Vec::new(),
                };
                self.conns.insert(a.session, conn);
                self.events.push_back(TargetEvent::Connected(a.session));
                None
            }
            Output::Delivery {
                session, payload, ..
            } if self.conns.contains_key(&session) => {
                self.on_command(node, session, &payload);
                None
            }
            Output::Completion {
                session,
                completion,
            } if self.conns.contains_key(&session) => {
                self.on_completion(node, session, completion);
                None
            }
            Output::Event { session, event } if self.conns.contains_key(&session) => {
                self.on_event(node, session, &event);
                None
            }
            other if self.ended.contains(&other.session()) => None,
            other => Some(other),
        }
    }

    /// The next event of the engine's sessions; `None` when none waits
    /// (more may come with later [`TargetEngine::handle`] calls).
    #[must_use]
    pub fn poll_event(&mut self) -> Option<TargetEvent> {
        self.events.pop_front()
    }

    fn reply(&mut self, node: &mut Node, s: SessionHandle, tag: Tag, status: ReplyStatus) {
        self.stats.replies += 1;
        self.send_reply(node, s, Reply { tag, status }.encode());
    }

    fn send_reply(&mut self, node: &mut Node, s: SessionHandle, bytes: Vec<u8>) {
        match node.send(s, &bytes) {
            Ok(op) => {
                if let Some(conn) = self.conns.get_mut(&s) {
                    conn.replies.insert(op, bytes);
                }
            }
            // The session ended: its end event follows and the initiator
            // fails the command itself.
            Err(e) => tracing::debug!(session = s.0, %e, "reply not sent"),
        }
    }

    fn on_command(&mut self, node: &mut Node, s: SessionHandle, payload: &[u8]) {
        let cmd = match Command::decode(payload) {
            Ok(cmd) => cmd,
            Err(error) => {
                tracing::warn!(session = s.0, %error, "a message that is not a command");
                self.stats.bad_commands += 1;
                self.events
                    .push_back(TargetEvent::BadCommand { session: s, error });
                if let Some(tag) = peek_tag(payload) {
                    self.reply(node, s, tag, Err(TargetError::BadCommand));
                }
                return;
            }
        };
        if let Err(e) = self.volume.check(&cmd, self.config.max_io) {
            self.reply(node, s, cmd.tag, Err(e));
            return;
        }
        let status = match cmd.opcode {
            Opcode::Read | Opcode::Write | Opcode::BlockStatus => {
                let conn = self.conns.get_mut(&s).expect("a served session");
                conn.waiting.push_back(cmd);
                self.start(node, s);
                if let Some(conn) = self.conns.get(&s) {
                    self.stats.peak_waiting = self.stats.peak_waiting.max(conn.waiting.len());
                }
                return;
            }
            Opcode::Identify => Ok(Some(VolumeInfo {
                size: self.volume.size(),
                block_size: self.volume.block_size(),
                max_io: self.config.max_io,
                queue_depth: self.config.queue_depth,
                read_only: self.volume.read_only(),
                host_boot: self.host_boot,
            })),
            Opcode::Flush => self.volume.flush().map(|()| None),
            Opcode::WriteZeroes => self
                .volume
                .write_zeroes(cmd.offset, u64::from(cmd.len), cmd.fua)
                .map(|()| None),
            Opcode::Trim => self
                .volume
                .write_zeroes(cmd.offset, u64::from(cmd.len), false)
                .map(|()| None),
        };
        self.reply(node, s, cmd.tag, status);
    }

    /// Start waiting commands while staging slots are free.
    fn start(&mut self, node: &mut Node, s: SessionHandle) {
        loop {
            let Some(conn) = self.conns.get_mut(&s) else {
                return;
            };
            if conn.free.is_empty() {
                return;
            }
            let Some(cmd) = conn.waiting.pop_front() else {
                return;
            };
            let slot = conn.free.pop().expect("a free slot");
            let mut local = LocalRange {
                region: STAGING_REGION,
                offset: u64::from(slot) * u64::from(self.config.max_io),
                len: cmd.len,
            };
            let submitted = if cmd.opcode == Opcode::BlockStatus {
                // The extents go as a READ's data would: staged, then
                // written into the initiator's buffer.
                let max = Extents::capacity(self.config.max_io).min(MAX_EXTENTS);
                let staged = self
                    .volume
                    .allocation(cmd.offset, u64::from(cmd.len), max)
                    .and_then(|extents| {
                        let bytes = Extents::encode(&extents);
                        local.len = bytes.len() as u32;
                        node.region(s, STAGING_REGION)
                            .map_err(|_| TargetError::Io)?
                            .write(local.offset as usize, &bytes)
                            .map_err(|_| TargetError::Io)
                    });
                if let Err(e) = staged {
                    self.free(s, slot);
                    self.reply(node, s, cmd.tag, Err(e));
                    continue;
                }
                node.write(s, local, cmd.buffer)
            } else if cmd.opcode == Opcode::Read {
                // Read from the file straight into the staging slot.
                let staged = node
                    .region(s, STAGING_REGION)
                    .map_err(|_| TargetError::Io)
                    .and_then(|mem| {
                        self.volume
                            .read_into(cmd.offset, cmd.len, &mem, local.offset as usize)
                    });
                if let Err(e) = staged {
                    self.free(s, slot);
                    self.reply(node, s, cmd.tag, Err(e));
                    continue;
                }
                node.write(s, local, cmd.buffer)
            } else {
                node.read(s, local, cmd.buffer)
            };
            match submitted {
                Ok(op) => {
                    let conn = self.conns.get_mut(&s).expect("a served session");
                    conn.transfers.insert(op, Transfer { slot, cmd });
                    self.stats.in_flight += 1;
                    self.stats.peak_in_flight = self.stats.peak_in_flight.max(conn.transfers.len());
                }
                Err(e) => {
                    // The session ended; its end event follows.
                    tracing::debug!(session = s.0, %e, "transfer not submitted");
                    self.free(s, slot);
                    return;
                }
            }
        }
    }

    fn free(&mut self, s: SessionHandle, slot: u32) {
        if let Some(conn) = self.conns.get_mut(&s) {
            conn.free.push(slot);
        }
    }

    fn on_completion(&mut self, node: &mut Node, s: SessionHandle, c: Completion) {
        let conn = self.conns.get_mut(&s).expect("a served session");
        let Some(t) = conn.transfers.remove(&c.op) else {
            // A reply's completion. One that failed never left (a fast
            // failure in an outage, or the session's end): it goes again
            // once the session resumes. An `Indeterminate` one is
            // delivered at most once by relink's replay.
            if let (Some(bytes), Outcome::Failed(_)) = (conn.replies.remove(&c.op), c.outcome) {
                conn.unsent.push(bytes);
            }
            return;
        };
        self.stats.in_flight -= 1;
        let status = match c.outcome {
            Outcome::Success { .. } if t.cmd.opcode != Opcode::Write => Ok(None),
            Outcome::Success { .. } => self.land_write(node, s, &t).map(|()| None),
            Outcome::Failed(OpError::Remote(status)) => {
                tracing::warn!(
                    session = s.0,
                    tag = t.cmd.tag.0,
                    ?status,
                    "transfer refused"
                );
                Err(TargetError::Transfer)
            }
            other => {
                // The session ended (or fast-failed): the reply goes if
                // the session still carries messages.
                tracing::debug!(session = s.0, tag = t.cmd.tag.0, ?other, "transfer failed");
                Err(TargetError::Transfer)
            }
        };
        self.free(s, t.slot);
        self.reply(node, s, t.cmd.tag, status);
        self.start(node, s);
    }

    /// Write a WRITE command's staged bytes to the file, straight from
    /// the staging slot.
    fn land_write(&self, node: &Node, s: SessionHandle, t: &Transfer) -> Result<(), TargetError> {
        let at = u64::from(t.slot) * u64::from(self.config.max_io);
        let mem = node
            .region(s, STAGING_REGION)
            .map_err(|_| TargetError::Io)?;
        self.volume
            .write_from(t.cmd.offset, t.cmd.len, &mem, at as usize, t.cmd.fua)
    }

    fn on_event(&mut self, node: &mut Node, s: SessionHandle, event: &SessionEvent) {
        let end = match event {
            SessionEvent::Resumed { .. } => {
                let unsent = self
                    .conns
                    .get_mut(&s)
                    .map(|c| std::mem::take(&mut c.unsent))
                    .unwrap_or_default();
                for bytes in unsent {
                    self.stats.replies_resent += 1;
                    self.send_reply(node, s, bytes);
                }
                return;
            }
            SessionEvent::GaveUp => SessionEnd::GaveUp,
            SessionEvent::PeerLost { .. } => SessionEnd::PeerLost,
            SessionEvent::Disconnected => SessionEnd::Closed,
            SessionEvent::Transition(t) if t.to == State::Failed => SessionEnd::GaveUp,
            SessionEvent::Transition(t) if t.to == State::Closed => SessionEnd::Closed,
            _ => return,
        };
        if let Some(conn) = self.conns.remove(&s) {
            self.stats.in_flight -= conn.transfers.len();
            self.ended.insert(s);
            self.events
                .push_back(TargetEvent::Ended { session: s, end });
        }
    }
}

/// A reply's status, as [`Reply::status`].
type ReplyStatus = Result<Option<VolumeInfo>, TargetError>;
