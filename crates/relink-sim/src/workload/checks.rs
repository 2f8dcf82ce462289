//! The end-to-end checks of a workload: each returns a [`Check`] (a name,
//! whether it held, what was found), and [`Workload::check_common`] /
//! [`Workload::check_survived_on`] gather them into lists of violations
//! for the simulation suites.

use std::collections::BTreeSet;

use relink::{Node, OpError, OpId, Outcome, State, WcStatus};
use relink_fabric::{Memory, Timestamp};
use serde::Serialize;

use super::books::Workload;
use super::layout::{BLOCK, BLOCKS, COUNTER, TARGET_DATA};
use super::payload::pattern;
use super::records::Fetched;
use super::tally::Class;
use crate::sim::{Sim, INITIATOR, TARGET};

/// `t` in seconds of virtual time (since the fabric started), for reports.
pub fn secs(t: Timestamp) -> f64 {
    t.as_nanos() as f64 / 1e9
}

/// The result of one end-to-end check.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Short name.
    pub name: String,
    /// Whether it held.
    pub ok: bool,
    /// What was found, in a sentence.
    pub detail: String,
}

impl Check {
    fn new(name: impl Into<String>, ok: bool, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            ok,
            detail: detail.into(),
        }
    }
}

/// The sequence — messages, of bytes and from registered memory alike,
/// and the notices of WRITEs with immediate data, which share the sequence
/// numbers: the receiver got each at most once, in order (the places it
/// delivered rise), with the bytes of its submission (a message's, checked
/// at each delivery, or a notice's imm, region, offset and length, and the
/// WRITE's bytes in its landing slot when the notice was taken: a problem
/// of the workload otherwise), under the sequence number the replay
/// contract gives it; every `Success` delivered, no `Failed` delivered, an
/// `Indeterminate` delivered or not. Sequence numbers may skip: a fast
/// failure's orphan (posted before the loss, completed `Indeterminate`)
/// whose memory is the application's again (a message from registered
/// memory, a WRITE with immediate data) is replayed as a skip of its
/// number, delivered only if the peer had it before the loss (an orphan
/// of bytes is replayed whole: delivered at most once, maybe after its
/// completion), and so is one that failed alone when it was to be posted
/// (a WRITE with immediate data to a token not advertised:
/// `Failed(Remote(..))`); the numbers of those a fast failure failed
/// unposted go to the next ones. So place `i` is delivered as `1 + i - f`,
/// `f` the places before it that completed `Failed` but alone (after the
/// session's earlier deliveries for a workload that is
/// [`continuing`](Workload::continuing) it). A place not
/// delivered while a later one was must have completed (`Indeterminate`:
/// skipped). With `expect_all`, every place completed.
pub fn check_messages(s: &Workload, expect_all: bool) -> Check {
    let name = format!("messages {}", s.name);
    let sent = s.sent.len() as u64;
    let got = s.received.len() as u64;
    let what = |i: u64| {
        if s.imms.contains_key(&i) {
            "WRITE with immediate data"
        } else {
            "message"
        }
    };
    if let Some(i) = s.received.windows(2).position(|w| w[1] <= w[0]) {
        return Check::new(
            name,
            false,
            format!(
                "the receiver's sequence breaks at position {}: got {} {} after {} {} (duplicate or reordering)",
                i + 1,
                what(s.received[i + 1]),
                s.received[i + 1],
                what(s.received[i]),
                s.received[i]
            ),
        );
    }
    if let Some(last) = s.received.last().filter(|l| **l >= sent) {
        return Check::new(
            name,
            false,
            format!("place {last} delivered but only {sent} sent"),
        );
    }
    let last_delivered = s.received.last().copied();
    let mut bad = Vec::new();
    let (mut ok_success, mut failed, mut gave_back) = (0u64, 0u64, 0u64);
    let (mut indet_delivered, mut indet_skipped) = (0u64, 0u64);
    let (mut memory, mut memory_delivered) = (0u64, 0u64);
    let (mut imms, mut noticed, mut refused) = (0u64, 0u64, 0u64);
    let mut next = 0usize; // the next delivery to match
    for index in 0..sent {
        let delivery = (s.received.get(next) == Some(&index)).then(|| {
            next += 1;
            s.received_seqs[next - 1]
        });
        let delivered = delivery.is_some();
        let kind = what(index);
        if let Some(seq) = delivery {
            let want = s.seq_base + index + 1 - gave_back;
            if seq.0 != want {
                bad.push(format!(
                    "{kind} {index} delivered as {seq}, expected {} ({gave_back} failed before it, their numbers given back)",
                    relink::Seq(want)
                ));
            }
        }
        if s.from_memory.indexes.contains(&index) {
            memory += 1;
            memory_delivered += u64::from(delivered);
        }
        if let Some(i) = s.imms.get(&index) {
            imms += 1;
            noticed += u64::from(delivered);
            if i.slot.is_none() {
                refused += 1;
            }
        }
        match s.message_outcome(index) {
            Some(Outcome::Success { .. }) => {
                ok_success += 1;
                if !delivered {
                    bad.push(format!(
                        "{kind} {index} completed Success but was not delivered"
                    ));
                }
            }
            Some(Outcome::Failed(e)) => {
                failed += 1;
                if !matches!(e, OpError::Remote(_) | OpError::TooLargeForPeer) {
                    gave_back += 1;
                }
                if delivered {
                    bad.push(format!(
                        "{kind} {index} completed Failed({e:?}) but was delivered"
                    ));
                }
            }
            Some(Outcome::Indeterminate { .. }) => {
                if delivered {
                    indet_delivered += 1;
                } else {
                    indet_skipped += 1;
                }
            }
            Some(other) => bad.push(format!(
                "{kind} {index} completed {other:?}, an outcome this check does not know"
            )),
            None if expect_all => bad.push(format!("{kind} {index} never completed")),
            None => {
                if let Some(later) = last_delivered.filter(|l| *l > index && !delivered) {
                    bad.push(format!(
                        "{kind} {index} was not delivered and has not completed, yet the later place {later} was: a gap"
                    ));
                }
            }
        }
    }
    if let Some(first) = bad.first() {
        return Check::new(
            name,
            false,
            format!("{first} ({} problems in all)", bad.len()),
        );
    }
    let mut detail = format!(
        "{sent} sent, {got} delivered once each, in order and intact, {ok_success} confirmed"
    );
    if memory > 0 || s.from_memory.no_room > 0 {
        detail.push_str(&format!(
            "; {memory} from registered memory ({} of 2-4 ranges, {} across both regions; {memory_delivered} delivered), {} more found no staging room",
            s.from_memory.gathered, s.from_memory.across_regions, s.from_memory.no_room
        ));
    }
    if imms > 0 {
        detail.push_str(&format!(
            "; {imms} of them WRITEs with immediate data ({noticed} noticed, {} with their bytes in place when the notice was taken; {refused} to a token not advertised, failed alone)",
            s.notices_verified
        ));
    }
    if failed + indet_delivered + indet_skipped > 0 {
        detail.push_str(&format!(
            "; {failed} failed (none delivered), {} indeterminate ({indet_delivered} delivered, {indet_skipped} not)",
            indet_delivered + indet_skipped
        ));
    }
    if let Some(f) = s.receive_figures() {
        detail.push_str(&format!(
            "; through posted receives: {} posted, {} messages ({} truncated), {} notices, {} polled while none was posted, {} flushed",
            f.posted, f.messages, f.truncated, f.notices, f.polled, f.flushed
        ));
    }
    Check::new(name, true, detail)
}

