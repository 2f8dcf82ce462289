//! The workload's books: [`Workload`] submits operations on an initiator's
//! session and accounts for every completion and delivery.

use std::collections::{BTreeMap, BTreeSet};

use relink::{
    BufferToken, Completion, LocalRange, Node, OpClass, OpError, OpId, OpKind, Outcome, Seq,
    SessionHandle, SubmitError,
};
use relink_fabric::{Memory, Timestamp};

use super::checks::secs;
use super::layout::{
    ATOMIC_SLOTS, BLOCK, BLOCKS, COUNTER, READ_SLOTS, RESULTS, SINK, SOURCE, STAGING, TARGET_DATA,
};
use super::payload::{addend, message, mix, parse_message, pattern};
use super::records::{Detail, Fetched, FromMemory, NO_RESULT};
use super::staging::{holds_poison, Staged, Staging};
use super::tally::{Class, Problem, Tally, Window};
use crate::sim::Sim;

/// Per block: what the target must hold.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Block {
    /// Version of the last write that completed `Success`.
    pub(crate) good: Option<u64>,
    /// Versions handed out.
    next: u64,
    /// An operation on this block is pending.
    busy: bool,
    /// A write to it ended without `Success`: by contract the range is
    /// undefined (old or new bytes); `(old, new)` versions.
    pub(crate) undefined: Option<(Option<u64>, u64)>,
}

/// One session's workload and its books: what was submitted, what each
/// operation must produce, and everything seen since.
///
/// Drive it by submitting ([`top_up`](Self::top_up) to fill the
/// [`Window`], or one operation at a time with [`send`](Self::send),
/// [`write`](Self::write), [`read`](Self::read),
/// [`fetch_add`](Self::fetch_add)) and by handing it what the nodes report
/// ([`collect_from`](Self::collect_from), or
/// [`drain_completions`](Self::drain_completions) and
/// [`drain_deliveries`](Self::drain_deliveries)); then check it (the
/// `check_*` functions of this module, or
/// [`check_survived_on`](Self::check_survived_on) and
/// [`check_common`](Self::check_common)).
pub struct Workload {
    /// Short name of the session in reports ("A", "B"); its first byte
    /// also keys the message payloads, so two workloads of one seed send
    /// different bytes.
    pub name: &'static str,
    pub(crate) seed: u64,
    stream: u64,
    window: Window,
    /// The initiator's session: every operation is submitted on it.
    pub session: SessionHandle,
    /// The target's session, where messages are delivered; `None` until
    /// the target's node accepted it (then [`collect_from`](Self::collect_from)
    /// takes it from [`Node::accept`]).
    pub target: Option<SessionHandle>,
    /// No more submissions by [`top_up`](Self::top_up) and
    /// [`burst`](Self::burst): set by the application (closed, gave up,
    /// the run is ending) or when the node refused a submission.
    pub stopped: bool,
    pub(crate) pending: BTreeMap<OpId, Detail>,
    pending_by_class: BTreeMap<Class, usize>,
    /// Every completed operation with its outcome.
    pub(crate) outcomes: BTreeMap<OpId, (Class, Outcome)>,
    /// Submissions and outcomes, per kind of operation.
    pub tally: BTreeMap<Class, Tally>,
    /// Message op ids, by message index.
    pub(crate) sent: Vec<OpId>,
    /// Message indexes delivered at the target, in delivery order.
    pub(crate) received: Vec<u64>,
    /// The sequence number of each delivery of `received`.
    pub(crate) received_seqs: Vec<Seq>,
    last_seq: Seq,
    /// The messages sent from registered memory, and how.
    pub(crate) from_memory: FromMemory,
    /// The staging areas of messages from registered memory; `None` while
    /// the session has no staging regions ([`STAGING`]).
    staging: Option<Staging>,
    /// Messages from registered memory in flight: their staging space.
    staged: BTreeMap<OpId, Staged>,
    /// The session fails queued operations fast
    /// ([`Policy::fast_io_fail_tmo`](relink::Policy::fast_io_fail_tmo)):
    /// a run that survived may hold `Failed(FastFail)` and `Indeterminate`
    /// messages ([`allow_fast_fail`](Self::allow_fast_fail)).
    pub(crate) fast_fail: bool,
    pub(crate) blocks: Vec<Block>,
    write_cursor: u64,
    read_cursor: u64,
    free_read_slots: Vec<u64>,
    free_atomic_slots: Vec<u64>,
    atomics: u64,
    /// Sum of the addends of `Success` / `Indeterminate{Some(true)}` atomics.
    pub(crate) certain: u64,
    /// Addends of `Indeterminate{None}` atomics.
    pub(crate) maybe: Vec<u64>,
    /// Old values returned by successful atomics.
    pub(crate) fetched: Vec<Fetched>,
    /// Successful atomics whose result slot still held [`NO_RESULT`] when
    /// they completed: the provider reported success without writing
    /// the old value.
    pub(crate) unwritten: Vec<Fetched>,
    /// Why the provider may complete an atomic without writing its result
    /// (a known provider defect): such completions are then a figure of
    /// the atomics check, not a failure.
    pub(crate) unwritten_excused: Option<&'static str>,
    /// Contexts handed out so far (each operation is submitted with its own).
    contexts: u64,
    /// Per pending operation: the context it was submitted with and the
    /// length its completion must report.
    expected: BTreeMap<OpId, (u64, u64)>,
    /// Per class, the last operation that completed `Success` (the order
    /// check: within a class, successes complete in submission order).
    last_success: BTreeMap<Class, OpId>,
    /// The last message that completed (messages complete in order, any
    /// outcome).
    last_message: Option<OpId>,
    /// Successful READs whose bytes matched the block's expected pattern.
    pub reads_verified: u64,
    /// Successful READs that returned other bytes.
    pub(crate) read_mismatches: u64,
    /// Completions of an operation that had already completed.
    pub(crate) completed_twice: u64,
    /// Completions of an operation never submitted.
    pub(crate) completed_unknown: u64,
    /// Problems, in the order they were found.
    pub problems: Vec<Problem>,
    /// Ops pending when the application closed the session (each must
    /// still complete, once); `None` if it was not closed.
    pub pending_at_close: Option<BTreeSet<OpId>>,
    /// Ops pending when the session gave up; `None` if it did not.
    pub pending_at_give_up: Option<BTreeSet<OpId>>,
    /// Virtual time of every `Success` completion, in order, as of the
    /// drain that took it (for throughput timelines).
    pub completions_at: Vec<Timestamp>,
    source: Option<Memory>,
    sink: Option<Memory>,
    results: Option<Memory>,
}

