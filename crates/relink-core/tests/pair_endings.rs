//! How a session ends, on a real pair (`tests/pair`): every operation gets
//! exactly one final completion, and which one.
//!
//! - a peer with a new incarnation (a restarted target, or a handshake
//!   answering with another incarnation): the session fails with
//!   `PeerLost` instead of replaying into a stranger; nothing is sent to it;
//! - a peer that gave up refuses the resume: the initiator stops at once;
//! - the give-up deadline, `fast_io_fail_tmo` (queued operations fail while
//!   recovery continues; a possibly delivered message is still delivered at
//!   most once), an admin close (ours or the peer's).
//!
//! Outcomes follow the journal's table: never posted → `Failed(err)`; a
//! message or atomic that may have taken effect → `Indeterminate`; a posted
//! write or read that nothing proves → `Failed(err)`.

mod pair;

use std::time::Duration;

use pair::{local, token, Forged, Pair, Setup, Who, SESSION};
use relink_core::journal::{OpError, OpKind, Outcome};
use relink_core::policy::Policy;
use relink_core::reason::PeerLostReason;
use relink_core::session::{Action, SessionError, SessionEvent};
use relink_core::state::State;
use relink_core::wire::{AcceptData, ConnectData, RefuseReason, Resumed};
use relink_core::{Epoch, Incarnation, OpId, Seq};

fn write(p: &mut Pair, to: u64) -> OpId {
    p.submit(
        Who::Ini,
        OpKind::Write {
            local: local(0, 8).into(),
            remote: token(to),
        },
    )
}

fn fetch_add(p: &mut Pair) -> OpId {
    p.submit(
        Who::Ini,
        OpKind::FetchAdd {
            local: local(32, 8),
            remote: token(32),
            add: 1,
        },
    )
}

/// Whether `who` posted anything (a message or one-sided request) on the
/// transport of `epoch`.
fn posted_on(p: &Pair, who: Who, epoch: Epoch) -> bool {
    p.end(who).actions.iter().any(|a| {
        matches!(a, Action::Send { epoch: e, .. } | Action::OneSided { epoch: e, .. } if *e == epoch)
    })
}

fn peer_lost(p: &Pair, who: Who, why: PeerLostReason) -> bool {
    p.emitted(
        who,
        |e| matches!(e, SessionEvent::PeerLost { reason } if *reason == why),
    )
}

#[test]
fn a_restarted_target_is_a_stranger_and_pending_operations_fail_once() {
    let mut p = Pair::connected(Setup::default());
    let confirmed = p.send(Who::Ini, b"confirmed");
    p.settle();
    let posted = p.send(Who::Ini, b"posted");
    let w = write(&mut p, 0);
    p.pump();
    p.restart_target();
    p.pump();
    assert_eq!(p.state(Who::Ini), State::Recovering);
    let late = p.send(Who::Ini, b"late");
    p.advance(Duration::from_secs(60));

    assert_eq!(p.state(Who::Ini), State::Failed);
    // The new process knows no session of this id.
    assert!(peer_lost(
        &p,
        Who::Ini,
        PeerLostReason::Refused(RefuseReason::UnknownSession)
    ));
    assert_eq!(
        p.outcome(Who::Ini, confirmed),
        Outcome::Success { replayed: false }
    );
    assert_eq!(
        p.outcome(Who::Ini, posted),
        Outcome::Indeterminate { executed: None }
    );
    assert_eq!(p.outcome(Who::Ini, w), Outcome::Failed(OpError::PeerLost));
    assert_eq!(
        p.outcome(Who::Ini, late),
        Outcome::Failed(OpError::PeerLost)
    );
    // Never a new session with the stranger, nothing replayed into it.
    let last = p.requests_seen.last().expect("an attempt");
    assert!(matches!(
        ConnectData::decode(last),
        Ok(ConnectData::Resume(_))
    ));
    assert!(p.end(Who::Tgt).session.is_none());
    p.check();
}

