//! The run loop: the fault schedule's steps played at their virtual
//! times, the workload topped up every tick (a millisecond, a microsecond
//! around a fault on A's device: see [`super::drain`]), a progress line
//! every second; then the tail, the drain of pending operations and the
//! stop.

use std::io;
use std::time::Duration;

use relink_fabric::Timestamp;
use relink_sim::sim::INITIATOR;

use super::drain::FINE_TICK;
use super::driver::{Driver, NAMES};
use super::faults::{Planned, Side, Step};
use super::report;

/// The workload is topped up this often (virtual time).
const TICK: Duration = Duration::from_millis(1);
/// A progress line this often.
const PROGRESS: Duration = Duration::from_secs(1);
/// Traffic after the end of the workload (B and C keep going; the target
/// may still deliver what A posted before its close).
const TAIL: Duration = Duration::from_millis(200);
/// How long the end waits for pending operations to complete.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

impl Driver<'_> {
    pub(super) fn run(&mut self, plan: &[Planned], duration: Duration) -> io::Result<()> {
        let t0 = self.t0;
        let mut steps: Vec<(Timestamp, usize, Step)> = plan
            .iter()
            .enumerate()
            .flat_map(|(i, p)| {
                p.kind
                    .steps(&self.timing)
                    .into_iter()
                    .map(move |(off, st)| (t0 + p.at + off, i, st))
            })
            .collect();
        steps.sort_by_key(|s| (s.0, s.1));
        self.fault_device = vec![None; plan.len()];
        let end = t0 + duration;
        let mut next = 0;
        let mut next_progress = t0 + PROGRESS;
        loop {
            let now = self.sim.now();
            while let Some(&(at, i, step)) = steps.get(next) {
                if at > now {
                    break;
                }
                self.apply(plan, i, step)?;
                next += 1;
            }
            if now >= end && next == steps.len() {
                break;
            }
            self.top_up();
            // Ticks fall on whole milliseconds of the workload's time, or
            // microseconds while A's stall is watched or a drain is under
            // way.
            let tick = if self.fine_ticks() { FINE_TICK } else { TICK };
            let ticks = now.saturating_since(t0).as_nanos() / tick.as_nanos() + 1;
            let mut until = (t0 + tick * u32::try_from(ticks).unwrap_or(u32::MAX)).min(end);
            if let Some(s) = steps.get(next) {
                until = until.min(s.0);
            }
            self.sim.run_until(until.max(now));
            self.drain()?;
            if self.sim.now() >= next_progress {
                self.progress()?;
                next_progress += PROGRESS;
            }
        }
        // The tail: B (if alive) and C keep going, the target may still
        // deliver what A posted before its close.
        let tail_end = self.sim.now() + TAIL;
        while self.sim.now() < tail_end {
            self.top_up();
            let until = (self.sim.now() + TICK).min(tail_end);
            self.sim.run_until(until);
            self.drain()?;
        }
        // Stop submitting; wait until every live session's operations
        // completed.
        for s in &mut self.streams {
            s.stopped = true;
        }
        self.c.stream.stopped = true;
        let limit = self.sim.now() + DRAIN_LIMIT;
        while self.sim.now() < limit
            && (self.streams.iter().any(|s| s.pending() > 0) || self.c.stream.pending() > 0)
        {
            let until = self.sim.now() + Duration::from_millis(1);
            self.sim.run_until(until);
            self.drain()?;
        }
        self.close_window();
        self.attributing = false;
        // Let the last acknowledgements and deliveries through.
        let until = self.sim.now() + Duration::from_millis(10);
        self.sim.run_until(until);
        self.drain()?;
        self.say("workload stopped; verifying")
    }

    fn top_up(&mut self) {
        let [a, b] = &mut self.streams;
        let node = self.sim.node(INITIATOR);
        a.top_up(node);
        b.top_up(node);
        self.c.stream.top_up(node);
    }

    fn progress(&mut self) -> io::Result<()> {
        let mut parts = Vec::new();
        for (i, name) in NAMES.iter().enumerate() {
            let done = self.streams[i].completions_at.len();
            let rate = (done - self.progress_seen[i]) as f64 / PROGRESS.as_secs_f64();
            self.progress_seen[i] = done;
            let h = self.streams[i].session;
            let state = self
                .state_of(i, Side::Initiator)
                .map_or("gone".to_string(), |s| s.to_string());
            let dev = self
                .device_of(Side::Initiator, h)
                .map_or(String::new(), |d| format!(" on {}", d.0.name));
            let what = if i == 0 { "ops/s" } else { "msgs/s" };
            parts.push(format!(
                "{}: {:>9} {what:<6} {state}{dev}",
                name,
                report::count(rate as u64)
            ));
        }
        parts.push(self.c_progress(PROGRESS));
        self.say(format!("throughput  {}", parts.join("   ")))
    }
}
