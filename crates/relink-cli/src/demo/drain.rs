//! The planned drain, played on the initiator's node, and A's stall
//! around every fault that hits the device carrying it.
//!
//! **The drain** (maintenance of the initiator's `soft0`):
//! [`Node::drain`](relink::Node::drain) of the device, whose answer says
//! which sessions move (A and C, each to its other path) and which are
//! blocked (B: one path only, a drain cannot move it). Once
//! [`Node::sessions_on`](relink::Node::sessions_on) lists only the blocked
//! sessions (checked after every drain of events) the device is unplugged
//! for its maintenance — B is lost with it and recovers as after an
//! unplanned fault — and at [`Timing::maintenance`] it is re-plugged and
//! undrained if it is still on the drain list (a removed device leaves it
//! by itself). When the drain's window closes, what each moved session
//! went through in it is recorded in the [`DrainLog`]: its counters and
//! outcomes against those at the call.
//!
//! **The stall**: from the start of a fault that hits A's device, the
//! longest gap between A's consecutive successful completions until its
//! first completion after its first resume. While it is watched the run
//! loop ticks every [`FINE_TICK`] (and the workload is topped up as
//! often), so that completions are dated to the microsecond.
//!
//! [`Timing::maintenance`]: super::faults::Timing::maintenance

use std::io;
use std::time::Duration;

use relink::{Counters, Plan, SessionEvent, SessionHandle};
use relink_fabric::{DeviceId, Provider as _, Timestamp};
use relink_sim::sim::INITIATOR;
use relink_sim::workload::{Problem, Workload};
use relink_soft::Fault;

use super::drain_report::{DrainLog, Drained};
use super::driver::Driver;
use super::faults::{FaultKind, Side};
use super::report::{self, Marker, MarkerKind};
use super::world;

/// The run loop's tick while a stall is watched or a drain is under way.
pub(super) const FINE_TICK: Duration = Duration::from_micros(1);
/// The fine ticks last at most this long from the fault's start.
const FINE_FOR: Duration = Duration::from_millis(5);

/// A's stall being watched in one fault's window.
pub(super) struct StallWatch {
    /// The fault's window.
    window: usize,
    /// The fault's start.
    from: Timestamp,
    /// A's first `Resumed` (initiator) in the window.
    resumed_at: Option<Timestamp>,
}

impl StallWatch {
    /// The fault window it watches.
    pub(super) fn window(&self) -> usize {
        self.window
    }
}

/// A session the drain must move, as it was at the call.
struct Mover {
    /// Index into the log's sessions.
    name: &'static str,
    /// 0 (A), 1 (B) or 2 (C).
    index: usize,
    counters: Counters,
    indeterminate: u64,
    holds: usize,
}

/// The drain under way, and its log.
pub(super) struct DrainState {
    /// The drain's fault window.
    window: usize,
    device: DeviceId,
    at: Timestamp,
    blocked: Vec<SessionHandle>,
    /// The device was unplugged, or the unplug was given up.
    unplug_done: bool,
    movers: Vec<Mover>,
    /// `Quiescing { plan: Drain }` and `Resumed` events of each
    /// initiator (A, B, C) in the window.
    quiescing: [u64; 3],
    resumes: [u64; 3],
    /// The window closed: the log is final.
    closed: bool,
    pub(super) log: DrainLog,
}

/// Operations of `w` that completed `Indeterminate`.
fn indeterminate(w: &Workload) -> u64 {
    w.tally.values().map(|t| t.executed + t.unknown).sum()
}

