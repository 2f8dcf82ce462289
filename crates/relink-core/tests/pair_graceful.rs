//! The graceful close on a real pair (`tests/pair`):
//! `Session::close_gracefully` refuses new operations, lets the pending
//! ones finish — queued ones, ones waiting for credits, ones waiting for
//! replay during a recovery, the first connection's — and then closes with
//! the goodbye; at its deadline it closes with what is still pending, which
//! completes once (`Failed(Disconnected)`, or `Indeterminate` where it may
//! have taken effect).
//!
//! It takes no row of its own in the state table: the session stays in its
//! live state while it finishes, then goes to `Closed` (`Cause::Disconnect`).

mod pair;

use std::time::Duration;

use pair::{local, token, Pair, Setup, Who};
use relink_core::journal::{OpError, OpKind, Outcome};
use relink_core::policy::Policy;
use relink_core::session::{Action, SessionError, SessionEvent};
use relink_core::state::{Cause, State};
use relink_core::OpId;

const TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `who` took the disconnect for a loss.
fn saw_loss(p: &Pair, who: Who) -> bool {
    p.emitted(who, |e| matches!(e, SessionEvent::DeviceLost { .. }))
}

/// The initiator submits `n` messages, a WRITE and a FETCH_ADD.
fn some_work(p: &mut Pair, n: u8) -> Vec<OpId> {
    let mut ops: Vec<OpId> = (0..n).map(|i| p.send(Who::Ini, &[i; 4])).collect();
    p.poke(Who::Ini, 0, b"written!");
    ops.push(p.submit(
        Who::Ini,
        OpKind::Write {
            local: local(0, 8).into(),
            remote: token(8),
        },
    ));
    ops.push(p.submit(
        Who::Ini,
        OpKind::FetchAdd {
            local: local(32, 8),
            remote: token(32),
            add: 5,
        },
    ));
    ops
}

fn refused(p: &mut Pair, who: Who) -> Result<OpId, SessionError> {
    let now = p.now;
    p.session(who).submit(
        OpKind::Message {
            payload: b"too late".to_vec(),
        },
        now,
    )
}

#[test]
fn pending_operations_finish_then_the_goodbye_closes_both_halves() {
    let mut p = Pair::connected(Setup::default());
    // 16 receive slots: 8 messages are posted, 4 wait for credits.
    let ops = some_work(&mut p, 12);
    p.pump();
    p.close_gracefully(Who::Ini, TIMEOUT);

    assert_eq!(p.state(Who::Ini), State::Established, "no state of its own");
    assert_eq!(
        p.session(Who::Ini).closing_deadline(),
        Some(p.now + TIMEOUT)
    );
    let err = refused(&mut p, Who::Ini).unwrap_err();
    assert_eq!(err, SessionError::Closing);
    assert!(err.to_string().contains("closing"), "{err}");

    p.settle();
    for op in &ops {
        assert!(
            matches!(p.outcome(Who::Ini, *op), Outcome::Success { .. }),
            "{op}: {:?}",
            p.outcome(Who::Ini, *op)
        );
    }
    assert_eq!(p.word(Who::Tgt, 32), 5, "the atomic ran once");
    assert_eq!(&p.memory(Who::Tgt)[8..16], b"written!");
    assert_eq!(p.delivered(Who::Tgt).len(), 12);
    let t = p.transition(Who::Ini, State::Established, State::Closed);
    assert_eq!(t.cause, Cause::Disconnect);
    assert_eq!(p.session(Who::Ini).ended_pending(), 0);
    assert_eq!(p.session(Who::Ini).closing_deadline(), None);
    // The goodbye went after every operation, then the disconnect.
    let actions = &p.end(Who::Ini).actions;
    let last_data = actions
        .iter()
        .rposition(|a| {
            matches!(
                a,
                Action::Send { op: Some(_), .. } | Action::OneSided { .. }
            )
        })
        .expect("data posted");
    let disconnect = actions
        .iter()
        .position(|a| matches!(a, Action::Disconnect { .. }))
        .expect("a disconnect");
    assert!(last_data < disconnect);
    assert_eq!(p.state(Who::Tgt), State::Closed, "the peer closed its half");
    assert!(!saw_loss(&p, Who::Tgt));
    p.check();
}

