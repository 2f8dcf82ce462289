//! A checked workload for relink sessions in the [`Sim`](crate::sim::Sim):
//! messages, writes, reads and atomics whose every byte and completion is
//! accounted for, and the invariants the simulation suite asserts after
//! every run.

use std::collections::{BTreeMap, BTreeSet};

use relink::{
    Access, BufferToken, LocalRange, Node, OpId, Outcome, RegionId, RegionOptions, SessionHandle,
    SessionOptions,
};

use crate::sim::{Sim, INITIATOR, TARGET};

/// The target's region that one-sided operations hit.
pub const REMOTE: RegionId = RegionId(1);
/// The initiator's source/sink region.
pub const LOCAL: RegionId = RegionId(2);
/// Bytes per write block.
pub const BLOCK: u64 = 1024;
/// Write blocks (destination = source block).
pub const BLOCKS: u64 = 16;
/// Offset of the atomic counter in [`REMOTE`].
pub const COUNTER: u64 = BLOCK * BLOCKS;
/// Offset of read landing slots in [`LOCAL`].
const READ_AREA: u64 = BLOCK * BLOCKS;
/// Offset of atomic result slots in [`LOCAL`].
const ATOMIC_AREA: u64 = READ_AREA + BLOCK * 4;
const REGION_LEN: u64 = ATOMIC_AREA + 8 * 64;

/// Session options with the workload's regions on each side.
pub fn options(side: usize, policy: relink::Policy) -> SessionOptions {
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let region = if side == TARGET {
        RegionOptions {
            id: REMOTE,
            len: REGION_LEN,
            access: all,
            advertise: true,
        }
    } else {
        RegionOptions {
            id: LOCAL,
            len: REGION_LEN,
            access: Access::LOCAL_WRITE,
            advertise: false,
        }
    };
    SessionOptions {
        policy,
        recv_slots: 32,
        max_message: 512,
        max_one_sided: 32,
        regions: vec![region],
    }
}

/// A fresh [`Sim`] with the target listening on `port`, an initiator
/// session connected with the workload's options, and its [`Workload`].
///
/// # Errors
/// If listening or connecting is refused, or the session is not
/// established after 2 ms of virtual time.
pub fn start(seed: u64, policy: relink::Policy, port: u16) -> Result<(Sim, Workload), String> {
    let mut sim = Sim::new(seed);
    let s = sim
        .open_session(
            port,
            options(INITIATOR, policy.clone()),
            options(TARGET, policy),
        )
        .map_err(|e| e.to_string())?;
    sim.run_for(std::time::Duration::from_millis(2));
    let state = sim.node(INITIATOR).state(s);
    if state != Some(relink::State::Established) {
        return Err(format!("session not established after 2 ms: {state:?}"));
    }
    let mut w = Workload::new(s);
    w.collect(&mut sim);
    Ok((sim, w))
}

/// The payload of message `id`: the id, then bytes derived from it.
pub fn message(id: u64) -> Vec<u8> {
    let len = 8 + (id % 97) as usize;
    let mut v = id.to_be_bytes().to_vec();
    v.extend((0..len - 8).map(|i| (id as u8).wrapping_mul(31).wrapping_add(i as u8)));
    v
}

fn pattern(write: u64) -> Vec<u8> {
    (0..BLOCK)
        .map(|i| (write.wrapping_mul(2654435761) >> 8) as u8 ^ i as u8)
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Message(u64),
    Write { n: u64, block: u64 },
    Read,
    FetchAdd,
}

/// What the workload submitted and saw.
#[derive(Debug, Default)]
pub struct Workload {
    /// The initiator's session.
    pub session: Option<SessionHandle>,
    /// The target's session (once accepted).
    pub target: Option<SessionHandle>,
    ops: BTreeMap<OpId, Kind>,
    outcomes: BTreeMap<OpId, Outcome>,
    twice: Vec<OpId>,
    next_msg: u64,
    sent_msgs: Vec<u64>,
    received: Vec<u64>,
    corrupt: Vec<String>,
    writes: u64,
    /// The last write submitted per block (its pattern is what the block
    /// must hold if every write succeeded).
    last_write: BTreeMap<u64, u64>,
    adds: u64,
    inflight_writes: BTreeSet<u64>,
    successes: usize,
}

impl Workload {
    /// A workload for `session` (initiator side).
    pub fn new(session: SessionHandle) -> Workload {
        Workload {
            session: Some(session),
            ..Workload::default()
        }
    }

    fn s(&self) -> SessionHandle {
        self.session.expect("session")
    }

