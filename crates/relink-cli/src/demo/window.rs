//! Fault windows: what each session went through from one fault's start
//! to the next one's, and the outcome that is classified as (resumed,
//! failed over, moved by a planned drain, gave up, ...) against what the
//! fault allows.

use std::time::Duration;

use relink::State;
use relink_fabric::{DeviceId, Guid, Timestamp};

use super::driver::{Driver, NAMES};
use super::faults::{Expect, FaultKind, Side};
use super::report::Impact;

/// What one session went through in one fault's window.
#[derive(Debug, Clone, Default)]
pub(super) struct Acc {
    pub(super) losses: u64,
    pub(super) resumes: u64,
    /// Total downtime of the resumes.
    pub(super) downtime: Duration,
    pub(super) max_downtime: Duration,
    /// Operations the initiator replayed on its resumes.
    pub(super) replayed: u64,
    /// Duplicates the target dropped during the window.
    pub(super) deduplicated: u64,
    pub(super) gave_up: bool,
    /// `Quiescing { plan: Drain }` events (initiator side): planned moves.
    pub(super) planned: u64,
    /// A drain found no other path for the session (`DrainBlocked`).
    pub(super) blocked: bool,
    /// The longest gap between the session's successful completions from
    /// the fault's start to its first completion after its first resume
    /// (A, when the fault hit its device; see [`super::drain`]).
    pub(super) stall: Option<Duration>,
    pub(super) closed: bool,
    /// The session was already gone or terminal when the fault started.
    pub(super) ended_before: bool,
    /// Initiator device at the fault's start; `None` when not on one.
    pub(super) device_before: Option<DeviceId>,
    pub(super) guid_before: Option<Guid>,
    /// Initiator device when the window closed; `None` when not on one.
    pub(super) device_after: Option<DeviceId>,
    pub(super) guid_after: Option<Guid>,
    /// State when the window closed; `None` when the session is gone.
    pub(super) state_after: Option<State>,
}

/// A fault being played, or played (`closed`).
pub(super) struct Window {
    pub(super) kind: FaultKind,
    /// When its first step ran.
    pub(super) at: Timestamp,
    /// What it hit, as printed (`initiator soft0`, `session A`).
    pub(super) hit: String,
    pub(super) description: String,
    /// Per session, A then B.
    pub(super) acc: [Acc; 2],
    /// The next fault started or the workload stopped: `acc` is final.
    pub(super) closed: bool,
}

impl Driver<'_> {
    /// Close the current fault's window: record where the sessions ended.
    pub(super) fn close_window(&mut self) {
        let Some(w) = self.windows.last() else {
            return;
        };
        if w.closed {
            return;
        }
        let mut after = Vec::new();
        for i in 0..2 {
            let h = self.streams[i].session;
            let dev = self.device_of(Side::Initiator, h);
            let state = self.state_of(i, Side::Initiator);
            after.push((dev, state));
        }
        let w = self.windows.last_mut().expect("checked");
        for (i, (dev, state)) in after.into_iter().enumerate() {
            w.acc[i].device_after = dev.as_ref().map(|d| d.0.clone());
            w.acc[i].guid_after = dev.map(|d| d.1);
            w.acc[i].state_after = state;
        }
        w.closed = true;
        let window = self.windows.len() - 1;
        self.close_drain(window);
        if self.watch.as_ref().is_some_and(|w| w.window() == window) {
            self.watch = None;
        }
    }

    pub(super) fn acc(&mut self, i: usize) -> Option<&mut Acc> {
        if !self.attributing {
            return None;
        }
        self.windows
            .last_mut()
            .filter(|w| !w.closed)
            .map(|w| &mut w.acc[i])
    }

    pub(super) fn impact(&self, w: &Window, i: usize, allowed: &[Expect]) -> Impact {
        let a = &w.acc[i];
        let name = |d: &Option<DeviceId>| d.as_ref().map(|d| d.name.clone());
        let outcome = if a.ended_before {
            Expect::Ended
        } else if a.closed {
            Expect::Closed
        } else if a.gave_up {
            Expect::GaveUp
        } else if a.losses == 0 && a.resumes == 0 {
            Expect::Unaffected
        } else if a.state_after != Some(State::Established) || a.resumes == 0 {
            Expect::StillDown
        } else if name(&a.device_before) != name(&a.device_after) {
            if a.planned > 0 && a.losses == 0 {
                Expect::Moved
            } else {
                Expect::FailedOver
            }
        } else if a.guid_before != a.guid_after {
            Expect::ResumedNewGuid
        } else {
            Expect::Resumed
        };
        let ok = allowed.iter().any(|e| e.accepts(outcome));
        let mut note = String::new();
        if outcome == Expect::ResumedNewGuid {
            if let (Some(b), Some(c)) = (a.guid_before, a.guid_after) {
                note = format!("GUID {b} -> {c}");
            }
        }
        if outcome == Expect::GaveUp {
            if let Some(p) = &self.streams[i].pending_at_give_up {
                note = format!("{} pending operations ended", p.len());
            }
        }
        if outcome == Expect::Closed {
            if let Some(p) = &self.streams[i].pending_at_close {
                note = format!("{} pending operations ended", p.len());
            }
        }
        if a.blocked {
            let sep = if note.is_empty() { "" } else { "; " };
            note = format!("{note}{sep}drain blocked: one path");
        }
        if a.losses > 1 {
            let sep = if note.is_empty() { "" } else { "; " };
            note = format!("{note}{sep}{} losses", a.losses);
        }
        Impact {
            session: NAMES[i],
            outcome,
            expected: allowed.to_vec(),
            ok,
            losses: a.losses,
            resumes: a.resumes,
            downtime_ms: a.downtime.as_secs_f64() * 1e3,
            max_downtime_ms: a.max_downtime.as_secs_f64() * 1e3,
            replayed: a.replayed,
            stall_ms: a.stall.map(|s| s.as_secs_f64() * 1e3),
            deduplicated: a.deduplicated,
            device_before: name(&a.device_before),
            device_after: if matches!(outcome, Expect::Closed | Expect::GaveUp | Expect::Ended) {
                None
            } else {
                name(&a.device_after)
            },
            note,
        }
    }
}
