//! Outputs: what sessions produce, taken by the application —
//! completions, delivered messages and events, per session
//! (`relink_poll_completion`, `relink_poll_delivery`, `relink_poll_event`)
//! or from the whole node, accepted sessions, ended receives and WRITE
//! notices included (`relink_poll_output`).

use std::ffi::c_char;

use relink_rs::{Completion, OpClass, OpError, Outcome, SessionEvent, SessionHandle, StandbyLoss};

use crate::node::{node_mut, relink_node};
use crate::ops::{relink_op, relink_op_kind};
use crate::receives::{
    received, relink_received, relink_written, written, NO_RECEIVED, NO_WRITTEN,
};
use crate::session::{c_text, relink_accepted, relink_session, relink_state};
use crate::status::*;

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
const NO_COMPLETION: relink_completion = relink_completion {
    op: 0,
    outcome: relink_outcome::RELINK_OUTCOME_SUCCESS,
    error: relink_op_error::RELINK_OP_NONE,
    replayed: 0,
    executed: 0,
    context: 0,
    len: 0,
    kind: relink_op_kind::RELINK_OP_KIND_NONE,
};

fn op_kind(class: OpClass) -> relink_op_kind {
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

fn completion(c: &Completion) -> relink_completion {
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

/// Take the next completion of a session: `RELINK_OK` and `*out` filled,
/// or `RELINK_EMPTY` when none waits (also for a session that does not
/// exist: never made, or ended and reaped).
///
/// # Safety
/// `node` is a live node; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_poll_completion(
    node: *mut relink_node,
    session: relink_session,
    out: *mut relink_completion,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        non_null(out, "out")?;
        match n.node.poll_completion(SessionHandle(session)) {
            None => Ok(RELINK_EMPTY),
            Some(c) => {
                // SAFETY: the caller's contract.
                unsafe { put(out, "out", completion(&c)) }?;
                Ok(RELINK_OK)
            }
        }
    })
}

/// Take the next message delivered on a session (exactly once, in order)
/// into `buf` (`cap` bytes): `RELINK_OK` with its length in `*len` and its
/// sequence number (from 1) in `*seq` (if not NULL); `RELINK_EMPTY` when
/// none waits; `RELINK_ERR_TRUNCATED` when it is longer than `cap`: then
/// `*len` is the length it needs and the message stays first in line.
///
/// The notices of the peer's WRITEs with immediate data are in the same
/// line: while one is next, this says `RELINK_EMPTY` until
/// `relink_poll_written` (or `relink_poll_output`) takes it. With receive
/// buffers posted (`relink_post_receive`), the messages fill them
/// instead: this takes only those that arrived while none was posted.
///
/// # Safety
/// `node` is a live node; `buf` valid for writes of `cap` bytes (NULL only
/// if `cap` is 0); `len` valid for a write; `seq` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_poll_delivery(
    node: *mut relink_node,
    session: relink_session,
    buf: *mut std::ffi::c_void,
    cap: usize,
    len: *mut usize,
    seq: *mut u64,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        non_null(len, "len")?;
        // A message a too-small buffer left first in line, by either call.
        let from_output = match n.held_output.take() {
            Some(relink_rs::Output::Delivery {
                session: s,
                seq,
                payload,
            }) if s.0 == session => Some((seq.0, payload)),
            other => {
                n.held_output = other;
                None
            }
        };
        // Otherwise the next message, swapped into the node's scratch
        // buffer: its allocation takes a later message (no allocation per
        // message), and the bytes are copied into the caller's buffer.
        let next = n.held.remove(&session).or(from_output).or_else(|| {
            let mut scratch = std::mem::take(&mut n.scratch);
            let seq = n
                .node
                .poll_delivery_into(SessionHandle(session), &mut scratch);
            match seq {
                Some(seq) => Some((seq.0, scratch)),
                None => {
                    n.scratch = scratch;
                    None
                }
            }
        });
        let Some((s, msg)) = next else {
            return Ok(RELINK_EMPTY);
        };
        // SAFETY: the caller's contract.
        unsafe { put(len, "len", msg.len()) }?;
        if msg.len() > cap {
            let need = msg.len();
            n.held.insert(session, (s, msg));
            return Err(Fail::new(
                RELINK_ERR_TRUNCATED,
                format!("the message is {need} bytes, the buffer {cap}"),
            ));
        }
        if !msg.is_empty() {
            non_null(buf, "buf")?;
            // SAFETY: `buf` is valid for `cap >= msg.len()` bytes by the
            // contract and cannot overlap the message, which relink owns.
            unsafe { std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), msg.len()) };
        }
        // SAFETY: the caller's contract.
        unsafe { put_opt(seq, s) };
        n.scratch = msg;
        Ok(RELINK_OK)
    })
}

