//! Status and errors: every function returns a `relink_status` (the
//! `*_free` functions return nothing); after an error, `relink_last_error`
//! says what went wrong in one line.
//!
//! This section opens `relink.h` because every declaration after it
//! returns a `relink_status`. The rest of the crate takes from here the
//! guard every exported function runs its body in (no panic crosses into
//! C) and the helpers that read C arguments and write out-pointers.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

/// What a call did. Every function of the API returns one; `RELINK_OK`
/// and `RELINK_EMPTY` are not errors, every negative value is, and
/// `relink_last_error` then says what went wrong in one line.
///
/// Each mistake has one code, whichever call it is made in:
///
/// | mistake | code |
/// |---|---|
/// | a NULL pointer where one is needed, a string that is not UTF-8 or not an address, a number no enum names | `RELINK_ERR_ARGUMENT` |
/// | a work request's `flags` with a bit no `RELINK_WR_*` names, both `RELINK_WR_FROM_REGION` and `RELINK_WR_SGL`, `RELINK_WR_FROM_REGION` on a kind other than MESSAGE, or `RELINK_WR_SGL` on an atomic or a FLUSH; a scatter/gather list (a MESSAGE's, WRITE's, WRITE_IMM's or READ's) with a NULL `sgl` or of 0 or more than `RELINK_MAX_SGE` ranges (`relink_post`) | `RELINK_ERR_ARGUMENT` |
/// | a session the node does not have | `RELINK_ERR_NO_SESSION` |
/// | a region the session (or the options) does not have | `RELINK_ERR_NO_REGION` |
/// | a byte range outside its region (`offset` + `len` past its end), every range of a scatter/gather list and a receive buffer included | `RELINK_ERR_RANGE` |
/// | a length over its limit (a message over `max_message`, by the total of its ranges for one from registered memory; a one-sided operation over `UINT32_MAX` bytes, by the total of its ranges for one with a scatter/gather list; a receive buffer over `UINT32_MAX` bytes; connect data over `RELINK_MAX_CONNECT_DATA`) | `RELINK_ERR_TOO_LARGE` |
/// | an atomic's offset (local or token) that is not a multiple of 8 | `RELINK_ERR_MISALIGNED` |
/// | an operation past the session's `max_outstanding` (completions not taken), or a receive buffer past it (buffers posted and not filled) | `RELINK_ERR_AGAIN` |
/// | a buffer to register (`relink_register`) that is NULL, empty or wraps around, or access rights no `RELINK_ACCESS_*` names or no device grants | `RELINK_ERR_ARGUMENT` |
/// | a registration the node does not have (`relink_deregister`), or a buffer for a shared receive queue's pool in a region that is no registration of the node (`relink_post_shared_receive`) | `RELINK_ERR_NO_REGION` |
/// | a shared receive queue the node does not have (`relink_post_shared_receive`, `relink_take_shared_receives`, `relink_shared_receive_free`, and options naming it) | `RELINK_ERR_OPTIONS` |
/// | deregistering while an operation not yet completed uses the registration (a message sent from it included), a receive buffer posted in it has not ended, or a buffer in it is in a shared receive queue's pool | `RELINK_ERR_BUSY` |
///
/// Lengths are checked before anything is copied or allocated. The
/// numbers are fixed: new codes take new numbers.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_status {
    /// Done.
    RELINK_OK = 0,
    /// A `relink_poll_*` or `relink_accept` call found nothing waiting (no
    /// output was taken; not an error).
    RELINK_EMPTY = 1,
    /// An argument is invalid: a NULL pointer where one is needed (every
    /// call, for every pointer it needs), a string that is not UTF-8 or not
    /// an address, an unknown enum value, an unknown listener, device or
    /// path; a buffer `relink_register` cannot register (NULL with a
    /// length, empty, wrapping around the address space) or rights it
    /// cannot give (bits no `RELINK_ACCESS_*` names, remote write or
    /// atomic rights without `RELINK_ACCESS_LOCAL_WRITE`); a work request
    /// (`relink_post`) with `flags` it cannot take (a bit no `RELINK_WR_*`
    /// names, both `RELINK_WR_FROM_REGION` and `RELINK_WR_SGL`,
    /// `RELINK_WR_FROM_REGION` on a kind other than MESSAGE,
    /// `RELINK_WR_SGL` on an atomic or a FLUSH) or a scatter/gather list
    /// with a NULL `sgl` or of 0 or more than `RELINK_MAX_SGE` ranges.
    RELINK_ERR_ARGUMENT = -1,
    /// The node has no such session: never made, or ended and reaped.
    RELINK_ERR_NO_SESSION = -2,
    /// The session has no such region: a local range's or
    /// `relink_region_read`/`relink_region_write`'s region, or the options
    /// have none of that id (`relink_options_set_region_window`), or the
    /// node has no registration of that id (`relink_deregister`; a local
    /// range naming a registration deregistered since is refused so too;
    /// a shared receive queue's buffer, `relink_post_shared_receive`, is
    /// refused so in any region that is no registration of the node).
    RELINK_ERR_NO_REGION = -3,
    /// The session refused the operation: it ended (closed or failed) or
    /// is closing, or it is not in a state that allows the call (the
    /// message says which). A receive buffer (`relink_post_receive`) is
    /// refused so only once the session ended. A shared receive queue
    /// still in use (by a session, a listener, or a buffer in its pool)
    /// or too full for a session's receives is refused so too.
    RELINK_ERR_SESSION = -4,
    /// The options are invalid (the message names the key), or name a
    /// shared receive queue the node does not have; a call on such a queue
    /// is refused so too (`relink_shared_receive_free`,
    /// `relink_post_shared_receive`, `relink_take_shared_receives`).
    RELINK_ERR_OPTIONS = -5,
    /// The provider (soft fabric, rdma-core) refused: no device, address in
    /// use, out of resources.
    RELINK_ERR_PROVIDER = -6,
    /// The caller's buffer is too small for the message; nothing was taken
    /// (the length it needs is stored, call again with a larger buffer).
    RELINK_ERR_TRUNCATED = -7,
    /// This build of librelink lacks the feature (the verbs provider).
    RELINK_ERR_UNSUPPORTED = -8,
    /// An operating-system call failed (a soft device directory).
    RELINK_ERR_IO = -9,
    /// Another listener has the address now: retry once it is closed.
    RELINK_ERR_ADDR_IN_USE = -10,
    /// A length is over its limit: a message longer than the session's
    /// `max_message` (`relink_send`, `relink_post`; a message from
    /// registered memory by its ranges' total), a one-sided operation
    /// longer than `UINT32_MAX` bytes (`relink_post`; with a
    /// scatter/gather list by its ranges' total), a receive buffer longer
    /// than `UINT32_MAX` bytes (`relink_post_receive`,
    /// `relink_post_shared_receive`), connect data longer than
    /// `RELINK_MAX_CONNECT_DATA`. Refused before anything was copied.
    RELINK_ERR_TOO_LARGE = -11,
    /// A byte range is outside its region: `offset` + `len` past the end
    /// of the region (`relink_region_read`, `relink_region_write`, the
    /// local range of `relink_write`, `relink_write_imm`, `relink_read`
    /// and the atomics, the ranges of a message from registered memory:
    /// `relink_post` with `RELINK_WR_FROM_REGION` or `RELINK_WR_SGL`, the
    /// ranges of a WRITE's, WRITE_IMM's or READ's scatter/gather list:
    /// `relink_post` with `RELINK_WR_SGL`, a receive buffer:
    /// `relink_post_receive`, `relink_post_shared_receive`).
    /// The message gives the range and the region's length.
    RELINK_ERR_RANGE = -12,
    /// An atomic (`relink_fetch_add`, `relink_cmp_swap`) at an offset that
    /// is not a multiple of 8, in its local region or in its token: atomics
    /// work on 8-byte aligned words (regions start page aligned). Refused
    /// before it is posted: the session is unaffected.
    RELINK_ERR_MISALIGNED = -13,
    /// Try again later: the session has its `max_outstanding` operations
    /// outstanding (submitted, their completion not taken;
    /// `relink_options_set_max_outstanding`). Nothing was submitted: take
    /// completions (`relink_poll_completion`, `relink_poll_output`), then
    /// submit again; `RELINK_EVENT_WRITABLE` says when room returned,
    /// `relink_room` how much there is. Every submitting call returns it
    /// (`relink_send`, `relink_write`, `relink_write_imm`, `relink_read`,
    /// `relink_fetch_add`, `relink_cmp_swap`, `relink_post`). And
    /// `relink_post_receive` with `max_outstanding` receive buffers posted
    /// and not filled yet: post again once messages filled some (no
    /// `RELINK_EVENT_WRITABLE` for those).
    RELINK_ERR_AGAIN = -14,
    /// In use: `relink_deregister` of a registration that an operation not
    /// yet completed names as its local range (a WRITE, WRITE_IMM, READ or
    /// atomic's, or one of a message's sent from registered memory), or
    /// that a receive buffer posted and not ended yet is in
    /// (`relink_post_receive`), or that a buffer of a shared receive
    /// queue's pool is in (`relink_post_shared_receive`: until a message
    /// took it or `relink_take_shared_receives` handed it back). Nothing
    /// changed: take its completion (a receive ends when a message fills
    /// it or the session ends; take the pool's buffers back), then
    /// deregister again.
    RELINK_ERR_BUSY = -15,
    /// A bug in relink: it panicked (the message says where). The node is
    /// left as it was at the panic; free it. Nothing is printed unless
    /// the environment variable `RELINK_LOG` is set (non-empty) when
    /// librelink is first called.
    RELINK_ERR_INTERNAL = -100,
}

