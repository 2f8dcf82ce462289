//! How sessions and nodes end, at the node: `Node::close_gracefully` (the
//! pending operations finish, then the goodbye), `Node::shutdown` (every
//! session that way, then every provider object freed), and dropping a
//! node over a fabric with a real clock (its sessions say goodbye).
//!
//! The shutdown tests run over the TCP soft fabric with the peer node in a
//! thread of its own: `shutdown` blocks and drives only its own node, as
//! it would in a process of its own.

use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use relink::{
    Access, BufferToken, CloseError, Footprint, LocalRange, Node, OpError, Outcome, Path, Provider,
    RegionId, RegionOptions, SessionEvent, SessionHandle, SessionOptions, State, SubmitError,
};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_sim::TcpHosts;
use relink_soft::Fault;

const REGION: RegionId = RegionId(1);

fn options() -> SessionOptions {
    SessionOptions::builder()
        .region(
            RegionOptions::new(
                REGION,
                64 * 1024,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            )
            .advertise(true),
        )
        .build()
        .expect("valid options")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.2:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.2")
        .port()
}

/// What the peer's node saw of one session.
#[derive(Debug, Default)]
struct Seen {
    delivered: usize,
    events: Vec<SessionEvent>,
}

impl Seen {
    fn closed_without_a_loss(&self) -> bool {
        self.events.contains(&SessionEvent::Disconnected)
            && !self
                .events
                .iter()
                .any(|e| matches!(e, SessionEvent::DeviceLost { .. }))
    }
}

/// The peer: a node that accepts `n` sessions and takes what they produce
/// until every one of them is closed (or 30 s pass).
fn peer(mut b: Node, n: usize) -> JoinHandle<Vec<Seen>> {
    std::thread::spawn(move || {
        let mut sessions: Vec<(SessionHandle, Seen)> = Vec::new();
        let give_up = Instant::now() + Duration::from_secs(30);
        loop {
            let _ = b.wait_for(Duration::from_millis(5));
            while let Some(t) = b.accept().map(|a| a.session) {
                sessions.push((t, Seen::default()));
            }
            for (t, seen) in &mut sessions {
                while b.poll_delivery(*t).is_some() {
                    seen.delivered += 1;
                }
                while let Some(e) = b.poll_event(*t) {
                    seen.events.push(e);
                }
                while b.poll_completion(*t).is_some() {}
            }
            let closed = sessions
                .iter()
                .filter(|(_, s)| s.events.contains(&SessionEvent::Disconnected))
                .count();
            if (sessions.len() == n && closed == n) || Instant::now() > give_up {
                return sessions.into_iter().map(|(_, s)| s).collect();
            }
        }
    })
}

/// Connect `n` sessions from `a` to `addr` and wait until they are up.
fn connect(a: &mut Node, addr: SocketAddr, n: usize) -> Vec<SessionHandle> {
    let path = vec![Path {
        local: None,
        peer: addr,
    }];
    let ss: Vec<SessionHandle> = (0..n)
        .map(|_| a.connect(path.clone(), options()).unwrap())
        .collect();
    let give_up = Instant::now() + Duration::from_secs(20);
    while !ss.iter().all(|s| a.state(*s) == Some(State::Established)) {
        assert!(Instant::now() < give_up, "sessions not established");
        let _ = a.wait_for(Duration::from_millis(5));
    }
    ss
}

/// Take every completion of `s` (and the rest of its outputs).
fn completions(a: &mut Node, s: SessionHandle) -> Vec<Outcome> {
    let mut v = Vec::new();
    while let Some(c) = a.poll_completion(s) {
        v.push(c.outcome);
    }
    while a.poll_event(s).is_some() || a.poll_delivery(s).is_some() {}
    v
}

