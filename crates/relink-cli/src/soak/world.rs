//! The soak's world: two soft hosts of this process on the soft TCP
//! fabric ([`TcpHosts`]: one device registry directory each, `soft0` on
//! 127.0.0.1 and 127.0.0.2), a [`Node`] per host, and the sessions
//! between them, each with the checked workload's regions
//! ([`workload::options`]) — real TCP connections, the soft fabric's own
//! threads, wall-clock time.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use relink::{Node, Path, Policy, SessionHandle, State};
use relink_fabric::IpNet;
use relink_sim::workload::{self, Window, WINDOW_A, WINDOW_B};
use relink_sim::{TcpHosts, INITIATOR, TARGET};
use relink_soft::Registry;

/// The sessions: a name, the workload's window. A carries every kind of
/// operation (messages from bytes and from registered memory, WRITEs and
/// READs, some gathering and scattering, FETCH_ADDs), B messages only.
pub(super) const SESSIONS: [(&str, Window); 2] = [("A", WINDOW_A), ("B", WINDOW_B)];

/// How long setting up may take before the soak gives up.
const SETUP: Duration = Duration::from_secs(30);

/// The two hosts, their nodes and the sessions.
pub(super) struct World {
    /// The initiator's node ([`INITIATOR`]) and the target's ([`TARGET`]).
    pub(super) nodes: [Node; 2],
    /// Per session of [`SESSIONS`]: its handle on the initiator, and on
    /// the target.
    pub(super) sessions: Vec<[SessionHandle; 2]>,
    /// Declared last: the directories go after the nodes.
    pub(super) hosts: TcpHosts,
}

/// The sessions' policy: relink's defaults, except that nothing is
/// measured against the clock on a machine that may be loaded (no path
/// probes, whose 50 ms timeout a descheduled thread can miss; connection
/// attempts that may take 30 s): a loss then comes from a fault, not from
/// this process waiting for a core. Keepalives stay (5 s).
pub(super) fn policy() -> Policy {
    Policy::builder()
        .probe_interval(None)
        .connect_timeout(Duration::from_secs(30))
        .initial_connect_timeout(Duration::from_secs(30))
        .build()
        .expect("a valid policy")
}

impl World {
    /// Make the hosts, the nodes and every session of [`SESSIONS`], and
    /// wait until each is established on both sides.
    pub(super) fn build() -> anyhow::Result<World> {
        let hosts = TcpHosts::new("soak");
        let mut a = Node::new(hosts.host(INITIATOR));
        let mut b = Node::new(hosts.host(TARGET));
        let port = std::net::TcpListener::bind((hosts.addr(TARGET), 0))
            .and_then(|l| l.local_addr())
            .context("a free port on the target's address")?
            .port();
        let addr = SocketAddr::new(hosts.addr(TARGET), port);
        b.listen(addr, workload::options(TARGET, policy()))
            .context("listening on the target")?;
        let mut initiator = Vec::new();
        for _ in SESSIONS {
            let path = vec![Path {
                local: None,
                peer: addr,
            }];
            initiator.push(
                a.connect(path, workload::options(INITIATOR, policy()))
                    .context("connecting")?,
            );
        }
        let mut accepted = Vec::new();
        let give_up = Instant::now() + SETUP;
        loop {
            let _ = a.wait_for(Duration::from_millis(1));
            let _ = b.wait_for(Duration::from_millis(1));
            while let Some(acc) = b.accept() {
                accepted.push(acc.session);
            }
            let up = |n: &Node, s: &SessionHandle| n.state(*s) == Some(State::Established);
            if accepted.len() == initiator.len()
                && initiator.iter().all(|s| up(&a, s))
                && accepted.iter().all(|s| up(&b, s))
            {
                break;
            }
            if Instant::now() > give_up {
                bail!("the sessions were not established within {SETUP:?}");
            }
        }
        // Pair each initiator session with the target's of the same id.
        let mut sessions = Vec::new();
        for s in initiator {
            let id = a.session_info(s).context("the session")?.id;
            let t = accepted
                .iter()
                .copied()
                .find(|t| b.session_info(*t).is_some_and(|i| i.id == id))
                .context("the target's half of a session")?;
            sessions.push([s, t]);
        }
        Ok(World {
            nodes: [a, b],
            sessions,
            hosts,
        })
    }

    /// Each host's device registry (for the faults).
    pub(super) fn registries(&self) -> anyhow::Result<[Registry; 2]> {
        Ok([
            Registry::open(self.hosts.dir(INITIATOR))?,
            Registry::open(self.hosts.dir(TARGET))?,
        ])
    }

    /// The address each host's device owns.
    pub(super) fn addrs(&self) -> [IpNet; 2] {
        relink_sim::tcp::ADDRS.map(|a| a.parse().expect("constant"))
    }

    /// Whether every session is established on both sides.
    pub(super) fn all_established(&self) -> bool {
        self.sessions.iter().all(|pair| {
            [INITIATOR, TARGET]
                .into_iter()
                .all(|side| self.nodes[side].state(pair[side]) == Some(State::Established))
        })
    }
}
