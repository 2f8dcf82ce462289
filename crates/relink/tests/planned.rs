//! Planned outages as an application relies on them: a suspended session
//! keeps everything — the peer's half waits, suspended, past any give-up
//! deadline, a device reset meanwhile costs nothing — and resumes with
//! each message delivered once; a drain moves sessions under traffic
//! (messages and atomics) off a device before it goes, with no operation
//! failed, replayed or `Indeterminate`, after which the device is removed
//! with nothing on it.

use std::time::Duration;

use relink::{
    Access, BufferToken, DeviceId, LocalRange, OpId, Outcome, Plan, Policy, RegionId,
    RegionOptions, ResumeError, SessionEvent, SessionHandle, SessionOptions, State, SuspendError,
};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

const PORT: u16 = 7471;
const LOCAL: RegionId = RegionId(1);
const COUNTERS: RegionId = RegionId(2);

fn initiator_opts(policy: Policy) -> SessionOptions {
    SessionOptions::builder()
        .policy(policy)
        .region(RegionOptions::new(LOCAL, 4096, Access::LOCAL_WRITE))
        .build()
        .expect("valid options")
}

fn target_opts() -> SessionOptions {
    SessionOptions::builder()
        .region(
            RegionOptions::new(
                COUNTERS,
                64,
                Access::LOCAL_WRITE | Access::REMOTE_ATOMIC | Access::REMOTE_WRITE,
            )
            .advertise(true),
        )
        .build()
        .expect("valid options")
}

/// A session on one path (the default devices).
fn one_path(seed: u64, policy: Policy) -> (Sim, SessionHandle, SessionHandle) {
    let mut sim = Sim::new(seed);
    let s = sim
        .open_session(PORT, initiator_opts(policy), target_opts())
        .expect("open a session");
    sim.run_for(Duration::from_millis(5));
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Established));
    let t = sim.node(TARGET).accept().expect("accepted").session;
    (sim, s, t)
}

/// A session with two paths: `soft0` of each host (10.0.0.0/24) and
/// `soft1` of each (10.0.1.0/24); it starts on the first.
fn two_paths(seed: u64) -> (Sim, SessionHandle, SessionHandle) {
    let mut sim = Sim::new(seed);
    let paths = sim.two_paths(PORT);
    sim.node(TARGET)
        .listen("0.0.0.0:7471".parse().unwrap(), target_opts())
        .expect("listen");
    let s = sim
        .node(INITIATOR)
        .connect(paths, initiator_opts(Policy::default()))
        .expect("connect");
    sim.run_for(Duration::from_millis(5));
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Established));
    let t = sim.node(TARGET).accept().expect("accepted").session;
    (sim, s, t)
}

fn device(sim: &mut Sim, host: usize, s: SessionHandle) -> DeviceId {
    sim.node(host).device(s).expect("connected")
}

/// Messages numbered `range`, and a FETCH_ADD of 1 on the peer's counter
/// after every fourth: the ops, in order.
fn traffic(sim: &mut Sim, s: SessionHandle, range: std::ops::Range<u32>) -> Vec<OpId> {
    let mut ops = Vec::new();
    for i in range {
        ops.push(sim.node(INITIATOR).send(s, &i.to_be_bytes()).expect("send"));
        if i % 4 == 3 {
            let local = LocalRange {
                region: LOCAL,
                offset: u64::from(i % 64) * 8,
                len: 8,
            };
            let remote = BufferToken {
                region: COUNTERS,
                offset: 0,
            };
            ops.push(
                sim.node(INITIATOR)
                    .fetch_add(s, local, remote, 1)
                    .expect("fetch_add"),
            );
        }
    }
    ops
}

/// Every completion so far: each a first-time success (never replayed,
/// never `Indeterminate`).
fn take_completions(sim: &mut Sim, s: SessionHandle, done: &mut Vec<OpId>) {
    while let Some(c) = sim.node(INITIATOR).poll_completion(s) {
        assert_eq!(
            c.outcome,
            Outcome::Success { replayed: false },
            "{:?}",
            c.op
        );
        done.push(c.op);
    }
}

fn delivered(sim: &mut Sim, t: SessionHandle, into: &mut Vec<u32>) {
    while let Some((_, m)) = sim.node(TARGET).poll_delivery(t) {
        into.push(u32::from_be_bytes(m.try_into().expect("4 bytes")));
    }
}

