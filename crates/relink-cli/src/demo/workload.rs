//! The checked workload: what the demo submits, and the bookkeeping that
//! proves afterwards that every message arrived exactly once and in order,
//! every written byte is right, every atomic is accounted for and every
//! operation completed exactly once.
//!
//! - **Messages** carry `index u64 | len u16 | body | FNV-1a 64` (big
//!   endian); the body is derived from the seed and the index, so the
//!   receiver regenerates the whole payload and compares it.
//! - **WRITEs** copy a patterned block (pattern of seed, block, version)
//!   into the target's data region. At most one operation per block is in
//!   flight, and a source block is never touched while its write is
//!   pending (the library owns it until the completion).
//! - **READs** fetch a block whose last write completed and compare it with
//!   that write's pattern (or zeros for a block never written).
//! - **FETCH_ADDs** add seeded amounts to a counter after the blocks.

use std::collections::{BTreeMap, BTreeSet};

use relink::{
    Access, BufferToken, LocalRange, Node, OpError, OpId, Outcome, RegionId, RegionOptions, Seq,
    SessionHandle,
};
use relink_fabric::{Memory, Timestamp};
use serde::Serialize;

/// Bytes per written block.
pub const BLOCK: u64 = 1024;
/// Blocks in the target's data region.
pub const BLOCKS: u64 = 128;
/// Offset of the atomic counter in the target's data region.
pub const COUNTER: u64 = BLOCK * BLOCKS;
/// The target's data region (advertised to the initiator).
pub const TARGET_DATA: RegionId = RegionId(100);
/// The initiator's write sources (one block per target block).
pub const SOURCE: RegionId = RegionId(1);
/// The initiator's read landing slots.
pub const SINK: RegionId = RegionId(2);
/// The initiator's atomic result slots.
pub const RESULTS: RegionId = RegionId(3);
/// Read landing slots.
const READ_SLOTS: u64 = 8;
/// Atomic result slots.
const ATOMIC_SLOTS: u64 = 8;

/// How many operations of each kind a session keeps pending, and how
/// many new messages one top-up may submit.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Window {
    /// New messages per top-up (the pace).
    pub pace: usize,
    /// Messages.
    pub messages: usize,
    /// WRITEs.
    pub writes: usize,
    /// READs.
    pub reads: usize,
    /// FETCH_ADDs.
    pub atomics: usize,
}

/// Session A's window.
pub const WINDOW_A: Window = Window {
    pace: usize::MAX,
    messages: 16,
    writes: 4,
    reads: 2,
    atomics: 2,
};

/// Session B's window: messages only, a few per top-up; while B is down
/// they queue, up to the window.
pub const WINDOW_B: Window = Window {
    pace: 4,
    messages: 64,
    writes: 0,
    reads: 0,
    atomics: 0,
};

/// The target's regions for session A.
pub fn target_regions() -> Vec<RegionOptions> {
    vec![RegionOptions {
        id: TARGET_DATA,
        len: COUNTER + 8,
        access: Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC,
        advertise: true,
    }]
}

/// The initiator's regions for session A.
pub fn initiator_regions() -> Vec<RegionOptions> {
    let local = |id, len| RegionOptions {
        id,
        len,
        access: Access::LOCAL_WRITE,
        advertise: false,
    };
    vec![
        local(SOURCE, BLOCK * BLOCKS),
        local(SINK, BLOCK * READ_SLOTS),
        local(RESULTS, 8 * ATOMIC_SLOTS),
    ]
}

/// SplitMix64: the demo's only source of pseudo-randomness.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn fill(mut state: u64, out: &mut [u8]) {
    for chunk in out.chunks_mut(8) {
        state = mix(state);
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
}