impl Workload {
    /// A workload on the initiator's `session` of `node`, delivering at
    /// the target's session `target` (`None`: found by
    /// [`collect_from`](Self::collect_from)). One-sided operations need the
    /// session's regions to be [`initiator_regions`](super::initiator_regions)
    /// (and the target's [`target_regions`](super::target_regions)); a
    /// session without them gets only messages.
    pub fn new(
        name: &'static str,
        seed: u64,
        window: Window,
        node: &Node,
        session: SessionHandle,
        target: Option<SessionHandle>,
    ) -> Workload {
        let region = |id| node.region(session, id).ok();
        Workload {
            name,
            seed,
            stream: u64::from(name.as_bytes()[0]),
            window,
            session,
            target,
            stopped: false,
            pending: BTreeMap::new(),
            pending_by_class: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            tally: BTreeMap::new(),
            sent: Vec::new(),
            received: Vec::new(),
            received_seqs: Vec::new(),
            last_seq: Seq(0),
            from_memory: FromMemory::default(),
            staging: staging(node, session),
            staged: BTreeMap::new(),
            fast_fail: false,
            blocks: vec![Block::default(); BLOCKS as usize],
            write_cursor: 0,
            read_cursor: 0,
            free_read_slots: (0..READ_SLOTS).rev().collect(),
            free_atomic_slots: (0..ATOMIC_SLOTS).rev().collect(),
            atomics: 0,
            certain: 0,
            maybe: Vec::new(),
            fetched: Vec::new(),
            unwritten: Vec::new(),
            unwritten_excused: None,
            contexts: 0,
            expected: BTreeMap::new(),
            last_success: BTreeMap::new(),
            last_message: None,
            reads_verified: 0,
            read_mismatches: 0,
            completed_twice: 0,
            completed_unknown: 0,
            problems: Vec::new(),
            pending_at_close: None,
            pending_at_give_up: None,
            completions_at: Vec::new(),
            source: region(SOURCE),
            sink: region(SINK),
            results: region(RESULTS),
        }
    }