fn events(sim: &mut Sim, host: usize, s: SessionHandle) -> Vec<SessionEvent> {
    std::iter::from_fn(|| sim.node(host).poll_event(s)).collect()
}

fn counter(sim: &mut Sim, t: SessionHandle) -> u64 {
    let mem = sim.node(TARGET).region(t, COUNTERS).expect("region");
    let mut b = [0u8; 8];
    mem.read(0, &mut b).expect("read");
    u64::from_le_bytes(b)
}

#[test]
fn a_suspended_session_outlives_the_give_up_deadline_and_a_reset_then_resumes_with_nothing_lost() {
    let policy = Policy::builder()
        .ctrl_loss_tmo(Some(Duration::from_secs(2)))
        .build()
        .expect("policy");
    let (mut sim, s, t) = one_path(81, policy);
    let mut ops = traffic(&mut sim, s, 0..200);
    sim.node(INITIATOR).suspend(s).expect("suspend");
    assert_eq!(
        sim.node(INITIATOR).session_info(s).unwrap().planned,
        Some(Plan::Suspend)
    );
    // Submitted while quiescing: they wait.
    ops.extend(traffic(&mut sim, s, 200..220));
    sim.run_for(Duration::from_millis(20));
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Suspended));
    assert_eq!(sim.node(TARGET).state(t), Some(State::Suspended));

    // Longer than the give-up deadline, with the device reset meanwhile:
    // nothing happens to either half.
    ops.extend(traffic(&mut sim, s, 220..240));
    let h = sim.host(INITIATOR).index();
    sim.fabric().inject(Fault::Reset(h, "soft0".into()));
    sim.run_for(Duration::from_secs(30));
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Suspended));
    assert_eq!(sim.node(TARGET).state(t), Some(State::Suspended));

    sim.node(INITIATOR).resume(s).expect("resume");
    assert!(sim.run_until_cond(Duration::from_secs(5), |sim| {
        sim.node(INITIATOR).state(s) == Some(State::Established)
    }));
    sim.run_for(Duration::from_millis(50));

    let mut done = Vec::new();
    take_completions(&mut sim, s, &mut done);
    assert_eq!(done.len(), ops.len(), "every operation completed once");
    let mut got = Vec::new();
    delivered(&mut sim, t, &mut got);
    assert_eq!(got, (0..240).collect::<Vec<_>>(), "exactly once, in order");
    assert_eq!(counter(&mut sim, t), 60, "each FETCH_ADD took effect once");
    for (host, h) in [(INITIATOR, s), (TARGET, t)] {
        let c = sim.node(host).counters(h).unwrap();
        assert_eq!(c.losses, 0, "a suspend is not a loss");
        assert_eq!(c.planned, 1);
        assert_eq!(c.replayed, 0, "nothing to replay");
        let ev = events(&mut sim, host, h);
        assert!(ev.contains(&SessionEvent::Suspended), "{ev:?}");
        assert!(
            !ev.iter()
                .any(|e| matches!(e, SessionEvent::DeviceLost { .. })),
            "{ev:?}"
        );
    }
}

#[test]
fn suspend_is_the_initiators_and_needs_an_established_session() {
    let (mut sim, s, t) = one_path(82, Policy::default());
    assert_eq!(sim.node(TARGET).suspend(t), Err(SuspendError::NotInitiator));
    assert_eq!(
        sim.node(INITIATOR).resume(s),
        Err(ResumeError::NotAwaitingDecision(State::Established))
    );
    sim.node(INITIATOR).close(s).expect("close");
    assert_eq!(
        sim.node(INITIATOR).suspend(s),
        Err(SuspendError::Ended(State::Closed))
    );
}

#[test]
fn a_suspended_session_resumes_on_the_path_it_is_told() {
    let (mut sim, s, t) = two_paths(83);
    sim.node(INITIATOR).suspend(s).expect("suspend");
    sim.run_for(Duration::from_millis(20));
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Suspended));
    assert_eq!(
        sim.node(INITIATOR).resume_on(s, 5),
        Err(ResumeError::NoSuchPath { index: 5, paths: 2 })
    );
    sim.node(INITIATOR)
        .resume_on(s, 1)
        .expect("resume on path 1");
    assert!(sim.run_until_cond(Duration::from_secs(5), |sim| {
        sim.node(INITIATOR).state(s) == Some(State::Established)
    }));
    assert_eq!(device(&mut sim, INITIATOR, s).name, "soft1");
    assert_eq!(device(&mut sim, TARGET, t).name, "soft1");
}

