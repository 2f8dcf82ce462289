//! The workload's books: [`Workload`] submits operations on an initiator's
//! session and accounts for every completion and delivery.

use std::collections::{BTreeMap, BTreeSet};

use relink::{
    BufferToken, Completion, LocalRange, LocalSgl, Node, OpClass, OpError, OpId, OpKind, Outcome,
    RegionId, Seq, SessionHandle, SubmitError, Written,
};
use relink_fabric::{Memory, Timestamp};

use super::checks::secs;
use super::layout::{
    ATOMIC_SLOTS, BLOCK, BLOCKS, COUNTER, IMM_AREA, IMM_SLOT, IMM_SLOTS, READ_SLOTS, RESULTS, SINK,
    SOURCE, STAGING, TARGET_DATA, TARGET_LEN,
};
use super::payload::{addend, imm_bytes, message, mix, parse_message, pattern};
use super::receives::{ReceiveFigures, Receives};
use super::records::{Detail, Fetched, FromMemory, Imm, Pieces, NO_RESULT};
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

/// What a workload exercised of the less common paths — figures a
/// randomized suite sums over its seeds to show (and to insist) that
/// they ran.
#[derive(Debug, Clone, Copy, Default)]
pub struct Coverage {
    /// Workloads summed.
    pub workloads: u64,
    /// WRITEs submitted gathering 2 to 4 ranges.
    pub writes_gathered: u64,
    /// READs submitted scattering over 2 to 4 ranges (their bytes
    /// checked when `Success`).
    pub reads_scattered: u64,
    /// WRITEs with immediate data submitted.
    pub imms: u64,
    /// Their notices taken with the WRITE's bytes in its landing slot.
    pub notices_verified: u64,
    /// WRITEs with immediate data to a token not advertised that failed
    /// alone (`Remote(REM_ACCESS_ERR)`).
    pub imms_refused: u64,
    /// WRITEs with immediate data completed `Indeterminate`.
    pub imms_indeterminate: u64,
    /// Flushes that completed in their place.
    pub flushes_in_place: u64,
    /// Flushes that completed `Failed`.
    pub flushes_failed: u64,
    /// Workloads whose target posted receives.
    pub posting: u64,
    /// Of which in a registration of the target's node.
    pub posting_registered: u64,
    /// What the posted receives came to.
    pub receives: ReceiveFigures,
}

impl Coverage {
    /// The names of the figures that are zero: paths nothing exercised.
    pub fn unexercised(&self) -> Vec<&'static str> {
        let r = &self.receives;
        [
            ("WRITEs gathering 2-4 ranges", self.writes_gathered),
            ("READs scattering over 2-4 ranges", self.reads_scattered),
            ("notices verified", self.notices_verified),
            ("WRITEs with immediate data refused", self.imms_refused),
            (
                "WRITEs with immediate data indeterminate",
                self.imms_indeterminate,
            ),
            ("flushes in place", self.flushes_in_place),
            ("flushes failed", self.flushes_failed),
            ("receives in a registration", self.posting_registered),
            (
                "receives in the data region",
                self.posting - self.posting_registered,
            ),
            ("messages received", r.messages),
            ("messages truncated", r.truncated),
            ("notices received", r.notices),
            ("polled while no buffer was posted", r.polled),
            ("whiles without reposting", r.holds),
            ("receives flushed", r.flushed),
        ]
        .into_iter()
        .filter(|(_, n)| *n == 0)
        .map(|(name, _)| name)
        .collect()
    }
}

impl std::ops::AddAssign for Coverage {
    fn add_assign(&mut self, o: Coverage) {
        self.workloads += o.workloads;
        self.writes_gathered += o.writes_gathered;
        self.reads_scattered += o.reads_scattered;
        self.imms += o.imms;
        self.notices_verified += o.notices_verified;
        self.imms_refused += o.imms_refused;
        self.imms_indeterminate += o.imms_indeterminate;
        self.flushes_in_place += o.flushes_in_place;
        self.flushes_failed += o.flushes_failed;
        self.posting += o.posting;
        self.posting_registered += o.posting_registered;
        self.receives += o.receives;
    }
}

