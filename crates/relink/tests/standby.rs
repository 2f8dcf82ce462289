//! The hot standby (`Policy::standby`) as an application relies on it: a
//! session with two paths keeps a second connection up on the other
//! device pair; when the current device is lost under traffic — at the
//! initiator or at the target — the session continues on the standby with
//! no connection attempt, each message delivered exactly once and in
//! order, every operation completed once; a new standby comes up when a
//! device allows; losing the standby's device leaves the session alone;
//! an idle standby is kept alive by keepalives, and one whose peer went
//! silent is found by them, torn down — reported once to the application,
//! with its device, path and cause — and built again; closing a session
//! with a standby up frees everything.

use std::time::Duration;

use relink::{
    Access, BufferToken, Counters, DownCause, LocalRange, OpId, Outcome, Path, Policy,
    Provider as _, RegionId, RegionOptions, SessionEvent, SessionHandle, SessionOptions,
    StandbyLoss, State,
};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

const PORT: u16 = 7471;
const LOCAL: RegionId = RegionId(1);
const COUNTERS: RegionId = RegionId(2);

/// The keepalive period of the rigs that set one ([`Rig::with_keepalive`]).
const PERIOD: Duration = Duration::from_millis(1);

/// A policy with the knob `standby` and, if `keepalive` says, that
/// keepalive period (`Some(None)`: off; `None`: the default).
fn policy(standby: bool, keepalive: Option<Option<Duration>>) -> Policy {
    let mut p = Policy::builder().standby(standby);
    if let Some(k) = keepalive {
        p = p.keepalive(k);
    }
    p.build().expect("policy")
}

fn initiator_opts(standby: bool, keepalive: Option<Option<Duration>>) -> SessionOptions {
    SessionOptions::builder()
        .policy(policy(standby, keepalive))
        .region(RegionOptions::new(LOCAL, 4096, Access::LOCAL_WRITE))
        .build()
        .expect("valid options")
}

/// The target's options; `window`: its region exposed through a type 2
/// memory window.
fn target_opts(keepalive: Option<Option<Duration>>, window: bool) -> SessionOptions {
    SessionOptions::builder()
        .policy(policy(false, keepalive))
        .region(
            RegionOptions::new(COUNTERS, 64, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)
                .advertise(true)
                .window(window),
        )
        .build()
        .expect("valid options")
}

/// Two device pairs (`soft0`: 10.0.0.0/24, `soft1`: 10.0.1.0/24) and a
/// session with a path through each, established on the first; with
/// `standby`, its standby is up on the second at both ends.
struct Rig {
    sim: Sim,
    /// The session's paths: through `soft0`, then through `soft1`.
    paths: Vec<Path>,
    ini: SessionHandle,
    tgt: SessionHandle,
    /// Every event so far, per end.
    ini_events: Vec<SessionEvent>,
    tgt_events: Vec<SessionEvent>,
}

impl Rig {
    fn new(seed: u64, standby: bool) -> Rig {
        Rig::build(seed, standby, None, false)
    }

    /// [`Rig::new`] with a standby and the keepalive period `keepalive`
    /// at both ends (`None`: off).
    fn with_keepalive(seed: u64, keepalive: Option<Duration>) -> Rig {
        Rig::build(seed, true, Some(keepalive), false)
    }

    /// `keepalive`: the period at both ends (`Some(None)`: off), or the
    /// policies' default; `window`: the target's region behind a window.
    fn build(seed: u64, standby: bool, keepalive: Option<Option<Duration>>, window: bool) -> Rig {
        let mut sim = Sim::new(seed);
        let paths = sim.two_paths(PORT);
        let (ini_opts, tgt_opts) = (
            initiator_opts(standby, keepalive),
            target_opts(keepalive, window),
        );
        sim.node(TARGET)
            .listen("0.0.0.0:7471".parse().unwrap(), tgt_opts)
            .expect("listen");
        let ini = sim
            .node(INITIATOR)
            .connect(paths.clone(), ini_opts)
            .expect("connect");
        sim.run_for(Duration::from_millis(5));
        assert_eq!(sim.node(INITIATOR).state(ini), Some(State::Established));
        let tgt = sim.node(TARGET).accept().expect("accepted").session;
        let mut rig = Rig {
            sim,
            paths,
            ini,
            tgt,
            ini_events: Vec::new(),
            tgt_events: Vec::new(),
        };
        rig.take_events();
        rig
    }

