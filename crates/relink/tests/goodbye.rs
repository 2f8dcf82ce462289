//! The goodbye of an admin close: the side that calls `close` sends a
//! `Close` message and disconnects once its send completed; the peer must
//! close its half at once (`SessionEvent::Disconnected`, state `Closed`),
//! never take the disconnect for a loss and recover until its give-up
//! deadline — whether the nodes are polled after every fabric step or only
//! now and then (the message and the disconnect then arrive in one poll
//! round), in-process and over TCP, on a link that loses packets (the
//! goodbye is retransmitted: a disconnect that did not wait for its
//! completion would flush it, as rxe does), and when a node is dropped.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use relink::{Footprint, Node, Path, Provider, SessionEvent, SessionHandle, SessionOptions, State};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_sim::TcpHosts;
use relink_soft::{Fault, LinkConfig};

/// What a peer made of the other side's close: `Ok` once it closed, `Err`
/// with the events if it saw a loss first.
fn outcome(events: &[SessionEvent]) -> Option<Result<(), String>> {
    for e in events {
        match e {
            SessionEvent::Disconnected => return Some(Ok(())),
            SessionEvent::DeviceLost { cause } => {
                return Some(Err(format!(
                    "the peer's close was taken for a loss ({cause}): {events:?}"
                )))
            }
            _ => {}
        }
    }
    None
}

/// How the nodes of a `Sim` are driven.
#[derive(Clone, Copy, Debug)]
enum Polling {
    /// Polled after every fabric step (`Sim::run_for`).
    Fine,
    /// The fabric advances 1 ms, then both nodes are polled until idle.
    Coarse,
}

fn drive(sim: &mut Sim, polling: Polling, d: Duration) {
    match polling {
        Polling::Fine => sim.run_for(d),
        Polling::Coarse => {
            let until = sim.now() + d;
            while sim.now() < until {
                sim.fabric().advance(Duration::from_millis(1));
                sim.settle();
            }
        }
    }
}

/// Open a session, close it on `closer`'s side, and check the other side
/// closed within 20 ms (of virtual time), without a loss.
fn goodbye_in_process(seed: u64, polling: Polling, closer: usize) {
    let (mut sim, s, t) = Sim::with_session(seed);
    drive(&mut sim, polling, Duration::from_millis(3));
    let (mine, theirs) = if closer == INITIATOR { (s, t) } else { (t, s) };
    let peer = 1 - closer;
    // Traffic the peer has not read yet when the goodbye comes.
    for i in 0..5u8 {
        sim.node(closer).send(mine, &[i; 32]).unwrap();
    }
    sim.node(closer).close(mine).unwrap();
    drive(&mut sim, polling, Duration::from_millis(20));
    let mut events = Vec::new();
    while let Some(e) = sim.node(peer).poll_event(theirs) {
        events.push(e);
    }
    match outcome(&events) {
        Some(Ok(())) => {}
        Some(Err(e)) => panic!("seed {seed}, {polling:?}, closer {closer}: {e}"),
        None => panic!("seed {seed}, {polling:?}, closer {closer}: no close seen: {events:?}"),
    }
    assert_eq!(sim.node(peer).state(theirs), Some(State::Closed));
    // Every message sent before the close was delivered.
    let mut got = 0;
    while sim.node(peer).poll_delivery(theirs).is_some() {
        got += 1;
    }
    assert_eq!(
        got, 5,
        "seed {seed}, {polling:?}: deliveries before the goodbye"
    );
}

#[test]
fn the_peer_closes_at_once_under_fine_polling() {
    for seed in 0..10 {
        goodbye_in_process(seed, Polling::Fine, INITIATOR);
        goodbye_in_process(seed, Polling::Fine, TARGET);
    }
}

#[test]
fn the_peer_closes_at_once_under_coarse_polling() {
    for seed in 0..10 {
        goodbye_in_process(seed, Polling::Coarse, INITIATOR);
        goodbye_in_process(seed, Polling::Coarse, TARGET);
    }
}

/// Take everything session `h` of node `i` produced.
fn drain(sim: &mut Sim, i: usize, h: SessionHandle) {
    let n = sim.node(i);
    while n.poll_event(h).is_some() || n.poll_completion(h).is_some() {}
    while n.poll_delivery(h).is_some() {}
}

