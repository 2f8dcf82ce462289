//! Peers with different `max_message`: a message longer than the peer's
//! receive slots hold never costs the session its sequence.
//!
//! - Once the peer said its size (every connection's advertisement), a
//!   submit of a longer message is refused at once with the peer's limit.
//! - One submitted before (queued while connecting) completes
//!   `Failed(TooLargeForPeer)` when it would be posted; its sequence number
//!   goes as a skip, so the messages around it are delivered in order.

use std::time::Duration;

use relink::{OpError, Outcome, SessionOptions, State, SubmitError};
use relink_sim::sim::{Sim, INITIATOR, TARGET};

fn opts(max_message: u32) -> SessionOptions {
    SessionOptions::builder()
        .max_message(max_message)
        .build()
        .expect("valid options")
}

#[test]
fn a_message_too_long_for_the_peer_fails_alone() {
    let mut sim = Sim::new(51);
    let s = sim
        .open_session(7471, opts(4096), opts(512))
        .expect("open a session");
    // Queued before the connection: the peer's size is not known yet.
    let node = sim.node(INITIATOR);
    let before = node.send(s, b"before").expect("submitted");
    let long = node
        .send(s, &[7u8; 1000])
        .expect("submitted: size unknown yet");
    let after = node.send(s, b"after").expect("submitted");
    let mut done = Vec::new();
    assert!(sim.run_until_cond(Duration::from_secs(5), |sim| {
        while let Some(c) = sim.node(INITIATOR).poll_completion(s) {
            done.push(c);
        }
        done.len() == 3
    }));
    let outcome = |op| done.iter().find(|c| c.op == op).expect("completed").outcome;
    assert!(outcome(before).is_success());
    assert_eq!(
        outcome(long),
        Outcome::Failed(OpError::TooLargeForPeer),
        "never left"
    );
    assert!(outcome(after).is_success());
    let t = sim.node(TARGET).accept().expect("accepted").session;
    let mut got = Vec::new();
    while let Some((_, m)) = sim.node(TARGET).poll_delivery(t) {
        got.push(m);
    }
    assert_eq!(got, vec![b"before".to_vec(), b"after".to_vec()]);

    // Now the peer's size is known: refused at submit, with its limit.
    assert_eq!(
        sim.node(INITIATOR).send(s, &[7u8; 1000]),
        Err(SubmitError::TooLarge {
            len: 1000,
            max: 512
        })
    );
    sim.node(INITIATOR).send(s, &[1u8; 512]).expect("fits");
    assert!(sim.run_until_cond(Duration::from_secs(5), |sim| {
        sim.node(TARGET).poll_delivery(t).is_some()
    }));
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Established));
    assert_eq!(sim.node(INITIATOR).counters(s).expect("session").losses, 0);
}
