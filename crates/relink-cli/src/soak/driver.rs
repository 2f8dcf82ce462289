//! The soak's loop: the workloads run in epochs on the long-lived
//! sessions while the faults play; at the end of each epoch the workloads
//! stop submitting, everything they submitted completes (across whatever
//! fault is under way), they are checked end to end and dropped, the
//! target's data regions are zeroed, and the process is sampled. Then the
//! next epoch's workloads continue the same sessions.
//!
//! An epoch's books (every operation's record) are what lets the checks
//! prove exactly-once; dropping them at each epoch's end keeps the
//! checker's memory bounded, so a growing RSS is relink's, not the
//! checker's. The samples are taken with no workload alive and every
//! operation completed.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use relink::{Node, SessionEvent, State};
use relink_sim::workload::{self, mix, Class, Workload};
use relink_sim::{INITIATOR, TARGET};
use serde::Serialize;

use super::faults::{side_name, Faults};
use super::logcount::{self, LogCounts};
use super::process::{self, ProcessFigures};
use super::world::{World, SESSIONS};

/// How long an epoch's end may wait for its operations to complete
/// before the soak reports the epoch stuck and stops.
const QUIESCE_LIMIT: Duration = Duration::from_secs(120);
/// Violations kept word for word in the report (all are counted).
const KEEP_VIOLATIONS: usize = 20;

/// One session's half, as sampled (no heap memory of its own: the samples
/// kept over the run are in the live heap they measure).
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct SessionFigures {
    pub(super) session: &'static str,
    pub(super) host: &'static str,
    /// `None`: the node no longer has the session.
    #[serde(serialize_with = "state_name")]
    pub(super) state: Option<State>,
    /// Operations in the journal (submitted, not completed).
    pub(super) journal_ops: usize,
    /// Message payload bytes the journal keeps for replay.
    pub(super) journal_bytes: usize,
    /// Timers armed.
    pub(super) timers: usize,
    /// Completions, deliveries and events not taken.
    pub(super) outputs_waiting: usize,
    pub(super) losses: u64,
    pub(super) resumes: u64,
}

/// One node's tables and its provider's objects, as sampled.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct NodeFigures {
    pub(super) host: &'static str,
    /// Sessions the node holds.
    pub(super) sessions: usize,
    /// CM ids the node owns.
    pub(super) cm_ids: usize,
    /// Closed transports waiting for their goodbye.
    pub(super) closing: usize,
    /// Bytes relink allocated for the sessions.
    pub(super) session_memory_bytes: usize,
    /// The provider's live objects (contexts, PDs, CQs, MRs, QPs, CM ids...).
    pub(super) provider_objects: usize,
}

/// One sample, taken at an epoch's end: of a fixed size, in a vector
/// reserved for the whole run, so that keeping them grows no heap.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct Sample {
    /// Seconds since the soak started.
    pub(super) t_s: f64,
    /// Every session established on both sides and no fault holding a
    /// device: the samples the slopes are fitted to.
    pub(super) steady: bool,
    pub(super) process: ProcessFigures,
    pub(super) sessions: [SessionFigures; 2 * SESSIONS.len()],
    pub(super) nodes: [NodeFigures; 2],
    pub(super) log: LogCounts,
    pub(super) faults: u64,
    pub(super) resumed_events: u64,
    pub(super) ops: u64,
    pub(super) violations: u64,
}

/// Operations of one kind over the whole soak.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(super) struct OpFigures {
    pub(super) submitted: u64,
    pub(super) success: u64,
    /// Completed `Indeterminate` (allowed for FETCH_ADDs only; counted
    /// honestly for every kind).
    pub(super) indeterminate: u64,
    pub(super) failed: u64,
}

/// What the soak counted.
#[derive(Debug, Default)]
pub(super) struct Totals {
    pub(super) epochs: u64,
    pub(super) ops: BTreeMap<String, OpFigures>,
    pub(super) messages_delivered: u64,
    pub(super) reads_verified: u64,
    pub(super) violations: u64,
    pub(super) violation_list: Vec<String>,
    pub(super) device_lost_events: u64,
    pub(super) resumed_events: u64,
    /// Each `Resumed` event's downtime, ms.
    pub(super) downtimes_ms: Vec<f64>,
    /// `GaveUp` events (a session that ended: a failed check).
    pub(super) gave_up: u64,
    /// The epoch whose operations did not complete within
    /// [`QUIESCE_LIMIT`] (the soak stops there: a failed check).
    pub(super) stuck: Option<String>,
}

impl Totals {
    pub(super) fn completed(&self) -> u64 {
        self.ops
            .values()
            .map(|o| o.success + o.indeterminate + o.failed)
            .sum()
    }