/// On a link that loses a third of the RC packets, the goodbye (and the
/// messages before it) may need retransmissions: the closing side keeps
/// its transport until the goodbye's send completed, then disconnects, so
/// the peer reads the goodbye before the disconnect. Afterwards nothing is
/// left: no closing transport, no session once drained, no provider
/// object but the target's listener.
fn goodbye_on_a_lossy_link(seed: u64, polling: Polling, closer: usize) {
    let (mut sim, s, t) = Sim::with_session(seed);
    drive(&mut sim, polling, Duration::from_millis(3));
    sim.fabric().inject(Fault::SetLink(LinkConfig {
        drop_rate: 0.3,
        ..LinkConfig::default()
    }));
    let (mine, theirs) = if closer == INITIATOR { (s, t) } else { (t, s) };
    let peer = 1 - closer;
    for i in 0..5u8 {
        sim.node(closer).send(mine, &[i; 32]).unwrap();
    }
    sim.node(closer).close(mine).unwrap();
    assert_eq!(
        sim.node(closer).footprint().closing,
        1,
        "the transport waits for its goodbye"
    );
    drive(&mut sim, polling, Duration::from_secs(2));
    let mut events = Vec::new();
    while let Some(e) = sim.node(peer).poll_event(theirs) {
        events.push(e);
    }
    let what = format!("seed {seed}, {polling:?}, closer {closer}");
    match outcome(&events) {
        Some(Ok(())) => {}
        Some(Err(e)) => panic!("{what}: {e}"),
        None => panic!("{what}: no close seen: {events:?}"),
    }
    drain(&mut sim, INITIATOR, s);
    drain(&mut sim, TARGET, t);
    sim.settle();
    for i in [INITIATOR, TARGET] {
        let f = sim.node(i).footprint();
        let listener = usize::from(i == TARGET);
        let mut want = Footprint::default();
        want.listeners = listener;
        want.cm_ids = listener;
        assert_eq!(f, want, "{what}: node {i}");
    }
    assert_eq!(sim.live_objects(), 1, "{what}: only the listener's CM id");
}

#[test]
fn on_a_lossy_link_the_goodbye_leaves_before_the_disconnect() {
    for seed in 0..12 {
        for polling in [Polling::Fine, Polling::Coarse] {
            goodbye_on_a_lossy_link(seed, polling, INITIATOR);
            goodbye_on_a_lossy_link(seed, polling, TARGET);
        }
    }
}

/// A peer that never acknowledges (its device gone without a word): the
/// closing transport is destroyed at the goodbye bound, and nothing
/// leaks.
#[test]
fn a_goodbye_nobody_acknowledges_ends_at_its_bound() {
    let (mut sim, s, _t) = Sim::with_session(3);
    sim.node(INITIATOR)
        .set_goodbye_timeout(Duration::from_millis(300));
    let host = sim.host(TARGET).clone();
    sim.fabric()
        .inject(Fault::SilentRemove(host.index(), "soft0".into()));
    sim.node(INITIATOR).close(s).unwrap();
    assert_eq!(sim.node(INITIATOR).footprint().closing, 1);
    sim.run_for(Duration::from_millis(299));
    assert_eq!(sim.node(INITIATOR).footprint().closing, 1, "still waiting");
    sim.run_for(Duration::from_millis(2));
    assert_eq!(
        sim.node(INITIATOR).footprint().closing,
        0,
        "cut at the bound"
    );
    drain(&mut sim, INITIATOR, s);
    sim.settle();
    assert_eq!(sim.node(INITIATOR).footprint(), Footprint::default());
    assert_eq!(sim.host(INITIATOR).object_counts().total(), 0);
}

/// Dropping a node closes its live sessions with a goodbye: the peer
/// closes its half instead of recovering (in-process, the goodbye is
/// posted and the node does not wait on the virtual clock).
#[test]
fn dropping_a_node_says_goodbye() {
    for closer in [INITIATOR, TARGET] {
        let (mut sim, s, t) = Sim::with_session(21);
        let (mine, theirs) = if closer == INITIATOR { (s, t) } else { (t, s) };
        sim.node(closer).send(mine, b"last words").unwrap();
        let host = std::sync::Arc::new(sim.host(closer).clone());
        // The process goes on with a new node; the old one is dropped.
        *sim.node(closer) = Node::new(host);
        assert_eq!(sim.host(closer).object_counts().total(), 0, "all destroyed");
        let peer = 1 - closer;
        sim.run_for(Duration::from_millis(20));
        let mut events = Vec::new();
        while let Some(e) = sim.node(peer).poll_event(theirs) {
            events.push(e);
        }
        match outcome(&events) {
            Some(Ok(())) => {}
            Some(Err(e)) => panic!("closer {closer}: {e}"),
            None => panic!("closer {closer}: no close seen: {events:?}"),
        }
        assert_eq!(sim.node(peer).state(theirs), Some(State::Closed));
    }
}