#[test]
fn operations_waiting_for_replay_finish_after_the_recovery() {
    let mut p = Pair::connected(Setup::default());
    let ops = some_work(&mut p, 6);
    p.pump();
    // The device goes before anything executed: everything waits for
    // replay on the next transport.
    p.remove_device(Who::Ini);
    p.pump();
    assert_eq!(p.state(Who::Ini), State::Recovering);
    p.close_gracefully(Who::Ini, Duration::from_secs(30));
    p.advance(Duration::from_secs(1));
    assert_eq!(
        p.state(Who::Ini),
        State::Recovering,
        "it waits for a device"
    );
    assert!(refused(&mut p, Who::Ini).is_err());

    p.add_device(Who::Ini);
    p.advance(Duration::from_secs(1));
    let (atomic, replayed) = ops.split_last().expect("ops");
    for op in replayed {
        assert_eq!(
            p.outcome(Who::Ini, *op),
            Outcome::Success { replayed: true },
            "{op}"
        );
    }
    // An atomic is not replayed (the policy's default): it completed
    // with what is known when the transport went.
    assert_eq!(
        p.outcome(Who::Ini, *atomic),
        Outcome::Indeterminate { executed: None }
    );
    assert!(p.emitted(Who::Ini, |e| matches!(e, SessionEvent::Resumed { .. })));
    let t = p.transition(Who::Ini, State::Established, State::Closed);
    assert_eq!(t.cause, Cause::Disconnect);
    assert_eq!(
        p.delivered(Who::Tgt).len(),
        6,
        "each message delivered once"
    );
    assert_eq!(&p.memory(Who::Tgt)[8..16], b"written!");
    assert_eq!(p.word(Who::Tgt, 32), 0, "the atomic never ran");
    assert_eq!(p.state(Who::Tgt), State::Closed);
    p.check();
}

#[test]
fn at_the_deadline_what_is_still_pending_completes_once() {
    let mut p = Pair::connected(Setup::default());
    // 8 messages posted, 2 waiting for credits; the link dies silently, so
    // nothing is confirmed (the keepalive would notice after 10 s).
    let ops: Vec<OpId> = (0..10u8).map(|i| p.send(Who::Ini, &[i])).collect();
    p.pump();
    p.break_link();
    p.close_gracefully(Who::Ini, Duration::from_secs(2));
    p.advance(Duration::from_millis(1999));
    assert_eq!(p.state(Who::Ini), State::Established, "still waiting");
    assert!(p.end(Who::Ini).completions.is_empty());
    p.advance(Duration::from_millis(1));

    let t = p.transition(Who::Ini, State::Established, State::Closed);
    assert_eq!(t.cause, Cause::Disconnect);
    for (i, op) in ops.iter().enumerate() {
        let expected = if i < 8 {
            Outcome::Indeterminate { executed: None }
        } else {
            Outcome::Failed(OpError::Disconnected)
        };
        assert_eq!(p.outcome(Who::Ini, *op), expected, "message {i}");
    }
    assert_eq!(p.session(Who::Ini).ended_pending(), 10);
    // Nothing completes a second time later.
    p.advance(Duration::from_secs(60));
    assert_eq!(p.end(Who::Ini).completions.len(), ops.len());
    p.check();
}

#[test]
fn with_nothing_pending_it_closes_at_once() {
    let mut p = Pair::connected(Setup::default());
    let op = p.send(Who::Ini, b"done before");
    p.settle();
    assert_eq!(
        p.outcome(Who::Ini, op),
        Outcome::Success { replayed: false }
    );
    p.close_gracefully(Who::Ini, TIMEOUT);
    assert_eq!(p.state(Who::Ini), State::Closed, "closed by the call");
    p.run();
    assert_eq!(p.state(Who::Tgt), State::Closed, "the goodbye arrived");
    assert!(!saw_loss(&p, Who::Tgt));
    assert!(p.emitted(Who::Tgt, |e| *e == SessionEvent::Disconnected));
    p.check();
}