/// FNV-1a, 64 bits.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The payload of message `index` of the stream `stream`.
pub fn message(seed: u64, stream: u64, index: u64) -> Vec<u8> {
    let key = mix(seed ^ mix(stream ^ mix(index)));
    let len = 16 + (key % 497) as usize;
    let mut p = Vec::with_capacity(18 + len);
    p.extend_from_slice(&index.to_be_bytes());
    p.extend_from_slice(&(len as u16).to_be_bytes());
    let start = p.len();
    p.resize(start + len, 0);
    fill(key, &mut p[start..]);
    let sum = fnv1a(&p);
    p.extend_from_slice(&sum.to_be_bytes());
    p
}

/// What a received payload says: its index, if the checksum holds.
pub fn parse_message(p: &[u8]) -> Option<u64> {
    if p.len() < 18 {
        return None;
    }
    let (body, sum) = p.split_at(p.len() - 8);
    let len = u16::from_be_bytes([body[8], body[9]]) as usize;
    if body.len() != 10 + len || fnv1a(body) != u64::from_be_bytes(sum.try_into().ok()?) {
        return None;
    }
    Some(u64::from_be_bytes(body[..8].try_into().ok()?))
}

/// The pattern of `block` at `version` (`None`: never written, zeros).
pub fn pattern(seed: u64, block: u64, version: Option<u64>) -> Vec<u8> {
    let mut v = vec![0u8; BLOCK as usize];
    if let Some(version) = version {
        fill(mix(seed ^ 0xb10c ^ mix(block ^ mix(version))), &mut v);
    }
    v
}

/// The addend of atomic number `k`.
fn addend(seed: u64, k: u64) -> u64 {
    1 + mix(seed ^ 0xadd ^ mix(k)) % 1000
}

/// What an operation was, for checking its completion.
#[derive(Debug, Clone, Copy)]
enum Detail {
    Message,
    Write {
        block: u64,
        version: u64,
    },
    Read {
        block: u64,
        expect: Option<u64>,
        slot: u64,
    },
    FetchAdd {
        add: u64,
        slot: u64,
    },
}

/// Operation kinds, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// SEND.
    Message,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// FETCH_ADD.
    FetchAdd,
}

impl Class {
    /// Plural noun, for tables.
    pub fn plural(self) -> &'static str {
        match self {
            Class::Message => "messages",
            Class::Write => "WRITEs",
            Class::Read => "READs",
            Class::FetchAdd => "FETCH_ADDs",
        }
    }
}

impl Detail {
    fn class(&self) -> Class {
        match self {
            Detail::Message => Class::Message,
            Detail::Write { .. } => Class::Write,
            Detail::Read { .. } => Class::Read,
            Detail::FetchAdd { .. } => Class::FetchAdd,
        }
    }
}

/// How completions of one kind ended.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Tally {
    /// Submitted.
    pub submitted: u64,
    /// `Success` (of which replayed below).
    pub success: u64,
    /// `Success { replayed: true }`.
    pub replayed: u64,
    /// `Indeterminate { executed: Some(true) }`.
    pub executed: u64,
    /// `Indeterminate { executed: None }`.
    pub unknown: u64,
    /// `Failed(GaveUp)`.
    pub failed_gave_up: u64,
    /// `Failed(Disconnected)`.
    pub failed_disconnected: u64,
    /// Any other failure.
    pub failed_other: u64,
}

impl Tally {
    fn count(&mut self, o: Outcome) {
        match o {
            Outcome::Success { replayed } => {
                self.success += 1;
                self.replayed += u64::from(replayed);
            }
            Outcome::Indeterminate {
                executed: Some(true),
            } => self.executed += 1,
            Outcome::Indeterminate { .. } => self.unknown += 1,
            Outcome::Failed(OpError::GaveUp) => self.failed_gave_up += 1,
            Outcome::Failed(OpError::Disconnected) => self.failed_disconnected += 1,
            Outcome::Failed(_) => self.failed_other += 1,
        }
    }

    /// Completed, any outcome.
    pub fn completed(&self) -> u64 {
        self.success
            + self.executed
            + self.unknown
            + self.failed_gave_up
            + self.failed_disconnected
            + self.failed_other
    }
}

