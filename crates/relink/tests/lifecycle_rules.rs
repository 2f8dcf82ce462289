//! The rules of a session's and a listener's life that an application
//! relies on (the docs of `Node::connect` and `Node::listen` state them):
//!
//! - a listener on an address no local device owns yet is made, waits,
//!   and listens once a device owning the address appears — and a client
//!   connects then;
//! - a first connect to an address nobody serves reports every failed
//!   attempt with a typed reason and gives up at `first_connect_tmo`
//!   after the connect, with a typed event, state and outcome;
//! - bad input is refused with a typed error that names what is wrong;
//! - options at their documented limits work.

use std::time::Duration;

use relink::{
    Access, AttemptFailure, BufferToken, Cause, ConnectError, ListenError, LocalRange, OpError,
    OptionsError, Outcome, Path, Policy, RegionId, RegionOptions, SessionEvent, SessionHandle,
    SessionOptions, State, SubmitError,
};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

const PORT: u16 = 7471;

fn to_target(sim: &Sim) -> Vec<Path> {
    vec![Path {
        local: None,
        peer: sim.target_addr(PORT),
    }]
}

/// Connect the initiator to the target's `PORT`.
fn connect(sim: &mut Sim, opts: SessionOptions) -> Result<SessionHandle, ConnectError> {
    let paths = to_target(sim);
    sim.node(INITIATOR).connect(paths, opts)
}

fn events(sim: &mut Sim, node: usize, s: SessionHandle) -> Vec<SessionEvent> {
    std::iter::from_fn(|| sim.node(node).poll_event(s)).collect()
}

