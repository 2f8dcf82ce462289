//! WRITE with immediate data (`Node::write_imm`), as an application relies
//! on it:
//!
//! - the bytes land in the peer's memory and its application is told once,
//!   with the immediate data and where, in order with the messages (the
//!   notice comes after the bytes);
//! - with posted receives, the notice takes a buffer and writes nothing in
//!   it;
//! - across device resets every notice arrives exactly once, in order,
//!   with its bytes in place;
//! - a token the peer does not advertise fails the operation alone: the
//!   messages behind it are delivered.

use std::time::Duration;

use relink::{
    Access, BufferToken, Completion, LocalRange, OpClass, OpError, Outcome, ReceiveOutcome,
    RegionId, RegionOptions, SessionHandle, SessionOptions, WcStatus, Written,
};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

const REGION: RegionId = RegionId(1);
const LEN: u64 = 1 << 16;

fn opts() -> SessionOptions {
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    SessionOptions::builder()
        .regions(vec![RegionOptions::new(REGION, LEN, rw).advertise(true)])
        .build()
        .expect("valid options")
}

fn local(offset: u64, len: u32) -> LocalRange {
    LocalRange {
        region: REGION,
        offset,
        len,
    }
}

fn token(offset: u64) -> BufferToken {
    BufferToken {
        region: REGION,
        offset,
    }
}

fn pattern(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(13) ^ tag).collect()
}

fn completions(sim: &mut Sim, s: SessionHandle, n: usize) -> Vec<Completion> {
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
    done
}

#[test]
fn the_peer_is_told_once_in_order_with_the_messages() {
    let (mut sim, s, t) = Sim::with_session_options(71, opts(), opts());
    let src = sim.node(INITIATOR).region(s, REGION).expect("region");
    let bytes = pattern(1, 3000);
    src.write(0, &bytes).expect("in bounds");
    sim.node(INITIATOR).send(s, b"before").expect("sent");
    let op = sim
        .node(INITIATOR)
        .write_imm(s, local(0, 3000), token(8192), 0xfeed)
        .expect("submitted");
    sim.node(INITIATOR).send(s, b"after").expect("sent");
    let done = completions(&mut sim, s, 3);
    let c = done.iter().find(|c| c.op == op).expect("completed");
    assert_eq!(
        (c.outcome, c.class, c.len),
        (
            Outcome::Success { replayed: false },
            OpClass::WriteImm,
            3000
        )
    );
    let node = sim.node(TARGET);
    assert_eq!(node.poll_delivery(t).map(|d| d.1), Some(b"before".to_vec()));
    assert_eq!(node.poll_delivery(t), None, "the notice is next");
    let (seq, w) = node.poll_written(t).expect("the notice");
    assert_eq!(seq, relink::Seq(2));
    assert_eq!(
        w,
        Written {
            imm: 0xfeed,
            region: REGION,
            offset: 8192,
            len: 3000
        }
    );
    let dst = node.region(t, REGION).expect("region");
    assert_eq!(dst.read_vec(8192, 3000).expect("in bounds"), bytes);
    assert_eq!(node.poll_delivery(t).map(|d| d.1), Some(b"after".to_vec()));
    assert_eq!(node.poll_written(t), None);
}

#[test]
fn with_posted_receives_the_notice_takes_a_buffer() {
    let (mut sim, s, t) = Sim::with_session_options(72, opts(), opts());
    for i in 0..2 {
        sim.node(TARGET)
            .post_receive(t, local(32768 + i * 1024, 1024), 10 + i)
            .expect("posted");
    }
    sim.node(INITIATOR)
        .write_imm(s, local(0, 64), token(0), 7)
        .expect("submitted");
    sim.node(INITIATOR).send(s, b"msg").expect("sent");
    let mut got = Vec::new();
    assert!(sim.run_until_cond(Duration::from_secs(5), |sim| {
        while let Some(r) = sim.node(TARGET).poll_received(t) {
            got.push(r);
        }
        got.len() == 2
    }));
    assert_eq!(got[0].context, 10);
    assert!(matches!(
        got[0].outcome,
        ReceiveOutcome::Written { seq, written } if seq == relink::Seq(1) && written.imm == 7
    ));
    assert_eq!(got[1].context, 11);
    assert!(matches!(
        got[1].outcome,
        ReceiveOutcome::Message { seq, len: 3, truncated: false } if seq == relink::Seq(2)
    ));
}

#[test]
fn every_notice_arrives_once_in_order_across_resets() {
    let (mut sim, s, t) = Sim::with_session_options(73, opts(), opts());
    let src = sim.node(INITIATOR).region(s, REGION).expect("region");
    let n = 40u64;
    for (round, host) in [(0u64, TARGET), (1, INITIATOR)] {
        for i in round * n / 2..(round + 1) * n / 2 {
            src.write((i * 512) as usize, &pattern(i as u8, 512))
                .expect("in bounds");
            sim.node(INITIATOR)
                .write_imm(s, local(i * 512, 512), token(i * 512), i as u32)
                .expect("submitted");
        }
        sim.run_for(Duration::from_micros(100));
        let index = sim.host(host).index();
        sim.fabric().inject(Fault::Reset(index, "soft0".into()));
    }
    let mut seen = Vec::new();
    assert!(sim.run_until_cond(Duration::from_secs(20), |sim| {
        let node = sim.node(TARGET);
        while let Some((_, w)) = node.poll_written(t) {
            // The bytes are in place when the notice arrives.
            let dst = node.region(t, REGION).expect("region");
            let at = (w.offset) as usize;
            assert_eq!(
                dst.read_vec(at, 512).expect("in bounds"),
                pattern(w.imm as u8, 512),
                "notice {}: its bytes landed first",
                w.imm
            );
            seen.push(w.imm);
        }
        seen.len() >= n as usize
    }));
    completions(&mut sim, s, n as usize);
    sim.run_for(Duration::from_millis(100));
    assert_eq!(sim.node(TARGET).poll_written(t), None, "no duplicate");
    assert_eq!(
        seen,
        (0..n as u32).collect::<Vec<_>>(),
        "once each, in order"
    );
    let counters = sim.node(INITIATOR).counters(s).expect("session");
    assert!(
        counters.losses >= 2 && counters.replayed > 0,
        "{counters:?}"
    );
}

#[test]
fn a_token_the_peer_does_not_advertise_fails_alone() {
    let (mut sim, s, t) = Sim::with_session_options(74, opts(), opts());
    let op = sim
        .node(INITIATOR)
        .write_imm(s, local(0, 8), token(LEN), 1)
        .expect("submitted");
    sim.node(INITIATOR).send(s, b"still").expect("sent");
    let done = completions(&mut sim, s, 2);
    let c = done.iter().find(|c| c.op == op).expect("completed");
    assert_eq!(
        c.outcome,
        Outcome::Failed(OpError::Remote(WcStatus::RemAccessErr))
    );
    assert!(sim.run_until_cond(Duration::from_secs(5), |sim| {
        sim.node(TARGET).poll_delivery(t).is_some()
    }));
    assert_eq!(sim.node(TARGET).poll_written(t), None);
}
