//! Frames: messages queued back to back share one SEND while they fit the
//! peer's receive slot. What an application relies on stays: every
//! message delivered once, in order, whole, also across a reset; and a
//! frame never outgrows the receiving side's slots, whatever the sender's
//! own `max_message`.

use std::time::Duration;

use relink::{SessionHandle, SessionOptions};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

/// Message `i`: 1 to `max` bytes, each derived from `i` and its position.
fn message(i: u32, max: u32) -> Vec<u8> {
    (0..1 + i % max)
        .map(|k| (i.wrapping_mul(131) ^ k) as u8)
        .collect()
}

/// A session from an initiator whose `max_message` is `initiator` to a
/// target whose is `target`, established.
fn session(seed: u64, initiator: u32, target: u32) -> (Sim, SessionHandle, SessionHandle) {
    let max = |bytes| SessionOptions::builder().max_message(bytes).build();
    let (i, t) = (max(initiator), max(target));
    Sim::with_session_options(seed, i.expect("options"), t.expect("options"))
}

/// Send `count` messages of up to `max` bytes in bursts of `burst`, with a
/// reset of the target's device at message `reset_at`, and check that the
/// target received each once, in order; returns the target's counters.
fn bursts(
    sim: &mut Sim,
    (s, t): (SessionHandle, SessionHandle),
    count: u32,
    max: u32,
    burst: u32,
    reset_at: Option<u32>,
) -> relink::Counters {
    let mut received = Vec::new();
    let drain = |sim: &mut Sim, received: &mut Vec<Vec<u8>>| {
        while let Some((seq, m)) = sim.node(TARGET).poll_delivery(t) {
            assert_eq!(seq.0, received.len() as u64 + 1, "in order");
            received.push(m);
        }
    };
    for i in 0..count {
        sim.node(INITIATOR).send(s, &message(i, max)).unwrap();
        if Some(i) == reset_at {
            let host = sim.host(TARGET).index();
            sim.fabric().inject(Fault::Reset(host, "soft0".into()));
        }
        if i % burst == burst - 1 {
            sim.run_for(Duration::from_micros(100));
            drain(sim, &mut received);
        }
    }
    sim.run_for(Duration::from_secs(2));
    drain(sim, &mut received);
    assert_eq!(received.len(), count as usize, "every message once");
    for (i, m) in received.iter().enumerate() {
        assert_eq!(*m, message(i as u32, max), "message {i} whole");
    }
    let mut completed = 0;
    while let Some(c) = sim.node(INITIATOR).poll_completion(s) {
        assert!(c.outcome.is_success(), "{c:?}");
        completed += 1;
    }
    assert_eq!(completed, count, "one completion per message");
    sim.node(TARGET).counters(t).expect("session")
}

#[test]
fn small_messages_travel_several_to_a_send_and_arrive_once_in_order() {
    let (mut sim, s, t) = session(11, 4096, 4096);
    let c = bursts(&mut sim, (s, t), 3000, 64, 48, Some(1500));
    assert!(c.resumes >= 1, "the reset was recovered: {c:?}");
    // Bursts of 48 messages of at most 64 bytes fit a 4 KiB slot several
    // times over: most messages share a SEND.
    assert!(
        c.packed * 2 > c.delivered,
        "{} of {} messages packed",
        c.packed,
        c.delivered
    );
}

#[test]
fn messages_as_long_as_a_slot_travel_alone() {
    // Room for one message of `max_message` bytes per slot: no frame has
    // room for a second.
    let (mut sim, s, t) = session(12, 64, 64);
    let c = bursts(&mut sim, (s, t), 500, 64, 50, None);
    let whole = (0..500).filter(|i| message(*i, 64).len() > 21).count() as u64;
    assert!(whole > 0);
    // Two messages of up to 21 bytes fit 86 bytes (22 of header each) and
    // do share; longer ones never do, and no frame overran a slot.
    assert!(c.packed > 0 && c.packed <= 500 - whole, "{c:?}");
    assert_eq!(c.losses, 0, "{c:?}");
    let (mut sim, s, t) = session(13, 16, 16);
    let c = bursts(&mut sim, (s, t), 300, 16, 30, None);
    assert_eq!(c.packed, 0, "38-byte slots hold one message: {c:?}");
}

#[test]
fn a_frame_fits_the_receivers_slots_not_the_senders() {
    // The initiator's slots hold 4 KiB, the target's 64 bytes of message:
    // frames to the target stay within its 86-byte slots (a longer one
    // would be a receive error and a loss on every try).
    let (mut sim, s, t) = session(14, 4096, 64);
    let c = bursts(&mut sim, (s, t), 600, 20, 60, None);
    assert!(c.packed > 0, "short messages still share: {c:?}");
    for (node, h) in [(INITIATOR, s), (TARGET, t)] {
        let c = sim.node(node).counters(h).expect("session");
        assert_eq!(c.losses, 0, "no frame overran a slot: {c:?}");
    }
}
