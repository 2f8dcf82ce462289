//! Receiving into one reused buffer (`Node::poll_delivery_into`): the same
//! messages, exactly once and in order, as `Node::poll_delivery`, also
//! across a device reset (replayed duplicates dropped) and with lengths
//! that shrink and grow (a recycled buffer never shows an older message's
//! bytes).

use std::time::Duration;

use relink_sim::sim::Sim;
use relink_soft::Fault;

/// Message `i`: `i % 97` bytes, each derived from `i` and its position.
fn message(i: u32) -> Vec<u8> {
    (0..i % 97)
        .map(|k| (i.wrapping_mul(31) ^ k) as u8)
        .collect()
}

#[test]
fn receiving_into_one_buffer_delivers_every_message_once_in_order() {
    let (mut sim, s, t) = Sim::with_session(7);

    let count = 1200u32;
    let mut received: Vec<Vec<u8>> = Vec::new();
    let mut buf = Vec::new();
    let mut drain = |sim: &mut Sim, received: &mut Vec<Vec<u8>>, into: bool| {
        if into {
            while let Some(seq) = sim.node(1).poll_delivery_into(t, &mut buf) {
                assert_eq!(seq.0, received.len() as u64 + 1, "in order");
                received.push(buf.clone());
            }
        } else {
            while let Some((seq, m)) = sim.node(1).poll_delivery(t) {
                assert_eq!(seq.0, received.len() as u64 + 1, "in order");
                received.push(m);
            }
        }
    };
    for i in 0..count {
        sim.node(0).send(s, &message(i)).unwrap();
        if i == 500 {
            sim.fabric()
                .inject(Fault::Reset(sim.host(1).index(), "soft0".into()));
        }
        if i % 40 == 0 {
            sim.run_for(Duration::from_micros(200));
            // Mostly into the reused buffer, now and then the plain way.
            drain(&mut sim, &mut received, i % 200 != 0);
        }
    }
    sim.run_for(Duration::from_secs(2));
    drain(&mut sim, &mut received, true);
    assert_eq!(received.len(), count as usize, "every message once");
    for (i, m) in received.iter().enumerate() {
        assert_eq!(*m, message(i as u32), "message {i}");
    }
    let mut completed = 0;
    while let Some(c) = sim.node(0).poll_completion(s) {
        assert!(c.outcome.is_success(), "{c:?}");
        completed += 1;
    }
    assert_eq!(completed, count, "one completion per message");
    let resumes = sim.node(0).counters(s).expect("session").resumes;
    assert!(resumes >= 1, "the reset was recovered ({resumes} resumes)");
}
