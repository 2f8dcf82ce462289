//! Posted receives and WRITE notices: buffers of a session's registered
//! memory the application posts for the peer's messages
//! (`relink_post_receive`), filled in order, one message each, each
//! ending in one `relink_received` (`relink_poll_received`, or
//! `RELINK_OUTPUT_RECEIVED` from `relink_poll_output`); and the notices of
//! the peer's WRITEs with immediate data (`relink_write_imm`), in order
//! with the messages: in a posted buffer, or alone (`relink_poll_written`,
//! `RELINK_OUTPUT_WRITTEN`).
//!
//! This section comes before the outputs because `relink_output` carries
//! a `relink_received` and a `relink_written`.

use relink_rs::{ReceiveOutcome, Received, SessionHandle, SubmitError, Written};

use crate::node::{node_mut, relink_node};
use crate::ops::{local, receive_len, submit_error};
use crate::session::relink_session;
use crate::status::*;

/// How a posted receive ended (`relink_received.outcome`). The numbers are
/// fixed: new outcomes take new numbers.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_receive_outcome {
    /// No receive: the `received` of a `relink_output` of another kind.
    RELINK_RECEIVE_NONE = 0,
    /// A message of the peer filled the buffer: its first `len` bytes are
    /// at the buffer's start (`truncated` if the message was longer: the
    /// rest is gone). Delivered once, in order, as `relink_poll_delivery`
    /// delivers (`seq`).
    RELINK_RECEIVE_MESSAGE = 1,
    /// The notice of the peer's WRITE with immediate data took the buffer,
    /// in order with the messages (`seq`), and wrote nothing in it (as a
    /// verbs WRITE with immediate data consumes a receive): `imm`,
    /// `written_region`, `written_offset` and `written_len` say what
    /// landed where in this side's memory — before the notice.
    RELINK_RECEIVE_WRITTEN = 2,
    /// The session ended (closed, failed) with the buffer still posted:
    /// nothing was written in it. It is the application's again.
    RELINK_RECEIVE_FLUSHED = 3,
    /// An outcome this header does not name (a newer librelink): nothing
    /// to read but `context`, `region` and `offset`; the buffer is the
    /// application's again.
    RELINK_RECEIVE_OTHER = 99,
}

/// A receive the application posted (`relink_post_receive`), ended: which
/// buffer (`context`, `region`, `offset`) and what it holds (`outcome`
/// and the members it names). Members that do not apply to the outcome
/// are 0.
///
/// The struct may grow at its end in a later librelink (members are only
/// ever added there; none moves): allocate it as the header you build
/// with declares it, and build with the header of the librelink the
/// program runs with.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct relink_received {
    /// The context the buffer was posted with.
    pub context: u64,
    /// How the receive ended.
    pub outcome: relink_receive_outcome,
    /// The buffer's region, as posted: a session's own region or a
    /// registration of the node.
    pub region: u32,
    /// The buffer's offset in `region`, as posted.
    pub offset: u64,
    /// MESSAGE: the bytes written at the buffer's start (the message's
    /// length, or the buffer's if it was longer).
    pub len: u32,
    /// MESSAGE: 1 if the message was longer than the buffer (only its
    /// first `len` bytes are there), else 0.
    pub truncated: i32,
    /// MESSAGE, WRITTEN: the sequence number (from 1, per session; the
    /// messages and the WRITE notices share them).
    pub seq: u64,
    /// WRITTEN: the peer's immediate data.
    pub imm: u32,
    /// WRITTEN: this side's region the peer's WRITE landed in (a region
    /// of the session, or a registration of the node).
    pub written_region: u32,
    /// WRITTEN: where in `written_region` the WRITE landed.
    pub written_offset: u64,
    /// WRITTEN: how many bytes the WRITE put there.
    pub written_len: u32,
}

