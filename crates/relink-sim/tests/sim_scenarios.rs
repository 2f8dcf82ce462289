//! The deterministic simulation suite: named scenarios on the in-process
//! soft fabric. Each checks the invariants of `relink_sim::workload`.

use std::time::Duration;

use relink::{DeviceMatch, OpError, Outcome, Policy, SessionEvent, State, WcStatus};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_sim::workload::{check_ended, options, Workload, WINDOW_A};
use relink_soft::Fault;

const PORT: u16 = 7471;

/// A session and its workload: WRITEs and READs scatter/gather; the odd
/// seeds' target takes its deliveries through posted receives.
fn start(seed: u64, policy: Policy) -> (Sim, Workload) {
    let (mut sim, mut w) = relink_sim::workload::start(seed, policy, PORT).expect("session up");
    w.scatter_gather();
    if seed % 2 == 1 {
        w.post_receives(sim.node(TARGET), seed);
    }
    (sim, w)
}

/// Submit a mixed batch: messages, writes, a read, an atomic, WRITEs with
/// immediate data, a flush.
fn batch(sim: &mut Sim, w: &mut Workload, n: usize) {
    for i in 0..n {
        let node = sim.node(INITIATOR);
        w.send(node);
        if i % 3 == 0 {
            w.write(node);
        }
        if i % 4 == 2 {
            w.write_imm(node);
        }
        if i % 8 == 7 {
            w.flush(node);
        }
        if i % 7 == 0 {
            w.fetch_add(node);
        }
        if i % 11 == 0 {
            w.read(node);
        }
    }
}

/// Traffic in rounds with `fault` injected after round `at`.
fn run_with(
    sim: &mut Sim,
    w: &mut Workload,
    rounds: usize,
    mut fault: impl FnMut(usize, &mut Sim),
) {
    for r in 0..rounds {
        batch(sim, w, 20);
        fault(r, sim);
        sim.run_for(Duration::from_micros(300));
        w.collect(sim);
    }
    drain(sim, w);
}

fn drain(sim: &mut Sim, w: &mut Workload) {
    let total = w.submitted();
    sim.run_until_cond(Duration::from_secs(30), |s| {
        w.collect(s);
        w.completed() >= total
    });
    sim.run_for(Duration::from_millis(10));
    w.collect(sim);
}

fn assert_ok(violations: Vec<String>) {
    assert!(
        violations.is_empty(),
        "invariants violated:\n  {}",
        violations.join("\n  ")
    );
}

fn events(sim: &mut Sim, node: usize, s: relink::SessionHandle) -> Vec<SessionEvent> {
    let mut v = Vec::new();
    while let Some(e) = sim.node(node).poll_event(s) {
        v.push(e);
    }
    v
}

fn resumes(ev: &[SessionEvent]) -> usize {
    ev.iter()
        .filter(|e| matches!(e, SessionEvent::Resumed { .. }))
        .count()
}

fn close_and_check_leaks(sim: &mut Sim, w: &mut Workload) {
    let s = w.session;
    sim.node(INITIATOR).close(s).unwrap();
    if let Some(t) = w.target {
        sim.node(TARGET).close(t).unwrap();
    }
    sim.run_for(Duration::from_millis(10));
    // The receives still posted end flushed; their registration goes.
    assert_ok(w.finish_receives(sim.node(TARGET)));
    // Only the listener's CM id remains.
    assert_eq!(sim.live_objects(), 1, "leaked provider objects after close");
}

fn reset(sim: &Sim, host: usize) {
    sim.fabric()
        .inject(Fault::Reset(sim.host(host).index(), "soft0".into()));
}

#[test]
fn reset_during_traffic() {
    let (mut sim, mut w) = start(1, Policy::default());
    run_with(&mut sim, &mut w, 10, |r, sim| {
        if r == 4 {
            reset(sim, INITIATOR)
        }
    });
    assert_ok(w.check_survived(&mut sim));
    assert_eq!(resumes(&events(&mut sim, INITIATOR, w.session)), 1);
    close_and_check_leaks(&mut sim, &mut w);
}

