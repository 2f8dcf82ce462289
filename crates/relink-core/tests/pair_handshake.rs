//! The resume handshake on a real pair (`tests/pair`): what is refused, and
//! that a refusal never disturbs the genuine session.
//!
//! - at the target: a Resume with a forged or tampered authenticator, a
//!   recorded Resume replayed (stale epoch), a Resume naming another
//!   session, a Hello reusing a live session's id, undecodable data;
//! - at the initiator: a reply that does not authenticate (wrong secret,
//!   another session id, another epoch), a Welcome to a Resume, a Resumed
//!   to a Hello, a Welcome for another session, garbage: the attempt fails,
//!   nothing is sent on it, the reply's claims (what the peer delivered)
//!   are not believed, and the next attempt to the genuine target resumes
//!   with exactly-once delivery.

mod pair;

use std::time::Duration;

use pair::{Forged, Pair, Setup, Who, SESSION};
use relink_core::auth::SessionSecret;
use relink_core::journal::Outcome;
use relink_core::policy::Policy;
use relink_core::reason::{AttemptFailure, ReplyFault};
use relink_core::session::{Action, SessionEvent};
use relink_core::state::{Cause, DownCause, State};
use relink_core::wire::{
    AcceptData, ConnectBytes, ConnectData, Hello, RefuseReason, RejectData, Resume, Resumed,
    Welcome,
};
use relink_core::{Epoch, Incarnation, Seq, SessionId};

/// The target's incarnation in the pair.
const TARGET: Incarnation = Incarnation(0x1c1);

fn refusal(answer: &Action) -> RefuseReason {
    match answer {
        Action::Reject { private_data, .. } => match RejectData::decode(private_data) {
            Ok(RejectData::Refused(r)) => r.reason,
            Err(e) => panic!("undecodable refusal: {e}"),
        },
        other => panic!("not refused: {other:?}"),
    }
}

/// A pair whose initiator lost its device: the target waits in Recovering.
fn target_waiting() -> Pair {
    let mut p = Pair::connected(Setup::default());
    p.remove_device(Who::Ini);
    p.settle();
    assert_eq!(p.state(Who::Tgt), State::Recovering);
    p
}

/// The initiator's device returns; the genuine resume succeeds and a
/// message still flows exactly once.
fn genuine_resume_still_works(p: &mut Pair) {
    p.add_device(Who::Ini);
    p.advance(Duration::from_secs(30));
    assert_eq!(p.state(Who::Ini), State::Established);
    assert_eq!(p.state(Who::Tgt), State::Established);
    let op = p.send(Who::Ini, b"after");
    p.settle();
    assert!(p.outcome(Who::Ini, op).is_success());
    assert_eq!(p.delivered(Who::Tgt).last(), Some(&b"after".to_vec()));
    p.check();
}

#[test]
fn a_resume_with_a_forged_or_tampered_authenticator_is_refused() {
    let mut p = target_waiting();
    let wrong = SessionSecret::from_bytes([0; 32]);
    let forged = Resume::sign(&wrong, SESSION, Epoch(2), Seq(0));
    let mut tampered = Resume::sign(&p.secret(), SESSION, Epoch(2), Seq(0));
    tampered.last_delivered = Seq(99); // claims more than was delivered
    for r in [forged, tampered] {
        let answer = p.knock(ConnectData::Resume(r).to_vec());
        assert_eq!(refusal(&answer), RefuseReason::BadAuthenticator);
    }
    assert_eq!(p.state(Who::Tgt), State::Recovering, "undisturbed");
    assert_eq!(p.session(Who::Tgt).epoch(), Epoch(1));
    genuine_resume_still_works(&mut p);
}

