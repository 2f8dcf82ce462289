//! The in-process soft fabric: every host in one process, virtual time, one
//! seeded RNG, and faults that can be injected at any point.
//!
//! [`SoftFabric`] is the world; [`SoftHost`] is one host's
//! [`Provider`]. Nothing here reads a clock or
//! starts a thread: time moves only when a host [`wait`](relink_fabric::Provider::wait)s
//! or the harness calls [`SoftFabric::advance`], so a seed replays exactly.
//!
//! ```
//! use relink_soft::SoftFabric;
//! use relink_fabric::Provider;
//! let fabric = SoftFabric::new(7);
//! let a = fabric.add_host("a");
//! fabric.add_device(&a, "soft0", "10.0.0.1/24");
//! assert_eq!(a.devices().len(), 1);
//! fabric.reset_device(&a, "soft0");
//! assert_eq!(a.devices()[0].id.generation, 2);
//! ```

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use relink_fabric::{
    Access, CmError, CmId, ConnParams, ContextId, CqId, CreateError, DestroyError, Destroyed,
    DeviceId, DeviceInfo, Event, Guid, IpNet, Memory, MemoryError, MrId, MrInfo, MwBind, MwId,
    MwInfo, MwType, ObjectCounts, OpenError, PdId, PollError, PortState, PostError, Provider, QpId,
    QpInit, QpState, RecvWr, SendWr, SrqId, SrqInit, Timestamp, WorkCompletion,
};

use crate::host::{Departure, HostConfig, HostState};
use crate::outbox::{Outbox, Timer};
use crate::packet::{Body, Packet};
use crate::payload::PoolStats;
use crate::ready::ReadyFd;

/// Index of a host in a [`SoftFabric`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostIdx(pub usize);

/// How the simulated network behaves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// One-way latency of every packet.
    pub latency: Duration,
    /// Extra random latency, uniform in `[0, jitter]` (order per flow is kept).
    pub jitter: Duration,
    /// Probability that an RC transport packet is lost (CM packets are not).
    pub drop_rate: f64,
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig {
            latency: Duration::from_micros(2),
            jitter: Duration::ZERO,
            drop_rate: 0.0,
        }
    }
}

/// A fault, applied now ([`SoftFabric::inject`]) or at a virtual time
/// ([`SoftFabric::schedule`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Hot-unplug: the device goes away; connected peers are told.
    Remove(HostIdx, String),
    /// The device dies silently: peers are never told (they find out by
    /// transport timeouts or keepalive).
    SilentRemove(HostIdx, String),
    /// Re-plug a removed device: same name, index and GUID, new generation.
    Readd(HostIdx, String),
    /// Reset: `DEVICE_FATAL`, removal, and the same device back at once.
    Reset(HostIdx, String),
    /// Replace the device by one with a new GUID and the same addresses
    /// (`new_name` or the same name).
    Replace(HostIdx, String, Option<String>),
    /// The port goes down.
    PortDown(HostIdx, String),
    /// The port comes back up.
    PortUp(HostIdx, String),
    /// Packets between the two hosts are lost, both ways.
    Partition(HostIdx, HostIdx),
    /// Undo a partition.
    Heal(HostIdx, HostIdx),
    /// Change the network's behaviour.
    SetLink(LinkConfig),
}

struct DeviceSpec {
    addrs: Vec<IpNet>,
    guid: Guid,
    index: u32,
    netdev: Option<String>,
}

struct HostSlot {
    state: HostState,
    /// The host's readiness fd (shared with its [`SoftHost`]s), brought up
    /// to date whenever the world's lock is let go ([`WorldGuard`]).
    ready: Arc<ReadyFd>,
    /// No event queued and the readiness fd clear, as of the lock's last
    /// release: a `poll_event` would change nothing (shared with the
    /// host's [`SoftHost`]s, which then answer it without the lock).
    quiet: Arc<AtomicBool>,
    /// Every device this host ever had, by name (to re-add after removal).
    specs: BTreeMap<String, DeviceSpec>,
    next_index: u32,
}

enum Scheduled {
    Packet(Packet),
    Timer(HostIdx, Timer),
    Fault(Fault),
}

/// A scheduled item, ordered by its time and then by when it was
/// scheduled (`seq`, unique).
struct Queued {
    at: Timestamp,
    seq: u64,
    item: Scheduled,
}

impl Queued {
    fn key(&self) -> (Timestamp, u64) {
        (self.at, self.seq)
    }
}