#[test]
fn target_device_reset_and_relisten() {
    let (mut sim, mut w) = start(2, Policy::default());
    run_with(&mut sim, &mut w, 10, |r, sim| {
        if r == 3 {
            reset(sim, TARGET)
        }
    });
    assert_ok(w.check_survived(&mut sim));
    close_and_check_leaks(&mut sim, &mut w);
}

#[test]
fn both_sides_reset_at_once() {
    let (mut sim, mut w) = start(3, Policy::default());
    run_with(&mut sim, &mut w, 10, |r, sim| {
        if r == 5 {
            reset(sim, INITIATOR);
            reset(sim, TARGET);
        }
    });
    assert_ok(w.check_survived(&mut sim));
    close_and_check_leaks(&mut sim, &mut w);
}

#[test]
fn unplug_then_replug() {
    let (mut sim, mut w) = start(4, Policy::default());
    let h = sim.host(INITIATOR).index();
    run_with(&mut sim, &mut w, 12, |r, sim| {
        if r == 3 {
            sim.fabric().inject(Fault::Remove(h, "soft0".into()));
        }
        if r == 6 {
            sim.fabric().inject(Fault::Readd(h, "soft0".into()));
        }
    });
    assert_ok(w.check_survived(&mut sim));
    let ev = events(&mut sim, INITIATOR, w.session);
    let down = ev.iter().find_map(|e| match e {
        SessionEvent::Resumed { downtime, .. } => Some(*downtime),
        _ => None,
    });
    assert!(
        down.unwrap() >= Duration::from_micros(900),
        "waited for the device: {down:?}"
    );
    close_and_check_leaks(&mut sim, &mut w);
}

#[test]
fn replacement_device_same_ip() {
    let (mut sim, mut w) = start(5, Policy::default());
    let h = sim.host(TARGET).index();
    run_with(&mut sim, &mut w, 10, |r, sim| {
        if r == 4 {
            sim.fabric()
                .inject(Fault::Replace(h, "soft0".into(), Some("soft9".into())));
        }
    });
    assert_ok(w.check_survived(&mut sim));
    close_and_check_leaks(&mut sim, &mut w);
}

#[test]
fn same_guid_policy_refuses_a_replacement() {
    let policy = Policy::builder()
        .device_match(DeviceMatch::SameGuid)
        .ctrl_loss_tmo(Some(Duration::from_millis(200)))
        .build()
        .expect("valid policy");
    let (mut sim, mut w) = start(6, policy);
    let h = sim.host(INITIATOR).index();
    run_with(&mut sim, &mut w, 6, |r, sim| {
        if r == 2 {
            sim.fabric().inject(Fault::Replace(h, "soft0".into(), None));
        }
    });
    sim.run_for(Duration::from_millis(300));
    w.collect(&mut sim);
    let s = w.session;
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Failed));
    assert!(events(&mut sim, INITIATOR, s).contains(&SessionEvent::GaveUp));
    assert_ok(w.check_common());
    assert_eq!(w.completed(), w.submitted(), "every op completed once");
}

#[test]
fn give_up_deadline() {
    let policy = Policy::builder()
        .ctrl_loss_tmo(Some(Duration::from_millis(50)))
        .build()
        .expect("valid policy");
    let (mut sim, mut w) = start(7, policy);
    let h = sim.host(TARGET).index();
    batch(&mut sim, &mut w, 10);
    sim.fabric().inject(Fault::Remove(h, "soft0".into()));
    batch(&mut sim, &mut w, 10);
    sim.run_for(Duration::from_millis(100));
    w.collect(&mut sim);
    let s = w.session;
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Failed));
    assert_eq!(w.completed(), w.submitted(), "every op completed once");
    let (_, failed, _) = w.outcome_counts();
    assert!(failed > 0);
    assert_ok(w.check_common());
    // The deadline is a deadline: it fired within the run, not after N tries.
    let gave_up_at = events(&mut sim, INITIATOR, s).iter().find_map(|e| match e {
        SessionEvent::Transition(t) if t.to == State::Failed => Some(t.at),
        _ => None,
    });
    assert!(gave_up_at.is_some());
}