// Its layout on the targets C programs are built for (x86-64, AArch64):
// no padding but 4 bytes at its end.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(
    std::mem::size_of::<relink_received>() == 64
        && std::mem::offset_of!(relink_received, outcome) == 8
        && std::mem::offset_of!(relink_received, region) == 12
        && std::mem::offset_of!(relink_received, offset) == 16
        && std::mem::offset_of!(relink_received, len) == 24
        && std::mem::offset_of!(relink_received, truncated) == 28
        && std::mem::offset_of!(relink_received, seq) == 32
        && std::mem::offset_of!(relink_received, imm) == 40
        && std::mem::offset_of!(relink_received, written_region) == 44
        && std::mem::offset_of!(relink_received, written_offset) == 48
        && std::mem::offset_of!(relink_received, written_len) == 56
);

/// The notice of the peer's WRITE with immediate data (`relink_write_imm`
/// at the peer): its immediate data, and the range of this side's memory
/// its bytes landed in — before the notice came. The peer's application
/// is told once per WRITE, in order with its messages, across every
/// recovery.
///
/// The struct may grow at its end in a later librelink, as
/// `relink_received` may.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct relink_written {
    /// The peer's immediate data.
    pub imm: u32,
    /// This side's region the WRITE landed in (a region of the session, or
    /// a registration of the node).
    pub region: u32,
    /// Where in `region` it landed.
    pub offset: u64,
    /// How many bytes it put there.
    pub len: u32,
}

#[cfg(target_pointer_width = "64")]
const _: () = assert!(
    std::mem::size_of::<relink_written>() == 24
        && std::mem::offset_of!(relink_written, region) == 4
        && std::mem::offset_of!(relink_written, offset) == 8
        && std::mem::offset_of!(relink_written, len) == 16
);

/// No receive (the `received` of a `relink_output` of another kind).
pub(crate) const NO_RECEIVED: relink_received = relink_received {
    context: 0,
    outcome: relink_receive_outcome::RELINK_RECEIVE_NONE,
    region: 0,
    offset: 0,
    len: 0,
    truncated: 0,
    seq: 0,
    imm: 0,
    written_region: 0,
    written_offset: 0,
    written_len: 0,
};

/// No notice (the `written` of a `relink_output` of another kind).
pub(crate) const NO_WRITTEN: relink_written = relink_written {
    imm: 0,
    region: 0,
    offset: 0,
    len: 0,
};

pub(crate) fn written(w: &Written) -> relink_written {
    relink_written {
        imm: w.imm,
        region: w.region.0,
        offset: w.offset,
        len: w.len,
    }
}

/// The receive posted with `context` at `local`, ended with `outcome`, as
/// C sees it.
fn receive(context: u64, region: u32, offset: u64, outcome: &ReceiveOutcome) -> relink_received {
    use relink_receive_outcome::*;
    let mut r = relink_received {
        context,
        region,
        offset,
        ..NO_RECEIVED
    };
    #[allow(unreachable_patterns)]
    match *outcome {
        ReceiveOutcome::Message {
            seq,
            len,
            truncated,
        } => {
            r.outcome = RELINK_RECEIVE_MESSAGE;
            r.seq = seq.0;
            r.len = len;
            r.truncated = i32::from(truncated);
        }
        ReceiveOutcome::Written { seq, written: w } => {
            r.outcome = RELINK_RECEIVE_WRITTEN;
            r.seq = seq.0;
            r.imm = w.imm;
            r.written_region = w.region.0;
            r.written_offset = w.offset;
            r.written_len = w.len;
        }
        ReceiveOutcome::Flushed => r.outcome = RELINK_RECEIVE_FLUSHED,
        _ => r.outcome = RELINK_RECEIVE_OTHER,
    }
    r
}

pub(crate) fn received(r: &Received) -> relink_received {
    receive(r.context, r.local.region.0, r.local.offset, &r.outcome)
}