impl PartialEq for Queued {
    fn eq(&self, other: &Queued) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Queued {}

impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Queued) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Queued {
    fn cmp(&self, other: &Queued) -> Ordering {
        self.key().cmp(&other.key())
    }
}

struct World {
    now: Timestamp,
    /// `now` as of the last time the lock was let go, for
    /// [`Provider::now`] without the lock.
    clock: Arc<AtomicU64>,
    seq: u64,
    rng: ChaCha8Rng,
    hosts: Vec<HostSlot>,
    /// What happens next, earliest first (ties in scheduling order). A
    /// heap keeps its allocation, so scheduling allocates nothing once
    /// warm.
    queue: BinaryHeap<Reverse<Queued>>,
    /// The outbox of the last host call, emptied, for the next one.
    spare: Outbox,
    flow_last: BTreeMap<(IpAddr, IpAddr), Timestamp>,
    link: LinkConfig,
    partitions: BTreeSet<(HostIdx, HostIdx)>,
    next_generation: u64,
    digest: std::collections::hash_map::DefaultHasher,
    dispatched: u64,
}

/// The world under its lock; letting it go brings every host's readiness
/// fd up to date with what happened meanwhile (see [`crate::ready`]).
struct WorldGuard<'a>(MutexGuard<'a, World>);

impl std::ops::Deref for WorldGuard<'_> {
    type Target = World;
    fn deref(&self) -> &World {
        &self.0
    }
}

impl std::ops::DerefMut for WorldGuard<'_> {
    fn deref_mut(&mut self) -> &mut World {
        &mut self.0
    }
}

impl Drop for WorldGuard<'_> {
    fn drop(&mut self) {
        for h in &mut self.0.hosts {
            h.ready.sync(&mut h.state);
            let quiet = !h.state.has_events() && !h.ready.is_signalled();
            h.quiet.store(quiet, AtomicOrdering::Release);
        }
        self.0.clock.store(self.0.now.0, AtomicOrdering::Release);
    }
}