pub use relink_status::*;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    /// How many librelink calls this thread is inside: the panic hook keeps
    /// quiet about a panic while it is not 0.
    static INSIDE: Cell<u32> = const { Cell::new(0) };
    /// Where the last panic inside a call happened (`file:line`), for its
    /// error message.
    static PANIC_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// An error on its way to C: a status and its message.
#[derive(Debug)]
pub(crate) struct Fail {
    pub(crate) status: relink_status,
    pub(crate) message: String,
}

impl Fail {
    pub(crate) fn new(status: relink_status, message: impl Into<String>) -> Fail {
        Fail {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn arg(message: impl Into<String>) -> Fail {
        Fail::new(RELINK_ERR_ARGUMENT, message)
    }
}

/// The message of an error and its sources, one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let next = c.to_string();
        if !s.contains(&next) {
            s.push_str(": ");
            s.push_str(&next);
        }
        src = c.source();
    }
    s
}

impl From<relink_rs::OptionsError> for Fail {
    fn from(e: relink_rs::OptionsError) -> Fail {
        let status = match &e {
            relink_rs::OptionsError::ConnectDataTooLong { .. } => RELINK_ERR_TOO_LARGE,
            _ => RELINK_ERR_OPTIONS,
        };
        Fail::new(status, chain(&e))
    }
}

