//! Completions: how an operation ended (`relink_outcome`,
//! `relink_op_error`) and its one completion (`relink_completion`), made
//! from relink's.

use relink_rs::{Completion, OpClass, OpError, Outcome};

use crate::ops::{relink_op, relink_op_kind};

/// How an operation ended: each operation gets exactly one completion,
/// across every recovery, a give-up, a lost peer and a close. What each
/// outcome means, by kind of operation:
///
/// | outcome | message (`relink_send`; `relink_post`, from bytes or registered memory) | `relink_write`, `relink_read` | `relink_fetch_add`, `relink_cmp_swap` |
/// |---|---|---|---|
/// | SUCCESS | delivered to the peer's application (its node confirmed it; not just the RC ack), exactly once, in order | executed and acknowledged (a READ's data landed in the region), or a WRITE proven executed by a later confirmed message | executed once and acknowledged; the old value landed in the region |
/// | FAILED | it never left this side: not delivered | not confirmed before the session ended or failed fast: if it had been posted, the target range (the peer's for a WRITE, the region's for a READ) is undefined | never executed: not posted before the session ended, or refused by the peer (`RELINK_OP_REMOTE`) |
/// | INDETERMINATE | posted, not confirmed, and the session ended (gave up, lost its peer, closed) or failed fast (`RELINK_OP_FAST_FAIL`'s timeout): the peer's application may or may not have it (`executed` 0); after a session's end it never gets it later, after a fast failure a message of bytes may still arrive once at the resume (relink kept its bytes), while one from registered memory (`RELINK_WR_FROM_REGION`, `RELINK_WR_SGL`) or a WRITE_IMM's notice arrives only if the peer had it already (its memory is never read after this completion) | never | posted, and its acknowledgement lost with the transport or the session's end (not replayed unless the policy replays atomics): `executed` 1 if it is proven executed (its old value is lost), 0 if unknown |
///
/// A WRITE with immediate data (`relink_write_imm`) ends as a message
/// does: SUCCESS once the peer's node delivered its notice (the bytes
/// landed before it), exactly once, in order with the messages; FAILED if
/// it never left, or the peer refused its WRITE (`RELINK_OP_REMOTE`: the
/// peer is told nothing); INDETERMINATE as a message posted and not
/// confirmed when the session ended (the peer may have the bytes and the
/// notice, or not).
///
/// `replayed` (SUCCESS) says it was posted on more than one transport;
/// `error` (FAILED) says why. Whatever the outcome, a message sent from
/// registered memory (`RELINK_WR_FROM_REGION`, `RELINK_WR_SGL`) gives its
/// ranges back with its completion: relink reads them no more, and they
/// may change from then on. What to do with INDETERMINATE: relink cannot
/// know whether it took effect and does not retry it; the application
/// checks (reads the peer's word back, or asks the peer in a message) and
/// retries only if the effect is missing.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_outcome {
    /// Done: the message was delivered to the peer's application, the
    /// one-sided operation executed and was acknowledged.
    RELINK_OUTCOME_SUCCESS = 0,
    /// Not done; `error` says why.
    RELINK_OUTCOME_FAILED = 1,
    /// Its effect cannot be known: an atomic in flight when the device was
    /// lost (not replayed: it is not idempotent), or a message posted and
    /// not confirmed when the session ended (gave up, lost its peer,
    /// closed) or failed fast (then a message of bytes may still arrive
    /// once at the resume; one from registered memory never after this
    /// completion).
    /// `executed` says whether it is proven to have run. WRITEs and READs
    /// never end so (they are replayed).
    RELINK_OUTCOME_INDETERMINATE = 2,
}

/// Why an operation failed.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_op_error {
    /// It did not fail.
    RELINK_OP_NONE = 0,
    /// The give-up deadline passed without a resume.
    RELINK_OP_GAVE_UP = 1,
    /// The fast-fail timeout passed while recovering (recovery goes on).
    RELINK_OP_FAST_FAIL = 2,
    /// The peer lost its state (it restarted): nothing is replayed into it.
    RELINK_OP_PEER_LOST = 3,
    /// The session was closed.
    RELINK_OP_DISCONNECTED = 4,
    /// The peer refused the operation (a bad token, no access): not retried.
    RELINK_OP_REMOTE = 5,
    /// A message longer than the peer's receive slots hold (its
    /// `max_message` is smaller), submitted before the peer said so: it
    /// never left, and the messages around it are delivered. Once the
    /// peer's size is known a longer message is refused at submit
    /// (`RELINK_ERR_TOO_LARGE`).
    RELINK_OP_TOO_LARGE_FOR_PEER = 6,
    /// A reason this header does not know (a newer librelink).
    RELINK_OP_OTHER = 99,
}