/// Post a receive buffer for the session's next message: the `len` bytes
/// at `offset` of `region`, a session's own region or a registration of
/// the node (`relink_register`). The session's messages fill the buffers
/// posted, in the order both came — one message per buffer, copied once
/// from where it arrived — and each buffer's receive ends in one
/// `relink_received` with `context` (`relink_poll_received`, or
/// `RELINK_OUTPUT_RECEIVED` from `relink_poll_output`):
///
/// - `RELINK_RECEIVE_MESSAGE`: the message's first `len` bytes at the
///   buffer's start, its `seq`, and `truncated` if it was longer than the
///   buffer (the rest is gone);
/// - `RELINK_RECEIVE_WRITTEN`: the notice of the peer's WRITE with
///   immediate data was next in line: it takes the buffer (a buffer of
///   `len` 0 is enough) and writes nothing;
/// - `RELINK_RECEIVE_FLUSHED`: the session ended with the buffer posted.
///
/// A session on a shared receive queue (`relink_options_set_shared_receive`)
/// fills the buffers posted here first, then those of its queue's pool
/// (`relink_post_shared_receive`): either way the receive ends on this
/// session.
///
/// Messages that arrived while no buffer was posted wait in line and fill
/// the next buffers posted (this call may end receives at once), unless
/// `relink_poll_delivery` takes them first: the two ways share one line,
/// in order. A message `relink_poll_delivery` or `relink_poll_output`
/// refused with `RELINK_ERR_TRUNCATED` stays first for those calls: the
/// buffers posted after take the messages behind it.
///
/// The buffer is relink's from this call until its receive ended: leave
/// it alone (a message is written into it while `relink_poll` or
/// `relink_wait` runs), and a registration it is in cannot be
/// deregistered (`relink_deregister` is `RELINK_ERR_BUSY`) until then.
/// Across device losses nothing changes: each message fills one buffer,
/// exactly once.
///
/// Refused, posting nothing: `RELINK_ERR_TOO_LARGE` for a `len` over
/// `UINT32_MAX` (as a WRITE's through `relink_post`);
/// `RELINK_ERR_NO_SESSION` for an unknown session; `RELINK_ERR_SESSION`
/// for one that ended (closed or failed); `RELINK_ERR_NO_REGION` for a
/// region the session does not have; `RELINK_ERR_RANGE` for `offset` +
/// `len` past its end; `RELINK_ERR_AGAIN` with the session's
/// `max_outstanding` buffers posted and not filled yet (a buffer leaves
/// that count when a message fills it; no `RELINK_EVENT_WRITABLE` is
/// sent for it).
///
/// # Safety
/// `node` is a live node.
#[no_mangle]
pub unsafe extern "C" fn relink_post_receive(
    node: *mut relink_node,
    session: relink_session,
    region: u32,
    offset: u64,
    len: u64,
    context: u64,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let len = receive_len(len)?;
        let s = SessionHandle(session);
        n.node
            .post_receive(s, local(region, offset, len), context)
            .map_err(|e| match e {
                SubmitError::WouldBlock { outstanding, max } => Fail::new(
                    RELINK_ERR_AGAIN,
                    format!(
                        "session {session} has {outstanding} receive buffers posted and not \
                         filled, its max_outstanding ({max}): post again once messages \
                         filled some"
                    ),
                ),
                e => submit_error(&n.node, s, e),
            })?;
        Ok(RELINK_OK)
    })
}

/// Take the next ended receive of a session (`relink_post_receive`): a
/// buffer a message or a WRITE notice took, or one the session's end
/// flushed, in the order the buffers were posted — or a buffer of its
/// shared receive queue's pool (`relink_post_shared_receive`) that a
/// message or notice of the session took, in its place in the
/// session's line. `RELINK_OK` with `*out`
/// filled, or `RELINK_EMPTY` when none waits (also for a session that
/// does not exist: never made, or ended and reaped). A session that ended
/// is reaped only once its flushed receives are taken too.
///
/// # Safety
/// `node` is a live node; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_poll_received(
    node: *mut relink_node,
    session: relink_session,
    out: *mut relink_received,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        non_null(out, "out")?;
        match n.node.poll_received(SessionHandle(session)) {
            None => Ok(RELINK_EMPTY),
            Some(r) => {
                // SAFETY: the caller's contract.
                unsafe { put(out, "out", received(&r)) }?;
                Ok(RELINK_OK)
            }
        }
    })
}