#[test]
fn fast_fail_fails_queued_ops_while_reconnecting() {
    let policy = Policy::builder()
        .fast_io_fail_tmo(Some(Duration::from_millis(20)))
        .build()
        .expect("valid policy");
    let (mut sim, mut w) = start(8, policy);
    let h = sim.host(TARGET).index();
    sim.fabric().inject(Fault::Remove(h, "soft0".into()));
    batch(&mut sim, &mut w, 10);
    sim.run_for(Duration::from_millis(40));
    w.collect(&mut sim);
    let (_, failed, _) = w.outcome_counts();
    assert!(failed > 0, "queued operations failed fast");
    assert_eq!(w.completed(), w.submitted());
    assert!(
        w.errors().iter().all(|e| *e == OpError::FastFail),
        "{:?}",
        w.errors()
    );
    // Reconnection continues: the device returns, the session resumes
    // (after the attempt under way times out: nobody answered for the
    // address while the device was gone).
    sim.fabric().inject(Fault::Readd(h, "soft0".into()));
    let s = w.session;
    assert!(
        sim.run_until_cond(Duration::from_secs(15), |sim| sim.node(INITIATOR).state(s)
            == Some(State::Established))
    );
    // New operations work again.
    let before = w.submitted();
    batch(&mut sim, &mut w, 5);
    drain(&mut sim, &mut w);
    assert_eq!(w.completed(), w.submitted());
    assert!(w.submitted() > before);
    assert_ok(w.check_common());
}

#[test]
fn admin_disconnect_during_recovery() {
    let (mut sim, mut w) = start(9, Policy::default());
    let h = sim.host(TARGET).index();
    sim.fabric().inject(Fault::Remove(h, "soft0".into()));
    batch(&mut sim, &mut w, 10);
    sim.run_for(Duration::from_millis(5));
    let s = w.session;
    assert!(matches!(
        sim.node(INITIATOR).state(s),
        Some(State::Recovering | State::Reconnecting)
    ));
    sim.node(INITIATOR).close(s).unwrap();
    sim.run_for(Duration::from_millis(1));
    w.collect(&mut sim);
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Closed));
    assert_eq!(w.completed(), w.submitted());
    assert_ok(w.check_common());
    // Nothing more happens: recovery was cancelled. (The events stay
    // untaken meanwhile, so the node keeps the closed session.)
    sim.fabric().inject(Fault::Readd(h, "soft0".into()));
    sim.run_for(Duration::from_secs(5));
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Closed));
    assert_eq!(
        sim.node(INITIATOR).session_info(s).unwrap().next_timeout,
        None
    );
    let ev = events(&mut sim, INITIATOR, s);
    let closed = ev
        .iter()
        .position(|e| *e == SessionEvent::Disconnected)
        .expect("closed");
    assert_eq!(closed, ev.len() - 1, "no attempt after close: {ev:?}");
    // Drained: the node forgets it.
    sim.settle();
    assert_eq!(sim.node(INITIATOR).state(s), None);
}

#[test]
fn silent_peer_death_found_by_keepalive() {
    let policy = Policy::builder()
        .keepalive(Some(Duration::from_millis(10)))
        .build()
        .expect("valid policy");
    let (mut sim, mut w) = start(10, policy);
    let h = sim.host(TARGET).index();
    sim.fabric().inject(Fault::SilentRemove(h, "soft0".into()));
    sim.run_for(Duration::from_millis(30));
    let s = w.session;
    let ev = events(&mut sim, INITIATOR, s);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            SessionEvent::DeviceLost {
                cause: relink::DownCause::KeepaliveTimeout
            }
        )),
        "{ev:?}"
    );
    sim.fabric().inject(Fault::Readd(h, "soft0".into()));
    run_with(&mut sim, &mut w, 5, |_, _| {});
    assert_ok(w.check_survived(&mut sim));
}