/// Every byte of the target's data region: each block holds the pattern of
/// its last successful write (zeros if never written).
pub fn check_region(s: &Workload, target_region: Option<&Memory>) -> Check {
    let name = "written bytes";
    let Some(mem) = target_region else {
        return Check::new(name, false, "the target's region is gone");
    };
    let (mut written, mut wrong, mut undefined) = (0u64, Vec::new(), 0u64);
    for (i, b) in s.blocks.iter().enumerate() {
        let i = i as u64;
        let Ok(got) = mem.read_vec((i * BLOCK) as usize, BLOCK as usize) else {
            return Check::new(name, false, "the target's region is too small");
        };
        let ok = match b.undefined {
            // The contract leaves the range undefined; in practice it
            // holds either version, and anything else is worth knowing.
            Some((old, new)) => {
                undefined += 1;
                got == pattern(s.seed, i, old) || got == pattern(s.seed, i, Some(new))
            }
            None => got == pattern(s.seed, i, b.good),
        };
        if b.good.is_some() {
            written += 1;
        }
        if !ok {
            wrong.push(i);
        }
    }
    let total_writes = s.tally.get(&Class::Write).map_or(0, |t| t.success);
    if wrong.is_empty() {
        let mut d = format!(
            "{} KiB in {BLOCKS} blocks verified byte for byte: {written} written ({total_writes} WRITEs, {} submitted gathering 2-4 ranges), the rest still zero",
            BLOCK * BLOCKS / 1024,
            s.writes_gathered
        );
        if undefined > 0 {
            d.push_str(&format!(
                "; {undefined} block(s) whose last WRITE ended without success hold the old or the new pattern"
            ));
        }
        Check::new(name, true, d)
    } else {
        Check::new(
            name,
            false,
            format!(
                "{} block(s) differ from their expected pattern, first block {}",
                wrong.len(),
                wrong[0]
            ),
        )
    }
}

