//! Completion accounting: [`Workload`] takes what the nodes report
//! ([`collect_from`](Workload::collect_from)) and checks and books every
//! completion — its context and length, its order, the flushes' fence,
//! its outcome — releasing what the operation held (its block, slot or
//! staging space, poisoned).

use relink::{Completion, Node, OpClass, OpError, OpId, Outcome};
use relink_fabric::Timestamp;

use super::books::Workload;
use super::layout::BLOCK;
use super::payload::{imm_bytes, message, pattern};
use super::records::{Detail, Fetched, NO_RESULT};
use super::tally::Class;
use crate::sim::Sim;

impl Workload {
    /// Take what the nodes report for this workload: completions from the
    /// initiator's node, deliveries from the target's (first accepting the
    /// target's session if it is not known yet). Any two nodes, on any
    /// provider.
    pub fn collect_from(&mut self, initiator: &mut Node, target: &mut Node) {
        if self.target.is_none() {
            self.target = target.accept().map(|a| a.session);
        }
        self.drain_completions(initiator);
        self.drain_deliveries(target);
    }

    /// [`collect_from`](Self::collect_from) the simulation's two nodes.
    pub fn collect(&mut self, sim: &mut Sim) {
        let (initiator, target) = sim.pair();
        self.collect_from(initiator, target);
    }

    /// Take every completion the initiator's node holds for this workload.
    pub fn drain_completions(&mut self, initiator: &mut Node) {
        let now = initiator.now();
        while let Some(c) = initiator.poll_completion(self.session) {
            self.check_fence(&c, now);
            self.check_completion(&c, now);
            self.complete(c.op, c.outcome, now);
        }
    }

    /// The fence of flushes, at each completion in the order taken: an
    /// operation completes after every flush submitted before it, a flush
    /// after every operation submitted before it and before every one
    /// submitted after it.
    fn check_fence(&mut self, c: &Completion, now: Timestamp) {
        let Some(d) = self.pending.get(&c.op).copied() else {
            return; // a second or unknown completion: `complete` reports it
        };
        let mut wrong = Vec::new();
        if let Some(f) = self.pending_flushes.range(..c.op).next() {
            wrong.push(format!(
                "{} ({:?}, {:?}) completed before the flush {f} submitted ahead of it",
                c.op,
                d.class(),
                c.outcome
            ));
        }
        if matches!(d, Detail::Flush) {
            if let Some((e, ed)) = self.pending.range(..c.op).next() {
                wrong.push(format!(
                    "flush {} ({:?}) completed before {e} ({:?}), submitted ahead of it",
                    c.op,
                    c.outcome,
                    ed.class()
                ));
            }
            if self.max_completed > c.op {
                wrong.push(format!(
                    "flush {} ({:?}) completed after {}, submitted behind it",
                    c.op, c.outcome, self.max_completed
                ));
            }
            if wrong.is_empty() {
                self.flushes_in_place += 1;
            }
            self.pending_flushes.remove(&c.op);
        }
        self.max_completed = self.max_completed.max(c.op);
        for w in wrong {
            self.problem(now, w);
        }
    }

    /// What a completion says beyond its outcome — the context, class and
    /// length of its operation — and its place in the order
    /// ([`relink::Completion`]'s: messages in submission order, and within
    /// a class of one-sided operations the successes).
    fn check_completion(&mut self, c: &Completion, now: Timestamp) {
        let Some(d) = self.pending.get(&c.op).copied() else {
            return; // a second or unknown completion: `complete` reports it
        };
        let (context, len) = self.expected.remove(&c.op).unwrap_or_default();
        let class = match d.class() {
            Class::Message => OpClass::Message,
            Class::Write => OpClass::Write,
            Class::Read => OpClass::Read,
            Class::FetchAdd => OpClass::FetchAdd,
            Class::WriteImm => OpClass::WriteImm,
            Class::Flush => OpClass::Flush,
        };
        if (c.context, c.class, c.len) != (context, class, len) {
            self.problem(
                now,
                format!(
                    "{} completed with context {:#x}, class {:?}, length {}; submitted with {context:#x}, {class:?}, {len}",
                    c.op, c.context, c.class, c.len
                ),
            );
        }
        // The sequence (messages and WRITEs with immediate data) completes
        // in order, any outcome — but for one failed alone when it was to
        // be posted (a token not advertised, too long for the peer): that
        // one completes ahead of earlier ones, never after later ones.
        let alone = matches!(
            c.outcome,
            Outcome::Failed(OpError::Remote(_) | OpError::TooLargeForPeer)
        );
        let last = if matches!(d.class(), Class::Message | Class::WriteImm) {
            if alone {
                self.last_message
            } else {
                self.last_message.replace(c.op)
            }
        } else if c.outcome.is_success() {
            self.last_success.insert(d.class(), c.op)
        } else {
            None
        };
        if let Some(last) = last.filter(|last| *last > c.op) {
            self.problem(
                now,
                format!(
                    "{} ({}, {:?}) completed after {last}, submitted later: out of order",
                    c.op,
                    class.name(),
                    c.outcome
                ),
            );
        }
    }

