//! A deterministic world for relink sessions: hosts on the in-process soft
//! fabric (an initiator and a target, more on request), one
//! [`relink::Node`] per host, and a driver that advances virtual time only
//! when no node can make progress. The same seed gives the same run, event
//! for event.
//!
//! ```
//! use std::time::Duration;
//! use relink::{Path, SessionOptions, State};
//! use relink_sim::Sim;
//!
//! let mut sim = Sim::new(7);
//! let addr = sim.target_addr(7471);
//! sim.node(1).listen(addr, SessionOptions::default()).unwrap();
//! let s = sim.node(0).connect(vec![Path { local: None, peer: addr }], SessionOptions::default()).unwrap();
//! sim.run_for(Duration::from_millis(5));
//! assert_eq!(sim.node(0).state(s), Some(State::Established));
//! ```

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use relink::{
    ConnectError, ListenError, Node, Path, PollMode, SessionHandle, SessionOptions, State,
};
use relink_fabric::{IpNet, Provider, Timestamp};
use relink_soft::{SoftFabric, SoftHost};

/// Index of the initiator in [`Sim::host`], [`Sim::node`] and [`Sim::addr`].
pub const INITIATOR: usize = 0;
/// Index of the target in [`Sim::host`], [`Sim::node`] and [`Sim::addr`].
pub const TARGET: usize = 1;

/// Hosts on one in-process soft fabric, each with a device `soft0` and a
/// node: [`Sim::new`] makes the initiator (`10.0.0.1/24`) and the target
/// (`10.0.0.2/24`), [`Sim::add_host`] adds more; further devices and
/// faults go through [`Sim::fabric`].
pub struct Sim {
    fabric: SoftFabric,
    hosts: Vec<SoftHost>,
    nodes: Vec<Node>,
    addrs: Vec<IpNet>,
    /// The seed of each host's node.
    seeds: Vec<u64>,
    /// The poll mode of every node ([`Sim::set_poll_mode`]).
    poll_mode: PollMode,
}

impl Sim {
    /// A fresh world of the initiator and the target, seeded with `seed`
    /// (nothing runs until asked).
    pub fn new(seed: u64) -> Sim {
        let fabric = SoftFabric::new(seed);
        let mut sim = Sim {
            fabric,
            hosts: Vec::new(),
            nodes: Vec::new(),
            addrs: Vec::new(),
            seeds: Vec::new(),
            poll_mode: PollMode::Events,
        };
        sim.add_host("initiator", "10.0.0.1/24", seed ^ 0x1111);
        sim.add_host("target", "10.0.0.2/24", seed ^ 0x2222);
        sim
    }

    /// Add a host with device `soft0` on `addr` (`a.b.c.d/prefix`) and a
    /// node seeded with `seed`; returns its index.
    ///
    /// # Panics
    /// If `addr` does not parse.
    pub fn add_host(&mut self, name: &str, addr: &str, seed: u64) -> usize {
        let h = self.fabric.add_host(name);
        self.fabric.add_device(&h, "soft0", addr);
        let mut node = Node::seeded_for_simulation(Arc::new(h.clone()), seed);
        node.set_poll_mode(self.poll_mode);
        self.nodes.push(node);
        self.seeds.push(seed);
        self.hosts.push(h);
        self.addrs.push(addr.parse().expect("address"));
        self.hosts.len() - 1
    }

    /// Host `i`'s application crashes and restarts: its node is aborted
    /// ([`Node::abort`]: every object it held is destroyed, as when a
    /// process dies: peers see their connections disconnected, without a
    /// goodbye) and a new node seeded like the old one takes its place —
    /// the same incarnation and the same series of session ids, as a
    /// process restarted with the same seed. Listeners and sessions are
    /// the new node's to make.
    pub fn restart(&mut self, i: usize) {
        let mut node = Node::seeded_for_simulation(Arc::new(self.hosts[i].clone()), self.seeds[i]);
        node.set_poll_mode(self.poll_mode);
        std::mem::replace(&mut self.nodes[i], node).abort();
    }

    /// Every node's [`PollMode`], from the next round on (and the mode of
    /// the nodes added or restarted later). In [`PollMode::Busy`]
    /// [`settle`](Self::settle) readies each node to sleep
    /// ([`Node::prepare_to_sleep`]) before it lets virtual time move, as a
    /// busy-polling application does before it sleeps.
    pub fn set_poll_mode(&mut self, mode: PollMode) {
        self.poll_mode = mode;
        for n in &mut self.nodes {
            n.set_poll_mode(mode);
        }
    }

    /// The fabric: inject faults, add devices, read its digest.
    pub fn fabric(&self) -> &SoftFabric {
        &self.fabric
    }

    /// Host `i`'s provider.
    pub fn host(&self, i: usize) -> &SoftHost {
        &self.hosts[i]
    }

    /// Host `i`'s node.
    pub fn node(&mut self, i: usize) -> &mut Node {
        &mut self.nodes[i]
    }

    /// A world of `seed` with one session of default options established
    /// from the initiator to the target's port 7471: the world, the
    /// initiator's handle and the target's.
    ///
    /// # Panics
    /// If the session is not established within 5 ms of virtual time.
    pub fn with_session(seed: u64) -> (Sim, SessionHandle, SessionHandle) {
        Sim::with_session_options(seed, SessionOptions::default(), SessionOptions::default())
    }

