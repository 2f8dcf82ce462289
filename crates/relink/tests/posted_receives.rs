//! Receives into buffers the application posts (`Node::post_receive`), as
//! an application relies on them:
//!
//! - messages fill the posted buffers in order, each receive ends once with
//!   its context, the message's sequence number and length; a message
//!   longer than its buffer is truncated and says so;
//! - messages that arrive with no buffer posted fill the next ones posted,
//!   in order; each message is copied once on the way in when a buffer
//!   waits for it;
//! - across device resets every message lands exactly once, in order;
//! - a posted buffer is in use (deregistration waits), and the session's
//!   end flushes what is still posted; node-wide output carries receives.

use std::time::Duration;

use relink::{
    Access, LocalRange, Memory, Output, ReceiveOutcome, Received, RegionId, RegisterError,
    SessionHandle, SessionOptions, State, SubmitError,
};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

const SLOT: u64 = 1024;

fn registered(sim: &mut Sim, len: usize) -> (Memory, RegionId) {
    let mem = sim.node(TARGET).alloc_memory(len).expect("memory");
    let id = sim
        .node(TARGET)
        .register(mem.clone(), Access::LOCAL_WRITE)
        .expect("registered");
    (mem, id)
}

fn buffer(region: RegionId, i: u64, len: u32) -> LocalRange {
    LocalRange {
        region,
        offset: i * SLOT,
        len,
    }
}

fn message(i: u64) -> Vec<u8> {
    let len = 100 + (i as usize * 37) % 900;
    (0..len).map(|b| (b as u8) ^ (i as u8)).collect()
}

/// Run until `n` receives of the target's session `t` ended.
fn received(sim: &mut Sim, t: SessionHandle, n: usize) -> Vec<Received> {
    let mut got = Vec::new();
    assert!(
        sim.run_until_cond(Duration::from_secs(20), |sim| {
            while let Some(r) = sim.node(TARGET).poll_received(t) {
                got.push(r);
            }
            got.len() >= n
        }),
        "{} of {n} receives ended",
        got.len()
    );
    got
}

/// Check that receive `r` is message `seq` (the workload's `message(seq)`)
/// in buffer `i` of `mem`.
fn check(r: &Received, mem: &Memory, region: RegionId, i: u64, seq: u64) {
    let want = message(seq);
    assert_eq!(r.context, 1000 + i, "buffer {i}: its context");
    assert_eq!(r.local, buffer(region, i, SLOT as u32));
    assert_eq!(
        r.outcome,
        ReceiveOutcome::Message {
            seq: relink::Seq(seq),
            len: want.len() as u32,
            truncated: false
        },
        "buffer {i}"
    );
    assert_eq!(
        mem.read_vec((i * SLOT) as usize, want.len())
            .expect("in bounds"),
        want,
        "buffer {i} holds message {seq}"
    );
}

#[test]
fn messages_fill_the_posted_buffers_in_order() {
    let (mut sim, s, t) = Sim::with_session(61);
    let (mem, reg) = registered(&mut sim, 16 * SLOT as usize);
    for i in 0..4 {
        sim.node(TARGET)
            .post_receive(t, buffer(reg, i, SLOT as u32), 1000 + i)
            .expect("posted");
    }
    for seq in 1..=6 {
        sim.node(INITIATOR).send(s, &message(seq)).expect("sent");
    }
    let got = received(&mut sim, t, 4);
    for (i, r) in got.iter().enumerate() {
        check(r, &mem, reg, i as u64, i as u64 + 1);
    }
    let copied_placed = sim
        .node(TARGET)
        .counters(t)
        .expect("session")
        .receive_copied_bytes;
    let placed: u64 = (1..=4).map(|i| message(i).len() as u64).sum();
    // Messages 5 and 6 found no buffer: they wait, and fill the next ones.
    sim.run_for(Duration::from_millis(10));
    assert!(sim.node(TARGET).poll_received(t).is_none());
    for i in 4..6 {
        sim.node(TARGET)
            .post_receive(t, buffer(reg, i, SLOT as u32), 1000 + i)
            .expect("posted");
    }
    let got = received(&mut sim, t, 2);
    for (k, r) in got.iter().enumerate() {
        check(r, &mem, reg, 4 + k as u64, 5 + k as u64);
    }
    assert!(
        sim.node(TARGET).poll_delivery(t).is_none(),
        "all in buffers"
    );
    let counters = sim.node(TARGET).counters(t).expect("session");
    assert!(
        copied_placed >= placed,
        "a placed message is copied once: {copied_placed} of {placed}"
    );
    let late: u64 = (5..=6).map(|i| message(i).len() as u64).sum();
    assert_eq!(
        counters.receive_copied_bytes,
        placed + 2 * late,
        "once for a message a buffer waited for, twice for one that waited for a buffer"
    );
}

