//! Operations and how they end: what an application submits ([`OpKind`],
//! naming local memory by [`LocalRange`]) and the one [`Completion`] each
//! operation gets, with its [`Outcome`] (or [`OpError`]).
//!
//! Every [`OpId`] a session hands out completes **exactly once, ever**;
//! [`Outcome`] gives what each outcome means per kind of operation, and
//! [`crate::journal`] how the journal arrives at each.

use std::ops::Deref;

use relink_fabric::WcStatus;
use smallvec::SmallVec;

use crate::ids::{BufferToken, OpId, RegionId};

/// A range of local registered memory, named by region so that it stays
/// valid across device epochs (the driver translates it to an lkey at post
/// time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LocalRange {
    /// The local region.
    pub region: RegionId,
    /// Offset into the region.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

/// The local ranges an operation gathers its bytes from, in order: from 1
/// to [`LocalSgl::MAX`] of them (a scatter/gather list, as an
/// `ibv_send_wr`'s `sg_list`). One or two ranges live inside the value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LocalSgl(SmallVec<[LocalRange; 2]>);

impl LocalSgl {
    /// The most ranges a list may hold: a device takes one more SGE per
    /// request (a message's header).
    pub const MAX: usize = 4;

    /// The list of the one range `range`.
    pub fn one(range: LocalRange) -> LocalSgl {
        let mut v = SmallVec::new();
        v.push(range);
        LocalSgl(v)
    }

    /// The list of `ranges`, in order; `None` if there are none or more
    /// than [`LocalSgl::MAX`].
    pub fn new(ranges: impl IntoIterator<Item = LocalRange>) -> Option<LocalSgl> {
        let v: SmallVec<[LocalRange; 2]> = ranges.into_iter().collect();
        (1..=LocalSgl::MAX)
            .contains(&v.len())
            .then_some(LocalSgl(v))
    }

    /// The bytes of all its ranges.
    pub fn bytes(&self) -> u64 {
        self.0.iter().map(|r| u64::from(r.len)).sum()
    }
}

impl From<LocalRange> for LocalSgl {
    fn from(range: LocalRange) -> LocalSgl {
        LocalSgl::one(range)
    }
}

impl Deref for LocalSgl {
    type Target = [LocalRange];

    fn deref(&self) -> &[LocalRange] {
        &self.0
    }
}

/// A message's payload as the journal keeps it ([`OpKind::Message`],
/// [`OpKind::MessageFrom`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageBody<'a> {
    /// Bytes the journal owns.
    Bytes(&'a [u8]),
    /// Local registered memory, read when the message is posted (and again
    /// for each replay).
    Gather(&'a LocalSgl),
}

/// What the peer's session delivers to its application, once and in
/// order: a message's bytes, or the notice of a WRITE with immediate data
/// ([`OpKind::WriteImm`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival<'a> {
    /// A message (of bytes, or gathered from registered memory: the same
    /// to the receiver).
    Message(&'a [u8]),
    /// A WRITE with immediate data landed.
    Written(crate::wire::Written),
}

/// What an operation does. More kinds may come: a match needs a wildcard
/// arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpKind {
    /// A sequenced two-sided message (SEND); delivered exactly once, in order.
    Message {
        /// The bytes to deliver; the journal owns them until confirmation.
        payload: Vec<u8>,
    },
    /// A sequenced message, like [`OpKind::Message`], whose payload is the
    /// bytes of `local`, in order: local registered memory (a session's
    /// region or a registration of the node), sent without a copy. The
    /// journal keeps the ranges, not the bytes: the application leaves them
    /// unchanged until the operation completes (as with `ibv_post_send`);
    /// a replay reads them again.
    MessageFrom {
        /// The payload's ranges, in order.
        local: LocalSgl,
    },
    /// RDMA WRITE of `local` (its ranges gathered in order) to `remote`;
    /// idempotent, so replayed.
    Write {
        /// Source bytes (leave them unchanged until the completion).
        local: LocalSgl,
        /// Destination at the peer.
        remote: BufferToken,
    },
    /// RDMA WRITE of `local` to `remote` with immediate data: the peer's
    /// application is told, once and in order with the messages, that the
    /// bytes landed, with `imm` and where ([`Arrival::Written`]). The WRITE
    /// is followed by a sequenced notice on the same connection, so the
    /// notice arrives after the bytes; both are replayed after a loss (the
    /// WRITE is idempotent, the notice delivered once). It completes as a
    /// message does: `Success` once the peer's application has the notice.
    WriteImm {
        /// Source bytes, gathered in order (leave them unchanged until
        /// the completion).
        local: LocalSgl,
        /// Destination at the peer.
        remote: BufferToken,
        /// The immediate data.
        imm: u32,
    },
    /// RDMA READ of `remote` into `local` (scattered over its ranges in
    /// order); idempotent, so replayed.
    Read {
        /// Where the data lands.
        local: LocalSgl,
        /// Source at the peer.
        remote: BufferToken,
    },
    /// Atomic fetch-and-add; not idempotent.
    FetchAdd {
        /// Where the original value lands (8 bytes).
        local: LocalRange,
        /// The 8-byte remote word.
        remote: BufferToken,
        /// Added to the remote word (wrapping, as the hardware does).
        add: u64,
    },
    /// A barrier: completes `Success` once every operation submitted
    /// before it completed (whatever their outcomes), and operations
    /// submitted after it are posted only then (a fence). It moves no
    /// bytes and is never posted; it waits while the session recovers, and
    /// ends as a never-posted operation does when relink stops
    /// (`Failed`).
    Flush,
    /// Atomic compare-and-swap; not idempotent.
    CmpSwap {
        /// Where the original value lands (8 bytes).
        local: LocalRange,
        /// The 8-byte remote word.
        remote: BufferToken,
        /// The value expected.
        compare: u64,
        /// The value stored if the comparison succeeds.
        swap: u64,
    },
}

