//! Planned outages on real verbs: a drain of the initiator's device moves
//! the session to the second pair before `rdma link delete` (which then
//! has nothing to release), measured next to an unplanned failover in the
//! same run; a drain of the target's device (the initiator is asked to
//! move); a suspend across a delete/add of the initiator's device.
//!
//! The stall of a move is what the application sees: the longest gap
//! between consecutive successful completions from the event (the drain
//! call, or the start of the `rdma link delete`) until the session runs on
//! the new device, and the time from the event until it is established
//! there (its `Resumed` event).

use relink::{Counters, DeviceId};

use super::*;

/// How long the session may run on after its move before the stall's
/// window closes (later gaps are not the move's).
const SETTLE: Duration = Duration::from_millis(300);

/// What an application sees around one event, from the event on.
pub(super) struct Stall {
    from: Instant,
    last_ok: Instant,
    seen: usize,
    longest: Duration,
    /// When the session resumed (from the event), and on which device.
    moved: Option<(Duration, Option<String>)>,
    /// Operations the resumes posted again.
    replayed: u64,
    /// When the initiator reported the loss (its `DeviceLost`), and the
    /// successful completions by then.
    lost: Option<(Instant, usize)>,
    /// From the loss reported to the next successful completion.
    switch: Option<Duration>,
}

impl Stall {
    fn new(succeeded: usize) -> Stall {
        let now = Instant::now();
        Stall {
            from: now,
            last_ok: now,
            seen: succeeded,
            longest: Duration::ZERO,
            moved: None,
            replayed: 0,
            lost: None,
            switch: None,
        }
    }

    /// A `DeviceLost` event of the initiator, with `succeeded` successful
    /// completions so far (those collected with it came before it).
    pub(super) fn on_lost(&mut self, succeeded: usize) {
        if self.lost.is_none() {
            self.lost = Some((Instant::now(), succeeded));
        }
    }

    /// A `Resumed` event of the initiator.
    pub(super) fn on_resumed(&mut self, replayed: u64, device: Option<&DeviceId>) {
        if self.moved.is_none() {
            self.moved = Some((self.from.elapsed(), device.map(|d| d.name.clone())));
        }
        self.replayed += replayed;
    }

    /// The successful completions so far.
    pub(super) fn observe(&mut self, succeeded: usize) {
        if let (Some((at, n)), None) = (self.lost, self.switch) {
            if succeeded > n {
                self.switch = Some(at.elapsed());
            }
        }
        if succeeded > self.seen {
            let now = Instant::now();
            self.longest = self.longest.max(now - self.last_ok);
            self.last_ok = now;
            self.seen = succeeded;
        }
    }
}

/// One watched move, measured.
#[derive(Clone)]
pub(super) struct Moved {
    /// The longest gap between successful completions.
    pub(super) stall: Duration,
    /// From the event until the session was established on `device`.
    pub(super) established: Duration,
    /// From the loss the initiator reported (a `DeviceLost`; none for a
    /// planned move) to the first successful completion after it: the
    /// stall without the kernel's delay in reporting the loss.
    pub(super) switch: Option<Duration>,
    pub(super) device: String,
    pub(super) replayed: u64,
    pub(super) failed: usize,
    pub(super) indeterminate: usize,
}

impl Moved {
    pub(super) fn note(&self, what: &str) -> String {
        format!(
            "{what}: stall {:.1} ms, on {} after {:.1} ms, {} replayed, {} indeterminate, {} failed",
            self.stall.as_secs_f64() * 1e3,
            self.device,
            self.established.as_secs_f64() * 1e3,
            self.replayed,
            self.indeterminate,
            self.failed
        )
    }
}

impl Duo {
    /// Start watching: the event happens right after.
    pub(super) fn watch(&mut self) {
        self.stall = Some(Stall::new(self.w.succeeded()));
    }

