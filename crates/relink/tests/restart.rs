//! A restarted process connects again at once and hears why it was
//! refused: never a silent retry until the give-up deadline.
//!
//! Session ids come from the node's randomness; a node made
//! `seeded_for_simulation` (as in the simulator) restarted with the same seed reuses
//! them, the hardest case for the target: a Hello naming a session it
//! already has.

use std::sync::Arc;
use std::time::Duration;

use relink::{Node, Path, RefuseReason, SessionEvent, SessionHandle, SessionOptions, State};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::{Fault, LinkConfig};

const PORT: u16 = 7471;

fn listen(sim: &mut Sim) {
    let addr = sim.target_addr(PORT);
    sim.node(TARGET)
        .listen(addr, SessionOptions::default())
        .unwrap();
}

fn connect(sim: &mut Sim, i: usize) -> SessionHandle {
    let peer = sim.target_addr(PORT);
    sim.node(i)
        .connect(vec![Path { local: None, peer }], SessionOptions::default())
        .unwrap()
}

fn events(sim: &mut Sim, i: usize, s: SessionHandle) -> Vec<SessionEvent> {
    let mut v = Vec::new();
    while let Some(e) = sim.node(i).poll_event(s) {
        v.push(e);
    }
    v
}

/// Run until node `i`'s session `s` is established, for at most `limit` of
/// virtual time; panics with its events if it is not.
fn established_within(sim: &mut Sim, i: usize, s: SessionHandle, limit: Duration) {
    let up = sim.run_until_cond(limit, |sim| {
        sim.node(i).state(s) == Some(State::Established)
    });
    assert!(
        up,
        "not established within {limit:?}: {:?}, events {:?}",
        sim.node(i).state(s),
        events(sim, i, s)
    );
}

#[test]
fn a_client_restarted_with_the_same_seed_after_a_close_connects_again() {
    let (mut sim, s, t) = Sim::with_session(11);
    let first = sim.node(INITIATOR).session_info(s).unwrap().id;
    sim.node(INITIATOR).close(s).unwrap();
    sim.run_for(Duration::from_millis(5));
    assert_eq!(sim.node(TARGET).state(t), Some(State::Closed));

    sim.restart(INITIATOR);
    let s2 = connect(&mut sim, INITIATOR);
    assert_eq!(
        sim.node(INITIATOR).session_info(s2).unwrap().id,
        first,
        "the same seed, the same session id"
    );
    established_within(&mut sim, INITIATOR, s2, Duration::from_millis(50));
    let t2 = sim
        .node(TARGET)
        .accept()
        .expect("a new session accepted")
        .session;
    assert_ne!(t2, t, "a new session on the target, not the closed one");
    assert_eq!(sim.node(TARGET).state(t2), Some(State::Established));
    // And it carries traffic.
    sim.node(INITIATOR).send(s2, b"again").unwrap();
    sim.run_for(Duration::from_millis(5));
    assert_eq!(sim.node(TARGET).poll_delivery(t2).unwrap().1, b"again");
}

#[test]
fn a_client_process_that_died_connects_again_as_a_new_session() {
    let (mut sim, _s, t) = Sim::with_session(12);
    // The process dies (its node is aborted: the target sees a disconnect
    // without a goodbye and waits for a Resume that never comes); the new
    // process's node draws its ids from the OS.
    let host = Arc::new(sim.host(INITIATOR).clone());
    std::mem::replace(sim.node(INITIATOR), Node::new(host)).abort();
    let s2 = connect(&mut sim, INITIATOR);
    established_within(&mut sim, INITIATOR, s2, Duration::from_millis(50));
    let t2 = sim
        .node(TARGET)
        .accept()
        .expect("a new session accepted")
        .session;
    assert_ne!(t2, t);
    assert_eq!(sim.node(TARGET).state(t2), Some(State::Established));
    // The old session on the target lost its transport and waits for the
    // Resume until its give-up deadline.
    assert_eq!(sim.node(TARGET).state(t), Some(State::Recovering));
}

