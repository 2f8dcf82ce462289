//! Measuring loops over a relink session: the same workloads as
//! [`SendLoop`](crate::SendLoop) and [`WriteLoop`](crate::WriteLoop), through
//! [`Node::send`] and [`Node::write`] instead of the raw provider, so that a
//! benchmark can put relink next to the provider it runs on.
//!
//! - [`RelinkSendLoop`]: messages of a fixed size, a window of outstanding
//!   operations replenished as they complete. A message completes when the
//!   peer *confirms delivery* (relink's contract, stronger than an RC ack);
//!   the receiver drains [`Node::poll_delivery_into`] (one buffer, reused)
//!   and checks every message.
//! - [`RelinkWriteLoop`]: RDMA WRITEs from a local region into the target's
//!   advertised region, `window` slots, each slot checked where it landed
//!   once its write completed.
//!
//! Both run on a [`Drive`]: [`SimPair`] (two nodes on the in-process soft
//! fabric, one thread drives both and the simulated world) or
//! [`ThreadPair`] (two nodes on any two providers, the target's node driven
//! by its own thread) — [`TcpPair`] is one on two [`TcpHost`]s over
//! loopback. Payloads carry their sequence number in the first 8 bytes
//! and its complement in the last 8, like [`Verify::Stamp`](crate::Verify).

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use relink::{
    Access, BufferToken, LocalRange, Memory, Node, OpId, Outcome, Path, Policy, RegionId,
    RegionOptions, Seq, SessionHandle, SessionOptions, State,
};
use relink_fabric::{Provider, Timestamp};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::{Registry, TcpHost};

use crate::loops::{check_stamp, stamp, Clock, LoopSpec, Measurement, Stall, Verify, TICK};
use crate::series::Runner;

/// The CM port the target listens on.
pub const PORT: u16 = 7471;
/// The target's advertised region (destination of writes).
pub const REMOTE: RegionId = RegionId(1);
/// The initiator's local region (source of writes).
pub const LOCAL: RegionId = RegionId(2);

/// How long connection setup may take (wall clock) before a pair panics.
const SETUP_LIMIT: Duration = Duration::from_secs(20);

/// Which workload a pair is set up for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Messages ([`RelinkSendLoop`]).
    Send,
    /// RDMA WRITEs into the target's region ([`RelinkWriteLoop`]).
    Write,
}

/// The session options of one side of a pair for `spec` and `workload`.
///
/// Messages: `max_message` is the message size, and the receiver keeps
/// `max(64, 2 × window)` receive slots (the sender's credits, less 8
/// reserved for control messages, so a window of 64 is never throttled by
/// credits; the raw [`SendLoop`](crate::SendLoop) also keeps `2 × window`
/// receives posted). Writes: a region of `window × size` bytes on each
/// side (the target's advertised, remote-writable), `max_one_sided =
/// window`. The recovery policy is the default.
pub fn session_options(spec: &LoopSpec, workload: Workload, target: bool) -> SessionOptions {
    match workload {
        Workload::Send => SessionOptions {
            policy: Policy::default(),
            recv_slots: u32::try_from((2 * spec.window).max(64)).expect("window fits u32"),
            max_message: u32::try_from(spec.size).expect("size fits u32"),
            max_one_sided: 8,
            regions: Vec::new(),
        },
        Workload::Write => {
            let len = (spec.window * spec.size) as u64;
            let region = if target {
                RegionOptions {
                    id: REMOTE,
                    len,
                    access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                    advertise: true,
                }
            } else {
                RegionOptions {
                    id: LOCAL,
                    len,
                    access: Access::LOCAL_WRITE,
                    advertise: false,
                }
            };
            SessionOptions {
                policy: Policy::default(),
                recv_slots: 64,
                max_message: 64,
                max_one_sided: u32::try_from(spec.window).expect("window fits u32"),
                regions: vec![region],
            }
        }
    }
}

/// Write the stamp of message `seq` into `buf` (first 8 bytes `seq`, last 8
/// its complement, little-endian).
pub fn stamp_bytes(buf: &mut [u8], seq: u64) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    let n = buf.len();
    if n >= 16 {
        buf[n - 8..].copy_from_slice(&(!seq).to_le_bytes());
    }
}

/// Whether `buf` carries the stamp of `seq`.
pub fn has_stamp(buf: &[u8], seq: u64) -> bool {
    let n = buf.len();
    n >= 8 && buf[..8] == seq.to_le_bytes() && (n < 16 || buf[n - 8..] == (!seq).to_le_bytes())
}