    /// Submit one message.
    pub fn send(&mut self, node: &mut Node) -> Option<OpId> {
        let id = self.next_msg;
        let op = node.send(self.s(), &message(id)).ok()?;
        self.next_msg += 1;
        self.sent_msgs.push(id);
        self.ops.insert(op, Kind::Message(id));
        Some(op)
    }

    /// Submit one write of a fresh pattern to the next block (skipped while
    /// that block's previous write is in flight: the source must stay put).
    pub fn write(&mut self, node: &mut Node) -> Option<OpId> {
        let n = self.writes;
        let block = n % BLOCKS;
        if self.inflight_writes.contains(&block) {
            return None;
        }
        let mem = node.region(self.s(), LOCAL).ok()?;
        mem.write((block * BLOCK) as usize, &pattern(n)).ok()?;
        let op = node
            .write(
                self.s(),
                LocalRange {
                    region: LOCAL,
                    offset: block * BLOCK,
                    len: BLOCK as u32,
                },
                BufferToken {
                    region: REMOTE,
                    offset: block * BLOCK,
                },
            )
            .ok()?;
        self.writes += 1;
        self.inflight_writes.insert(block);
        self.last_write.insert(block, n);
        self.ops.insert(op, Kind::Write { n, block });
        Some(op)
    }

    /// Submit one fetch-and-add of 1 on the counter.
    pub fn fetch_add(&mut self, node: &mut Node) -> Option<OpId> {
        let slot = self.adds % 64;
        let op = node
            .fetch_add(
                self.s(),
                LocalRange {
                    region: LOCAL,
                    offset: ATOMIC_AREA + slot * 8,
                    len: 8,
                },
                BufferToken {
                    region: REMOTE,
                    offset: COUNTER,
                },
                1,
            )
            .ok()?;
        self.adds += 1;
        self.ops.insert(op, Kind::FetchAdd);
        Some(op)
    }

    /// Submit one read of block 0 (content checked loosely: reads race
    /// with writes; what matters is one completion).
    pub fn read(&mut self, node: &mut Node) -> Option<OpId> {
        let op = node
            .read(
                self.s(),
                LocalRange {
                    region: LOCAL,
                    offset: READ_AREA,
                    len: BLOCK as u32,
                },
                BufferToken {
                    region: REMOTE,
                    offset: 0,
                },
            )
            .ok()?;
        self.ops.insert(op, Kind::Read);
        Some(op)
    }

    /// Collect completions and deliveries from the nodes.
    pub fn collect(&mut self, sim: &mut Sim) {
        let (initiator, target) = sim.pair();
        self.collect_from(initiator, target);
    }

    /// Collect completions from the initiator's node and deliveries from
    /// the target's (any two nodes, on any provider).
    pub fn collect_from(&mut self, initiator: &mut Node, target: &mut Node) {
        if self.target.is_none() {
            self.target = target.accept();
        }
        let s = self.s();
        while let Some(c) = initiator.poll_completion(s) {
            if c.outcome.is_success() {
                self.successes += 1;
            }
            if self.outcomes.insert(c.op, c.outcome).is_some() {
                self.twice.push(c.op);
            }
            if let Some(Kind::Write { block, .. }) = self.ops.get(&c.op) {
                self.inflight_writes.remove(block);
            }
        }
        if let Some(t) = self.target {
            while let Some((_, m)) = target.poll_delivery(t) {
                match m
                    .get(..8)
                    .map(|b| u64::from_be_bytes(b.try_into().expect("8")))
                {
                    Some(id) if m == message(id) => self.received.push(id),
                    _ => self.corrupt.push(format!(
                        "message of {} bytes does not match its id",
                        m.len()
                    )),
                }
            }
        }
    }

    /// Operations submitted.
    pub fn submitted(&self) -> usize {
        self.ops.len()
    }

    /// Operations completed.
    pub fn completed(&self) -> usize {
        self.outcomes.len()
    }

    /// Successful completions seen (a counter: cheap to watch).
    pub fn succeeded(&self) -> usize {
        self.successes
    }

    /// Messages sent and messages delivered to the target.
    pub fn messages(&self) -> (usize, usize) {
        (self.sent_msgs.len(), self.received.len())
    }

    /// The errors of failed operations, in op order.
    pub fn errors(&self) -> Vec<relink::OpError> {
        self.outcomes
            .values()
            .filter_map(|o| match o {
                Outcome::Failed(e) => Some(*e),
                _ => None,
            })
            .collect()
    }