#[test]
fn a_message_longer_than_its_buffer_is_truncated() {
    let (mut sim, s, t) = Sim::with_session(62);
    let (mem, reg) = registered(&mut sim, 4 * SLOT as usize);
    sim.node(TARGET)
        .post_receive(t, buffer(reg, 0, 10), 7)
        .expect("posted");
    sim.node(INITIATOR).send(s, &message(1)).expect("sent");
    let r = received(&mut sim, t, 1)[0];
    assert_eq!(
        r.outcome,
        ReceiveOutcome::Message {
            seq: relink::Seq(1),
            len: 10,
            truncated: true
        }
    );
    assert_eq!(mem.read_vec(0, 10).expect("in bounds"), message(1)[..10]);
    assert_eq!(
        mem.read_u64(10).expect("in bounds"),
        0,
        "nothing past the buffer"
    );
}

#[test]
fn every_message_lands_once_in_order_across_resets() {
    let (mut sim, s, t) = Sim::with_session(63);
    let n = 48u64;
    let (mem, reg) = registered(&mut sim, (n * SLOT) as usize);
    for i in 0..n {
        sim.node(TARGET)
            .post_receive(t, buffer(reg, i, SLOT as u32), 1000 + i)
            .expect("posted");
    }
    for (round, host) in [(0u64, TARGET), (1, INITIATOR)] {
        for seq in round * n / 2 + 1..=(round + 1) * n / 2 {
            sim.node(INITIATOR).send(s, &message(seq)).expect("sent");
        }
        sim.run_for(Duration::from_micros(200));
        let index = sim.host(host).index();
        sim.fabric().inject(Fault::Reset(index, "soft0".into()));
    }
    let got = received(&mut sim, t, n as usize);
    for (i, r) in got.iter().enumerate() {
        check(r, &mem, reg, i as u64, i as u64 + 1);
    }
    sim.run_for(Duration::from_millis(100));
    assert!(sim.node(TARGET).poll_received(t).is_none(), "no duplicate");
    assert!(sim.node(TARGET).poll_delivery(t).is_none());
    let counters = sim.node(INITIATOR).counters(s).expect("session");
    assert!(
        counters.losses >= 2 && counters.replayed > 0,
        "{counters:?}"
    );
}

#[test]
fn a_posted_buffer_is_in_use_until_the_session_ends_and_flushes_it() {
    let (mut sim, s, t) = Sim::with_session(64);
    let (_mem, reg) = registered(&mut sim, 4 * SLOT as usize);
    sim.node(TARGET)
        .post_receive(t, buffer(reg, 0, SLOT as u32), 1)
        .expect("posted");
    sim.node(TARGET)
        .post_receive(t, buffer(reg, 1, SLOT as u32), 2)
        .expect("posted");
    assert!(matches!(
        sim.node(TARGET).deregister(reg),
        Err(RegisterError::InUse { id, session }) if id == reg && session == t
    ));
    // Node-wide output carries the receive.
    sim.node(INITIATOR).send(s, b"one").expect("sent");
    let mut out = None;
    assert!(sim.run_until_cond(Duration::from_secs(5), |sim| {
        while let Some(o) = sim.node(TARGET).poll_output() {
            if let Output::Received { session, received } = o {
                out = Some((session, received));
            }
        }
        out.is_some()
    }));
    let (session, r) = out.expect("checked");
    assert_eq!((session, r.context), (t, 1));
    // Bad input.
    assert!(matches!(
        sim.node(TARGET).post_receive(t, buffer(reg, 4, 8), 3),
        Err(SubmitError::BadLocal(_))
    ));
    // The session ends: the second buffer is flushed, the memory free.
    sim.node(TARGET).close(t).expect("closed");
    let mut flushed = None;
    assert!(sim.run_until_cond(Duration::from_secs(5), |sim| {
        flushed = flushed.or_else(|| sim.node(TARGET).poll_received(t));
        flushed.is_some()
    }));
    let r = flushed.expect("checked");
    assert_eq!((r.context, r.outcome), (2, ReceiveOutcome::Flushed));
    assert!(matches!(
        sim.node(TARGET).post_receive(t, buffer(reg, 2, 8), 3),
        Err(SubmitError::Ended(State::Closed))
    ));
    sim.node(TARGET).deregister(reg).expect("free once flushed");
}