/// The receiving application: checks each delivered message (in order,
/// exactly once, right length, right stamp) and counts them.
#[derive(Debug, Clone)]
pub struct Receiver {
    size: usize,
    received: u64,
}

impl Receiver {
    /// A receiver of `size`-byte messages that has seen none.
    pub fn new(size: usize) -> Receiver {
        Receiver { size, received: 0 }
    }

    /// Messages received and checked so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Check message number `received` (relink sequence number
    /// `received + 1`) and count it.
    pub fn check(&mut self, seq: Seq, msg: &[u8]) -> Result<(), String> {
        let n = self.received;
        if seq.0 != n + 1 {
            return Err(format!(
                "delivery of sequence number {} where {} was due",
                seq.0,
                n + 1
            ));
        }
        if msg.len() != self.size {
            return Err(format!(
                "message {n} has {} bytes, not {}",
                msg.len(),
                self.size
            ));
        }
        if !has_stamp(msg, n) {
            return Err(format!("message {n} does not carry its stamp"));
        }
        self.received += 1;
        Ok(())
    }
}

/// Two relink nodes with one established session between them, and
/// whatever drives them. The measuring loops run on the initiator's side.
pub trait Drive {
    /// The provider kind (`soft-inproc`, `soft-tcp`, `verbs`).
    fn kind(&self) -> &'static str;
    /// The initiator's node.
    fn initiator(&mut self) -> &mut Node;
    /// The initiator's session.
    fn session(&self) -> SessionHandle;
    /// Make progress on everything this thread drives (the initiator's
    /// node, and in-process the target's node and its receiving
    /// application too); whether anything happened.
    ///
    /// # Panics
    /// If the receiving application saw a wrong message.
    fn poll(&mut self) -> bool;
    /// Messages the receiving application received and checked so far.
    fn received(&self) -> u64;
    /// Nothing to do: block until something may have happened (or a timer
    /// of a node is due), at most a tick. `receiver_only`: the initiator
    /// waits for nothing but the receiving application (which runs on its
    /// own thread in a [`ThreadPair`]).
    fn wait(&mut self, receiver_only: bool);
    /// The target's host memory of `region`.
    fn target_region(&mut self, region: RegionId) -> Memory;
    /// Close the sessions and check that nothing failed.
    fn close(self);
}

/// The earliest timer deadline of some nodes, capped at `now + TICK`.
fn next_wakeup<'n>(now: Timestamp, nodes: impl IntoIterator<Item = &'n Node>) -> Timestamp {
    nodes
        .into_iter()
        .filter_map(Node::next_deadline)
        .fold(now + TICK, std::cmp::min)
        .max(now)
}

/// A relink session between the two hosts of a testkit [`Sim`] (the
/// in-process soft fabric, virtual time). One thread drives both nodes:
/// [`Drive::poll`] polls both, [`Drive::wait`] runs the simulated world
/// until the initiator's host has something for its node, a node's timer
/// is due, or a tick passes — like the raw loops' `Provider::wait`.
pub struct SimPair {
    sim: Sim,
    ini: SessionHandle,
    tgt: SessionHandle,
    rx: Receiver,
    /// The receiving application's buffer ([`Node::poll_delivery_into`]).
    buf: Vec<u8>,
}

impl SimPair {
    /// A fresh world seeded with `seed`, and one session of the options
    /// [`session_options`] gives for `spec` and `workload`.
    ///
    /// # Panics
    /// If the session is not established within 1 s of virtual time.
    pub fn connect(seed: u64, spec: &LoopSpec, workload: Workload) -> SimPair {
        let mut sim = Sim::new(seed);
        let ini = sim
            .open_session(
                PORT,
                session_options(spec, workload, false),
                session_options(spec, workload, true),
            )
            .expect("open a session");
        let mut tgt = None;
        let up = sim.run_until_cond(Duration::from_secs(1), |sim| {
            tgt = tgt.or_else(|| sim.node(TARGET).accept());
            tgt.is_some() && sim.node(INITIATOR).state(ini) == Some(State::Established)
        });
        assert!(up, "relink session not established in the simulation");
        let tgt = tgt.expect("accepted");
        // Let the target finish its side of the handshake.
        sim.run_for(Duration::from_millis(1));
        assert_eq!(sim.node(TARGET).state(tgt), Some(State::Established));
        SimPair {
            sim,
            ini,
            tgt,
            rx: Receiver::new(spec.size),
            buf: Vec::new(),
        }
    }