/// Submit `messages` messages and `writes` WRITEs on `s`; how many.
fn traffic(a: &mut Node, s: SessionHandle, messages: usize, writes: usize) -> usize {
    for i in 0..messages {
        a.send(s, &[i as u8; 256]).unwrap();
    }
    for i in 0..writes as u64 {
        let local = LocalRange {
            region: REGION,
            offset: i * 1024,
            len: 1024,
        };
        let remote = BufferToken {
            region: REGION,
            offset: i * 1024,
        };
        a.write(s, local, remote).unwrap();
    }
    messages + writes
}

#[test]
fn shutdown_with_traffic_in_flight_finishes_it_then_says_goodbye() {
    let dirs = TcpHosts::new("shutdown");
    let mut a = Node::seeded_for_simulation(dirs.host(INITIATOR), 1);
    let mut b = Node::seeded_for_simulation(dirs.host(TARGET), 2);
    let addr = SocketAddr::new(dirs.addr(TARGET), free_port());
    b.listen(addr, options()).unwrap();
    let listener = peer(b, 3);
    let ss = connect(&mut a, addr, 3);
    // More messages than the peer's receive credits (56): some wait.
    let submitted: Vec<usize> = ss.iter().map(|s| traffic(&mut a, *s, 100, 20)).collect();

    let summary = a.shutdown(Duration::from_secs(20));
    assert_eq!(summary.clean, 3, "{summary:?}");
    assert_eq!(summary.with_pending_failed, 0, "{summary:?}");
    assert_eq!(summary.operations_failed, 0);
    assert_eq!(summary.goodbyes_cut, 0, "{summary:?}");
    assert!(!summary.timed_out);

    for (s, n) in ss.iter().zip(&submitted) {
        assert_eq!(a.state(*s), Some(State::Closed));
        let outcomes = completions(&mut a, *s);
        assert_eq!(outcomes.len(), *n, "one completion per operation");
        assert!(
            outcomes.iter().all(|o| o.is_success()),
            "every operation finished: {outcomes:?}"
        );
    }
    let seen = listener.join().expect("the peer's thread");
    assert_eq!(seen.len(), 3);
    for s in &seen {
        assert_eq!(s.delivered, 100, "every message delivered");
        assert!(s.closed_without_a_loss(), "{:?}", s.events);
    }
    // Nothing left once the outputs are taken.
    let _ = a.poll();
    assert_eq!(a.footprint(), Footprint::default());
    assert_eq!(a.provider().object_counts().total(), 0);
}

#[test]
fn shutdown_fails_what_the_peer_never_confirms() {
    let dirs = TcpHosts::new("shutdown-silent");
    let mut a = Node::seeded_for_simulation(dirs.host(INITIATOR), 3);
    let mut b = Node::seeded_for_simulation(dirs.host(TARGET), 4);
    let addr = SocketAddr::new(dirs.addr(TARGET), free_port());
    b.listen(addr, options()).unwrap();
    let s = a
        .connect(
            vec![Path {
                local: None,
                peer: addr,
            }],
            options(),
        )
        .unwrap();
    let give_up = Instant::now() + Duration::from_secs(20);
    while a.state(s) != Some(State::Established) {
        assert!(Instant::now() < give_up, "not established");
        let _ = a.wait_for(Duration::from_millis(1));
        let _ = b.wait_for(Duration::from_millis(1));
    }
    // The peer's node is not polled any more: its application confirms
    // nothing.
    let n = traffic(&mut a, s, 5, 0);
    let summary = a.shutdown(Duration::from_millis(400));
    assert_eq!(summary.clean, 0, "{summary:?}");
    assert_eq!(summary.with_pending_failed, 1, "{summary:?}");
    assert_eq!(summary.operations_failed, n);
    let outcomes = completions(&mut a, s);
    assert_eq!(outcomes.len(), n, "every operation has its completion");
    for o in outcomes {
        assert!(
            matches!(
                o,
                Outcome::Indeterminate { .. } | Outcome::Failed(OpError::Disconnected)
            ),
            "{o:?}"
        );
    }
    let _ = a.poll();
    assert_eq!(a.footprint(), Footprint::default());
    assert_eq!(a.provider().object_counts().total(), 0);
    drop(b);
}