    fn take_events(&mut self) {
        while let Some(e) = self.sim.node(INITIATOR).poll_event(self.ini) {
            self.ini_events.push(e);
        }
        while let Some(e) = self.sim.node(TARGET).poll_event(self.tgt) {
            self.tgt_events.push(e);
        }
    }

    fn counters(&mut self, host: usize) -> Counters {
        let h = if host == INITIATOR {
            self.ini
        } else {
            self.tgt
        };
        self.sim.node(host).counters(h).expect("a session")
    }

    fn device(&mut self, host: usize) -> String {
        let h = if host == INITIATOR {
            self.ini
        } else {
            self.tgt
        };
        self.sim.node(host).device(h).expect("connected").name
    }

    /// How many standbys came up so far at each end (their events).
    fn standbys_up(&self) -> (usize, usize) {
        let n = |ev: &[SessionEvent]| {
            ev.iter()
                .filter(|e| matches!(e, SessionEvent::StandbyUp { .. }))
                .count()
        };
        (n(&self.ini_events), n(&self.tgt_events))
    }

    /// The standbys lost at `host` so far (their `StandbyLost` events):
    /// the device, the path and the cause of each.
    fn standbys_lost(&self, host: usize) -> Vec<(String, Option<Path>, StandbyLoss)> {
        let ev = if host == INITIATOR {
            &self.ini_events
        } else {
            &self.tgt_events
        };
        ev.iter()
            .filter_map(|e| match e {
                SessionEvent::StandbyLost {
                    device,
                    path,
                    cause,
                } => Some((device.name.clone(), *path, *cause)),
                _ => None,
            })
            .collect()
    }

    /// The causes of the standbys lost at `host` so far.
    fn standby_loss_causes(&self, host: usize) -> Vec<StandbyLoss> {
        self.standbys_lost(host).into_iter().map(|l| l.2).collect()
    }

    /// The device of the last standby that came up at `host`.
    fn last_standby_device(&self, host: usize) -> Option<String> {
        let ev = if host == INITIATOR {
            &self.ini_events
        } else {
            &self.tgt_events
        };
        ev.iter().rev().find_map(|e| match e {
            SessionEvent::StandbyUp { device } => Some(device.name.clone()),
            _ => None,
        })
    }

    /// Messages numbered `range` and a FETCH_ADD after every fourth.
    fn traffic(&mut self, range: std::ops::Range<u32>) -> (Vec<OpId>, Vec<OpId>) {
        let (mut msgs, mut atomics) = (Vec::new(), Vec::new());
        for i in range {
            let node = self.sim.node(INITIATOR);
            msgs.push(node.send(self.ini, &i.to_be_bytes()).expect("send"));
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
                atomics.push(
                    node.fetch_add(self.ini, local, remote, 1)
                        .expect("fetch_add"),
                );
            }
        }
        (msgs, atomics)
    }

    /// Run until every op in `ops` completed; each one's outcome.
    fn complete(&mut self, ops: usize) -> Vec<(OpId, Outcome)> {
        let mut done = Vec::new();
        let ini = self.ini;
        let all = self.sim.run_until_cond(Duration::from_millis(200), |sim| {
            while let Some(c) = sim.node(INITIATOR).poll_completion(ini) {
                done.push((c.op, c.outcome));
            }
            done.len() >= ops
        });
        assert!(all, "{} of {ops} operations completed", done.len());
        done
    }

    fn delivered(&mut self) -> Vec<u32> {
        let mut out = Vec::new();
        while let Some((_, m)) = self.sim.node(TARGET).poll_delivery(self.tgt) {
            out.push(u32::from_be_bytes(m.try_into().expect("4 bytes")));
        }
        out
    }

    /// Remove `host`'s device `name` under traffic of 200 messages (and
    /// 50 FETCH_ADDs): every message completes once, successfully, and is
    /// delivered once, in order; every FETCH_ADD completes once
    /// (successfully, or `Indeterminate` if it was unconfirmed at the
    /// loss, as after any recovery).
    fn lose_device_under_traffic(&mut self, host: usize, name: &str) {
        let (msgs, atomics) = self.traffic(0..200);
        // Some in flight, some waiting.
        self.sim.run_for(Duration::from_micros(20));
        let h = self.sim.host(host).index();
        self.sim.fabric().inject(Fault::Remove(h, name.into()));
        let done = self.complete(msgs.len() + atomics.len());
        let mut ids: Vec<OpId> = done.iter().map(|(op, _)| *op).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), done.len(), "each operation completes once");
        for (op, outcome) in &done {
            if msgs.contains(op) {
                assert!(
                    matches!(outcome, Outcome::Success { .. }),
                    "{op:?}: {outcome:?}"
                );
            } else {
                assert!(
                    matches!(
                        outcome,
                        Outcome::Success { .. } | Outcome::Indeterminate { .. }
                    ),
                    "{op:?}: {outcome:?}"
                );
            }
        }
        self.sim.run_for(Duration::from_millis(1));
        assert_eq!(self.delivered(), (0..200).collect::<Vec<u32>>());
        self.take_events();
    }
}

