//! The soft fabric across processes and hosts over TCP, the way siw runs
//! iWARP over TCP.
//!
//! Soft devices are host-wide: a runtime directory ([`crate::registry`])
//! holds one small file per device, and every process on the host watches it
//! (every [`WATCH_INTERVAL`]), so `relink soft-device remove soft0` takes the
//! device away from every process at once, like `rdma link delete`.
//!
//! A reset shows as `Fatal`, `Removed` and `Added`, usually in one scan; a
//! scan between the reset's `.fatal` marker and its new generation shows
//! `Fatal` one scan early. From `Fatal` on the device takes no new work
//! (contexts, objects, posts, listens, resolutions, connection requests for
//! its addresses are refused) until its new generation replaces it: a
//! session cannot come back on a device that is about to leave, and a
//! reset costs it one loss.
//!
//! A CM port is a TCP port: a listener on `10.0.0.2:7471` is a TCP listener
//! on that address, and each RC connection is one TCP stream carrying
//! [`crate::wire`] frames. TCP is reliable, so the transport retransmission
//! of the engine is off; a broken stream is a lost connection (the QP
//! flushes, the CM id sees `Disconnected`).
//!
//! Between two processes of one host, a WRITE's or READ response's bytes
//! of at least [`DIRECT_MIN`](crate::direct::DIRECT_MIN) skip the stream:
//! the receiving process reads them from the sender's memory
//! ([`crate::direct`]).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use relink_fabric::{
    Access, CmError, CmId, ConnParams, ContextId, CqId, CreateError, DestroyError, Destroyed,
    DeviceEventKind, DeviceId, DeviceInfo, Event, Memory, MemoryError, MrId, MrInfo, MwBind, MwId,
    MwInfo, MwType, ObjectCounts, OpenError, PdId, PollError, PortState, PostError, Provider, QpId,
    QpInit, QpState, RecvWr, SendWr, SrqId, SrqInit, Timestamp, WorkCompletion,
};

use crate::accept::Acceptor;
use crate::direct::{self, Direct, Peer};
use crate::host::{Departure, HostConfig, HostState};
use crate::outbox::{Control, Outbox, Timer};
use crate::packet::{Body, CmMsg, Packet};
use crate::payload::{BufferPool, PoolStats};
use crate::ready::ReadyFd;
use crate::registry::{Registry, Watcher};
use crate::wire::{self, Incoming, Link};

mod stream;

/// How often every process re-reads the device registry.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(20);

/// Idle payload buffers a stream's reader thread keeps at most (bytes).
const READER_POOL_BYTES: usize = 2 << 20;

/// How long a TCP connect to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

enum Frame {
    /// A packet, encoded by the stream's writer thread straight into its
    /// batch (not under the host's lock, and with no frame buffer of its
    /// own; the payload is shared with the requester's copy, not copied).
    Packet(Packet),
    /// A frame of the transport itself.
    Link(Link),
    Close,
}

struct Conn {
    tx: Sender<Frame>,
    stream: Arc<Mutex<Option<TcpStream>>>,
}

/// What a connection inside the host carries, in order: its packets, and
/// its end (as a stream's end follows what was written before it).
enum Loopback {
    Packet(Packet),
    Closed(u64),
}

struct Inner {
    host: HostState,
    conns: HashMap<u64, Conn>,
    /// Connections to a listener of this host (this process connecting to
    /// itself, as rdma_cm allows on one device): both ends are this host,
    /// so their packets go straight back into it (`loopback`) instead of
    /// over a TCP stream, whose map entry the two ends would otherwise
    /// share (a connection's id is the same at both ends). Other
    /// processes on the same soft devices listen on sockets of their own.
    local: HashSet<u64>,
    loopback: VecDeque<Loopback>,
    /// Listening sockets and their accepting threads; removing one here
    /// closes the socket before the removal returns (a re-listen on the
    /// same address right after succeeds).
    listeners: HashMap<SocketAddr, Acceptor>,
    prebound: HashMap<SocketAddr, TcpListener>,
    timers: BTreeMap<(Timestamp, u64), Timer>,
    timer_seq: u64,
    /// Threads blocked in `Provider::wait` on `changed`.
    waiters: u32,
}

