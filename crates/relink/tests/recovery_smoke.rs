//! End-to-end recovery on the in-process soft fabric: a device reset in the
//! middle of traffic, then exactly-once delivery and one completion per op.

use std::time::Duration;

use relink::{Path, SessionEvent, SessionOptions, State};
use relink_sim::sim::Sim;
use relink_soft::Fault;

#[test]
fn reset_during_traffic_delivers_every_message_once_in_order() {
    let (mut sim, s, t) = Sim::with_session(42);

    let mut ops = Vec::new();
    let mut received = Vec::new();
    for i in 0u32..2000 {
        ops.push(sim.node(0).send(s, &i.to_be_bytes()).unwrap());
        if i == 700 {
            sim.fabric()
                .inject(Fault::Reset(sim.host(0).index(), "soft0".into()));
        }
        if i == 1400 {
            sim.fabric()
                .inject(Fault::Reset(sim.host(1).index(), "soft0".into()));
        }
        if i % 50 == 0 {
            sim.run_for(Duration::from_micros(200));
            while let Some((_, m)) = sim.node(1).poll_delivery(t) {
                received.push(u32::from_be_bytes(m.try_into().unwrap()));
            }
        }
    }
    sim.run_for(Duration::from_secs(2));
    while let Some((_, m)) = sim.node(1).poll_delivery(t) {
        received.push(u32::from_be_bytes(m.try_into().unwrap()));
    }
    assert_eq!(
        received,
        (0..2000).collect::<Vec<_>>(),
        "exactly once, in order"
    );
    let mut done = Vec::new();
    while let Some(c) = sim.node(0).poll_completion(s) {
        assert!(c.outcome.is_success(), "{c:?}");
        done.push(c.op);
    }
    assert_eq!(done.len(), ops.len(), "one completion per operation");
    let mut resumed = 0;
    while let Some(e) = sim.node(0).poll_event(s) {
        if let SessionEvent::Resumed { downtime, .. } = e {
            resumed += 1;
            eprintln!("resumed after {downtime:?}");
        }
    }
    assert!(resumed >= 2, "two resets, {resumed} resumes");
    assert_eq!(sim.node(0).state(s), Some(State::Established));
}

#[test]
fn a_burst_larger_than_the_send_queue_waits_its_turn() {
    use relink::{Access, BufferToken, LocalRange, RegionId, RegionOptions};
    let region = |id, advertise| RegionOptions {
        id: RegionId(id),
        len: 1 << 16,
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        advertise,
    };
    let opts = |r| SessionOptions {
        max_one_sided: 8,
        regions: vec![r],
        ..SessionOptions::default()
    };
    let mut sim = Sim::new(43);
    let addr = sim.target_addr(7471);
    sim.node(1).listen(addr, opts(region(1, true))).unwrap();
    let s = sim
        .node(0)
        .connect(
            vec![Path {
                local: None,
                peer: addr,
            }],
            opts(region(2, false)),
        )
        .unwrap();
    sim.run_for(Duration::from_millis(5));
    let local = sim.node(0).region(s, RegionId(2)).unwrap();
    local.write(0, &[0xab; 4096]).unwrap();
    let mut ops = Vec::new();
    for i in 0..500u64 {
        ops.push(
            sim.node(0)
                .write(
                    s,
                    LocalRange {
                        region: RegionId(2),
                        offset: 0,
                        len: 64,
                    },
                    BufferToken {
                        region: RegionId(1),
                        offset: (i % 1000) * 64,
                    },
                )
                .unwrap(),
        );
    }
    sim.run_for(Duration::from_millis(50));
    let mut n = 0;
    while let Some(c) = sim.node(0).poll_completion(s) {
        assert!(c.outcome.is_success(), "{c:?}");
        n += 1;
    }
    assert_eq!(n, 500);
    assert_eq!(
        sim.node(0).state(s),
        Some(State::Established),
        "no spurious recovery"
    );
    assert_eq!(sim.node(0).counters(s).unwrap().losses, 0);
}
