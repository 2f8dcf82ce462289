//! Manual recovery and live policy, on the pair harness: a manual
//! initiator holds after a loss (operations pending, no attempt) until the
//! application resumes it, then recovers exactly as an automatic one; a
//! policy given during an outage moves or cancels the give-up deadline and
//! switches the recovery mode at once.

mod pair;

use std::time::Duration;

use pair::{Pair, Setup, Who};
use relink_core::journal::{OpError, Outcome};
use relink_core::policy::{Policy, RecoveryMode};
use relink_core::session::{Action, SessionError, SessionEvent};
use relink_core::state::{Cause, DownCause, State};

fn manual() -> Policy {
    Policy::builder()
        .recovery(RecoveryMode::Manual)
        .build()
        .expect("policy")
}

fn connects(p: &Pair) -> usize {
    p.end(Who::Ini)
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Connect { .. }))
        .count()
}

/// The `AwaitingDecision` events of the initiator: (cause, candidate path
/// indices).
fn decisions(p: &Pair) -> Vec<(DownCause, Vec<usize>)> {
    p.end(Who::Ini)
        .events
        .iter()
        .filter_map(|e| match e {
            SessionEvent::AwaitingDecision { cause, candidates } => {
                Some((*cause, candidates.iter().map(|c| c.path_index).collect()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_manual_session_holds_after_a_loss_until_resumed_then_replays_exactly_once() {
    let mut p = Pair::connected(Setup::with_policy(manual()));
    let before = connects(&p);
    let a = p.send(Who::Ini, b"one");
    p.reset_device(Who::Ini);
    p.run();
    assert_eq!(p.state(Who::Ini), State::Recovering);
    assert!(p.session(Who::Ini).awaiting_decision());
    // No candidate while the device is down; its return is one, and
    // nothing is tried.
    assert_eq!(
        decisions(&p),
        vec![
            (DownCause::DeviceFatal, vec![]),
            (DownCause::DeviceFatal, vec![0])
        ]
    );
    assert_eq!(p.session(Who::Ini).candidates().len(), 1);
    let b = p.send(Who::Ini, b"two");
    p.advance(Duration::from_secs(120));
    assert_eq!(p.state(Who::Ini), State::Recovering);
    assert_eq!(connects(&p), before, "no attempt while held");
    assert!(!p.completed(Who::Ini, a) && !p.completed(Who::Ini, b));
    assert_eq!(p.session(Who::Ini).pending_ops(), 2);

    p.resume(Who::Ini, None).expect("resume");
    assert!(!p.session(Who::Ini).awaiting_decision());
    p.settle();
    p.settle();
    assert_eq!(p.state(Who::Ini), State::Established);
    assert_eq!(p.state(Who::Tgt), State::Established);
    assert_eq!(
        p.delivered(Who::Tgt),
        vec![b"one".to_vec(), b"two".to_vec()]
    );
    assert!(matches!(p.outcome(Who::Ini, a), Outcome::Success { .. }));
    assert!(matches!(p.outcome(Who::Ini, b), Outcome::Success { .. }));
    let t = p.transition(Who::Ini, State::Recovering, State::Reconnecting);
    assert_eq!(t.cause, Cause::Attempt(1));
    p.check();

    // A later loss holds it again: the decision was for one outage.
    p.reset_device(Who::Ini);
    p.run();
    assert!(p.session(Who::Ini).awaiting_decision());
    assert_eq!(decisions(&p).len(), 4);
}

#[test]
fn a_held_session_reports_its_candidates_again_when_the_devices_change() {
    let mut p = Pair::connected(Setup::with_policy(manual()));
    p.remove_device(Who::Ini);
    p.run();
    assert_eq!(decisions(&p), vec![(DownCause::DeviceRemoved, vec![])]);
    p.add_device(Who::Ini);
    p.run();
    assert_eq!(
        decisions(&p),
        vec![
            (DownCause::DeviceRemoved, vec![]),
            (DownCause::DeviceRemoved, vec![0])
        ]
    );
    assert_eq!(
        p.state(Who::Ini),
        State::Recovering,
        "a device-add is no decision"
    );
    p.resume(Who::Ini, Some(0)).expect("resume on path 0");
    p.settle();
    p.settle();
    assert_eq!(p.state(Who::Ini), State::Established);
    p.check();
}

#[test]
fn a_held_session_gives_up_at_its_deadline_and_closes_on_close() {
    let policy = manual()
        .to_builder()
        .ctrl_loss_tmo(Some(Duration::from_secs(10)))
        .build()
        .expect("policy");
    let mut p = Pair::connected(Setup::with_policy(policy.clone()));
    p.reset_device(Who::Ini);
    p.run();
    let op = p.send(Who::Ini, b"late");
    p.advance(Duration::from_secs(11));
    assert_eq!(p.state(Who::Ini), State::Failed);
    assert!(p.emitted(Who::Ini, |e| *e == SessionEvent::GaveUp));
    assert_eq!(p.outcome(Who::Ini, op), Outcome::Failed(OpError::GaveUp));
    assert!(matches!(
        p.resume(Who::Ini, None),
        Err(SessionError::NotAwaitingDecision(State::Failed))
    ));

    let mut p = Pair::connected(Setup::with_policy(policy));
    p.reset_device(Who::Ini);
    p.run();
    p.close(Who::Ini);
    p.run();
    assert_eq!(p.state(Who::Ini), State::Closed);
    assert!(!p.session(Who::Ini).awaiting_decision());
    p.check();
}

#[test]
fn resume_is_refused_unless_held_and_for_a_path_the_session_lacks() {
    let mut p = Pair::connected(Setup::with_policy(manual()));
    assert_eq!(
        p.resume(Who::Ini, None),
        Err(SessionError::NotAwaitingDecision(State::Established))
    );
    p.reset_device(Who::Ini);
    p.run();
    assert_eq!(
        p.resume(Who::Ini, Some(3)),
        Err(SessionError::NoSuchPath { index: 3, paths: 1 })
    );
    assert!(p.session(Who::Ini).awaiting_decision(), "still held");
}

#[test]
fn an_automatic_session_and_a_first_connect_never_hold() {
    let mut p = Pair::connected(Setup::default());
    p.reset_device(Who::Ini);
    p.settle();
    assert_eq!(p.state(Who::Ini), State::Established);
    assert!(decisions(&p).is_empty());

    // A manual session's first connect retries on its own: there is no
    // session to keep yet.
    let mut p = Pair::new(Setup::with_policy(manual()));
    p.remove_device(Who::Tgt);
    p.connect();
    p.advance(Duration::from_secs(2));
    assert!(connects(&p) > 1);
    assert!(decisions(&p).is_empty());
}

#[test]
fn a_manual_target_accepts_the_initiators_resume() {
    let setup = Setup {
        tgt_policy: Some(manual()),
        ..Setup::default()
    };
    let mut p = Pair::connected(setup);
    let op = p.send(Who::Tgt, b"from the target");
    p.reset_device(Who::Tgt);
    p.settle();
    p.settle();
    assert_eq!(p.state(Who::Tgt), State::Established);
    assert!(matches!(p.outcome(Who::Tgt, op), Outcome::Success { .. }));
    assert!(!p.emitted(Who::Tgt, |e| matches!(
        e,
        SessionEvent::AwaitingDecision { .. }
    )));
    p.check();
}

#[test]
fn switching_a_held_session_to_automatic_recovers_at_once_and_back_holds() {
    let mut p = Pair::connected(Setup::with_policy(manual()));
    p.reset_device(Who::Ini);
    p.run();
    assert!(p.session(Who::Ini).awaiting_decision());
    p.set_policy(Who::Ini, Policy::default())
        .expect("automatic");
    p.settle();
    p.settle();
    assert_eq!(p.state(Who::Ini), State::Established);

    // Automatic -> manual while waiting for a device: it holds.
    p.remove_device(Who::Ini);
    p.run();
    assert!(!p.session(Who::Ini).awaiting_decision());
    p.set_policy(Who::Ini, manual()).expect("manual");
    assert!(p.session(Who::Ini).awaiting_decision());
    p.add_device(Who::Ini);
    p.advance(Duration::from_secs(30));
    assert_eq!(p.state(Who::Ini), State::Recovering);
    p.resume(Who::Ini, None).expect("resume");
    p.settle();
    p.settle();
    assert_eq!(p.state(Who::Ini), State::Established);
    p.check();
}

fn short_deadline() -> Policy {
    Policy::builder()
        .ctrl_loss_tmo(Some(Duration::from_secs(10)))
        .build()
        .expect("policy")
}

#[test]
fn extending_the_give_up_deadline_in_an_outage_keeps_the_session_past_the_old_one() {
    // The target keeps the default deadline: a peer that gave up refuses
    // the resume whatever the initiator's deadline.
    let setup = Setup {
        tgt_policy: Some(Policy::default()),
        ..Setup::with_policy(short_deadline())
    };
    let mut p = Pair::connected(setup);
    let op = p.send(Who::Ini, b"kept");
    p.remove_device(Who::Ini);
    p.advance(Duration::from_secs(5));
    let longer = short_deadline()
        .to_builder()
        .ctrl_loss_tmo(Some(Duration::from_secs(60)))
        .build()
        .expect("policy");
    p.set_policy(Who::Ini, longer).expect("set_policy");
    p.advance(Duration::from_secs(30)); // 35 s after the loss
    assert_eq!(p.state(Who::Ini), State::Recovering);
    p.add_device(Who::Ini);
    p.settle();
    p.settle();
    assert_eq!(p.state(Who::Ini), State::Established);
    assert!(matches!(p.outcome(Who::Ini, op), Outcome::Success { .. }));
    assert_eq!(p.delivered(Who::Tgt), vec![b"kept".to_vec()]);

    // Re-armed from the loss, not from the call: 60 s after it, it gives up.
    p.remove_device(Who::Ini);
    p.advance(Duration::from_secs(59));
    assert_eq!(p.state(Who::Ini), State::Recovering);
    p.advance(Duration::from_secs(2));
    assert_eq!(p.state(Who::Ini), State::Failed);
    p.check();
}

#[test]
fn cancelling_the_give_up_deadline_keeps_the_session_for_ever_and_shortening_it_gives_up() {
    let mut p = Pair::connected(Setup::with_policy(short_deadline()));
    p.remove_device(Who::Ini);
    p.advance(Duration::from_secs(5));
    let never = short_deadline()
        .to_builder()
        .ctrl_loss_tmo(None)
        .build()
        .expect("policy");
    p.set_policy(Who::Ini, never).expect("set_policy");
    p.advance(Duration::from_secs(3600));
    assert_eq!(p.state(Who::Ini), State::Recovering);
    // A deadline already past gives up at once.
    p.set_policy(Who::Ini, short_deadline())
        .expect("set_policy");
    p.advance(Duration::from_millis(1));
    assert_eq!(p.state(Who::Ini), State::Failed);
    assert!(p.emitted(Who::Ini, |e| *e == SessionEvent::GaveUp));
}

#[test]
fn an_invalid_policy_is_refused_and_the_session_keeps_its_own() {
    let mut p = Pair::connected(Setup::with_policy(short_deadline()));
    let mut bad = short_deadline();
    bad.reconnect_delay = Duration::ZERO;
    let e = p.set_policy(Who::Ini, bad).unwrap_err();
    assert_eq!(e.key, "reconnect_delay");
    assert_eq!(
        p.session(Who::Ini).policy().ctrl_loss_tmo,
        Some(Duration::from_secs(10))
    );
}

#[test]
fn a_new_recovery_mode_is_a_new_decision() {
    let mut p = Pair::connected(Setup::with_policy(manual()));
    p.remove_device(Who::Ini);
    p.run();
    p.resume(Who::Ini, None).expect("resume");
    p.run();
    // Resumed, waiting for a device: no longer held.
    assert!(!p.session(Who::Ini).awaiting_decision());
    p.set_policy(Who::Ini, Policy::default())
        .expect("automatic");
    p.set_policy(Who::Ini, manual()).expect("manual again");
    assert!(p.session(Who::Ini).awaiting_decision(), "held again");
    p.add_device(Who::Ini);
    p.advance(Duration::from_secs(30));
    assert_eq!(p.state(Who::Ini), State::Recovering);
    p.resume(Who::Ini, None).expect("resume");
    p.settle();
    p.settle();
    assert_eq!(p.state(Who::Ini), State::Established);
    p.check();
}