/// READs: every successful READ returned the expected bytes.
pub fn check_reads(s: &Workload) -> Check {
    let bad = s.read_mismatches;
    let t = s.tally.get(&Class::Read).copied().unwrap_or_default();
    Check::new(
        "reads",
        bad == 0 && s.reads_verified == t.success,
        format!(
            "{} READs returned the expected bytes ({} replayed; {} submitted scattering over 2-4 ranges); {bad} mismatches",
            s.reads_verified, t.replayed, s.reads_scattered
        ),
    )
}

/// Atomics: the counter equals the certain adds plus a subset of the
/// unknown ones.
pub fn check_atomics(s: &Workload, target_region: Option<&Memory>) -> Check {
    let name = "atomics";
    let Some(counter) = target_region.and_then(|m| m.read_u64(COUNTER as usize).ok()) else {
        return Check::new(name, false, "the counter cannot be read");
    };
    let maybe: u64 = s.maybe.iter().sum();
    let t = s.tally.get(&Class::FetchAdd).copied().unwrap_or_default();
    let in_range = counter >= s.certain && counter <= s.certain + maybe;
    // Which sums of the unknown adds are possible (they are small).
    let subset = in_range && {
        let want = (counter - s.certain) as usize;
        let mut can = vec![false; want + 1];
        can[0] = true;
        for &a in &s.maybe {
            let a = a as usize;
            for v in (a..=want).rev() {
                can[v] |= can[v - a];
            }
        }
        can[want]
    };
    // Every fetched old value plus its addend fits under the counter, no
    // two successful atomics saw the same old value, and every successful
    // atomic's result was written.
    let mut olds: Vec<&Fetched> = s.fetched.iter().collect();
    olds.sort_unstable_by_key(|f| (f.old, f.op));
    let same: Vec<(&Fetched, &Fetched)> = olds
        .windows(2)
        .filter(|w| w[0].old == w[1].old)
        .map(|w| (w[0], w[1]))
        .collect();
    let distinct = same.is_empty();
    let bounded = s.fetched.iter().all(|f| f.old + f.add <= counter);
    let written = s.unwritten.is_empty() || s.unwritten_excused.is_some();
    let ok = in_range && subset && distinct && bounded && written;
    let describe = |f: &Fetched| {
        format!(
            "{} (slot {}, completed at {:.3}s{})",
            f.op,
            f.slot,
            secs(f.at),
            if f.replayed { ", replayed" } else { "" }
        )
    };
    let mut found = String::new();
    for (a, b) in same.iter().take(4) {
        found += &format!(
            "; old value {} returned to both {} and {}",
            a.old,
            describe(a),
            describe(b)
        );
    }
    for f in s.unwritten.iter().take(4) {
        found += &format!("; no result written for {}", describe(f));
    }
    Check::new(
        name,
        ok,
        format!(
            "counter {counter} = {} certain ({} Success + {} executed-indeterminate FETCH_ADDs){}; {} failed (never executed){}",
            s.certain,
            t.success,
            t.executed,
            if s.maybe.is_empty() {
                String::new()
            } else {
                format!(
                    " + {} of {} unknown ({} adds, Indeterminate{{None}}) -> within [{}, {}]",
                    counter.saturating_sub(s.certain),
                    maybe,
                    s.maybe.len(),
                    s.certain,
                    s.certain + maybe
                )
            },
            t.failed_gave_up + t.failed_disconnected + t.failed_other,
            if ok {
                match s.unwritten_excused {
                    Some(why) if !s.unwritten.is_empty() => format!(
                        "; {} Success FETCH_ADDs without a written result ({why})",
                        s.unwritten.len()
                    ),
                    _ => String::new(),
                }
            } else {
                format!(
                    " [in range: {in_range}, subset sum: {subset}, distinct old values: {distinct}, old values bounded: {bounded}, results written: {written} ({} of {} successes without a result)]{found}",
                    s.unwritten.len(),
                    s.unwritten.len() + s.fetched.len()
                )
            }
        ),
    )
}

