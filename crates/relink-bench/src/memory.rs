//! Heap memory per outstanding operation: what relink holds (the journal
//! entry, a message's payload, its place in the sequence index) for every
//! operation that has not completed, measured while the peer's device is
//! gone so that nothing completes.
//!
//! The library cannot count allocations itself (a global allocator belongs
//! to the binary); [`journal_memory`] takes a [`HeapCounter`] — in the
//! `relink_memory` bench, a counting allocator — and reads it before and
//! after submitting `n` operations, with virtual time standing still in
//! between.

use std::time::Duration;

use relink::{Access, BufferToken, LocalRange, RegionId, RegionOptions, SessionOptions, State};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;
use serde::Serialize;

use crate::recovery::step_until;
use crate::session::{stamp_bytes, PORT};

/// The target's advertised region.
const REMOTE: RegionId = RegionId(1);
/// The initiator's region.
const LOCAL: RegionId = RegionId(2);
/// Bytes of each region.
const REGION_LEN: u64 = 64 * 1024;

/// Live heap bytes and allocation count of the process, as a counting
/// allocator tells them.
pub trait HeapCounter {
    /// Bytes allocated and not yet freed.
    fn live_bytes(&self) -> i64;
    /// Allocations made so far (reallocations not counted).
    fn allocations(&self) -> u64;
}

/// The operation that is submitted `n` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum OpShape {
    /// A message of this many bytes.
    Message(usize),
    /// An RDMA WRITE of this many bytes.
    Write(u32),
    /// An RDMA READ of this many bytes.
    Read(u32),
    /// A fetch-and-add.
    FetchAdd,
    /// A compare-and-swap.
    CmpSwap,
}

impl OpShape {
    /// A short name (`message 64 B`, `write 4 KiB`, ...).
    pub fn name(&self) -> String {
        use crate::loops::human_size;
        match self {
            OpShape::Message(n) => format!("message {}", human_size(*n)),
            OpShape::Write(n) => format!("write {}", human_size(*n as usize)),
            OpShape::Read(n) => format!("read {}", human_size(*n as usize)),
            OpShape::FetchAdd => "fetch-add".into(),
            OpShape::CmpSwap => "cmp-swap".into(),
        }
    }
}

/// What `n` outstanding operations of one shape cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemSample {
    /// The operation, named.
    pub op: String,
    /// Operations outstanding.
    pub n: usize,
    /// Live heap bytes after submitting them, minus before.
    pub bytes: i64,
    /// `bytes / n`.
    pub bytes_per_op: f64,
    /// Allocations per operation (kept or not).
    pub allocs_per_op: f64,
    /// [`relink::Node`]'s session says this many operations are pending
    /// (must be `n`).
    pub pending_ops: usize,
    /// Message payload bytes the journal says it holds.
    pub journal_bytes: usize,
    /// Live heap bytes per operation of a bare
    /// [`Journal`](relink_core::journal::Journal) holding the same `n`
    /// operations (what the journal itself costs; the rest of `bytes_per_op`
    /// is the session's and the node's).
    pub journal_only_bytes_per_op: f64,
}

/// Session options for the memory measurement: 64 KiB regions each side
/// (the target's advertised for writes, reads and atomics), messages up to
/// 4 KiB, up to 100,000 operations outstanding, the default policy.
fn options(target: bool) -> SessionOptions {
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    SessionOptions::builder()
        .recv_slots(64)
        .max_message(4096)
        .max_one_sided(64)
        // Room for the 10,000 operations a run holds outstanding.
        .max_outstanding(100_000)
        .regions(vec![RegionOptions::new(
            if target { REMOTE } else { LOCAL },
            REGION_LEN,
            if target { all } else { Access::LOCAL_WRITE },
        )
        .advertise(target)])
        .build()
        .expect("valid session options")
}