    /// Run until the watched session resumed and completed operations on
    /// the new device for [`SETTLE`]; the figures of the move.
    pub(super) fn watched(&mut self, what: &str) -> Moved {
        let (_, failed0, ind0) = self.w.outcome_counts();
        let mut ok_at_move = None;
        let moved = self.pump_until(RESUME_TIMEOUT, |d| {
            let st = d.stall.as_ref().expect("watching");
            if ok_at_move.is_none() && st.moved.is_some() {
                ok_at_move = Some(d.w.succeeded());
            }
            ok_at_move.is_some_and(|n| d.w.succeeded() > n)
        });
        if !moved {
            panic!(
                "{what}: the session did not run on another device within {RESUME_TIMEOUT:?} \
                 (initiator state {:?}, device {:?})",
                self.a.state(self.s),
                self.a.device(self.s)
            );
        }
        self.pump(SETTLE);
        let st = self.stall.take().expect("watching");
        let (_, failed1, ind1) = self.w.outcome_counts();
        let (established, device) = st.moved.expect("moved");
        let m = Moved {
            stall: st.longest,
            established,
            switch: st.switch,
            device: device.unwrap_or_else(|| "?".into()),
            replayed: st.replayed,
            failed: failed1 - failed0,
            indeterminate: ind1 - ind0,
        };
        eprintln!("  [{:>8.3}s] {}", self.secs(), m.note(what));
        m
    }

    /// The longest gap between successful completions over `d` of plain
    /// traffic (no device event): what the workload's steady state looks
    /// like, the reference a move's stall is set against.
    pub(super) fn quiet_gap(&mut self, d: Duration) -> Duration {
        self.watch();
        self.pump(d);
        self.stall.take().expect("watching").longest
    }

    pub(super) fn counters_of(&self) -> (Counters, Counters) {
        let t = self.w.target.expect("the target's session");
        (
            self.a.counters(self.s).expect("the initiator's session"),
            self.b.counters(t).expect("the target's session"),
        )
    }

    /// Both halves took `planned` planned outages and `losses` losses.
    fn expect_counts(&mut self, when: &str, planned: u64, losses: u64) {
        let (a, b) = self.counters_of();
        for (who, c) in [("initiator", a), ("target", b)] {
            if c.planned != planned || c.losses != losses {
                self.problems.push(format!(
                    "{when}: the {who} counts {} planned outages and {} losses (expected {planned} and {losses})",
                    c.planned, c.losses
                ));
            }
        }
    }

    /// Events of either half that a planned outage must not cause.
    fn expect_no_loss_events(&mut self, when: &str, from: (usize, usize)) {
        let bad = |e: &&SessionEvent| {
            matches!(
                e,
                SessionEvent::DeviceLost { .. }
                    | SessionEvent::GaveUp
                    | SessionEvent::PeerLost { .. }
                    | SessionEvent::Disconnected
            )
        };
        for (who, evs) in [
            ("initiator", &self.events[from.0..]),
            ("target", &self.target_events[from.1..]),
        ] {
            if let Some(e) = evs.iter().find(bad) {
                self.problems.push(format!(
                    "{when}: the {who} saw {e:?}, a planned outage is no loss"
                ));
            }
        }
    }

    fn event_marks(&self) -> (usize, usize) {
        (self.events.len(), self.target_events.len())
    }
}

/// The RC QPs on `dev` (`rdma res show qp link DEV/1`): none once a
/// drain moved every session off it.
fn rc_qps_on(dev: &str) -> Result<Vec<String>, String> {
    let o = Command::new("rdma")
        .args(["res", "show", "qp", "link", &format!("{dev}/1")])
        .output()
        .map_err(|e| format!("cannot run rdma: {e}"))?;
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).trim().to_string());
    }
    Ok(String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains("type RC"))
        .map(|l| l.trim().to_string())
        .collect())
}