#[test]
fn a_handshake_answering_with_a_new_incarnation_is_a_stranger() {
    let mut p = Pair::connected(Setup::default());
    let posted = p.send(Who::Ini, b"posted");
    p.pump();
    // Someone who knows the secret (a target restored from a backup, say)
    // answers the resume as another incarnation.
    let reply = Resumed::sign(&p.secret(), SESSION, Epoch(2), Incarnation(0xdead), Seq(1));
    p.forged = Some(Forged::Accept(AcceptData::Resumed(reply).to_vec()));
    p.remove_device(Who::Ini);
    p.pump();
    let queued = p.send(Who::Ini, b"queued");
    p.add_device(Who::Ini);
    p.settle();

    assert_eq!(p.state(Who::Ini), State::Failed);
    assert!(peer_lost(&p, Who::Ini, PeerLostReason::NewIncarnation));
    assert_eq!(
        p.outcome(Who::Ini, posted),
        Outcome::Indeterminate { executed: None },
        "its claim to have delivered it is not believed either"
    );
    assert_eq!(
        p.outcome(Who::Ini, queued),
        Outcome::Failed(OpError::PeerLost)
    );
    assert_eq!(OpError::PeerLost.to_string(), "the peer lost its state");
    assert!(!posted_on(&p, Who::Ini, Epoch(2)), "nothing sent to it");
    assert!(p
        .end(Who::Ini)
        .actions
        .contains(&Action::TearDown { epoch: Epoch(2) }));
    p.check();
}

#[test]
fn a_peer_that_gave_up_refuses_the_resume_and_the_initiator_stops() {
    let short = Policy::builder()
        .ctrl_loss_tmo(Some(Duration::from_secs(5)))
        .build()
        .expect("valid policy");
    let mut p = Pair::connected(Setup {
        tgt_policy: Some(short),
        ..Setup::default()
    });
    p.remove_device(Who::Tgt);
    let queued = p.send(Who::Tgt, b"queued at the target");
    p.pump();
    let waiting = p.send(Who::Ini, b"queued at the initiator");
    p.advance(Duration::from_secs(6));
    assert_eq!(p.state(Who::Tgt), State::Failed);
    assert_eq!(
        p.outcome(Who::Tgt, queued),
        Outcome::Failed(OpError::GaveUp)
    );
    assert!(
        matches!(p.state(Who::Ini), State::Recovering | State::Reconnecting),
        "its own deadline is 600 s"
    );
    p.add_device(Who::Tgt);
    p.advance(Duration::from_secs(30));
    assert_eq!(p.state(Who::Ini), State::Failed, "not at its own deadline");
    assert!(peer_lost(
        &p,
        Who::Ini,
        PeerLostReason::Refused(RefuseReason::UnknownSession)
    ));
    assert_eq!(
        p.outcome(Who::Ini, waiting),
        Outcome::Failed(OpError::PeerLost)
    );
    p.check();
}

#[test]
fn give_up_gives_each_operation_one_final_completion() {
    let policy = Policy::builder()
        .ctrl_loss_tmo(Some(Duration::from_secs(20)))
        .build()
        .expect("valid policy");
    let mut p = Pair::connected(Setup::with_policy(policy));
    let confirmed = p.send(Who::Ini, b"confirmed");
    p.settle();
    let msg = p.send(Who::Ini, b"delivered, never confirmed");
    let w = write(&mut p, 0);
    let fa = fetch_add(&mut p);
    p.pump();
    // All three run at the target; nothing comes back.
    while p.execute(Who::Ini) {}
    p.remove_device(Who::Ini);
    p.pump();
    let never = p.send(Who::Ini, b"never posted");
    p.advance(Duration::from_secs(21));

    assert_eq!(p.state(Who::Ini), State::Failed);
    assert!(p.emitted(Who::Ini, |e| *e == SessionEvent::GaveUp));
    let expected = [
        (confirmed, Outcome::Success { replayed: false }),
        (msg, Outcome::Indeterminate { executed: None }),
        (w, Outcome::Failed(OpError::GaveUp)),
        (fa, Outcome::Indeterminate { executed: None }),
        (never, Outcome::Failed(OpError::GaveUp)),
    ];
    for (op, outcome) in expected {
        assert_eq!(p.outcome(Who::Ini, op), outcome, "{op}");
    }
    // Later events and a close complete nothing a second time.
    p.add_device(Who::Ini);
    p.advance(Duration::from_secs(60));
    p.close(Who::Ini);
    p.settle();
    assert_eq!(p.end(Who::Ini).completions.len(), expected.len());
    assert_eq!(p.session(Who::Ini).pending_ops(), 0);
    p.check();
}