impl From<relink_rs::ConnectError> for Fail {
    fn from(e: relink_rs::ConnectError) -> Fail {
        use relink_rs::ConnectError as E;
        let status = match &e {
            E::NoPath => RELINK_ERR_ARGUMENT,
            E::Options(_) => RELINK_ERR_OPTIONS,
            E::SharedReceive(s) => Fail::from(s.clone()).status,
            _ => RELINK_ERR_PROVIDER,
        };
        Fail::new(status, chain(&e))
    }
}

impl From<relink_rs::ListenError> for Fail {
    fn from(e: relink_rs::ListenError) -> Fail {
        use relink_rs::ListenError as E;
        let status = match &e {
            E::Options(_) => RELINK_ERR_OPTIONS,
            E::SharedReceive(s) => Fail::from(s.clone()).status,
            E::NoPort(_) => RELINK_ERR_ARGUMENT,
            E::AddrInUse(_) => RELINK_ERR_ADDR_IN_USE,
            _ => RELINK_ERR_PROVIDER,
        };
        Fail::new(status, chain(&e))
    }
}

impl From<relink_rs::SubmitError> for Fail {
    fn from(e: relink_rs::SubmitError) -> Fail {
        use relink_rs::SubmitError as E;
        let status = match &e {
            E::NoSession(_) => RELINK_ERR_NO_SESSION,
            E::TooLarge { .. } => RELINK_ERR_TOO_LARGE,
            // `ops.rs` tells an unknown region (RELINK_ERR_NO_REGION) apart.
            E::BadLocal(_) => RELINK_ERR_RANGE,
            E::Misaligned { .. } => RELINK_ERR_MISALIGNED,
            E::WouldBlock { .. } => RELINK_ERR_AGAIN,
            _ => RELINK_ERR_SESSION,
        };
        Fail::new(status, chain(&e))
    }
}