#[test]
fn a_recorded_resume_replayed_later_is_refused_and_disturbs_nothing() {
    let mut p = target_waiting();
    genuine_resume_still_works(&mut p);
    let recorded = p.requests_seen.last().expect("the genuine resume").clone();
    assert!(matches!(
        ConnectData::decode(&recorded),
        Ok(ConnectData::Resume(_))
    ));
    let transitions = p.transitions(Who::Tgt).len();
    let answer = p.knock(recorded);
    assert_eq!(refusal(&answer), RefuseReason::StaleEpoch);
    assert_eq!(p.state(Who::Tgt), State::Established);
    assert_eq!(p.transitions(Who::Tgt).len(), transitions, "no transition");
    let op = p.send(Who::Tgt, b"still connected");
    p.settle();
    assert!(p.outcome(Who::Tgt, op).is_success());
    p.check();
}

#[test]
fn a_resume_or_hello_naming_another_or_a_live_session_is_refused() {
    let mut p = target_waiting();
    let other = Resume::sign(&p.secret(), SessionId(0xbad), Epoch(2), Seq(0));
    let answer = p.knock(ConnectData::Resume(other).to_vec());
    assert_eq!(refusal(&answer), RefuseReason::UnknownSession);
    // A Hello for the live session's id would get a fresh secret: refused.
    let hijack = Hello {
        session: SESSION,
        epoch: Epoch(2),
        incarnation: Incarnation(0xbad),
        connect_data: ConnectBytes::EMPTY,
    };
    let answer = p.knock(ConnectData::Hello(hijack).to_vec());
    assert_eq!(refusal(&answer), RefuseReason::Busy);
    let answer = p.knock(b"\x09garbage".to_vec());
    assert_eq!(refusal(&answer), RefuseReason::UnsupportedVersion);
    assert_eq!(p.state(Who::Tgt), State::Recovering, "undisturbed");
    genuine_resume_still_works(&mut p);
}

#[test]
fn a_reply_that_does_not_authenticate_is_not_believed() {
    let other_secret = SessionSecret::from_bytes([7; 32]);
    let secret = SessionSecret::from_bytes(pair::SECRET);
    // Each claims the peer delivered the message in flight (Seq 1).
    let replies: [(&str, Vec<u8>, ReplyFault); 5] = [
        (
            "wrong secret",
            AcceptData::Resumed(Resumed::sign(
                &other_secret,
                SESSION,
                Epoch(2),
                TARGET,
                Seq(1),
            ))
            .to_vec(),
            ReplyFault::NotAuthentic,
        ),
        (
            "another session",
            AcceptData::Resumed(Resumed::sign(
                &secret,
                SessionId(9),
                Epoch(2),
                TARGET,
                Seq(1),
            ))
            .to_vec(),
            ReplyFault::NotAuthentic,
        ),
        (
            "another epoch (a recorded reply)",
            AcceptData::Resumed(Resumed::sign(&secret, SESSION, Epoch(1), TARGET, Seq(1))).to_vec(),
            ReplyFault::NotAuthentic,
        ),
        (
            "a welcome to a resume",
            AcceptData::Welcome(Welcome {
                session: SESSION,
                incarnation: Incarnation(0xbad),
                secret: other_secret.clone(),
            })
            .to_vec(),
            ReplyFault::UnexpectedWelcome,
        ),
        (
            "garbage",
            b"\x01\x7fgarbage".to_vec(),
            ReplyFault::Malformed(AcceptData::decode(b"\x01\x7fgarbage").unwrap_err()),
        ),
    ];
    for (name, reply, why) in replies {
        let mut p = Pair::connected(Setup::default());
        let m = p.send(Who::Ini, b"in flight");
        p.pump();
        p.forged = Some(Forged::Accept(reply));
        p.remove_device(Who::Ini);
        p.add_device(Who::Ini);
        p.tick();
        let t = p.transition(Who::Ini, State::Reconnecting, State::Recovering);
        assert!(
            t.cause == Cause::AttemptFailed(AttemptFailure::BadReply(why.clone())),
            "{name}: {:?}",
            t.cause
        );
        assert!(
            p.end(Who::Ini)
                .actions
                .contains(&Action::TearDown { epoch: Epoch(2) }),
            "{name}: the attempt is torn down"
        );
        assert!(
            !p.end(Who::Ini)
                .actions
                .iter()
                .any(|a| matches!(a, Action::Send { epoch, .. } if *epoch == Epoch(2))),
            "{name}: nothing is sent to it"
        );
        assert!(
            !p.completed(Who::Ini, m),
            "{name}: its claim is not believed"
        );
        genuine_resume_still_works(&mut p);
        assert_eq!(
            p.outcome(Who::Ini, m),
            Outcome::Success { replayed: true },
            "{name}"
        );
        assert_eq!(p.delivered(Who::Tgt)[0], b"in flight", "{name}");
    }
}