impl Driver<'_> {
    /// The initiator's handle of session `i` (0 A, 1 B, 2 C) and its name.
    fn session(&self, i: usize) -> (SessionHandle, &'static str) {
        match i {
            0 => (self.streams[0].session, "A"),
            1 => (self.streams[1].session, "B"),
            _ => (self.c.stream.session, "C"),
        }
    }

    fn workload(&self, i: usize) -> &Workload {
        match i {
            0 | 1 => &self.streams[i],
            _ => &self.c.stream,
        }
    }

    fn name_of(&self, h: SessionHandle) -> &'static str {
        (0..3)
            .map(|i| self.session(i))
            .find(|(s, _)| *s == h)
            .map_or("?", |(_, n)| n)
    }

    /// Whether the run loop ticks finely: a stall is watched or a drain
    /// waits to unplug its device, within [`FINE_FOR`] of its start.
    pub(super) fn fine_ticks(&self) -> bool {
        let now = self.sim.now();
        let watched = self.watch.as_ref().is_some_and(|w| now < w.from + FINE_FOR);
        let draining = self
            .planned
            .as_ref()
            .is_some_and(|d| !d.unplug_done && now < d.at + FINE_FOR);
        watched || draining
    }

    /// A fault started in `window` on `dev`: watch A's stall if the
    /// device carries A.
    pub(super) fn watch_stall(&mut self, window: usize, dev: Option<&(Side, String)>) {
        self.watch = None;
        let Some((side, name)) = dev else {
            return;
        };
        let h = match side {
            Side::Initiator => self.streams[0].session,
            Side::Target => self.streams[0].target_session(),
        };
        if self.device_of(*side, h).is_some_and(|d| d.0.name == *name) {
            self.watch = Some(StallWatch {
                window,
                from: self.sim.now(),
                resumed_at: None,
            });
        }
    }

    /// An event of an initiator's session `i` (0 A, 1 B, 2 C), dated
    /// `at`: the stall watch and the drain's counts take what they need.
    pub(super) fn note_planned(&mut self, i: usize, at: Timestamp, ev: &SessionEvent) {
        let resumed = matches!(ev, SessionEvent::Resumed { .. });
        if i == 0 && resumed {
            if let Some(w) = self.watch.as_mut().filter(|w| w.resumed_at.is_none()) {
                w.resumed_at = Some(at);
            }
        }
        if let Some(d) = self.planned.as_mut().filter(|d| !d.closed) {
            match ev {
                SessionEvent::Quiescing { plan: Plan::Drain } => d.quiescing[i] += 1,
                SessionEvent::Resumed { .. } => d.resumes[i] += 1,
                _ => {}
            }
        }
    }

    /// After every drain of events: the stall, once A completed after its
    /// resume; the drained device's unplug, once it carries only the
    /// blocked sessions.
    pub(super) fn planned_tick(&mut self) -> io::Result<()> {
        self.stall_tick()?;
        self.unplug_when_drained()
    }

    fn stall_tick(&mut self) -> io::Result<()> {
        let Some(w) = &self.watch else {
            return Ok(());
        };
        let Some(resumed) = w.resumed_at else {
            return Ok(());
        };
        let done = &self.streams[0].completions_at;
        let start = done.partition_point(|t| *t < w.from);
        let Some(last) = done[start..].iter().position(|t| *t >= resumed) else {
            return Ok(());
        };
        let mut prev = w.from;
        let mut stall = Duration::ZERO;
        for t in &done[start..=start + last] {
            stall = stall.max(t.saturating_since(prev));
            prev = *t;
        }
        let window = w.window;
        self.watch = None;
        let Some(win) = self.windows.get_mut(window) else {
            return Ok(());
        };
        win.acc[0].stall = Some(stall);
        let kind = win.kind;
        let before = win.acc[0].device_before.as_ref().map(|d| d.name.clone());
        let now_on = self
            .device_of(Side::Initiator, self.streams[0].session)
            .map(|d| d.0.name);
        let on = now_on
            .as_ref()
            .map_or(String::new(), |d| format!(" on {d}"));
        // Next to an unplanned move to another device: the drain's.
        let moved = now_on.is_some() && now_on != before;
        let drain = (kind != FaultKind::Drain && moved)
            .then(|| {
                self.windows
                    .iter()
                    .find(|w| w.kind == FaultKind::Drain)
                    .and_then(|w| w.acc[0].stall)
            })
            .flatten()
            .map_or(String::new(), |d| {
                format!(
                    " (the planned drain's: {})",
                    report::stall(d.as_secs_f64() * 1e3)
                )
            });
        self.say(format!(
            "  A: stall {}: the longest gap between its completions from the {kind} to its first completion{on} after its resume{drain}",
            report::stall(stall.as_secs_f64() * 1e3)
        ))
    }

    /// [`Step::Drain`](super::faults::Step::Drain) of fault window
    /// `window`: `drain` of the initiator's device `name`.
    pub(super) fn start_drain(&mut self, window: usize, side: Side, name: &str) -> io::Result<()> {
        let device = match side {
            Side::Initiator => self
                .sim
                .host(INITIATOR)
                .devices()
                .into_iter()
                .find(|d| d.id.name == name)
                .map(|d| d.id),
            Side::Target => None,
        };
        let Some(device) = device else {
            self.problems.push(Problem {
                at: self.rel(self.sim.now()),
                what: format!("demo bug: no initiator device {name} to drain"),
            });
            return Ok(());
        };
        let on = self.sim.node(INITIATOR).sessions_on(&device);
        let (mut movable, mut one_path, mut movers) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..3 {
            let (h, n) = self.session(i);
            if !on.contains(&h) {
                continue;
            }
            if world::PATHS[i] > 1 {
                movable.push(n);
                movers.push(Mover {
                    name: n,
                    index: i,
                    counters: self.sim.node(INITIATOR).counters(h).unwrap_or_default(),
                    indeterminate: indeterminate(self.workload(i)),
                    holds: self.c.holds(),
                });
            } else {
                one_path.push(n);
            }
        }
        let r = self.sim.node(INITIATOR).drain(&device);
        let moving: Vec<&'static str> = r.moving.iter().map(|h| self.name_of(*h)).collect();
        let blocked: Vec<&'static str> = r.blocked.iter().map(|h| self.name_of(*h)).collect();
        let list = |v: &[&str]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        self.say(format!(
            "  drain {side} {name}: moving {} (each to its other path); blocked {}",
            list(&moving),
            list(&blocked)
        ))?;
        for b in &blocked {
            self.say(format!(
                "  {b} blocked: it has one path only, and a drain cannot move a session with no other path; {b} stays on {name}, is lost with it at the unplug and recovers as after an unplanned fault"
            ))?;
        }
        let now = self.sim.now();
        self.planned = Some(DrainState {
            window,
            device,
            at: now,
            blocked: r.blocked,
            unplug_done: false,
            movers,
            quiescing: [0; 3],
            resumes: [0; 3],
            closed: false,
            log: DrainLog {
                at_s: self.rel(now),
                device: format!("{side} {name}"),
                moving,
                blocked,
                movable,
                one_path,
                ..DrainLog::default()
            },
        });
        Ok(())
    }

    /// Unplug the drained device once it carries only the blocked
    /// sessions.
    fn unplug_when_drained(&mut self) -> io::Result<()> {
        let Some(d) = self.planned.as_ref().filter(|d| !d.unplug_done) else {
            return Ok(());
        };
        let on = self.sim.node(INITIATOR).sessions_on(&d.device);
        if !on.iter().all(|h| d.blocked.contains(h)) {
            return Ok(());
        }
        let now = self.sim.now();
        let name = d.device.name.clone();
        let after = now.saturating_since(d.at);
        let left: Vec<&'static str> = on.iter().map(|h| self.name_of(*h)).collect();
        let d = self.planned.as_mut().expect("checked");
        d.unplug_done = true;
        d.log.drained_ms = Some(after.as_secs_f64() * 1e3);
        d.log.unplugged = true;
        let carries = if left.is_empty() {
            "nothing".to_string()
        } else {
            format!("only {} (blocked)", left.join(", "))
        };
        self.say(format!(
            "  initiator {name} drained {} after the call: it carries {carries}; maintenance starts",
            report::ms(after.as_secs_f64() * 1e3)
        ))?;
        self.markers.push(Marker {
            at_s: self.rel(now),
            label: format!("drain: unplug initiator {name}"),
            detail: String::new(),
            kind: MarkerKind::Step,
        });
        self.say(format!("  unplug initiator {name}"))?;
        let host = self.sim.host(INITIATOR).index();
        self.sim.fabric().inject(Fault::Remove(host, name));
        Ok(())
    }

    /// [`Step::Return`](super::faults::Step::Return): the drained device
    /// back after its maintenance, undrained if it is still on the drain
    /// list.
    pub(super) fn end_maintenance(&mut self) -> io::Result<()> {
        let Some(d) = self.planned.as_mut() else {
            return Ok(());
        };
        let name = d.device.name.clone();
        if !d.log.unplugged {
            d.unplug_done = true;
            let at = self.rel(self.sim.now());
            self.problems.push(Problem {
                at,
                what: format!(
                    "initiator {name} still carried a session that can move at the end of its maintenance: never unplugged"
                ),
            });
            return Ok(());
        }
        let host = self.sim.host(INITIATOR).index();
        self.sim.fabric().inject(Fault::Readd(host, name.clone()));
        let node = self.sim.node(INITIATOR);
        let listed: Vec<DeviceId> = node
            .draining()
            .iter()
            .filter(|x| x.name == name)
            .cloned()
            .collect();
        for x in &listed {
            node.undrain(x);
        }
        let d = self.planned.as_mut().expect("checked");
        if listed.is_empty() {
            d.log.left_drain_list = Some("removal".into());
            self.say(format!(
                "  {name} left the drain list with its removal: nothing to undrain"
            ))
        } else {
            d.log.left_drain_list = Some("undrain".into());
            self.say(format!("  undrain {name}"))
        }
    }

    /// The drain's window closes: what each moved session went through in
    /// it goes into the log.
    pub(super) fn close_drain(&mut self, window: usize) {
        let Some(d) = self
            .planned
            .as_ref()
            .filter(|d| d.window == window && !d.closed)
        else {
            return;
        };
        let acc = self.windows.get(window).map(|w| w.acc.clone());
        let mut sessions = Vec::new();
        for m in &d.movers {
            let (h, _) = self.session(m.index);
            let node = self.sim.node(INITIATOR);
            let now = node.counters(h).unwrap_or_default();
            let after = node
                .session_info(h)
                .and_then(|i| i.device)
                .map(|d| d.id.name);
            sessions.push(Drained {
                session: m.name,
                quiescing: d.quiescing[m.index],
                resumes: d.resumes[m.index],
                device_before: Some(d.device.name.clone()),
                device_after: after,
                stall_ms: acc
                    .as_ref()
                    .filter(|_| m.index == 0)
                    .and_then(|a| a[0].stall)
                    .map(|s| s.as_secs_f64() * 1e3),
                replayed: now.replayed - m.counters.replayed,
                indeterminate: indeterminate(self.workload(m.index)) - m.indeterminate,
                losses: now.losses - m.counters.losses,
                planned: now.planned - m.counters.planned,
                holds: if m.index == 2 {
                    (self.c.holds() - m.holds) as u64
                } else {
                    0
                },
            });
        }
        let d = self.planned.as_mut().expect("checked");
        d.log.sessions = sessions;
        d.closed = true;
        if !d.unplug_done {
            d.unplug_done = true;
        }
    }
}
