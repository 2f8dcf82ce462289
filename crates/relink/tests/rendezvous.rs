//! Messages the receiver reads itself (`SessionOptions::rendezvous`), as
//! an application relies on them:
//!
//! - a message of one range of registered memory the sender exposes for
//!   reading lands in the receiver's next posted buffer with no copy on
//!   either side (the counters say 0), in order with the messages that
//!   still come in their SEND (shorter ones, messages of bytes);
//! - a message longer than the receiver's `max_message` is read whole;
//!   one longer than its buffer is truncated and says so;
//! - a message waits for a posted buffer (and the messages behind it wait
//!   for it), then lands;
//! - across resets of either side every message lands once, in order,
//!   with its own bytes: the sender overwrites each message's memory at
//!   its completion, so a message read after its completion (delivery
//!   confirmed before the data landed) would show it.

use std::time::Duration;

use relink::{
    Access, LocalRange, Memory, OpId, ReceiveOutcome, Received, RegionId, Seq, SessionHandle,
    SessionOptions,
};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

/// Bytes per buffer on both sides.
const SLOT: u64 = 2048;
/// Messages at least this long are read by the target.
const MIN: u32 = 256;

/// The length of message `seq`: 40 to 1,999 bytes, about 1 in 7 below
/// [`MIN`] (those come in their SEND).
fn len_of(seq: u64) -> usize {
    40 + ((seq * 577) % 1960) as usize
}

/// Message `seq`'s bytes.
fn message(seq: u64) -> Vec<u8> {
    (0..len_of(seq))
        .map(|b| (b as u8).wrapping_mul(7) ^ (seq as u8))
        .collect()
}

/// A world whose target reads messages of [`MIN`] bytes or more, with
/// `slots` sending buffers registered on the initiator (readable by the
/// peer) and `slots` receive buffers registered on the target.
struct World {
    sim: Sim,
    s: SessionHandle,
    t: SessionHandle,
    send: Memory,
    send_id: RegionId,
    recv: Memory,
    recv_id: RegionId,
}

fn world(seed: u64, slots: u64, target_max_message: u32) -> World {
    let target = SessionOptions::builder()
        .max_message(target_max_message)
        .rendezvous(Some(MIN))
        .build()
        .expect("options");
    let (mut sim, s, t) = Sim::with_session_options(seed, SessionOptions::default(), target);
    let len = (slots * SLOT) as usize;
    let send = sim.node(INITIATOR).alloc_memory(len).expect("memory");
    let send_id = sim
        .node(INITIATOR)
        .register(send.clone(), Access::LOCAL_WRITE | Access::REMOTE_READ)
        .expect("registered");
    let recv = sim.node(TARGET).alloc_memory(len).expect("memory");
    let recv_id = sim
        .node(TARGET)
        .register(recv.clone(), Access::LOCAL_WRITE)
        .expect("registered");
    // The registration's advertisement reaches the peer.
    sim.run_for(Duration::from_millis(1));
    World {
        sim,
        s,
        t,
        send,
        send_id,
        recv,
        recv_id,
    }
}

impl World {
    /// Stage message `seq` in sending slot `slot` and send it from there.
    fn send_from(&mut self, seq: u64, slot: u64) -> OpId {
        let m = message(seq);
        self.send
            .write((slot * SLOT) as usize, &m)
            .expect("in bounds");
        let range = LocalRange {
            region: self.send_id,
            offset: slot * SLOT,
            len: m.len() as u32,
        };
        self.sim
            .node(INITIATOR)
            .send_from(self.s, range)
            .expect("sent")
    }

    /// Post receive buffer `i` (`len` bytes), context `1000 + i`.
    fn post(&mut self, i: u64, len: u32) {
        let local = LocalRange {
            region: self.recv_id,
            offset: i * SLOT,
            len,
        };
        self.sim
            .node(TARGET)
            .post_receive(self.t, local, 1000 + i)
            .expect("posted");
    }

