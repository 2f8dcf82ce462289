//! [`NetlinkMonitor`]: a `NETLINK_RDMA` socket joined to the monitor's
//! multicast group, yielding its events.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use netlink_sys::Socket;

use super::consts::RDMA_NL_GROUP_NOTIFY;
use super::message::{parse_datagram, MonitorEvent, RdmaMessage};
use super::parse::ParseError;
use super::query::probe_monitor;
use super::socket::{
    is_unsupported, open_rdma_socket, recv_datagram, OpenError, RecvError, RECV_BUF,
};

/// A `NETLINK_RDMA` socket joined to `RDMA_NL_GROUP_NOTIFY`.
///
/// [`open`](NetlinkMonitor::open) joins the group first and then probes for
/// support, so no event between the two is lost.
#[derive(Debug)]
pub struct NetlinkMonitor {
    sock: Socket,
    buf: Vec<u8>,
}

impl NetlinkMonitor {
    /// Opens the socket, joins the group and checks that the kernel has the
    /// monitor. `Err(OpenError::Unsupported)` means: fall back.
    pub fn open() -> Result<NetlinkMonitor, OpenError> {
        let sock = open_rdma_socket()?;
        sock.add_membership(RDMA_NL_GROUP_NOTIFY).map_err(|e| {
            if is_unsupported(&e) {
                OpenError::Unsupported {
                    reason: format!("cannot join RDMA_NL_GROUP_NOTIFY: {e}"),
                }
            } else {
                OpenError::Io {
                    context: "join RDMA_NL_GROUP_NOTIFY",
                    source: e,
                }
            }
        })?;
        // Fewer overruns on bursts (a replug sends several events); the
        // kernel caps it at net.core.rmem_max.
        let _ = sock.set_rx_buf_sz(1i32 << 20);
        probe_monitor()?;
        Ok(NetlinkMonitor {
            sock,
            buf: Vec::with_capacity(RECV_BUF),
        })
    }

    /// Makes [`recv`](NetlinkMonitor::recv) return
    /// [`RecvError::WouldBlock`] instead of waiting.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.sock.set_non_blocking(nonblocking)
    }

    /// Reads one datagram and returns its monitor events (usually one).
    /// Messages not from the kernel and messages of other types are
    /// skipped; a malformed message is returned as its parse error.
    pub fn recv(&mut self) -> Result<Vec<Result<MonitorEvent, ParseError>>, RecvError> {
        let from = recv_datagram(&self.sock, &mut self.buf)?;
        if from != 0 {
            return Ok(Vec::new());
        }
        Ok(parse_datagram(&self.buf)
            .filter_map(|m| match m {
                Ok((_, RdmaMessage::Monitor(ev))) => Some(Ok(ev)),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })
            .collect())
    }
}

impl AsFd for NetlinkMonitor {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}
