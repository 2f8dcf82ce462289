//! The `NETLINK_RDMA` socket: opening it, waiting for it, receiving one
//! datagram, and the errors of each.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Instant;

use netlink_sys::Socket;

use super::consts::NETLINK_RDMA;

/// Receive buffer size: more than a netlink dump datagram (at most 32 KiB).
pub(crate) const RECV_BUF: usize = 64 * 1024;

/// Why a monitor could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// This kernel cannot provide it; fall back to another backend.
    #[error("unsupported: {reason}")]
    Unsupported {
        /// What was missing.
        reason: String,
    },
    /// A system call failed for another reason.
    #[error("{context}: {source}")]
    Io {
        /// The step that failed.
        context: &'static str,
        /// The system call's error.
        #[source]
        source: io::Error,
    },
}

/// Why a receive failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecvError {
    /// The socket buffer overflowed (`ENOBUFS`): events were lost, the
    /// caller must resynchronise (list the devices again).
    #[error("netlink receive buffer overrun: events lost")]
    Overrun,
    /// Nothing to read on a non-blocking socket.
    #[error("no datagram ready")]
    WouldBlock,
    /// Another socket error.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// One datagram: bytes in `buf`, the sender's port. Truncation (a datagram
/// larger than the buffer) is an error.
pub(crate) fn recv_datagram(sock: &Socket, buf: &mut Vec<u8>) -> Result<u32, RecvError> {
    buf.clear();
    buf.reserve(RECV_BUF);
    match sock.recv_from(buf, libc::MSG_TRUNC) {
        Ok((n, addr)) => {
            if n > buf.len() {
                return Err(RecvError::Io(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("netlink datagram of {n} bytes truncated to {}", buf.len()),
                )));
            }
            Ok(addr.port_number())
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => Err(RecvError::Overrun),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(RecvError::WouldBlock),
        Err(e) => Err(RecvError::Io(e)),
    }
}

pub(super) fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPROTONOSUPPORT | libc::EINVAL | libc::ENOENT | libc::EPERM | libc::EOPNOTSUPP)
    )
}

pub(super) fn open_rdma_socket() -> Result<Socket, OpenError> {
    let mut sock = Socket::new(NETLINK_RDMA).map_err(|e| {
        if e.raw_os_error() == Some(libc::EPROTONOSUPPORT) {
            OpenError::Unsupported {
                reason: format!(
                    "NETLINK_RDMA is not available ({e}): ib_core is not loaded or the kernel has no RDMA"
                ),
            }
        } else {
            OpenError::Io {
                context: "socket(NETLINK_RDMA)",
                source: e,
            }
        }
    })?;
    sock.bind_auto().map_err(|e| OpenError::Io {
        context: "bind(NETLINK_RDMA)",
        source: e,
    })?;
    Ok(sock)
}

pub(super) fn wait_readable(fd: BorrowedFd<'_>, deadline: Instant) -> io::Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        let ts = Timespec::try_from(left).unwrap_or(Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        });
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}