impl Duo {
    /// Once a drain finished, no RC QP is left on `dev`.
    fn expect_no_qp_on(&mut self, dev: &str, when: &str) {
        match rc_qps_on(dev) {
            Ok(qps) if qps.is_empty() => {}
            Ok(qps) => self
                .problems
                .push(format!("{when}: {dev} still holds RC QPs: {qps:?}")),
            Err(e) => eprintln!("  (cannot list the QPs on {dev}: {e})"),
        }
    }
}

pub(super) fn need_second_pair(e: &Topology) -> Result<(), String> {
    if e.second.is_some() {
        Ok(())
    } else {
        Err("needs RELINK_VERBS_SECOND_INITIATOR and RELINK_VERBS_SECOND_TARGET".into())
    }
}

/// The two pairs' paths (the first pair first) and the target's wildcard
/// listening address.
pub(super) fn two_pairs(env: &Topology) -> (SocketAddr, Vec<Path>) {
    let (a2, b2) = env.second.clone().expect("checked");
    let port = port();
    let paths = vec![
        Path {
            local: Some(env.init.addr),
            peer: SocketAddr::new(env.target.addr, port),
        },
        Path {
            local: Some(a2.addr),
            peer: SocketAddr::new(b2.addr, port),
        },
    ];
    let listen: SocketAddr = match env.target.addr {
        IpAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], port)),
        IpAddr::V6(_) => SocketAddr::from(([0u16; 8], port)),
    };
    (listen, paths)
}

/// The spread of a list of durations, in ms: p50, p90 and max.
fn spread(v: &[Duration]) -> String {
    let mut v = v.to_vec();
    v.sort();
    let ms = |p: f64| {
        let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
        v[i].as_secs_f64() * 1e3
    };
    if v.is_empty() {
        return "-".into();
    }
    format!(
        "p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms",
        ms(0.5),
        ms(0.9),
        ms(1.0)
    )
}