#[test]
fn dropping_a_node_over_tcp_says_goodbye() {
    let dirs = TcpHosts::new("drop");
    let mut a = Node::seeded_for_simulation(dirs.host(INITIATOR), 5);
    let mut b = Node::seeded_for_simulation(dirs.host(TARGET), 6);
    let addr = SocketAddr::new(dirs.addr(TARGET), free_port());
    b.listen(addr, options()).unwrap();
    let listener = peer(b, 2);
    let ss = connect(&mut a, addr, 2);
    for s in &ss {
        a.send(*s, b"last words").unwrap();
    }
    let provider = a.provider().clone();
    drop(a);
    assert_eq!(provider.object_counts().total(), 0, "everything destroyed");
    let seen = listener.join().expect("the peer's thread");
    assert_eq!(seen.len(), 2);
    for s in &seen {
        assert!(s.closed_without_a_loss(), "{:?}", s.events);
    }
}

/// In-process: a session closing gracefully refuses new work, finishes
/// the old — across a device reset — and closes with the goodbye.
#[test]
fn close_gracefully_finishes_the_pending_work_across_a_reset() {
    let (mut sim, s, t) = Sim::with_session(31);
    for i in 0..80u8 {
        sim.node(INITIATOR).send(s, &[i; 64]).unwrap();
    }
    sim.node(INITIATOR)
        .close_gracefully(s, Duration::from_secs(10))
        .unwrap();
    let err = sim.node(INITIATOR).send(s, b"too late").unwrap_err();
    assert!(matches!(err, SubmitError::Closing), "{err:?}");
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Established));
    let deadline = sim
        .node(INITIATOR)
        .session_info(s)
        .unwrap()
        .closing_deadline;
    assert!(deadline.is_some());
    // The device resets while messages are in flight: they are replayed.
    let host = sim.host(INITIATOR).index();
    sim.fabric().inject(Fault::Reset(host, "soft0".into()));
    sim.run_for(Duration::from_secs(2));

    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Closed));
    let mut mine = Vec::new();
    while let Some(e) = sim.node(INITIATOR).poll_event(s) {
        mine.push(e);
    }
    assert!(
        mine.iter()
            .any(|e| matches!(e, SessionEvent::Resumed { .. })),
        "it recovered before it closed: {mine:?}"
    );
    let outcomes = completions(sim.node(INITIATOR), s);
    assert_eq!(outcomes.len(), 80);
    assert!(outcomes.iter().all(|o| o.is_success()), "{outcomes:?}");
    let mut got = 0;
    while sim.node(TARGET).poll_delivery(t).is_some() {
        got += 1;
    }
    assert_eq!(got, 80, "each message delivered once");
    let mut events = Vec::new();
    while let Some(e) = sim.node(TARGET).poll_event(t) {
        events.push(e);
    }
    let closed = events
        .iter()
        .rposition(|e| *e == SessionEvent::Disconnected)
        .expect("the target closed");
    assert!(
        !events[closed..]
            .iter()
            .any(|e| matches!(e, SessionEvent::DeviceLost { .. })),
        "{events:?}"
    );
    sim.settle();
    assert_eq!(sim.node(INITIATOR).footprint(), Footprint::default());
    assert_eq!(sim.host(INITIATOR).object_counts().total(), 0);
}

/// An unknown handle is an error; a second graceful close is harmless.
#[test]
fn close_gracefully_of_an_unknown_or_closed_session() {
    let (mut sim, s, _t) = Sim::with_session(32);
    let bad = SessionHandle(9999);
    assert!(matches!(
        sim.node(INITIATOR).close_gracefully(bad, Duration::from_secs(1)),
        Err(CloseError::NoSession(h)) if h == bad
    ));
    sim.node(INITIATOR)
        .close_gracefully(s, Duration::from_secs(1))
        .unwrap();
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Closed));
    sim.node(INITIATOR)
        .close_gracefully(s, Duration::from_secs(1))
        .unwrap();
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Closed));
}
