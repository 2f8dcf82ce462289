//! A planned outage when the target's CM is late, on the pair harness: the
//! initiator's reconnect (its resume) reaches the target before the
//! `DISCONNECTED` of the connection the initiator took down on purpose (on
//! real rdma_cm the two travel independently). The target takes the
//! resume as the end of the old connection — a planned one, not a loss —
//! and the late `DISCONNECTED` of the old epoch changes nothing.

mod pair;

use pair::{Pair, Setup, Who};
use relink_core::journal::Outcome;
use relink_core::session::SessionEvent;
use relink_core::state::{Cause, State};

#[test]
fn a_resume_ahead_of_the_late_disconnect_of_a_suspend_is_no_loss() {
    let mut p = Pair::connected(Setup::default());
    let before = p.send(Who::Ini, b"before");
    p.suspend(Who::Ini).expect("suspend");
    p.hold_cm = true;
    p.run();
    assert_eq!(p.state(Who::Ini), State::Suspended);
    assert_eq!(
        p.state(Who::Tgt),
        State::Established,
        "the target has not heard of the disconnect yet"
    );
    let during = p.send(Who::Ini, b"while suspended");
    p.resume(Who::Ini, None).expect("resume");
    p.run();
    assert_eq!(p.state(Who::Ini), State::Established, "resumed");
    assert_eq!(p.state(Who::Tgt), State::Established, "resumed");
    // The old connection's DISCONNECTED arrives at last.
    p.hold_cm = false;
    p.settle();
    for who in [Who::Ini, Who::Tgt] {
        assert_eq!(p.state(who), State::Established, "{who:?}");
        let c = p.session(who).counters();
        assert_eq!(c.losses, 0, "{who:?}: a suspend is no loss");
        assert_eq!(c.planned, 1, "{who:?}");
        assert_eq!(c.replayed, 0, "{who:?}: nothing to replay");
        assert!(
            !p.emitted(who, |e| matches!(e, SessionEvent::DeviceLost { .. })),
            "{who:?}: {:?}",
            p.end(who).events
        );
    }
    assert_eq!(
        p.transition(Who::Tgt, State::Established, State::Suspended)
            .cause,
        Cause::Suspend
    );
    for op in [before, during] {
        assert_eq!(
            p.outcome(Who::Ini, op),
            Outcome::Success { replayed: false }
        );
    }
    assert_eq!(
        p.delivered(Who::Tgt),
        vec![b"before".to_vec(), b"while suspended".to_vec()]
    );
    p.check();
}
