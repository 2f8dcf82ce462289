//! Session options and their recovery policy: made with defaults, changed
//! key by key (each setter validates and names the key it refuses).

use std::time::Duration;

use relink_rs::{
    Access, DeviceMatch, RecoveryMode, RegionId, RegionOptions, SessionOptions, MAX_CONNECT_DATA,
};

use crate::status::*;

/// Local write access (needed for a region that receives READ data or an
/// atomic's old value).
pub const RELINK_ACCESS_LOCAL_WRITE: u32 = 1;
/// The peer may RDMA WRITE into the region.
pub const RELINK_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
/// The peer may RDMA READ the region.
pub const RELINK_ACCESS_REMOTE_READ: u32 = 1 << 2;
/// The peer may run atomics on the region.
pub const RELINK_ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;

/// How a session is built: its recovery policy, its queues, its regions.
/// Made by `relink_options_new` with relink's defaults (give up 600 s after
/// a loss, keepalive 5 s, 64 receive slots, messages up to 4096 bytes);
/// freed by `relink_options_free`. `relink_connect` and `relink_listen`
/// copy it: it may be freed or changed after the call.
pub struct relink_options {
    pub(crate) opts: SessionOptions,
}

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

/// The options behind a handle.
///
/// # Safety
/// `p` is NULL or live options, not used by another thread during the call.
pub(crate) unsafe fn options_ref<'a>(p: *const relink_options) -> Result<&'a relink_options, Fail> {
    non_null(p, "options")?;
    // SAFETY: non-NULL; the caller's contract.
    Ok(unsafe { &*p })
}

/// Make options with relink's defaults; store them in `*out`.
///
/// # Safety
/// `out` is valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn relink_options_new(out: *mut *mut relink_options) -> relink_status {
    guard(|| {
        let o = Box::new(relink_options {
            opts: SessionOptions::default(),
        });
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", Box::into_raw(o)) }?;
        Ok(RELINK_OK)
    })
}

/// Free options; NULL is ignored.
///
/// # Safety
/// `options` is NULL or live options, not used again after the call.
#[no_mangle]
pub unsafe extern "C" fn relink_options_free(options: *mut relink_options) {
    if !options.is_null() {
        // SAFETY: made by `Box::into_raw` in `relink_options_new`; the
        // caller gives up the pointer.
        drop(unsafe { Box::from_raw(options) });
    }
}

/// Apply `change` to the options, keep it only if the policy stays valid.
///
/// # Safety
/// `options` is NULL or live options, not shared during the call.
unsafe fn change(
    options: *mut relink_options,
    change: impl FnOnce(&mut SessionOptions) -> Result<(), Fail>,
) -> relink_status {
    guard(|| {
        non_null(options, "options")?;
        // SAFETY: non-NULL; the caller's contract.
        let o = unsafe { &mut *options };
        let mut next = o.opts.clone();
        change(&mut next)?;
        next.validate()?;
        o.opts = next;
        Ok(RELINK_OK)
    })
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// `None` for a negative value (off / never), else the duration.
fn opt_ms(v: i64) -> Option<Duration> {
    u64::try_from(v).ok().map(ms)
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

/// Receive slots per session (the peer's send credits; default 64; more
/// than 8, which are kept for control messages).
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_recv_slots(
    options: *mut relink_options,
    slots: u32,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            if slots == 0 {
                return Err(Fail::new(
                    RELINK_ERR_OPTIONS,
                    "`recv_slots` must be at least 1",
                ));
            }
            o.recv_slots = slots;
            Ok(())
        })
    }
}

/// The largest message payload in bytes (default 4096; at least 8, 34
/// with an advertised region). A receive slot holds this plus relink's
/// header: messages queued together share one SEND while they fit the
/// peer's slot, so small messages on roomy slots cost the fabric one
/// request per frame.
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_max_message(
    options: *mut relink_options,
    bytes: u32,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            if bytes == 0 {
                return Err(Fail::new(
                    RELINK_ERR_OPTIONS,
                    "`max_message` must be at least 1",
                ));
            }
            o.max_message = bytes;
            Ok(())
        })
    }
}

/// The most one-sided operations in flight at once (default 64).
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_max_one_sided(
    options: *mut relink_options,
    ops: u32,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            if ops == 0 {
                return Err(Fail::new(
                    RELINK_ERR_OPTIONS,
                    "`max_one_sided` must be at least 1",
                ));
            }
            o.max_one_sided = ops;
            Ok(())
        })
    }
}

/// Add a region of `len` bytes, allocated by relink (zeroed), registered
/// with the session on every device it uses. `id` names it on both sides
/// of the application's protocol; `access` is an or of
/// `RELINK_ACCESS_*`; `advertise` (non-zero) lets the peer reach it
/// one-sidedly through tokens (`relink_token`) naming `id`.
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_add_region(
    options: *mut relink_options,
    id: u32,
    len: u64,
    access: u32,
    advertise: i32,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            let access = Access::from_bits(access).ok_or_else(|| {
                Fail::arg(format!(
                    "`access` {access:#x} has bits no RELINK_ACCESS_* names"
                ))
            })?;
            o.regions
                .push(RegionOptions::new(RegionId(id), len, access).advertise(advertise != 0));
            Ok(())
        })
    }
}

/// Bytes for the peer's application, sent with the first connect of a
/// session made with these options (at most `RELINK_MAX_CONNECT_DATA`;
/// copied); the accepting side reads them in `relink_accepted`. `len` 0
/// clears them.
///
/// # Safety
/// `options` is live options; `data` valid for reads of `len` bytes (NULL
/// only if `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_connect_data(
    options: *mut relink_options,
    data: *const std::ffi::c_void,
    len: usize,
) -> relink_status {
    if len != 0 && data.is_null() {
        return guard(|| Err(Fail::arg("`data` is NULL")));
    }
    let bytes = if len == 0 {
        Vec::new()
    } else {
        // SAFETY: non-NULL, valid for `len` bytes by the contract.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }.to_vec()
    };
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.connect_data = bytes;
            Ok(())
        })
    }
}

/// The most bytes of connect data (`relink_options_set_connect_data`).
pub const RELINK_MAX_CONNECT_DATA: usize = 33;
const _: () = assert!(RELINK_MAX_CONNECT_DATA == MAX_CONNECT_DATA);

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
/// knob is kept (and validated) but no standby is built. It needs
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