#[test]
fn second_fault_during_resync() {
    let (mut sim, mut w) = start(11, Policy::default());
    run_with(&mut sim, &mut w, 10, |r, sim| {
        if r == 3 {
            reset(sim, INITIATOR);
            // Let the reconnection start, then hit the target mid-resync.
            sim.fabric().schedule(
                sim.now() + Duration::from_micros(30),
                Fault::Reset(sim.host(TARGET).index(), "soft0".into()),
            );
        }
    });
    assert_ok(w.check_survived(&mut sim));
}

#[test]
fn flapping_device() {
    let (mut sim, mut w) = start(12, Policy::default());
    let h = sim.host(INITIATOR).index();
    run_with(&mut sim, &mut w, 16, |r, sim| {
        if (2..12).contains(&r) {
            if r % 2 == 0 {
                sim.fabric().inject(Fault::Remove(h, "soft0".into()));
            } else {
                sim.fabric().inject(Fault::Readd(h, "soft0".into()));
            }
        }
    });
    assert_ok(w.check_survived(&mut sim));
}

#[test]
fn atomics_unconfirmed_are_indeterminate() {
    let (mut sim, mut w) = start(13, Policy::default());
    let h = sim.host(TARGET).index();
    // Atomics in flight when the target's device dies silently-ish: the
    // partition keeps responses from arriving.
    sim.fabric()
        .inject(Fault::Partition(sim.host(INITIATOR).index(), h));
    for _ in 0..5 {
        w.fetch_add(sim.node(INITIATOR));
    }
    sim.run_for(Duration::from_micros(50));
    sim.fabric().inject(Fault::Reset(h, "soft0".into()));
    sim.fabric()
        .inject(Fault::Heal(sim.host(INITIATOR).index(), h));
    drain(&mut sim, &mut w);
    let (ok, failed, ind) = w.outcome_counts();
    assert_eq!(failed, 0);
    assert_eq!(ok + ind, 5);
    assert!(ind > 0, "unconfirmed atomics must not be replayed silently");
    assert_ok(w.check_survived(&mut sim));
}

#[test]
fn a_stranger_peer_fails_queued_ops() {
    let (mut sim, mut w) = start(14, Policy::default());
    batch(&mut sim, &mut w, 5);
    drain(&mut sim, &mut w);
    // The target process "restarts": its node (and the session) are gone.
    let t = w.target.unwrap();
    sim.node(TARGET).close(t).unwrap();
    sim.fabric()
        .inject(Fault::Reset(sim.host(INITIATOR).index(), "soft0".into()));
    batch(&mut sim, &mut w, 5);
    sim.run_for(Duration::from_millis(100));
    w.collect(&mut sim);
    let s = w.session;
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Failed));
    assert!(events(&mut sim, INITIATOR, s)
        .iter()
        .any(|e| matches!(e, SessionEvent::PeerLost { .. })));
    assert_eq!(w.completed(), w.submitted());
    assert_ok(w.check_common());
}