#[test]
fn the_first_connections_operations_go_out_before_the_close() {
    let mut p = Pair::new(Setup::default());
    p.connect();
    let op = p.send(Who::Ini, b"first and last");
    p.close_gracefully(Who::Ini, TIMEOUT);
    assert_eq!(p.state(Who::Ini), State::Connecting);
    p.settle();
    assert_eq!(
        p.outcome(Who::Ini, op),
        Outcome::Success { replayed: false }
    );
    assert_eq!(p.delivered(Who::Tgt), vec![b"first and last".to_vec()]);
    p.transition(Who::Ini, State::Established, State::Closed);
    assert_eq!(p.state(Who::Tgt), State::Closed);
    p.check();
}

#[test]
fn fast_failed_operations_can_finish_a_graceful_close_during_an_outage() {
    let policy = Policy::builder()
        .fast_io_fail_tmo(Some(Duration::from_secs(5)))
        .build()
        .expect("valid policy");
    let mut p = Pair::connected(Setup::with_policy(policy));
    p.remove_device(Who::Ini);
    p.settle();
    let op = p.send(Who::Ini, b"queued");
    p.close_gracefully(Who::Ini, Duration::from_secs(60));
    let attempts = p.requests_seen.len();
    p.advance(Duration::from_secs(5));
    assert_eq!(p.outcome(Who::Ini, op), Outcome::Failed(OpError::FastFail));
    let t = p.transition(Who::Ini, State::Recovering, State::Closed);
    assert_eq!(t.cause, Cause::Disconnect);
    p.add_device(Who::Ini);
    p.advance(Duration::from_secs(30));
    assert_eq!(
        p.requests_seen.len(),
        attempts,
        "no attempt after the close"
    );
    p.check();
}

#[test]
fn the_peers_goodbye_ends_a_graceful_close() {
    let mut p = Pair::connected(Setup::default());
    let ops: Vec<OpId> = (0..3u8).map(|i| p.send(Who::Ini, &[i])).collect();
    p.pump();
    p.close_gracefully(Who::Ini, TIMEOUT);
    // The target closes before delivering anything.
    p.close(Who::Tgt);
    p.settle();
    assert_eq!(p.state(Who::Ini), State::Closed);
    assert!(!saw_loss(&p, Who::Ini));
    for op in &ops {
        assert_eq!(
            p.outcome(Who::Ini, *op),
            Outcome::Indeterminate { executed: None }
        );
    }
    assert_eq!(p.session(Who::Ini).ended_pending(), 3);
    p.check();
}

#[test]
fn an_idle_failed_or_closed_session_is_closed_as_by_close() {
    let mut idle = Pair::new(Setup::default());
    idle.close_gracefully(Who::Ini, TIMEOUT);
    assert_eq!(idle.state(Who::Ini), State::Closed);
    idle.check();

    let policy = Policy::builder()
        .ctrl_loss_tmo(Some(Duration::from_secs(5)))
        .build()
        .expect("valid policy");
    let mut p = Pair::connected(Setup::with_policy(policy));
    p.remove_device(Who::Ini);
    let op = p.send(Who::Ini, b"late");
    p.advance(Duration::from_secs(6));
    assert_eq!(p.state(Who::Ini), State::Failed);
    assert_eq!(p.session(Who::Ini).ended_pending(), 1);
    p.close_gracefully(Who::Ini, TIMEOUT);
    p.run();
    p.transition(Who::Ini, State::Failed, State::Closed);
    assert_eq!(p.outcome(Who::Ini, op), Outcome::Failed(OpError::GaveUp));
    assert_eq!(p.session(Who::Ini).ended_pending(), 1, "counted once");

    let events = p.end(Who::Ini).events.len();
    p.close_gracefully(Who::Ini, TIMEOUT);
    p.run();
    assert_eq!(
        p.end(Who::Ini).events.len(),
        events,
        "a closed one: nothing"
    );
    p.check();
}

#[test]
fn a_second_call_keeps_the_earlier_deadline() {
    let mut p = Pair::connected(Setup::default());
    p.send(Who::Ini, b"pending");
    p.pump();
    p.break_link();
    p.close_gracefully(Who::Ini, Duration::from_secs(2));
    p.close_gracefully(Who::Ini, Duration::from_secs(9));
    let deadline = p.session(Who::Ini).closing_deadline();
    assert_eq!(deadline, Some(p.now + Duration::from_secs(2)));
    p.advance(Duration::from_secs(2));
    assert_eq!(p.state(Who::Ini), State::Closed);
    p.check();
}
