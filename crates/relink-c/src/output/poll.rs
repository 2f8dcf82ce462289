//! Taking outputs: a session's completions, delivered messages and
//! events (`relink_poll_completion`, `relink_poll_delivery`,
//! `relink_poll_event`), and the node's next output of any kind
//! (`relink_output`, `relink_poll_output`).

use relink_rs::{SessionEvent, SessionHandle};

use super::completion::{completion, relink_completion, NO_COMPLETION};
use super::event::{event, relink_event};
use crate::node::{node_mut, relink_node};
use crate::receives::{
    received, relink_received, relink_written, written, NO_RECEIVED, NO_WRITTEN,
};
use crate::session::{relink_accepted, relink_session};
use crate::status::*;

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
