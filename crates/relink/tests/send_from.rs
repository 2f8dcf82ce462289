//! Messages from registered memory (`Node::send_from`), as an application
//! relies on them:
//!
//! - the peer receives one ordinary message of the ranges' bytes, in order,
//!   from one range or several, across a registration and a session region;
//! - relink copies none of the payload on the way out
//!   (`Counters::send_copied_bytes` stays 0), while `Node::send` copies;
//! - across resets of either side's device, messages in flight are replayed
//!   from the memory and delivered exactly once, in order, with their bytes;
//! - the memory is in use until the completion: deregistration is refused
//!   until then;
//! - bad input is refused at submit, changing nothing.

use std::time::Duration;

use relink::{
    Access, LocalRange, LocalSgl, Memory, OpKind, RegionId, RegionOptions, SessionHandle,
    SessionOptions, State, SubmitError,
};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

fn pattern(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(29) ^ tag).collect()
}

fn range(region: RegionId, offset: u64, len: u32) -> LocalRange {
    LocalRange {
        region,
        offset,
        len,
    }
}

/// Run until the target's session `t` delivered `n` messages; return them.
fn deliveries(sim: &mut Sim, t: SessionHandle, n: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    assert!(
        sim.run_until_cond(Duration::from_secs(20), |sim| {
            while let Some((_, bytes)) = sim.node(TARGET).poll_delivery(t) {
                got.push(bytes);
            }
            got.len() >= n
        }),
        "{} of {n} messages delivered",
        got.len()
    );
    got
}

/// Run until the initiator's session `s` has `n` completions; all must be
/// successes.
fn successes(sim: &mut Sim, s: SessionHandle, n: usize) {
    let mut done = Vec::new();
    assert!(
        sim.run_until_cond(Duration::from_secs(20), |sim| {
            while let Some(c) = sim.node(INITIATOR).poll_completion(s) {
                done.push(c);
            }
            done.len() >= n
        }),
        "{} of {n} completions",
        done.len()
    );
    for c in &done {
        assert!(c.outcome.is_success(), "{c:?}");
        assert_eq!(c.class, relink::OpClass::Message);
    }
}

fn registered(sim: &mut Sim, len: usize) -> (Memory, RegionId) {
    let mem = sim.node(INITIATOR).alloc_memory(len).expect("memory");
    let id = sim
        .node(INITIATOR)
        .register(mem.clone(), Access::LOCAL_WRITE)
        .expect("registered");
    (mem, id)
}

#[test]
fn the_peer_gets_the_ranges_bytes_without_a_copy() {
    let opts = SessionOptions::builder()
        .regions(vec![RegionOptions::new(
            RegionId(1),
            4096,
            Access::LOCAL_WRITE,
        )])
        .build()
        .expect("valid options");
    let (mut sim, s, t) = Sim::with_session_options(31, opts.clone(), opts);
    let (mem, reg) = registered(&mut sim, 8192);
    let a = pattern(1, 64);
    let b = pattern(2, 1000);
    let c = pattern(3, 7);
    mem.write(0, &a).expect("in bounds");
    mem.write(4096, &b).expect("in bounds");
    let region = sim.node(INITIATOR).region(s, RegionId(1));
    let region = region.expect("the session's region");
    region.write(100, &c).expect("in bounds");

    let one = sim
        .node(INITIATOR)
        .send_from(s, range(reg, 0, 64))
        .expect("submitted");
    let sgl = LocalSgl::new([
        range(reg, 4096, 1000),
        range(RegionId(1), 100, 7),
        range(reg, 0, 64),
    ])
    .expect("three ranges");
    let three = sim
        .node(INITIATOR)
        .submit_with(s, OpKind::MessageFrom { local: sgl }, 77)
        .expect("submitted");
    assert!(one < three);
    let got = deliveries(&mut sim, t, 2);
    assert_eq!(got[0], a);
    assert_eq!(got[1], [b.as_slice(), &c, &a].concat());
    let mut done = Vec::new();
    assert!(sim.run_until_cond(Duration::from_secs(5), |sim| {
        while let Some(c) = sim.node(INITIATOR).poll_completion(s) {
            done.push(c);
        }
        done.len() == 2
    }));
    assert_eq!(
        (done[1].op, done[1].context, done[1].len),
        (three, 77, 1071)
    );
    assert!(done.iter().all(|c| c.outcome.is_success()));

    let counters = sim.node(INITIATOR).counters(s).expect("session");
    assert_eq!(
        counters.send_copied_bytes, 0,
        "no payload byte copied for messages from registered memory"
    );
    sim.node(INITIATOR).send(s, &a).expect("submitted");
    deliveries(&mut sim, t, 1);
    let counters = sim.node(INITIATOR).counters(s).expect("session");
    assert_eq!(
        counters.send_copied_bytes,
        2 * 64,
        "Node::send copies into the journal and into a send slot"
    );
}