impl From<relink_rs::RegionError> for Fail {
    fn from(e: relink_rs::RegionError) -> Fail {
        let status = match &e {
            relink_rs::RegionError::NoRegion(_) => RELINK_ERR_NO_REGION,
            // `NoSession`, and what a newer relink adds.
            _ => RELINK_ERR_NO_SESSION,
        };
        Fail::new(status, chain(&e))
    }
}

impl From<relink_rs::ResumeError> for Fail {
    fn from(e: relink_rs::ResumeError) -> Fail {
        let status = match &e {
            relink_rs::ResumeError::NoSession(_) => RELINK_ERR_NO_SESSION,
            relink_rs::ResumeError::NoSuchPath { .. } => RELINK_ERR_ARGUMENT,
            _ => RELINK_ERR_SESSION,
        };
        Fail::new(status, chain(&e))
    }
}

impl From<relink_rs::SharedReceiveError> for Fail {
    fn from(e: relink_rs::SharedReceiveError) -> Fail {
        use relink_rs::SharedReceiveError as E;
        let status = match &e {
            E::Full { .. } | E::InUse => RELINK_ERR_SESSION,
            _ => RELINK_ERR_OPTIONS,
        };
        Fail::new(status, chain(&e))
    }
}

impl From<relink_rs::SuspendError> for Fail {
    fn from(e: relink_rs::SuspendError) -> Fail {
        let status = match &e {
            relink_rs::SuspendError::NoSession(_) => RELINK_ERR_NO_SESSION,
            _ => RELINK_ERR_SESSION,
        };
        Fail::new(status, chain(&e))
    }
}

impl From<relink_rs::SetPolicyError> for Fail {
    fn from(e: relink_rs::SetPolicyError) -> Fail {
        let status = match &e {
            relink_rs::SetPolicyError::NoSession(_) => RELINK_ERR_NO_SESSION,
            _ => RELINK_ERR_OPTIONS,
        };
        Fail::new(status, chain(&e))
    }
}

impl From<relink_rs::RegisterError> for Fail {
    fn from(e: relink_rs::RegisterError) -> Fail {
        use relink_rs::RegisterError as E;
        let status = match &e {
            E::Empty | E::BadAccess => RELINK_ERR_ARGUMENT,
            E::Unknown(_) => RELINK_ERR_NO_REGION,
            E::InUse { .. } | E::InSharedReceive { .. } => RELINK_ERR_BUSY,
            // `Device`, and what a newer relink adds.
            _ => RELINK_ERR_PROVIDER,
        };
        Fail::new(status, chain(&e))
    }
}

impl From<relink_rs::CloseError> for Fail {
    fn from(e: relink_rs::CloseError) -> Fail {
        Fail::new(RELINK_ERR_NO_SESSION, chain(&e))
    }
}

/// Record `message` as this thread's last error.
fn set_last_error(message: &str) {
    // An interior NUL cannot be carried by a C string: cut there.
    let cut = message.split('\0').next().unwrap_or_default();
    let c = CString::new(cut).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Install, once, the panic hook that keeps librelink quiet: a panic
/// inside a librelink call (caught, it becomes `RELINK_ERR_INTERNAL`) prints
/// nothing unless `RELINK_LOG` is set; its location is kept for the error
/// message. Every other panic — the host application's own, on any thread —
/// goes to the hook that was installed before, as it did.
fn install_panic_hook() {
    static HOOK: Once = Once::new();
    // `set_hook` panics on a thread that is panicking: a call from a
    // destructor during an unwind of the host's installs it later.
    if std::thread::panicking() {
        return;
    }
    HOOK.call_once(|| {
        let log = std::env::var_os("RELINK_LOG").is_some_and(|v| !v.is_empty());
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let inside = INSIDE.try_with(|n| n.get() > 0).unwrap_or(false);
            if inside {
                let at = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()));
                let _ = PANIC_AT.try_with(|p| {
                    if let Ok(mut p) = p.try_borrow_mut() {
                        *p = at;
                    }
                });
            }
            if !inside || log {
                previous(info);
            }
        }));
    });
}

/// This thread is inside a librelink call while it lives.
struct Inside;