/// One completion per operation: none twice, none unknown, none still
/// pending.
pub fn check_completions(s: &Workload) -> Check {
    let name = format!("completions {}", s.name);
    let twice = s.completed_twice + s.completed_unknown;
    let submitted: u64 = s.tally.values().map(|t| t.submitted).sum();
    let completed: u64 = s.tally.values().map(|t| t.completed()).sum();
    let missing = s.pending.len();
    let ok = twice == 0 && missing == 0 && submitted == completed;
    let mut d = format!("{submitted} operations, {completed} completions");
    if twice > 0 {
        d.push_str(&format!(", {twice} duplicate or unknown"));
    }
    if missing > 0 {
        let first: Vec<String> = s.pending.keys().take(5).map(ToString::to_string).collect();
        d.push_str(&format!(
            ", {missing} never completed ({} ...)",
            first.join(", ")
        ));
    } else {
        d.push_str(", each exactly once");
    }
    let flushes = s.tally.get(&Class::Flush).map_or(0, |t| t.submitted);
    if flushes > 0 {
        d.push_str(&format!(
            "; {} of {flushes} flushes completed after every operation submitted before and before every one after",
            s.flushes_in_place
        ));
    }
    Check::new(name, ok, d)
}

/// The operations pending at an admin close or a give-up all completed,
/// each with `err` — or, where the journal knows more, with what it knows
/// (the replay contract in docs/DESIGN.md, `Journal::fail_all`): a posted
/// message or atomic may have taken effect (`Indeterminate`), a write or
/// atomic may be proven executed (`Success`, `Indeterminate` with
/// `executed: Some(true)`). Never silently, never twice; at least one
/// must have failed with `err`.
pub fn check_ended(s: &Workload, at: &BTreeSet<OpId>, err: OpError, what: &str) -> Check {
    let name = format!("{} {what}", s.name);
    let (mut failed, mut indeterminate, mut proven) = (0u64, 0u64, 0u64);
    let (mut missing, mut wrong) = (0u64, Vec::new());
    for op in at {
        let Some((class, outcome)) = s.outcomes.get(op).copied() else {
            missing += 1;
            continue;
        };
        let allowed = match (class, outcome) {
            (_, Outcome::Failed(e)) if e == err => {
                failed += 1;
                true
            }
            (Class::Message | Class::WriteImm, Outcome::Indeterminate { executed: None })
            | (Class::FetchAdd, Outcome::Indeterminate { .. }) => {
                indeterminate += 1;
                true
            }
            (Class::Write, Outcome::Success { .. }) => {
                proven += 1;
                true
            }
            _ => false,
        };
        if !allowed {
            wrong.push(format!("{op} ({class:?}) completed {outcome:?}"));
        }
    }
    let ok = missing == 0 && wrong.is_empty() && failed > 0;
    let mut d = format!(
        "{} operations pending: {failed} completed Failed({err:?}), {indeterminate} Indeterminate (posted, may have taken effect), {proven} writes proven executed",
        at.len()
    );
    if failed == 0 {
        d.push_str(&format!(", none failed with {err:?}"));
    }
    if missing > 0 {
        d.push_str(&format!(", {missing} NEVER completed"));
    }
    if let Some(w) = wrong.first() {
        d.push_str(&format!(", unexpected: {w}"));
    }
    Check::new(name, ok, d)
}