    /// The simulation.
    pub fn sim(&mut self) -> &mut Sim {
        &mut self.sim
    }

    /// The target's session.
    pub fn target_session(&self) -> SessionHandle {
        self.tgt
    }
}

impl Drive for SimPair {
    fn kind(&self) -> &'static str {
        self.sim.host(INITIATOR).kind()
    }

    fn initiator(&mut self) -> &mut Node {
        self.sim.node(INITIATOR)
    }

    fn session(&self) -> SessionHandle {
        self.ini
    }

    fn poll(&mut self) -> bool {
        let a = self.sim.node(INITIATOR).poll();
        let b = self.sim.node(TARGET).poll();
        let mut delivered = false;
        while let Some(seq) = self
            .sim
            .node(TARGET)
            .poll_delivery_into(self.tgt, &mut self.buf)
        {
            if let Err(e) = self.rx.check(seq, &self.buf) {
                panic!("receiver: {e}");
            }
            delivered = true;
        }
        a | b | delivered
    }

    fn received(&self) -> u64 {
        self.rx.received()
    }

    fn wait(&mut self, _receiver_only: bool) {
        let now = self.sim.now();
        let a = self.sim.node(INITIATOR).next_deadline();
        let b = self.sim.node(TARGET).next_deadline();
        let d = [a, b]
            .into_iter()
            .flatten()
            .fold(now + TICK, std::cmp::min)
            .max(now);
        self.sim.host(INITIATOR).wait(Some(d));
    }

    fn target_region(&mut self, region: RegionId) -> Memory {
        let tgt = self.tgt;
        self.sim
            .node(TARGET)
            .region(tgt, region)
            .unwrap_or_else(|e| panic!("target region {region}: {e}"))
    }

    fn close(mut self) {
        let (ini, tgt) = (self.ini, self.tgt);
        self.sim.node(INITIATOR).close(ini).expect("close");
        self.sim.node(TARGET).close(tgt).expect("close");
        self.sim.run_for(Duration::from_millis(1));
    }
}

/// The target's node on its own thread.
struct TargetThread {
    handle: Option<JoinHandle<Node>>,
    stop: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
    error: Arc<Mutex<Option<String>>>,
}

/// A relink session between two nodes of this process on any two
/// providers (two [`TcpHost`]s in [`TcpPair`], two `VerbsProvider`s on two
/// real devices in relink-verbs's `rxe` benchmark). The initiator's node is
/// driven by the thread that runs the loop; the target's node by a thread
/// of its own, which also drains and checks the deliveries.
pub struct ThreadPair {
    node: Node,
    ini: SessionHandle,
    tgt: SessionHandle,
    target: TargetThread,
    regions: Vec<(RegionId, Memory)>,
}