/// `Node::abort` says no goodbye: the peer takes it for a loss.
#[test]
fn an_aborted_node_says_no_goodbye() {
    let (mut sim, s, t) = Sim::with_session(22);
    let host = std::sync::Arc::new(sim.host(INITIATOR).clone());
    std::mem::replace(sim.node(INITIATOR), Node::new(host)).abort();
    assert_eq!(sim.host(INITIATOR).object_counts().total(), 0);
    sim.run_for(Duration::from_millis(20));
    let mut events = Vec::new();
    while let Some(e) = sim.node(TARGET).poll_event(t) {
        events.push(e);
    }
    assert!(
        matches!(outcome(&events), Some(Err(_))),
        "a loss, not a close: {events:?}"
    );
    let _ = s;
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.2:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.2")
        .port()
}

/// Poll both nodes for up to `limit` of wall clock, until `done`; `coarse`:
/// sleep 1 ms between rounds (so a message and a disconnect meet in one
/// round), else wait on the providers for the next event.
fn run_tcp(
    a: &mut Node,
    b: &mut Node,
    coarse: bool,
    limit: Duration,
    mut done: impl FnMut(&mut Node, &mut Node) -> bool,
) -> bool {
    let t0 = Instant::now();
    loop {
        while a.poll() | b.poll() {}
        if done(a, b) {
            return true;
        }
        if t0.elapsed() > limit {
            return false;
        }
        if coarse {
            std::thread::sleep(Duration::from_millis(1));
        } else {
            let now = a.now();
            a.provider().wait(Some(now + Duration::from_micros(200)));
        }
    }
}

/// Over the TCP soft fabric: `n` sessions opened and closed, alternately
/// by the initiator and the target; each peer must close at once.
fn goodbye_over_tcp(coarse: bool, n: usize) {
    let dirs = TcpHosts::new("goodbye");
    let mut a = Node::seeded_for_simulation(dirs.host(INITIATOR), 1);
    let mut b = Node::seeded_for_simulation(dirs.host(TARGET), 2);
    let addr = SocketAddr::new("127.0.0.2".parse().unwrap(), free_port());
    b.listen(addr, SessionOptions::default()).unwrap();
    for i in 0..n {
        let s = a
            .connect(
                vec![Path {
                    local: None,
                    peer: addr,
                }],
                SessionOptions::default(),
            )
            .unwrap();
        let mut t: Option<SessionHandle> = None;
        let up = run_tcp(&mut a, &mut b, coarse, Duration::from_secs(20), |a, b| {
            t = t.or_else(|| b.accept().map(|acc| acc.session));
            t.is_some_and(|t| {
                a.state(s) == Some(State::Established) && b.state(t) == Some(State::Established)
            })
        });
        assert!(up, "session {i} not established: {:?}", a.state(s));
        let t = t.expect("accepted");
        for _ in [(); 3] {
            a.send(s, b"before the goodbye").unwrap();
            b.send(t, b"before the goodbye").unwrap();
        }
        let by_initiator = i % 2 == 0;
        if by_initiator {
            a.close(s).unwrap();
        } else {
            b.close(t).unwrap();
        }
        let mut events = Vec::new();
        let mut verdict = None;
        run_tcp(&mut a, &mut b, coarse, Duration::from_secs(10), |a, b| {
            let (node, h) = if by_initiator { (b, t) } else { (a, s) };
            while let Some(e) = node.poll_event(h) {
                events.push(e);
            }
            verdict = outcome(&events);
            verdict.is_some()
        });
        match verdict {
            Some(Ok(())) => {}
            Some(Err(e)) => panic!("session {i} (coarse {coarse}): {e}"),
            None => panic!("session {i} (coarse {coarse}): the peer saw no close: {events:?}"),
        }
    }
}

#[test]
fn over_tcp_the_peer_closes_at_once_under_coarse_polling() {
    goodbye_over_tcp(true, 6);
}

#[test]
fn over_tcp_the_peer_closes_at_once_under_fine_polling() {
    goodbye_over_tcp(false, 6);
}
