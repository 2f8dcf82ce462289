//! libfabric's boundary: the provider structure `fi_prov_ini` returns,
//! the objects libfabric's inline calls jump through (each a `#[repr(C)]`
//! struct whose first field is libfabric's `fid_*`), and the entry points
//! of their ops tables. Every `unsafe` of the crate is in this module;
//! each entry point reads its pointers, calls the safe layer
//! ([`crate::fabric::Fabric`], [`crate::info`]) and writes the answer back.
//!
//! Rules every entry point follows:
//! - a panic never crosses into libfabric: it becomes `-FI_EOTHER`;
//! - an errno is returned negative, as libfabric's calls do;
//! - pointers are checked for NULL where libfabric lets the caller pass
//!   one; an object pointer is the provider's own (libfabric calls an
//!   object's ops only through the object).

pub mod memory;
mod nosys;
#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs,
    clippy::all
)]
pub mod sys;

mod atomic;
mod data;
mod domain;
mod endpoint;
// The fuzz driver of the entry points (`crate::fuzzing::run`).
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod info;
mod queues;

use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use sys::*;

use crate::fabric::{Fabric, FiError};
use crate::params::{Params, DEFS};

/// `fi_provider` must be writable: libfabric keeps its context in it.
struct ProviderCell(std::cell::UnsafeCell<fi_provider>);
// SAFETY: libfabric reads and writes the provider structure from the
// thread that loads providers, under its own lock; this crate writes it
// once, before handing its pointer out, and never again.
unsafe impl Sync for ProviderCell {}
// SAFETY: as above; its pointers are to statics.
unsafe impl Send for ProviderCell {}

static PROVIDER: OnceLock<ProviderCell> = OnceLock::new();
static NAME: &CStr = c"relink";

/// The provider's entry point, which libfabric's loader calls after
/// `dlopen` of this library.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut fi_provider {
    let cell = PROVIDER.get_or_init(|| {
        ProviderCell(std::cell::UnsafeCell::new(fi_provider {
            version: crate::info::provider_version(),
            fi_version: crate::info::API_VERSION,
            context: fi_context {
                internal: [std::ptr::null_mut(); 4],
            },
            name: NAME.as_ptr(),
            getinfo: Some(info::getinfo),
            fabric: Some(domain::fabric),
            cleanup: Some(cleanup),
        }))
    });
    let p = cell.0.get();
    define_params(p);
    p
}

extern "C" fn cleanup() {}

/// Define the `FI_RELINK_*` parameters with libfabric (`fi_info -e`
/// lists them), through `fi_param_define` of the libfabric this library
/// was loaded by.
fn define_params(provider: *mut fi_provider) {
    type Define = unsafe extern "C" fn(
        *const fi_provider,
        *const c_char,
        fi_param_type,
        *const c_char,
        ...
    ) -> c_int;
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks
    // the symbol up.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"fi_param_define".as_ptr()) };
    if sym.is_null() {
        return;
    }
    // SAFETY: `fi_param_define` has this signature in every libfabric 1.x
    // (rdma/providers/fi_prov.h).
    let define: Define = unsafe { std::mem::transmute::<*mut c_void, Define>(sym) };
    static STRINGS: OnceLock<Vec<(std::ffi::CString, std::ffi::CString)>> = OnceLock::new();
    let strings = STRINGS.get_or_init(|| {
        DEFS.iter()
            .filter_map(|d| {
                Some((
                    std::ffi::CString::new(d.name).ok()?,
                    std::ffi::CString::new(d.help).ok()?,
                ))
            })
            .collect()
    });
    for (name, help) in strings {
        // SAFETY: the provider structure lives for the process; name and
        // help are static NUL-terminated strings libfabric copies.
        unsafe { define(provider, name.as_ptr(), FI_PARAM_STRING, help.as_ptr()) };
    }
}

/// The parameters from the environment (`FI_RELINK_<NAME>`), as
/// `fi_param_get` reads them. A value that does not parse is said on
/// stderr, once per process, whatever `FI_LOG_LEVEL` says: the provider
/// then answers nothing, and the variable set by mistake must be named.
fn params() -> Result<Params, FiError> {
    Params::read(|name| std::env::var(format!("FI_RELINK_{}", name.to_uppercase())).ok()).map_err(
        |e| {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("libfabric:relink: {e}"));
            FiError::new(FI_EINVAL, e.to_string())
        },
    )
}

/// Run an entry point's body: a panic becomes `-FI_EOTHER`.
fn guard(body: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(-(FI_EOTHER as c_int))
}

/// [`guard`] for the calls that return a `ssize_t`.
fn sguard(body: impl FnOnce() -> isize) -> isize {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(-(FI_EOTHER as isize))
}

/// A result as libfabric's return value: 0 or the negative errno.
fn ret(r: Result<(), FiError>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            log(&e);
            -(e.errno as c_int)
        }
    }
}

/// A result as a ssize_t return value.
fn sret(r: Result<(), FiError>) -> isize {
    ret(r) as isize
}

/// An error the caller only sees as an errno: said in words on stderr when
/// `FI_LOG_LEVEL` asks for warnings (libfabric's own switch).
fn log(e: &FiError) {
    if e.errno == FI_EAGAIN as u32 {
        return;
    }
    static ON: OnceLock<bool> = OnceLock::new();
    let on = *ON.get_or_init(|| {
        std::env::var("FI_LOG_LEVEL")
            .map(|v| {
                matches!(
                    v.to_lowercase().as_str(),
                    "warn" | "info" | "debug" | "trace"
                )
            })
            .unwrap_or(false)
    });
    if on {
        eprintln!("libfabric:relink: {e}");
    }
}

/// The object behind a fid: every fid the provider hands out is the first
/// field of a `#[repr(C)]` object of the provider's.
///
/// # Safety
/// `fid` is NULL or was made by this provider as the start of a `T`, and
/// is not closed.
unsafe fn obj<'a, T>(fid: *const c_void) -> Result<&'a T, FiError> {
    if fid.is_null() {
        return Err(FiError::new(FI_EINVAL, "a NULL object"));
    }
    // SAFETY: the caller's contract: `fid` starts a live `T`.
    Ok(unsafe { &*fid.cast::<T>() })
}

/// A NUL-terminated string of the caller's, if any.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string valid for the call.
unsafe fn c_str<'a>(s: *const c_char) -> Option<&'a str> {
    if s.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(s) }.to_str().ok()
}

/// A fresh zeroed fid header.
fn fid_header(class: u32, context: *mut c_void, ops: *const fi_ops) -> fid {
    fid {
        fclass: class as usize,
        context,
        ops: ops.cast_mut(),
    }
}

/// An ops table in a static: libfabric only reads through its pointer.
struct Ops<T>(T);
// SAFETY: the tables hold only function pointers and sizes, never
// written after their initialisation.
unsafe impl<T> Sync for Ops<T> {}

impl<T> Ops<T> {
    fn ptr(&'static self) -> *mut T {
        (&self.0 as *const T).cast_mut()
    }
}

/// The fabric an object belongs to (every object holds one).
type Shared = Arc<Fabric>;
