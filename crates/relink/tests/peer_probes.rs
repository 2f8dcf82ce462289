//! Sessions whose peer's device is away, on the in-process soft fabric
//! (virtual time; a request that meets no device gets no answer): the node
//! lets one session per peer address probe, so the absent peer sees one
//! session's probes, not one per session; when the device is back every
//! session resumes, within about one probe period of its return.

use std::time::Duration;

use relink::{Path, SessionHandle, SessionOptions, State};
use relink_core::policy::Policy;
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

const SESSIONS: usize = 8;

fn attempts(sim: &mut Sim, sessions: &[SessionHandle]) -> u64 {
    sessions
        .iter()
        .map(|s| sim.node(INITIATOR).counters(*s).expect("session").attempts)
        .sum()
}

#[test]
fn one_session_probes_an_absent_peer_and_all_resume_when_it_returns() {
    let mut sim = Sim::new(7);
    let addr = sim.target_addr(7471);
    sim.node(TARGET)
        .listen(addr, SessionOptions::default())
        .expect("listen");
    let sessions: Vec<SessionHandle> = (0..SESSIONS)
        .map(|_| {
            sim.node(INITIATOR)
                .connect(
                    vec![Path {
                        local: None,
                        peer: addr,
                    }],
                    SessionOptions::default(),
                )
                .expect("connect")
        })
        .collect();
    sim.run_for(Duration::from_millis(20));
    for s in &sessions {
        assert_eq!(sim.node(INITIATOR).state(*s), Some(State::Established));
    }
    let before = attempts(&mut sim, &sessions);
    let target = sim.host(TARGET).index();
    sim.fabric().inject(Fault::Remove(target, "soft0".into()));
    let away = Duration::from_secs(2);
    sim.run_for(away);
    let requests = attempts(&mut sim, &sessions) - before;
    // One session's probes: each takes its timeout and at least half an
    // interval. Every session may have made its first attempt at the loss.
    let p = Policy::default();
    let cycle = p.probe_timeout + p.probe_interval.expect("on") / 2;
    let one = (away.as_nanos() / cycle.as_nanos()) as u64 + 1;
    assert!(
        requests <= one + SESSIONS as u64,
        "{requests} requests in {away:?} from {SESSIONS} sessions (one session probes: {one})"
    );
    for s in &sessions {
        assert_ne!(sim.node(INITIATOR).state(*s), Some(State::Established));
    }
    sim.fabric().inject(Fault::Readd(target, "soft0".into()));
    let back = sim.now();
    let bound = p.probe_timeout + p.probe_interval.expect("on") + Duration::from_millis(20);
    sim.run_for(bound);
    for s in &sessions {
        assert_eq!(
            sim.node(INITIATOR).state(*s),
            Some(State::Established),
            "every session resumed within {bound:?} of the device's return (at {back:?})"
        );
    }
}