/// The `(attempt, reason)` of every `AttemptFailed` in `evs`.
fn failed_attempts(evs: &[SessionEvent]) -> Vec<(u32, AttemptFailure)> {
    evs.iter()
        .filter_map(|e| match e {
            SessionEvent::AttemptFailed { attempt, reason } => Some((*attempt, reason.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_listener_made_before_its_device_listens_once_the_device_is_added() {
    let mut sim = Sim::new(11);
    let target = sim.host(TARGET).index();
    sim.fabric().inject(Fault::Remove(target, "soft0".into()));
    sim.settle();
    let addr = sim.target_addr(PORT);
    let l = sim
        .node(TARGET)
        .listen(addr, SessionOptions::default())
        .expect("a listener waits for its device");
    assert_eq!(sim.node(TARGET).listener_active(l), Some(false));

    // Nobody answers at the address: each attempt fails, reported.
    let s = connect(&mut sim, SessionOptions::default()).unwrap();
    let op = sim.node(INITIATOR).send(s, b"hello").unwrap();
    sim.run_for(Duration::from_secs(3));
    let failed = failed_attempts(&events(&mut sim, INITIATOR, s));
    assert!(failed.len() >= 2, "{failed:?}");
    for (i, (attempt, reason)) in failed.iter().enumerate() {
        assert_eq!(*attempt as usize, i + 1, "attempts are numbered from 1");
        assert!(
            matches!(
                reason,
                AttemptFailure::Timeout | AttemptFailure::Unreachable
            ),
            "{reason:?}"
        );
    }
    assert!(matches!(
        sim.node(INITIATOR).state(s),
        Some(State::Recovering | State::Reconnecting)
    ));

    // The device comes: the listener listens, the next attempt connects.
    sim.fabric().inject(Fault::Readd(target, "soft0".into()));
    sim.settle();
    assert_eq!(sim.node(TARGET).listener_active(l), Some(true));
    let up = sim.run_until_cond(Duration::from_secs(10), |sim| {
        sim.node(INITIATOR).state(s) == Some(State::Established)
    });
    assert!(up, "state {:?}", sim.node(INITIATOR).state(s));
    let t = sim
        .node(TARGET)
        .accept()
        .expect("the session was accepted")
        .session;
    sim.run_for(Duration::from_millis(5));
    let (_, msg) = sim.node(TARGET).poll_delivery(t).expect("delivered");
    assert_eq!(msg, b"hello");
    let c = sim.node(INITIATOR).poll_completion(s).expect("completed");
    assert_eq!((c.op, c.outcome.is_success()), (op, true));

    // Closed, the listener is gone.
    sim.node(TARGET).close_listener(l);
    assert_eq!(sim.node(TARGET).listener_active(l), None);
}

#[test]
fn a_first_connect_nobody_serves_reports_each_attempt_and_gives_up_at_its_deadline() {
    let mut sim = Sim::new(12);
    // The target's host and device answer; nothing listens on the port.
    let start = sim.now();
    let s = connect(&mut sim, SessionOptions::default()).unwrap();
    let op = sim.node(INITIATOR).send(s, b"never").unwrap();
    let deadline = Policy::default()
        .first_connect_tmo
        .expect("a default deadline");
    assert_eq!(deadline, Duration::from_secs(30));
    sim.run_for(deadline + Duration::from_secs(1));

    let evs = events(&mut sim, INITIATOR, s);
    let failed = failed_attempts(&evs);
    assert!(failed.len() >= 5, "{failed:?}");
    assert!(
        failed
            .iter()
            .all(|(_, reason)| *reason == AttemptFailure::NoListener),
        "{failed:?}"
    );
    let gave_up = evs
        .iter()
        .position(|e| *e == SessionEvent::GaveUp)
        .expect("a GaveUp event");
    let failed_at = evs
        .iter()
        .find_map(|e| match e {
            SessionEvent::Transition(t) if t.to == State::Failed => Some(t.clone()),
            _ => None,
        })
        .expect("the transition to Failed");
    assert_eq!(failed_at.cause, Cause::GaveUp);
    assert!(
        evs[..gave_up]
            .iter()
            .any(|e| matches!(e, SessionEvent::AttemptFailed { .. })),
        "attempts are reported before the give-up"
    );
    // The deadline counts from the connect (virtual time: exact up to the
    // simulator's step).
    let after = failed_at.at - start;
    assert!(
        after >= deadline && after < deadline + Duration::from_millis(1),
        "{after:?}"
    );
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Failed));
    let c = sim.node(INITIATOR).poll_completion(s).expect("completed");
    assert_eq!(c.op, op);
    assert_eq!(c.outcome, Outcome::Failed(OpError::GaveUp));
}

#[test]
fn a_first_connect_without_a_device_says_so_and_gives_up_at_the_policy_deadline() {
    let mut sim = Sim::new(13);
    let initiator = sim.host(INITIATOR).index();
    sim.fabric()
        .inject(Fault::Remove(initiator, "soft0".into()));
    sim.settle();
    let policy = Policy::builder()
        .first_connect_tmo(Some(Duration::from_secs(5)))
        .build()
        .unwrap();
    let opts = SessionOptions::builder().policy(policy).build().unwrap();
    let s = connect(&mut sim, opts).expect("a connect waits for a device");
    let evs = events(&mut sim, INITIATOR, s);
    assert_eq!(
        failed_attempts(&evs),
        [(1, AttemptFailure::NoDevice)],
        "reported at once"
    );
    sim.run_for(Duration::from_secs(6));
    let evs = events(&mut sim, INITIATOR, s);
    assert!(evs.contains(&SessionEvent::GaveUp), "{evs:?}");
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Failed));
}

#[test]
fn bad_input_gets_a_typed_error_that_names_what_is_wrong() {
    // A policy: the key.
    let e = Policy::builder()
        .reconnect_delay(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(e.key, "reconnect_delay");
    assert_eq!(e.to_string(), "policy key `reconnect_delay`: must be > 0");
    let e = Policy::builder()
        .fast_io_fail_tmo(Some(Duration::from_secs(700)))
        .build()
        .unwrap_err();
    assert_eq!(e.key, "fast_io_fail_tmo");

    // Session options: the option.
    let e = SessionOptions::builder().recv_slots(8).build().unwrap_err();
    assert!(
        matches!(
            e,
            OptionsError::Invalid {
                key: "recv_slots",
                ..
            }
        ),
        "{e:?}"
    );
    let region = |id| {
        RegionOptions::new(RegionId(id), 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .advertise(true)
    };
    let e = SessionOptions::builder()
        .region(region(1))
        .region(region(1))
        .build()
        .unwrap_err();
    assert_eq!(e, OptionsError::DuplicateRegion(RegionId(1)));
    let e = SessionOptions::builder()
        .max_message(16)
        .region(region(1))
        .build()
        .unwrap_err();
    assert!(
        matches!(
            e,
            OptionsError::Invalid {
                key: "max_message",
                ..
            }
        ),
        "{e:?}"
    );
    let e = SessionOptions::builder()
        .max_message(u32::MAX)
        .build()
        .unwrap_err();
    assert!(
        matches!(
            e,
            OptionsError::Invalid {
                key: "max_message",
                ..
            }
        ),
        "a max_message whose slot (plus the header) would not fit a u32: {e:?}"
    );

    // Calls: checked before anything is made.
    let mut sim = Sim::new(14);
    let mut opts = SessionOptions::default();
    opts.policy.initial_backoff = Duration::ZERO;
    let e = connect(&mut sim, opts.clone()).unwrap_err();
    match &e {
        ConnectError::Options(OptionsError::Policy(p)) => assert_eq!(p.key, "initial_backoff"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        e.to_string(),
        "policy key `initial_backoff`: must be > 0 and <= reconnect_delay"
    );
    let addr = sim.target_addr(PORT);
    assert!(matches!(
        sim.node(TARGET).listen(addr, opts),
        Err(ListenError::Options(OptionsError::Policy(_)))
    ));
    assert_eq!(
        sim.node(INITIATOR)
            .connect(Vec::new(), SessionOptions::default())
            .unwrap_err(),
        ConnectError::NoPath
    );
    let port0 = sim.target_addr(0);
    assert_eq!(
        sim.node(TARGET)
            .listen(port0, SessionOptions::default())
            .unwrap_err(),
        ListenError::NoPort(port0)
    );
    assert!(
        sim.node(INITIATOR).sessions().is_empty(),
        "nothing was made"
    );
    assert_eq!(sim.node(TARGET).footprint().listeners, 0);

    // The address taken: a distinct error, to retry later.
    sim.node(TARGET)
        .listen(addr, SessionOptions::default())
        .unwrap();
    assert_eq!(
        sim.node(TARGET)
            .listen(addr, SessionOptions::default())
            .unwrap_err(),
        ListenError::AddrInUse(addr)
    );

    // Operations: too large, and on an ended session.
    let s = connect(&mut sim, SessionOptions::default()).unwrap();
    sim.run_for(Duration::from_millis(5));
    let big = vec![0u8; 4097];
    assert_eq!(
        sim.node(INITIATOR).send(s, &big).unwrap_err(),
        SubmitError::TooLarge {
            len: 4097,
            max: 4096
        }
    );
    let bad = LocalRange {
        region: RegionId(9),
        offset: 0,
        len: 8,
    };
    let token = BufferToken {
        region: RegionId(1),
        offset: 0,
    };
    assert_eq!(
        sim.node(INITIATOR).write(s, bad, token).unwrap_err(),
        SubmitError::BadLocal(bad)
    );
    sim.node(INITIATOR).close(s).unwrap();
    assert_eq!(
        sim.node(INITIATOR).send(s, b"late").unwrap_err(),
        SubmitError::Ended(State::Closed)
    );
}

/// `max_message` at its least with advertised regions: every region's
/// advertisement still fits a slot, the session comes up and the peer's
/// regions are usable.
#[test]
fn the_least_message_size_carries_several_advertisements() {
    let mut sim = Sim::new(15);
    let regions: Vec<RegionOptions> = (1..=3)
        .map(|id| {
            RegionOptions::new(RegionId(id), 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                .advertise(true)
        })
        .collect();
    for max_message in [34, 64, 100] {
        let opts = SessionOptions::builder()
            .max_message(max_message)
            .regions(regions.clone())
            .build()
            .unwrap();
        let port = PORT + max_message as u16;
        let addr = sim.target_addr(port);
        sim.node(TARGET).listen(addr, opts.clone()).unwrap();
        let s = sim
            .node(INITIATOR)
            .connect(
                vec![Path {
                    local: None,
                    peer: addr,
                }],
                opts,
            )
            .unwrap();
        sim.run_for(Duration::from_millis(20));
        assert_eq!(
            sim.node(INITIATOR).state(s),
            Some(State::Established),
            "max_message {max_message}"
        );
        let mut ops = Vec::new();
        for id in 1..=3 {
            let local = LocalRange {
                region: RegionId(id),
                offset: 0,
                len: 8,
            };
            let remote = BufferToken {
                region: RegionId(id),
                offset: 0,
            };
            ops.push(sim.node(INITIATOR).write(s, local, remote).unwrap());
        }
        sim.run_for(Duration::from_millis(5));
        for op in ops {
            let c = sim.node(INITIATOR).poll_completion(s).expect("completed");
            assert_eq!(c.op, op);
            assert!(c.outcome.is_success(), "max_message {max_message}: {c:?}");
        }
        assert_eq!(sim.node(INITIATOR).counters(s).unwrap().losses, 0);
    }
}
