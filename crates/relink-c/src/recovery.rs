//! Recovery control: what the application does to its live sessions —
//! change a session's give-up deadline and recovery mode, resume one held
//! for its decision or suspended, suspend one for a planned outage, and
//! drain a device before maintenance.

use std::ffi::c_char;

use relink_rs::SessionHandle;

use crate::node::{node_mut, relink_node};
use crate::session::relink_session;
use crate::status::*;

/// Change a live session's give-up deadline (`ms` after the loss, or after
/// the first connect while never established; negative: never) and its
/// recovery mode (`manual` non-zero: the application decides). Takes
/// effect in the current outage: an extended deadline keeps a recovering
/// session alive past the old one; manual to automatic while a decision is
/// awaited starts recovering at once.
///
/// # Safety
/// `node` is a live node.
#[no_mangle]
pub unsafe extern "C" fn relink_session_set_recovery(
    node: *mut relink_node,
    session: relink_session,
    give_up_ms: i64,
    manual: i32,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let s = SessionHandle(session);
        let mut policy = n
            .node
            .options(s)
            .ok_or_else(|| Fail::new(RELINK_ERR_NO_SESSION, format!("no session {session}")))?
            .policy
            .clone();
        let deadline = u64::try_from(give_up_ms)
            .ok()
            .map(std::time::Duration::from_millis);
        policy.ctrl_loss_tmo = deadline;
        policy.first_connect_tmo = deadline;
        policy.recovery = if manual != 0 {
            relink_rs::RecoveryMode::Manual
        } else {
            relink_rs::RecoveryMode::Automatic
        };
        n.node.set_policy(s, policy)?;
        Ok(RELINK_OK)
    })
}

/// Resume a session that awaits the application's decision (manual
/// recovery, `RELINK_EVENT_AWAITING_DECISION`): it recovers as an automatic
/// one does; or a suspended one (`relink_suspend`): it reconnects at once.
/// `path` is the index of the path to use (0 for the one given to
/// `relink_connect`), or -1 for any. `RELINK_ERR_SESSION` if it is neither
/// held nor suspended.
///
/// # Safety
/// `node` is a live node.
#[no_mangle]
pub unsafe extern "C" fn relink_resume(
    node: *mut relink_node,
    session: relink_session,
    path: i64,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let s = SessionHandle(session);
        match usize::try_from(path) {
            Ok(p) => n.node.resume_on(s, p)?,
            Err(_) => n.node.resume(s)?,
        }
        Ok(RELINK_OK)
    })
}

/// Suspend a session (the initiator's): both ends stop posting and finish
/// what is in flight, the connection goes, and both halves wait in
/// `RELINK_STATE_SUSPENDED` — no attempt, no give-up deadline — until
/// `relink_resume`. Operations submitted meanwhile wait; nothing is
/// replayed and nothing ends indeterminate. `RELINK_ERR_SESSION` on the
/// accepting side, before the session was established, or once it ended.
///
/// # Safety
/// `node` is a live node.
#[no_mangle]
pub unsafe extern "C" fn relink_suspend(
    node: *mut relink_node,
    session: relink_session,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        n.node.suspend(SessionHandle(session))?;
        Ok(RELINK_OK)
    })
}

/// Drain the device named `device` (NUL-terminated) before maintenance:
/// every session on it finishes what is in flight and moves at once to
/// another present path (a target asks its initiator to move); no session
/// of the node takes a path on it until `relink_undrain` or its removal.
/// `*moving` (if not NULL) receives the number of sessions moving,
/// `*blocked` (if not NULL) the number that have no other path and stay.
/// `relink_sessions_on` tells when the device carries nothing.
/// `RELINK_ERR_ARGUMENT` if no device of that name is present.
///
/// # Safety
/// `node` is a live node; `device` a NUL-terminated string; `moving` and
/// `blocked` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_drain(
    node: *mut relink_node,
    device: *const c_char,
    moving: *mut u32,
    blocked: *mut u32,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        // SAFETY: the caller's contract.
        let name = unsafe { c_str(device, "device")? };
        let id = device_named(n, name)?;
        let report = n.node.drain(&id);
        let count = |v: &[SessionHandle]| u32::try_from(v.len()).unwrap_or(u32::MAX);
        if !moving.is_null() {
            // SAFETY: the caller's contract: not NULL, valid for a write.
            unsafe { put(moving, "moving", count(&report.moving)) }?;
        }
        if !blocked.is_null() {
            // SAFETY: the caller's contract: not NULL, valid for a write.
            unsafe { put(blocked, "blocked", count(&report.blocked)) }?;
        }
        Ok(RELINK_OK)
    })
}

/// End the drain of the device named `device`: its paths may be taken
/// again. `RELINK_ERR_ARGUMENT` if no device of that name is present.
///
/// # Safety
/// `node` is a live node; `device` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn relink_undrain(
    node: *mut relink_node,
    device: *const c_char,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        // SAFETY: the caller's contract.
        let name = unsafe { c_str(device, "device")? };
        let id = device_named(n, name)?;
        n.node.undrain(&id);
        Ok(RELINK_OK)
    })
}

/// The number of sessions whose connection the device named `device`
/// carries, in `*out`: 0 once a drain finished (then the device can go).
/// `RELINK_ERR_ARGUMENT` if no device of that name is present.
///
/// # Safety
/// `node` is a live node; `device` a NUL-terminated string; `out` valid
/// for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_sessions_on(
    node: *mut relink_node,
    device: *const c_char,
    out: *mut u32,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        // SAFETY: the caller's contract.
        let name = unsafe { c_str(device, "device")? };
        let id = device_named(n, name)?;
        let count = u32::try_from(n.node.sessions_on(&id).len()).unwrap_or(u32::MAX);
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", count) }?;
        Ok(RELINK_OK)
    })
}

/// The present device of the node's provider named `name`.
fn device_named(n: &relink_node, name: &str) -> Result<relink_rs::DeviceId, Fail> {
    n.node
        .provider()
        .devices()
        .into_iter()
        .find(|d| d.id.name == name)
        .map(|d| d.id)
        .ok_or_else(|| Fail::arg(format!("no device named {name:?} is present")))
}