    /// Run until `n` receives ended; the sender's completions are taken
    /// meanwhile, each overwriting its message's memory (`0xee`).
    fn received(&mut self, n: usize, slots: &mut Vec<(OpId, u64)>) -> Vec<Received> {
        let (s, t) = (self.s, self.t);
        let send = self.send.clone();
        let mut got = Vec::new();
        let ok = self.sim.run_until_cond(Duration::from_secs(30), |sim| {
            while let Some(c) = sim.node(INITIATOR).poll_completion(s) {
                assert!(c.outcome.is_success(), "{c:?}");
                let k = slots
                    .iter()
                    .position(|(op, _)| *op == c.op)
                    .expect("an operation of the test");
                let (_, slot) = slots.remove(k);
                // Gone from the sender's memory once completed.
                let _ = send.write((slot * SLOT) as usize, &[0xee; SLOT as usize]);
            }
            while let Some(r) = sim.node(TARGET).poll_received(t) {
                got.push(r);
            }
            got.len() >= n
        });
        assert!(ok, "{} of {n} receives ended", got.len());
        got
    }

    /// Receive `r` holds message `seq`, whole, in buffer `i`.
    fn check(&self, r: &Received, i: u64, seq: u64) {
        let want = message(seq);
        assert_eq!(r.context, 1000 + i, "message {seq}: buffer {i}");
        assert_eq!(
            r.outcome,
            ReceiveOutcome::Message {
                seq: Seq(seq),
                len: want.len() as u32,
                truncated: false
            },
            "message {seq}"
        );
        let got = self
            .recv
            .read_vec((i * SLOT) as usize, want.len())
            .expect("in bounds");
        assert!(got == want, "message {seq}: other bytes in buffer {i}");
    }
}

#[test]
fn messages_are_read_into_posted_buffers_with_no_copy_in_order_with_the_others() {
    let n = 24u64;
    let mut w = world(81, n, 4096);
    for i in 0..n {
        w.post(i, SLOT as u32);
    }
    let mut slots = Vec::new();
    let mut eager = 0u64;
    for seq in 1..=n {
        if seq % 5 == 0 {
            // A message of bytes: copied, in its SEND, in order.
            let op = w
                .sim
                .node(INITIATOR)
                .send(w.s, &message(seq))
                .expect("sent");
            // No memory of the test's to overwrite: a slot past the end.
            slots.push((op, n + 1));
            eager += len_of(seq) as u64;
        } else {
            let op = w.send_from(seq, seq - 1);
            slots.push((op, seq - 1));
            if (len_of(seq) as u32) < MIN {
                eager += len_of(seq) as u64;
            }
        }
    }
    let got = w.received(n as usize, &mut slots);
    for (i, r) in got.iter().enumerate() {
        w.check(r, i as u64, i as u64 + 1);
    }
    let target = w.sim.node(TARGET).counters(w.t).expect("session");
    // Once into its buffer, or twice when it arrived while a message ahead
    // of it was being read (it waits in the delivery queue meanwhile).
    assert!(
        (eager..=2 * eager).contains(&target.receive_copied_bytes),
        "only the messages that came in their SEND were copied: {} bytes of {eager}",
        target.receive_copied_bytes
    );
    let initiator = w.sim.node(INITIATOR).counters(w.s).expect("session");
    let bytes: u64 = (1..=n)
        .filter(|s| s % 5 == 0)
        .map(|s| len_of(s) as u64)
        .sum();
    assert_eq!(
        initiator.send_copied_bytes,
        2 * bytes,
        "the sender copies only its messages of bytes (journal and slot)"
    );
}

#[test]
fn a_message_longer_than_the_receivers_slots_is_read_and_one_longer_than_its_buffer_truncated() {
    let mut w = world(82, 4, 512);
    let mut slots = Vec::new();
    // 1,194 and 1,771 bytes: more than the target's 512-byte slots hold.
    assert!(len_of(2) > 512 && len_of(3) > 512);
    w.post(0, SLOT as u32);
    w.post(1, 100);
    slots.push((w.send_from(2, 0), 0));
    // Message 2 lands in buffer 0, message 3 in buffer 1 (truncated).
    let op = w.send_from(3, 1);
    slots.push((op, 1));
    let got = w.received(2, &mut slots);
    assert_eq!(got[0].context, 1000);
    assert_eq!(
        got[0].outcome,
        ReceiveOutcome::Message {
            seq: Seq(1),
            len: len_of(2) as u32,
            truncated: false
        }
    );
    assert_eq!(
        w.recv.read_vec(0, len_of(2)).expect("in bounds"),
        message(2)
    );
    assert_eq!(
        got[1].outcome,
        ReceiveOutcome::Message {
            seq: Seq(2),
            len: 100,
            truncated: true
        }
    );
    assert_eq!(
        w.recv.read_vec(SLOT as usize, 100).expect("in bounds"),
        message(3)[..100]
    );
}