    /// Outcomes counted by kind: (success, failed, indeterminate).
    pub fn tally(&self) -> (usize, usize, usize) {
        let mut t = (0, 0, 0);
        for o in self.outcomes.values() {
            match o {
                Outcome::Success { .. } => t.0 += 1,
                Outcome::Failed(_) => t.1 += 1,
                Outcome::Indeterminate { .. } => t.2 += 1,
            }
        }
        t
    }

    /// The invariants of a run in which the session survived: every
    /// message delivered exactly once and in order, every operation
    /// completed exactly once (atomics may be `Indeterminate`, nothing
    /// else may fail), every written block holds its last pattern, the
    /// counter equals the adds that certainly happened plus at most the
    /// uncertain ones. Returns a list of violations.
    pub fn check_survived(&self, sim: &mut Sim) -> Vec<String> {
        self.check_survived_on(sim.node(TARGET))
    }

    /// [`check_survived`](Self::check_survived) with the target's node.
    pub fn check_survived_on(&self, target: &Node) -> Vec<String> {
        let mut v = self.check_common();
        if self.outcomes.len() != self.ops.len() {
            let missing: Vec<_> = self
                .ops
                .keys()
                .filter(|o| !self.outcomes.contains_key(o))
                .take(5)
                .collect();
            v.push(format!(
                "{} of {} operations never completed (first: {missing:?})",
                self.ops.len() - self.outcomes.len(),
                self.ops.len()
            ));
        }
        if self.received != self.sent_msgs {
            let first = self
                .received
                .iter()
                .zip(&self.sent_msgs)
                .position(|(a, b)| a != b)
                .unwrap_or(self.received.len().min(self.sent_msgs.len()));
            v.push(format!(
                "delivery differs from sending: sent {}, received {}, first difference at {first}",
                self.sent_msgs.len(),
                self.received.len()
            ));
        }
        for (op, o) in &self.outcomes {
            let k = self.ops[op];
            let ok = matches!(
                (k, o),
                (_, Outcome::Success { .. }) | (Kind::FetchAdd, Outcome::Indeterminate { .. })
            );
            if !ok {
                v.push(format!("{op} ({k:?}) ended {o:?} in a run that survived"));
            }
        }
        if let Some(s) = self.session {
            if let Ok(mem) = target.region(self.target.unwrap_or(s), REMOTE) {
                for (block, n) in &self.last_write {
                    let got = mem
                        .read_vec((block * BLOCK) as usize, BLOCK as usize)
                        .unwrap_or_default();
                    if got != pattern(*n) {
                        v.push(format!("block {block} does not hold write #{n}'s pattern"));
                    }
                }
                let counter = mem.read_u64(COUNTER as usize).unwrap_or(u64::MAX);
                let (certain, maybe) = self.adds_accounted();
                if counter < certain || counter > certain + maybe {
                    v.push(format!(
                        "counter {counter} outside [{certain}, {}]",
                        certain + maybe
                    ));
                }
            }
        }
        v
    }

    /// Adds that certainly happened, and adds that may have.
    pub fn adds_accounted(&self) -> (u64, u64) {
        let mut certain = 0;
        let mut maybe = 0;
        for (op, k) in &self.ops {
            if *k != Kind::FetchAdd {
                continue;
            }
            match self.outcomes.get(op) {
                Some(Outcome::Success { .. })
                | Some(Outcome::Indeterminate {
                    executed: Some(true),
                }) => certain += 1,
                Some(Outcome::Indeterminate { .. }) | None => maybe += 1,
                Some(Outcome::Failed(_)) => {}
            }
        }
        (certain, maybe)
    }

    /// Invariants of every run, survived or not: no op completed twice, no
    /// corrupted or duplicated message, delivery a prefix-ordered subset.
    pub fn check_common(&self) -> Vec<String> {
        let mut v = Vec::new();
        if !self.twice.is_empty() {
            v.push(format!("operations completed twice: {:?}", self.twice));
        }
        v.extend(self.corrupt.iter().cloned());
        // Delivered ids strictly increase (in order, no duplicates) and are
        // a prefix of what was sent.
        if !self.received.windows(2).all(|w| w[1] == w[0] + 1)
            || self.received.first().is_some_and(|f| *f != 0)
        {
            v.push("messages delivered out of order, duplicated or with a gap".into());
        }
        for (op, o) in &self.outcomes {
            if let (Some(Kind::Message(id)), Outcome::Success { .. }) = (self.ops.get(op), o) {
                if !self.received.contains(id) {
                    v.push(format!("message {id} reported delivered but never arrived"));
                }
            }
        }
        v
    }
}
