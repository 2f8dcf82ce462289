//! What sessions produce, taken by the application: completions, delivered
//! messages, events.

use std::ffi::c_char;

use relink_rs::{OpError, Outcome, SessionEvent, SessionHandle};

use crate::node::{node_mut, relink_node};
use crate::ops::relink_op;
use crate::session::{relink_session, relink_state};
use crate::status::*;

/// How an operation ended.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_outcome {
    /// Done: the message was delivered to the peer's node, the one-sided
    /// operation executed and was acknowledged.
    RELINK_OUTCOME_SUCCESS = 0,
    /// Not done; `error` says why.
    RELINK_OUTCOME_FAILED = 1,
    /// An atomic whose effect cannot be known: it was in flight when the
    /// device was lost and is not replayed (it is not idempotent). Check
    /// the peer's memory, or let the policy replay atomics.
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
    /// A reason this header does not know (a newer librelink).
    RELINK_OP_OTHER = 99,
}

/// The one completion of an operation.
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
}

fn completion(op: u64, outcome: Outcome) -> relink_completion {
    use relink_op_error::*;
    use relink_outcome::*;
    let (outcome, error, replayed) = match outcome {
        Outcome::Success { replayed } => (RELINK_OUTCOME_SUCCESS, RELINK_OP_NONE, replayed),
        Outcome::Indeterminate { .. } => (RELINK_OUTCOME_INDETERMINATE, RELINK_OP_NONE, false),
        Outcome::Failed(e) => {
            #[allow(unreachable_patterns)]
            let error = match e {
                OpError::GaveUp => RELINK_OP_GAVE_UP,
                OpError::FastFail => RELINK_OP_FAST_FAIL,
                OpError::PeerLost => RELINK_OP_PEER_LOST,
                OpError::Disconnected => RELINK_OP_DISCONNECTED,
                OpError::Remote(_) => RELINK_OP_REMOTE,
                _ => RELINK_OP_OTHER,
            };
            (RELINK_OUTCOME_FAILED, error, false)
        }
        #[allow(unreachable_patterns)]
        _ => (RELINK_OUTCOME_FAILED, RELINK_OP_OTHER, false),
    };
    relink_completion {
        op,
        outcome,
        error,
        replayed: i32::from(replayed),
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
                unsafe { put(out, "out", completion(c.op.0, c.outcome)) }?;
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
        let next = match n.held.remove(&session) {
            Some(d) => Some(d),
            None => n
                .node
                .poll_delivery(SessionHandle(session))
                .map(|(s, m)| (s.0, m)),
        };
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
    /// RECOVERING: the attempt's number (from 1).
    pub attempt: u32,
    /// RESUMED: the time without a transport, in nanoseconds.
    pub downtime_ns: u64,
    /// RESUMED: operations posted again.
    pub replayed: u64,
    /// REFUSED: whether the session tries again.
    pub retrying: i32,
    /// The event in words, NUL-terminated (cut to fit).
    pub text: [c_char; 128],
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
            format!("refused by the peer: {reason:?}")
        }
        SessionEvent::PeerLost { reason } => {
            out.kind = RELINK_EVENT_PEER_LOST;
            format!("peer lost: {reason}")
        }
        SessionEvent::Disconnected => {
            out.kind = RELINK_EVENT_DISCONNECTED;
            "disconnected".to_string()
        }
        #[allow(unreachable_patterns)]
        other => format!("{other:?}"),
    };
    let bytes = text.as_bytes();
    let n = bytes.len().min(out.text.len() - 1);
    for (d, s) in out.text.iter_mut().zip(&bytes[..n]) {
        *d = *s as c_char;
    }
    out
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