impl Workload {
    /// The invariants of every run, survived or not, as a list of
    /// violations (empty: all held): no problem was recorded (no operation
    /// completed twice or unknown, no corrupted or out-of-order delivery,
    /// no wrong READ, no indeterminate WRITE or READ, no refusal by
    /// [`top_up`](Self::top_up)); the messages delivered are a prefix of
    /// those sent, consistent with their completions.
    pub fn check_common(&self) -> Vec<String> {
        let mut v: Vec<String> = self.problems.iter().map(|p| p.what.clone()).collect();
        for c in [check_messages(self, false), check_reads(self)] {
            if !c.ok {
                v.push(format!("{}: {}", c.name, c.detail));
            }
        }
        v
    }

    /// The invariants of a run in which the session survived, as a list of
    /// violations: [`check_common`](Self::check_common), and every message
    /// delivered exactly once and in order, every operation completed
    /// exactly once and successfully (a FETCH_ADD may be `Indeterminate`),
    /// every block of the target's region holding its last write's
    /// pattern, the counter equal to the certain adds plus a subset of the
    /// unknown ones. `target` is the target's node.
    ///
    /// With [`allow_fast_fail`](Self::allow_fast_fail), an operation may
    /// also have completed `Failed(FastFail)` and a message `Indeterminate`
    /// (delivered or not: [`check_messages`] checks which may be).
    pub fn check_survived_on(&self, target: &Node) -> Vec<String> {
        let mut v = self.check_common();
        let region = self.target.and_then(|t| target.region(t, TARGET_DATA).ok());
        for c in [
            check_messages(self, true),
            check_completions(self),
            check_region(self, region.as_ref()),
            check_atomics(self, region.as_ref()),
        ] {
            if !c.ok {
                v.push(format!("{}: {}", c.name, c.detail));
            }
        }
        let refused: BTreeSet<OpId> = self
            .imms
            .values()
            .filter(|i| i.slot.is_none())
            .map(|i| i.op)
            .collect();
        for (op, (class, outcome)) in &self.outcomes {
            let fast_failed = matches!(
                (class, outcome),
                (_, Outcome::Failed(OpError::FastFail))
                    | (
                        Class::Message | Class::WriteImm,
                        Outcome::Indeterminate { executed: None }
                    )
            );
            let ok = if refused.contains(op) {
                // To a token the target never advertised: failed alone.
                matches!(
                    outcome,
                    Outcome::Failed(OpError::Remote(WcStatus::RemAccessErr))
                ) || (self.fast_fail && matches!(outcome, Outcome::Failed(OpError::FastFail)))
            } else {
                matches!(
                    (class, outcome),
                    (_, Outcome::Success { .. }) | (Class::FetchAdd, Outcome::Indeterminate { .. })
                ) || (self.fast_fail && fast_failed)
            };
            if !ok {
                v.push(format!(
                    "{op} ({class:?}) ended {outcome:?} in a run that survived"
                ));
            }
        }
        if let Some(f) = self.receive_figures().filter(|f| f.flushed > 0) {
            v.push(format!(
                "{} posted receives ended Flushed while the session lived",
                f.flushed
            ));
        }
        let (staged, bytes) = self.staged();
        if self.pending.is_empty() && staged + bytes as usize > 0 {
            v.push(format!(
                "{staged} messages from registered memory still hold {bytes} staging bytes with nothing pending"
            ));
        }
        v
    }