fn lock_world(world: &Mutex<World>) -> WorldGuard<'_> {
    WorldGuard(world.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The in-process soft fabric (see the module docs).
#[derive(Clone)]
pub struct SoftFabric {
    inner: Arc<Mutex<World>>,
}

impl SoftFabric {
    /// An empty fabric whose random choices all come from `seed`.
    pub fn new(seed: u64) -> SoftFabric {
        SoftFabric {
            inner: Arc::new(Mutex::new(World {
                now: Timestamp::ZERO,
                clock: Arc::new(AtomicU64::new(0)),
                seq: 0,
                rng: ChaCha8Rng::seed_from_u64(seed),
                hosts: Vec::new(),
                queue: BinaryHeap::new(),
                spare: Outbox::default(),
                flow_last: BTreeMap::new(),
                link: LinkConfig::default(),
                partitions: BTreeSet::new(),
                next_generation: 1,
                digest: Default::default(),
                dispatched: 0,
            })),
        }
    }

    fn lock(&self) -> WorldGuard<'_> {
        lock_world(&self.inner)
    }

    /// Add a host; its provider is the returned [`SoftHost`].
    pub fn add_host(&self, name: &str) -> SoftHost {
        let mut w = self.lock();
        let idx = w.hosts.len();
        let cfg = HostConfig::new(name, idx as u32 + 1);
        let ready = Arc::new(ReadyFd::default());
        let quiet = Arc::new(AtomicBool::new(true));
        w.hosts.push(HostSlot {
            state: HostState::new(cfg),
            ready: ready.clone(),
            quiet: quiet.clone(),
            specs: BTreeMap::new(),
            next_index: 1,
        });
        SoftHost {
            world: self.inner.clone(),
            clock: w.clock.clone(),
            host: HostIdx(idx),
            ready,
            quiet,
        }
    }

    /// Add a device with one address (`10.0.0.1/24`) and a random GUID.
    ///
    /// # Panics
    /// If `addr` does not parse: this is a test-setup call.
    pub fn add_device(&self, host: &SoftHost, name: &str, addr: &str) -> DeviceId {
        let net: IpNet = addr.parse().expect("device address");
        self.add_device_with(host.host, name, vec![net], None)
    }

    /// Add a device with the given addresses and GUID (random if `None`)
    /// to the host of index `host` ([`SoftHost::index`]).
    pub fn add_device_with(
        &self,
        host: HostIdx,
        name: &str,
        addrs: Vec<IpNet>,
        guid: Option<Guid>,
    ) -> DeviceId {
        let mut w = self.lock();
        let guid = guid.unwrap_or_else(|| Guid(w.rng.gen::<u64>() | 0x0200_0000_0000_0000));
        let slot = &mut w.hosts[host.0];
        let index = slot.next_index;
        slot.next_index += 1;
        slot.specs.insert(
            name.to_string(),
            DeviceSpec {
                addrs,
                guid,
                index,
                netdev: Some(format!("veth-{name}")),
            },
        );
        w.plug(host, name)
    }

    /// Apply a fault now.
    pub fn inject(&self, fault: Fault) {
        self.lock().apply(fault);
    }

    /// Apply a fault at virtual time `at`.
    pub fn schedule(&self, at: Timestamp, fault: Fault) {
        let mut w = self.lock();
        w.push(at, Scheduled::Fault(fault));
    }

    /// Hot-unplug a device (peers are told).
    pub fn remove_device(&self, host: &SoftHost, name: &str) {
        self.inject(Fault::Remove(host.host, name.into()));
    }

    /// Re-plug a removed device.
    pub fn readd_device(&self, host: &SoftHost, name: &str) {
        self.inject(Fault::Readd(host.host, name.into()));
    }

    /// Reset a device now ([`Fault::Reset`]): every object on it is lost,
    /// every node using it gets the device's removal (fatal async event,
    /// CM device removal, flushed work), and it comes back at once with
    /// the same name, GUID and addresses but a new [`DeviceId`] generation
    /// (peers see their connections to it end).
    pub fn reset_device(&self, host: &SoftHost, name: &str) {
        self.inject(Fault::Reset(host.host, name.into()));
    }

    /// Replace a device now ([`Fault::Replace`]): the old one is removed
    /// as by a reset and a new one with a new GUID and the same addresses
    /// (and `new_name`, or the old name) is added in its place, with a new
    /// [`DeviceId`].
    pub fn replace_device(&self, host: &SoftHost, name: &str, new_name: Option<&str>) {
        self.inject(Fault::Replace(
            host.host,
            name.into(),
            new_name.map(str::to_string),
        ));
    }

    /// The current virtual time.
    pub fn now(&self) -> Timestamp {
        self.lock().now
    }

    /// Run everything due within `d` and move the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let mut w = self.lock();
        let until = w.now + d;
        w.run_until(until);
    }

    /// Run the next scheduled item; false if nothing is scheduled.
    pub fn step(&self) -> bool {
        self.lock().step()
    }

    /// Time of the next scheduled item.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.lock().next_at()
    }

    /// A digest of everything dispatched so far: two runs of the same seed
    /// and the same calls have the same digest.
    pub fn digest(&self) -> u64 {
        let w = self.lock();
        w.digest.finish() ^ w.dispatched
    }

    /// How many packets, timers and faults were dispatched.
    pub fn dispatched(&self) -> u64 {
        self.lock().dispatched
    }
}

impl World {
    fn push(&mut self, at: Timestamp, item: Scheduled) {
        let at = at.max(self.now);
        self.seq += 1;
        let seq = self.seq;
        self.queue.push(Reverse(Queued { at, seq, item }));
    }

    /// The time of the next scheduled item.
    fn next_at(&self) -> Option<Timestamp> {
        self.queue.peek().map(|q| q.0.at)
    }

    /// An empty outbox at the current time (the last call's, reused).
    fn outbox(&mut self) -> Outbox {
        let mut out = std::mem::take(&mut self.spare);
        out.now = self.now;
        out
    }

    fn plug(&mut self, host: HostIdx, name: &str) -> DeviceId {
        let gen = self.next_generation;
        self.next_generation += 1;
        let spec = &self.hosts[host.0].specs[name];
        let info = DeviceInfo {
            id: DeviceId {
                name: name.to_string(),
                index: spec.index,
                generation: gen,
            },
            node_guid: spec.guid,
            addrs: spec.addrs.clone(),
            netdev: spec.netdev.clone(),
            port_state: PortState::Active,
        };
        let id = info.id.clone();
        let mut out = Outbox::new(self.now);
        self.hosts[host.0].state.add_device(info, &mut out);
        self.apply_outbox(host, out);
        id
    }

    fn unplug(&mut self, host: HostIdx, name: &str, how: Departure) {
        let mut out = Outbox::new(self.now);
        self.hosts[host.0].state.remove_device(name, how, &mut out);
        self.apply_outbox(host, out);
    }

