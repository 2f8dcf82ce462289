//! Same-host transfers of the TCP fabric: a WRITE's or READ response's
//! bytes moved by one cross-process copy (`process_vm_readv`) instead of
//! through the TCP stream, as libfabric's shm provider moves large
//! messages between processes.
//!
//! Through the stream, a transfer's bytes are copied four times (the
//! sender's payload into the socket, out of it into the receiver's
//! payload, and the payload's own copy on each side) and every byte wakes
//! the stream's threads. Between two processes of one host the receiver
//! can read the sender's payload itself.
//!
//! The protocol, per stream (frames of [`crate::wire`]'s `link.rs`):
//!
//! 1. Each end's first frame is a [`Hello`]: its pid, and the address and
//!    value of an *alive word* of this stream's end.
//! 2. An end checks that the pid holds the socket at the other end of the
//!    stream (the peer's socket, found by its addresses with the kernel's
//!    `sock_diag`, is among the pid's open files), so the pid is the
//!    peer and not another process it names, and that it can read the
//!    alive word there. Then it answers `DirectOk`. Only after the peer's
//!    `DirectOk` does an end send payloads of at least [`DIRECT_MIN`]
//!    bytes as [`RemoteData`]: it keeps a clone of the payload (a loan)
//!    until the peer's `Release`.
//! 3. The receiver reads the bytes, then the sender's alive word. The
//!    sender clears the alive word before it lets its loans go (when its
//!    end of the stream is dropped), so a word that still holds its value
//!    after the read proves the bytes read were the loan's. Anything else
//!    drops the connection, as a broken stream does.
//!
//! The receiver only ever reads the sender's memory, never writes it, so no
//! failure of this path can corrupt the sender, and a peer can only make
//! the receiver read the peer's own memory. Without the permission
//! (`ptrace`'s rules: another user, Yama's `ptrace_scope`, a seccomp
//! policy), across network or pid namespaces (the peer's socket is not in
//! this namespace's table, or its pid is another's), or with
//! `RELINK_SOFT_SAME_HOST=0`, every payload goes through the stream.

use std::collections::VecDeque;
use std::io::IoSliceMut;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;

use crate::payload::Payload;
use crate::wire::{Hello, RemoteData};

/// Payloads from this size on are lent instead of written to the stream.
/// A loan costs two `process_vm_readv` calls (pinning the pages read) and
/// a `Release` frame. WRITEs between two `relink perf` processes (depth
/// 32, alternated runs) moved, lent, 0.61–0.67 × the stream's bytes per
/// second at 8 KiB and 0.60–0.89 × at 16 KiB; 1.10–1.44 × at 32 KiB,
/// 1.43–1.58 × at 64 KiB and 1.62–1.69 × at 128 KiB.
pub const DIRECT_MIN: usize = 32 * 1024;

/// Alive words in the process: streams beyond this many at once go
/// through the stream only.
const SLOTS: usize = 4096;

/// The environment variable that turns same-host transfers off (`0`).
pub const ENV: &str = "RELINK_SOFT_SAME_HOST";

static ALIVE: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);
static FREE_SLOTS: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static NEXT_GEN: AtomicU64 = AtomicU64::new(1);

/// Whether same-host transfers are on for this process (the environment
/// variable read once).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var(ENV).map_or(true, |v| v.trim() != "0"))
}

/// One stream end's alive word: holds `gen` from creation until drop.
#[derive(Debug)]
struct Alive {
    slot: usize,
    gen: u64,
}

impl Alive {
    fn new() -> Option<Alive> {
        let reused = FREE_SLOTS.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let slot = match reused {
            Some(s) => s,
            None => {
                let s = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
                if s >= SLOTS {
                    NEXT_SLOT.fetch_sub(1, Ordering::Relaxed);
                    return None;
                }
                s
            }
        };
        let gen = NEXT_GEN.fetch_add(1, Ordering::Relaxed);
        ALIVE[slot].store(gen, Ordering::SeqCst);
        Some(Alive { slot, gen })
    }

    fn addr(&self) -> u64 {
        std::ptr::from_ref(&ALIVE[self.slot]) as u64
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        ALIVE[self.slot].store(0, Ordering::SeqCst);
        FREE_SLOTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.slot);
    }
}

/// One stream's same-host state, shared by its reader and writer threads.
#[derive(Debug)]
pub struct Direct {
    /// This end's alive word; `None` if same-host transfers are off (or the
    /// process has no word left), and then no `Hello` is sent.
    alive: Option<Alive>,
    /// The peer proved it reads this process (its `DirectOk` came).
    peer_reads: AtomicBool,
    next_loan: AtomicU64,
    /// Payloads lent to the peer, oldest first.
    loans: Mutex<VecDeque<(u64, Payload)>>,
}

impl Direct {
    /// A stream end's state (lends nothing until the peer said `DirectOk`).
    pub fn new(on: bool) -> Direct {
        Direct {
            alive: if on { Alive::new() } else { None },
            peer_reads: AtomicBool::new(false),
            next_loan: AtomicU64::new(1),
            loans: Mutex::new(VecDeque::new()),
        }
    }