/// What happened to a session.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_event_kind {
    /// It moved from `from` to `to`.
    RELINK_EVENT_TRANSITION = 1,
    /// Its transport was lost (a device reset or removed, a port down, a
    /// completion error, the peer silent); recovery starts.
    RELINK_EVENT_DEVICE_LOST = 2,
    /// Reconnection attempt number `attempt` started.
    RELINK_EVENT_RECOVERING = 3,
    /// Traffic flows again after `downtime_ns`; `replayed` operations were
    /// posted again.
    RELINK_EVENT_RESUMED = 4,
    /// The give-up deadline passed; its operations failed.
    RELINK_EVENT_GAVE_UP = 5,
    /// The peer refused an attempt; `retrying` says whether it tries again.
    RELINK_EVENT_REFUSED = 6,
    /// The peer lost its state or refused for good; the session failed.
    RELINK_EVENT_PEER_LOST = 7,
    /// The session was closed (by this side, or the peer said goodbye).
    RELINK_EVENT_DISCONNECTED = 8,
    /// Connection attempt number `attempt` failed (`text` says why); the
    /// policy retries until its deadline.
    RELINK_EVENT_ATTEMPT_FAILED = 9,
    /// Manual recovery: the transport was lost and the session waits for
    /// the application (`relink_resume`, `relink_close`); `attempt` is the
    /// number of paths a present device can carry now, `text` names them.
    RELINK_EVENT_AWAITING_DECISION = 10,
    /// A planned outage begins (`relink_suspend`, `relink_drain`, or the
    /// peer's): nothing new is posted until the session is suspended or
    /// moved; `text` says which.
    RELINK_EVENT_QUIESCING = 11,
    /// The session is suspended (`RELINK_STATE_SUSPENDED`) until the
    /// initiator resumes it (`relink_resume`).
    RELINK_EVENT_SUSPENDED = 12,
    /// A drain found no other present path: the session stays on the
    /// drained device.
    RELINK_EVENT_DRAIN_BLOCKED = 13,
    /// A hot standby connection is up (`relink_options_set_standby`) on
    /// the device `text` names (`name#index@generation`): a loss of the
    /// current one switches to it. Reported at each end that has it: at
    /// a target, for the standby its initiator built (whatever the
    /// target's options), and at an initiator with a path through a
    /// second device (not one of `relink_connect`, which gives one path).
    RELINK_EVENT_STANDBY_UP = 14,
    /// The standby connection that was up (`RELINK_EVENT_STANDBY_UP`) is
    /// gone; the current one is unaffected. `standby_loss` says why (a
    /// `relink_standby_loss`); `text` names its device, the initiator's
    /// path it took, and for `RELINK_STANDBY_DOWN` how it was lost.
    /// Reported once per standby; until a new one is up (the initiator
    /// builds one when a device allows), a loss reconnects.
    RELINK_EVENT_STANDBY_LOST = 15,
    /// The session takes operations again: a submit was refused with
    /// `RELINK_ERR_AGAIN` (`max_outstanding` operations outstanding), and
    /// since then the application took a completion that made room
    /// (`relink_room`). Once per refusal.
    RELINK_EVENT_WRITABLE = 16,
    /// An event this header does not name; `text` describes it.
    RELINK_EVENT_OTHER = 99,
}