    fn complete(&mut self, op: OpId, outcome: Outcome, now: Timestamp) {
        let Some(d) = self.pending.remove(&op) else {
            if self.outcomes.contains_key(&op) {
                self.completed_twice += 1;
                self.problem(now, format!("{op} completed twice ({outcome:?})"));
            } else {
                self.completed_unknown += 1;
                self.problem(now, format!("completion of unknown {op} ({outcome:?})"));
            }
            return;
        };
        self.outcomes.insert(op, (d.class(), outcome));
        *self.pending_by_class.entry(d.class()).or_default() -= 1;
        self.tally.entry(d.class()).or_default().count(outcome);
        if outcome.is_success() {
            self.completions_at.push(now);
        }
        let indeterminate = matches!(outcome, Outcome::Indeterminate { .. });
        match d {
            Detail::Message => self.unstage(op, outcome, now),
            Detail::WriteImm { index } => {
                self.unstage(op, outcome, now);
                self.imm_completed(index, outcome, now);
            }
            Detail::Flush => {
                if !matches!(outcome, Outcome::Success { .. } | Outcome::Failed(_)) {
                    self.problem(
                        now,
                        format!("flush {op} completed {outcome:?}: a flush succeeds or fails"),
                    );
                }
            }
            Detail::Write { block, version } => {
                let b = &mut self.blocks[block as usize];
                b.busy = false;
                if outcome.is_success() {
                    b.good = Some(version);
                    b.undefined = None;
                } else {
                    b.undefined = Some((b.good, version));
                }
                if indeterminate {
                    self.problem(now, format!("WRITE {op} completed {outcome:?}: a write is idempotent and never indeterminate"));
                }
            }
            Detail::Read {
                block,
                expect,
                slot,
                scatter,
            } => {
                self.blocks[block as usize].busy = false;
                if outcome.is_success() {
                    // The block, from its pieces in block order.
                    let got = self.sink.as_ref().and_then(|m| {
                        let whole = [(0, 0, BLOCK)];
                        let mut v = Vec::with_capacity(BLOCK as usize);
                        let pieces: Vec<(u64, u64, u64)> = match &scatter {
                            Some(p) => p.iter().collect(),
                            None => whole.to_vec(),
                        };
                        for (at, _, len) in pieces {
                            v.extend(
                                m.read_vec((slot * BLOCK + at) as usize, len as usize)
                                    .ok()?,
                            );
                        }
                        Some(v)
                    });
                    if got.as_deref() == Some(&pattern(self.seed, block, expect)[..]) {
                        self.reads_verified += 1;
                    } else {
                        self.read_mismatches += 1;
                        self.problem(
                            now,
                            format!(
                                "READ {op} of block {block} returned wrong bytes (expected version {expect:?})"
                            ),
                        );
                    }
                }
                if indeterminate {
                    self.problem(now, format!("READ {op} completed {outcome:?}: a read is idempotent and never indeterminate"));
                }
                self.free_read_slots.push(slot);
            }
            Detail::FetchAdd { add, slot } => {
                match outcome {
                    Outcome::Success { replayed } => {
                        self.certain += add;
                        if let Some(old) = self
                            .results
                            .as_ref()
                            .and_then(|m| m.read_u64((slot * 8) as usize).ok())
                        {
                            let f = Fetched {
                                op,
                                old,
                                add,
                                slot,
                                replayed,
                                at: now,
                            };
                            if old == NO_RESULT {
                                self.unwritten.push(f);
                            } else {
                                self.fetched.push(f);
                            }
                        }
                    }
                    Outcome::Indeterminate {
                        executed: Some(true),
                    } => self.certain += add,
                    Outcome::Indeterminate { .. } => self.maybe.push(add),
                    Outcome::Failed(_) => {}
                    other => self.problem(
                        now,
                        format!("FETCH_ADD {op} completed {other:?}, an outcome the oracle does not know"),
                    ),
                }
                self.free_atomic_slots.push(slot);
            }
        }
    }

    /// The completion of message `op`: if it was sent from registered
    /// memory, its staging bytes must still be what was written at submit;
    /// then they are overwritten with poison (the application may change
    /// them now, and a replay that reads them after the completion must
    /// not go unnoticed) and the space is freed.
    fn unstage(&mut self, op: OpId, outcome: Outcome, now: Timestamp) {
        let Some(staged) = self.staged.remove(&op) else {
            return;
        };
        let index = staged.index;
        let payload = match self.imms.get(&index) {
            Some(i) => imm_bytes(self.seed, self.stream, index, i.len as usize),
            None => message(self.seed, self.stream, index),
        };
        let intact = self
            .staging
            .as_mut()
            .is_some_and(|st| st.release(staged, &payload));
        if !intact {
            self.problem(
                now,
                format!(
                    "{} {index} ({op}, from registered memory) completed {outcome:?} with its staging bytes changed before the completion: something wrote into the memory of an operation in flight",
                    if self.imms.contains_key(&index) { "WRITE with immediate data" } else { "message" }
                ),
            );
        }
    }
}