/// Take the session's next notice of a WRITE with immediate data the peer
/// made (`relink_write_imm`), for an application that posts no receive
/// buffers (with buffers posted, the notices take them:
/// `RELINK_RECEIVE_WRITTEN`): `RELINK_OK` with `*out` filled and its
/// sequence number in `*seq` (if not NULL), or `RELINK_EMPTY` when no
/// notice is next (also for a session that does not exist).
///
/// The notices are in line with the messages, numbered with them, each
/// given once, across every recovery; the WRITE's bytes are in place
/// before its notice. Whichever is first in line must be taken first:
/// while a notice is next, `relink_poll_delivery` says `RELINK_EMPTY`
/// until this call (or `relink_poll_output`) takes it; while a message
/// is next (one `relink_poll_delivery` left first with
/// `RELINK_ERR_TRUNCATED` included), this call says `RELINK_EMPTY`. A
/// loop that takes both — `relink_poll_delivery` and this call until
/// both say `RELINK_EMPTY` — or `relink_poll_output` gets everything in
/// order.
///
/// # Safety
/// `node` is a live node; `out` valid for a write; `seq` NULL or valid
/// for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_poll_written(
    node: *mut relink_node,
    session: relink_session,
    seq: *mut u64,
    out: *mut relink_written,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        non_null(out, "out")?;
        // A message a too-small buffer left first in line is next.
        let held = n.held.contains_key(&session)
            || matches!(
                &n.held_output,
                Some(relink_rs::Output::Delivery { session: s, .. }) if s.0 == session
            );
        if held {
            return Ok(RELINK_EMPTY);
        }
        match n.node.poll_written(SessionHandle(session)) {
            None => Ok(RELINK_EMPTY),
            Some((s, w)) => {
                // SAFETY: the caller's contract.
                unsafe { put(out, "out", written(&w)) }?;
                // SAFETY: the caller's contract.
                unsafe { put_opt(seq, s.0) };
                Ok(RELINK_OK)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use relink_rs::{ReceiveOutcome, RegionId, Seq, Written};

    use super::relink_receive_outcome::*;
    use super::*;

    #[test]
    fn every_outcome_has_its_members() {
        let m = receive(
            7,
            3,
            64,
            &ReceiveOutcome::Message {
                seq: Seq(5),
                len: 100,
                truncated: true,
            },
        );
        assert_eq!(
            (
                m.context,
                m.outcome,
                m.region,
                m.offset,
                m.len,
                m.truncated,
                m.seq
            ),
            (7, RELINK_RECEIVE_MESSAGE, 3, 64, 100, 1, 5)
        );
        assert_eq!((m.imm, m.written_region, m.written_len), (0, 0, 0));
        let w = Written {
            imm: 0xfeed,
            region: RegionId(1 << 31),
            offset: 4096,
            len: 512,
        };
        let r = receive(
            8,
            3,
            0,
            &ReceiveOutcome::Written {
                seq: Seq(6),
                written: w,
            },
        );
        assert_eq!(
            (r.outcome, r.seq, r.len, r.truncated),
            (RELINK_RECEIVE_WRITTEN, 6, 0, 0)
        );
        assert_eq!(
            (r.imm, r.written_region, r.written_offset, r.written_len),
            (0xfeed, 1 << 31, 4096, 512)
        );
        assert_eq!(
            written(&w),
            relink_written {
                imm: 0xfeed,
                region: 1 << 31,
                offset: 4096,
                len: 512
            }
        );
        let f = receive(9, 3, 128, &ReceiveOutcome::Flushed);
        assert_eq!(
            f,
            relink_received {
                context: 9,
                outcome: RELINK_RECEIVE_FLUSHED,
                region: 3,
                offset: 128,
                ..NO_RECEIVED
            }
        );
    }
}