struct Shared {
    inner: Mutex<Inner>,
    /// Woken when something came for the caller (an event queued, a
    /// completion added) while a thread waits in `Provider::wait`; a packet
    /// that brings nothing for the caller (an RDMA WRITE placed, an ACK of
    /// an unsignaled request) wakes nobody.
    changed: Condvar,
    /// Woken when a timer is added.
    timer_added: Condvar,
    /// The readiness fd (`Provider::event_fd`), brought up to date with
    /// the host wherever `changed` is notified.
    ready: ReadyFd,
    start: Instant,
    stop: AtomicBool,
    /// Whether this host's streams move large payloads between processes
    /// of the host directly ([`crate::direct`]).
    same_host: AtomicBool,
    /// Bytes this host read from peers' memory.
    same_host_bytes: std::sync::atomic::AtomicU64,
}

impl Inner {
    /// Whether this host listens at `addr` (or on its port of every
    /// address).
    fn listens(&self, addr: SocketAddr) -> bool {
        let any = SocketAddr::new(
            match addr {
                SocketAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                SocketAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            },
            addr.port(),
        );
        self.listeners.contains_key(&addr) || self.listeners.contains_key(&any)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> Timestamp {
        Timestamp(self.start.elapsed().as_nanos() as u64)
    }

    /// Carry out what a host call asked for, then hand the host the packets
    /// it sent to itself (and what they cause, in turn). Called with the
    /// lock held.
    fn apply(self: &Arc<Self>, inner: &mut Inner, out: Outbox) {
        self.apply_one(inner, out);
        while let Some(l) = inner.loopback.pop_front() {
            let mut out = Outbox::new(self.now());
            match l {
                Loopback::Packet(p) => inner.host.receive(p, &mut out),
                // The other end learns it as from a closed stream.
                Loopback::Closed(conn) => inner.host.conn_lost(conn, &mut out),
            }
            self.apply_one(inner, out);
        }
    }

    /// [`apply`](Self::apply) of one outbox: the packets to this host's
    /// own addresses are queued in `loopback`.
    fn apply_one(self: &Arc<Self>, inner: &mut Inner, out: Outbox) {
        let mut new_timer = false;
        for (at, t) in out.timers {
            inner.timer_seq += 1;
            let seq = inner.timer_seq;
            inner.timers.insert((at, seq), t);
            new_timer = true;
        }
        let mut feedback = Vec::new();
        for o in out.packets {
            match &o.packet.body {
                // No ARP over TCP: a device that owns the address answers
                // when the connection is made.
                Body::ArpRequest { cookie } => feedback.push(*cookie),
                Body::Cm(CmMsg::Req { dst_port, .. })
                    if !inner.conns.contains_key(&o.conn)
                        && !inner.local.contains(&o.conn)
                        && inner.listens(SocketAddr::new(o.packet.dst, *dst_port)) =>
                {
                    inner.local.insert(o.conn);
                    inner.loopback.push_back(Loopback::Packet(o.packet));
                }
                _ if inner.local.contains(&o.conn) => {
                    inner.loopback.push_back(Loopback::Packet(o.packet))
                }
                Body::Cm(CmMsg::Req { dst_port, .. }) if !inner.conns.contains_key(&o.conn) => {
                    let dst = SocketAddr::new(o.packet.dst, *dst_port);
                    let conn = self.open_conn(o.conn, dst);
                    let _ = conn.tx.send(Frame::Packet(o.packet));
                    inner.conns.insert(o.conn, conn);
                }
                _ => {
                    if let Some(c) = inner.conns.get(&o.conn) {
                        let _ = c.tx.send(Frame::Packet(o.packet));
                    }
                }
            }
        }
        for c in out.controls {
            match c {
                Control::Listen(addr) => {
                    if let Some(l) = inner.prebound.remove(&addr) {
                        let me = self.clone();
                        let on_stream = Box::new(move |s: TcpStream| {
                            let me = me.clone();
                            let d = Arc::new(me.new_direct());
                            let _ = thread::Builder::new()
                                .name("soft-tcp-read".into())
                                .spawn(move || me.read_loop(s, None, d));
                        });
                        match Acceptor::spawn(l, on_stream) {
                            Ok(a) => {
                                inner.listeners.insert(addr, a);
                            }
                            Err(e) => tracing::warn!(%addr, error = %e, "soft-tcp: no acceptor"),
                        }
                    }
                }
                Control::Unlisten(addr) => {
                    inner.listeners.remove(&addr);
                }
                Control::Close(conn) => {
                    if let Some(c) = inner.conns.remove(&conn) {
                        let _ = c.tx.send(Frame::Close);
                    } else if inner.local.remove(&conn) {
                        inner.loopback.push_back(Loopback::Closed(conn));
                    }
                }
            }
        }
        for cookie in feedback {
            inner.host.on_arp_reply(cookie);
        }
        if new_timer {
            self.timer_added.notify_all();
        }
        self.ready.sync(&mut inner.host);
        self.wake_waiters(inner);
    }

    /// A stream end's same-host state.
    fn new_direct(&self) -> Direct {
        Direct::new(self.same_host.load(Ordering::Relaxed))
    }

    /// Wake the threads in `Provider::wait` if something came for them.
    /// Called with the lock held, after every change to the host.
    fn wake_waiters(&self, inner: &Inner) {
        if inner.waiters > 0 && (inner.host.has_activity() || inner.host.has_events()) {
            self.changed.notify_all();
        }
    }

    /// A connection we initiate: a writer thread connects and writes; a
    /// reader thread starts once connected.
    fn open_conn(self: &Arc<Self>, conn_id: u64, dst: SocketAddr) -> Conn {
        let (tx, rx) = mpsc::channel();
        let slot = Arc::new(Mutex::new(None));
        let me = self.clone();
        let slot2 = slot.clone();
        let d = Arc::new(self.new_direct());
        thread::Builder::new()
            .name(format!("soft-tcp-conn-{conn_id:x}"))
            .spawn(
                move || match TcpStream::connect_timeout(&dst, CONNECT_TIMEOUT) {
                    Ok(stream) => {
                        let _ = stream.set_nodelay(true);
                        if let Ok(r) = stream.try_clone() {
                            *slot2.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                        }
                        let reader = stream.try_clone();
                        if let Ok(reader) = reader {
                            let me2 = me.clone();
                            let d2 = d.clone();
                            let _ = thread::Builder::new()
                                .name(format!("soft-tcp-read-{conn_id:x}"))
                                .spawn(move || me2.read_loop(reader, Some(conn_id), d2));
                        }
                        me.write_loop(stream, rx, &d);
                    }
                    Err(e) => {
                        tracing::debug!(%dst, error = %e, "soft-tcp connect failed");
                        me.lost(conn_id);
                    }
                },
            )
            .expect("spawn thread");
        Conn { tx, stream: slot }
    }

    fn lost(&self, conn: u64) {
        let mut inner = self.lock();
        if inner.conns.remove(&conn).is_some() {
            let mut out = Outbox::new(self.now());
            inner.host.conn_lost(conn, &mut out);
            // Nothing in `out` can need a new stream.
            for c in out.controls {
                if let Control::Close(id) = c {
                    if let Some(c) = inner.conns.remove(&id) {
                        let _ = c.tx.send(Frame::Close);
                    }
                }
            }
            self.ready.sync(&mut inner.host);
            self.wake_waiters(&inner);
        }
    }

    fn timer_loop(self: Arc<Self>) {
        let mut inner = self.lock();
        while !self.stop.load(Ordering::Relaxed) {
            let now = self.now();
            let due: Vec<Timer> = {
                let mut v = Vec::new();
                while let Some(e) = inner.timers.first_entry() {
                    if e.key().0 > now {
                        break;
                    }
                    v.push(e.remove());
                }
                v
            };
            for t in due {
                let mut out = Outbox::new(now);
                inner.host.fire(t, &mut out);
                self.apply(&mut inner, out);
            }
            let wait = inner
                .timers
                .keys()
                .next()
                .map(|k| k.0.saturating_since(self.now()))
                .unwrap_or(Duration::from_millis(100))
                .min(Duration::from_millis(100));
            inner = self
                .timer_added
                .wait_timeout(inner, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn watch_loop(self: Arc<Self>, mut watcher: Watcher) {
        while !self.stop.load(Ordering::Relaxed) {
            let events = watcher.poll();
            if !events.is_empty() {
                let mut inner = self.lock();
                for ev in events {
                    let mut out = Outbox::new(self.now());
                    let name = ev.device.id.name.clone();
                    match ev.kind {
                        DeviceEventKind::Added => inner.host.add_device(ev.device, &mut out),
                        DeviceEventKind::Removed => {
                            inner
                                .host
                                .remove_device(&name, Departure::Orderly, &mut out)
                        }
                        DeviceEventKind::Fatal => inner.host.device_fatal(&name),
                        DeviceEventKind::PortDown => inner.host.set_port(&name, PortState::Down),
                        DeviceEventKind::PortUp => inner.host.set_port(&name, PortState::Active),
                        _ => {}
                    }
                    self.apply(&mut inner, out);
                }
            }
            thread::sleep(WATCH_INTERVAL);
        }
    }
}

/// One process's view of the host-wide soft devices: a [`Provider`].
pub struct TcpHost {
    shared: Arc<Shared>,
    dir: PathBuf,
}

impl TcpHost {
    /// Attach to the soft devices of the runtime directory `dir`
    /// (see [`Registry::default_dir`]).
    pub fn open(dir: impl Into<PathBuf>) -> std::io::Result<TcpHost> {
        let dir = dir.into();
        let registry = Registry::open(&dir).map_err(std::io::Error::other)?;
        let mut watcher = Watcher::new(registry);
        // Differs between processes and between hosts of one process.
        let tag = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            h.finish() as u32
        };
        let mut cfg = HostConfig::new(format!("tcp-{}", std::process::id()), tag);
        cfg.reliable_wire = true;
        cfg.cm_timeout = Duration::from_secs(3);
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                host: HostState::new(cfg),
                conns: HashMap::new(),
                local: HashSet::new(),
                loopback: VecDeque::new(),
                listeners: HashMap::new(),
                prebound: HashMap::new(),
                timers: BTreeMap::new(),
                timer_seq: 0,
                waiters: 0,
            }),
            changed: Condvar::new(),
            timer_added: Condvar::new(),
            ready: ReadyFd::default(),
            start: Instant::now(),
            stop: AtomicBool::new(false),
            same_host: AtomicBool::new(direct::enabled()),
            same_host_bytes: std::sync::atomic::AtomicU64::new(0),
        });
        // Devices present now, before the first call returns.
        {
            let mut inner = shared.lock();
            for ev in watcher.poll() {
                if ev.kind == DeviceEventKind::Added {
                    let mut out = Outbox::new(shared.now());
                    inner.host.add_device(ev.device, &mut out);
                    shared.apply(&mut inner, out);
                }
            }
            while inner.host.poll_event().is_some() {}
        }
        let s = shared.clone();
        thread::Builder::new()
            .name("soft-tcp-timers".into())
            .spawn(move || s.timer_loop())?;
        let s = shared.clone();
        thread::Builder::new()
            .name("soft-tcp-watch".into())
            .spawn(move || s.watch_loop(watcher))?;
        Ok(TcpHost { shared, dir })
    }

    /// The runtime directory this host watches.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Counters of this host's payload buffer pool.
    pub fn pool_stats(&self) -> PoolStats {
        self.read(HostState::pool_stats)
    }

    /// Turn same-host transfers on or off for the streams this host opens
    /// or accepts from now on (on by default unless the environment sets
    /// `RELINK_SOFT_SAME_HOST=0`): payloads of a WRITE or READ response
    /// of at least 32 KiB between two processes of this host are read by
    /// the receiving process from the sender's memory, one copy, instead
    /// of crossing the TCP stream. Off, or where the kernel does not allow
    /// one process to read another (`process_vm_readv(2)`), every byte
    /// crosses the stream.
    pub fn set_same_host_transfers(&self, on: bool) {
        self.shared.same_host.store(on, Ordering::Relaxed);
    }

    /// Whether same-host transfers can work in this process: the kernel
    /// lets it find a TCP peer's socket (`sock_diag`) and read another
    /// process (`process_vm_readv`). `Err` says what is missing; every
    /// byte then crosses the stream.
    ///
    /// # Errors
    /// What failed, in words.
    pub fn same_host_available() -> Result<(), String> {
        direct::available()
    }

    /// Bytes of payloads this host read directly from other processes'
    /// memory (see [`TcpHost::set_same_host_transfers`]).
    pub fn same_host_bytes(&self) -> u64 {
        self.shared.same_host_bytes.load(Ordering::Relaxed)
    }

    fn with<R>(&self, f: impl FnOnce(&mut HostState, &mut Outbox) -> R) -> R {
        let mut inner = self.shared.lock();
        let mut out = Outbox::new(self.shared.now());
        let r = f(&mut inner.host, &mut out);
        self.shared.apply(&mut inner, out);
        r
    }

    fn read<R>(&self, f: impl FnOnce(&HostState) -> R) -> R {
        f(&self.shared.lock().host)
    }
}