#[test]
fn the_standby_takes_over_an_initiator_side_loss_with_no_attempt() {
    let mut rig = Rig::new(41, true);
    assert_eq!(rig.standbys_up(), (1, 1), "a standby at each end");
    assert_eq!(rig.last_standby_device(INITIATOR).as_deref(), Some("soft1"));
    assert_eq!(rig.device(INITIATOR), "soft0");
    let attempts = rig.counters(INITIATOR).attempts;
    let before = rig.ini_events.len();
    rig.lose_device_under_traffic(INITIATOR, "soft0");
    assert_eq!(rig.device(INITIATOR), "soft1");
    assert_eq!(rig.device(TARGET), "soft1");
    let c = rig.counters(INITIATOR);
    assert_eq!(c.attempts, attempts, "no connection attempt in the stall");
    assert_eq!((c.losses, c.failovers, c.resumes), (1, 1, 1));
    assert_eq!(rig.counters(TARGET).failovers, 1);
    let after = &rig.ini_events[before..];
    assert!(after
        .iter()
        .any(|e| matches!(e, SessionEvent::DeviceLost { .. })));
    assert!(after
        .iter()
        .any(|e| matches!(e, SessionEvent::Resumed { device: Some(d), .. } if d.name == "soft1")));
    assert!(
        !after
            .iter()
            .any(|e| matches!(e, SessionEvent::Recovering { .. })),
        "{after:?}"
    );
}

#[test]
fn a_promotion_is_recorded_phase_by_phase_at_both_ends() {
    let mut rig = Rig::new(43, true);
    rig.lose_device_under_traffic(INITIATOR, "soft0");
    // Everything sent before the loss was confirmed by the resync; the
    // first completion after it is this message's, at the initiator, and
    // its echo's at the target.
    let (msgs, _) = rig.traffic(200..201);
    rig.complete(msgs.len());
    let t = rig.tgt;
    assert_eq!(rig.delivered(), vec![200]);
    rig.sim.node(TARGET).send(t, b"echo").expect("echo");
    rig.sim.run_for(Duration::from_millis(1));
    for (host, h) in [(INITIATOR, rig.ini), (TARGET, rig.tgt)] {
        let tl = last_recovery(&mut rig, host, h);
        let phases = [Some(tl.lost), tl.promoted, tl.resynced, tl.first_completion];
        assert!(phases.iter().all(Option::is_some), "host {host}: {tl:?}");
        assert!(
            phases.windows(2).all(|w| w[0] <= w[1]),
            "host {host}: phases out of order: {tl:?}"
        );
        // The old connection, destroyed once the switch is over: with the
        // first completion on the standby.
        assert!(
            tl.released.is_some_and(|r| Some(r) >= tl.first_completion),
            "host {host}: {tl:?}"
        );
        assert_eq!(
            (tl.attempt, tl.connected, tl.resources),
            (None, None, None),
            "host {host}: a promotion makes no attempt: {tl:?}"
        );
    }
}

