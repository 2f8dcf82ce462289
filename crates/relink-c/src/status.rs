//! Status and errors: every function returns a `relink_status` (the
//! `*_free` functions return nothing); after an error, `relink_last_error`
//! says what went wrong in one line.
//!
//! This section opens `relink.h` because every declaration after it
//! returns a `relink_status`. The rest of the crate takes from here the
//! guard every exported function runs its body in (no panic crosses into
//! C) and the helpers that read C arguments and write out-pointers.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a call did. Every function of the API returns one; `RELINK_OK`
/// and `RELINK_EMPTY` are not errors, every negative value is, and
/// `relink_last_error` then says what went wrong in one line.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_status {
    /// Done.
    RELINK_OK = 0,
    /// A `relink_poll_*` or `relink_accept` call found nothing waiting (no
    /// output was taken; not an error).
    RELINK_EMPTY = 1,
    /// An argument is invalid: a NULL pointer where one is needed, a string
    /// that is not UTF-8 or not an address, an unknown enum value.
    RELINK_ERR_ARGUMENT = -1,
    /// The node has no such session: never made, or ended and reaped.
    RELINK_ERR_NO_SESSION = -2,
    /// The session has no such region.
    RELINK_ERR_NO_REGION = -3,
    /// The session refused the operation: it ended, the message is larger
    /// than `max_message`, a local range is outside its region (the message
    /// says which).
    RELINK_ERR_SESSION = -4,
    /// The options are invalid (the message names the key).
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
    /// A bug in relink: it panicked. The node is left as it was at the
    /// panic; free it.
    RELINK_ERR_INTERNAL = -100,
}

pub use relink_status::*;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
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
        Fail::new(RELINK_ERR_OPTIONS, chain(&e))
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
        let status = match &e {
            relink_rs::SubmitError::NoSession(_) => RELINK_ERR_NO_SESSION,
            _ => RELINK_ERR_SESSION,
        };
        Fail::new(status, chain(&e))
    }
}

impl From<relink_rs::RegionError> for Fail {
    fn from(e: relink_rs::RegionError) -> Fail {
        let status = match &e {
            relink_rs::RegionError::NoRegion(_) => RELINK_ERR_NO_REGION,
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

/// Run an exported function's body: its error becomes the status and this
/// thread's last error; a panic becomes `RELINK_ERR_INTERNAL`.
pub(crate) fn guard(body: impl FnOnce() -> Result<relink_status, Fail>) -> relink_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(status)) => status,
        Ok(Err(fail)) => {
            set_last_error(&fail.message);
            fail.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            set_last_error(&format!("internal error (relink panicked): {what}"));
            RELINK_ERR_INTERNAL
        }
    }
}

/// The message of the last call on this thread that returned an error (a
/// negative status); an empty string if none did. The pointer stays valid
/// until the next call into librelink on this thread; copy it to keep it.
#[no_mangle]
pub extern "C" fn relink_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
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