#[test]
fn the_first_connection_refuses_a_mismatched_reply() {
    let secret = SessionSecret::from_bytes(pair::SECRET);
    let replies: [(&str, Vec<u8>, ReplyFault); 2] = [
        (
            "a welcome for another session",
            AcceptData::Welcome(Welcome {
                session: SessionId(9),
                incarnation: TARGET,
                secret: secret.clone(),
            })
            .to_vec(),
            ReplyFault::UnexpectedWelcome,
        ),
        (
            "a resumed to a hello",
            AcceptData::Resumed(Resumed::sign(&secret, SESSION, Epoch(1), TARGET, Seq(0))).to_vec(),
            ReplyFault::UnexpectedResumed,
        ),
    ];
    for (name, reply, why) in replies {
        let mut p = Pair::new(Setup::default());
        p.forged = Some(Forged::Accept(reply));
        p.connect();
        p.pump();
        let t = p.transition(Who::Ini, State::Connecting, State::Recovering);
        assert!(
            t.cause == Cause::AttemptFailed(AttemptFailure::BadReply(why.clone())),
            "{name}: {:?}",
            t.cause
        );
        // The next attempt is a Hello again, to the genuine target.
        p.advance(Duration::from_secs(30));
        let hellos = p
            .requests_seen
            .iter()
            .filter(|r| matches!(ConnectData::decode(r), Ok(ConnectData::Hello(_))))
            .count();
        assert!(hellos >= 2, "{name}");
        assert_eq!(p.state(Who::Ini), State::Established, "{name}");
        assert_eq!(p.state(Who::Tgt), State::Established, "{name}");
        p.check();
    }
}

/// The first connection, made before the target's application listens:
/// the refused attempts use up epochs, the target adopts the epoch of the
/// Hello it finally accepts, and the handshake completes at once.
#[test]
fn a_hello_accepted_on_a_later_attempt_completes_its_handshake() {
    let mut p = Pair::new(Setup::default());
    p.listening = false;
    p.connect();
    p.advance(Duration::from_millis(10));
    assert!(p.requests_seen.len() > 1, "refused attempts");
    p.listening = true;
    p.advance(Duration::from_secs(10));
    assert_eq!(p.state(Who::Ini), State::Established);
    assert!(
        !p.emitted(Who::Ini, |e| *e
            == SessionEvent::DeviceLost {
                cause: DownCause::ResyncTimeout
            }),
        "the accepted Hello's handshake stalled: {:#?}",
        p.transitions(Who::Ini)
    );
    let epoch = p.session(Who::Ini).epoch();
    assert!(epoch > Epoch(1), "accepted on a later attempt");
    assert_eq!(
        p.session(Who::Tgt).epoch(),
        epoch,
        "one epoch on both sides"
    );
    let policy = Policy::default();
    let established = p.transition(Who::Ini, State::Resyncing, State::Established);
    assert!(established.at - pair::T0 < policy.initial_connect_timeout);
}