/// Session `h`'s last recovery on `host`.
fn last_recovery(rig: &mut Rig, host: usize, h: SessionHandle) -> relink::RecoveryTimeline {
    rig.sim
        .node(host)
        .session_info(h)
        .expect("a session")
        .last_recovery
        .unwrap_or_else(|| panic!("host {host}: no last recovery"))
}

#[test]
fn the_replaced_connection_goes_once_the_switch_is_over_or_after_its_hold() {
    let mut rig = Rig::new(45, true);
    let qps = |rig: &mut Rig, host: usize| rig.sim.host(host).object_counts().qps;
    assert_eq!(qps(&mut rig, TARGET), 2, "the connection and its standby");
    rig.lose_device_under_traffic(INITIATOR, "soft0");
    let (ini, tgt) = (rig.ini, rig.tgt);
    // The initiator completes an operation on the standby: its old
    // connection goes in that round.
    let (msgs, _) = rig.traffic(200..201);
    rig.complete(msgs.len());
    let tl = last_recovery(&mut rig, INITIATOR, ini);
    assert!(
        tl.first_completion.is_some() && tl.released == tl.first_completion,
        "{tl:?}"
    );
    // The target completed nothing of its own since: its old connection,
    // on a device still there, waits for the hold (100 ms from the
    // promotion) while the switch's traffic flows.
    let tl = last_recovery(&mut rig, TARGET, tgt);
    assert_eq!((tl.first_completion, tl.released), (None, None), "{tl:?}");
    assert_eq!(qps(&mut rig, TARGET), 2, "the old connection is kept");
    rig.sim.run_for(Duration::from_millis(100));
    let tl = last_recovery(&mut rig, TARGET, tgt);
    let promoted = tl.promoted.expect("promoted");
    assert!(
        tl.released
            .is_some_and(|r| r >= promoted + Duration::from_millis(100)),
        "{tl:?}"
    );
    assert_eq!(qps(&mut rig, TARGET), 1, "the old connection is destroyed");
}

#[test]
fn a_new_standby_comes_up_when_the_device_returns() {
    let mut rig = Rig::new(42, true);
    rig.lose_device_under_traffic(INITIATOR, "soft0");
    // The only other device is gone: no standby for now.
    assert_eq!(rig.standbys_up(), (1, 1));
    let ih = rig.sim.host(INITIATOR).index();
    rig.sim.fabric().inject(Fault::Readd(ih, "soft0".into()));
    rig.sim.run_for(Duration::from_millis(5));
    rig.take_events();
    assert_eq!(rig.standbys_up(), (2, 2));
    assert_eq!(rig.last_standby_device(INITIATOR).as_deref(), Some("soft0"));
    assert_eq!(rig.counters(INITIATOR).standbys, 2);
    // And it takes over in turn.
    rig.lose_device_under_traffic(INITIATOR, "soft1");
    assert_eq!(rig.device(INITIATOR), "soft0");
    let c = rig.counters(INITIATOR);
    assert_eq!((c.losses, c.failovers, c.attempts), (2, 2, 1));
}

#[test]
fn losing_the_standby_device_leaves_the_session_alone() {
    let mut rig = Rig::new(43, true);
    let ih = rig.sim.host(INITIATOR).index();
    rig.sim.fabric().inject(Fault::Remove(ih, "soft1".into()));
    let (msgs, atomics) = rig.traffic(0..100);
    let done = rig.complete(msgs.len() + atomics.len());
    assert!(done
        .iter()
        .all(|(_, o)| *o == Outcome::Success { replayed: false }));
    rig.take_events();
    // Reported once, with the standby's device, its path and the cause
    // (rdma_cm's device removal on its id comes first).
    assert_eq!(
        rig.standbys_lost(INITIATOR),
        vec![(
            "soft1".to_string(),
            Some(rig.paths[1]),
            StandbyLoss::Down(DownCause::CmDeviceRemoval)
        )]
    );
    assert!(!rig
        .ini_events
        .iter()
        .any(|e| matches!(e, SessionEvent::DeviceLost { .. })));
    assert_eq!(
        rig.sim.node(INITIATOR).state(rig.ini),
        Some(State::Established)
    );
    assert_eq!(rig.device(INITIATOR), "soft0");
    let c = rig.counters(INITIATOR);
    assert_eq!((c.losses, c.failovers, c.attempts), (0, 0, 1));
    rig.sim.run_for(Duration::from_millis(1));
    assert_eq!(rig.delivered(), (0..100).collect::<Vec<u32>>());
    // The target's half of the standby goes too (a target names no
    // path); a new one comes with the device.
    rig.take_events();
    let lost = rig.standbys_lost(TARGET);
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!((lost[0].0.as_str(), lost[0].1), ("soft1", None));
    assert!(matches!(lost[0].2, StandbyLoss::Down(_)), "{lost:?}");
    rig.sim.fabric().inject(Fault::Readd(ih, "soft1".into()));
    rig.sim.run_for(Duration::from_millis(5));
    rig.take_events();
    assert_eq!(rig.standbys_up(), (2, 2));
}