#[test]
fn failover_to_a_second_device_and_back() {
    let mut sim = Sim::new(15);
    // A second device pair on another subnet.
    let paths = sim.two_paths(PORT);
    let ih = sim.host(INITIATOR).index();
    sim.node(TARGET)
        .listen(
            "0.0.0.0:7471".parse().unwrap(),
            options(TARGET, Policy::default()),
        )
        .unwrap();
    let s = sim
        .node(INITIATOR)
        .connect(paths, options(INITIATOR, Policy::default()))
        .unwrap();
    sim.run_for(Duration::from_millis(2));
    let mut w = Workload::new("A", 15, WINDOW_A, sim.node(INITIATOR), s, None);
    run_with(&mut sim, &mut w, 12, |r, sim| {
        if r == 3 {
            sim.fabric().inject(Fault::Remove(ih, "soft0".into()));
        }
        if r == 7 {
            sim.fabric().inject(Fault::Readd(ih, "soft0".into()));
        }
    });
    assert_ok(w.check_survived(&mut sim));
    let ev = events(&mut sim, INITIATOR, s);
    let devices: Vec<String> = ev
        .iter()
        .filter_map(|e| match e {
            SessionEvent::Resumed {
                device, downtime, ..
            } => {
                assert!(
                    *downtime < Duration::from_millis(1),
                    "failover is immediate: {downtime:?}"
                );
                device.as_ref().map(|d| d.name.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        devices,
        vec!["soft1".to_string()],
        "resumed on the second HCA"
    );
}

/// Somebody who knows a session id but not its secret tries to resume it:
/// the target refuses with `BadAuthenticator` and the session is untouched.
#[test]
fn a_resume_with_a_wrong_authenticator_is_refused() {
    use relink_core::auth::SessionSecret;
    use relink_core::wire::{ConnectData, RefuseReason, RejectData, Resume};
    use relink_core::{Epoch, Seq};
    use relink_fabric::{CmEventKind, ConnParams, Event, Provider, QpCaps, QpInit};

    let (mut sim, mut w) = start(16, Policy::default());
    batch(&mut sim, &mut w, 5);
    drain(&mut sim, &mut w);
    let s = w.session;
    let id = sim.node(INITIATOR).session_info(s).unwrap().id;
    let forged = ConnectData::Resume(Resume::sign(
        &SessionSecret::from_bytes([7; 32]),
        id,
        Epoch(1000),
        Seq(0),
    ))
    .to_vec();

    // A raw rdma_cm connect from a third host.
    let attacker = sim.add_host("attacker", "10.0.0.66/24", 99);
    let p = sim.host(attacker).clone();
    let cm = p.cm_create_id().unwrap();
    p.cm_resolve_addr(cm, None, sim.target_addr(PORT), Duration::from_secs(1))
        .unwrap();
    let wait = |sim: &mut Sim, want: &dyn Fn(&CmEventKind) -> bool| -> CmEventKind {
        for _ in 0..10_000 {
            while let Some(ev) = p.poll_event() {
                if let Event::Cm(c) = ev {
                    if want(&c.kind) {
                        return c.kind;
                    }
                }
            }
            sim.fabric().advance(Duration::from_micros(20));
            sim.node(TARGET).poll();
        }
        panic!("no CM event");
    };
    wait(&mut sim, &|k| *k == CmEventKind::AddrResolved);
    p.cm_resolve_route(cm, Duration::from_secs(1)).unwrap();
    wait(&mut sim, &|k| *k == CmEventKind::RouteResolved);
    let ctx = p.open_device(&p.cm_device(cm).unwrap()).unwrap();
    let pd = p.alloc_pd(ctx).unwrap();
    let cq = p.create_cq(ctx, 16).unwrap();
    let qp = p
        .create_qp(
            pd,
            QpInit {
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                caps: QpCaps::default(),
                sq_sig_all: false,
            },
        )
        .unwrap();
    p.cm_connect(cm, qp, ConnParams::default(), &forged)
        .unwrap();
    let kind = wait(&mut sim, &|k| {
        matches!(
            k,
            CmEventKind::Rejected { .. } | CmEventKind::Established { .. }
        )
    });
    let CmEventKind::Rejected { private_data, .. } = kind else {
        panic!("a forged resume was accepted: {kind:?}");
    };
    assert_eq!(
        RejectData::decode(&private_data).unwrap(),
        RejectData::Refused(relink_core::wire::Refused {
            reason: RefuseReason::BadAuthenticator
        })
    );
    // The real session carries on.
    batch(&mut sim, &mut w, 5);
    drain(&mut sim, &mut w);
    assert_ok(w.check_survived(&mut sim));
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Established));
}

/// A fast failure while messages, half of them from registered memory,
/// and WRITEs with immediate data were posted into a partition: they
/// complete `Indeterminate` (their staging memory is poisoned at once),
/// and the session resumes. Those whose memory is the application's again
/// — the messages from registered memory, the WRITEs with immediate data —
/// go as skips of their numbers: never read from memory again, never
/// delivered. The messages of bytes keep their payload and are replayed:
/// delivered once, after their completion. The later messages arrive
/// under the next numbers, each once and intact.
#[test]
fn fast_fail_skips_the_orphans_from_registered_memory() {
    let policy = Policy::builder()
        .fast_io_fail_tmo(Some(Duration::from_millis(2)))
        .build()
        .expect("valid policy");
    let (mut sim, mut w) = start(17, policy);
    w.allow_fast_fail();
    let (i, t) = (sim.host(INITIATOR).index(), sim.host(TARGET).index());
    batch(&mut sim, &mut w, 10);
    drain(&mut sim, &mut w);
    let from_memory = w.messages_from_memory();
    // Posted into the partition, then the initiator's device resets: the
    // messages never arrived, and the reconnection cannot get through.
    sim.fabric().inject(Fault::Partition(i, t));
    let mut orphans = Vec::new();
    for k in 0..8 {
        orphans.extend(w.send(sim.node(INITIATOR)));
        if k % 3 == 1 {
            orphans.extend(w.write_imm(sim.node(INITIATOR)));
        }
    }
    sim.run_for(Duration::from_micros(20));
    reset(&sim, INITIATOR);
    sim.run_for(Duration::from_millis(5));
    w.collect(&mut sim);
    assert_eq!(w.completed(), w.submitted(), "every op failed fast");
    // Each posted (an Indeterminate orphan), but a WRITE with immediate
    // data to a token the target never advertised (failed alone).
    let posted: Vec<_> = orphans
        .iter()
        .copied()
        .filter(|op| {
            let f = w.fate(*op).expect("sequenced");
            f.outcome != Some(Outcome::Failed(OpError::Remote(WcStatus::RemAccessErr)))
        })
        .collect();
    for op in &posted {
        assert_eq!(
            w.fate(*op).and_then(|f| f.outcome),
            Some(Outcome::Indeterminate { executed: None }),
            "{op}: an orphan"
        );
    }
    assert!(
        w.messages_from_memory() > from_memory,
        "some of them from registered memory"
    );
    sim.fabric().inject(Fault::Heal(i, t));
    let s = w.session;
    assert!(
        sim.run_until_cond(Duration::from_secs(15), |sim| sim.node(INITIATOR).state(s)
            == Some(State::Established))
    );
    run_with(&mut sim, &mut w, 5, |_, _| {});
    assert_ok(w.check_survived(&mut sim));
    let (mut replayed, mut skipped) = (0, 0);
    for op in &posted {
        let f = w.fate(*op).expect("sequenced");
        assert_eq!(
            f.delivered, !f.from_memory,
            "{op} ({f:?}): a message of bytes replayed, one from memory skipped"
        );
        replayed += usize::from(f.delivered);
        skipped += usize::from(!f.delivered);
    }
    assert!(
        replayed > 0 && skipped > 0,
        "{replayed} replayed, {skipped} skipped"
    );
    close_and_check_leaks(&mut sim, &mut w);
}

/// An admin close with a burst of messages (half from registered memory)
/// in flight: those posted complete `Indeterminate` and still leave ahead
/// of the goodbye — with the bytes of their submission, though the staging
/// memory of those from memory is poisoned at their completion — the rest
/// `Failed(Disconnected)`, never delivered.
#[test]
fn a_close_with_messages_from_memory_in_flight() {
    let (mut sim, mut w) = start(18, Policy::default());
    batch(&mut sim, &mut w, 5);
    drain(&mut sim, &mut w);
    let (_, before) = w.messages();
    let from_memory = w.messages_from_memory();
    w.burst(sim.node(INITIATOR), 60);
    assert!(w.messages_from_memory() > from_memory);
    let pending = w.pending_ids();
    sim.node(INITIATOR).close(w.session).unwrap();
    w.collect(&mut sim);
    sim.run_for(Duration::from_millis(10));
    w.collect(&mut sim);
    assert_eq!(w.completed(), w.submitted());
    assert_ok(w.check_common());
    let ended = check_ended(&w, &pending, OpError::Disconnected, "closed");
    assert!(ended.ok, "{}", ended.detail);
    let (_, after) = w.messages();
    assert!(
        after > before,
        "the posted messages left ahead of the goodbye"
    );
}