#[test]
fn a_refusal_is_reported_and_only_a_final_one_ends_the_first_connect() {
    use relink_core::journal::OpError;
    use relink_core::wire::Refused;
    for reason in RefuseReason::ALL {
        let mut p = Pair::new(Setup::default());
        let refused = RejectData::Refused(Refused { reason });
        p.forged = Some(Forged::Reject(refused.to_vec()));
        p.connect();
        let op = p.send(Who::Ini, b"first");
        p.advance(Duration::from_secs(60));
        let retrying = !reason.is_final();
        assert!(
            p.emitted(Who::Ini, |e| *e
                == SessionEvent::Refused { reason, retrying }),
            "{reason:?}: the refusal is reported"
        );
        if retrying {
            // The next attempt reaches the genuine target.
            assert_eq!(p.state(Who::Ini), State::Established, "{reason:?}");
            assert!(p.outcome(Who::Ini, op).is_success(), "{reason:?}");
        } else {
            assert_eq!(p.state(Who::Ini), State::Failed, "{reason:?}");
            assert!(p.emitted(Who::Ini, |e| matches!(e, SessionEvent::PeerLost { .. })));
            assert_eq!(p.outcome(Who::Ini, op), Outcome::Failed(OpError::PeerLost));
            assert_eq!(p.requests_seen.len(), 1, "{reason:?}: no further attempt");
        }
    }
}

#[test]
fn a_hello_naming_a_closed_session_makes_a_new_session() {
    let mut p = Pair::connected(Setup::default());
    p.close(Who::Ini);
    p.settle();
    assert_eq!(p.state(Who::Tgt), State::Closed);
    // The initiator restarted with the same ids (a seeded node).
    let again = Hello {
        session: SESSION,
        epoch: Epoch(1),
        incarnation: Incarnation(0x1c0),
        connect_data: ConnectBytes::EMPTY,
    };
    let answer = p.knock(ConnectData::Hello(again).to_vec());
    assert!(
        matches!(&answer, Action::Accept { private_data, .. }
            if matches!(AcceptData::decode(private_data), Ok(AcceptData::Welcome(_)))),
        "welcomed: {answer:?}"
    );
}

/// A target session made by `Session::accept_hello` of a Hello of epoch 1
/// (its Accept taken).
fn target_session() -> (relink_core::session::Session, Hello) {
    use relink_core::session::{RequestToken, Role, Session, SessionConfig};
    let hello = Hello {
        session: SESSION,
        epoch: Epoch(1),
        incarnation: Incarnation(0x1c0),
        connect_data: ConnectBytes::EMPTY,
    };
    let cfg = SessionConfig {
        role: Role::Target,
        id: SESSION,
        incarnation: TARGET,
        paths: Vec::new(),
        policy: Policy::default(),
        spec: Setup::default().spec(),
        seed: 1,
        connect_data: ConnectBytes::EMPTY,
    };
    let mut s =
        Session::accept_hello(cfg, RequestToken(1), &hello, pair::SECRET, pair::T0).expect("valid");
    assert!(matches!(
        s.poll_action(),
        Some(Action::Accept {
            epoch: Epoch(1),
            ..
        })
    ));
    (s, hello)
}

#[test]
fn a_hello_retried_after_its_attempt_timed_out_restarts_the_first_handshake() {
    use relink_core::session::{HelloVerdict, RequestToken};
    let now = pair::T0 + Duration::from_millis(600);
    for given_up in [false, true] {
        let (mut s, hello) = target_session();
        if given_up {
            // The target's side of the first attempt failed already.
            s.handle_attempt_failed(Epoch(1), AttemptFailure::Disconnected, now);
            assert_eq!(s.state(), State::Recovering);
            while s.poll_action().is_some() {}
        }
        // The same attempt again, or another incarnation: refused.
        assert_eq!(
            s.handle_hello(RequestToken(2), &hello, now),
            HelloVerdict::Refuse(RefuseReason::Busy)
        );
        let stranger = Hello {
            epoch: Epoch(2),
            incarnation: Incarnation(0xbad),
            ..hello
        };
        assert_eq!(
            s.handle_hello(RequestToken(3), &stranger, now),
            HelloVerdict::Refuse(RefuseReason::Busy)
        );
        // The initiator's next attempt: the handshake starts again there.
        let retry = Hello {
            epoch: Epoch(2),
            ..hello
        };
        assert_eq!(
            s.handle_hello(RequestToken(4), &retry, now),
            HelloVerdict::Taken
        );
        let actions: Vec<Action> = std::iter::from_fn(|| s.poll_action()).collect();
        if !given_up {
            assert_eq!(actions[0], Action::TearDown { epoch: Epoch(1) });
        }
        let Some(Action::Accept {
            epoch,
            request,
            private_data,
        }) = actions.last()
        else {
            panic!("no accept: {actions:?}")
        };
        assert_eq!((*epoch, *request), (Epoch(2), RequestToken(4)));
        match AcceptData::decode(private_data) {
            Ok(AcceptData::Welcome(w)) => {
                assert_eq!(w.secret, SessionSecret::from_bytes(pair::SECRET));
            }
            other => panic!("not a welcome: {other:?}"),
        }
        assert_eq!(s.epoch(), Epoch(2));
        let want = if given_up {
            State::Reconnecting
        } else {
            State::Connecting
        };
        assert_eq!(s.state(), want);
        // Once over, the id is free for a new session.
        s.close(now);
        assert_eq!(
            s.handle_hello(RequestToken(5), &hello, now),
            HelloVerdict::Replaced
        );
    }
}