    /// [`check_survived_on`](Self::check_survived_on) the simulation's
    /// target node.
    pub fn check_survived(&self, sim: &mut Sim) -> Vec<String> {
        self.check_survived_on(sim.node(TARGET))
    }
}

impl Workload {
    /// With `RELINK_SIM_TRACE` set: print both ends' pending session
    /// events and their state, epoch, planned outage and counters on
    /// stderr (what a failing seed's replay needs). Nothing otherwise.
    pub fn trace_ends(&self, sim: &mut Sim) {
        if std::env::var_os("RELINK_SIM_TRACE").is_none() {
            return;
        }
        for (name, node, sess) in [
            ("initiator", INITIATOR, Some(self.session)),
            ("target", TARGET, self.target),
        ] {
            let Some(sess) = sess else { continue };
            while let Some(e) = sim.node(node).poll_event(sess) {
                eprintln!("{name}: {e:?}");
            }
            if let Some(c) = sim.node(node).session_info(sess) {
                eprintln!(
                    "{name}: state {} epoch {} planned {:?} draining {:?} counters {:?}",
                    c.state,
                    c.epoch,
                    c.planned,
                    sim.node(node).draining(),
                    c.counters
                );
            }
        }
    }

    /// The end of a randomized run: adds to the violations `v` a session
    /// that is not `Established`, closes both ends, takes the receives
    /// the target still had posted (each must end `Flushed`, in order;
    /// a registration of their buffers is deregistered), and adds provider
    /// objects left alive after the close (the listener stays) once the
    /// goodbye bound (1 s) passed. `Ok` if nothing was found, else the
    /// violations, one per line.
    ///
    /// # Errors
    /// The violations, or a close the node refused.
    pub fn close_and_check(&mut self, sim: &mut Sim, mut v: Vec<String>) -> Result<(), String> {
        let state = sim.node(INITIATOR).state(self.session);
        if state != Some(State::Established) {
            v.push(format!("session ended {state:?}"));
        }
        sim.node(INITIATOR)
            .close(self.session)
            .map_err(|e| e.to_string())?;
        if let Some(t) = self.target {
            sim.node(TARGET).close(t).map_err(|e| e.to_string())?;
        }
        sim.run_for(std::time::Duration::from_millis(5));
        // The receives still posted end flushed; a registration of their
        // buffers goes.
        v.extend(self.finish_receives(sim.node(TARGET)));
        // A closed session's transport lingers until its goodbye has left,
        // at most the goodbye bound (`Node::set_goodbye_timeout`, 1 s):
        // the whole bound when the peer silently lost its device and the
        // loss was not noticed yet.
        sim.run_until_cond(std::time::Duration::from_secs(2), |sim| {
            sim.live_objects() == 1
        });
        let live = sim.live_objects();
        if live != 1 {
            v.push(format!(
                "{live} provider objects alive after close (1 expected: the listener)"
            ));
        }
        if v.is_empty() {
            Ok(())
        } else {
            Err(v.join("\n  "))
        }
    }
}
