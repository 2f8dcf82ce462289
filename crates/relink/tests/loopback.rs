//! A node connects to its own listener on the soft TCP fabric — as
//! rdma_cm allows on one device, and as libfabric's `ofi_rxm` does for an
//! MPI rank's messages to itself — and the session carries messages both
//! ways, also across a reset of the device, each delivered once and in
//! order. Both ends are one host: its packets stay inside it instead of
//! crossing a TCP stream.
//!
//! No timing is asserted: waits are bounded only so that a hang fails.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use relink::{Node, Path, SessionOptions, State};
use relink_sim::{TcpHosts, INITIATOR};
use relink_soft::Registry;

const HANG: Duration = Duration::from_secs(60);

#[test]
fn a_node_connects_to_itself_and_its_messages_arrive_once_across_a_reset() {
    let dirs = TcpHosts::new("loopback");
    let mut node = Node::new(dirs.host(INITIATOR));
    let ip = dirs.addr(INITIATOR);
    let port = std::net::TcpListener::bind(SocketAddr::new(ip, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = SocketAddr::new(ip, port);
    node.listen(addr, SessionOptions::default()).unwrap();
    let s = node
        .connect(
            vec![Path {
                local: None,
                peer: addr,
            }],
            SessionOptions::default(),
        )
        .unwrap();
    let start = Instant::now();
    let mut t = None;
    while t.is_none() || node.state(s) != Some(State::Established) {
        let _ = node.wait_for(Duration::from_millis(5));
        t = t.or_else(|| node.accept().map(|a| a.session));
        assert!(
            start.elapsed() < HANG,
            "not established: {:?}",
            node.state(s)
        );
    }
    let t = t.unwrap();
    let n = 200u32;
    let (mut got_t, mut got_s) = (Vec::new(), Vec::new());
    for i in 0..n {
        node.send(s, &i.to_le_bytes()).unwrap();
        node.send(t, &(i + 1_000_000).to_le_bytes()).unwrap();
        if i == n / 2 {
            // Half the messages sent: the device goes; both halves recover
            // (the loss is seen before the rest is sent).
            Registry::open(dirs.dir(INITIATOR))
                .unwrap()
                .reset("soft0")
                .unwrap();
            while node.counters(s).unwrap().losses == 0 {
                let _ = node.wait_for(Duration::from_millis(5));
                assert!(start.elapsed() < HANG, "the reset was not seen");
            }
        }
        let _ = node.wait_for(Duration::from_millis(1));
        while let Some((_, m)) = node.poll_delivery(t) {
            got_t.push(u32::from_le_bytes(m.try_into().unwrap()));
        }
        while let Some((_, m)) = node.poll_delivery(s) {
            got_s.push(u32::from_le_bytes(m.try_into().unwrap()));
        }
    }
    while got_t.len() < n as usize || got_s.len() < n as usize {
        let _ = node.wait_for(Duration::from_millis(5));
        while let Some((_, m)) = node.poll_delivery(t) {
            got_t.push(u32::from_le_bytes(m.try_into().unwrap()));
        }
        while let Some((_, m)) = node.poll_delivery(s) {
            got_s.push(u32::from_le_bytes(m.try_into().unwrap()));
        }
        assert!(
            start.elapsed() < HANG,
            "{} and {} of {n} delivered",
            got_t.len(),
            got_s.len()
        );
    }
    assert_eq!(got_t, (0..n).collect::<Vec<_>>(), "to the accepted half");
    assert_eq!(
        got_s,
        (1_000_000..1_000_000 + n).collect::<Vec<_>>(),
        "to the connecting half"
    );
    let losses = node.counters(s).unwrap().losses;
    assert!(losses >= 1);
    println!(
        "{n} messages each way, {losses} loss(es) recovered, {:?}",
        start.elapsed()
    );
}
