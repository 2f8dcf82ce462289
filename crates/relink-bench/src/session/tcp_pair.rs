//! [`TcpPair`]: a [`ThreadPair`] on two `TcpHost`s over TCP loopback, each
//! host with a runtime directory of its own that goes with the pair.

use std::net::SocketAddr;
use std::sync::Arc;

use relink::{Memory, Node, RegionId, SessionHandle};
use relink_fabric::Provider;
use relink_sim::{TcpHosts, INITIATOR, TARGET};

use super::drive::{Drive, EndCounters};
use super::options::Workload;
use super::thread_pair::ThreadPair;
use crate::loops::LoopSpec;

/// A [`ThreadPair`] on the two hosts of a [`TcpHosts`] of this process, with soft devices
/// on 127.0.0.1 and 127.0.0.2 (each host with its own runtime directory,
/// so two hosts as far as the fabric can tell), over TCP loopback.
pub struct TcpPair {
    // Dropped in this order: the nodes and hosts, then their directories.
    pair: ThreadPair,
    _dir: TcpHosts,
}

impl TcpPair {
    /// Fresh runtime directories, hosts and nodes, and one session of the
    /// options [`session_options`](super::session_options) gives for `spec` and `workload`.
    ///
    /// # Panics
    /// If the directories cannot be created, no loopback port is free, or
    /// the session is not established within 20 s.
    pub fn connect(seed: u64, spec: &LoopSpec, workload: Workload) -> TcpPair {
        let dir = TcpHosts::new("bench");
        let [initiator, target] = tcp_hosts(&dir);
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

/// The two hosts of `dir` as providers.
fn tcp_hosts(dir: &TcpHosts) -> [Arc<dyn Provider>; 2] {
    [INITIATOR, TARGET].map(|side| dir.host(side) as Arc<dyn Provider>)
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

    fn close_counted(self) -> EndCounters {
        // The directories go once the pair is closed and dropped.
        let TcpPair { pair, _dir } = self;
        pair.close_counted()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{RelinkSendLoop, RelinkWriteLoop};

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
        let dir = TcpHosts::new("bench-unit");
        let [initiator, target] = tcp_hosts(&dir);
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