impl ThreadPair {
    /// A node on `initiator` (seeded with `seed`) and one on `target`; the
    /// target's listens on `listen` (an address of `target`), the
    /// initiator's connects one session to it from `local` (`None`: the
    /// provider picks the source) with the options [`session_options`]
    /// gives for `spec` and `workload`; then the target's node moves to a
    /// thread of its own.
    ///
    /// # Panics
    /// If the target cannot listen, the initiator cannot connect, or the
    /// session is not established on both sides within 20 s.
    pub fn connect(
        initiator: Arc<dyn Provider>,
        target: Arc<dyn Provider>,
        listen: SocketAddr,
        local: Option<IpAddr>,
        seed: u64,
        spec: &LoopSpec,
        workload: Workload,
    ) -> ThreadPair {
        let mut node = Node::new(initiator, seed);
        let mut target = Node::new(target, seed ^ 0x5a5a);
        let kind = node.provider().kind();
        target
            .listen(listen, session_options(spec, workload, true))
            .unwrap_or_else(|e| panic!("listen on {listen} ({kind}): {e}"));
        let ini = node
            .connect(
                vec![Path {
                    local,
                    peer: listen,
                }],
                session_options(spec, workload, false),
            )
            .unwrap_or_else(|e| panic!("connect to {listen} ({kind}): {e}"));
        let t0 = Instant::now();
        let mut tgt = None;
        loop {
            node.poll();
            target.poll();
            tgt = tgt.or_else(|| target.accept());
            if let Some(t) = tgt {
                if node.state(ini) == Some(State::Established)
                    && target.state(t) == Some(State::Established)
                {
                    break;
                }
            }
            assert!(
                t0.elapsed() < SETUP_LIMIT,
                "relink session on {kind} not established in {SETUP_LIMIT:?} \
                 (initiator: {:?})",
                node.state(ini)
            );
            let now = node.now();
            let d = next_wakeup(now, [&node, &target]).min(now + Duration::from_micros(200));
            node.provider().wait(Some(d));
        }
        let tgt = tgt.expect("accepted");
        let regions = session_options(spec, workload, true)
            .regions
            .iter()
            .map(|r| (r.id, target.region(tgt, r.id).expect("region")))
            .collect();

        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicU64::new(0));
        let error = Arc::new(Mutex::new(None));
        let (s, r, e) = (stop.clone(), received.clone(), error.clone());
        let size = spec.size;
        let handle = std::thread::Builder::new()
            .name("relink-bench-target".into())
            .spawn(move || target_loop(target, tgt, size, &s, &r, &e))
            .expect("spawn the target's thread");
        ThreadPair {
            node,
            ini,
            tgt,
            target: TargetThread {
                handle: Some(handle),
                stop,
                received,
                error,
            },
            regions,
        }
    }

    /// Stop the target's thread and get its node back.
    fn join_target(&mut self) -> Option<Node> {
        self.target.stop.store(true, Ordering::SeqCst);
        let node = self.target.handle.take()?.join().ok();
        if node.is_none() {
            panic!("the target's thread panicked");
        }
        node
    }
}

/// The target's thread: poll the node, drain and check deliveries, wait on
/// the provider when idle, until `stop`.
fn target_loop(
    mut node: Node,
    s: SessionHandle,
    size: usize,
    stop: &AtomicBool,
    received: &AtomicU64,
    error: &Mutex<Option<String>>,
) -> Node {
    let mut rx = Receiver::new(size);
    let mut msg = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let mut progress = node.poll();
        while let Some(seq) = node.poll_delivery_into(s, &mut msg) {
            if let Err(e) = rx.check(seq, &msg) {
                *error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                return node;
            }
            progress = true;
        }
        if progress {
            received.store(rx.received(), Ordering::Release);
        } else {
            let now = node.now();
            let d = next_wakeup(now, [&node]);
            node.provider().wait(Some(d));
        }
    }
    node
}

impl Drive for ThreadPair {
    fn kind(&self) -> &'static str {
        self.node.provider().kind()
    }

    fn initiator(&mut self) -> &mut Node {
        &mut self.node
    }

    fn session(&self) -> SessionHandle {
        self.ini
    }

    fn poll(&mut self) -> bool {
        if let Some(e) = self
            .target
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            panic!("receiver: {e}");
        }
        self.node.poll()
    }

    fn received(&self) -> u64 {
        self.target.received.load(Ordering::Acquire)
    }

    fn wait(&mut self, receiver_only: bool) {
        if receiver_only {
            std::thread::yield_now();
            return;
        }
        let now = self.node.now();
        let d = next_wakeup(now, [&self.node]);
        self.node.provider().wait(Some(d));
    }

    fn target_region(&mut self, region: RegionId) -> Memory {
        self.regions
            .iter()
            .find(|(id, _)| *id == region)
            .map(|(_, m)| m.clone())
            .unwrap_or_else(|| panic!("the target has no region {region}"))
    }

    fn close(mut self) {
        let ini = self.ini;
        let target = self.join_target();
        self.node.close(ini).expect("close");
        if let Some(mut t) = target {
            t.close(self.tgt).expect("close");
            t.poll();
        }
        self.node.poll();
    }
}

impl Drop for ThreadPair {
    fn drop(&mut self) {
        let _ = self.join_target();
    }
}

/// Counts temporary directories of [`TcpPair`]s in this process.
static TCP_PAIRS: AtomicU64 = AtomicU64::new(0);

/// A directory removed (with its contents) when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A [`ThreadPair`] on two [`TcpHost`]s of this process, with soft devices
/// on 127.0.0.1 and 127.0.0.2 (each host with its own runtime directory,
/// so two hosts as far as the fabric can tell), over TCP loopback.
pub struct TcpPair {
    // Dropped in this order: the nodes and hosts, then their directories.
    pair: ThreadPair,
    _dir: TempDir,
}