/// An event of a session. Fields that do not apply to its kind are zero.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct relink_event {
    /// What happened.
    pub kind: relink_event_kind,
    /// TRANSITION: the state left.
    pub from: relink_state,
    /// TRANSITION: the state entered.
    pub to: relink_state,
    /// RECOVERING, ATTEMPT_FAILED: the attempt's number (from 1).
    pub attempt: u32,
    /// RESUMED: the time without a transport, in nanoseconds.
    pub downtime_ns: u64,
    /// RESUMED: operations posted again.
    pub replayed: u64,
    /// REFUSED: whether the session tries again.
    pub retrying: i32,
    /// The event in words, NUL-terminated (cut to fit).
    pub text: [c_char; 128],
    /// STANDBY_LOST: why the standby went (a `relink_standby_loss`). Added
    /// last, in what was the struct's tail padding: on 64-bit targets
    /// `sizeof(relink_event)` and every other member's offset are as
    /// before it.
    pub standby_loss: relink_standby_loss,
}

// The member added last took the tail padding: the struct's size is the
// one programs built before it allocate (x86-64, AArch64: 168 bytes).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(
    std::mem::size_of::<relink_event>() == 168
        && std::mem::offset_of!(relink_event, standby_loss) == 164
);

/// Why a standby connection went (`RELINK_EVENT_STANDBY_LOST`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_standby_loss {
    /// Not a STANDBY_LOST event.
    RELINK_STANDBY_NONE = 0,
    /// Silent: no keepalive heard on it for two keepalive periods
    /// (`relink_options_set_keepalive_ms`) — its peer's half or its path
    /// died without telling this end, or the peer could not send in time;
    /// counted in `RELINK_COUNTER_STANDBYS_SILENT`.
    RELINK_STANDBY_SILENT = 1,
    /// Down: its device or connection was lost (a device removed or
    /// reset, a port down, a disconnect, a failed keepalive); `text` says
    /// how, as `RELINK_EVENT_DEVICE_LOST`'s does.
    RELINK_STANDBY_DOWN = 2,
    /// Released: the session let it go — a drain or a suspend, the knob
    /// turned off, the session's end (closed or failed), a loss the
    /// standby could not take over, or, at a target, the initiator asked
    /// for a new standby or reconnected without it.
    RELINK_STANDBY_RELEASED = 3,
    /// A cause this header does not know (a newer librelink); `text`
    /// describes it.
    RELINK_STANDBY_OTHER = 99,
}

fn event(e: &SessionEvent) -> relink_event {
    use relink_event_kind::*;
    let mut out = relink_event {
        kind: RELINK_EVENT_OTHER,
        from: relink_state::RELINK_STATE_IDLE,
        to: relink_state::RELINK_STATE_IDLE,
        attempt: 0,
        downtime_ns: 0,
        replayed: 0,
        retrying: 0,
        text: [0; 128],
        standby_loss: relink_standby_loss::RELINK_STANDBY_NONE,
    };
    let text = match e {
        SessionEvent::Transition(t) => {
            out.kind = RELINK_EVENT_TRANSITION;
            out.from = t.from.into();
            out.to = t.to.into();
            format!("{} -> {} ({})", t.from.name(), t.to.name(), t.cause)
        }
        SessionEvent::DeviceLost { cause } => {
            out.kind = RELINK_EVENT_DEVICE_LOST;
            format!("device lost: {cause}")
        }
        SessionEvent::Recovering { attempt } => {
            out.kind = RELINK_EVENT_RECOVERING;
            out.attempt = *attempt;
            format!("recovering: attempt {attempt}")
        }
        SessionEvent::Resumed {
            downtime, replayed, ..
        } => {
            out.kind = RELINK_EVENT_RESUMED;
            out.downtime_ns = u64::try_from(downtime.as_nanos()).unwrap_or(u64::MAX);
            out.replayed = *replayed;
            format!("resumed after {downtime:?}, {replayed} replayed")
        }
        SessionEvent::GaveUp => {
            out.kind = RELINK_EVENT_GAVE_UP;
            "gave up".to_string()
        }
        SessionEvent::Refused { reason, retrying } => {
            out.kind = RELINK_EVENT_REFUSED;
            out.retrying = i32::from(*retrying);
            format!("refused by the peer: {reason}")
        }
        SessionEvent::PeerLost { reason } => {
            out.kind = RELINK_EVENT_PEER_LOST;
            format!("peer lost: {reason}")
        }
        SessionEvent::Disconnected => {
            out.kind = RELINK_EVENT_DISCONNECTED;
            "disconnected".to_string()
        }
        SessionEvent::AwaitingDecision { cause, candidates } => {
            out.kind = RELINK_EVENT_AWAITING_DECISION;
            out.attempt = u32::try_from(candidates.len()).unwrap_or(u32::MAX);
            let names: Vec<String> = candidates
                .iter()
                .map(|c| format!("path {} on {}", c.path_index, c.device.name))
                .collect();
            format!("awaiting decision after {cause}: {}", names.join(", "))
        }
        SessionEvent::AttemptFailed { attempt, reason } => {
            out.kind = RELINK_EVENT_ATTEMPT_FAILED;
            out.attempt = *attempt;
            format!("attempt {attempt} failed: {reason}")
        }
        SessionEvent::Quiescing { plan } => {
            out.kind = RELINK_EVENT_QUIESCING;
            match plan {
                relink_rs::Plan::Drain => "quiescing for a drain".to_string(),
                relink_rs::Plan::Suspend => "quiescing for a suspend".to_string(),
            }
        }
        SessionEvent::Suspended => {
            out.kind = RELINK_EVENT_SUSPENDED;
            "suspended".to_string()
        }
        SessionEvent::DrainBlocked => {
            out.kind = RELINK_EVENT_DRAIN_BLOCKED;
            "drain blocked: no other present path".to_string()
        }
        SessionEvent::StandbyUp { device } => {
            out.kind = RELINK_EVENT_STANDBY_UP;
            format!("standby up on {device}")
        }
        SessionEvent::StandbyLost {
            device,
            path,
            cause,
        } => {
            out.kind = RELINK_EVENT_STANDBY_LOST;
            out.standby_loss = standby_loss(cause);
            let path = match path {
                Some(p) => match p.local {
                    Some(l) => format!("path {l} -> {}", p.peer),
                    None => format!("path -> {}", p.peer),
                },
                None => "accepted".to_string(),
            };
            format!("standby on {device} ({path}) went: {cause}")
        }
        SessionEvent::Writable => {
            out.kind = RELINK_EVENT_WRITABLE;
            "writable: room for operations again".to_string()
        }
        #[allow(unreachable_patterns)]
        other => format!("{other:?}"),
    };
    out.text = c_text(&text);
    out
}