impl Inside {
    fn enter() -> Inside {
        install_panic_hook();
        let _ = INSIDE.try_with(|n| n.set(n.get() + 1));
        Inside
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Run `body` as a librelink call: a panic in it is caught, printed by
/// nobody (unless `RELINK_LOG` is set), and returned as its message, with
/// where it happened.
pub(crate) fn catch<R>(body: impl FnOnce() -> R) -> Result<R, String> {
    let _inside = Inside::enter();
    let _ = PANIC_AT.try_with(|p| p.try_borrow_mut().map(|mut p| *p = None));
    catch_unwind(AssertUnwindSafe(body)).map_err(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        // Dropping the payload runs its code: keep a panic there inside.
        let _ = catch_unwind(AssertUnwindSafe(move || drop(panic)));
        let at = PANIC_AT
            .try_with(|p| p.try_borrow_mut().ok().and_then(|mut p| p.take()))
            .ok()
            .flatten();
        match at {
            Some(at) => format!("internal error: relink panicked at {at}: {what}"),
            None => format!("internal error: relink panicked: {what}"),
        }
    })
}

/// Run an exported function's body: its error becomes the status and this
/// thread's last error; a panic becomes `RELINK_ERR_INTERNAL`.
pub(crate) fn guard(body: impl FnOnce() -> Result<relink_status, Fail>) -> relink_status {
    match catch(body) {
        Ok(Ok(status)) => status,
        Ok(Err(fail)) => {
            set_last_error(&fail.message);
            fail.status
        }
        Err(message) => {
            set_last_error(&message);
            RELINK_ERR_INTERNAL
        }
    }
}

/// Run a `*_free` function's body (it returns nothing): a panic in it is
/// caught and kept as this thread's last error.
pub(crate) fn guard_free(body: impl FnOnce()) {
    if let Err(message) = catch(body) {
        set_last_error(&message);
    }
}

/// The message of the last call on this thread that returned an error (a
/// negative status); an empty string if none did. The pointer stays valid
/// until the next call into librelink on this thread; copy it to keep it.
#[no_mangle]
pub extern "C" fn relink_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// This librelink's version, `"MAJOR.MINOR.PATCH"`: relink's, the one
/// `pkg-config --modversion relink` gives. A static string.
#[no_mangle]
pub extern "C" fn relink_version() -> *const c_char {
    const VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => panic!("the crate version has a NUL"),
        };
    VERSION.as_ptr()
}

/// The name of a status (`"RELINK_ERR_ARGUMENT"`, ...), a static string; an
/// unknown value gives `"RELINK_UNKNOWN_STATUS"`.
#[no_mangle]
pub extern "C" fn relink_status_name(status: i32) -> *const c_char {
    let name: &'static CStr = match status {
        0 => c"RELINK_OK",
        1 => c"RELINK_EMPTY",
        -1 => c"RELINK_ERR_ARGUMENT",
        -2 => c"RELINK_ERR_NO_SESSION",
        -3 => c"RELINK_ERR_NO_REGION",
        -4 => c"RELINK_ERR_SESSION",
        -5 => c"RELINK_ERR_OPTIONS",
        -6 => c"RELINK_ERR_PROVIDER",
        -7 => c"RELINK_ERR_TRUNCATED",
        -8 => c"RELINK_ERR_UNSUPPORTED",
        -9 => c"RELINK_ERR_IO",
        -10 => c"RELINK_ERR_ADDR_IN_USE",
        -11 => c"RELINK_ERR_TOO_LARGE",
        -12 => c"RELINK_ERR_RANGE",
        -13 => c"RELINK_ERR_MISALIGNED",
        -14 => c"RELINK_ERR_AGAIN",
        -15 => c"RELINK_ERR_BUSY",
        -100 => c"RELINK_ERR_INTERNAL",
        _ => c"RELINK_UNKNOWN_STATUS",
    };
    name.as_ptr()
}

/// A required pointer argument, or `RELINK_ERR_ARGUMENT` naming it.
pub(crate) fn non_null<T>(p: *const T, name: &str) -> Result<*const T, Fail> {
    if p.is_null() {
        Err(Fail::arg(format!("`{name}` is NULL")))
    } else {
        Ok(p)
    }
}

/// A C string argument as UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
pub(crate) unsafe fn c_str<'a>(p: *const c_char, name: &str) -> Result<&'a str, Fail> {
    let p = non_null(p, name)?;
    // SAFETY: non-NULL, and the caller guarantees a NUL-terminated string
    // that outlives the call.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| Fail::arg(format!("`{name}` is not UTF-8")))
}