impl TcpPair {
    /// Fresh runtime directories, hosts and nodes, and one session of the
    /// options [`session_options`] gives for `spec` and `workload`.
    ///
    /// # Panics
    /// If the directories cannot be created, no loopback port is free, or
    /// the session is not established within 20 s.
    pub fn connect(seed: u64, spec: &LoopSpec, workload: Workload) -> TcpPair {
        let n = TCP_PAIRS.fetch_add(1, Ordering::SeqCst);
        let dir =
            TempDir(std::env::temp_dir().join(format!("relink-bench-{}-{n}", std::process::id())));
        let [initiator, target] = tcp_hosts(&dir.0);
        let port = std::net::TcpListener::bind("127.0.0.2:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let addr: SocketAddr = format!("127.0.0.2:{port}").parse().expect("address");
        TcpPair {
            pair: ThreadPair::connect(initiator, target, addr, None, seed, spec, workload),
            _dir: dir,
        }
    }
}

/// Two [`TcpHost`]s with runtime directories `dir/initiator` and
/// `dir/target`, each with one soft device (on 127.0.0.1 and 127.0.0.2).
fn tcp_hosts(dir: &std::path::Path) -> [Arc<dyn Provider>; 2] {
    [("initiator", "127.0.0.1/8"), ("target", "127.0.0.2/8")].map(|(name, addr)| {
        let d = dir.join(name);
        Registry::open(&d)
            .expect("registry")
            .add("soft0", vec![addr.parse().expect("constant")], None, None)
            .expect("add soft0");
        Arc::new(TcpHost::open(&d).expect("tcp host")) as Arc<dyn Provider>
    })
}

impl Drive for TcpPair {
    fn kind(&self) -> &'static str {
        self.pair.kind()
    }

    fn initiator(&mut self) -> &mut Node {
        self.pair.initiator()
    }

    fn session(&self) -> SessionHandle {
        self.pair.session()
    }

    fn poll(&mut self) -> bool {
        self.pair.poll()
    }

    fn received(&self) -> u64 {
        self.pair.received()
    }

    fn wait(&mut self, receiver_only: bool) {
        self.pair.wait(receiver_only)
    }

    fn target_region(&mut self, region: RegionId) -> Memory {
        self.pair.target_region(region)
    }

    fn close(self) {
        // The directories go once the pair is closed and dropped.
        let TcpPair { pair, _dir } = self;
        pair.close();
    }
}

/// Checks a completion: the next outstanding operation, a first-time success.
#[track_caller]
fn check_completion(outstanding: &mut VecDeque<OpId>, c: relink::Completion, what: &str) {
    let want = outstanding.pop_front();
    assert!(
        want == Some(c.op) && c.outcome == (Outcome::Success { replayed: false }),
        "{what}: want a first-time success of {want:?} (completions in order), got {c:?}"
    );
}

/// Messages through a relink session: up to `window` outstanding, each
/// counted when it completes (the peer confirmed delivery) and was
/// received and checked by the target's application.
pub struct RelinkSendLoop<D: Drive> {
    d: D,
    spec: LoopSpec,
    next_seq: u64,
    payload: Vec<u8>,
    outstanding: VecDeque<OpId>,
    stats: LoopStats,
}

/// How a relink loop went, over all its runs: how often it polled and how
/// often it had to wait, per operation completed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LoopStats {
    /// Operations completed.
    pub ops: u64,
    /// Loop iterations (each polls the nodes this thread drives once).
    pub iterations: u64,
    /// Iterations without progress, which waited on the provider.
    pub waits: u64,
}

impl LoopStats {
    /// Iterations per operation.
    pub fn iterations_per_op(&self) -> f64 {
        self.iterations as f64 / self.ops.max(1) as f64
    }

    /// Waits per operation.
    pub fn waits_per_op(&self) -> f64 {
        self.waits as f64 / self.ops.max(1) as f64
    }
}

impl<D: Drive> RelinkSendLoop<D> {
    /// A loop on `d` (set up with [`Workload::Send`]); `spec.signal_every`
    /// and `spec.verify` are ignored (relink signals every operation;
    /// payloads are stamped).
    #[track_caller]
    pub fn new(d: D, spec: LoopSpec) -> RelinkSendLoop<D> {
        spec.validate();
        RelinkSendLoop {
            d,
            spec,
            next_seq: 0,
            payload: vec![0; spec.size],
            outstanding: VecDeque::with_capacity(spec.window),
            stats: LoopStats::default(),
        }
    }