#[test]
fn a_restarted_server_refuses_the_old_session_at_once_and_takes_a_new_one() {
    let (mut sim, s, _t) = Sim::with_session(13);
    sim.node(INITIATOR).send(s, b"in flight").unwrap();
    sim.restart(TARGET);
    listen(&mut sim);
    let failed = sim.run_until_cond(Duration::from_millis(100), |sim| {
        sim.node(INITIATOR).state(s) == Some(State::Failed)
    });
    let ev = events(&mut sim, INITIATOR, s);
    assert!(failed, "the old session fails promptly: {ev:?}");
    assert!(
        ev.contains(&SessionEvent::Refused {
            reason: RefuseReason::UnknownSession,
            retrying: false
        }),
        "the refusal and its reason are reported: {ev:?}"
    );
    assert!(ev
        .iter()
        .any(|e| matches!(e, SessionEvent::PeerLost { .. })));
    // The operation in flight completes (it failed).
    assert!(sim.node(INITIATOR).poll_completion(s).is_some());

    let s2 = connect(&mut sim, INITIATOR);
    established_within(&mut sim, INITIATOR, s2, Duration::from_millis(50));
    assert!(sim.node(TARGET).accept().is_some());
}

#[test]
fn a_busy_refusal_is_reported_and_retried_until_the_id_is_free() {
    let mut sim = Sim::new(14);
    // A second client whose node has the initiator's seed: the same
    // session ids.
    let twin = sim.add_host("twin", "10.0.0.3/24", 14 ^ 0x1111);
    listen(&mut sim);
    let s = connect(&mut sim, INITIATOR);
    established_within(&mut sim, INITIATOR, s, Duration::from_millis(5));
    let t = sim.node(TARGET).accept().unwrap().session;

    let s2 = connect(&mut sim, twin);
    sim.run_for(Duration::from_millis(30));
    let ev = events(&mut sim, twin, s2);
    assert!(
        ev.contains(&SessionEvent::Refused {
            reason: RefuseReason::Busy,
            retrying: true
        }),
        "the twin hears it is refused, and why: {ev:?}"
    );
    assert_ne!(sim.node(twin).state(s2), Some(State::Failed));
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Established));

    // Once the session of that id is over, the twin's next Hello is a new
    // session.
    sim.node(INITIATOR).close(s).unwrap();
    established_within(&mut sim, twin, s2, Duration::from_secs(15));
    assert_eq!(sim.node(TARGET).state(t), Some(State::Closed));
}

#[test]
fn a_hello_accepted_after_the_attempt_timed_out_does_not_block_the_next() {
    let mut sim = Sim::new(15);
    // 5 ms each way and 8 ms for the first attempt: the target accepts the
    // first Hello, but its reply comes back after the attempt timed out.
    sim.fabric().inject(Fault::SetLink(LinkConfig {
        latency: Duration::from_millis(5),
        ..LinkConfig::default()
    }));
    listen(&mut sim);
    let peer = sim.target_addr(PORT);
    let mut opts = SessionOptions::default();
    opts.policy.initial_connect_timeout = Duration::from_millis(8);
    let s = sim
        .node(INITIATOR)
        .connect(vec![Path { local: None, peer }], opts)
        .unwrap();
    established_within(&mut sim, INITIATOR, s, Duration::from_secs(1));
    let ev = events(&mut sim, INITIATOR, s);
    assert!(
        !ev.iter().any(|e| matches!(e, SessionEvent::Refused { .. })),
        "no refusal: {ev:?}"
    );
    assert!(
        sim.node(INITIATOR).counters(s).unwrap().attempts > 1,
        "the first attempt timed out: {ev:?}"
    );
    let t = sim.node(TARGET).accept().expect("accepted").session;
    assert!(
        sim.node(TARGET).accept().is_none(),
        "one session on the target"
    );
    sim.run_until_cond(Duration::from_secs(1), |sim| {
        sim.node(TARGET).state(t) == Some(State::Established)
    });
    assert_eq!(sim.node(TARGET).state(t), Some(State::Established));
    sim.node(INITIATOR).send(s, b"late but there").unwrap();
    sim.run_for(Duration::from_millis(100));
    assert_eq!(
        sim.node(TARGET).poll_delivery(t).unwrap().1,
        b"late but there"
    );
}

#[test]
fn a_node_draws_its_session_ids_from_the_os() {
    let mut sim = Sim::new(16);
    listen(&mut sim);
    let host = Arc::new(sim.host(INITIATOR).clone());
    let mut ids = Vec::new();
    for _ in 0..2 {
        // Two processes started alike: nothing in common.
        *sim.node(INITIATOR) = Node::new(host.clone());
        let s = connect(&mut sim, INITIATOR);
        ids.push(sim.node(INITIATOR).session_info(s).unwrap().id);
    }
    assert_ne!(ids[0], ids[1]);
}