/// Set up a session, take the target's device away, wait until the
/// initiator knows, then submit `n` operations of `shape` and measure the
/// live heap that grew meanwhile (no virtual time passes while submitting:
/// nothing is posted, nothing completes).
///
/// # Panics
/// If the session does not come up, or a submission is refused.
pub fn journal_memory(shape: OpShape, n: usize, seed: u64, heap: &dyn HeapCounter) -> MemSample {
    let mut sim = Sim::new(seed);
    let s = sim
        .open_session(PORT, options(false), options(true))
        .expect("open a session");
    let up = step_until(&mut sim, Duration::from_secs(1), |sim| {
        sim.node(INITIATOR).state(s) == Some(State::Established)
    });
    assert!(up, "session not established");
    let h = sim.host(TARGET).index();
    sim.fabric().inject(Fault::Remove(h, "soft0".into()));
    let down = step_until(&mut sim, Duration::from_secs(1), |sim| {
        sim.node(INITIATOR).state(s) != Some(State::Established)
    });
    assert!(
        down,
        "the initiator did not notice the target's device going away"
    );
    // Let the first reconnection attempt fail and back off.
    step_until(&mut sim, Duration::from_millis(5), |_| false);
    while sim.node(INITIATOR).poll_event(s).is_some() {}

    let mut payload = match shape {
        OpShape::Message(len) => vec![0u8; len],
        _ => Vec::new(),
    };
    let local = |len: u32| LocalRange {
        region: LOCAL,
        offset: 0,
        len,
    };
    let remote = BufferToken {
        region: REMOTE,
        offset: 0,
    };
    let (b0, a0) = (heap.live_bytes(), heap.allocations());
    {
        let node = sim.node(INITIATOR);
        for i in 0..n {
            let r = match shape {
                OpShape::Message(_) => {
                    stamp_bytes(&mut payload, i as u64);
                    node.send(s, &payload)
                }
                OpShape::Write(len) => node.write(s, local(len), remote),
                OpShape::Read(len) => node.read(s, local(len), remote),
                OpShape::FetchAdd => node.fetch_add(s, local(8), remote, 1),
                OpShape::CmpSwap => node.cmp_swap(s, local(8), remote, 0, 1),
            };
            r.unwrap_or_else(|e| panic!("{}: {e}", shape.name()));
        }
    }
    let (b1, a1) = (heap.live_bytes(), heap.allocations());
    let core = sim.node(INITIATOR).session_info(s).expect("session");
    let (pending_ops, journal_bytes) = (core.pending_ops, core.journal_bytes);
    let bytes = b1 - b0;
    let journal_only_bytes_per_op = journal_only(shape, n, heap);
    MemSample {
        op: shape.name(),
        n,
        bytes,
        bytes_per_op: bytes as f64 / n as f64,
        allocs_per_op: (a1 - a0) as f64 / n as f64,
        pending_ops,
        journal_bytes,
        journal_only_bytes_per_op,
    }
}

/// Live heap bytes per operation of a bare journal that holds `n`
/// operations of `shape` (submitted, none posted).
pub fn journal_only(shape: OpShape, n: usize, heap: &dyn HeapCounter) -> f64 {
    use relink_core::journal::{Journal, OpKind};
    let local = |len: u32| LocalRange {
        region: LOCAL,
        offset: 0,
        len,
    };
    let remote = BufferToken {
        region: REMOTE,
        offset: 0,
    };
    let mut payload = match shape {
        OpShape::Message(len) => vec![0u8; len],
        _ => Vec::new(),
    };
    let b0 = heap.live_bytes();
    let mut j = Journal::new();
    for i in 0..n {
        let kind = match shape {
            OpShape::Message(_) => {
                stamp_bytes(&mut payload, i as u64);
                OpKind::Message {
                    payload: payload.clone(),
                }
            }
            OpShape::Write(len) => OpKind::Write {
                local: local(len).into(),
                remote,
            },
            OpShape::Read(len) => OpKind::Read {
                local: local(len).into(),
                remote,
            },
            OpShape::FetchAdd => OpKind::FetchAdd {
                local: local(8),
                remote,
                add: 1,
            },
            OpShape::CmpSwap => OpKind::CmpSwap {
                local: local(8),
                remote,
                compare: 0,
                swap: 1,
            },
        };
        j.submit(kind);
    }
    let b1 = heap.live_bytes();
    assert_eq!(j.len(), n);
    drop(j);
    (b1 - b0) as f64 / n as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Counts nothing: the test checks the bookkeeping around it.
    struct Zero(Cell<u64>);

    impl HeapCounter for Zero {
        fn live_bytes(&self) -> i64 {
            0
        }
        fn allocations(&self) -> u64 {
            self.0.set(self.0.get() + 1);
            self.0.get()
        }
    }

    #[test]
    fn operations_stay_pending_while_the_peer_is_away() {
        for shape in [
            OpShape::Message(64),
            OpShape::Write(4096),
            OpShape::FetchAdd,
        ] {
            let m = journal_memory(shape, 50, 31, &Zero(Cell::new(0)));
            assert_eq!(m.pending_ops, 50, "{m:?}");
            let want = if let OpShape::Message(len) = shape {
                50 * len
            } else {
                0
            };
            assert_eq!(m.journal_bytes, want, "{m:?}");
        }
    }
}