/// A drain of the initiator's device under traffic moves the session to
/// the second pair with nothing replayed, failed or `Indeterminate` and
/// no loss counted (one more planned outage on each half); the device
/// then carries nothing and `rdma link delete` returns at once. In the
/// same run, for comparison, the second pair's initiator device is
/// deleted unplanned (the first pair's is back) and the session fails
/// over back to it. Both moves are measured alike, `RELINK_VERBS_DRAIN_CYCLES`
/// times (default 5); the `RESULT drain_vs_failover` line has their
/// spread.
#[test]
fn drain_then_delete() {
    let env = env_or_skip!(need_second_pair);
    let cycles: u64 = env_or("RELINK_VERBS_DRAIN_CYCLES", 5);
    let (a2, _) = env.second.clone().expect("checked");
    let (listen, paths) = two_pairs(&env);
    let mut d = Duo::start(env.clone(), listen, paths);
    let (mut drains, mut failovers) = (Vec::new(), Vec::new());
    for cycle in 1..=cycles {
        d.pump(Duration::from_millis(300));
        let dev0 = d.a.device(d.s).expect("the session's device");
        assert_eq!(
            dev0.name, env.init.device,
            "cycle {cycle}: the session runs on the first pair"
        );
        let marks = d.event_marks();

        // Planned: drain, wait until the device carries nothing, delete it.
        d.watch();
        let report = d.a.drain(&dev0);
        eprintln!("  [{:>8.3}s] + drain {dev0}: {report:?}", d.secs());
        assert_eq!(report.moving, vec![d.s], "the drain moves the session");
        assert!(report.blocked.is_empty(), "{report:?}");
        let drain = d.watched(&format!("drain {cycle}"));
        let off = d.pump_until(RESUME_TIMEOUT, |d| d.a.sessions_on(&dev0).is_empty());
        assert!(off, "{dev0} still carries {:?}", d.a.sessions_on(&dev0));
        d.expect_no_qp_on(&env.init.device, &format!("cycle {cycle}, after the drain"));
        if drain.device != a2.device {
            d.problems.push(format!(
                "cycle {cycle}: the drain moved the session to {}, not to the second pair's {}",
                drain.device, a2.device
            ));
        }
        if (drain.replayed, drain.failed, drain.indeterminate) != (0, 0, 0) {
            d.problems.push(format!(
                "cycle {cycle}: the drain cost operations: {}",
                drain.note("drain")
            ));
        }
        d.delete(&env.init.device);
        d.pump(Duration::from_millis(300));
        let when = format!("cycle {cycle}, after the drain and the delete");
        d.expect_counts(&when, cycle, cycle - 1);
        d.expect_no_loss_events(&when, marks);
        d.add(&env.init.device, &env.init.netdev);
        d.mark = None;
        d.pump(Duration::from_millis(300));

        // Unplanned, for comparison: the second pair's device goes.
        d.watch();
        d.delete(&a2.device);
        let failover = d.watched(&format!("failover {cycle}"));
        if failover.device != env.init.device {
            d.problems.push(format!(
                "cycle {cycle}: the failover took the session to {}, not back to {}",
                failover.device, env.init.device
            ));
        }
        let losses = d.counters_of().0.losses;
        if losses != cycle {
            d.problems.push(format!(
                "cycle {cycle}: the initiator counts {losses} losses after the unplanned delete"
            ));
        }
        d.add(&a2.device, &a2.netdev);
        d.mark = None;
        drains.push(drain);
        failovers.push(failover);
    }
    d.pump(Duration::from_millis(300));
    let sum = |v: &[Moved]| {
        let stall: Vec<Duration> = v.iter().map(|m| m.stall).collect();
        let up: Vec<Duration> = v.iter().map(|m| m.established).collect();
        (
            spread(&stall),
            spread(&up),
            v.iter().map(|m| m.replayed).sum::<u64>(),
            v.iter().map(|m| m.indeterminate).sum::<usize>(),
        )
    };
    let (ds, du, dr, di) = sum(&drains);
    let (fs, fu, fr, fi) = sum(&failovers);
    println!(
        "RESULT drain_vs_failover: {cycles} cycles; drain: stall {ds}, established after {du}, \
         {dr} replayed, {di} indeterminate; failover: stall {fs}, established after {fu}, \
         {fr} replayed, {fi} indeterminate"
    );
    let p50 = |v: &[Moved], f: fn(&Moved) -> Duration| {
        let mut x: Vec<Duration> = v.iter().map(f).collect();
        x.sort();
        x.get((x.len().max(1) - 1) / 2)
            .map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    d.notes.push(format!(
        "{cycles} cycles, stall p50: drain {:.0} ms (up {:.0} ms, {dr} replayed, {di} indet.) vs failover {:.0} ms (up {:.0} ms, {fr} replayed, {fi} indet.)",
        p50(&drains, |m| m.stall),
        p50(&drains, |m| m.established),
        p50(&failovers, |m| m.stall),
        p50(&failovers, |m| m.established),
    ));
    d.finish("drain_then_delete");
}

/// A drain of the target's device on the target's node asks the initiator
/// to move off the target's address: the session moves to the second pair
/// as after the initiator's own drain (nothing replayed, failed or
/// `Indeterminate`, no loss), the target's device then carries nothing
/// and `rdma link delete` of it returns at once.
#[test]
fn drain_at_the_target_then_delete() {
    let env = env_or_skip!(need_second_pair);
    let (a2, b2) = env.second.clone().expect("checked");
    let (listen, paths) = two_pairs(&env);
    let mut d = Duo::start(env.clone(), listen, paths);
    d.pump(Duration::from_millis(500));
    let t = d.w.target.expect("the target's session");
    let tdev = d.b.device(t).expect("the target's device");
    assert_eq!(
        tdev.name, env.target.device,
        "the session starts on the first pair"
    );
    let marks = d.event_marks();

    d.watch();
    let report = d.b.drain(&tdev);
    eprintln!(
        "  [{:>8.3}s] + drain {tdev} at the target: {report:?}",
        d.secs()
    );
    assert_eq!(
        report.moving,
        vec![t],
        "the drain asks the initiator to move"
    );
    let drain = d.watched("target drain");
    let off = d.pump_until(RESUME_TIMEOUT, |d| d.b.sessions_on(&tdev).is_empty());
    assert!(off, "{tdev} still carries {:?}", d.b.sessions_on(&tdev));
    d.expect_no_qp_on(&env.target.device, "after the target's drain");
    let on = d.b.device(t).map(|x| x.name);
    if drain.device != a2.device || on.as_deref() != Some(b2.device.as_str()) {
        d.problems.push(format!(
            "the target's drain moved the session to {} / {on:?}, not to the second pair",
            drain.device
        ));
    }
    if (drain.replayed, drain.failed, drain.indeterminate) != (0, 0, 0) {
        d.problems.push(format!(
            "the drain cost operations: {}",
            drain.note("target drain")
        ));
    }
    d.delete(&env.target.device);
    d.pump(Duration::from_millis(300));
    d.expect_counts("after the target's drain and the delete", 1, 0);
    d.expect_no_loss_events("after the target's drain and the delete", marks);
    d.add(&env.target.device, &env.target.netdev);
    d.mark = None;
    d.pump(Duration::from_millis(500));
    d.notes.push(format!(
        "target drain stall {:.0} ms (up {:.0} ms, {} replayed, {} indet.)",
        drain.stall.as_secs_f64() * 1e3,
        drain.established.as_secs_f64() * 1e3,
        drain.replayed,
        drain.indeterminate,
    ));
    d.finish("drain_at_the_target_then_delete");
}

/// A suspended session outlives a delete and an add of the initiator's
/// device: both halves wait suspended (no attempt, no loss), operations
/// submitted meanwhile wait, and after `resume` everything completes
/// exactly once with nothing replayed (one planned outage on each half).
#[test]
fn suspend_across_delete_add() {
    let env = env_or_skip!(need_nothing);
    let (listen, paths) = main_pair(&env, port());
    let mut d = Duo::start(env.clone(), listen, paths);
    d.pump(Duration::from_millis(500));
    let t = d.w.target.expect("the target's session");
    let marks = d.event_marks();
    d.a.suspend(d.s).expect("suspend");
    eprintln!("  [{:>8.3}s] + suspend", d.secs());
    let parked = d.pump_until(RESUME_TIMEOUT, |d| {
        d.a.state(d.s) == Some(State::Suspended) && d.b.state(t) == Some(State::Suspended)
    });
    assert!(
        parked,
        "not suspended: initiator {:?}, target {:?}",
        d.a.state(d.s),
        d.b.state(t)
    );
    d.delete(&env.init.device);
    d.pump(Duration::from_millis(300));
    d.add(&env.init.device, &env.init.netdev);
    d.mark = None;
    d.pump(Duration::from_millis(500));
    for (who, state) in [("initiator", d.a.state(d.s)), ("target", d.b.state(t))] {
        if state != Some(State::Suspended) {
            d.problems.push(format!(
                "the {who} is {state:?} after the delete/add, not suspended"
            ));
        }
    }
    let waiting = d.w.submitted() - d.w.completed();
    d.mark();
    d.a.resume(d.s).expect("resume");
    eprintln!(
        "  [{:>8.3}s] + resume ({waiting} operations waiting)",
        d.secs()
    );
    let up = d.wait_resumed("resumed");
    d.pump(Duration::from_millis(500));
    d.expect_counts("after the resume", 1, 0);
    d.expect_no_loss_events("after the resume", marks);
    if d.counters_of().0.replayed != 0 {
        d.problems.push("the resume replayed operations".into());
    }
    d.notes.push(format!(
        "suspended across delete/add, {waiting} ops waited; resume to first completion {:.0} ms",
        up.as_secs_f64() * 1e3
    ));
    d.finish("suspend_across_delete_add");
}