/// Per block: what the target must hold.
#[derive(Debug, Clone, Copy, Default)]
struct Block {
    /// Version of the last write that completed `Success`.
    good: Option<u64>,
    /// Versions handed out.
    next: u64,
    /// An operation on this block is pending.
    busy: bool,
    /// A write to it ended without `Success`: by contract the range is
    /// undefined (old or new bytes); `(old, new)` versions.
    undefined: Option<(Option<u64>, u64)>,
}

/// A problem found while the workload ran (reported as a failed check).
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    /// Virtual seconds.
    pub at: f64,
    /// What.
    pub what: String,
}

/// One session's workload and its books.
pub struct Stream {
    /// "A" or "B".
    pub name: &'static str,
    seed: u64,
    stream: u64,
    window: Window,
    /// The initiator's session.
    pub init: SessionHandle,
    /// The target's session.
    pub target: SessionHandle,
    /// No more submissions (closed, gave up, or the run is ending).
    pub stopped: bool,
    pending: BTreeMap<OpId, Detail>,
    pending_by_class: BTreeMap<Class, usize>,
    /// Every completed operation with its outcome.
    outcomes: BTreeMap<OpId, (Class, Outcome)>,
    /// Counts per kind.
    pub tally: BTreeMap<Class, Tally>,
    /// Message op ids, by index.
    sent: Vec<OpId>,
    /// Indexes received, in order.
    received: Vec<u64>,
    last_seq: Seq,
    blocks: Vec<Block>,
    write_cursor: u64,
    read_cursor: u64,
    free_read_slots: Vec<u64>,
    free_atomic_slots: Vec<u64>,
    atomics: u64,
    /// Addends of `Success` / `Indeterminate{Some(true)}` atomics.
    certain: u64,
    /// Addends of `Indeterminate{None}` atomics.
    maybe: Vec<u64>,
    /// Old values returned by successful atomics (with their addends).
    fetched: Vec<(u64, u64)>,
    /// READs compared with the expected pattern.
    pub reads_verified: u64,
    /// READs that returned other bytes.
    read_mismatches: u64,
    /// Completions of an operation that had already completed.
    completed_twice: u64,
    /// Completions of an operation never submitted.
    completed_unknown: u64,
    /// Problems, in order.
    pub problems: Vec<Problem>,
    /// Ops pending when the session was closed (completions must follow).
    pub pending_at_close: Option<BTreeSet<OpId>>,
    /// Ops pending when the session gave up.
    pub pending_at_give_up: Option<BTreeSet<OpId>>,
    /// Completions seen, by virtual time (for the throughput timeline).
    pub completions_at: Vec<Timestamp>,
    source: Option<Memory>,
    sink: Option<Memory>,
    results: Option<Memory>,
}