#[test]
fn each_end_sends_its_promote_and_advertisements_in_one_frame() {
    // An idle session: every message the switch carries is a control
    // message, and each end's Promote, advertisements and AdvertDone
    // share one SEND (the peer counts the ones behind the Promote as
    // packed), so a peer has the whole resync at once.
    let mut rig = Rig::new(45, true);
    let before = [rig.counters(INITIATOR), rig.counters(TARGET)];
    let ih = rig.sim.host(INITIATOR).index();
    rig.sim.fabric().inject(Fault::Remove(ih, "soft0".into()));
    rig.sim.run_for(Duration::from_millis(5));
    let after = [rig.counters(INITIATOR), rig.counters(TARGET)];
    for (me, peer) in [(0, 1), (1, 0)] {
        assert_eq!(after[me].failovers, before[me].failovers + 1);
        // The peer's advertisements (none from an end without an
        // advertised region) and its AdvertDone.
        let adverts = after[peer].adverts_sent - before[peer].adverts_sent;
        let behind = u64::from(adverts > 0) + 1;
        assert!(
            after[me].packed >= before[me].packed + behind,
            "end {me}: the peer's advertisements came in its Promote's frame: {:?}",
            after[me]
        );
    }
    for (host, h) in [(INITIATOR, rig.ini), (TARGET, rig.tgt)] {
        assert_eq!(rig.sim.node(host).state(h), Some(State::Established));
    }
}

#[test]
fn a_target_side_loss_promotes_the_standby_too() {
    let mut rig = Rig::new(44, true);
    let attempts = rig.counters(INITIATOR).attempts;
    rig.lose_device_under_traffic(TARGET, "soft0");
    assert_eq!(rig.device(TARGET), "soft1");
    assert_eq!(rig.device(INITIATOR), "soft1");
    assert_eq!(rig.counters(INITIATOR).attempts, attempts);
    assert_eq!(rig.counters(TARGET).failovers, 1);
    assert_eq!(rig.counters(INITIATOR).failovers, 1);
}

#[test]
fn without_the_knob_a_loss_reconnects() {
    let mut rig = Rig::new(45, false);
    assert_eq!(rig.standbys_up(), (0, 0));
    let attempts = rig.counters(INITIATOR).attempts;
    rig.lose_device_under_traffic(INITIATOR, "soft0");
    let c = rig.counters(INITIATOR);
    assert_eq!(c.failovers, 0);
    assert!(c.attempts > attempts);
}

/// Open a session (with or without a standby), run traffic, close it and
/// drain both ends: the nodes' footprints and the provider objects left
/// on both hosts.
fn closed(standby: bool) -> (relink::Footprint, relink::Footprint, usize) {
    let mut rig = Rig::new(46, standby);
    assert_eq!(rig.standbys_up(), if standby { (1, 1) } else { (0, 0) });
    let (msgs, atomics) = rig.traffic(0..20);
    rig.complete(msgs.len() + atomics.len());
    rig.sim.node(INITIATOR).close(rig.ini).expect("close");
    let (ini, tgt) = (rig.ini, rig.tgt);
    let closed = rig.sim.run_until_cond(Duration::from_millis(50), |sim| {
        sim.node(TARGET).state(tgt) == Some(State::Closed)
    });
    assert!(closed);
    while rig.sim.node(INITIATOR).poll_event(ini).is_some() {}
    while rig.sim.node(TARGET).poll_event(tgt).is_some() {}
    while rig.sim.node(TARGET).poll_delivery(tgt).is_some() {}
    rig.sim.run_for(Duration::from_millis(5));
    rig.sim.settle();
    (
        rig.sim.node(INITIATOR).footprint(),
        rig.sim.node(TARGET).footprint(),
        rig.sim.live_objects(),
    )
}