    fn violation(&mut self, what: String) {
        self.violations += 1;
        if self.violation_list.len() < KEEP_VIOLATIONS {
            self.violation_list.push(what);
        }
    }
}

/// The soak while it runs.
pub(super) struct Driver<'o> {
    pub(super) world: World,
    pub(super) faults: Faults,
    streams: Vec<Workload>,
    seed: u64,
    /// Operations submitted per second at most (0: as fast as the
    /// windows allow).
    rate: u64,
    /// When the current epoch started (the pace counts from there).
    epoch_started: Instant,
    pub(super) started: Instant,
    pub(super) totals: Totals,
    pub(super) samples: Vec<Sample>,
    out: &'o mut dyn Write,
}

impl<'o> Driver<'o> {
    pub(super) fn new(
        world: World,
        faults: Faults,
        seed: u64,
        rate: u64,
        capacity: Capacity,
        out: &'o mut dyn Write,
    ) -> Driver<'o> {
        let mut d = Driver {
            world,
            faults,
            streams: Vec::new(),
            seed,
            rate,
            epoch_started: Instant::now(),
            started: Instant::now(),
            totals: Totals {
                downtimes_ms: Vec::with_capacity(capacity.recoveries),
                ..Totals::default()
            },
            samples: Vec::with_capacity(capacity.samples),
            out,
        };
        d.sample();
        d.start_epoch();
        d
    }

    /// Where the lines go.
    pub(super) fn out_mut(&mut self) -> &mut dyn Write {
        &mut *self.out
    }

    pub(super) fn secs(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// A line of output, dated.
    pub(super) fn say(&mut self, line: &str) -> std::io::Result<()> {
        writeln!(self.out, "[{:>8.1}s] {line}", self.secs())?;
        self.out.flush()
    }

    /// The next epoch's workloads, continuing the sessions.
    fn start_epoch(&mut self) {
        self.epoch_started = Instant::now();
        let epoch = self.totals.epochs;
        let seed = mix(self.seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let [a, b] = &self.world.nodes;
        self.streams = SESSIONS
            .iter()
            .zip(&self.world.sessions)
            .map(|((name, window), pair)| {
                let delivered = b
                    .session_info(pair[TARGET])
                    .map(|i| i.last_delivered)
                    .unwrap_or_default();
                let mut w =
                    Workload::new(name, seed, *window, a, pair[INITIATOR], Some(pair[TARGET]))
                        .continuing(delivered);
                w.scatter_gather();
                w
            })
            .collect();
    }

    /// One round: due fault steps, submissions (the workloads' windows
    /// topped up while the epoch is within its pace), both nodes polled,
    /// every output taken; sleeps up to 1 ms when nothing happened.
    pub(super) fn round(&mut self) -> std::io::Result<()> {
        if let Some(line) = self.faults.step(Instant::now()) {
            self.say(&line)?;
        }
        let [a, b] = &mut self.world.nodes;
        let submitted: usize = self.streams.iter().map(Workload::submitted).sum();
        let allowed = self.rate as f64 * self.epoch_started.elapsed().as_secs_f64();
        if self.rate == 0 || (submitted as f64) < allowed {
            for w in &mut self.streams {
                w.top_up(a);
            }
        }
        let busy = a.poll() | b.poll();
        for w in &mut self.streams {
            w.collect_from(a, b);
        }
        self.take_events();
        if !busy {
            let [a, b] = &mut self.world.nodes;
            let _ = a.wait_for(Duration::from_micros(500));
            let _ = b.wait_for(Duration::from_micros(500));
        }
        Ok(())
    }

    fn take_events(&mut self) {
        for pair in &self.world.sessions {
            for side in [INITIATOR, TARGET] {
                let node: &mut Node = &mut self.world.nodes[side];
                while let Some(e) = node.poll_event(pair[side]) {
                    match e {
                        SessionEvent::DeviceLost { .. } => self.totals.device_lost_events += 1,
                        SessionEvent::Resumed { downtime, .. } => {
                            self.totals.resumed_events += 1;
                            self.totals.downtimes_ms.push(downtime.as_secs_f64() * 1e3);
                        }
                        SessionEvent::GaveUp => self.totals.gave_up += 1,
                        _ => {}
                    }
                }
            }
        }
    }

    /// End the epoch: stop submitting, run until every operation
    /// completed and every message was delivered with the sessions
    /// established, check the workloads and drop them, zero the target's
    /// regions, sample. `false` if the epoch did not quiesce within
    /// [`QUIESCE_LIMIT`] (recorded in [`Totals::stuck`]; its workloads are
    /// checked all the same).
    pub(super) fn end_epoch(&mut self) -> std::io::Result<bool> {
        for w in &mut self.streams {
            w.stopped = true;
        }
        let since = Instant::now();
        let quiet = |d: &Driver<'_>| {
            d.world.all_established()
                && d.streams.iter().all(|w| {
                    let (sent, got) = w.messages();
                    w.pending() == 0 && sent == got
                })
        };
        while !quiet(self) {
            if since.elapsed() > QUIESCE_LIMIT {
                let pending: Vec<String> = self
                    .streams
                    .iter()
                    .map(|w| {
                        format!(
                            "{}: {} pending, messages {:?}",
                            w.name,
                            w.pending(),
                            w.messages()
                        )
                    })
                    .collect();
                self.totals.stuck = Some(format!(
                    "epoch {} did not complete within {QUIESCE_LIMIT:?}: {}",
                    self.totals.epochs + 1,
                    pending.join("; ")
                ));
                break;
            }
            self.round()?;
        }
        let quiesced = self.totals.stuck.is_none();
        self.check_epoch();
        if quiesced {
            self.sample();
            self.start_epoch();
        }
        Ok(quiesced)
    }

    /// Check the epoch's workloads end to end, count them, drop them and
    /// zero the target's data regions for the next epoch's.
    fn check_epoch(&mut self) {
        self.totals.epochs += 1;
        let epoch = self.totals.epochs;
        let streams = std::mem::take(&mut self.streams);
        for w in &streams {
            for v in w.check_survived_on(&self.world.nodes[TARGET]) {
                self.totals.violation(format!("epoch {epoch}: {v}"));
            }
            for (class, t) in &w.tally {
                let o = self.totals.ops.entry(class_name(*class)).or_default();
                o.submitted += t.submitted;
                o.success += t.success;
                o.indeterminate += t.executed + t.unknown;
                o.failed += t.failed_gave_up + t.failed_disconnected + t.failed_other;
            }
            self.totals.messages_delivered += w.messages().1 as u64;
            self.totals.reads_verified += w.reads_verified;
        }
        drop(streams);
        for pair in &self.world.sessions {
            if let Ok(m) = self.world.nodes[TARGET].region(pair[TARGET], workload::TARGET_DATA) {
                let _ = m.write(0, &vec![0; m.len()]);
            }
        }
    }

    /// Sample the process, the sessions and the nodes.
    fn sample(&mut self) {
        let w = &self.world;
        let sessions = std::array::from_fn(|k| {
            let (i, side) = (k / 2, if k % 2 == 0 { INITIATOR } else { TARGET });
            let info = w.nodes[side].session_info(w.sessions[i][side]);
            let get = |f: fn(&relink::SessionInfo) -> u64| info.as_ref().map_or(0, f);
            SessionFigures {
                session: SESSIONS[i].0,
                host: side_name(side),
                state: info.as_ref().map(|x| x.state),
                journal_ops: get(|x| x.pending_ops as u64) as usize,
                journal_bytes: get(|x| x.journal_bytes as u64) as usize,
                timers: get(|x| x.timers_armed as u64) as usize,
                outputs_waiting: get(|x| x.outputs_waiting as u64) as usize,
                losses: get(|x| x.counters.losses),
                resumes: get(|x| x.counters.resumes),
            }
        });
        let nodes = [INITIATOR, TARGET].map(|side| {
            let n = &w.nodes[side];
            let f = n.footprint();
            NodeFigures {
                host: side_name(side),
                sessions: f.sessions,
                cm_ids: f.cm_ids,
                closing: f.closing,
                session_memory_bytes: f.session_memory_bytes,
                provider_objects: n.provider().object_counts().total(),
            }
        });
        let steady = w.all_established() && self.faults.idle();
        let sample = Sample {
            t_s: self.secs(),
            steady,
            process: process::read(),
            sessions,
            nodes,
            log: logcount::counts(),
            faults: self.faults.figures.injected,
            resumed_events: self.totals.resumed_events,
            ops: self.totals.completed(),
            violations: self.totals.violations,
        };
        self.samples.push(sample);
    }
}

/// What to reserve for the run, so that what the soak keeps does not
/// grow the heap it measures.
#[derive(Debug, Clone, Copy)]
pub(super) struct Capacity {
    /// Samples: one per epoch, and the first.
    pub(super) samples: usize,
    /// `Resumed` events' downtimes.
    pub(super) recoveries: usize,
}

/// A session's state in the report: its name, or "gone".
fn state_name<S: serde::Serializer>(state: &Option<State>, s: S) -> Result<S::Ok, S::Error> {
    match state {
        Some(st) => s.collect_str(st),
        None => s.serialize_str("gone"),
    }
}

/// A kind of operation's name in the report.
fn class_name(c: Class) -> String {
    serde_json::to_value(c)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{c:?}"))
}
