//! Policy: how a session recovers — when it gives up, how it backs off and
//! probes, which device may carry it, whether unconfirmed atomics replay,
//! whether a standby connection waits, and whether the application decides
//! (manual recovery). Set on the options before `relink_connect` or
//! `relink_listen`; the next section changes a live session's.

use relink_rs::{DeviceMatch, RecoveryMode};

use crate::options::{change, ms, opt_ms, relink_options};
use crate::status::*;

/// Which device may carry a session after a loss.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_device_match {
    /// Any device reaching the peer's address: the same one back, or a
    /// replacement with the same address (the default).
    RELINK_MATCH_ANY = 0,
    /// Only a device with the GUID of the one first used.
    RELINK_MATCH_SAME_GUID = 1,
}

/// The give-up deadline after a loss (`ctrl_loss_tmo`), in milliseconds;
/// negative: never give up.
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_give_up_ms(
    options: *mut relink_options,
    ms: i64,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.policy.ctrl_loss_tmo = opt_ms(ms);
            Ok(())
        })
    }
}

/// The give-up deadline of a session never established yet
/// (`first_connect_tmo`, default 30 s), counted from `relink_connect`;
/// negative: never give up.
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_first_connect_give_up_ms(
    options: *mut relink_options,
    ms: i64,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.policy.first_connect_tmo = opt_ms(ms);
            Ok(())
        })
    }
}

/// Fail queued operations this long after a loss while recovery goes on
/// (`fast_io_fail_tmo`); negative: off (queue until give-up).
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_fast_fail_ms(
    options: *mut relink_options,
    ms: i64,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.policy.fast_io_fail_tmo = opt_ms(ms);
            Ok(())
        })
    }
}

/// The keepalive period; negative: off.
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_keepalive_ms(
    options: *mut relink_options,
    ms: i64,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.policy.keepalive = opt_ms(ms);
            Ok(())
        })
    }
}

/// The cap of the backoff between attempts (`reconnect_delay`).
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_reconnect_delay_ms(
    options: *mut relink_options,
    ms: u64,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.policy.reconnect_delay = self::ms(ms);
            Ok(())
        })
    }
}

/// The delay before the second attempt of an outage, doubling per attempt
/// (`initial_backoff`; the first attempt is immediate).
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_initial_backoff_ms(
    options: *mut relink_options,
    ms: u64,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.policy.initial_backoff = self::ms(ms);
            Ok(())
        })
    }
}

/// The longest one connection attempt may take (`connect_timeout`).
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_connect_timeout_ms(
    options: *mut relink_options,
    ms: u64,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.policy.connect_timeout = self::ms(ms);
            Ok(())
        })
    }
}

/// Which device may take over after a loss (`rule`, a
/// `relink_device_match`).
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_device_match(
    options: *mut relink_options,
    rule: i32,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.policy.device_match = match rule {
                0 => DeviceMatch::Any,
                1 => DeviceMatch::SameGuid,
                _ => {
                    return Err(Fail::arg(format!(
                        "`rule` {rule} is no relink_device_match"
                    )))
                }
            };
            Ok(())
        })
    }
}

/// Whether to move back to the first path when its device returns (0: no,
/// the default; anything else: yes).
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_failback(
    options: *mut relink_options,
    on: i32,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.policy.failback = on != 0;
            Ok(())
        })
    }
}

/// Whether unconfirmed atomics are replayed after a loss (at-least-once)
/// instead of completing `RELINK_OUTCOME_INDETERMINATE` (0: no, the
/// default).
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_replay_atomics(
    options: *mut relink_options,
    on: i32,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.policy.replay_atomics = on != 0;
            Ok(())
        })
    }
}

/// Who decides a recovery: 0 (the default) relink, at once; non-zero the
/// application: after a loss an established session keeps its operations
/// queued, reports `RELINK_EVENT_AWAITING_DECISION`, and makes no attempt
/// until `relink_resume` (or `relink_close`, or its give-up deadline).
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_manual_recovery(
    options: *mut relink_options,
    on: i32,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.policy.recovery = if on != 0 {
                RecoveryMode::Manual
            } else {
                RecoveryMode::Automatic
            };
            Ok(())
        })
    }
}

/// Whether to keep a hot standby connection (0: no, the default; anything
/// else: yes): once established on one path, the session keeps a second
/// connection up, idle (kept alive by keepalives, `relink_options_set_keepalive_ms`),
/// on another path's device, and a loss of the current one switches to it
/// with no connection setup in the stall. A session needs a path through
/// another device for it: `relink_connect` gives one path, so from C the
/// knob is kept (and validated) but no standby is built. (A C target needs
/// no knob: it accepts the standby its initiator builds, and reports it
/// with `RELINK_EVENT_STANDBY_UP` and `RELINK_EVENT_STANDBY_LOST`.) It needs
/// automatic recovery: with `relink_options_set_manual_recovery` on, it
/// is refused naming `standby` (and so is manual recovery with it on).
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_standby(
    options: *mut relink_options,
    on: i32,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.policy.standby = on != 0;
            Ok(())
        })
    }
}

/// While the peer is silent after a loss (its device may be away), the
/// longest delay before the next attempt, a probe, never longer than the
/// backoff (`probe_interval`, default 50 ms); negative: no probes. 0 is
/// refused naming `probe_interval`.
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_probe_interval_ms(
    options: *mut relink_options,
    ms: i64,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.policy.probe_interval = opt_ms(ms);
            Ok(())
        })
    }
}

/// The least time a probe may take (`probe_timeout`, default 50 ms; 4×
/// the session's slowest connection if longer, never longer than the
/// connect timeout). 0 is refused naming `probe_timeout`.
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_probe_timeout_ms(
    options: *mut relink_options,
    ms: u64,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.policy.probe_timeout = self::ms(ms);
            Ok(())
        })
    }
}
