//! libc at the provider's edges: socket addresses between `std` and C,
//! nonblocking fds, `poll`, eventfds, and the interfaces' addresses.

use std::ffi::CStr;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::raw::c_int;

use relink_verbs_sys as sys;

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
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl on a borrowed (open) fd with standard flags.
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

/// `poll(2)` on `fds` for at most `timeout_ms`: the number of fds with
/// events, 0 on timeout, negative on failure. (An fd in the set that was
/// closed meanwhile is reported `POLLNVAL`, or polls another file: `poll`
/// only reads it.)
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: c_int) -> c_int {
    // SAFETY: `fds` is a valid array of pollfd of that length.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) }
}

/// A new nonblocking, close-on-exec eventfd.
pub(crate) fn new_eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd has no preconditions.
    let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if efd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `efd` is a fresh fd nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(efd) })
}

/// Add 1 to eventfd `fd`'s counter (make it readable); errors are ignored
/// (a full counter is readable anyway).
pub(crate) fn write_eventfd(fd: BorrowedFd<'_>) {
    let one: u64 = 1;
    // SAFETY: writing 8 bytes from a live u64 to a borrowed (open) fd.
    let _ = unsafe {
        libc::write(
            fd.as_raw_fd(),
            (&one as *const u64).cast(),
            std::mem::size_of::<u64>(),
        )
    };
}

/// Read (reset) eventfd `fd`'s counter; errors are ignored (nonblocking:
/// nothing to read).
pub(crate) fn read_eventfd(fd: BorrowedFd<'_>) {
    let mut buf = 0u64;
    // SAFETY: reading 8 bytes into a live u64 from a borrowed (open) fd.
    let _ = unsafe {
        libc::read(
            fd.as_raw_fd(),
            (&mut buf as *mut u64).cast(),
            std::mem::size_of::<u64>(),
        )
    };
}

/// Every address of every network interface (`getifaddrs`): `f` is called
/// with the interface's name, the address and its netmask, in the list's
/// order; nothing if the list cannot be had.
pub(crate) fn interface_addrs(mut f: impl FnMut(String, SocketAddr, Option<SocketAddr>)) {
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `ifa` with a list freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return;
    }
    let mut cur = ifa;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive
        // until freeifaddrs.
        let node = unsafe { &*cur };
        cur = node.ifa_next;
        if node.ifa_addr.is_null() || node.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(node.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr and ifa_netmask point to socket addresses of the
        // family in sa_family (or are null), owned by the list.
        let (addr, mask) = unsafe {
            (
                sockaddr_to_std(node.ifa_addr.cast()),
                sockaddr_to_std(node.ifa_netmask.cast()),
            )
        };
        let Some(addr) = addr else { continue };
        f(name, addr, mask);
    }
    // SAFETY: the list came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(ifa) };
}