/// The initiator application's connect data goes in the Hello of the first
/// connect only: the target's session keeps it, a resume carries none and
/// leaves it as it was.
#[test]
fn connect_data_travels_in_the_hello_only_and_the_target_keeps_it() {
    let data = ConnectBytes::new(b"tenant=7;proto=kv/2").unwrap();
    let mut p = Pair::connected(Setup {
        connect_data: data,
        ..Setup::default()
    });
    assert_eq!(p.session(Who::Tgt).connect_data(), b"tenant=7;proto=kv/2");
    assert_eq!(p.session(Who::Ini).connect_data(), b"tenant=7;proto=kv/2");
    let first = p.requests_seen.first().expect("the hello").clone();
    match ConnectData::decode(&first) {
        Ok(ConnectData::Hello(h)) => assert_eq!(h.connect_data, data),
        other => panic!("not a hello: {other:?}"),
    }
    let hellos = p.requests_seen.len();
    p.reset_device(Who::Ini);
    p.advance(Duration::from_secs(30));
    assert_eq!(p.state(Who::Ini), State::Established);
    assert!(p.requests_seen.len() > hellos, "reconnected");
    for later in &p.requests_seen[hellos..] {
        assert!(
            matches!(ConnectData::decode(later), Ok(ConnectData::Resume(_))),
            "a reconnection is a resume"
        );
    }
    assert_eq!(p.session(Who::Tgt).connect_data(), b"tenant=7;proto=kv/2");
    p.check();
}

#[test]
fn a_resume_that_replaces_an_accepted_attempt_is_a_failed_attempt_not_a_loss() {
    let mut p = target_waiting();
    let losses = p.session(Who::Tgt).counters().losses;
    let first = Resume::sign(&p.secret(), SESSION, Epoch(2), Seq(0));
    let answer = p.knock(ConnectData::Resume(first).to_vec());
    assert!(
        matches!(
            answer,
            Action::Accept {
                epoch: Epoch(2),
                ..
            }
        ),
        "{answer:?}"
    );
    assert_eq!(p.state(Who::Tgt), State::Reconnecting);
    // The initiator's attempt timed out before the accept reached it, and
    // it resumes again: the target's accepted attempt was never a
    // connection, so it failed; nothing was lost.
    let again = Resume::sign(&p.secret(), SESSION, Epoch(3), Seq(0));
    let answer = p.knock(ConnectData::Resume(again).to_vec());
    assert!(
        matches!(
            answer,
            Action::Accept {
                epoch: Epoch(3),
                ..
            }
        ),
        "{answer:?}"
    );
    assert_eq!(p.state(Who::Tgt), State::Reconnecting);
    assert_eq!(
        p.session(Who::Tgt).counters().losses,
        losses,
        "no second loss"
    );
    assert!(p.emitted(Who::Tgt, |e| matches!(
        e,
        SessionEvent::AttemptFailed {
            reason: AttemptFailure::Timeout,
            ..
        }
    )));
}