    /// The target's session.
    ///
    /// # Panics
    /// If it is not known yet: the workload was made without it and no
    /// [`collect_from`](Self::collect_from) has seen the target accept.
    pub fn target_session(&self) -> SessionHandle {
        self.target
            .expect("the target's session is not accepted yet")
    }

    fn problem(&mut self, now: Timestamp, what: String) {
        self.problems.push(Problem {
            at: secs(now),
            what: format!("{}: {what}", self.name),
        });
    }

    /// Operations submitted and not yet completed.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The ids of the pending operations.
    pub fn pending_ids(&self) -> BTreeSet<OpId> {
        self.pending.keys().copied().collect()
    }

    /// Operations submitted, of every kind.
    pub fn submitted(&self) -> usize {
        self.tally.values().map(|t| t.submitted as usize).sum()
    }

    /// Operations completed (each counted once, whatever its outcome).
    pub fn completed(&self) -> usize {
        self.outcomes.len()
    }

    /// Operations completed `Success`.
    pub fn succeeded(&self) -> usize {
        self.tally.values().map(|t| t.success as usize).sum()
    }

    /// Messages submitted, and messages delivered at the target.
    pub fn messages(&self) -> (usize, usize) {
        (self.sent.len(), self.received.len())
    }

    /// Messages submitted from registered memory
    /// ([`OpKind::MessageFrom`]).
    pub fn messages_from_memory(&self) -> usize {
        self.from_memory.indexes.len()
    }

    /// The errors of the operations that completed `Failed`, in op order.
    pub fn errors(&self) -> Vec<OpError> {
        self.outcomes
            .values()
            .filter_map(|(_, o)| match o {
                Outcome::Failed(e) => Some(*e),
                _ => None,
            })
            .collect()
    }

    /// Completed operations by outcome: `(success, failed, indeterminate)`.
    pub fn outcome_counts(&self) -> (usize, usize, usize) {
        let mut t = (0, 0, 0);
        for (_, o) in self.outcomes.values() {
            match o {
                Outcome::Success { .. } => t.0 += 1,
                Outcome::Failed(_) => t.1 += 1,
                Outcome::Indeterminate { .. } => t.2 += 1,
                _ => t.1 += 1,
            }
        }
        t
    }

    fn in_flight(&self, c: Class) -> usize {
        self.pending_by_class.get(&c).copied().unwrap_or(0)
    }

    /// The context the next operation is submitted with: distinct per
    /// operation, and not simply its id.
    fn next_context(&mut self) -> u64 {
        self.contexts += 1;
        self.contexts.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ self.seed
    }

    fn record(&mut self, op: OpId, d: Detail, context: u64, len: u64) {
        self.expected.insert(op, (context, len));
        self.pending.insert(op, d);
        *self.pending_by_class.entry(d.class()).or_default() += 1;
        self.tally.entry(d.class()).or_default().submitted += 1;
    }

