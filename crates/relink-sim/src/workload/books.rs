//! The workload's books: [`Workload`]'s state (what was submitted, what
//! each operation must produce, everything seen since), its constructor,
//! its figures and accessors ([`Coverage`], [`Fate`]), and the
//! bookkeeping the other files share (contexts, recording a submission,
//! the session's staging areas). Submission is in `submit.rs`, completion
//! accounting in `completions.rs`, delivery accounting in
//! `deliveries.rs`.

use std::collections::{BTreeMap, BTreeSet};

use relink::{Node, OpError, OpId, Outcome, Seq, SessionHandle};
use relink_fabric::{Memory, Timestamp};

use super::checks::secs;
use super::layout::{ATOMIC_SLOTS, BLOCKS, IMM_SLOTS, READ_SLOTS, RESULTS, SINK, SOURCE, STAGING};
use super::payload::mix;
use super::receives::{ReceiveFigures, Receives};
use super::records::{Detail, Fetched, FromMemory, Imm};
use super::staging::{Staged, Staging};
use super::tally::{Class, Problem, Tally, Window};

/// Per block: what the target must hold.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Block {
    /// Version of the last write that completed `Success`.
    pub(crate) good: Option<u64>,
    /// Versions handed out.
    pub(super) next: u64,
    /// An operation on this block is pending.
    pub(super) busy: bool,
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
    /// Messages the target read itself (`SessionOptions::rendezvous`),
    /// and reads given up with their transport and read again (the
    /// target's counters; filled by the caller).
    pub fetched: u64,
    /// See `fetched`.
    pub fetches_rewound: u64,
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
            ("messages read by the target", self.fetched),
            ("reads given up with their transport", self.fetches_rewound),
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
        self.fetched += o.fetched;
        self.fetches_rewound += o.fetches_rewound;
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
    pub(super) stream: u64,
    pub(super) window: Window,
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
    pub(super) pending_by_class: BTreeMap<Class, usize>,
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
    pub(super) last_seq: Seq,
    /// The sequence number the session had delivered before this
    /// workload's first message ([`continuing`](Self::continuing)):
    /// place `i` is delivered as `base + 1 + i` (less the numbers given
    /// back).
    pub(crate) seq_base: u64,
    /// The messages sent from registered memory, and how.
    pub(crate) from_memory: FromMemory,
    /// The staging areas of messages from registered memory; `None` while
    /// the session has no staging regions ([`STAGING`]).
    pub(super) staging: Option<Staging>,
    /// Messages (and WRITEs with immediate data) from registered memory
    /// in flight: their staging space.
    pub(super) staged: BTreeMap<OpId, Staged>,
    /// The WRITEs with immediate data, by place in the sequence.
    pub(crate) imms: BTreeMap<u64, Imm>,
    /// What a WRITE with immediate data's `imm` is: its place, XOR this.
    pub(super) imm_mask: u32,
    /// Landing slots of WRITEs with immediate data not held.
    pub(super) free_imm_slots: Vec<u64>,
    /// Slots of WRITEs with immediate data that completed `Indeterminate`
    /// and whose notice was not taken (yet), by place: held until the
    /// notice or a later place is taken.
    pub(super) imm_unsure: BTreeSet<u64>,
    /// WRITEs with immediate data not submitted for want of staging room.
    pub(crate) imm_no_room: u64,
    /// Notices taken whose landing slot held exactly the WRITE's bytes.
    pub(crate) notices_verified: u64,
    /// WRITEs and READs use 2 to 4 ranges for about half of them
    /// ([`scatter_gather`](Self::scatter_gather)).
    pub(super) sgl: bool,
    /// WRITEs submitted gathering 2 to 4 ranges.
    pub(crate) writes_gathered: u64,
    /// READs submitted scattering over 2 to 4 ranges.
    pub(crate) reads_scattered: u64,
    /// Flushes submitted and not completed.
    pub(super) pending_flushes: BTreeSet<OpId>,
    /// The highest op completed so far.
    pub(super) max_completed: OpId,
    /// Flushes that completed in their place: after every operation
    /// submitted before, before every one submitted after.
    pub(crate) flushes_in_place: u64,
    /// The target's data region, for the notices' checks.
    pub(super) target_data: Option<Memory>,
    /// How the target takes deliveries: polling, or posted receives.
    pub(crate) receives: Receives,
    /// The session fails queued operations fast
    /// ([`Policy::fast_io_fail_tmo`](relink::Policy::fast_io_fail_tmo)):
    /// a run that survived may hold `Failed(FastFail)` and `Indeterminate`
    /// messages ([`allow_fast_fail`](Self::allow_fast_fail)).
    pub(crate) fast_fail: bool,
    pub(crate) blocks: Vec<Block>,
    pub(super) write_cursor: u64,
    pub(super) read_cursor: u64,
    pub(super) free_read_slots: Vec<u64>,
    pub(super) free_atomic_slots: Vec<u64>,
    pub(super) atomics: u64,
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
    pub(super) expected: BTreeMap<OpId, (u64, u64)>,
    /// Per class, the last operation that completed `Success` (the order
    /// check: within a class, successes complete in submission order).
    pub(super) last_success: BTreeMap<Class, OpId>,
    /// The last message that completed (messages complete in order, any
    /// outcome).
    pub(super) last_message: Option<OpId>,
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
    pub(super) source: Option<Memory>,
    pub(super) sink: Option<Memory>,
    pub(super) results: Option<Memory>,
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
            seq_base: 0,
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

    /// This workload continues a session that already delivered the
    /// messages up to `delivered` (the target's
    /// [`SessionInfo::last_delivered`](relink::SessionInfo::last_delivered))
    /// and has nothing in flight: its first message is delivered as
    /// `delivered + 1`, and so on. For a long run made of workloads one
    /// after another on the same sessions (`relink soak`), each checked
    /// and dropped before the next starts; the target's data region must
    /// then hold zeros again (what a fresh workload expects of blocks it
    /// did not write and of the counter).
    #[must_use]
    pub fn continuing(mut self, delivered: Seq) -> Workload {
        self.seq_base = delivered.0;
        self.last_seq = delivered;
        self
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
            fetched: 0,
            fetches_rewound: 0,
        }
    }

    /// From now on about half of the WRITEs gather their block from 2 to
    /// [`LocalSgl::MAX`](relink::LocalSgl::MAX) ranges of its source
    /// space, laid out in an order of their own, and about half of the
    /// READs scatter it over 2 to 4
    /// ranges of their landing slot: the target's bytes and the READs'
    /// reassembled bytes are checked as before.
    pub fn scatter_gather(&mut self) {
        self.sgl = true;
    }

    /// Messages submitted from registered memory
    /// ([`OpKind::MessageFrom`](relink::OpKind::MessageFrom)).
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

    pub(super) fn in_flight(&self, c: Class) -> usize {
        self.pending_by_class.get(&c).copied().unwrap_or(0)
    }

    /// The context the next operation is submitted with: distinct per
    /// operation, and not simply its id.
    pub(super) fn next_context(&mut self) -> u64 {
        self.contexts += 1;
        self.contexts.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ self.seed
    }

    pub(super) fn record(&mut self, op: OpId, d: Detail, context: u64, len: u64) {
        self.expected.insert(op, (context, len));
        self.pending.insert(op, d);
        *self.pending_by_class.entry(d.class()).or_default() += 1;
        self.tally.entry(d.class()).or_default().submitted += 1;
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

/// The staging areas of `session` ([`STAGING`]), those it has.
pub(super) fn staging(node: &Node, session: SessionHandle) -> Option<Staging> {
    Staging::new(
        STAGING
            .iter()
            .filter_map(|id| Some((*id, node.region(session, *id).ok()?)))
            .collect(),
    )
}