impl Stream {
    /// A stream on the session pair `(init, target)`.
    pub fn new(
        name: &'static str,
        seed: u64,
        window: Window,
        node: &Node,
        init: SessionHandle,
        target: SessionHandle,
    ) -> Stream {
        let region = |id| node.region(init, id).ok();
        Stream {
            name,
            seed,
            stream: u64::from(name.as_bytes()[0]),
            window,
            init,
            target,
            stopped: false,
            pending: BTreeMap::new(),
            pending_by_class: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            tally: BTreeMap::new(),
            sent: Vec::new(),
            received: Vec::new(),
            last_seq: Seq(0),
            blocks: vec![Block::default(); BLOCKS as usize],
            write_cursor: 0,
            read_cursor: 0,
            free_read_slots: (0..READ_SLOTS).rev().collect(),
            free_atomic_slots: (0..ATOMIC_SLOTS).rev().collect(),
            atomics: 0,
            certain: 0,
            maybe: Vec::new(),
            fetched: Vec::new(),
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

    fn problem(&mut self, now: Timestamp, what: String) {
        self.problems.push(Problem {
            at: secs(now),
            what: format!("{}: {what}", self.name),
        });
    }

    /// Operations not yet completed.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The ids of the pending operations.
    pub fn pending_ids(&self) -> BTreeSet<OpId> {
        self.pending.keys().copied().collect()
    }

    fn in_flight(&self, c: Class) -> usize {
        self.pending_by_class.get(&c).copied().unwrap_or(0)
    }

    fn record(&mut self, op: OpId, d: Detail) {
        self.pending.insert(op, d);
        *self.pending_by_class.entry(d.class()).or_default() += 1;
        self.tally.entry(d.class()).or_default().submitted += 1;
    }

    /// Submit until every window is full (nothing if stopped).
    pub fn top_up(&mut self, node: &mut Node) {
        if self.stopped {
            return;
        }
        let now = node.now();
        let mut budget = self.window.pace;
        while self.in_flight(Class::Message) < self.window.messages && budget > 0 {
            if !self.submit_message(node, now) {
                return;
            }
            budget -= 1;
        }
        while self.in_flight(Class::Write) < self.window.writes {
            if !self.submit_write(node, now) {
                break;
            }
        }
        while self.in_flight(Class::Read) < self.window.reads {
            if !self.submit_read(node, now) {
                break;
            }
        }
        while self.in_flight(Class::FetchAdd) < self.window.atomics {
            if !self.submit_fetch_add(node, now) {
                break;
            }
        }
    }

    /// Submit `n` messages regardless of the window (the burst before the
    /// admin close).
    pub fn burst(&mut self, node: &mut Node, n: usize) {
        let now = node.now();
        for _ in 0..n {
            if !self.submit_message(node, now) {
                return;
            }
        }
    }

    fn refused(&mut self, now: Timestamp, what: &str, e: relink::Error) -> bool {
        self.problem(now, format!("{what} refused: {e}"));
        self.stopped = true;
        false
    }

    fn submit_message(&mut self, node: &mut Node, now: Timestamp) -> bool {
        let index = self.sent.len() as u64;
        let payload = message(self.seed, self.stream, index);
        match node.send(self.init, &payload) {
            Ok(op) => {
                self.sent.push(op);
                self.record(op, Detail::Message);
                true
            }
            Err(e) => self.refused(now, "send", e),
        }
    }

    fn submit_write(&mut self, node: &mut Node, now: Timestamp) -> bool {
        let Some(source) = self.source.clone() else {
            return false;
        };
        let Some(block) = (0..BLOCKS)
            .map(|i| (self.write_cursor + i) % BLOCKS)
            .find(|b| !self.blocks[*b as usize].busy)
        else {
            return false;
        };
        self.write_cursor = (block + 1) % BLOCKS;
        let b = &mut self.blocks[block as usize];
        let version = b.next;
        b.next += 1;
        b.busy = true;
        let off = block * BLOCK;
        if let Err(e) = source.write(off as usize, &pattern(self.seed, block, Some(version))) {
            self.problem(now, format!("source buffer: {e}"));
            return false;
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
        match node.write(self.init, local, remote) {
            Ok(op) => {
                self.record(op, Detail::Write { block, version });
                true
            }
            Err(e) => {
                self.blocks[block as usize].busy = false;
                self.refused(now, "write", e)
            }
        }
    }

    fn submit_read(&mut self, node: &mut Node, now: Timestamp) -> bool {
        let Some(sink) = self.sink.clone() else {
            return false;
        };
        let Some(block) = (0..BLOCKS)
            .map(|i| (self.read_cursor + i) % BLOCKS)
            .find(|b| {
                let b = &self.blocks[*b as usize];
                !b.busy && b.undefined.is_none()
            })
        else {
            return false;
        };
        let Some(slot) = self.free_read_slots.pop() else {
            return false;
        };
        // Spread reads over the blocks, a prime stride apart.
        self.read_cursor = (block + 37) % BLOCKS;
        let b = &mut self.blocks[block as usize];
        b.busy = true;
        let expect = b.good;
        // Poison the slot so that a read that did not land cannot pass.
        let _ = sink.write((slot * BLOCK) as usize, &[0xee; BLOCK as usize]);
        let local = LocalRange {
            region: SINK,
            offset: slot * BLOCK,
            len: BLOCK as u32,
        };
        let remote = BufferToken {
            region: TARGET_DATA,
            offset: block * BLOCK,
        };
        match node.read(self.init, local, remote) {
            Ok(op) => {
                self.record(
                    op,
                    Detail::Read {
                        block,
                        expect,
                        slot,
                    },
                );
                true
            }
            Err(e) => {
                self.blocks[block as usize].busy = false;
                self.free_read_slots.push(slot);
                self.refused(now, "read", e)
            }
        }
    }

    fn submit_fetch_add(&mut self, node: &mut Node, now: Timestamp) -> bool {
        let Some(slot) = self.free_atomic_slots.pop() else {
            return false;
        };
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
        match node.fetch_add(self.init, local, remote, add) {
            Ok(op) => {
                self.record(op, Detail::FetchAdd { add, slot });
                true
            }
            Err(e) => {
                self.free_atomic_slots.push(slot);
                self.refused(now, "fetch_add", e)
            }
        }
    }

    /// Take every completion the initiator's node holds for this stream.
    pub fn drain_completions(&mut self, init: &mut Node) {
        let now = init.now();
        while let Some(c) = init.poll_completion(self.init) {
            self.complete(c.op, c.outcome, now);
        }
    }

    /// Take every message the target's node delivered for this stream.
    pub fn drain_deliveries(&mut self, target: &mut Node) {
        let now = target.now();
        while let Some((seq, payload)) = target.poll_delivery(self.target) {
            self.deliver(seq, &payload, now);
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
            Detail::Message => {}
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
                    Outcome::Success { .. } => {
                        self.certain += add;
                        if let Some(old) = self
                            .results
                            .as_ref()
                            .and_then(|m| m.read_u64((slot * 8) as usize).ok())
                        {
                            self.fetched.push((old, add));
                        }
                    }
                    Outcome::Indeterminate {
                        executed: Some(true),
                    } => self.certain += add,
                    Outcome::Indeterminate { .. } => self.maybe.push(add),
                    Outcome::Failed(_) => {}
                }
                self.free_atomic_slots.push(slot);
            }
        }
    }

    fn deliver(&mut self, seq: Seq, payload: &[u8], now: Timestamp) {
        if seq != self.last_seq.next() {
            self.problem(
                now,
                format!("delivery {seq} after {}: not consecutive", self.last_seq),
            );
        }
        self.last_seq = seq;
        let Some(index) = parse_message(payload) else {
            self.problem(now, format!("delivery {seq}: bad checksum or framing"));
            return;
        };
        if payload != message(self.seed, self.stream, index) {
            self.problem(
                now,
                format!("delivery {seq}: payload of message {index} corrupted"),
            );
        }
        self.received.push(index);
    }

    /// The outcome of message `index`, if it completed.
    fn message_outcome(&self, index: u64) -> Option<Outcome> {
        let op = self.sent.get(usize::try_from(index).ok()?)?;
        self.outcomes.get(op).map(|(_, o)| *o)
    }
}

/// Virtual seconds.
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

/// Messages: the receiver got a prefix of what was sent, each once and in
/// order, consistent with every completion.
pub fn check_messages(s: &Stream, expect_all: bool) -> Check {
    let name = format!("messages {}", s.name);
    let sent = s.sent.len() as u64;
    let got = s.received.len() as u64;
    if let Some(i) = s
        .received
        .iter()
        .enumerate()
        .find(|(i, idx)| **idx != *i as u64)
    {
        return Check::new(
            name,
            false,
            format!(
                "the receiver's sequence breaks at position {}: got message {} (duplicate, gap or reordering)",
                i.0, i.1
            ),
        );
    }
    if got > sent {
        return Check::new(name, false, format!("{got} delivered but only {sent} sent"));
    }
    let mut bad = Vec::new();
    let (mut ok_success, mut lost_indet, mut failed) = (0u64, 0u64, 0u64);
    for index in 0..sent {
        let delivered = index < got;
        match s.message_outcome(index) {
            Some(Outcome::Success { .. }) => {
                ok_success += 1;
                if !delivered {
                    bad.push(format!(
                        "message {index} completed Success but was not delivered"
                    ));
                }
            }
            Some(Outcome::Failed(_)) => {
                failed += 1;
                if delivered {
                    bad.push(format!(
                        "message {index} completed Failed but was delivered"
                    ));
                }
            }
            Some(Outcome::Indeterminate { .. }) => lost_indet += 1,
            None => {
                if expect_all {
                    bad.push(format!("message {index} never completed"));
                }
            }
        }
    }
    if expect_all && got != sent {
        bad.push(format!("{} of {sent} messages never delivered", sent - got));
    }
    if let Some(first) = bad.first() {
        return Check::new(
            name,
            false,
            format!("{first} ({} problems in all)", bad.len()),
        );
    }
    let mut detail =
        format!("{sent} sent, {got} delivered exactly once and in order, {ok_success} confirmed");
    if failed + lost_indet > 0 {
        detail.push_str(&format!(
            "; {failed} failed (none delivered), {lost_indet} indeterminate"
        ));
    }
    Check::new(name, true, detail)
}

/// Every byte of the target's data region: each block holds the pattern of
/// its last successful write (zeros if never written).
pub fn check_region(s: &Stream, target_region: Option<&Memory>) -> Check {
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
            "{} KiB in {BLOCKS} blocks verified byte for byte: {written} written ({total_writes} WRITEs), the rest still zero",
            BLOCK * BLOCKS / 1024
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
pub fn check_reads(s: &Stream) -> Check {
    let bad = s.read_mismatches;
    let t = s.tally.get(&Class::Read).copied().unwrap_or_default();
    Check::new(
        "reads",
        bad == 0 && s.reads_verified == t.success,
        format!(
            "{} READs returned the expected bytes ({} replayed); {bad} mismatches",
            s.reads_verified, t.replayed
        ),
    )
}

/// Atomics: the counter equals the certain adds plus a subset of the
/// unknown ones.
pub fn check_atomics(s: &Stream, target_region: Option<&Memory>) -> Check {
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
    // Every fetched old value plus its addend fits under the counter, and
    // no two successful atomics saw the same old value.
    let mut olds: Vec<u64> = s.fetched.iter().map(|(o, _)| *o).collect();
    olds.sort_unstable();
    let distinct = olds.windows(2).all(|w| w[0] != w[1]);
    let bounded = s.fetched.iter().all(|(o, a)| o + a <= counter);
    let ok = in_range && subset && distinct && bounded;
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
                String::new()
            } else {
                format!(" [in range: {in_range}, subset sum: {subset}, distinct old values: {distinct}, old values bounded: {bounded}]")
            }
        ),
    )
}

/// One completion per operation: none twice, none unknown, none missing
/// (except what `allowed_pending` may leave).
pub fn check_completions(s: &Stream) -> Check {
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
    Check::new(name, ok, d)
}

/// The operations pending at an admin close or a give-up all completed,
/// each with `err` — or, where the journal knows more, with what it knows
/// (ARCHITECTURE.md section 2, `Journal::fail_all`): a posted message or
/// atomic may have taken effect (`Indeterminate`), a write or atomic may
/// be proven executed. Never silently, never twice.
pub fn check_ended(s: &Stream, at: &BTreeSet<OpId>, err: OpError, what: &str) -> Check {
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
            (Class::Message, Outcome::Indeterminate { executed: None })
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