#[test]
fn messages_in_flight_are_replayed_from_memory_across_resets() {
    let (mut sim, s, t) = Sim::with_session(32);
    let per = 512usize;
    let count = 48usize;
    let (mem, reg) = registered(&mut sim, per * count);
    let mut expected = Vec::new();
    for (round, host) in [(0usize, TARGET), (1, INITIATOR)] {
        let base = round * count / 2;
        for i in base..base + count / 2 {
            let bytes = pattern(i as u8, per);
            mem.write(i * per, &bytes).expect("in bounds");
            let local = range(reg, (i * per) as u64, per as u32);
            // Two ranges: the message's halves, swapped back in order.
            let half = per as u32 / 2;
            let sgl = LocalSgl::new([
                range(reg, local.offset, half),
                range(reg, local.offset + u64::from(half), half),
            ])
            .expect("two ranges");
            sim.node(INITIATOR)
                .submit(s, OpKind::MessageFrom { local: sgl })
                .expect("submitted");
            expected.push(bytes);
        }
        // Reset a device with the messages in flight.
        sim.run_for(Duration::from_micros(200));
        let index = sim.host(host).index();
        sim.fabric().inject(Fault::Reset(index, "soft0".into()));
        successes(&mut sim, s, count / 2);
    }
    let got = deliveries(&mut sim, t, count);
    assert_eq!(got.len(), count, "each message delivered exactly once");
    assert!(got == expected, "in order, with their bytes");
    sim.run_for(Duration::from_millis(100));
    assert!(sim.node(TARGET).poll_delivery(t).is_none(), "no duplicate");
    let counters = sim.node(INITIATOR).counters(s).expect("session");
    assert!(counters.losses >= 2, "{counters:?}");
    assert!(
        counters.replayed > 0,
        "messages were in flight at a reset and replayed: {counters:?}"
    );
    assert_eq!(counters.send_copied_bytes, 0);
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Established));
}

#[test]
fn the_memory_is_in_use_until_the_completion() {
    let (mut sim, s, t) = Sim::with_session(33);
    let (mem, reg) = registered(&mut sim, 4096);
    mem.write(0, b"hold").expect("in bounds");
    sim.node(INITIATOR)
        .send_from(s, range(reg, 0, 4))
        .expect("submitted");
    assert!(matches!(
        sim.node(INITIATOR).deregister(reg),
        Err(relink::RegisterError::InUse { id, session }) if id == reg && session == s
    ));
    successes(&mut sim, s, 1);
    assert_eq!(deliveries(&mut sim, t, 1), vec![b"hold".to_vec()]);
    sim.node(INITIATOR).deregister(reg).expect("deregistered");
    assert!(matches!(
        sim.node(INITIATOR).send_from(s, range(reg, 0, 4)),
        Err(SubmitError::BadLocal(_))
    ));
}

#[test]
fn bad_input_is_refused_at_submit() {
    let (mut sim, s, _t) = Sim::with_session(34);
    let (_mem, reg) = registered(&mut sim, 4096);
    let max = sim.node(INITIATOR).options(s).expect("session").max_message;
    // Past the end of the registration.
    assert!(matches!(
        sim.node(INITIATOR).send_from(s, range(reg, 4000, 200)),
        Err(SubmitError::BadLocal(r)) if r == range(reg, 4000, 200)
    ));
    // An unknown region.
    assert!(matches!(
        sim.node(INITIATOR).send_from(s, range(RegionId(9), 0, 8)),
        Err(SubmitError::BadLocal(_))
    ));
    // More than max_message in all.
    assert_eq!(max, 4096, "the default");
    {
        let sgl = LocalSgl::new((0..4).map(|_| range(reg, 0, 4096))).expect("four ranges");
        assert!(matches!(
            sim.node(INITIATOR)
                .submit(s, OpKind::MessageFrom { local: sgl }),
            Err(SubmitError::TooLarge { len: 16384, .. })
        ));
    }
    // No list of 0 or more than LocalSgl::MAX ranges exists.
    assert!(LocalSgl::new([]).is_none());
    assert!(LocalSgl::new((0..=LocalSgl::MAX).map(|_| range(reg, 0, 1))).is_none());
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Established));
    assert_eq!(sim.node(INITIATOR).room(s).ok(), Some(4096));
}

/// A close while messages from registered memory are still on the send
/// queue: the device may read their ranges until the closing transport is
/// destroyed (rxe reads a posted SEND's memory when it transmits it), so
/// their completions — which hand the memory back — come only after that,
/// and the session's end events after them.
#[test]
fn a_close_hands_back_in_flight_memory_only_once_the_transport_is_gone() {
    let (mut sim, s, _t) =
        Sim::with_session_options(37, SessionOptions::default(), SessionOptions::default());
    let (mem, reg) = registered(&mut sim, 16 * 256);
    mem.write(0, &pattern(9, 16 * 256)).expect("in bounds");
    for i in 0..16u64 {
        sim.node(INITIATOR)
            .send_from(s, range(reg, i * 256, 256))
            .expect("submitted");
    }
    sim.node(INITIATOR).close(s).expect("closed");
    assert!(
        sim.node(INITIATOR).poll_completion(s).is_none(),
        "a completion came while its SEND may still be on the send queue"
    );
    let mut done = Vec::new();
    let mut closing_at_first = None;
    assert!(sim.run_until_cond(Duration::from_secs(5), |sim| {
        let closing = sim.node(INITIATOR).footprint().closing;
        while let Some(c) = sim.node(INITIATOR).poll_completion(s) {
            closing_at_first.get_or_insert(closing);
            done.push(c);
        }
        done.len() == 16
    }));
    assert_eq!(
        closing_at_first,
        Some(0),
        "the first completion came while the closing transport still existed"
    );
    let mut events = Vec::new();
    while let Some(e) = sim.node(INITIATOR).poll_event(s) {
        events.push(e);
    }
    assert!(
        events.contains(&relink::SessionEvent::Disconnected)
            || sim.node(INITIATOR).state(s) == Some(State::Closed),
        "{events:?}"
    );
}