impl Drop for TcpHost {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let mut inner = self.shared.lock();
        inner.listeners.clear();
        for (_, c) in inner.conns.drain() {
            let _ = c.tx.send(Frame::Close);
            if let Some(s) = c.stream.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        self.shared.timer_added.notify_all();
    }
}

impl std::fmt::Debug for TcpHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TcpHost({})", self.dir.display())
    }
}

impl Provider for TcpHost {
    fn kind(&self) -> &'static str {
        "soft-tcp"
    }

    fn now(&self) -> Timestamp {
        self.shared.now()
    }

    fn wait(&self, deadline: Option<Timestamp>) {
        let mut inner = self.shared.lock();
        loop {
            if inner.host.has_events() | inner.host.take_activity() {
                return;
            }
            let now = self.shared.now();
            let left = match deadline {
                Some(d) if d <= now => return,
                Some(d) => d.saturating_since(now),
                None => Duration::from_secs(3600),
            };
            inner.waiters += 1;
            inner = self
                .shared
                .changed
                .wait_timeout(inner, left.min(Duration::from_millis(200)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
            inner.waiters -= 1;
        }
    }

    /// A Unix socket readable while something came for the caller since
    /// the caller last drained the event stream: signalled by whichever
    /// thread queues an event or adds a completion (a stream's reader, the
    /// timers, the device watcher, the caller's own calls), cleared when
    /// `poll_event` returns `None`.
    #[cfg(unix)]
    fn event_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        let mut inner = self.shared.lock();
        self.shared.ready.fd(&mut inner.host)
    }

    fn poll_event(&self) -> Option<Event> {
        self.with(|h, _| h.poll_event())
    }

    crate::delegate::delegate_to_host!();

    fn cm_bind(&self, id: CmId, addr: SocketAddr) -> Result<SocketAddr, CmError> {
        // Port 0: ask the OS for a free port, as every process on the host
        // shares the port space.
        let addr = if addr.port() == 0 {
            let port = TcpListener::bind(addr)
                .and_then(|l| l.local_addr())
                .map_err(|e| CmError::Io(format!("no free port on {}: {e}", addr.ip())))?
                .port();
            SocketAddr::new(addr.ip(), port)
        } else {
            addr
        };
        self.with(|h, _| h.cm_bind(id, addr))
    }

    fn cm_listen(&self, id: CmId, backlog: u32) -> Result<(), CmError> {
        let (local, _) = self.cm_addrs(id);
        let local = local.ok_or(CmError::BadState("listen needs a bound id"))?;
        let l = TcpListener::bind(local).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => CmError::AddrInUse(local),
            std::io::ErrorKind::AddrNotAvailable => CmError::AddrNotAvailable(local.ip()),
            _ => CmError::Io(format!("listen on {local}: {e}")),
        })?;
        let mut inner = self.shared.lock();
        inner.prebound.insert(local, l);
        let mut out = Outbox::new(self.shared.now());
        let r = inner.host.cm_listen(id, backlog, &mut out);
        self.shared.apply(&mut inner, out);
        inner.prebound.remove(&local);
        r
    }
}