#[test]
fn fast_fail_ends_queued_operations_while_recovery_continues() {
    let policy = Policy::builder()
        .fast_io_fail_tmo(Some(Duration::from_secs(5)))
        .ctrl_loss_tmo(Some(Duration::from_secs(60)))
        .build()
        .expect("valid policy");
    let mut p = Pair::connected(Setup::with_policy(policy));
    let in_flight = p.send(Who::Ini, b"in flight");
    p.pump();
    p.remove_device(Who::Ini);
    p.settle();
    let queued = p.send(Who::Ini, b"queued");
    p.advance(Duration::from_secs(5));

    assert_eq!(p.state(Who::Ini), State::Recovering, "recovery continues");
    assert_eq!(
        p.outcome(Who::Ini, in_flight),
        Outcome::Indeterminate { executed: None }
    );
    assert_eq!(
        p.outcome(Who::Ini, queued),
        Outcome::Failed(OpError::FastFail)
    );
    let meanwhile = p.send(Who::Ini, b"meanwhile");
    assert_eq!(
        p.outcome(Who::Ini, meanwhile),
        Outcome::Failed(OpError::FastFail),
        "fails at once while failing fast"
    );

    p.add_device(Who::Ini);
    p.settle();
    assert_eq!(p.state(Who::Ini), State::Established);
    let after = p.send(Who::Ini, b"after");
    p.settle();
    assert_eq!(
        p.outcome(Who::Ini, after),
        Outcome::Success { replayed: false }
    );
    assert_eq!(
        p.delivered(Who::Tgt),
        vec![b"in flight".to_vec(), b"after".to_vec()],
        "the possibly-delivered message of bytes still arrives (once); the failed ones never"
    );
    p.check();
}

#[test]
fn an_admin_close_gives_each_operation_one_final_completion() {
    let mut p = Pair::connected(Setup::default());
    // 16 receive slots: 8 data messages may be in flight, the rest wait.
    let ops: Vec<OpId> = (0..10u8).map(|i| p.send(Who::Ini, &[i])).collect();
    p.pump();
    p.close(Who::Ini);
    p.settle();

    for (i, op) in ops.iter().enumerate() {
        let expected = if i < 8 {
            Outcome::Indeterminate { executed: None }
        } else {
            Outcome::Failed(OpError::Disconnected)
        };
        assert_eq!(p.outcome(Who::Ini, *op), expected, "message {i}");
    }
    assert_eq!(p.delivered(Who::Tgt).len(), 8, "what was posted arrived");
    assert_eq!(p.state(Who::Tgt), State::Closed, "the peer closed its half");
    let now = p.now;
    assert_eq!(
        p.session(Who::Ini)
            .submit(OpKind::Message { payload: vec![] }, now),
        Err(SessionError::Terminal(State::Closed))
    );
    p.remove_device(Who::Ini);
    p.add_device(Who::Ini);
    p.advance(Duration::from_secs(60));
    assert_eq!(p.end(Who::Ini).completions.len(), ops.len());
    p.check();
}

#[test]
fn the_peer_closing_ends_our_operations_once() {
    let mut p = Pair::connected(Setup::default());
    let delivered = p.send(Who::Ini, b"delivered");
    p.settle();
    let pending = write(&mut p, 8);
    p.remove_device(Who::Ini);
    p.settle();
    // The target's application closes while the initiator recovers; the
    // goodbye cannot reach it, so the initiator learns at its next attempt.
    p.close(Who::Tgt);
    p.add_device(Who::Ini);
    p.advance(Duration::from_secs(30));
    assert_eq!(p.state(Who::Ini), State::Failed);
    assert!(peer_lost(
        &p,
        Who::Ini,
        PeerLostReason::Refused(RefuseReason::UnknownSession)
    ));
    assert_eq!(
        p.outcome(Who::Ini, delivered),
        Outcome::Success { replayed: false }
    );
    assert_eq!(
        p.outcome(Who::Ini, pending),
        Outcome::Failed(OpError::PeerLost)
    );
    p.check();
}