/// The one completion of an operation: which (`op`, `context`), what
/// (`kind`, `len`) and how it ended (`outcome`, `error`, `replayed`,
/// `executed`).
///
/// The struct may grow at its end in a later librelink (members are only
/// ever added there; none moves): allocate it as the header you build
/// with declares it (`sizeof(relink_completion)`, or a `relink_output`),
/// and build with the header of the librelink the program runs with.
///
/// The order completions come in, per session (`relink_poll_completion`,
/// `relink_poll_output`):
///
/// - Messages complete in the order they were submitted, whatever their
///   outcome (the peer confirms them cumulatively).
/// - Within one kind of one-sided operation — WRITEs, READs, atomics —
///   those that end SUCCESS complete in the order they were submitted
///   (the connection completes its sends in order, a replay keeps it, and
///   a proof of execution covers every operation before the confirmed
///   message).
/// - Nothing more is promised. Across kinds: after a loss, a WRITE proven
///   executed by the peer's confirmation completes at the resume, before
///   the READs submitted ahead of it are replayed; a message completes
///   when the peer confirms it, usually after the one-sided operations
///   submitted behind it. An operation that does not end SUCCESS may
///   complete before earlier ones of its kind: an atomic a loss made
///   INDETERMINATE completes at the resume, one whose token the peer no
///   longer advertises fails when it would have been posted.
///
/// Match a completion to its operation by `op` or `context`, not by its
/// place in line.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct relink_completion {
    /// The operation, as its submit call returned it.
    pub op: relink_op,
    /// How it ended.
    pub outcome: relink_outcome,
    /// Why it failed (`RELINK_OP_NONE` unless `outcome` is FAILED).
    pub error: relink_op_error,
    /// Whether it was posted on more than one transport (replayed after a
    /// loss) before it succeeded.
    pub replayed: i32,
    /// INDETERMINATE: 1 if it is proven executed (an atomic a later
    /// confirmed message shows ran; its result is lost), 0 if unknown; 0
    /// for the other outcomes. Added in what was the struct's tail
    /// padding: on 64-bit targets every member before it kept its offset
    /// and the struct its size then (24 bytes).
    pub executed: i32,
    /// The application's context of the operation, as given to
    /// `relink_post` (0 for the per-kind calls: `relink_send`,
    /// `relink_write`, ...). Added with `len` and `kind`: the struct grew
    /// from 24 to 48 bytes on 64-bit targets, the members before keep
    /// their offsets.
    pub context: u64,
    /// The bytes the operation moved or was to move: a message's length
    /// (of one from registered memory, the total of its ranges), a
    /// WRITE's, WRITE_IMM's or READ's local range's, an atomic's 8.
    pub len: u64,
    /// What kind of operation it was (`RELINK_OP_KIND_OTHER` for a kind
    /// this header does not name).
    pub kind: relink_op_kind,
}

// The members before `context` keep their offsets (`executed` took the
// tail padding of the 24-byte struct); the three added after it grew it to
// 48 bytes, leaving 4 bytes of tail padding (x86-64, AArch64).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(
    std::mem::size_of::<relink_completion>() == 48
        && std::mem::offset_of!(relink_completion, executed) == 20
        && std::mem::offset_of!(relink_completion, context) == 24
        && std::mem::offset_of!(relink_completion, len) == 32
        && std::mem::offset_of!(relink_completion, kind) == 40
);

/// The completion of no operation (the `completion` of a `relink_output`
/// of another kind).
pub(super) const NO_COMPLETION: relink_completion = relink_completion {
    op: 0,
    outcome: relink_outcome::RELINK_OUTCOME_SUCCESS,
    error: relink_op_error::RELINK_OP_NONE,
    replayed: 0,
    executed: 0,
    context: 0,
    len: 0,
    kind: relink_op_kind::RELINK_OP_KIND_NONE,
};

pub(super) fn op_kind(class: OpClass) -> relink_op_kind {
    use relink_op_kind::*;
    #[allow(unreachable_patterns)]
    match class {
        OpClass::Message => RELINK_OP_KIND_MESSAGE,
        OpClass::Write => RELINK_OP_KIND_WRITE,
        OpClass::Read => RELINK_OP_KIND_READ,
        OpClass::FetchAdd => RELINK_OP_KIND_FETCH_ADD,
        OpClass::CmpSwap => RELINK_OP_KIND_CMP_SWAP,
        OpClass::Flush => RELINK_OP_KIND_FLUSH,
        OpClass::WriteImm => RELINK_OP_KIND_WRITE_IMM,
        _ => RELINK_OP_KIND_OTHER,
    }
}

pub(super) fn completion(c: &Completion) -> relink_completion {
    use relink_op_error::*;
    use relink_outcome::*;
    let mut executed = false;
    let (outcome, error, replayed) = match c.outcome {
        Outcome::Success { replayed } => (RELINK_OUTCOME_SUCCESS, RELINK_OP_NONE, replayed),
        Outcome::Indeterminate { executed: e } => {
            executed = e == Some(true);
            (RELINK_OUTCOME_INDETERMINATE, RELINK_OP_NONE, false)
        }
        Outcome::Failed(e) => {
            #[allow(unreachable_patterns)]
            let error = match e {
                OpError::GaveUp => RELINK_OP_GAVE_UP,
                OpError::FastFail => RELINK_OP_FAST_FAIL,
                OpError::PeerLost => RELINK_OP_PEER_LOST,
                OpError::Disconnected => RELINK_OP_DISCONNECTED,
                OpError::Remote(_) => RELINK_OP_REMOTE,
                OpError::TooLargeForPeer => RELINK_OP_TOO_LARGE_FOR_PEER,
                _ => RELINK_OP_OTHER,
            };
            (RELINK_OUTCOME_FAILED, error, false)
        }
        #[allow(unreachable_patterns)]
        _ => (RELINK_OUTCOME_FAILED, RELINK_OP_OTHER, false),
    };
    relink_completion {
        op: c.op.0,
        outcome,
        error,
        replayed: i32::from(replayed),
        executed: i32::from(executed),
        context: c.context,
        len: c.len,
        kind: op_kind(c.class),
    }
}