impl OpKind {
    /// Whether this is a sequenced message.
    pub fn is_message(&self) -> bool {
        matches!(
            self,
            OpKind::Message { .. } | OpKind::MessageFrom { .. } | OpKind::WriteImm { .. }
        )
    }

    /// Whether this is an atomic (fetch-add or compare-and-swap).
    pub fn is_atomic(&self) -> bool {
        matches!(self, OpKind::FetchAdd { .. } | OpKind::CmpSwap { .. })
    }

    /// Whether executing it twice has the same effect as once (write, read).
    pub fn is_idempotent(&self) -> bool {
        matches!(self, OpKind::Write { .. } | OpKind::Read { .. })
    }

    /// Short lower-case name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Message { .. } | OpKind::MessageFrom { .. } => "message",
            OpKind::Write { .. } => "write",
            OpKind::WriteImm { .. } => "write-imm",
            OpKind::Read { .. } => "read",
            OpKind::FetchAdd { .. } => "fetch-add",
            OpKind::CmpSwap { .. } => "cmp-swap",
            OpKind::Flush => "flush",
        }
    }

    /// What kind of operation it is (what its completion reports).
    pub fn class(&self) -> OpClass {
        match self {
            OpKind::Message { .. } | OpKind::MessageFrom { .. } => OpClass::Message,
            OpKind::Write { .. } => OpClass::Write,
            OpKind::WriteImm { .. } => OpClass::WriteImm,
            OpKind::Read { .. } => OpClass::Read,
            OpKind::FetchAdd { .. } => OpClass::FetchAdd,
            OpKind::CmpSwap { .. } => OpClass::CmpSwap,
            OpKind::Flush => OpClass::Flush,
        }
    }

    /// The bytes it moves: a message's payload, a WRITE's or READ's local
    /// ranges, an atomic's 8, a flush's 0.
    pub fn bytes(&self) -> u64 {
        match self {
            OpKind::Message { payload } => payload.len() as u64,
            OpKind::MessageFrom { local } => local.bytes(),
            OpKind::Write { local, .. }
            | OpKind::WriteImm { local, .. }
            | OpKind::Read { local, .. } => local.bytes(),
            OpKind::FetchAdd { local, .. } | OpKind::CmpSwap { local, .. } => u64::from(local.len),
            OpKind::Flush => 0,
        }
    }

    /// The local ranges it reads or writes: none for a message of owned
    /// bytes.
    pub fn local_ranges(&self) -> &[LocalRange] {
        match self {
            OpKind::Message { .. } | OpKind::Flush => &[],
            OpKind::MessageFrom { local }
            | OpKind::Write { local, .. }
            | OpKind::WriteImm { local, .. }
            | OpKind::Read { local, .. } => local,
            OpKind::FetchAdd { local, .. } | OpKind::CmpSwap { local, .. } => {
                std::slice::from_ref(local)
            }
        }
    }

    /// A message's payload as the journal keeps it; `None` for the other
    /// kinds.
    pub fn message_body(&self) -> Option<MessageBody<'_>> {
        match self {
            OpKind::Message { payload } => Some(MessageBody::Bytes(payload)),
            OpKind::MessageFrom { local } => Some(MessageBody::Gather(local)),
            _ => None,
        }
    }

    /// Bytes of payload the journal owns (0 but for a message of owned
    /// bytes).
    pub(crate) fn payload_len(&self) -> usize {
        match self {
            OpKind::Message { payload } => payload.len(),
            _ => 0,
        }
    }
}