    /// Submit until every kind's window is full, messages first (at most
    /// the window's pace of them), then WRITEs, READs and FETCH_ADDs.
    /// Nothing if [`stopped`](Self::stopped). A submission the node
    /// refuses is recorded as a problem and stops the workload.
    pub fn top_up(&mut self, node: &mut Node) {
        if self.stopped {
            return;
        }
        let now = node.now();
        let mut budget = self.window.pace;
        while self.in_flight(Class::Message) < self.window.messages && budget > 0 {
            match self.submit_message(node) {
                Ok(_) => {}
                Err(e) => return self.refused(now, "send", e),
            }
            budget -= 1;
        }
        while self.in_flight(Class::Write) < self.window.writes {
            match self.submit_write(node, now) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    self.refused(now, "write", e);
                    break;
                }
            }
        }
        while self.in_flight(Class::Read) < self.window.reads {
            match self.submit_read(node, now) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    self.refused(now, "read", e);
                    break;
                }
            }
        }
        while self.in_flight(Class::FetchAdd) < self.window.atomics {
            match self.submit_fetch_add(node) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    self.refused(now, "fetch_add", e);
                    break;
                }
            }
        }
    }

    /// Submit `n` messages regardless of the window (a burst before an
    /// admin close, say); a refusal is a problem and stops the workload.
    pub fn burst(&mut self, node: &mut Node, n: usize) {
        let now = node.now();
        for _ in 0..n {
            if let Err(e) = self.submit_message(node) {
                return self.refused(now, "send", e);
            }
        }
    }

    /// Submit the next message. `None` if the node refused it (a closed or
    /// failed session, a full queue): nothing is recorded then.
    pub fn send(&mut self, node: &mut Node) -> Option<OpId> {
        self.submit_message(node).ok()
    }

    /// Submit a WRITE of a block's next pattern to the next block with no
    /// operation pending. `None` if every block is busy, the initiator has
    /// no source region, or the node refused it.
    pub fn write(&mut self, node: &mut Node) -> Option<OpId> {
        let now = node.now();
        self.submit_write(node, now).ok().flatten()
    }

    /// Submit a READ of the next block that is idle and whose contents are
    /// known, into a free landing slot; its bytes are compared at
    /// completion. `None` if no block or slot is free, or on refusal.
    pub fn read(&mut self, node: &mut Node) -> Option<OpId> {
        let now = node.now();
        self.submit_read(node, now).ok().flatten()
    }

    /// Submit a FETCH_ADD of the next seeded addend to the counter. `None`
    /// if every result slot is taken, or on refusal.
    pub fn fetch_add(&mut self, node: &mut Node) -> Option<OpId> {
        self.submit_fetch_add(node).ok().flatten()
    }

    fn refused(&mut self, now: Timestamp, what: &str, e: SubmitError) {
        self.problem(now, format!("{what} refused: {e}"));
        self.stopped = true;
    }

    /// Submit message number `index` of the stream: as bytes
    /// ([`OpKind::Message`]), or — half of them, when the session has
    /// staging regions with room — from registered memory
    /// ([`OpKind::MessageFrom`]: 1 to 4 ranges of staging space of its own,
    /// possibly in both regions, held until its completion).
    fn submit_message(&mut self, node: &mut Node) -> Result<OpId, SubmitError> {
        let index = self.sent.len() as u64;
        let payload = message(self.seed, self.stream, index);
        let (context, len) = (self.next_context(), payload.len() as u64);
        if self.staging.is_none() {
            self.staging = staging(node, self.session);
        }
        let key = mix(self.seed ^ 0x5e9d_f40b ^ mix(self.stream ^ mix(index ^ 0x57a9)));
        let staged = match self.staging.as_mut() {
            Some(st) if key >> 63 == 0 => {
                let s = st.stage(key, index, &payload);
                if s.is_none() {
                    self.from_memory.no_room += 1;
                }
                s
            }
            _ => None,
        };
        let Some((staged, local)) = staged else {
            let op = node.submit_with(self.session, OpKind::Message { payload }, context)?;
            self.sent.push(op);
            self.record(op, Detail::Message, context, len);
            return Ok(op);
        };
        match node.submit_with(self.session, OpKind::MessageFrom { local }, context) {
            Ok(op) => {
                self.sent.push(op);
                self.record(op, Detail::Message, context, len);
                self.from_memory.count(&staged);
                self.staged.insert(op, staged);
                Ok(op)
            }
            Err(e) => {
                if let Some(st) = self.staging.as_mut() {
                    st.release(staged, &payload);
                }
                Err(e)
            }
        }
    }

    fn submit_write(
        &mut self,
        node: &mut Node,
        now: Timestamp,
    ) -> Result<Option<OpId>, SubmitError> {
        if self.source.is_none() {
            self.source = node.region(self.session, SOURCE).ok();
        }
        let Some(source) = self.source.clone() else {
            return Ok(None);
        };
        let Some(block) = (0..BLOCKS)
            .map(|i| (self.write_cursor + i) % BLOCKS)
            .find(|b| !self.blocks[*b as usize].busy)
        else {
            return Ok(None);
        };
        self.write_cursor = (block + 1) % BLOCKS;
        let b = &mut self.blocks[block as usize];
        let version = b.next;
        b.next += 1;
        b.busy = true;
        let off = block * BLOCK;
        if let Err(e) = source.write(off as usize, &pattern(self.seed, block, Some(version))) {
            self.problem(now, format!("source buffer: {e}"));
            return Ok(None);
        }
        let local = LocalRange {
            region: SOURCE,
            offset: off,
            len: BLOCK as u32,
        };
        let remote = BufferToken {
            region: TARGET_DATA,
            offset: off,
        };
        let context = self.next_context();
        match node.submit_with(
            self.session,
            OpKind::Write {
                local: local.into(),
                remote,
            },
            context,
        ) {
            Ok(op) => {
                self.record(op, Detail::Write { block, version }, context, BLOCK);
                Ok(Some(op))
            }
            Err(e) => {
                self.blocks[block as usize].busy = false;
                Err(e)
            }
        }
    }

    fn submit_read(
        &mut self,
        node: &mut Node,
        now: Timestamp,
    ) -> Result<Option<OpId>, SubmitError> {
        if self.sink.is_none() {
            self.sink = node.region(self.session, SINK).ok();
        }
        let Some(sink) = self.sink.clone() else {
            return Ok(None);
        };
        let Some(block) = (0..BLOCKS)
            .map(|i| (self.read_cursor + i) % BLOCKS)
            .find(|b| {
                let b = &self.blocks[*b as usize];
                !b.busy && b.undefined.is_none()
            })
        else {
            return Ok(None);
        };
        let Some(slot) = self.free_read_slots.pop() else {
            return Ok(None);
        };
        // Spread reads over the blocks, a prime stride apart.
        self.read_cursor = (block + 37) % BLOCKS;
        let b = &mut self.blocks[block as usize];
        b.busy = true;
        let expect = b.good;
        // Poison the slot so that a read that did not land cannot pass.
        if let Err(e) = sink.write((slot * BLOCK) as usize, &[0xee; BLOCK as usize]) {
            self.problem(now, format!("sink buffer: {e}"));
        }
        let local = LocalRange {
            region: SINK,
            offset: slot * BLOCK,
            len: BLOCK as u32,
        };
        let remote = BufferToken {
            region: TARGET_DATA,
            offset: block * BLOCK,
        };
        let context = self.next_context();
        match node.submit_with(
            self.session,
            OpKind::Read {
                local: local.into(),
                remote,
            },
            context,
        ) {
            Ok(op) => {
                self.record(
                    op,
                    Detail::Read {
                        block,
                        expect,
                        slot,
                    },
                    context,
                    BLOCK,
                );
                Ok(Some(op))
            }
            Err(e) => {
                self.blocks[block as usize].busy = false;
                self.free_read_slots.push(slot);
                Err(e)
            }
        }
    }

    /// The provider under this workload may complete a FETCH_ADD `Success`
    /// without writing its old value (`why`: the known defect, e.g.
    /// Soft-RoCE's after a lost packet; relink cannot see it). The atomics
    /// check then counts such completions in its text instead of failing;
    /// everything else it checks still holds (each addend applied once,
    /// every written old value distinct and in range).
    pub fn excuse_unwritten_atomic_results(&mut self, why: &'static str) {
        self.unwritten_excused = Some(why);
    }

    fn submit_fetch_add(&mut self, node: &mut Node) -> Result<Option<OpId>, SubmitError> {
        if self.results.is_none() {
            self.results = node.region(self.session, RESULTS).ok();
        }
        if self.results.is_none() {
            return Ok(None);
        }
        let Some(slot) = self.free_atomic_slots.pop() else {
            return Ok(None);
        };
        // The slot shows whether the provider wrote this operation's result
        // (it holds the previous operation's old value otherwise).
        if let Some(m) = &self.results {
            let _ = m.write_u64((slot * 8) as usize, NO_RESULT);
        }
        let add = addend(self.seed, self.atomics);
        self.atomics += 1;
        let local = LocalRange {
            region: RESULTS,
            offset: slot * 8,
            len: 8,
        };
        let remote = BufferToken {
            region: TARGET_DATA,
            offset: COUNTER,
        };
        let context = self.next_context();
        match node.submit_with(
            self.session,
            OpKind::FetchAdd { local, remote, add },
            context,
        ) {
            Ok(op) => {
                self.record(op, Detail::FetchAdd { add, slot }, context, 8);
                Ok(Some(op))
            }
            Err(e) => {
                self.free_atomic_slots.push(slot);
                Err(e)
            }
        }
    }

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
            self.check_completion(&c, now);
            self.complete(c.op, c.outcome, now);
        }
    }

    /// Take every message the target's node delivered for this workload
    /// (nothing while the target's session is not known).
    pub fn drain_deliveries(&mut self, target: &mut Node) {
        let Some(t) = self.target else {
            return;
        };
        let now = target.now();
        while let Some((seq, payload)) = target.poll_delivery(t) {
            self.deliver(seq, &payload, now);
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
        let last = if d.class() == Class::Message {
            self.last_message.replace(c.op)
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
            } => {
                self.blocks[block as usize].busy = false;
                if outcome.is_success() {
                    let got = self
                        .sink
                        .as_ref()
                        .and_then(|m| m.read_vec((slot * BLOCK) as usize, BLOCK as usize).ok());
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
        let payload = message(self.seed, self.stream, index);
        let intact = self
            .staging
            .as_mut()
            .is_some_and(|st| st.release(staged, &payload));
        if !intact {
            self.problem(
                now,
                format!(
                    "message {index} ({op}, from registered memory) completed {outcome:?} with its staging bytes changed before the completion: something wrote into the memory of a SEND"
                ),
            );
        }
    }

    /// A delivery at the target: after the previous one (sequence numbers
    /// rise; they may skip the number of a message that completed
    /// `Indeterminate` and was never delivered: `check_messages` accounts
    /// for every gap), with the exact bytes of the message it carries.
    fn deliver(&mut self, seq: Seq, payload: &[u8], now: Timestamp) {
        if seq <= self.last_seq {
            self.problem(
                now,
                format!(
                    "delivery {seq} after {}: a duplicate or out of order",
                    self.last_seq
                ),
            );
        }
        self.last_seq = self.last_seq.max(seq);
        let poison = if holds_poison(payload) {
            " (it holds the poison written into a message's staging memory at its completion: bytes read after the completion)"
        } else {
            ""
        };
        let Some(index) = parse_message(payload) else {
            self.problem(
                now,
                format!("delivery {seq}: bad checksum or framing{poison}"),
            );
            return;
        };
        if payload != message(self.seed, self.stream, index) {
            self.problem(
                now,
                format!("delivery {seq}: payload of message {index} corrupted{poison}"),
            );
        }
        self.received.push(index);
        self.received_seqs.push(seq);
    }

    /// The outcome of message `index`, if it completed.
    pub(crate) fn message_outcome(&self, index: u64) -> Option<Outcome> {
        let op = self.sent.get(usize::try_from(index).ok()?)?;
        self.outcomes.get(op).map(|(_, o)| *o)
    }

    /// The session fails queued operations fast
    /// ([`Policy::fast_io_fail_tmo`](relink::Policy::fast_io_fail_tmo)):
    /// [`check_survived_on`](Self::check_survived_on) then accepts what a
    /// fast failure ends operations with (`Failed(FastFail)`; a posted
    /// message `Indeterminate`, delivered at most once and only if the
    /// peer had it before the loss; a WRITE's range undefined).
    pub fn allow_fast_fail(&mut self) {
        self.fast_fail = true;
    }

    /// Messages in flight from registered memory, and the staging bytes
    /// they hold.
    pub fn staged(&self) -> (usize, u64) {
        let held = self
            .staging
            .as_ref()
            .map_or(0, |s| s.capacity() - s.free_bytes());
        (self.staged.len(), held)
    }
}

/// The staging areas of `session` ([`STAGING`]), those it has.
fn staging(node: &Node, session: SessionHandle) -> Option<Staging> {
    Staging::new(
        STAGING
            .iter()
            .filter_map(|id| Some((*id, node.region(session, *id).ok()?)))
            .collect(),
    )
}
