//! The application decides: a manual session
//! ([`RecoveryMode::Manual`]) whose device is replaced holds — its
//! messages pending, no attempt — until the application's own check
//! passes (here a quorum of votes), then resumes and every message is
//! delivered exactly once; and a policy given during an outage moves the
//! give-up deadline past the old one, or cancels it.

use std::time::Duration;

use relink::{
    Candidate, Policy, RecoveryMode, ResumeError, SessionEvent, SessionHandle, SessionOptions,
    SetPolicyError, State,
};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

fn opts(policy: Policy) -> SessionOptions {
    SessionOptions::builder()
        .policy(policy)
        .build()
        .expect("valid options")
}

fn open(seed: u64, ini: Policy, tgt: Policy) -> (Sim, SessionHandle, SessionHandle) {
    Sim::with_session_options(seed, opts(ini), opts(tgt))
}

fn delivered(sim: &mut Sim, t: SessionHandle, into: &mut Vec<u32>) {
    while let Some((_, m)) = sim.node(TARGET).poll_delivery(t) {
        into.push(u32::from_be_bytes(m.try_into().expect("4 bytes")));
    }
}

/// The application's own check before it lets a session recover: here,
/// votes of the other replicas, one per round of its loop.
struct Quorum {
    votes: u32,
    needed: u32,
}

impl Quorum {
    fn vote(&mut self) -> bool {
        self.votes += 1;
        self.votes >= self.needed
    }
}

#[test]
fn a_manual_session_waits_for_the_quorum_after_a_replacement_then_delivers_each_message_once() {
    let manual = Policy::builder()
        .recovery(RecoveryMode::Manual)
        .build()
        .expect("policy");
    let (mut sim, s, t) = open(71, manual, Policy::default());
    let mut received = Vec::new();
    let mut next = 0u32;
    for _ in 0..100 {
        sim.node(INITIATOR)
            .send(s, &next.to_be_bytes())
            .expect("send");
        next += 1;
    }
    sim.run_for(Duration::from_micros(300));
    let h = sim.host(INITIATOR).index();
    sim.fabric()
        .inject(Fault::Replace(h, "soft0".into(), Some("soft9".into())));
    sim.run_for(Duration::from_millis(5));
    let attempts = sim.node(INITIATOR).counters(s).expect("session").attempts;

    let mut quorum = Quorum {
        votes: 0,
        needed: 5,
    };
    let mut decisions: Vec<Vec<Candidate>> = Vec::new();
    loop {
        while let Some(e) = sim.node(INITIATOR).poll_event(s) {
            match e {
                SessionEvent::AwaitingDecision { candidates, .. } => decisions.push(candidates),
                SessionEvent::Recovering { .. } => panic!("an attempt before the decision"),
                _ => {}
            }
        }
        // Traffic the application keeps submitting waits in the journal.
        sim.node(INITIATOR)
            .send(s, &next.to_be_bytes())
            .expect("send");
        next += 1;
        let info = sim.node(INITIATOR).session_info(s).expect("session");
        assert_eq!(info.state, State::Recovering);
        assert!(info.awaiting_decision);
        assert_eq!(info.counters.attempts, attempts, "no attempt while held");
        if quorum.vote() {
            break;
        }
        sim.run_for(Duration::from_secs(1));
    }
    // The replacement was reported with the new device as the candidate.
    let last = decisions.last().expect("AwaitingDecision reported");
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].path_index, 0);
    assert_eq!(last[0].device.name, "soft9");

    sim.node(INITIATOR).resume(s).expect("resume");
    assert!(sim.run_until_cond(Duration::from_secs(5), |sim| {
        sim.node(INITIATOR).state(s) == Some(State::Established)
    }));
    sim.run_for(Duration::from_millis(50));
    delivered(&mut sim, t, &mut received);
    assert_eq!(
        received,
        (0..next).collect::<Vec<_>>(),
        "exactly once, in order"
    );
    let mut done = 0;
    while let Some(c) = sim.node(INITIATOR).poll_completion(s) {
        assert!(c.outcome.is_success(), "{c:?}");
        done += 1;
    }
    assert_eq!(done, next, "one completion per message");
    assert_eq!(
        sim.node(INITIATOR).resume(s),
        Err(ResumeError::NotAwaitingDecision(State::Established))
    );
}