/// An optional C string argument (NULL: `None`).
///
/// # Safety
/// As [`c_str`].
pub(crate) unsafe fn opt_c_str<'a>(p: *const c_char, name: &str) -> Result<Option<&'a str>, Fail> {
    if p.is_null() {
        Ok(None)
    } else {
        // SAFETY: as this function's contract.
        unsafe { c_str(p, name) }.map(Some)
    }
}

/// Store `v` through an out-pointer.
///
/// # Safety
/// `p` is NULL or valid for a write of `T`.
pub(crate) unsafe fn put<T>(p: *mut T, name: &str, v: T) -> Result<(), Fail> {
    non_null(p, name)?;
    // SAFETY: non-NULL and valid for writes by the caller's contract.
    unsafe { p.write(v) };
    Ok(())
}

/// Store `v` through an optional out-pointer (NULL: not wanted).
///
/// # Safety
/// `p` is NULL or valid for a write of `T`.
pub(crate) unsafe fn put_opt<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: non-NULL and valid for writes by the caller's contract.
        unsafe { p.write(v) };
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;
    use std::process::Command;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn last_error() -> String {
        // SAFETY: `relink_last_error` returns a NUL-terminated string valid
        // until the next call on this thread.
        unsafe { CStr::from_ptr(relink_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn the_version_is_relinks() {
        // SAFETY: a static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(relink_version()) };
        assert_eq!(v.to_str(), Ok(env!("CARGO_PKG_VERSION")));
    }

    /// Set in the child process of [`caught_panics_print_nothing`].
    const CHILD: &str = "RELINK_C_PANIC_CHILD";

    /// The child's half of [`caught_panics_print_nothing`], run alone in a
    /// process of its own (the test binary run again with
    /// [`CHILD`] set):
    /// the host's panic hook, set before librelink's first call, sees the
    /// host's own panics (on any thread) and none of relink's, unless
    /// `RELINK_LOG` is set; relink's panic becomes `RELINK_ERR_INTERNAL`
    /// with its message and location.
    fn panics_in_a_child() {
        static HOST: AtomicUsize = AtomicUsize::new(0);
        std::panic::set_hook(Box::new(|info| {
            HOST.fetch_add(1, Ordering::SeqCst);
            eprintln!("host hook: {}", info.payload_as_str().unwrap_or("?"));
        }));
        let log = usize::from(std::env::var_os("RELINK_LOG").is_some());
        assert_eq!(guard(|| panic!("boom")), RELINK_ERR_INTERNAL);
        let msg = last_error();
        assert!(
            msg.starts_with("internal error: relink panicked at ")
                && msg.contains("status.rs:")
                && msg.ends_with(": boom"),
            "{msg}"
        );
        assert_eq!(HOST.load(Ordering::SeqCst), log);
        guard_free(|| panic!("boom in a free"));
        assert!(last_error().ends_with(": boom in a free"));
        assert_eq!(HOST.load(Ordering::SeqCst), 2 * log);
        // The host's own panics, outside librelink: its hook has them.
        let _ = std::panic::catch_unwind(|| panic!("the host's own"));
        assert_eq!(HOST.load(Ordering::SeqCst), 2 * log + 1);
        let _ = std::thread::spawn(|| panic!("the host's other thread")).join();
        assert_eq!(HOST.load(Ordering::SeqCst), 2 * log + 2);
        println!("child: ok");
    }

    /// A panic inside a librelink call prints nothing (the default hook
    /// would write it to stderr) unless `RELINK_LOG` is set; the host's
    /// own panics still reach its hook.
    #[test]
    fn caught_panics_print_nothing() {
        if std::env::var_os(CHILD).is_some() {
            return panics_in_a_child();
        }
        for log in [false, true] {
            let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
            cmd.env(CHILD, "1").args([
                "status::tests::caught_panics_print_nothing",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ]);
            if log {
                cmd.env("RELINK_LOG", "1");
            } else {
                cmd.env_remove("RELINK_LOG");
            }
            let out = cmd.output().expect("run the child");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && stdout.contains("child: ok"),
                "log {log}: {}\n{stdout}\n{stderr}",
                out.status
            );
            let mut want = vec![
                "host hook: the host's own",
                "host hook: the host's other thread",
            ];
            if log {
                want.splice(0..0, ["host hook: boom", "host hook: boom in a free"]);
            }
            let got: Vec<&str> = stderr.lines().collect();
            assert_eq!(got, want, "log {log}: stderr:\n{stderr}");
        }
    }
}