#[test]
fn closing_with_a_standby_up_frees_everything() {
    let with = closed(true);
    assert_eq!((with.0.sessions, with.0.cqs, with.0.cm_ids), (0, 0, 0));
    assert_eq!((with.1.sessions, with.1.cqs), (0, 0));
    // Nothing more left than by the same session without a standby: the
    // target's listener, the devices.
    assert_eq!(with, closed(false));
}

#[test]
fn a_silent_target_side_loss_promotes_the_standby() {
    // The target's device dies without telling the initiator: the
    // target's node sees its device go, promotes, and its Promote on the
    // standby moves the initiator too.
    let mut rig = Rig::new(47, true);
    let attempts = rig.counters(INITIATOR).attempts;
    let (msgs, atomics) = rig.traffic(0..100);
    rig.sim.run_for(Duration::from_micros(20));
    let th = rig.sim.host(TARGET).index();
    rig.sim
        .fabric()
        .inject(Fault::SilentRemove(th, "soft0".into()));
    let done = rig.complete(msgs.len() + atomics.len());
    assert!(done
        .iter()
        .filter(|(op, _)| msgs.contains(op))
        .all(|(_, o)| matches!(o, Outcome::Success { .. })));
    rig.sim.run_for(Duration::from_millis(1));
    assert_eq!(rig.delivered(), (0..100).collect::<Vec<u32>>());
    assert_eq!(rig.device(INITIATOR), "soft1");
    let c = rig.counters(INITIATOR);
    assert_eq!((c.failovers, c.attempts), (1, attempts));
    rig.take_events();
    assert!(rig.ini_events.iter().any(|e| matches!(
        e,
        SessionEvent::DeviceLost {
            cause: relink::DownCause::PeerFailover
        }
    )));
}

#[test]
fn a_drain_tears_the_standby_down_and_a_new_one_follows() {
    let mut rig = Rig::new(48, true);
    let old = rig.sim.node(INITIATOR).device(rig.ini).expect("connected");
    let report = rig.sim.node(INITIATOR).drain(&old);
    assert_eq!(report.moving, vec![rig.ini]);
    let (msgs, atomics) = rig.traffic(0..40);
    let done = rig.complete(msgs.len() + atomics.len());
    assert!(done
        .iter()
        .all(|(_, o)| *o == Outcome::Success { replayed: false }));
    rig.sim.run_for(Duration::from_millis(1));
    rig.take_events();
    assert_eq!(rig.device(INITIATOR), "soft1");
    assert_eq!(
        rig.standby_loss_causes(INITIATOR),
        vec![StandbyLoss::Released]
    );
    assert_eq!(rig.counters(INITIATOR).planned, 1);
    // The drained device carries nothing, not even a standby: none until
    // it is undrained.
    assert_eq!(rig.standbys_up(), (1, 1));
    rig.sim.node(INITIATOR).undrain(&old);
    rig.sim.run_for(Duration::from_millis(5));
    rig.take_events();
    assert_eq!(rig.standbys_up().0, 2);
    assert_eq!(rig.last_standby_device(INITIATOR).as_deref(), Some("soft0"));
    assert_eq!(rig.delivered(), (0..40).collect::<Vec<u32>>());
}

#[test]
fn a_suspended_session_has_no_standby_until_it_resumes() {
    let mut rig = Rig::new(49, true);
    rig.sim.node(INITIATOR).suspend(rig.ini).expect("suspend");
    rig.sim.run_for(Duration::from_millis(5));
    assert_eq!(
        rig.sim.node(INITIATOR).state(rig.ini),
        Some(State::Suspended)
    );
    rig.take_events();
    // The initiator lets it go; the target's half goes with it (its
    // disconnect may come before the initiator's quiesce request).
    assert_eq!(
        rig.standby_loss_causes(INITIATOR),
        vec![StandbyLoss::Released]
    );
    assert_eq!(rig.standbys_lost(TARGET).len(), 1);
    rig.sim.node(INITIATOR).resume(rig.ini).expect("resume");
    rig.sim.run_for(Duration::from_millis(5));
    assert_eq!(
        rig.sim.node(INITIATOR).state(rig.ini),
        Some(State::Established)
    );
    rig.take_events();
    assert_eq!(rig.standbys_up(), (2, 2));
    rig.lose_device_under_traffic(INITIATOR, "soft0");
    assert_eq!(rig.counters(INITIATOR).failovers, 1);
}