    /// The `Hello` this end sends first, if it takes part.
    pub fn hello(&self) -> Option<Hello> {
        let alive = self.alive.as_ref()?;
        Some(Hello {
            pid: std::process::id(),
            alive_addr: alive.addr(),
            alive_gen: alive.gen,
        })
    }

    /// The peer's `DirectOk` came.
    pub fn peer_reads(&self) {
        self.peer_reads.store(true, Ordering::SeqCst);
    }

    /// Lend `payload` to the peer if it reads this process and the payload
    /// is worth it: what to put in its frame instead of the bytes.
    pub fn lend(&self, payload: &Payload) -> Option<RemoteData> {
        if payload.len() < DIRECT_MIN
            || self.alive.is_none()
            || !self.peer_reads.load(Ordering::SeqCst)
        {
            return None;
        }
        let len = u32::try_from(payload.len()).ok()?;
        let lent = self.next_loan.fetch_add(1, Ordering::Relaxed);
        self.loans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back((lent, payload.clone()));
        Some(RemoteData {
            addr: payload.as_slice().as_ptr() as u64,
            len,
            lent,
        })
    }

    /// The peer released its loans up to `upto`: their payloads, for the
    /// host's pool.
    pub fn release(&self, upto: u64) -> Vec<Payload> {
        let mut loans = self.loans.lock().unwrap_or_else(|e| e.into_inner());
        let mut back = Vec::new();
        while loans.front().is_some_and(|(id, _)| *id <= upto) {
            back.extend(loans.pop_front().map(|(_, p)| p));
        }
        back
    }
}

impl Drop for Direct {
    fn drop(&mut self) {
        // The alive word goes first: a peer still reading a loan then finds
        // it cleared. The loans go after, with the fields.
        self.alive.take();
    }
}

/// A peer process proven to be readable.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pid: Pid,
    alive_addr: u64,
    alive_gen: u64,
}

impl Peer {
    /// Check the peer's `Hello` against the stream it came on: the pid
    /// must hold the stream's other socket, and its alive word must read.
    pub fn verify(h: &Hello, stream: &TcpStream) -> Option<Peer> {
        if h.alive_gen == 0 || !holds_peer_socket(h.pid, stream) {
            return None;
        }
        let peer = Peer {
            pid: Pid::from_raw(i32::try_from(h.pid).ok()?),
            alive_addr: h.alive_addr,
            alive_gen: h.alive_gen,
        };
        peer.alive().then_some(peer)
    }

    /// Whether the peer's end of the stream still holds its loans.
    fn alive(&self) -> bool {
        let mut word = [0u8; 8];
        read_all(self.pid, self.alive_addr, &mut word) && u64::from_ne_bytes(word) == self.alive_gen
    }

    /// Read a loan into `out` (its length): false if it cannot be read or
    /// the peer's end let its loans go before the read was over.
    pub fn pull(&self, r: &RemoteData, out: &mut [u8]) -> bool {
        if out.len() != r.len as usize || !read_all(self.pid, r.addr, out) {
            return false;
        }
        // The bytes are read before the alive word is.
        fence(Ordering::SeqCst);
        let mut word = [0u8; 8];
        read_all(self.pid, self.alive_addr, &mut word) && u64::from_ne_bytes(word) == self.alive_gen
    }
}

/// Read `out.len()` bytes at `addr` of process `pid`.
fn read_all(pid: Pid, addr: u64, out: &mut [u8]) -> bool {
    let mut done = 0;
    while done < out.len() {
        let Ok(base) = usize::try_from(addr.saturating_add(done as u64)) else {
            return false;
        };
        let rest = &mut out[done..];
        let remote = [RemoteIoVec {
            base,
            len: rest.len(),
        }];
        match process_vm_readv(pid, &mut [IoSliceMut::new(rest)], &remote) {
            Ok(0) | Err(_) => return false,
            Ok(n) => done += n,
        }
    }
    true
}

/// Whether process `pid` holds the socket at the other end of `stream`:
/// the socket whose local address is the stream's peer address and whose
/// peer is the stream's local address (found in this network namespace by
/// the kernel's `sock_diag`, [`peer_socket_inode`]) is one of `pid`'s open
/// files.
fn holds_peer_socket(pid: u32, stream: &TcpStream) -> bool {
    let (Ok(local), Ok(peer)) = (stream.local_addr(), stream.peer_addr()) else {
        return false;
    };
    let Some(inode) = peer_socket_inode(peer, local).filter(|&i| i != 0) else {
        return false;
    };
    let want = format!("socket:[{inode}]");
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == want.as_str())
    })
}