    /// Iterations and waits so far.
    pub fn stats(&self) -> LoopStats {
        self.stats
    }

    /// The provider kind.
    pub fn kind(&self) -> &'static str {
        self.d.kind()
    }

    /// The drive (for counters and the like).
    pub fn drive(&mut self) -> &mut D {
        &mut self.d
    }

    /// Send `count` messages; returns when every one completed and was
    /// received.
    ///
    /// # Panics
    /// On a failed or out-of-order completion, a wrong delivery, or a stall.
    #[track_caller]
    pub fn run(&mut self, count: u64) -> Measurement {
        let (size, window) = (self.spec.size, self.spec.window as u64);
        let s = self.d.session();
        let start = self.next_seq;
        let end = start + count;
        let (mut posted, mut completed) = (start, start);
        let mut stall = Stall::new();
        let clock = Clock::start();
        while completed < end || self.d.received() < end {
            self.stats.iterations += 1;
            let mut progress = self.d.poll();
            let node = self.d.initiator();
            while let Some(c) = node.poll_completion(s) {
                check_completion(&mut self.outstanding, c, "relink send");
                completed += 1;
                progress = true;
            }
            while posted < end && posted - completed < window {
                stamp_bytes(&mut self.payload, posted);
                let op = node
                    .send(s, &self.payload)
                    .unwrap_or_else(|e| panic!("relink send: {e}"));
                self.outstanding.push_back(op);
                posted += 1;
                progress = true;
            }
            if progress {
                stall.progress();
            } else {
                let received = self.d.received();
                stall.check(|| {
                    format!(
                        "relink SEND loop: posted {posted}, completed {completed}, received \
                         {received} of {start}..{end}"
                    )
                });
                self.stats.waits += 1;
                self.d.wait(completed >= end);
            }
        }
        self.stats.ops += count;
        let m = clock.stop(count, size);
        self.next_seq = end;
        m
    }

    /// Close the session.
    pub fn close(self) {
        self.d.close();
    }
}

impl<D: Drive> Runner for RelinkSendLoop<D> {
    fn run(&mut self, count: u64) -> Measurement {
        RelinkSendLoop::run(self, count)
    }
}

/// RDMA WRITEs through a relink session: `window` slots of `size` bytes in
/// the initiator's region, written to the same slots of the target's
/// advertised region, up to `window` outstanding; once a write completed
/// its target slot is checked before the slot is written again.
pub struct RelinkWriteLoop<D: Drive> {
    d: D,
    spec: LoopSpec,
    next_seq: u64,
    local: Memory,
    remote: Memory,
    outstanding: VecDeque<OpId>,
    stats: LoopStats,
}

impl<D: Drive> RelinkWriteLoop<D> {
    /// A loop on `d` (set up with [`Workload::Write`]); `spec.signal_every`
    /// is ignored (relink signals every operation).
    #[track_caller]
    pub fn new(mut d: D, spec: LoopSpec) -> RelinkWriteLoop<D> {
        spec.validate();
        let s = d.session();
        let local = d.initiator().region(s, LOCAL).expect("local region");
        let remote = d.target_region(REMOTE);
        RelinkWriteLoop {
            d,
            spec,
            next_seq: 0,
            local,
            remote,
            outstanding: VecDeque::with_capacity(spec.window),
            stats: LoopStats::default(),
        }
    }

    /// Iterations and waits so far.
    pub fn stats(&self) -> LoopStats {
        self.stats
    }