#[test]
fn an_idle_standby_with_keepalives_stays_up_and_still_takes_over() {
    let mut rig = Rig::with_keepalive(50, Some(PERIOD));
    assert_eq!(rig.standbys_up(), (1, 1));
    let before = (rig.counters(INITIATOR), rig.counters(TARGET));
    // Fifty periods of idleness.
    rig.sim.run_for(PERIOD * 50);
    rig.take_events();
    assert_eq!(rig.standbys_up(), (1, 1), "the same standby all along");
    assert_eq!(rig.standbys_lost(INITIATOR), vec![]);
    assert_eq!(rig.standbys_lost(TARGET), vec![]);
    for (host, old) in [(INITIATOR, before.0), (TARGET, before.1)] {
        let c = rig.counters(host);
        // A probe a period from each end, each answered: twice as many
        // keepalives each way as periods (a few may be in flight).
        let sent = c.standby_keepalives_sent - old.standby_keepalives_sent;
        let received = c.standby_keepalives_received - old.standby_keepalives_received;
        assert!((95..=105).contains(&sent), "{host}: {sent} sent");
        assert!(
            (95..=105).contains(&received),
            "{host}: {received} received"
        );
        assert_eq!((c.standbys_silent, c.losses, c.failovers), (0, 0, 0));
    }
    // The keepalives were the standby's only: nothing delivered, the
    // session on its first device.
    assert_eq!(rig.delivered(), Vec::<u32>::new());
    assert_eq!(rig.device(INITIATOR), "soft0");
    // And the kept-alive standby takes over a loss, exactly once.
    let attempts = rig.counters(INITIATOR).attempts;
    rig.lose_device_under_traffic(INITIATOR, "soft0");
    assert_eq!(rig.device(INITIATOR), "soft1");
    let c = rig.counters(INITIATOR);
    assert_eq!((c.failovers, c.attempts), (1, attempts));
}

/// Kill the target's standby device `soft1` silently (the target's node
/// sees it go and drops its half of the standby; the initiator is never
/// told) with keepalives of `keepalive` at both ends, then run
/// `periods` keepalive periods (of 1 ms with keepalives off).
fn standby_peer_silenced(seed: u64, keepalive: Option<Duration>, periods: u32) -> Rig {
    let mut rig = Rig::with_keepalive(seed, keepalive);
    assert_eq!(rig.standbys_up(), (1, 1));
    let th = rig.sim.host(TARGET).index();
    rig.sim
        .fabric()
        .inject(Fault::SilentRemove(th, "soft1".into()));
    rig.sim.run_for(keepalive.unwrap_or(PERIOD) * periods);
    rig.take_events();
    // The target's node saw its device go.
    assert_eq!(
        rig.standby_loss_causes(TARGET),
        vec![StandbyLoss::Down(DownCause::CmDeviceRemoval)]
    );
    rig
}