/// The inode of the TCP socket bound to `local` and connected to `remote`
/// in this network namespace: one `SOCK_DIAG_BY_FAMILY` request for that
/// exact socket (`sock_diag(7)`; reading `/proc/net/tcp` instead walks the
/// whole socket table, milliseconds per connection).
fn peer_socket_inode(local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};
    use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP};
    use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
    use netlink_packet_sock_diag::SockDiagMessage;

    let family = if local.is_ipv4() { AF_INET } else { AF_INET6 };
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    let mut msg = NetlinkMessage::new(
        header,
        SockDiagMessage::InetRequest(InetRequest {
            family,
            protocol: IPPROTO_TCP,
            extensions: ExtensionFlags::empty(),
            states: StateFlags::all(),
            socket_id: SocketId {
                source_port: local.port(),
                destination_port: remote.port(),
                source_address: local.ip(),
                destination_address: remote.ip(),
                interface_id: 0,
                // Ignored, as the kernel ignores an all-ones cookie.
                cookie: [0xff; 8],
            },
        })
        .into(),
    );
    msg.finalize();
    let mut req = vec![0; msg.buffer_len()];
    msg.serialize(&mut req);

    let sock = netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_SOCK_DIAG).ok()?;
    sock.connect(&netlink_sys::SocketAddr::new(0, 0)).ok()?;
    sock.send(&req, 0).ok()?;
    let mut resp = Vec::with_capacity(1024);
    sock.recv(&mut resp, 0).ok()?;
    match NetlinkMessage::<SockDiagMessage>::deserialize(&resp)
        .ok()?
        .payload
    {
        NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => Some(r.header.inode),
        // An error (no such socket) or anything else.
        _ => None,
    }
}

/// Whether this process can check and read a peer of this host (the
/// kernel's `sock_diag` and `process_vm_readv` allowed here): it checks a
/// loopback stream of its own as it would a peer's. `Err` says what
/// failed.
pub fn available() -> Result<(), String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| format!("no loopback listener: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let a = TcpStream::connect(addr).map_err(|e| format!("no loopback stream: {e}"))?;
    let _b = listener.accept().map_err(|e| e.to_string())?;
    let (local, peer) = (
        a.local_addr().map_err(|e| e.to_string())?,
        a.peer_addr().map_err(|e| e.to_string())?,
    );
    if peer_socket_inode(peer, local).is_none() {
        return Err(
            "the kernel's sock_diag does not answer for TCP sockets (no inet_diag/tcp_diag?)"
                .into(),
        );
    }
    let d = Direct::new(true);
    let hello = d.hello().ok_or("no alive word left in this process")?;
    Peer::verify(&hello, &a).map(|_| ()).ok_or_else(|| {
        "process_vm_readv of this process is refused (seccomp or ptrace policy)".into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected pair of loopback streams of this process.
    fn streams() -> (TcpStream, TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn a_process_reads_its_own_loan_and_sees_it_end() {
        let (a, _b) = streams();
        let lender = Direct::new(true);
        let hello = lender.hello().expect("on");
        let peer = Peer::verify(&hello, &a).expect("this process holds both ends");
        lender.peer_reads();
        let payload = Payload::from(vec![7u8; DIRECT_MIN]);
        let r = lender.lend(&payload).expect("lent");
        let mut out = vec![0u8; DIRECT_MIN];
        assert!(peer.pull(&r, &mut out));
        assert_eq!(out, payload.as_slice());
        assert_eq!(lender.release(r.lent).len(), 1);
        assert!(lender.loans.lock().unwrap().is_empty());
        // Small payloads go through the stream.
        assert!(lender.lend(&Payload::from(vec![1u8; 64])).is_none());
        drop(lender);
        // The end is gone: the alive word no longer holds its value.
        assert!(!peer.pull(&r, &mut out));
    }

    #[test]
    fn a_pid_that_does_not_hold_the_peer_socket_is_refused() {
        let (a, _b) = streams();
        let d = Direct::new(true);
        let mut h = d.hello().expect("on");
        // The parent process (the test runner's shell or cargo) holds no
        // socket of this stream.
        h.pid = std::os::unix::process::parent_id();
        assert!(Peer::verify(&h, &a).is_none());
        let mut h = d.hello().expect("on");
        h.pid = i32::MAX as u32; // no such process
        assert!(Peer::verify(&h, &a).is_none());
        let mut h = d.hello().expect("on");
        h.alive_gen += 1; // not the word's value
        assert!(Peer::verify(&h, &a).is_none());
    }

    #[test]
    fn sock_diag_finds_the_peer_socket_of_a_stream() {
        let (a, b) = streams();
        let (la, pa) = (a.local_addr().unwrap(), a.peer_addr().unwrap());
        // `b` is the socket bound to a's peer address, connected to a.
        let inode = peer_socket_inode(pa, la).expect("sock_diag answers");

        let want = format!("socket:[{inode}]");
        let fd = std::os::fd::AsRawFd::as_raw_fd(&b);
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        assert_eq!(link.as_os_str(), want.as_str());
        // No socket has these addresses.
        let nowhere: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(peer_socket_inode(nowhere, la), None);
    }

    #[test]
    fn off_sends_no_hello_and_lends_nothing() {
        let d = Direct::new(false);
        assert!(d.hello().is_none());
        d.peer_reads();
        assert!(d.lend(&Payload::from(vec![0u8; DIRECT_MIN])).is_none());
    }
}
