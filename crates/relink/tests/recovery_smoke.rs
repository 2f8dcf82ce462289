//! End-to-end recovery on the in-process soft fabric: a device reset in the
//! middle of traffic, then exactly-once delivery and one completion per op.
//! And what must not look like a loss: a burst of one-sided operations
//! larger than the send queue, a token the peer never advertised.

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
    let region = |id, advertise| {
        RegionOptions::new(
            RegionId(id),
            1 << 16,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .advertise(advertise)
    };
    let opts = |r| {
        SessionOptions::builder()
            .max_one_sided(8)
            .regions(vec![r])
            .build()
            .expect("valid session options")
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

/// A WRITE or READ whose token the peer never advertised (past the end of
/// its region, a region it does not have) completes once with the error the
/// peer's device would give it, without being posted, and disturbs nothing:
/// the caller is not blocked, the operations around it complete, the
/// connection stays up.
#[test]
fn a_token_the_peer_never_advertised_fails_alone() {
    use relink::{Access, BufferToken, LocalRange, OpError, Outcome, RegionId, RegionOptions};
    use relink_fabric::WcStatus;

    // A core that spins would hang the suite: run on a thread, wait 30 s.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let region = |id, advertise| {
            RegionOptions::new(
                RegionId(id),
                4096,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            )
            .advertise(advertise)
        };
        let opts = |r| {
            SessionOptions::builder()
                .regions(vec![r])
                .build()
                .expect("valid session options")
        };
        let mut sim = Sim::new(44);
        let s = sim
            .open_session(7471, opts(region(2, false)), opts(region(1, true)))
            .unwrap();
        sim.run_for(Duration::from_millis(5));
        assert_eq!(sim.node(0).state(s), Some(State::Established));
        let local = LocalRange {
            region: RegionId(2),
            offset: 0,
            len: 64,
        };
        let token = |region, offset| BufferToken {
            region: RegionId(region),
            offset,
        };
        let n = sim.node(0);
        let before = n.write(s, local, token(1, 0)).unwrap();
        let beyond = n.write(s, local, token(1, 4096 - 32)).unwrap();
        let unknown = n.read(s, local, token(9, 0)).unwrap();
        let after = n.write(s, local, token(1, 64)).unwrap();
        let message = n.send(s, b"still connected").unwrap();
        sim.run_for(Duration::from_millis(5));
        let mut outcomes = std::collections::BTreeMap::new();
        while let Some(c) = sim.node(0).poll_completion(s) {
            assert!(outcomes.insert(c.op, c.outcome).is_none(), "{c:?} twice");
        }
        let refused = Outcome::Failed(OpError::Remote(WcStatus::RemAccessErr));
        assert_eq!(outcomes.get(&beyond), Some(&refused));
        assert_eq!(outcomes.get(&unknown), Some(&refused));
        for op in [before, after, message] {
            assert!(outcomes.get(&op).is_some_and(|o| o.is_success()), "{op}");
        }
        assert_eq!(outcomes.len(), 5);
        assert_eq!(sim.node(0).state(s), Some(State::Established));
        assert_eq!(sim.node(0).counters(s).unwrap().losses, 0);
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("hung for 30 s"),
        Err(e) => panic!("the scenario failed: {e}"),
    }
}

/// Where an outage's time went: after a reset of each side's device, the
/// session's last recovery names every phase in order — on the initiator
/// the device coming back, address and route resolution, the resources,
/// the CM connection, the resync and the first completion; on the target
/// the accepted connection's phases (it resolves nothing); at both ends
/// the old connection released within the outage.
#[test]
fn the_last_recovery_records_each_phase_in_order() {
    let (mut sim, s, t) = Sim::with_session(44);
    assert_eq!(sim.node(0).session_info(s).unwrap().last_recovery, None);
    let traffic = |sim: &mut Sim, n: u32| {
        for i in 0..n {
            sim.node(0).send(s, &i.to_be_bytes()).unwrap();
        }
        sim.run_for(Duration::from_millis(500));
        while sim.node(1).poll_delivery(t).is_some() {}
        while sim.node(0).poll_completion(s).is_some() {}
    };
    traffic(&mut sim, 10);
    sim.fabric()
        .inject(Fault::Reset(sim.host(0).index(), "soft0".into()));
    traffic(&mut sim, 10);
    let tl = sim.node(0).session_info(s).unwrap().last_recovery.unwrap();
    let phases = [
        Some(tl.lost),
        tl.device_visible,
        tl.attempt,
        tl.addr_resolved,
        tl.route_resolved,
        tl.resources,
        tl.connected,
        tl.resynced,
        tl.first_completion,
    ];
    assert!(phases.iter().all(Option::is_some), "{tl:?}");
    assert!(phases.windows(2).all(|w| w[0] <= w[1]), "in order: {tl:?}");
    let target = sim.node(1).session_info(t).unwrap().last_recovery.unwrap();
    assert_eq!((target.addr_resolved, target.route_resolved), (None, None));
    let accepted = [
        Some(target.lost),
        target.attempt,
        target.resources,
        target.connected,
        target.resynced,
    ];
    assert!(accepted.iter().all(Option::is_some), "{target:?}");
    assert!(accepted.windows(2).all(|w| w[0] <= w[1]), "{target:?}");
    // Each end destroyed the lost connection's objects during the outage.
    for t in [&tl, &target] {
        let released = t.released.unwrap_or_else(|| panic!("not released: {t:?}"));
        assert!(released >= t.lost, "{t:?}");
        assert!(
            released <= t.first_completion.unwrap_or(t.resynced.unwrap()),
            "{t:?}"
        );
    }

    // The target's device now: the initiator saw no device come.
    sim.fabric()
        .inject(Fault::Reset(sim.host(1).index(), "soft0".into()));
    traffic(&mut sim, 10);
    let tl2 = sim.node(0).session_info(s).unwrap().last_recovery.unwrap();
    assert!(tl2.lost > tl.first_completion.unwrap(), "{tl2:?}");
    assert_eq!(tl2.device_visible, None, "{tl2:?}");
    assert!(tl2.first_completion.is_some(), "{tl2:?}");
}
