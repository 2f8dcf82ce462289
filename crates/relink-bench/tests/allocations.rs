//! relink's own message path allocates nothing in steady traffic: once
//! warm, `Node::send` (the journal's copy; the node copies it and the
//! header straight into a send slot when it posts) and
//! `Node::poll_delivery_into` (the delivered copy) reuse the allocations of
//! earlier messages. Counted by a counting global allocator around those
//! calls only (the fabric's own allocations, inside `Node::poll`, are not
//! relink's); one test in this binary, so no other thread allocates
//! meanwhile.

use std::alloc::System;
use std::collections::VecDeque;

use relink_bench::session::{stamp_bytes, Workload};
use relink_bench::{Drive, LoopSpec, SimPair};
use relink_sim::sim::{INITIATOR, TARGET};
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn allocations() -> usize {
    GLOBAL.stats().allocations
}

#[test]
fn sending_and_receiving_into_a_buffer_allocate_nothing_once_warm() {
    let spec = LoopSpec::send(64, 64);
    let mut pair = SimPair::connect(11, &spec, Workload::Send);
    let (s, t) = (pair.session(), pair.target_session());
    let (warm_up, measured) = (5_000u64, 20_000u64);
    let mut payload = vec![0u8; spec.size];
    let mut buf = Vec::new();
    let mut outstanding = VecDeque::new();
    let (mut sent, mut received) = (0u64, 0u64);
    let (mut send_allocs, mut recv_allocs) = (0, 0);
    while received < warm_up + measured {
        let counting = received >= warm_up;
        let sim = pair.sim();
        while let Some(c) = sim.node(INITIATOR).poll_completion(s) {
            assert_eq!(outstanding.pop_front(), Some(c.op), "completions in order");
            assert!(c.outcome.is_success(), "{c:?}");
        }
        while outstanding.len() < spec.window && sent < warm_up + measured {
            stamp_bytes(&mut payload, sent);
            let before = allocations();
            let op = sim.node(INITIATOR).send(s, &payload).expect("send");
            if counting {
                send_allocs += allocations() - before;
            }
            outstanding.push_back(op);
            sent += 1;
        }
        let progress = sim.node(INITIATOR).poll() | sim.node(TARGET).poll();
        loop {
            let before = allocations();
            let got = sim.node(TARGET).poll_delivery_into(t, &mut buf);
            if counting {
                recv_allocs += allocations() - before;
            }
            let Some(seq) = got else { break };
            assert_eq!(seq.0, received + 1, "deliveries in order");
            assert_eq!(buf.len(), spec.size);
            received += 1;
        }
        if !progress {
            pair.wait(false);
        }
    }
    eprintln!(
        "over {measured} messages: {send_allocs} allocations in Node::send, \
         {recv_allocs} in Node::poll_delivery_into"
    );
    // Well below one in a hundred messages (a free list may run dry now
    // and then); before buffer reuse it was one per message on each side.
    assert!(
        send_allocs * 100 < measured as usize,
        "{send_allocs} in Node::send"
    );
    assert!(
        recv_allocs * 100 < measured as usize,
        "{recv_allocs} receiving"
    );
    pair.close();
}