    /// [`Sim::with_session`] with the initiator's and the target's options.
    ///
    /// # Panics
    /// If the options are refused, or the session is not established
    /// within 5 ms of virtual time.
    pub fn with_session_options(
        seed: u64,
        initiator: SessionOptions,
        target: SessionOptions,
    ) -> (Sim, SessionHandle, SessionHandle) {
        let mut sim = Sim::new(seed);
        let s = sim
            .open_session(7471, initiator, target)
            .expect("open a session");
        sim.run_for(Duration::from_millis(5));
        assert_eq!(sim.node(INITIATOR).state(s), Some(State::Established));
        let t = sim.node(TARGET).accept().expect("accepted").session;
        (sim, s, t)
    }

    /// The target listens on `port` of its address with `target`'s
    /// options, and the initiator connects to it with `initiator`'s: the
    /// initiator's handle (nothing has run yet).
    ///
    /// # Errors
    /// If listening or connecting is refused.
    pub fn open_session(
        &mut self,
        port: u16,
        initiator: SessionOptions,
        target: SessionOptions,
    ) -> Result<SessionHandle, OpenSessionError> {
        let addr = self.target_addr(port);
        self.node(TARGET).listen(addr, target)?;
        Ok(self.node(INITIATOR).connect(
            vec![Path {
                local: None,
                peer: addr,
            }],
            initiator,
        )?)
    }

    /// The initiator's and the target's nodes at once.
    pub fn pair(&mut self) -> (&mut Node, &mut Node) {
        let (a, b) = self.nodes.split_at_mut(TARGET);
        (&mut a[INITIATOR], &mut b[0])
    }

    /// The address of host `i`'s `soft0`.
    pub fn addr(&self, i: usize) -> IpAddr {
        self.addrs[i].addr
    }

    /// The target's CM address on `port`.
    pub fn target_addr(&self, port: u16) -> SocketAddr {
        SocketAddr::new(self.addr(TARGET), port)
    }

    /// Adds a second device pair, `soft1` on the initiator's host
    /// (10.0.1.1/24) and on the target's (10.0.1.2/24), and returns the two
    /// paths of a session with one path through each pair: the target's
    /// `soft0` address, then its `soft1` address, both on `port`, neither
    /// naming a local address (the route picks the device).
    pub fn two_paths(&mut self, port: u16) -> Vec<Path> {
        let ih = self.host(INITIATOR).index();
        let th = self.host(TARGET).index();
        let second: IpNet = "10.0.1.2/24".parse().expect("an address");
        self.fabric().add_device_with(
            ih,
            "soft1",
            vec!["10.0.1.1/24".parse().expect("an address")],
            None,
        );
        self.fabric()
            .add_device_with(th, "soft1", vec![second], None);
        vec![
            Path {
                local: None,
                peer: self.target_addr(port),
            },
            Path {
                local: None,
                peer: SocketAddr::new(second.addr, port),
            },
        ]
    }

    /// The fabric's virtual time now.
    pub fn now(&self) -> Timestamp {
        self.fabric.now()
    }

    /// Poll every node until none makes progress (and each is ready to
    /// sleep, [`Node::prepare_to_sleep`]).
    pub fn settle(&mut self) {
        loop {
            let mut progress = false;
            for n in &mut self.nodes {
                progress |= n.poll();
            }
            if !progress {
                for n in &mut self.nodes {
                    progress |= !n.prepare_to_sleep();
                }
                if !progress {
                    return;
                }
            }
        }
    }

    /// Run nodes and fabric until virtual time `until`, jumping from one
    /// due timer or delivery to the next.
    pub fn run_until(&mut self, until: Timestamp) {
        loop {
            self.settle();
            let now = self.fabric.now();
            if now >= until {
                return;
            }
            let next = self
                .nodes
                .iter()
                .filter_map(Node::next_deadline)
                .chain(self.fabric.next_due())
                .min()
                .unwrap_or(until)
                .min(until);
            if next > now {
                self.fabric.advance(next - now);
            } else {
                self.fabric.step();
            }
        }
    }

    /// Run for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let until = self.fabric.now() + d;
        self.run_until(until);
    }

    /// Run until `cond` holds or `limit` of virtual time passed; returns
    /// whether it held.
    pub fn run_until_cond(
        &mut self,
        limit: Duration,
        mut cond: impl FnMut(&mut Sim) -> bool,
    ) -> bool {
        let until = self.fabric.now() + limit;
        loop {
            if cond(self) {
                return true;
            }
            let now = self.fabric.now();
            if now >= until {
                return false;
            }
            let step = Duration::from_micros(100).min(until - now);
            self.run_until(now + step);
        }
    }

    /// Objects not yet destroyed on every host (for leak checks).
    pub fn live_objects(&self) -> usize {
        self.hosts.iter().map(|h| h.object_counts().total()).sum()
    }
}

/// Why [`Sim::open_session`] opened no session.
#[derive(Debug, thiserror::Error)]
pub enum OpenSessionError {
    /// The target's node refused the listener.
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// The initiator's node refused the session.
    #[error(transparent)]
    Connect(#[from] ConnectError),
}