fn standby_loss(cause: &StandbyLoss) -> relink_standby_loss {
    use relink_standby_loss::*;
    #[allow(unreachable_patterns)]
    match cause {
        StandbyLoss::Silent => RELINK_STANDBY_SILENT,
        StandbyLoss::Down(_) => RELINK_STANDBY_DOWN,
        StandbyLoss::Released => RELINK_STANDBY_RELEASED,
        _ => RELINK_STANDBY_OTHER,
    }
}

/// Take the next event of a session: `RELINK_OK` and `*out` filled, or
/// `RELINK_EMPTY` when none waits (also for a session that does not exist).
///
/// # Safety
/// `node` is a live node; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_poll_event(
    node: *mut relink_node,
    session: relink_session,
    out: *mut relink_event,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        non_null(out, "out")?;
        match n.node.poll_event(SessionHandle(session)) {
            None => Ok(RELINK_EMPTY),
            Some(e) => {
                // SAFETY: the caller's contract.
                unsafe { put(out, "out", event(&e)) }?;
                Ok(RELINK_OK)
            }
        }
    })
}

/// What `relink_poll_output` took.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_output_kind {
    /// A listener accepted a session: `accepted`.
    RELINK_OUTPUT_ACCEPTED = 1,
    /// An event of `session`: `event`.
    RELINK_OUTPUT_EVENT = 2,
    /// A completion of `session`: `completion`.
    RELINK_OUTPUT_COMPLETION = 3,
    /// A message delivered on `session`: `len` bytes in the caller's
    /// buffer, sequence number `seq`.
    RELINK_OUTPUT_DELIVERY = 4,
    /// A receive posted on `session` ended (`relink_post_receive`):
    /// `received`, as `relink_poll_received` gives it.
    RELINK_OUTPUT_RECEIVED = 5,
    /// The notice of the peer's WRITE with immediate data on `session`,
    /// with no receive buffer posted to take it: `written`, sequence
    /// number `seq`, as `relink_poll_written` gives them.
    RELINK_OUTPUT_WRITTEN = 6,
    /// An output this header does not name (a newer librelink).
    RELINK_OUTPUT_OTHER = 99,
}