/// Run traffic in rounds while `during` acts on the world; returns the
/// number of messages sent.
fn traffic_rounds(
    sim: &mut Sim,
    s: SessionHandle,
    rounds: u32,
    done: &mut Vec<OpId>,
    ops: &mut Vec<OpId>,
    mut during: impl FnMut(u32, &mut Sim),
) -> u32 {
    let per = 40;
    for r in 0..rounds {
        ops.extend(traffic(sim, s, r * per..(r + 1) * per));
        during(r, sim);
        sim.run_for(Duration::from_micros(200));
        take_completions(sim, s, done);
    }
    rounds * per
}

#[test]
fn a_drain_under_traffic_moves_the_session_before_the_device_goes_with_nothing_indeterminate() {
    let (mut sim, s, t) = two_paths(84);
    let old = device(&mut sim, INITIATOR, s);
    assert_eq!(old.name, "soft0");
    let ih = sim.host(INITIATOR).index();
    let (mut done, mut ops) = (Vec::new(), Vec::new());
    let sent = traffic_rounds(&mut sim, s, 30, &mut done, &mut ops, |r, sim| {
        if r == 10 {
            let report = sim.node(INITIATOR).drain(&old);
            assert_eq!(report.moving, vec![s]);
            assert!(report.blocked.is_empty());
        }
        if r == 20 {
            // Maintenance: the drained device goes, with nothing on it.
            assert!(sim.node(INITIATOR).sessions_on(&old).is_empty());
            sim.fabric().inject(Fault::Remove(ih, "soft0".into()));
        }
    });
    sim.run_for(Duration::from_millis(50));
    take_completions(&mut sim, s, &mut done);
    assert_eq!(done.len(), ops.len(), "every operation completed once");
    let mut got = Vec::new();
    delivered(&mut sim, t, &mut got);
    assert_eq!(got, (0..sent).collect::<Vec<_>>(), "exactly once, in order");
    assert_eq!(counter(&mut sim, t), u64::from(sent / 4));
    assert_eq!(device(&mut sim, INITIATOR, s).name, "soft1");
    for (host, h) in [(INITIATOR, s), (TARGET, t)] {
        let c = sim.node(host).counters(h).unwrap();
        assert_eq!(c.losses, 0, "a drain is not a loss");
        assert_eq!(c.planned, 1);
        assert_eq!(c.replayed, 0);
        let ev = events(&mut sim, host, h);
        assert!(
            ev.contains(&SessionEvent::Quiescing { plan: Plan::Drain }),
            "{ev:?}"
        );
    }
    assert!(sim.node(INITIATOR).draining().is_empty(), "removed: done");
}

#[test]
fn a_drain_at_the_target_asks_the_initiator_to_move() {
    let (mut sim, s, t) = two_paths(85);
    let old = device(&mut sim, TARGET, t);
    let (mut done, mut ops) = (Vec::new(), Vec::new());
    let sent = traffic_rounds(&mut sim, s, 20, &mut done, &mut ops, |r, sim| {
        if r == 5 {
            let report = sim.node(TARGET).drain(&old);
            assert_eq!(report.moving, vec![t]);
        }
    });
    sim.run_for(Duration::from_millis(50));
    take_completions(&mut sim, s, &mut done);
    assert_eq!(done.len(), ops.len());
    let mut got = Vec::new();
    delivered(&mut sim, t, &mut got);
    assert_eq!(got, (0..sent).collect::<Vec<_>>());
    assert!(sim.node(TARGET).sessions_on(&old).is_empty());
    assert_eq!(device(&mut sim, TARGET, t).name, "soft1");
    assert_eq!(sim.node(INITIATOR).counters(s).unwrap().losses, 0);
}

#[test]
fn a_drain_without_another_path_leaves_the_session_and_says_so() {
    let (mut sim, s, _t) = one_path(86, Policy::default());
    let dev = device(&mut sim, INITIATOR, s);
    let report = sim.node(INITIATOR).drain(&dev);
    assert!(report.moving.is_empty());
    assert_eq!(report.blocked, vec![s]);
    sim.run_for(Duration::from_millis(5));
    let ev = events(&mut sim, INITIATOR, s);
    assert!(ev.contains(&SessionEvent::DrainBlocked), "{ev:?}");
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Established));
    sim.node(INITIATOR).undrain(&dev);
    assert!(sim.node(INITIATOR).draining().is_empty());
}
