//! Request and reply on a fresh socket: whether the kernel has the monitor
//! ([`probe_monitor`]) and every RDMA device with its kernel index
//! ([`list_devices`]).

use std::io;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use super::encode::{device_dump_request, sys_get_request};
use super::message::{parse_datagram, NldevDevice, RdmaMessage};
use super::parse::NlMsgHeader;
use super::socket::{
    is_unsupported, open_rdma_socket, recv_datagram, wait_readable, OpenError, RecvError, RECV_BUF,
};

/// Sends `request` on a fresh `NETLINK_RDMA` socket and collects the replies
/// up to `NLMSG_DONE` or the acknowledgement.
fn query(request: &[u8], timeout: Duration) -> Result<Vec<RdmaMessage>, OpenError> {
    let sock = open_rdma_socket()?;
    let seq = NlMsgHeader::parse(request).map(|h| h.seq).unwrap_or(0);
    let io = |context| move |source| OpenError::Io { context, source };
    sock.send(request, 0).map_err(|e| {
        if is_unsupported(&e) {
            OpenError::Unsupported {
                reason: format!("RDMA netlink request refused: {e}"),
            }
        } else {
            OpenError::Io {
                context: "send(NETLINK_RDMA)",
                source: e,
            }
        }
    })?;
    let deadline = Instant::now() + timeout;
    let mut buf = Vec::with_capacity(RECV_BUF);
    let mut out = Vec::new();
    loop {
        if !wait_readable(sock.as_fd(), deadline).map_err(io("poll(NETLINK_RDMA)"))? {
            return Err(OpenError::Io {
                context: "waiting for the RDMA netlink reply",
                source: io::ErrorKind::TimedOut.into(),
            });
        }
        let from = match recv_datagram(&sock, &mut buf) {
            Ok(p) => p,
            Err(RecvError::Io(e)) => return Err(io("recv(NETLINK_RDMA)")(e)),
            Err(RecvError::WouldBlock) => continue,
            Err(RecvError::Overrun) => {
                return Err(io("recv(NETLINK_RDMA)")(io::Error::from_raw_os_error(
                    libc::ENOBUFS,
                )))
            }
        };
        if from != 0 {
            continue;
        }
        for m in parse_datagram(&buf) {
            let (hdr, msg) = m.map_err(|e| OpenError::Io {
                context: "parsing the RDMA netlink reply",
                source: io::Error::new(io::ErrorKind::InvalidData, e),
            })?;
            if hdr.seq != seq {
                continue;
            }
            match msg {
                RdmaMessage::Done => return Ok(out),
                RdmaMessage::Error { errno: 0 } => return Ok(out),
                RdmaMessage::Error { errno } => {
                    let e = io::Error::from_raw_os_error(errno);
                    return Err(if is_unsupported(&e) {
                        OpenError::Unsupported {
                            reason: format!("RDMA netlink request refused: {e}"),
                        }
                    } else {
                        OpenError::Io {
                            context: "RDMA netlink request",
                            source: e,
                        }
                    });
                }
                m => out.push(m),
            }
        }
    }
}

/// How long a request waits for the kernel's reply.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether this kernel has the RDMA monitor: asks `RDMA_NLDEV_CMD_SYS_GET`
/// and looks for `RDMA_NLDEV_SYS_ATTR_MONITOR_MODE` = 1, as iproute2's
/// `mon_is_supported` does. `Err(Unsupported)` says why not.
pub fn probe_monitor() -> Result<(), OpenError> {
    let replies = query(&sys_get_request(1), QUERY_TIMEOUT)?;
    let mode = replies.iter().find_map(|m| match m {
        RdmaMessage::Sys { monitor_mode } => Some(*monitor_mode),
        _ => None,
    });
    match mode {
        Some(Some(m)) if m != 0 => Ok(()),
        Some(_) => Err(OpenError::Unsupported {
            reason: "the kernel has no RDMA monitor (RDMA_NLDEV_SYS_ATTR_MONITOR_MODE absent; needs >= 6.12)".into(),
        }),
        None => Err(OpenError::Unsupported {
            reason: "no RDMA_NLDEV_CMD_SYS_GET reply".into(),
        }),
    }
}

/// Every RDMA device of this network namespace, from a
/// `RDMA_NLDEV_CMD_GET` dump (any kernel with RDMA netlink, >= 4.16): the
/// only place user space can read the kernel index from.
pub fn list_devices() -> Result<Vec<NldevDevice>, OpenError> {
    Ok(query(&device_dump_request(1), QUERY_TIMEOUT)?
        .into_iter()
        .filter_map(|m| match m {
            RdmaMessage::Device(d) => Some(d),
            _ => None,
        })
        .collect())
}