/// Why an operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpError {
    /// The give-up deadline (`ctrl_loss_tmo`) passed without a resume.
    #[error("gave up: the connection was not recovered before the deadline")]
    GaveUp,
    /// `fast_io_fail_tmo` passed while reconnecting; reconnection continues.
    #[error("failed fast: the connection is still recovering")]
    FastFail,
    /// The peer came back as a new incarnation (it lost its state): nothing
    /// is replayed into a stranger.
    #[error("the peer lost its state")]
    PeerLost,
    /// The session was disconnected by the application or an administrator.
    #[error("disconnected")]
    Disconnected,
    /// A message longer than the peer's receive slots hold (the peer's
    /// `max_message` is smaller than this side's), found when it was to be
    /// posted: it never left. A submit after the peer said its size is
    /// refused at once instead (`SessionError::TooLarge`).
    #[error("the message is longer than the peer's receive slots hold")]
    TooLargeForPeer,
    /// The operation itself was refused (e.g. `REM_ACCESS_ERR`, also for a
    /// token the peer never advertised): not retried.
    #[error("refused: {}", .0.name())]
    Remote(WcStatus),
}

/// How an operation ended; every operation gets exactly one outcome, ever.
/// What each means per kind:
///
/// | outcome | message | write / read | fetch-add / cmp-swap |
/// |---|---|---|---|
/// | `Success` | delivered to the peer *application*, exactly once, in order (the peer confirmed its sequence number; an RC ack alone is not enough) | executed and RC-acknowledged (a read's data landed); a write may instead be proven executed by a later confirmed message | executed once, RC-acknowledged, result landed |
/// | `Indeterminate{executed}` | posted, never confirmed, and relink stopped | never | posted, result lost: `Some(true)` proven executed, `None` unknown |
/// | `Failed(err)` | never left the sender | not confirmed: if it had been posted, the target range is undefined (as after a verbs error) | never posted: no effect |
///
/// `Success { replayed }` says the operation was posted on more than one
/// transport. `Failed(OpError::Remote(status))` means the operation itself
/// was refused (bad key, rights, bounds, length): it is never replayed. A
/// token the peer's advertisement does not cover (unknown region, out of
/// bounds, missing right) is refused so by the session itself, before it is
/// posted: `Failed(Remote(REM_ACCESS_ERR))`, what the peer's device would
/// answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Done: delivered (message) or executed and acknowledged (the rest).
    Success {
        /// The operation was posted on more than one transport.
        replayed: bool,
    },
    /// Not done: relink stopped, or the operation was refused.
    Failed(OpError),
    /// A non-idempotent operation (atomic or message) whose effect cannot be
    /// known.
    Indeterminate {
        /// `Some(true)`: it was executed (its result was lost); `None`:
        /// unknown.
        executed: Option<bool>,
    },
}

impl Outcome {
    /// Whether this is a success.
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Success { .. })
    }
}

/// What kind of operation a [`Completion`] ends ([`OpKind::class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum OpClass {
    /// A sequenced message (SEND).
    Message,
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate data ([`OpKind::WriteImm`]).
    WriteImm,
    /// RDMA READ.
    Read,
    /// Atomic fetch-and-add.
    FetchAdd,
    /// Atomic compare-and-swap.
    CmpSwap,
    /// A barrier ([`OpKind::Flush`]).
    Flush,
}

impl OpClass {
    /// Short lower-case name, for logs ([`OpKind::name`]).
    pub fn name(self) -> &'static str {
        match self {
            OpClass::Message => "message",
            OpClass::Write => "write",
            OpClass::WriteImm => "write-imm",
            OpClass::Read => "read",
            OpClass::FetchAdd => "fetch-add",
            OpClass::CmpSwap => "cmp-swap",
            OpClass::Flush => "flush",
        }
    }
}

/// The one completion of an operation. Read-only outside this crate.
///
/// # Order, per session
///
/// - Messages complete in submission order, whatever their outcome (the
///   peer's confirmations are cumulative).
/// - Within one class of one-sided operations (WRITEs, READs, atomics),
///   those that end `Success` complete in submission order (RC completes
///   a send queue in order, a replay keeps the order, and a proof of
///   execution covers every operation before the confirmed message).
/// - A flush ([`OpKind::Flush`]) completes after every operation submitted
///   before it and before every operation submitted after it.
/// - Nothing more is promised. Across classes: after a loss, a WRITE proven
///   executed by the peer's confirmation completes at the resume, before
///   the READs submitted ahead of it are replayed; a message completes
///   when the peer confirms it, usually after the one-sided operations
///   submitted behind it. An operation that does not end `Success` may
///   complete before earlier ones of its class: an atomic a loss made
///   `Indeterminate` completes at the resume, one whose token the peer no
///   longer advertises fails when it would have been posted.
///
/// The simulation's oracle checks these under every fault kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Completion {
    /// The operation, as the call that submitted it returned it.
    pub op: OpId,
    /// How it ended.
    pub outcome: Outcome,
    /// The application's context of the operation, as submitted (0 if none
    /// was given).
    pub context: u64,
    /// What kind of operation it was.
    pub class: OpClass,
    /// The bytes it moved or was to move ([`OpKind::bytes`]).
    pub len: u64,
}
