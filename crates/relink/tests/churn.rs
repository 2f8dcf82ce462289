//! Ended sessions are reaped: a node that opens and closes sessions for
//! ever keeps the same size (its tables are counted, not the process's
//! memory), and the handle of a reaped session is answered with
//! a `NoSession` error / `None`.

use std::time::Duration;

use relink::{
    CloseError, Footprint, Path, RegionError, SessionEvent, SessionHandle, SessionOptions, State,
    SubmitError,
};
use relink_sim::sim::{Sim, INITIATOR, TARGET};

const PORT: u16 = 7471;

/// Take everything session `s` of node `i` produced.
fn drain(sim: &mut Sim, i: usize, s: SessionHandle) -> Vec<SessionEvent> {
    let node = sim.node(i);
    while node.poll_completion(s).is_some() {}
    while node.poll_delivery(s).is_some() {}
    std::iter::from_fn(|| node.poll_event(s)).collect()
}

/// One session opened, used and closed (by the initiator on even rounds,
/// by the target on odd ones); both sides drained of it.
fn cycle(sim: &mut Sim, round: usize) {
    let peer = sim.target_addr(PORT);
    let s = sim
        .node(INITIATOR)
        .connect(vec![Path { local: None, peer }], SessionOptions::default())
        .unwrap();
    let mut t = None;
    let up = sim.run_until_cond(Duration::from_millis(50), |sim| {
        t = t.or_else(|| sim.node(TARGET).accept().map(|a| a.session));
        t.is_some() && sim.node(INITIATOR).state(s) == Some(State::Established)
    });
    assert!(up, "round {round}: not established");
    let t = t.expect("accepted");
    sim.node(INITIATOR).send(s, b"ping").unwrap();
    sim.node(TARGET).send(t, b"pong").unwrap();
    sim.run_for(Duration::from_micros(200));
    let (closer, h, other, oh) = if round % 2 == 0 {
        (INITIATOR, s, TARGET, t)
    } else {
        (TARGET, t, INITIATOR, s)
    };
    sim.node(closer).close(h).unwrap();
    let closed = sim.run_until_cond(Duration::from_millis(50), |sim| {
        sim.node(other).state(oh) == Some(State::Closed)
    });
    assert!(closed, "round {round}: the peer did not close");
    assert!(drain(sim, INITIATOR, s).contains(&SessionEvent::Disconnected));
    assert!(drain(sim, TARGET, t).contains(&SessionEvent::Disconnected));
    // Drained: reaped at the next poll.
    sim.settle();
    for (i, h) in [(INITIATOR, s), (TARGET, t)] {
        assert_eq!(
            sim.node(i).state(h),
            None,
            "round {round}: node {i} reaped it"
        );
    }
}

fn footprints(sim: &mut Sim) -> (Footprint, Footprint, usize) {
    (
        sim.node(INITIATOR).footprint(),
        sim.node(TARGET).footprint(),
        sim.live_objects(),
    )
}

#[test]
fn two_thousand_sessions_opened_and_closed_leave_the_nodes_as_they_were() {
    let mut sim = Sim::new(21);
    let addr = sim.target_addr(PORT);
    sim.node(TARGET)
        .listen(addr, SessionOptions::default())
        .unwrap();
    let before = footprints(&mut sim);
    for round in 0..2000 {
        cycle(&mut sim, round);
        assert!(sim.node(INITIATOR).sessions().is_empty(), "round {round}");
        assert!(sim.node(TARGET).sessions().is_empty(), "round {round}");
        if round % 250 == 0 || round == 1999 {
            assert_eq!(footprints(&mut sim), before, "round {round}");
        }
    }
}

#[test]
fn a_reaped_handle_is_unknown() {
    let (mut sim, s, t) = Sim::with_session(22);
    sim.node(INITIATOR).close(s).unwrap();
    sim.run_for(Duration::from_millis(5));
    // Not drained yet: still there, closed.
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Closed));
    assert_eq!(sim.node(INITIATOR).sessions(), vec![s]);
    drain(&mut sim, INITIATOR, s);
    drain(&mut sim, TARGET, t);
    // Readable until the next poll.
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Closed));
    sim.settle();
    let node = sim.node(INITIATOR);
    assert!(node.sessions().is_empty());
    assert!(matches!(node.send(s, b"x"), Err(SubmitError::NoSession(h)) if h == s));
    assert!(matches!(node.close(s), Err(CloseError::NoSession(_))));
    assert!(matches!(
        node.region(s, relink::RegionId(1)),
        Err(RegionError::NoSession(_))
    ));
    assert_eq!(node.state(s), None);
    assert_eq!(node.counters(s), None);
    assert!(node.poll_event(s).is_none());
    assert!(node.poll_completion(s).is_none());
    assert!(sim.node(TARGET).sessions().is_empty());
}

#[test]
fn an_ended_session_nobody_drains_is_reaped_after_its_linger() {
    let (mut sim, s, t) = Sim::with_session(23);
    sim.node(INITIATOR).set_linger(Duration::from_secs(2));
    sim.node(TARGET).set_linger(Duration::from_secs(2));
    sim.node(INITIATOR).send(s, b"never taken").unwrap();
    sim.node(INITIATOR).close(s).unwrap();
    sim.run_for(Duration::from_secs(1));
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Closed));
    assert_eq!(sim.node(TARGET).state(t), Some(State::Closed));
    sim.run_for(Duration::from_millis(1500));
    assert!(sim.node(INITIATOR).sessions().is_empty());
    assert!(sim.node(TARGET).sessions().is_empty());
    assert_eq!(sim.node(TARGET).footprint().ended, 0);
    assert!(sim.node(TARGET).poll_delivery(t).is_none());
}

#[test]
fn an_accepted_session_that_ended_before_it_was_taken_leaves_the_queue() {
    let mut sim = Sim::new(24);
    sim.node(TARGET).set_linger(Duration::from_secs(1));
    let addr = sim.target_addr(PORT);
    sim.node(TARGET)
        .listen(addr, SessionOptions::default())
        .unwrap();
    let s = sim
        .node(INITIATOR)
        .connect(
            vec![Path {
                local: None,
                peer: addr,
            }],
            SessionOptions::default(),
        )
        .unwrap();
    sim.run_for(Duration::from_millis(5));
    sim.node(INITIATOR).close(s).unwrap();
    sim.run_for(Duration::from_secs(2));
    assert_eq!(sim.node(TARGET).footprint().accepted, 0);
    assert!(sim.node(TARGET).accept().is_none());
    assert!(sim.node(TARGET).sessions().is_empty());
}