#[test]
fn a_shared_receive_queue_pool_serves_every_session_on_it() {
    use relink::{Path, SharedReceiveError, SharedReceiveOptions};
    let mut sim = Sim::new(65);
    let queue = sim
        .node(TARGET)
        .create_shared_receive(
            SharedReceiveOptions::builder()
                .depth(64)
                .max_message(4096)
                .build()
                .expect("valid"),
        )
        .expect("queue");
    let opts = SessionOptions::builder()
        .recv_slots(16)
        .shared_receive(queue)
        .build()
        .expect("valid");
    let addr = sim.target_addr(7471);
    sim.node(TARGET).listen(addr, opts).expect("listen");
    let mut ini = Vec::new();
    for _ in 0..2 {
        let s = sim
            .node(INITIATOR)
            .connect(
                vec![Path {
                    local: None,
                    peer: addr,
                }],
                SessionOptions::default(),
            )
            .expect("connect");
        ini.push(s);
    }
    assert!(sim.run_until_cond(Duration::from_secs(5), |sim| {
        ini.iter()
            .all(|&s| sim.node(INITIATOR).state(s) == Some(State::Established))
    }));
    let tgt: Vec<SessionHandle> = (0..2)
        .map(|_| sim.node(TARGET).accept().expect("accepted").session)
        .collect();
    let (mem, reg) = registered(&mut sim, 16 * SLOT as usize);
    for i in 0..5 {
        sim.node(TARGET)
            .post_shared_receive(queue, buffer(reg, i, SLOT as u32), 1000 + i)
            .expect("posted to the pool");
    }
    assert!(matches!(
        sim.node(TARGET).deregister(reg),
        Err(RegisterError::InSharedReceive { id, shared }) if id == reg && shared == queue
    ));
    // One session has a buffer of its own: it is taken first.
    sim.node(TARGET)
        .post_receive(tgt[0], buffer(reg, 10, SLOT as u32), 99)
        .expect("posted");
    assert_eq!(
        sim.node(TARGET).remove_shared_receive(queue),
        Err(SharedReceiveError::InUse)
    );
    for (k, &s) in ini.iter().enumerate() {
        for seq in 1..=2u64 {
            let mut m = message(seq);
            m[0] = k as u8;
            sim.node(INITIATOR).send(s, &m).expect("sent");
        }
    }
    // The initiator's sessions are accepted in connect order.
    let mut got: Vec<Vec<Received>> = vec![Vec::new(), Vec::new()];
    assert!(sim.run_until_cond(Duration::from_secs(5), |sim| {
        for (k, &t) in tgt.iter().enumerate() {
            while let Some(r) = sim.node(TARGET).poll_received(t) {
                got[k].push(r);
            }
        }
        got[0].len() + got[1].len() == 4
    }));
    let mut contexts = Vec::new();
    for (k, rs) in got.iter().enumerate() {
        assert_eq!(rs.len(), 2, "session {k}: both its messages");
        for (n, r) in rs.iter().enumerate() {
            let ReceiveOutcome::Message { seq, len, .. } = r.outcome else {
                panic!("{r:?}");
            };
            assert_eq!(seq, relink::Seq(n as u64 + 1), "in order per session");
            let bytes = mem
                .read_vec(r.local.offset as usize, len as usize)
                .expect("in bounds");
            assert_eq!(bytes[0] as usize, k, "its own session's message");
            contexts.push(r.context);
        }
    }
    assert_eq!(got[0][0].context, 99, "a session's own buffer first");
    contexts.sort_unstable();
    assert_eq!(
        contexts,
        vec![99, 1000, 1001, 1002],
        "then the pool's, in order"
    );
    let back = sim.node(TARGET).take_shared_receives(queue);
    assert_eq!(
        back.iter().map(|b| b.1).collect::<Vec<_>>(),
        vec![1003, 1004],
        "the pool's untaken buffers, in order"
    );
    sim.node(TARGET).deregister(reg).expect("free");
    // Only a registration's range goes to the pool.
    assert!(matches!(
        sim.node(TARGET)
            .post_shared_receive(queue, buffer(reg, 0, 8), 1),
        Err(SharedReceiveError::NotRegistered(_))
    ));
}