    /// The provider kind.
    pub fn kind(&self) -> &'static str {
        self.d.kind()
    }

    /// Write `count` payloads; returns when every one completed and its
    /// target slot was checked.
    ///
    /// # Panics
    /// On a failed or out-of-order completion, a wrong payload, or a stall.
    #[track_caller]
    pub fn run(&mut self, count: u64) -> Measurement {
        let (size, window) = (self.spec.size, self.spec.window as u64);
        let verify = Verify::Stamp;
        let s = self.d.session();
        let start = self.next_seq;
        let end = start + count;
        let (mut posted, mut completed) = (start, start);
        let mut stall = Stall::new();
        let clock = Clock::start();
        while completed < end {
            self.stats.iterations += 1;
            let mut progress = self.d.poll();
            let node = self.d.initiator();
            while let Some(c) = node.poll_completion(s) {
                check_completion(&mut self.outstanding, c, "relink write");
                let slot = (completed % window) as usize;
                check_stamp(
                    &self.remote,
                    slot * size,
                    size,
                    completed,
                    verify,
                    "relink write",
                );
                completed += 1;
                progress = true;
            }
            while posted < end && posted - completed < window {
                let off = (posted % window) as usize * size;
                stamp(&self.local, off, size, posted, verify);
                let op = node
                    .write(
                        s,
                        LocalRange {
                            region: LOCAL,
                            offset: off as u64,
                            len: size as u32,
                        },
                        BufferToken {
                            region: REMOTE,
                            offset: off as u64,
                        },
                    )
                    .unwrap_or_else(|e| panic!("relink write: {e}"));
                self.outstanding.push_back(op);
                posted += 1;
                progress = true;
            }
            if progress {
                stall.progress();
            } else {
                stall.check(|| {
                    format!(
                        "relink WRITE loop: posted {posted}, completed {completed} of \
                         {start}..{end}"
                    )
                });
                self.stats.waits += 1;
                self.d.wait(false);
            }
        }
        self.stats.ops += count;
        let m = clock.stop(count, size);
        self.next_seq = end;
        m
    }

    /// Close the session.
    pub fn close(self) {
        self.d.close();
    }
}

impl<D: Drive> Runner for RelinkWriteLoop<D> {
    fn run(&mut self, count: u64) -> Measurement {
        RelinkWriteLoop::run(self, count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receiver_checks_order_length_and_stamp() {
        let mut rx = Receiver::new(32);
        let mut m = vec![0u8; 32];
        stamp_bytes(&mut m, 0);
        assert!(rx.check(Seq(1), &m).is_ok());
        assert!(rx.check(Seq(1), &m).is_err(), "a duplicate");
        stamp_bytes(&mut m, 1);
        assert!(rx.check(Seq(2), &m[..31]).is_err(), "a short message");
        let mut bad = m.clone();
        bad[31] ^= 1;
        assert!(rx.check(Seq(2), &bad).is_err(), "a damaged tail");
        assert!(rx.check(Seq(2), &m).is_ok());
        assert_eq!(rx.received(), 2);
    }

    #[test]
    fn relink_loops_in_process() {
        let spec = LoopSpec::send(64, 16);
        let mut l = RelinkSendLoop::new(SimPair::connect(41, &spec, Workload::Send), spec);
        for count in [1, 37, 300] {
            let m = l.run(count);
            assert_eq!((m.ops, m.bytes), (count, count * 64));
        }
        assert_eq!(l.drive().received(), 338);
        l.close();

        let spec = LoopSpec::write(4096, 4);
        let mut l = RelinkWriteLoop::new(SimPair::connect(42, &spec, Workload::Write), spec);
        for count in [3, 50] {
            let m = l.run(count);
            assert_eq!((m.ops, m.bytes), (count, count * 4096));
        }
        l.close();
    }

    #[test]
    fn relink_loops_over_tcp() {
        let spec = LoopSpec::send(64, 8);
        let mut l = RelinkSendLoop::new(TcpPair::connect(43, &spec, Workload::Send), spec);
        let m = l.run(200);
        assert_eq!(m.ops, 200);
        assert_eq!(l.drive().received(), 200);
        l.close();

        let spec = LoopSpec::write(1024, 4);
        let mut l = RelinkWriteLoop::new(TcpPair::connect(44, &spec, Workload::Write), spec);
        assert_eq!(l.run(40).ops, 40);
        l.close();
    }

    #[test]
    fn thread_pair_from_a_source_address() {
        let dir =
            TempDir(std::env::temp_dir().join(format!("relink-bench-unit-{}", std::process::id())));
        let [initiator, target] = tcp_hosts(&dir.0);
        let port = std::net::TcpListener::bind("127.0.0.2:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let listen = SocketAddr::new([127, 0, 0, 2].into(), port);
        let spec = LoopSpec::send(64, 4);
        let pair = ThreadPair::connect(
            initiator,
            target,
            listen,
            Some([127, 0, 0, 1].into()),
            45,
            &spec,
            Workload::Send,
        );
        assert_eq!(pair.kind(), "soft-tcp");
        let mut l = RelinkSendLoop::new(pair, spec);
        assert_eq!(l.run(50).ops, 50);
        assert_eq!(l.drive().received(), 50);
        l.close();
    }
}