#[test]
fn a_message_to_read_waits_for_a_buffer_and_the_ones_behind_it_wait_for_it() {
    let mut w = world(83, 4, 4096);
    let mut slots = Vec::new();
    // Message 1 is read (long), 2 comes in its SEND (a message of bytes),
    // 3 is read again.
    assert!(len_of(1) as u32 >= MIN && len_of(3) as u32 >= MIN);
    slots.push((w.send_from(1, 0), 0));
    let op = w.sim.node(INITIATOR).send(w.s, &message(2)).expect("sent");
    slots.push((op, 4));
    slots.push((w.send_from(3, 2), 2));
    w.sim.run_for(Duration::from_millis(20));
    assert!(w.sim.node(TARGET).poll_received(w.t).is_none());
    assert!(
        w.sim.node(TARGET).poll_delivery(w.t).is_none(),
        "the message in its SEND does not pass the one waiting to be read"
    );
    // Not confirmed: the sender still holds every message.
    assert!(w.sim.node(INITIATOR).poll_completion(w.s).is_none());
    for i in 0..3 {
        w.post(i, SLOT as u32);
    }
    let got = w.received(3, &mut slots);
    for (i, r) in got.iter().enumerate() {
        w.check(r, i as u64, i as u64 + 1);
    }
    let c = w.sim.node(TARGET).counters(w.t).expect("session");
    assert_eq!(c.fetched, 2, "messages 1 and 3 read");
    assert_eq!(
        c.receive_copied_bytes,
        2 * len_of(2) as u64,
        "message 2 copied into the queue behind the read, then into its buffer"
    );
}

#[test]
fn every_message_read_lands_once_in_order_across_resets_of_either_side() {
    let n = 60u64;
    let mut w = world(84, n, 4096);
    for i in 0..n {
        w.post(i, SLOT as u32);
    }
    let mut slots = Vec::new();
    for (round, host) in [(0u64, TARGET), (1, INITIATOR), (2, TARGET)] {
        for seq in round * n / 3 + 1..=(round + 1) * n / 3 {
            slots.push((w.send_from(seq, seq - 1), seq - 1));
        }
        // Mid-flight: some read, some being read, some not yet sent.
        w.sim.run_for(Duration::from_micros(40));
        let index = w.sim.host(host).index();
        w.sim.fabric().inject(Fault::Reset(index, "soft0".into()));
    }
    let got = w.received(n as usize, &mut slots);
    for (i, r) in got.iter().enumerate() {
        w.check(r, i as u64, i as u64 + 1);
    }
    w.sim.run_for(Duration::from_millis(100));
    assert!(
        w.sim.node(TARGET).poll_received(w.t).is_none(),
        "no duplicate"
    );
    assert!(slots.is_empty(), "every message completed");
    let initiator = w.sim.node(INITIATOR).counters(w.s).expect("session");
    assert!(initiator.losses >= 3, "{initiator:?}");
    let target = w.sim.node(TARGET).counters(w.t).expect("session");
    let long = (1..=n).filter(|&s| len_of(s) as u32 >= MIN).count() as u64;
    assert_eq!(target.fetched, long, "every long message read once");
    eprintln!(
        "reads given up with their transport and read again: {}",
        target.fetches_rewound
    );
    let short: u64 = (1..=n)
        .filter(|&s| (len_of(s) as u32) < MIN)
        .map(|s| len_of(s) as u64)
        .sum();
    assert!(
        target.fetches_rewound >= 1,
        "a reset caught a read in flight"
    );
    // Each short message is copied once or twice per time it arrived (a
    // rewind drops the ones that waited behind a read, and the replay
    // brings them again); a long one never.
    assert!(
        target.receive_copied_bytes <= 2 * short * (1 + target.fetches_rewound),
        "only short messages copied: {} bytes of {short}",
        target.receive_copied_bytes
    );
}