    fn apply(&mut self, fault: Fault) {
        tracing::debug!(now = %self.now, ?fault, "fault");
        format!("{fault:?}").hash(&mut self.digest);
        match fault {
            Fault::Remove(h, name) => self.unplug(h, &name, Departure::Orderly),
            Fault::SilentRemove(h, name) => self.unplug(h, &name, Departure::Silent),
            Fault::Readd(h, name) => {
                let present = self.hosts[h.0]
                    .state
                    .devices()
                    .iter()
                    .any(|d| d.id.name == name);
                if !present && self.hosts[h.0].specs.contains_key(&name) {
                    self.plug(h, &name);
                }
            }
            Fault::Reset(h, name) => {
                if self.hosts[h.0]
                    .state
                    .devices()
                    .iter()
                    .any(|d| d.id.name == name)
                {
                    self.hosts[h.0].state.device_fatal(&name);
                    self.unplug(h, &name, Departure::Orderly);
                    self.plug(h, &name);
                }
            }
            Fault::Replace(h, name, new_name) => {
                let Some(old) = self.hosts[h.0].specs.get(&name) else {
                    return;
                };
                let addrs = old.addrs.clone();
                self.unplug(h, &name, Departure::Orderly);
                let guid = Guid(self.rng.gen::<u64>() | 0x0200_0000_0000_0000);
                let new_name = new_name.unwrap_or(name);
                let slot = &mut self.hosts[h.0];
                let index = slot.next_index;
                slot.next_index += 1;
                slot.specs.insert(
                    new_name.clone(),
                    DeviceSpec {
                        addrs,
                        guid,
                        index,
                        netdev: Some(format!("veth-{new_name}-r")),
                    },
                );
                self.plug(h, &new_name);
            }
            Fault::PortDown(h, name) => self.hosts[h.0].state.set_port(&name, PortState::Down),
            Fault::PortUp(h, name) => self.hosts[h.0].state.set_port(&name, PortState::Active),
            Fault::Partition(a, b) => {
                self.partitions.insert((a.min(b), a.max(b)));
            }
            Fault::Heal(a, b) => {
                self.partitions.remove(&(a.min(b), a.max(b)));
            }
            Fault::SetLink(l) => self.link = l,
        }
    }

    fn owner(&self, ip: IpAddr) -> Option<HostIdx> {
        self.hosts
            .iter()
            .position(|h| h.state.addr_port(ip).is_some())
            .map(HostIdx)
    }

    fn port_up(&self, host: HostIdx, ip: IpAddr) -> bool {
        self.hosts[host.0].state.addr_port(ip) == Some(PortState::Active)
    }

    /// Schedule what a host call put in `out`; its emptied vectors become
    /// the next call's outbox.
    fn apply_outbox(&mut self, host: HostIdx, mut out: Outbox) {
        for (at, t) in out.timers.drain(..) {
            self.push(at, Scheduled::Timer(host, t));
        }
        for o in out.packets.drain(..) {
            let p = o.packet;
            // A removed device's CM still says goodbye (rdma_cm sends the
            // DREQ while it tears the id down); transport packets need a
            // live, active port.
            let cm = matches!(p.body, Body::Cm(_));
            if !cm && !self.port_up(host, p.src) {
                continue;
            }
            if let Some(dst) = self.owner(p.dst) {
                if self.partitions.contains(&(host.min(dst), host.max(dst))) {
                    continue;
                }
            }
            let transport = matches!(p.body, Body::Request { .. } | Body::Response { .. });
            if transport && self.link.drop_rate > 0.0 && self.rng.gen_bool(self.link.drop_rate) {
                continue;
            }
            let jitter = if self.link.jitter.is_zero() {
                Duration::ZERO
            } else {
                Duration::from_nanos(self.rng.gen_range(0..=self.link.jitter.as_nanos() as u64))
            };
            let mut at = self.now + self.link.latency + jitter;
            let flow = (p.src, p.dst);
            if let Some(last) = self.flow_last.get(&flow) {
                if at <= *last {
                    at = *last + Duration::from_nanos(1);
                }
            }
            self.flow_last.insert(flow, at);
            self.push(at, Scheduled::Packet(p));
        }
        // Listen/close controls are bookkeeping for socket transports only.
        out.controls.clear();
        self.spare = out;
    }