#[test]
fn a_standby_whose_peer_went_silent_is_found_by_keepalives_and_rebuilt() {
    let mut rig = standby_peer_silenced(51, Some(PERIOD), 3);
    // Two periods of silence at most after its last keepalive: within
    // three of the fault.
    assert_eq!(
        rig.standby_loss_causes(INITIATOR),
        vec![StandbyLoss::Silent],
        "{:?}",
        rig.ini_events
    );
    let c = rig.counters(INITIATOR);
    assert_eq!(c.standbys_silent, 1);
    // The current transport untouched.
    assert_eq!((c.losses, c.failovers, c.attempts), (0, 0, 1));
    assert_eq!(rig.device(INITIATOR), "soft0");
    let (msgs, atomics) = rig.traffic(0..40);
    let done = rig.complete(msgs.len() + atomics.len());
    assert!(done
        .iter()
        .all(|(_, o)| *o == Outcome::Success { replayed: false }));
    rig.sim.run_for(Duration::from_millis(1));
    assert_eq!(rig.delivered(), (0..40).collect::<Vec<u32>>());
    // The target's device back: a new standby, kept alive in turn.
    let th = rig.sim.host(TARGET).index();
    rig.sim.fabric().inject(Fault::Readd(th, "soft1".into()));
    rig.sim.run_for(Duration::from_millis(100));
    rig.take_events();
    assert_eq!(rig.standbys_up(), (2, 2));
    assert_eq!(rig.last_standby_device(INITIATOR).as_deref(), Some("soft1"));
    let received = rig.counters(INITIATOR).standby_keepalives_received;
    rig.sim.run_for(PERIOD * 10);
    assert!(rig.counters(INITIATOR).standby_keepalives_received > received);
    assert_eq!(rig.counters(INITIATOR).standbys_silent, 1);
    // It takes over a loss.
    rig.lose_device_under_traffic(INITIATOR, "soft0");
    assert_eq!(rig.device(INITIATOR), "soft1");
    assert_eq!(rig.counters(INITIATOR).failovers, 1);
}

#[test]
fn a_silenced_standby_is_an_event_once_with_its_path_and_cause() {
    // The target's standby device dies silently: the initiator hears no
    // keepalive on its half any more. The application sees that standby
    // go once — the device and path it was on, `Silent` — and no other
    // event of it while the initiator keeps trying to build a new standby
    // towards the dead device (attempts that never come up are no
    // standby lost); the current connection is untouched.
    let mut rig = standby_peer_silenced(53, Some(PERIOD), 3);
    let second = rig.paths[1];
    rig.sim.run_for(PERIOD * 200);
    rig.take_events();
    assert_eq!(
        rig.standbys_lost(INITIATOR),
        vec![("soft1".to_string(), Some(second), StandbyLoss::Silent)],
        "{:?}",
        rig.ini_events
    );
    let c = rig.counters(INITIATOR);
    assert_eq!(
        (c.standbys, c.standbys_silent, c.losses, c.failovers),
        (1, 1, 0, 0)
    );
    assert_eq!(rig.standbys_up(), (1, 1), "no standby up since");
    assert_eq!(
        rig.sim.node(INITIATOR).state(rig.ini),
        Some(State::Established)
    );
    assert_eq!(rig.device(INITIATOR), "soft0");
    // What a log line says.
    assert_eq!(
        StandbyLoss::Silent.to_string(),
        "silent for two keepalive periods"
    );
}

#[test]
fn without_keepalives_a_silenced_standby_goes_unnoticed() {
    // The same fault with keepalives off: the initiator keeps its half of
    // the standby up (it would find it dead only at promotion).
    let mut rig = standby_peer_silenced(51, None, 50);
    assert_eq!(rig.standbys_lost(INITIATOR), vec![]);
    let c = rig.counters(INITIATOR);
    assert_eq!(
        (c.standbys_silent, c.standby_keepalives_sent, c.standbys),
        (0, 0, 1)
    );
}

#[test]
fn a_standby_with_windows_stays_a_standby_until_a_loss() {
    // The target's region goes through a type 2 window: each transport,
    // the standby too, binds it when it comes up. That bind's completion
    // is the standby's own work, not the peer's promotion.
    let mut rig = Rig::build(52, true, None, true);
    assert_eq!(rig.standbys_up(), (1, 1));
    rig.sim.run_for(Duration::from_millis(5));
    rig.take_events();
    assert_eq!(rig.device(INITIATOR), "soft0");
    assert_eq!(rig.device(TARGET), "soft0");
    for host in [INITIATOR, TARGET] {
        let c = rig.counters(host);
        assert_eq!((c.losses, c.failovers), (0, 0), "{host}");
    }
    // The standby still takes over a loss, FETCH_ADDs through the window
    // included.
    rig.lose_device_under_traffic(INITIATOR, "soft0");
    assert_eq!(rig.device(TARGET), "soft1");
    assert_eq!(rig.counters(INITIATOR).failovers, 1);
}
