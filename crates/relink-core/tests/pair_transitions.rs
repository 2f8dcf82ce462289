//! Every legal row of the session state table (`relink_core::state::TRANSITIONS`)
//! driven on a real pair (`tests/pair`), with the cause and the event a user
//! sees asserted.
//!
//! Each scenario is declared with the row it covers; the macro turns it
//! into a `#[test]` that also checks the row was taken and the pair's
//! invariants held, and into the `COVERED` list.
//! [`every_legal_row_has_a_scenario_or_a_reason`] iterates the table: a new
//! row without a scenario (or a recorded reason why no input sequence can
//! take it) fails. The rows no driver can reach are in `UNREACHABLE`, each
//! with a test that pins the reason.

mod pair;

use std::time::Duration;

use pair::{Forged, Pair, Setup, Who};
use relink_core::journal::{OpError, Outcome};
use relink_core::policy::Policy;
use relink_core::reason::AttemptFailure;
use relink_core::session::{Action, SessionError, SessionEvent};
use relink_core::state::{allowed, Cause, DownCause, State, TRANSITIONS};
use relink_core::wire::{ConnectData, RefuseReason, Refused, RejectData};
use relink_core::Epoch;

/// Declares scenarios: `name: Side From -> To => { body returning the Pair }`.
macro_rules! scenarios {
    ($( $(#[$m:meta])* $name:ident: $who:ident $from:ident -> $to:ident => $body:block )*) => {
        /// The rows the scenarios drive, with the scenario's name.
        const COVERED: &[(State, State, &str)] =
            &[$((State::$from, State::$to, stringify!($name))),*];
        $(
            $(#[$m])*
            #[test]
            fn $name() {
                let p: Pair = $body;
                p.transition(Who::$who, State::$from, State::$to);
                p.check();
            }
        )*
    };
}

/// Legal rows that no sequence of inputs takes, and why (each reason is
/// pinned by a test below).
const UNREACHABLE: &[(State, State, &str)] = &[(
    State::Established,
    State::Failed,
    "the give-up deadline is stopped on entering Established and a stranger \
         is detected only in a handshake (Connecting / Reconnecting); only a CM \
         REJECTED of the established epoch would lead there, which rdma_cm never \
         reports: see give_up_deadline_does_not_run_while_established",
)];

fn has_teardown(p: &Pair, who: Who, epoch: Epoch) -> bool {
    p.end(who).actions.contains(&Action::TearDown { epoch })
}

/// The initiator's device is removed and the loss settles (the target
/// learns of it from its CM).
fn lose_initiator_device(p: &mut Pair) {
    p.remove_device(Who::Ini);
    p.settle();
    assert_eq!(p.state(Who::Ini), State::Recovering);
}

/// The initiator's device returns and the next attempt starts: the
/// handshake runs up to the in-band exchange (work requests not executed).
fn come_back_to_resyncing(p: &mut Pair) {
    p.add_device(Who::Ini);
    p.tick();
    assert_eq!(p.state(Who::Ini), State::Resyncing);
}

scenarios! {
    /// `connect` starts the first connection; the target's session starts
    /// in Connecting when the Hello arrives.
    idle_to_connecting: Ini Idle -> Connecting => {
        let mut p = Pair::new(Setup::default());
        p.connect();
        p.pump();
        assert_eq!(p.transition(Who::Ini, State::Idle, State::Connecting).cause, Cause::Connect);
        assert_eq!(p.transition(Who::Tgt, State::Idle, State::Connecting).cause, Cause::Connect);
        p
    }

    /// Closing a session that never connected: nothing to tear down, and
    /// nothing can be submitted any more.
    idle_to_closed: Ini Idle -> Closed => {
        let mut p = Pair::new(Setup::default());
        p.close(Who::Ini);
        p.run();
        assert_eq!(p.transition(Who::Ini, State::Idle, State::Closed).cause, Cause::Disconnect);
        assert!(p.emitted(Who::Ini, |e| *e == SessionEvent::Disconnected));
        assert!(p.end(Who::Ini).actions.is_empty(), "no transport to act on");
        let now = p.now;
        let err = p.session(Who::Ini).submit(
            relink_core::journal::OpKind::Message { payload: vec![1] },
            now,
        );
        assert_eq!(err, Err(SessionError::Terminal(State::Closed)));
        p
    }

    /// Both sides advertise, both become Established; the first
    /// connection is not reported as a resume.
    connecting_to_established: Ini Connecting -> Established => {
        let mut p = Pair::connected(Setup::default());
        for who in [Who::Ini, Who::Tgt] {
            let t = p.transition(who, State::Connecting, State::Established);
            assert_eq!(t.cause, Cause::Accepted);
            assert!(!p.emitted(who, |e| matches!(e, SessionEvent::Resumed { .. })));
        }
        let op = p.send(Who::Ini, b"first");
        p.settle();
        assert_eq!(p.outcome(Who::Ini, op), Outcome::Success { replayed: false });
        assert_eq!(p.delivered(Who::Tgt), vec![b"first".to_vec()]);
        p
    }

    /// The first attempt gets no answer (the target's device is away): it
    /// times out and the session keeps trying under the policy; an operation
    /// submitted meanwhile waits, and is delivered once connected.
    connecting_to_recovering: Ini Connecting -> Recovering => {
        let mut p = Pair::new(Setup::default());
        p.end_mut(Who::Tgt).device_present = false;
        p.connect();
        let op = p.send(Who::Ini, b"early");
        p.advance(Policy::default().attempt_timeout(1));
        let t = p.transition(Who::Ini, State::Connecting, State::Recovering);
        assert_eq!(t.cause, Cause::AttemptFailed(AttemptFailure::Timeout));
        assert!(has_teardown(&p, Who::Ini, Epoch(1)), "the attempt is torn down");
        assert!(!p.completed(Who::Ini, op), "the operation waits");
        p.end_mut(Who::Tgt).device_present = true;
        p.advance(Duration::from_secs(30));
        assert_eq!(p.state(Who::Ini), State::Established);
        assert_eq!(p.outcome(Who::Ini, op), Outcome::Success { replayed: false });
        assert_eq!(p.delivered(Who::Tgt), vec![b"early".to_vec()]);
        p
    }

    /// A peer that refuses the Hello for good (bad authenticator) ends the
    /// session: queued operations fail with `PeerLost`, nothing retries.
    connecting_to_failed: Ini Connecting -> Failed => {
        let mut p = Pair::new(Setup::default());
        let refused = RejectData::Refused(Refused { reason: RefuseReason::BadAuthenticator });
        p.forged = Some(Forged::Reject(refused.to_vec()));
        p.connect();
        let op = p.send(Who::Ini, b"never");
        p.advance(Duration::from_secs(60));
        let t = p.transition(Who::Ini, State::Connecting, State::Failed);
        assert!(matches!(t.cause, Cause::PeerLost(_)), "{:?}", t.cause);
        assert!(p.emitted(Who::Ini, |e| matches!(e, SessionEvent::PeerLost { .. })));
        assert_eq!(p.outcome(Who::Ini, op), Outcome::Failed(OpError::PeerLost));
        assert_eq!(p.requests_seen.len(), 1, "no further attempt");
        p
    }

    /// Closing while the first attempt is under way tears it down and fails
    /// what was queued with `Disconnected`.
    connecting_to_closed: Ini Connecting -> Closed => {
        let mut p = Pair::new(Setup::default());
        p.end_mut(Who::Tgt).device_present = false;
        p.connect();
        let op = p.send(Who::Ini, b"never");
        p.run();
        p.close(Who::Ini);
        p.advance(Duration::from_secs(10));
        assert_eq!(p.transition(Who::Ini, State::Connecting, State::Closed).cause, Cause::Disconnect);
        assert!(has_teardown(&p, Who::Ini, Epoch(1)));
        assert_eq!(p.outcome(Who::Ini, op), Outcome::Failed(OpError::Disconnected));
        assert_eq!(p.requests_seen.len(), 1, "no attempt after the close");
        p
    }

    /// A removed device is a transport loss, not the end of the session:
    /// `DeviceLost` with the cause; the peer learns it from its CM.
    established_to_recovering: Ini Established -> Recovering => {
        let mut p = Pair::connected(Setup::default());
        lose_initiator_device(&mut p);
        let t = p.transition(Who::Ini, State::Established, State::Recovering);
        assert_eq!(t.cause, Cause::TransportDown(DownCause::DeviceRemoved));
        assert!(p.emitted(Who::Ini, |e| *e == SessionEvent::DeviceLost { cause: DownCause::DeviceRemoved }));
        assert!(has_teardown(&p, Who::Ini, Epoch(1)), "the old epoch is torn down");
        let t = p.transition(Who::Tgt, State::Established, State::Recovering);
        assert_eq!(t.cause, Cause::TransportDown(DownCause::CmDisconnected));
        p
    }

    /// An admin close says goodbye: the peer closes its half at once
    /// instead of recovering.
    established_to_closed: Ini Established -> Closed => {
        let mut p = Pair::connected(Setup::default());
        p.close(Who::Ini);
        p.settle();
        assert_eq!(p.transition(Who::Ini, State::Established, State::Closed).cause, Cause::Disconnect);
        assert!(p.emitted(Who::Ini, |e| *e == SessionEvent::Disconnected));
        assert!(p.end(Who::Ini).actions.contains(&Action::Disconnect { epoch: Epoch(1) }));
        assert_eq!(p.state(Who::Tgt), State::Closed, "the peer closed its half");
        assert!(!p.emitted(Who::Tgt, |e| matches!(e, SessionEvent::DeviceLost { .. })));
        p
    }

    /// A device-add cuts the wait: attempt 1 starts with a Resume for the
    /// next epoch.
    recovering_to_reconnecting: Ini Recovering -> Reconnecting => {
        let mut p = Pair::connected(Setup::default());
        lose_initiator_device(&mut p);
        p.add_device(Who::Ini);
        p.tick();
        assert_eq!(p.transition(Who::Ini, State::Recovering, State::Reconnecting).cause, Cause::Attempt(1));
        assert!(p.emitted(Who::Ini, |e| *e == SessionEvent::Recovering { attempt: 1 }));
        let last = p.requests_seen.last().expect("a request");
        let Ok(ConnectData::Resume(r)) = ConnectData::decode(last) else {
            panic!("a reconnection carries a Resume");
        };
        assert_eq!(r.epoch, Epoch(2));
        p
    }

    /// The give-up deadline passes while no device reaches the peer: every
    /// pending operation ends, `GaveUp` is reported, on both sides.
    recovering_to_failed: Ini Recovering -> Failed => {
        let policy = Policy::builder().ctrl_loss_tmo(Some(Duration::from_secs(30))).build().expect("valid policy");
        let mut p = Pair::connected(Setup::with_policy(policy));
        lose_initiator_device(&mut p);
        let op = p.send(Who::Ini, b"late");
        p.advance(Duration::from_secs(31));
        assert_eq!(p.transition(Who::Ini, State::Recovering, State::Failed).cause, Cause::GaveUp);
        assert!(p.emitted(Who::Ini, |e| *e == SessionEvent::GaveUp));
        assert_eq!(p.outcome(Who::Ini, op), Outcome::Failed(OpError::GaveUp));
        assert_eq!(p.state(Who::Tgt), State::Failed, "the target has the same deadline");
        p
    }

    /// Closing during an outage cancels recovery at once.
    recovering_to_closed: Ini Recovering -> Closed => {
        let mut p = Pair::connected(Setup::default());
        lose_initiator_device(&mut p);
        let op = p.send(Who::Ini, b"never");
        p.close(Who::Ini);
        let attempts = p.requests_seen.len();
        p.add_device(Who::Ini);
        p.advance(Duration::from_secs(30));
        assert_eq!(p.transition(Who::Ini, State::Recovering, State::Closed).cause, Cause::Disconnect);
        assert_eq!(p.outcome(Who::Ini, op), Outcome::Failed(OpError::Disconnected));
        assert_eq!(p.requests_seen.len(), attempts, "no attempt after the close");
        p
    }

    /// The target accepts the resume: both sides resync.
    reconnecting_to_resyncing: Ini Reconnecting -> Resyncing => {
        let mut p = Pair::connected(Setup::default());
        lose_initiator_device(&mut p);
        come_back_to_resyncing(&mut p);
        assert_eq!(p.transition(Who::Ini, State::Reconnecting, State::Resyncing).cause, Cause::Accepted);
        assert_eq!(p.transition(Who::Tgt, State::Reconnecting, State::Resyncing).cause, Cause::Accepted);
        p
    }

    /// An attempt the peer's CM refuses (its application is not listening
    /// yet) fails; the next one, soon after, succeeds.
    reconnecting_to_recovering: Ini Reconnecting -> Recovering => {
        let mut p = Pair::connected(Setup::default());
        lose_initiator_device(&mut p);
        p.listening = false;
        p.add_device(Who::Ini);
        p.tick();
        let t = p.transition(Who::Ini, State::Reconnecting, State::Recovering);
        assert_eq!(t.cause, Cause::AttemptFailed(AttemptFailure::NoListener));
        assert!(has_teardown(&p, Who::Ini, Epoch(2)), "the attempt is torn down");
        p.listening = true;
        p.advance(Duration::from_secs(1));
        assert_eq!(p.state(Who::Ini), State::Established);
        p
    }

    /// The target restarted (it lost the session): the resume is refused
    /// as unknown and the session fails instead of replaying into a stranger.
    reconnecting_to_failed: Ini Reconnecting -> Failed => {
        let mut p = Pair::connected(Setup::default());
        p.restart_target();
        p.settle();
        let t = p.transition(Who::Ini, State::Reconnecting, State::Failed);
        assert!(matches!(t.cause, Cause::PeerLost(_)), "{:?}", t.cause);
        assert!(p.emitted(Who::Ini, |e| matches!(e, SessionEvent::PeerLost { .. })));
        p
    }

    /// Closing during an unanswered attempt tears the attempt down.
    reconnecting_to_closed: Ini Reconnecting -> Closed => {
        let mut p = Pair::connected(Setup::default());
        p.remove_device(Who::Tgt);
        p.settle();
        p.tick();
        assert_eq!(p.state(Who::Ini), State::Reconnecting);
        let epoch = p.transport(Who::Ini).expect("an attempt");
        p.close(Who::Ini);
        p.run();
        assert_eq!(p.transition(Who::Ini, State::Reconnecting, State::Closed).cause, Cause::Disconnect);
        assert!(has_teardown(&p, Who::Ini, epoch));
        p
    }

    /// The peer's advertisements for the new epoch arrive: traffic flows;
    /// `Resumed` names the new device and what was replayed.
    resyncing_to_established: Ini Resyncing -> Established => {
        let mut p = Pair::connected(Setup::default());
        p.remove_device(Who::Ini);
        let op = p.send(Who::Ini, b"queued");
        p.settle();
        p.add_device(Who::Ini);
        p.settle();
        let t = p.transition(Who::Ini, State::Resyncing, State::Established);
        assert_eq!(t.cause, Cause::Resynced);
        let device = p.end(Who::Ini).device.id.clone();
        assert!(p.emitted(Who::Ini, |e| matches!(e,
            SessionEvent::Resumed { device: Some(d), .. } if *d == device)));
        assert_eq!(p.outcome(Who::Ini, op), Outcome::Success { replayed: false });
        assert_eq!(p.state(Who::Tgt), State::Established);
        p
    }

    /// The device is lost again before the in-band exchange finished.
    resyncing_to_recovering: Ini Resyncing -> Recovering => {
        let mut p = Pair::connected(Setup::default());
        lose_initiator_device(&mut p);
        come_back_to_resyncing(&mut p);
        p.remove_device(Who::Ini);
        p.run();
        let t = p.transition(Who::Ini, State::Resyncing, State::Recovering);
        assert_eq!(t.cause, Cause::TransportDown(DownCause::DeviceRemoved));
        p.add_device(Who::Ini);
        p.settle();
        assert_eq!(p.state(Who::Ini), State::Established, "and it still recovers");
        p
    }

    /// The give-up deadline passes while the advertisements are still
    /// missing (the deadline is shorter than the attempt timeout here).
    resyncing_to_failed: Ini Resyncing -> Failed => {
        let policy = Policy::builder().ctrl_loss_tmo(Some(Duration::from_secs(1))).build().expect("valid policy");
        let mut p = Pair::connected(Setup::with_policy(policy));
        lose_initiator_device(&mut p);
        p.advance(Duration::from_millis(900));
        come_back_to_resyncing(&mut p);
        p.break_link(); // the advertisements never arrive
        p.advance(Duration::from_millis(200));
        assert_eq!(p.transition(Who::Ini, State::Resyncing, State::Failed).cause, Cause::GaveUp);
        assert!(p.emitted(Who::Ini, |e| *e == SessionEvent::GaveUp));
        p
    }

    /// Closing while resyncing says goodbye on the new transport.
    resyncing_to_closed: Ini Resyncing -> Closed => {
        let mut p = Pair::connected(Setup::default());
        lose_initiator_device(&mut p);
        come_back_to_resyncing(&mut p);
        p.close(Who::Ini);
        p.settle();
        assert_eq!(p.transition(Who::Ini, State::Resyncing, State::Closed).cause, Cause::Disconnect);
        assert_eq!(p.state(Who::Tgt), State::Closed, "the peer closed its half");
        p
    }

    /// A suspend: both ends quiesce, then the initiator takes the
    /// connection down and both halves are suspended, not lost.
    established_to_suspended: Ini Established -> Suspended => {
        let mut p = Pair::connected(Setup::default());
        let op = p.send(Who::Ini, b"before");
        p.suspend(Who::Ini).expect("suspend");
        p.settle();
        assert_eq!(p.transition(Who::Ini, State::Established, State::Suspended).cause, Cause::Suspend);
        assert_eq!(p.transition(Who::Tgt, State::Established, State::Suspended).cause, Cause::Suspend);
        assert!(p.emitted(Who::Tgt, |e| *e == SessionEvent::Suspended));
        assert_eq!(p.outcome(Who::Ini, op), Outcome::Success { replayed: false });
        assert_eq!(p.session(Who::Ini).counters().losses, 0);
        p
    }

    /// Suspending a recovering session parks it at once: the attempts
    /// and the give-up deadline stop.
    recovering_to_suspended: Ini Recovering -> Suspended => {
        let policy = Policy::builder().ctrl_loss_tmo(Some(Duration::from_secs(1))).build().expect("valid policy");
        let mut p = Pair::connected(Setup::with_policy(policy));
        lose_initiator_device(&mut p);
        p.suspend(Who::Ini).expect("suspend");
        p.advance(Duration::from_secs(5));
        assert_eq!(p.transition(Who::Ini, State::Recovering, State::Suspended).cause, Cause::Suspend);
        assert_eq!(p.state(Who::Ini), State::Suspended, "no give-up while suspended");
        p
    }

    /// Resuming a suspended session recovers it (an attempt at once); the
    /// target's half follows on the resume.
    suspended_to_recovering: Ini Suspended -> Recovering => {
        let mut p = Pair::connected(Setup::default());
        p.suspend(Who::Ini).expect("suspend");
        p.settle();
        let op = p.send(Who::Ini, b"while suspended");
        p.advance(Duration::from_secs(700));
        assert_eq!(p.state(Who::Tgt), State::Suspended, "the target waits, however long");
        p.resume(Who::Ini, None).expect("resume");
        p.settle();
        assert_eq!(p.transition(Who::Ini, State::Suspended, State::Recovering).cause, Cause::Resume);
        assert_eq!(p.transition(Who::Tgt, State::Suspended, State::Recovering).cause, Cause::Resume);
        assert_eq!(p.state(Who::Ini), State::Established);
        assert_eq!(p.outcome(Who::Ini, op), Outcome::Success { replayed: false });
        assert_eq!(p.delivered(Who::Tgt), vec![b"while suspended".to_vec()]);
        p
    }

    /// A suspended session closes at once; the peer's half, suspended too,
    /// waits for a resume that never comes until it is closed itself.
    suspended_to_closed: Ini Suspended -> Closed => {
        let mut p = Pair::connected(Setup::default());
        p.suspend(Who::Ini).expect("suspend");
        p.settle();
        let op = p.send(Who::Ini, b"never sent");
        p.close(Who::Ini);
        p.settle();
        assert_eq!(p.transition(Who::Ini, State::Suspended, State::Closed).cause, Cause::Disconnect);
        assert_eq!(p.outcome(Who::Ini, op), Outcome::Failed(OpError::Disconnected));
        p
    }

    /// A failed session can still be closed (the application releases it);
    /// its operations were completed once already.
    failed_to_closed: Ini Failed -> Closed => {
        let policy = Policy::builder().ctrl_loss_tmo(Some(Duration::from_secs(5))).build().expect("valid policy");
        let mut p = Pair::connected(Setup::with_policy(policy));
        lose_initiator_device(&mut p);
        let op = p.send(Who::Ini, b"late");
        p.advance(Duration::from_secs(6));
        assert_eq!(p.state(Who::Ini), State::Failed);
        let actions = p.end(Who::Ini).actions.len();
        p.close(Who::Ini);
        p.run();
        assert_eq!(p.transition(Who::Ini, State::Failed, State::Closed).cause, Cause::Disconnect);
        assert_eq!(p.outcome(Who::Ini, op), Outcome::Failed(OpError::GaveUp));
        assert_eq!(p.end(Who::Ini).actions.len(), actions, "nothing left to tear down");
        p
    }
}

#[test]
fn every_legal_row_has_a_scenario_or_a_reason() {
    for &(from, to) in TRANSITIONS {
        let scenarios: Vec<&str> = COVERED
            .iter()
            .filter(|c| (c.0, c.1) == (from, to))
            .map(|c| c.2)
            .collect();
        let reasons = UNREACHABLE
            .iter()
            .filter(|c| (c.0, c.1) == (from, to))
            .count();
        assert_eq!(
            scenarios.len() + reasons,
            1,
            "row {from} -> {to}: scenarios {scenarios:?}, {reasons} reasons; \
             add a scenario to tests/pair_transitions.rs"
        );
    }
    for &(from, to, name) in COVERED.iter().chain(UNREACHABLE) {
        assert!(
            allowed(from, to),
            "{name}: {from} -> {to} is not a legal row"
        );
    }
}

/// Why `Established -> Failed` is not taken: the give-up deadline only runs
/// during an outage; an established session outlives it.
#[test]
fn give_up_deadline_does_not_run_while_established() {
    let policy = Policy::builder()
        .ctrl_loss_tmo(Some(Duration::from_secs(2)))
        .build()
        .expect("valid policy");
    let mut p = Pair::connected(Setup::with_policy(policy));
    lose_initiator_device(&mut p);
    p.add_device(Who::Ini);
    p.settle();
    assert_eq!(p.state(Who::Ini), State::Established);
    p.advance(Duration::from_secs(60));
    for who in [Who::Ini, Who::Tgt] {
        assert_eq!(p.state(who), State::Established);
        assert!(!p.emitted(who, |e| *e == SessionEvent::GaveUp));
    }
    p.check();
}

/// A target accepting a resume passes through Reconnecting, like an
/// initiator's attempt: the table has no `Recovering -> Resyncing` row.
#[test]
fn a_target_resumes_through_reconnecting() {
    let mut p = Pair::connected(Setup::default());
    lose_initiator_device(&mut p);
    assert_eq!(p.state(Who::Tgt), State::Recovering);
    p.add_device(Who::Ini);
    p.settle();
    let path: Vec<(State, State)> = p
        .transitions(Who::Tgt)
        .iter()
        .skip_while(|t| t.to != State::Recovering)
        .map(|t| (t.from, t.to))
        .collect();
    assert_eq!(
        path,
        vec![
            (State::Established, State::Recovering),
            (State::Recovering, State::Reconnecting),
            (State::Reconnecting, State::Resyncing),
            (State::Resyncing, State::Established),
        ]
    );
    p.check();
}

/// Every transition any scenario takes is a legal row (the core would
/// panic in debug builds otherwise); this one walks a long path on both
/// sides and checks it against the table.
#[test]
fn a_long_life_takes_only_legal_rows() {
    let mut p = Pair::connected(Setup::default());
    for i in 0..3 {
        p.send(Who::Ini, &[i]);
        p.send(Who::Tgt, &[i]);
        p.reset_device(if i % 2 == 0 { Who::Ini } else { Who::Tgt });
        p.advance(Duration::from_secs(2));
    }
    p.close(Who::Tgt);
    p.settle();
    for who in [Who::Ini, Who::Tgt] {
        for t in p.transitions(who) {
            assert!(allowed(t.from, t.to), "{who:?}: {} -> {}", t.from, t.to);
        }
        assert_eq!(p.state(who), State::Closed);
        assert_eq!(p.delivered(who), vec![vec![0], vec![1], vec![2]]);
    }
    p.check();
}
