//! Backpressure and what a completion says, as an application relies on
//! them:
//!
//! - a session takes at most `max_outstanding` operations whose
//!   completion the application has not taken; past it a submit is
//!   refused (`WouldBlock`), changing nothing, however long the session
//!   cannot make progress — nothing queues without bound;
//! - taking a completion makes room, and a `Writable` event says so once
//!   per refusal;
//! - every completion carries the context the operation was submitted
//!   with, its class and its length.

use std::time::Duration;

use relink::{
    Access, BufferToken, LocalRange, OpClass, OpKind, Path, RegionId, RegionOptions, SessionEvent,
    SessionOptions, SubmitError,
};
use relink_sim::sim::{Sim, INITIATOR};

const PORT: u16 = 7471;

#[test]
fn a_session_that_cannot_progress_refuses_past_max_outstanding() {
    let mut sim = Sim::new(5);
    // Nobody listens: the session never connects, nothing completes.
    let paths = vec![Path {
        local: None,
        peer: sim.target_addr(PORT),
    }];
    let opts = SessionOptions::builder()
        .max_outstanding(100)
        .build()
        .expect("options");
    let s = sim.node(INITIATOR).connect(paths, opts).expect("connect");
    let payload = vec![7u8; 1024];
    let (mut accepted, mut refused) = (0, 0);
    for _ in 0..200_000 {
        match sim.node(INITIATOR).send(s, &payload) {
            Ok(_) => accepted += 1,
            Err(SubmitError::WouldBlock { outstanding, max }) => {
                assert_eq!((outstanding, max), (100, 100));
                refused += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    sim.run_for(Duration::from_millis(200));
    assert_eq!((accepted, refused), (100, 199_900));
    assert_eq!(sim.node(INITIATOR).room(s).expect("session"), 0);
    let e = sim.node(INITIATOR).send(s, b"x").unwrap_err();
    assert_eq!(
        e.to_string(),
        "the session has 100 operations outstanding, its most (100): take completions first"
    );
}

#[test]
fn taking_a_completion_makes_room_and_writable_says_so_once() {
    let opts = || {
        SessionOptions::builder()
            .max_outstanding(16)
            .build()
            .expect("options")
    };
    let (mut sim, s, _t) = Sim::with_session_options(6, opts(), opts());
    let mut sent = 0u64;
    let err = loop {
        match sim.node(INITIATOR).send(s, &sent.to_le_bytes()) {
            Ok(_) => sent += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(sent, 16);
    assert!(matches!(err, SubmitError::WouldBlock { .. }), "{err}");
    // The messages are delivered and confirmed; their completions wait to
    // be taken, and still count.
    sim.run_for(Duration::from_millis(200));
    assert_eq!(sim.node(INITIATOR).room(s).expect("session"), 0);
    assert!(sim.node(INITIATOR).send(s, b"more").is_err(), "still full");
    let writable = |sim: &mut Sim| {
        std::iter::from_fn(|| sim.node(INITIATOR).poll_event(s))
            .filter(|e| matches!(e, SessionEvent::Writable))
            .count()
    };
    assert_eq!(writable(&mut sim), 0);
    let c = sim.node(INITIATOR).poll_completion(s).expect("completed");
    assert!(c.outcome.is_success(), "{c:?}");
    assert_eq!(writable(&mut sim), 1, "room returned after a refusal");
    assert_eq!(sim.node(INITIATOR).room(s).expect("session"), 1);
    sim.node(INITIATOR).send(s, b"fits").expect("room for one");
    while sim.node(INITIATOR).poll_completion(s).is_some() {}
    assert_eq!(writable(&mut sim), 0, "no refusal since the last event");
}

#[test]
fn completions_carry_context_class_and_length() {
    const REGION: RegionId = RegionId(1);
    let region = || {
        RegionOptions::new(
            REGION,
            4096,
            Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
        )
        .advertise(true)
    };
    let opts = || {
        SessionOptions::builder()
            .region(region())
            .build()
            .expect("options")
    };
    let (mut sim, s, _t) = Sim::with_session_options(7, opts(), opts());
    let local = |offset, len| LocalRange {
        region: REGION,
        offset,
        len,
    };
    let remote = |offset| BufferToken {
        region: REGION,
        offset,
    };
    let ops = [
        (
            OpKind::Message {
                payload: vec![1; 300],
            },
            OpClass::Message,
            300,
        ),
        (
            OpKind::Write {
                local: local(0, 512).into(),
                remote: remote(1024),
            },
            OpClass::Write,
            512,
        ),
        (
            OpKind::Read {
                local: local(2048, 100).into(),
                remote: remote(1024),
            },
            OpClass::Read,
            100,
        ),
        (
            OpKind::FetchAdd {
                local: local(3000, 8),
                remote: remote(8),
                add: 5,
            },
            OpClass::FetchAdd,
            8,
        ),
        (
            OpKind::CmpSwap {
                local: local(3008, 8),
                remote: remote(8),
                compare: 5,
                swap: 9,
            },
            OpClass::CmpSwap,
            8,
        ),
    ];
    let mut want = Vec::new();
    for (i, (kind, class, len)) in ops.into_iter().enumerate() {
        let context = 0x00C0_FFEE_0000 + i as u64;
        let op = sim
            .node(INITIATOR)
            .submit_with(s, kind, context)
            .expect("submitted");
        want.push((op, context, class, len));
    }
    sim.run_for(Duration::from_millis(200));
    let mut got: Vec<_> = std::iter::from_fn(|| sim.node(INITIATOR).poll_completion(s))
        .inspect(|c| assert!(c.outcome.is_success(), "{c:?}"))
        .map(|c| (c.op, c.context, c.class, c.len))
        .collect();
    got.sort();
    assert_eq!(got, want);
}