    fn step(&mut self) -> bool {
        let Some(Reverse(Queued { at, item, .. })) = self.queue.pop() else {
            return false;
        };
        self.now = self.now.max(at);
        self.dispatched += 1;
        self.now.hash(&mut self.digest);
        match item {
            Scheduled::Packet(p) => {
                if let Some(dst) = self.owner(p.dst) {
                    1u8.hash(&mut self.digest);
                    dst.hash(&mut self.digest);
                    let mut out = self.outbox();
                    self.hosts[dst.0].state.receive(p, &mut out);
                    self.apply_outbox(dst, out);
                }
            }
            Scheduled::Timer(h, t) => {
                2u8.hash(&mut self.digest);
                t.hash(&mut self.digest);
                let mut out = self.outbox();
                self.hosts[h.0].state.fire(t, &mut out);
                self.apply_outbox(h, out);
            }
            Scheduled::Fault(f) => self.apply(f),
        }
        true
    }

    fn run_until(&mut self, until: Timestamp) {
        while self.next_at().is_some_and(|at| at <= until) {
            self.step();
        }
        self.now = self.now.max(until);
    }
}

/// One host of a [`SoftFabric`]: a [`Provider`].
#[derive(Clone)]
pub struct SoftHost {
    world: Arc<Mutex<World>>,
    /// The world's time as of its lock's last release ([`World::clock`]).
    clock: Arc<AtomicU64>,
    host: HostIdx,
    ready: Arc<ReadyFd>,
    /// [`HostSlot::quiet`].
    quiet: Arc<AtomicBool>,
}

impl SoftHost {
    /// This host's index in the fabric (for [`Fault`]s).
    pub fn index(&self) -> HostIdx {
        self.host
    }

    /// Counters of this host's payload buffer pool.
    pub fn pool_stats(&self) -> PoolStats {
        self.read(HostState::pool_stats)
    }

    fn lock(&self) -> WorldGuard<'_> {
        lock_world(&self.world)
    }

    fn with<R>(&self, f: impl FnOnce(&mut HostState, &mut Outbox) -> R) -> R {
        let mut w = self.lock();
        let mut out = w.outbox();
        let r = f(&mut w.hosts[self.host.0].state, &mut out);
        w.apply_outbox(self.host, out);
        r
    }

    fn read<R>(&self, f: impl FnOnce(&HostState) -> R) -> R {
        let w = self.lock();
        f(&w.hosts[self.host.0].state)
    }
}

impl std::fmt::Debug for SoftHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SoftHost({})", self.host.0)
    }
}

impl Provider for SoftHost {
    fn kind(&self) -> &'static str {
        "soft-inproc"
    }

    /// The world's time as its last holder left it: virtual time moves
    /// only under the world's lock, which publishes it when let go, so
    /// reading it takes no lock.
    fn now(&self) -> Timestamp {
        Timestamp(self.clock.load(AtomicOrdering::Acquire))
    }

    fn has_virtual_clock(&self) -> bool {
        true
    }

    /// `None` without the world's lock when, as the lock was last let go,
    /// the host had no event queued and its readiness fd was clear (a
    /// call under the lock would change nothing): the call a poll round
    /// makes every time costs an atomic load when there is nothing.
    fn poll_event(&self) -> Option<Event> {
        if self.quiet.load(AtomicOrdering::Acquire) {
            return None;
        }
        self.with(|h, _| h.poll_event())
    }

    fn wait(&self, deadline: Option<Timestamp>) {
        let mut w = self.lock();
        loop {
            let h = &mut w.hosts[self.host.0].state;
            if h.has_events() | h.take_activity() {
                return;
            }
            match w.next_at() {
                Some(at) if deadline.is_none_or(|d| at <= d) => {
                    w.step();
                }
                _ => {
                    if let Some(d) = deadline {
                        w.now = w.now.max(d);
                    }
                    return;
                }
            }
        }
    }

    /// A Unix socket readable while something came for this host (an
    /// event queued, a completion added) since its caller last drained the
    /// event stream; cleared when `poll_event` returns `None`. Virtual time
    /// moves only in [`wait`](Provider::wait) (of any host of the fabric)
    /// and the fabric's own calls ([`SoftFabric::advance`], `step`,
    /// faults): nothing makes the fd readable while every caller sleeps on
    /// it, so a loop on this fabric keeps driving it with `wait`. The fd
    /// shows what those calls delivered, for parity with the other
    /// providers.
    #[cfg(unix)]
    fn event_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        let mut w = self.lock();
        self.ready.fd(&mut w.hosts[self.host.0].state)
    }

    crate::delegate::delegate_to_host!();

    fn cm_bind(&self, id: CmId, addr: SocketAddr) -> Result<SocketAddr, CmError> {
        self.with(|h, _| h.cm_bind(id, addr))
    }

    fn cm_listen(&self, id: CmId, backlog: u32) -> Result<(), CmError> {
        self.with(|h, o| h.cm_listen(id, backlog, o))
    }
}