/// One output of a node, from any session. Only the members its `kind`
/// names are filled.
///
/// The struct may grow at its end in a later librelink (members are only
/// ever added there; none moves): build with the header of the librelink
/// the program runs with, as for `relink_completion`. `received` and
/// `written` came so, with the kinds RECEIVED and WRITTEN; since then
/// `relink_poll_output` writes the whole struct for those two kinds only,
/// and for the others the members of the layout before them (`kind` to
/// `len`) alone: a program built against that older header, whose struct
/// ends at `len`, keeps working as long as it gets neither kind — it
/// posts no receive buffer (it cannot), and its peer sends it no WRITE
/// with immediate data.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct relink_output {
    /// Which output it is.
    pub kind: relink_output_kind,
    /// The session it is of (the new session for ACCEPTED).
    pub session: relink_session,
    /// ACCEPTED: the session and where it came from.
    pub accepted: relink_accepted,
    /// EVENT: what happened.
    pub event: relink_event,
    /// COMPLETION: the operation and how it ended (a `relink_completion`
    /// that grows moves the members after it: build with the header of
    /// the librelink the program runs with).
    pub completion: relink_completion,
    /// DELIVERY, WRITTEN: the message's or the notice's sequence number
    /// (from 1, per session; messages and notices share them).
    pub seq: u64,
    /// DELIVERY: the message's length (copied into the caller's buffer);
    /// with `RELINK_ERR_TRUNCATED`, the length the buffer needs.
    pub len: usize,
    /// RECEIVED: the buffer and what it holds. Added with `written` after
    /// `len`: the members before keep their offsets.
    pub received: relink_received,
    /// WRITTEN: the peer's immediate data and where its WRITE landed (its
    /// sequence number is `seq`).
    pub written: relink_written,
}

// The members added last come after the layout before them, which ends
// at `len` (x86-64, AArch64: 440 bytes): `relink_poll_output` writes that
// prefix alone for the kinds that came before them.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(
    OUTPUT_FIRST_LAYOUT == 440
        && std::mem::offset_of!(relink_output, len) + 8 == OUTPUT_FIRST_LAYOUT
        && std::mem::offset_of!(relink_output, written)
            == OUTPUT_FIRST_LAYOUT + std::mem::size_of::<relink_received>()
        && std::mem::size_of::<relink_output>()
            == OUTPUT_FIRST_LAYOUT
                + std::mem::size_of::<relink_received>()
                + std::mem::size_of::<relink_written>()
);

/// The bytes of a `relink_output` before `received`: the struct's size in
/// the headers before RECEIVED and WRITTEN.
const OUTPUT_FIRST_LAYOUT: usize = std::mem::offset_of!(relink_output, received);

/// Store `v` through `out`: the whole struct for the kinds that fill the
/// members added last, else only the members before them (a program
/// built against an older header passes a smaller struct).
///
/// # Safety
/// `out` is NULL or valid for writes of a `relink_output` — of its first
/// `OUTPUT_FIRST_LAYOUT` bytes only unless `v.kind` is RECEIVED or
/// WRITTEN.
unsafe fn put_output(out: *mut relink_output, v: &relink_output) -> Result<(), Fail> {
    use relink_output_kind::*;
    if matches!(v.kind, RELINK_OUTPUT_RECEIVED | RELINK_OUTPUT_WRITTEN) {
        // SAFETY: the caller's contract.
        return unsafe { put(out, "out", *v) };
    }
    non_null(out, "out")?;
    // SAFETY: `v` is a whole struct and `out` valid for writes of its
    // first `OUTPUT_FIRST_LAYOUT` bytes by the contract; they cannot
    // overlap (`v` is this call's). The copy is untyped: padding copies
    // as it is.
    unsafe {
        std::ptr::copy_nonoverlapping(
            std::ptr::from_ref(v).cast::<u8>(),
            out.cast::<u8>(),
            OUTPUT_FIRST_LAYOUT,
        )
    };
    Ok(())
}

