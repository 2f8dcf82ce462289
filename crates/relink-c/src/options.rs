//! Session options: how a session is built — its receive slots, its
//! message sizes, the data its first connect carries — made with relink's
//! defaults and changed key by key (each setter validates and names the
//! key it refuses). A session's regions and its recovery policy are set on
//! the same options (the Regions and Policy sections).

use std::time::Duration;

use relink_rs::{SessionOptions, MAX_CONNECT_DATA};

use crate::status::*;

/// How a session is built: its recovery policy, its queues, its regions.
/// Made by `relink_options_new` with relink's defaults (give up 600 s after
/// a loss, keepalive 5 s, 64 receive slots, messages up to 4096 bytes, at
/// most 4096 operations outstanding);
/// freed by `relink_options_free`. `relink_connect` and `relink_listen`
/// copy it: it may be freed or changed after the call.
pub struct relink_options {
    pub(crate) opts: SessionOptions,
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
        // Before the options are made: refused, nothing is left behind.
        non_null(out, "out")?;
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
        let o = unsafe { Box::from_raw(options) };
        guard_free(move || drop(o));
    }
}

/// Apply `change` to the options, keep it only if the policy stays valid.
///
/// # Safety
/// `options` is NULL or live options, not shared during the call.
pub(crate) unsafe fn change(
    options: *mut relink_options,
    change: impl FnOnce(&mut SessionOptions) -> Result<(), Fail>,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe { change_now(options, change) }?;
        Ok(RELINK_OK)
    })
}

/// [`change`] inside an exported function's guard.
///
/// # Safety
/// As [`change`].
unsafe fn change_now(
    options: *mut relink_options,
    change: impl FnOnce(&mut SessionOptions) -> Result<(), Fail>,
) -> Result<(), Fail> {
    non_null(options, "options")?;
    // SAFETY: non-NULL; the caller's contract.
    let o = unsafe { &mut *options };
    let mut next = o.opts.clone();
    change(&mut next)?;
    next.validate()?;
    o.opts = next;
    Ok(())
}

pub(crate) fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// `None` for a negative value (off / never), else the duration.
pub(crate) fn opt_ms(v: i64) -> Option<Duration> {
    u64::try_from(v).ok().map(ms)
}

/// `value`, or the error naming `key` if it is 0.
fn at_least_one(key: &str, value: u32) -> Result<u32, Fail> {
    if value == 0 {
        return Err(Fail::new(
            RELINK_ERR_OPTIONS,
            format!("`{key}` must be at least 1"),
        ));
    }
    Ok(value)
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
            o.recv_slots = at_least_one("recv_slots", slots)?;
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
            o.max_message = at_least_one("max_message", bytes)?;
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
            o.max_one_sided = at_least_one("max_one_sided", ops)?;
            Ok(())
        })
    }
}

/// Read the peer's messages of at least `min_bytes` bytes straight into
/// this side's posted receives (`relink_post_receive`), a *rendezvous*: a
/// message the peer sends from one range of registered memory it exposes
/// with `RELINK_ACCESS_REMOTE_READ` is RDMA-READ by this side into the next
/// posted buffer, and counts as delivered (its sender's completion comes)
/// only once its bytes landed: no byte is copied on either side, and the
/// message may be longer than `max_message`. Such a message waits for a
/// posted buffer (the messages behind it wait for it): a session with this
/// set takes its messages through posted receives. Costs a round trip per
/// message read. 0 (the default): every message comes in its SEND. Not
/// with a shared receive queue (`relink_connect` and `relink_listen` refuse
/// the options).
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_rendezvous(
    options: *mut relink_options,
    min_bytes: u32,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.rendezvous = (min_bytes > 0).then_some(min_bytes);
            Ok(())
        })
    }
}

/// The most operations a session holds outstanding — submitted, their
/// completion not yet taken (`relink_poll_completion`,
/// `relink_poll_output`) — default 4096, at least 1 (0 is refused naming
/// `max_outstanding`). Past it every submitting call returns
/// `RELINK_ERR_AGAIN` and submits nothing, until the application takes a
/// completion; `RELINK_EVENT_WRITABLE` says when room returned,
/// `relink_room` how much there is. It bounds what a program can queue
/// while the session cannot make progress (a message's bytes are held
/// until the peer confirms it). It bounds the receive buffers posted and
/// not filled yet too, apart (`relink_post_receive`).
///
/// # Safety
/// `options` is live options.
#[no_mangle]
pub unsafe extern "C" fn relink_options_set_max_outstanding(
    options: *mut relink_options,
    ops: u32,
) -> relink_status {
    // SAFETY: the caller's contract.
    unsafe {
        change(options, |o| {
            o.max_outstanding = at_least_one("max_outstanding", ops)?;
            Ok(())
        })
    }
}

/// Bytes for the peer's application, sent with the first connect of a
/// session made with these options (at most `RELINK_MAX_CONNECT_DATA`;
/// copied); the accepting side reads them in `relink_accepted`. `len` 0
/// clears them. `RELINK_ERR_TOO_LARGE` for more than
/// `RELINK_MAX_CONNECT_DATA` bytes (nothing is read then).
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
    guard(|| {
        non_null(options, "options")?;
        if len != 0 {
            non_null(data, "data")?;
        }
        // Before a byte is read: `len` is the caller's, any size.
        if len > RELINK_MAX_CONNECT_DATA {
            return Err(Fail::new(
                RELINK_ERR_TOO_LARGE,
                format!(
                    "connect data of {len} bytes is longer than the most, \
                     {RELINK_MAX_CONNECT_DATA} (RELINK_MAX_CONNECT_DATA)"
                ),
            ));
        }
        let bytes = if len == 0 {
            Vec::new()
        } else {
            // SAFETY: non-NULL, valid for `len` bytes by the contract; `len`
            // is at most RELINK_MAX_CONNECT_DATA.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }.to_vec()
        };
        // SAFETY: the caller's contract.
        unsafe {
            change_now(options, |o| {
                o.connect_data = bytes;
                Ok(())
            })
        }?;
        Ok(RELINK_OK)
    })
}

/// The most bytes of connect data (`relink_options_set_connect_data`).
pub const RELINK_MAX_CONNECT_DATA: usize = 33;
const _: () = assert!(RELINK_MAX_CONNECT_DATA == MAX_CONNECT_DATA);