#[test]
fn resume_on_names_the_path_and_a_bad_one_is_a_typed_error() {
    let manual = Policy::builder()
        .recovery(RecoveryMode::Manual)
        .build()
        .expect("policy");
    let (mut sim, s, _t) = open(72, manual, Policy::default());
    let h = sim.host(INITIATOR).index();
    sim.fabric().inject(Fault::Reset(h, "soft0".into()));
    sim.run_for(Duration::from_millis(50));
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Recovering));
    assert_eq!(
        sim.node(INITIATOR).resume_on(s, 1),
        Err(ResumeError::NoSuchPath { index: 1, paths: 1 })
    );
    sim.node(INITIATOR)
        .resume_on(s, 0)
        .expect("resume on path 0");
    assert!(sim.run_until_cond(Duration::from_secs(5), |sim| {
        sim.node(INITIATOR).state(s) == Some(State::Established)
    }));
}

fn short() -> Policy {
    Policy::builder()
        .ctrl_loss_tmo(Some(Duration::from_millis(100)))
        .build()
        .expect("policy")
}

/// Both sides start with a 100 ms give-up deadline; the target's device
/// goes away; 50 ms into the outage both sides get `ctrl_loss_tmo` (the
/// target's too: a peer that gave up refuses the resume); the device comes
/// back 1 s after the loss.
fn outage_with(ctrl_loss_tmo: Option<Duration>, seed: u64) {
    let (mut sim, s, t) = open(seed, short(), short());
    let h = sim.host(TARGET).index();
    sim.fabric().inject(Fault::Remove(h, "soft0".into()));
    sim.node(INITIATOR)
        .send(s, &7u32.to_be_bytes())
        .expect("send");
    sim.run_for(Duration::from_millis(50));
    let longer = short()
        .to_builder()
        .ctrl_loss_tmo(ctrl_loss_tmo)
        .build()
        .expect("policy");
    sim.node(INITIATOR)
        .set_policy(s, longer.clone())
        .expect("set_policy");
    sim.node(TARGET)
        .set_policy(t, longer.clone())
        .expect("set_policy");
    assert_eq!(
        sim.node(INITIATOR).options(s).expect("session").policy,
        longer
    );
    sim.run_for(Duration::from_millis(950));
    // Past the old deadline: both still recovering (the initiator may be
    // in an attempt), nothing given up.
    let ini = sim.node(INITIATOR).state(s).expect("session");
    assert!(
        matches!(ini, State::Recovering | State::Reconnecting),
        "{ini}"
    );
    assert_eq!(sim.node(TARGET).state(t), Some(State::Recovering));
    sim.fabric().inject(Fault::Readd(h, "soft0".into()));
    assert!(sim.run_until_cond(Duration::from_secs(30), |sim| {
        sim.node(INITIATOR).state(s) == Some(State::Established)
    }));
    sim.run_for(Duration::from_millis(10));
    let mut received = Vec::new();
    delivered(&mut sim, t, &mut received);
    assert_eq!(received, vec![7]);
}

#[test]
fn extending_the_give_up_deadline_in_an_outage_keeps_the_session_past_the_old_one() {
    outage_with(Some(Duration::from_secs(60)), 73);
}

#[test]
fn cancelling_the_give_up_deadline_in_an_outage_keeps_the_session() {
    outage_with(None, 74);
}

#[test]
fn an_invalid_policy_is_a_typed_error_and_changes_nothing() {
    let (mut sim, s, _t) = open(75, short(), Policy::default());
    let mut bad = short();
    bad.keepalive = Some(Duration::from_micros(1));
    match sim.node(INITIATOR).set_policy(s, bad) {
        Err(SetPolicyError::Policy(e)) => assert_eq!(e.key, "keepalive"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        sim.node(INITIATOR).options(s).expect("session").policy,
        short()
    );
}