/// What became of one operation of the sequence (a message or a WRITE
/// with immediate data): [`Workload::fate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fate {
    /// A WRITE with immediate data (else a message).
    pub write_imm: bool,
    /// Sent from registered memory (a message's staging space, or a WRITE
    /// with immediate data's).
    pub from_memory: bool,
    /// The target took it (the message, or the notice).
    pub delivered: bool,
    /// Its outcome, if it completed.
    pub outcome: Option<Outcome>,
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
    /// The op ids of the sequence — messages and WRITEs with immediate
    /// data, which share the sequence numbers — by place (a message's
    /// index is its place).
    pub(crate) sent: Vec<OpId>,
    /// Places of the sequence delivered at the target (a message, or the
    /// notice of a WRITE with immediate data), in delivery order.
    pub(crate) received: Vec<u64>,
    /// The sequence number of each delivery of `received`.
    pub(crate) received_seqs: Vec<Seq>,
    last_seq: Seq,
    /// The messages sent from registered memory, and how.
    pub(crate) from_memory: FromMemory,
    /// The staging areas of messages from registered memory; `None` while
    /// the session has no staging regions ([`STAGING`]).
    staging: Option<Staging>,
    /// Messages (and WRITEs with immediate data) from registered memory
    /// in flight: their staging space.
    staged: BTreeMap<OpId, Staged>,
    /// The WRITEs with immediate data, by place in the sequence.
    pub(crate) imms: BTreeMap<u64, Imm>,
    /// What a WRITE with immediate data's `imm` is: its place, XOR this.
    imm_mask: u32,
    /// Landing slots of WRITEs with immediate data not held.
    free_imm_slots: Vec<u64>,
    /// Slots of WRITEs with immediate data that completed `Indeterminate`
    /// and whose notice was not taken (yet), by place: held until the
    /// notice or a later place is taken.
    imm_unsure: BTreeSet<u64>,
    /// WRITEs with immediate data not submitted for want of staging room.
    pub(crate) imm_no_room: u64,
    /// Notices taken whose landing slot held exactly the WRITE's bytes.
    pub(crate) notices_verified: u64,
    /// WRITEs and READs use 2 to 4 ranges for about half of them
    /// ([`scatter_gather`](Self::scatter_gather)).
    sgl: bool,
    /// WRITEs submitted gathering 2 to 4 ranges.
    pub(crate) writes_gathered: u64,
    /// READs submitted scattering over 2 to 4 ranges.
    pub(crate) reads_scattered: u64,
    /// Flushes submitted and not completed.
    pending_flushes: BTreeSet<OpId>,
    /// The highest op completed so far.
    max_completed: OpId,
    /// Flushes that completed in their place: after every operation
    /// submitted before, before every one submitted after.
    pub(crate) flushes_in_place: u64,
    /// The target's data region, for the notices' checks.
    target_data: Option<Memory>,
    /// How the target takes deliveries: polling, or posted receives.
    pub(crate) receives: Receives,
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
            imms: BTreeMap::new(),
            imm_mask: mix(seed ^ 0x1a7e_a5c5) as u32,
            free_imm_slots: (0..IMM_SLOTS).rev().collect(),
            imm_unsure: BTreeSet::new(),
            imm_no_room: 0,
            notices_verified: 0,
            sgl: false,
            writes_gathered: 0,
            reads_scattered: 0,
            pending_flushes: BTreeSet::new(),
            max_completed: OpId(0),
            flushes_in_place: 0,
            target_data: None,
            receives: Receives::Poll,
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

    pub(crate) fn problem(&mut self, now: Timestamp, what: String) {
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

    /// Messages submitted, and messages delivered at the target (WRITEs
    /// with immediate data and their notices aside: [`notices`](Self::notices)).
    pub fn messages(&self) -> (usize, usize) {
        let noticed = self.imms.values().filter(|i| i.noticed).count();
        (
            self.sent.len() - self.imms.len(),
            self.received.len() - noticed,
        )
    }

    /// WRITEs with immediate data submitted, and their notices taken at
    /// the target.
    pub fn notices(&self) -> (usize, usize) {
        let noticed = self.imms.values().filter(|i| i.noticed).count();
        (self.imms.len(), noticed)
    }

    /// What became of `op`, a message or a WRITE with immediate data of
    /// this workload; `None` for any other operation.
    pub fn fate(&self, op: OpId) -> Option<Fate> {
        let index = self.sent.binary_search(&op).ok()? as u64;
        let write_imm = self.imms.contains_key(&index);
        Some(Fate {
            write_imm,
            from_memory: write_imm || self.from_memory.indexes.contains(&index),
            delivered: self.received.contains(&index),
            outcome: self.outcomes.get(&op).map(|(_, o)| *o),
        })
    }

    /// What this workload exercised of the less common paths.
    pub fn coverage(&self) -> Coverage {
        let imm = self
            .tally
            .get(&Class::WriteImm)
            .copied()
            .unwrap_or_default();
        let flush = self.tally.get(&Class::Flush).copied().unwrap_or_default();
        let refused = self
            .imms
            .values()
            .filter(|i| {
                matches!(
                    i.outcome,
                    Some(Outcome::Failed(OpError::Remote(
                        relink::WcStatus::RemAccessErr
                    )))
                )
            })
            .count() as u64;
        let (posting, registered, receives) = self.receive_pool();
        Coverage {
            workloads: 1,
            writes_gathered: self.writes_gathered,
            reads_scattered: self.reads_scattered,
            imms: imm.submitted,
            notices_verified: self.notices_verified,
            imms_refused: refused,
            imms_indeterminate: imm.executed + imm.unknown,
            flushes_in_place: self.flushes_in_place,
            flushes_failed: flush.failed_gave_up + flush.failed_disconnected + flush.failed_other,
            posting: u64::from(posting),
            posting_registered: u64::from(registered),
            receives,
        }
    }

    /// From now on about half of the WRITEs gather their block from 2 to
    /// [`LocalSgl::MAX`] ranges of its source space, laid out in an order
    /// of their own, and about half of the READs scatter it over 2 to 4
    /// ranges of their landing slot: the target's bytes and the READs'
    /// reassembled bytes are checked as before.
    pub fn scatter_gather(&mut self) {
        self.sgl = true;
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

    /// Submit a WRITE with immediate data at the next place of the
    /// sequence (shared with the messages): seeded bytes from staging
    /// space of its own (1 to 4 ranges, poisoned at its completion, as a
    /// message's from registered memory) to a landing slot of its own in
    /// the target's data region, `imm` naming its place. One in 16 goes to
    /// a token the target never advertised (an unknown region, or past the
    /// region's end): it must fail `Remote(REM_ACCESS_ERR)` alone, its
    /// number skipped. `None` if no landing slot or staging room is free,
    /// the session has no staging regions, or on refusal.
    pub fn write_imm(&mut self, node: &mut Node) -> Option<OpId> {
        if self.staging.is_none() {
            self.staging = staging(node, self.session);
        }
        let index = self.sent.len() as u64;
        let key = mix(self.seed ^ 0x1a7e_5eed ^ mix(self.stream ^ mix(index)));
        let r = mix(key ^ 0x17);
        let bad = r % 16 == 0;
        let slot = if bad {
            None
        } else {
            Some(self.free_imm_slots.pop()?)
        };
        // Mostly up to 512 bytes, one in 8 up to a whole slot.
        let len = if (r >> 8) % 8 == 0 {
            2 + (r >> 16) % (IMM_SLOT - 1)
        } else {
            2 + (r >> 16) % 511
        };
        let bytes = imm_bytes(self.seed, self.stream, index, len as usize);
        let staged = self
            .staging
            .as_mut()
            .and_then(|st| st.stage(key, index, &bytes));
        let Some((staged, local)) = staged else {
            self.imm_no_room += 1;
            self.free_imm_slots.extend(slot);
            return None;
        };
        let (region, offset) = match slot {
            Some(s) => (TARGET_DATA, IMM_AREA + s * IMM_SLOT),
            None if (r >> 40) & 1 == 1 => (TARGET_DATA, TARGET_LEN - 1),
            None => (RegionId(999), 0),
        };
        let imm = index as u32 ^ self.imm_mask;
        let context = self.next_context();
        let kind = OpKind::WriteImm {
            local,
            remote: BufferToken { region, offset },
            imm,
        };
        match node.submit_with(self.session, kind, context) {
            Ok(op) => {
                self.sent.push(op);
                self.record(op, Detail::WriteImm { index }, context, len);
                self.staged.insert(op, staged);
                self.imms.insert(
                    index,
                    Imm {
                        op,
                        region,
                        slot,
                        offset,
                        len: len as u32,
                        noticed: false,
                        outcome: None,
                        released: false,
                    },
                );
                Some(op)
            }
            Err(_) => {
                if let Some(st) = self.staging.as_mut() {
                    st.release(staged, &bytes);
                }
                self.free_imm_slots.extend(slot);
                None
            }
        }
    }

    /// Submit a flush ([`OpKind::Flush`]): it must complete after every
    /// operation submitted before it and before every one submitted after
    /// it, in the order the completions are taken (checked as they are).
    /// `None` on refusal.
    pub fn flush(&mut self, node: &mut Node) -> Option<OpId> {
        let context = self.next_context();
        let op = node
            .submit_with(self.session, OpKind::Flush, context)
            .ok()?;
        self.record(op, Detail::Flush, context, 0);
        self.pending_flushes.insert(op);
        Some(op)
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
        let bytes = pattern(self.seed, block, Some(version));
        let context = self.next_context();
        let key = mix(context ^ 0x5ca7_7e12);
        // Whole, or cut into pieces laid out in an order of their own in
        // the block's source space and gathered back in order.
        let pieces = (self.sgl && key & 1 == 1).then(|| Pieces::cut(key >> 1, BLOCK));
        let ranges: Vec<(u64, u64, u64)> = match &pieces {
            Some(p) => p.iter().collect(),
            None => vec![(0, 0, BLOCK)],
        };
        for &(at, from, len) in &ranges {
            let piece = &bytes[from as usize..(from + len) as usize];
            if let Err(e) = source.write((off + at) as usize, piece) {
                self.problem(now, format!("source buffer: {e}"));
                return Ok(None);
            }
        }
        let local = LocalSgl::new(ranges.iter().map(|&(at, _, len)| LocalRange {
            region: SOURCE,
            offset: off + at,
            len: len as u32,
        }))
        .expect("1 to 4 ranges");
        let remote = BufferToken {
            region: TARGET_DATA,
            offset: off,
        };
        match node.submit_with(self.session, OpKind::Write { local, remote }, context) {
            Ok(op) => {
                self.writes_gathered += u64::from(pieces.is_some());
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
        let context = self.next_context();
        let key = mix(context ^ 0x5ca7_7e12);
        let scatter = (self.sgl && key & 1 == 1).then(|| Pieces::cut(key >> 1, BLOCK));
        let local = match &scatter {
            Some(p) => LocalSgl::new(p.iter().map(|(at, _, len)| LocalRange {
                region: SINK,
                offset: slot * BLOCK + at,
                len: len as u32,
            }))
            .expect("2 to 4 ranges"),
            None => LocalRange {
                region: SINK,
                offset: slot * BLOCK,
                len: BLOCK as u32,
            }
            .into(),
        };
        let remote = BufferToken {
            region: TARGET_DATA,
            offset: block * BLOCK,
        };
        match node.submit_with(self.session, OpKind::Read { local, remote }, context) {
            Ok(op) => {
                self.reads_scattered += u64::from(scatter.is_some());
                self.record(
                    op,
                    Detail::Read {
                        block,
                        expect,
                        slot,
                        scatter,
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
            self.check_fence(&c, now);
            self.check_completion(&c, now);
            self.complete(c.op, c.outcome, now);
        }
    }

    /// Take every message and notice of a WRITE with immediate data the
    /// target's node delivered for this workload (nothing while the
    /// target's session is not known): polled, or through the receives
    /// the target posted ([`post_receives`](Self::post_receives)).
    pub fn drain_deliveries(&mut self, target: &mut Node) {
        let Some(t) = self.target else {
            return;
        };
        if self.target_data.is_none() {
            self.target_data = target.region(t, TARGET_DATA).ok();
        }
        if self.receives.posting() {
            self.drain_posted(target, t);
        } else {
            self.take_polled(target, t);
        }
    }

    /// Take what waits in the target's delivery queue, in order: messages
    /// ([`Node::poll_delivery`]) and notices ([`Node::poll_written`]; while
    /// one is next, `poll_delivery` says `None`).
    pub(crate) fn take_polled(&mut self, target: &mut Node, t: SessionHandle) -> u64 {
        let now = target.now();
        let mut took = 0;
        loop {
            if let Some((seq, payload)) = target.poll_delivery(t) {
                self.deliver(seq, &payload, now);
            } else if let Some((seq, w)) = target.poll_written(t) {
                self.notice(seq, w, now);
            } else {
                return took;
            }
            took += 1;
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

    /// A delivery at the target, message or notice: after the previous
    /// one (sequence numbers rise; they may skip the number of a message
    /// that completed `Indeterminate` and was never delivered, or of one
    /// that failed alone: [`check_messages`](super::check_messages)
    /// accounts for every gap).
    fn check_seq(&mut self, seq: Seq, now: Timestamp) {
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
    }

    /// A message delivered at the target, whole: in order
    /// ([`check_seq`](Self::check_seq)), with the exact bytes of the
    /// message it carries.
    pub(crate) fn deliver(&mut self, seq: Seq, payload: &[u8], now: Timestamp) {
        self.check_seq(seq, now);
        let poison = poisoned(payload);
        let Some(index) = parse_message(payload) else {
            self.problem(
                now,
                format!("delivery {seq}: bad checksum or framing{poison}"),
            );
            return;
        };
        if self.imms.contains_key(&index) {
            self.problem(
                now,
                format!(
                    "delivery {seq}: a message of place {index}, a WRITE with immediate data's"
                ),
            );
        } else if payload != message(self.seed, self.stream, index) {
            self.problem(
                now,
                format!("delivery {seq}: payload of message {index} corrupted{poison}"),
            );
        }
        self.take(seq, index);
    }

    /// A message that filled a posted buffer shorter than itself: its
    /// first bytes, `prefix`, must be the start of a longer message sent
    /// (its index, in its first 8 bytes, says which).
    pub(crate) fn deliver_truncated(&mut self, seq: Seq, prefix: &[u8], now: Timestamp) {
        self.check_seq(seq, now);
        let index = prefix
            .get(..8)
            .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
            .filter(|i| *i < self.sent.len() as u64 && !self.imms.contains_key(i));
        let whole = index.map(|i| message(self.seed, self.stream, i));
        match (index, whole) {
            (Some(index), Some(whole))
                if whole.len() > prefix.len() && whole[..prefix.len()] == *prefix =>
            {
                self.take(seq, index);
            }
            _ => {
                let poison = poisoned(prefix);
                self.problem(
                    now,
                    format!(
                        "delivery {seq}: truncated to {} bytes, not the start of a longer message sent (index {index:?}){poison}",
                        prefix.len()
                    ),
                );
            }
        }
    }

    /// The notice of a WRITE with immediate data, taken at the target: in
    /// order ([`check_seq`](Self::check_seq)), once, its `imm` naming a
    /// WRITE with immediate data sent to an advertised token, with the
    /// region, offset and length it was sent to — and its landing slot
    /// holding exactly its bytes now (they landed before the notice; the
    /// slot is its own until its notice and completion).
    pub(crate) fn notice(&mut self, seq: Seq, w: Written, now: Timestamp) {
        self.check_seq(seq, now);
        let index = u64::from(w.imm ^ self.imm_mask);
        let Some(i) = self.imms.get(&index).copied() else {
            self.problem(
                now,
                format!(
                    "notice {seq}: imm {:#x} names no WRITE with immediate data ({w:?})",
                    w.imm
                ),
            );
            return;
        };
        let mut wrong = Vec::new();
        if i.noticed {
            wrong.push("a second notice".to_string());
        }
        if i.slot.is_none() {
            wrong.push("sent to a token the target never advertised".to_string());
        }
        if (w.region, w.offset, w.len) != (i.region, i.offset, i.len) {
            wrong.push(format!(
                "it says {:?} at {} ({} bytes), it was sent to {:?} at {} ({} bytes)",
                w.region, w.offset, w.len, i.region, i.offset, i.len
            ));
        } else if i.slot.is_some() {
            let got = self
                .target_data
                .as_ref()
                .and_then(|m| m.read_vec(w.offset as usize, w.len as usize).ok());
            let want = imm_bytes(self.seed, self.stream, index, i.len as usize);
            match got {
                Some(got) if got == want => self.notices_verified += 1,
                Some(got) => wrong.push(format!(
                    "its landing slot does not hold its bytes when the notice is taken (first difference at byte {}){}",
                    got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0),
                    poisoned(&got)
                )),
                None => wrong.push("the target's data region cannot be read".to_string()),
            }
        }
        for what in wrong {
            self.problem(
                now,
                format!(
                    "notice {seq} of WRITE with immediate data {index} ({}): {what}",
                    i.op
                ),
            );
        }
        if let Some(i) = self.imms.get_mut(&index) {
            i.noticed = true;
        }
        self.take(seq, index);
    }

    /// Place `index` of the sequence taken at the target as `seq`.
    fn take(&mut self, seq: Seq, index: u64) {
        self.received.push(index);
        self.received_seqs.push(seq);
        self.release_imm(index);
        // The unsure ones before it were skipped: never to be noticed.
        let before: Vec<u64> = self.imm_unsure.range(..index).copied().collect();
        for k in before {
            self.release_imm(k);
        }
    }

    /// WRITE with immediate data `index` completed `outcome`.
    fn imm_completed(&mut self, index: u64, outcome: Outcome, now: Timestamp) {
        let Some(i) = self.imms.get_mut(&index) else {
            return;
        };
        i.outcome = Some(outcome);
        let i = *i;
        if i.slot.is_none() && !matches!(outcome, Outcome::Failed(_)) {
            self.problem(
                now,
                format!(
                    "WRITE with immediate data {index} ({}) to a token the target never advertised completed {outcome:?}",
                    i.op
                ),
            );
        }
        if matches!(outcome, Outcome::Indeterminate { .. }) && !i.noticed {
            self.imm_unsure.insert(index);
        }
        self.release_imm(index);
    }

    /// Give WRITE with immediate data `index`'s landing slot back once
    /// nothing can land in it or be read from it any more: completed, and
    /// noticed (a `Success`'s notice is sure to come), failed (never
    /// posted), or `Indeterminate` with a later place taken (skipped).
    fn release_imm(&mut self, index: u64) {
        let later_taken = self.received.last().is_some_and(|l| *l > index);
        let Some(i) = self.imms.get_mut(&index) else {
            return;
        };
        let free = match i.outcome {
            None => false,
            Some(_) if i.noticed => true,
            Some(Outcome::Failed(_)) => true,
            Some(Outcome::Indeterminate { .. }) => later_taken,
            Some(_) => false,
        };
        if free && !i.released {
            i.released = true;
            self.free_imm_slots.extend(i.slot);
            self.imm_unsure.remove(&index);
        }
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
    /// message or WRITE with immediate data `Indeterminate`, delivered at
    /// most once — if from registered memory, only if the peer had it
    /// before the loss; a WRITE's range undefined).
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

/// What a report adds about bytes holding poison.
fn poisoned(bytes: &[u8]) -> &'static str {
    if holds_poison(bytes) {
        " (it holds the poison written into staging memory at an operation's completion: bytes read after the completion)"
    } else {
        ""
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