/// Take the node's next output, whichever session it is of: accepted
/// sessions first, then the sessions with output in turn, one output each
/// (of a session: completions, then deliveries and WRITE notices in their
/// one line, then ended receives, then events). It takes from the same
/// queues as `relink_accept` and the per-session `relink_poll_*` calls:
/// whichever the program calls takes. Returns `RELINK_OK` with `*out`
/// filled (a delivered message copied into `buf`, `cap` bytes),
/// `RELINK_EMPTY` when nothing waits, or `RELINK_ERR_TRUNCATED` when a
/// message is longer than `cap`: `out->len` is its length, `out->kind`
/// DELIVERY, and it stays first in line.
///
/// `*out` is written whole for RECEIVED and WRITTEN, and up to `len` for
/// the other kinds (`relink_output` says why).
///
/// # Safety
/// `node` is a live node; `out` valid for a write of a `relink_output`
/// (up to its `len` only, for the kinds other than RECEIVED and WRITTEN);
/// `buf` valid for writes of `cap` bytes (NULL only if `cap` is 0).
#[no_mangle]
pub unsafe extern "C" fn relink_poll_output(
    node: *mut relink_node,
    out: *mut relink_output,
    buf: *mut std::ffi::c_void,
    cap: usize,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        non_null(out, "out")?;
        // A message a too-small buffer left first in line, by either call.
        let held = n
            .held
            .pop_first()
            .map(|(s, (seq, payload))| relink_rs::Output::Delivery {
                session: relink_rs::SessionHandle(s),
                seq: relink_rs::Seq(seq),
                payload,
            });
        let next = held
            .or_else(|| n.held_output.take())
            .or_else(|| n.node.poll_output());
        let Some(o) = next else {
            return Ok(RELINK_EMPTY);
        };
        let mut v = relink_output {
            kind: relink_output_kind::RELINK_OUTPUT_OTHER,
            session: o.session().0,
            // SAFETY: all-zero bytes are a valid value of these plain C
            // structs (integers, arrays, enums whose 0 is a variant).
            accepted: unsafe { std::mem::zeroed() },
            event: event(&SessionEvent::Disconnected),
            completion: NO_COMPLETION,
            seq: 0,
            len: 0,
            received: NO_RECEIVED,
            written: NO_WRITTEN,
        };
        #[allow(unreachable_patterns)]
        match &o {
            relink_rs::Output::Accepted(a) => {
                v.kind = relink_output_kind::RELINK_OUTPUT_ACCEPTED;
                v.accepted = a.into();
            }
            relink_rs::Output::Event { event: e, .. } => {
                v.kind = relink_output_kind::RELINK_OUTPUT_EVENT;
                v.event = event(e);
            }
            relink_rs::Output::Completion { completion: c, .. } => {
                v.kind = relink_output_kind::RELINK_OUTPUT_COMPLETION;
                v.completion = completion(c);
            }
            relink_rs::Output::Received { received: r, .. } => {
                v.kind = relink_output_kind::RELINK_OUTPUT_RECEIVED;
                v.received = received(r);
            }
            relink_rs::Output::Written {
                seq, written: w, ..
            } => {
                v.kind = relink_output_kind::RELINK_OUTPUT_WRITTEN;
                v.seq = seq.0;
                v.written = written(w);
            }
            relink_rs::Output::Delivery { seq, payload, .. } => {
                v.kind = relink_output_kind::RELINK_OUTPUT_DELIVERY;
                v.seq = seq.0;
                v.len = payload.len();
                if payload.len() > cap {
                    let need = payload.len();
                    n.held_output = Some(o);
                    // SAFETY: the caller's contract.
                    unsafe { put_output(out, &v) }?;
                    return Err(Fail::new(
                        RELINK_ERR_TRUNCATED,
                        format!("the message is {need} bytes, the buffer {cap}"),
                    ));
                }
                if !payload.is_empty() {
                    non_null(buf, "buf")?;
                    // SAFETY: `buf` is valid for `cap >= payload.len()`
                    // bytes by the contract and cannot overlap the
                    // payload, which relink owns.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            payload.as_ptr(),
                            buf.cast::<u8>(),
                            payload.len(),
                        )
                    };
                }
            }
            _ => {}
        }
        // SAFETY: the caller's contract.
        unsafe { put_output(out, &v) }?;
        Ok(RELINK_OK)
    })
}

#[cfg(test)]
mod tests;
