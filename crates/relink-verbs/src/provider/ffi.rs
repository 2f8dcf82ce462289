//! Small helpers at the C boundary: [`Ptr`] (a rdma-core object pointer
//! the provider's tables hold), `errno` of the last call, logging of
//! ignored return codes, socket addresses between `std` and C, and
//! nonblocking fds.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::os::raw::c_int;
use std::ptr::NonNull;

use relink_verbs_sys as sys;

use crate::errno::{self, codes};

/// `errno` of the call that just failed (`EIO` if the OS reports none).
pub(super) fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(codes::EIO)
}

/// Log, at debug level, a nonzero return code that is ignored: a release
/// goes ahead anyway (and fails as expected on a lost device), and a failed
/// CQ arming is only logged.
pub(super) fn log_rc(what: &str, rc: c_int) {
    if rc != 0 {
        tracing::debug!(target: "relink_verbs", call = what, error = %errno::describe(rc.abs()), "ignored during release");
    }
}

/// A non-null pointer to an rdma-core object.
pub(super) struct Ptr<T>(NonNull<T>);

impl<T> Clone for Ptr<T> {
    fn clone(&self) -> Ptr<T> {
        *self
    }
}

impl<T> Copy for Ptr<T> {}

// SAFETY: rdma-core objects may be used from any thread (libibverbs and
// librdmacm are thread-safe); every use here happens under the provider's
// lock, and an object is destroyed exactly once, after which its `Ptr` is
// dropped from the tables — or, for the objects of a lost device's context,
// taken out of the tables under the lock and destroyed by the one thread
// that holds them then (`loss::Released`).
unsafe impl<T> Send for Ptr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Ptr<T> {}

impl<T> Ptr<T> {
    /// `None` for a null pointer (a failed create).
    pub(super) fn new(p: *mut T) -> Option<Ptr<T>> {
        NonNull::new(p).map(Ptr)
    }
    /// The raw pointer, for rdma-core calls.
    pub(super) fn get(self) -> *mut T {
        self.0.as_ptr()
    }
    /// The address: the key of the `*_by_ptr` tables.
    pub(super) fn key(self) -> usize {
        self.0.as_ptr() as usize
    }
}

impl<T> std::fmt::Debug for Ptr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:p}", self.0)
    }
}

/// A C socket address as `std`'s; `None` for null or a family other than
/// IPv4 and IPv6.
///
/// # Safety
/// `p` is null or points to a socket address valid for its family.
pub(super) unsafe fn sockaddr_to_std(p: *const libc::sockaddr) -> Option<SocketAddr> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees `p` points to a sockaddr.
    let family = c_int::from(unsafe { (*p).sa_family });
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let s = unsafe { &*p.cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
                u16::from_be(s.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let s = unsafe { &*p.cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(s.sin6_addr.s6_addr),
                u16::from_be(s.sin6_port),
                s.sin6_flowinfo,
                s.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// A socket address in C form.
pub(super) struct CAddr {
    storage: libc::sockaddr_storage,
}

impl CAddr {
    pub(super) fn new(a: SocketAddr) -> CAddr {
        // SAFETY: sockaddr_storage is plain data; all-zero is valid.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        match a {
            SocketAddr::V4(v4) => {
                let s = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: v4.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from(*v4.ip()).to_be(),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is large and aligned enough for
                // any socket address.
                unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), s) };
            }
            SocketAddr::V6(v6) => {
                let s = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: v6.port().to_be(),
                    sin6_flowinfo: v6.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: v6.ip().octets(),
                    },
                    sin6_scope_id: v6.scope_id(),
                };
                // SAFETY: as above.
                unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), s) };
            }
        }
        CAddr { storage }
    }

    pub(super) fn as_ptr(&mut self) -> *mut sys::sockaddr {
        (&mut self.storage as *mut libc::sockaddr_storage).cast()
    }
}

/// Set `O_NONBLOCK` on `fd`: the event thread reads each of its fds until
/// there is nothing left.
pub(super) fn set_nonblocking(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl on an fd we own (or rdma-core owns for us) with
    // standard flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
