//! The goodbye of an admin close: the side that calls `close` sends a
//! `Close` message and disconnects; the peer must close its half at once
//! (`SessionEvent::Disconnected`, state `Closed`), never take the
//! disconnect for a loss and recover until its give-up deadline — whether
//! the nodes are polled after every fabric step or only now and then (the
//! message and the disconnect then arrive in one poll round), in-process
//! and over TCP.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use relink::{Node, Path, SessionEvent, SessionHandle, SessionOptions, State};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_sim::TcpHosts;

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
    let mut a = Node::with_seed(dirs.host(INITIATOR), 1);
    let mut b = Node::with_seed(dirs.host(TARGET), 2);
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
