//! What the workload's books record per operation: its [`Detail`] (what
//! its completion must show), for a successful FETCH_ADD the old value it
//! returned ([`Fetched`]), for a WRITE with immediate data where it lands
//! and what became of it ([`Imm`]).

use relink::{OpId, Outcome};
use relink_fabric::Timestamp;

use super::tally::Class;

/// What an operation was, for checking its completion.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Detail {
    Message,
    Write {
        block: u64,
        version: u64,
    },
    Read {
        block: u64,
        expect: Option<u64>,
        slot: u64,
        /// Where each piece of the block landed, in block order (2 to 4
        /// ranges of the slot, in an order of their own), when scattered.
        scatter: Option<Pieces>,
    },
    FetchAdd {
        add: u64,
        slot: u64,
    },
    /// A WRITE with immediate data at place `index` of the sequence.
    WriteImm {
        index: u64,
    },
    Flush,
}

impl Detail {
    pub(super) fn class(&self) -> Class {
        match self {
            Detail::Message => Class::Message,
            Detail::Write { .. } => Class::Write,
            Detail::Read { .. } => Class::Read,
            Detail::FetchAdd { .. } => Class::FetchAdd,
            Detail::WriteImm { .. } => Class::WriteImm,
            Detail::Flush => Class::Flush,
        }
    }
}

/// What a result slot holds until the provider writes a FETCH_ADD's old
/// value into it: no old value can be this (the counter starts at zero and
/// grows by small addends).
pub(crate) const NO_RESULT: u64 = u64::MAX;

/// A successful FETCH_ADD: the old value it returned, its addend, and
/// where it came from (for the report of a check that fails).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fetched {
    pub(crate) op: OpId,
    pub(crate) old: u64,
    pub(crate) add: u64,
    pub(crate) slot: u64,
    pub(crate) replayed: bool,
    pub(crate) at: Timestamp,
}

/// The messages sent from registered memory
/// ([`OpKind::MessageFrom`](relink::OpKind::MessageFrom)), and how.
#[derive(Debug, Clone, Default)]
pub(crate) struct FromMemory {
    /// Their indexes.
    pub(crate) indexes: std::collections::BTreeSet<u64>,
    /// Those of 2 to 4 ranges.
    pub(crate) gathered: u64,
    /// Those whose ranges lie in both staging regions.
    pub(crate) across_regions: u64,
    /// Messages meant to go from registered memory that found no staging
    /// room (sent as bytes).
    pub(crate) no_room: u64,
}

impl FromMemory {
    pub(crate) fn count(&mut self, s: &super::staging::Staged) {
        self.indexes.insert(s.index);
        self.gathered += u64::from(s.ranges() > 1);
        self.across_regions += u64::from(s.across_regions());
    }
}

/// A block cut into 2 to [`LocalSgl::MAX`](relink::LocalSgl::MAX) pieces:
/// per piece, in block order, its offset in the block's space (the
/// pieces lie there in an order of their own) and its length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pieces {
    pub(crate) n: usize,
    pub(crate) at: [(u64, u64); relink::LocalSgl::MAX],
}

impl Pieces {
    /// Cut `len` bytes into 2 to 4 pieces as `key` says (where the cuts
    /// are, how the pieces are ordered in memory).
    pub(crate) fn cut(key: u64, len: u64) -> Pieces {
        let want = 2 + (key % 3) as usize;
        let mut cuts: Vec<u64> = (1..want as u64)
            .map(|j| 1 + super::payload::mix(key ^ 0x5c47 ^ j) % (len - 1))
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let bounds: Vec<(u64, u64)> = std::iter::once(0)
            .chain(cuts.iter().copied())
            .zip(cuts.iter().copied().chain(std::iter::once(len)))
            .collect();
        // The order in memory: reversed, or rotated by one.
        let n = bounds.len();
        let order: Vec<usize> = if (key >> 32) & 1 == 1 {
            (0..n).rev().collect()
        } else {
            (0..n).map(|i| (i + 1) % n).collect()
        };
        let mut at = [(0, 0); relink::LocalSgl::MAX];
        let mut offset = 0;
        for i in order {
            let (from, to) = bounds[i];
            at[i] = (offset, to - from);
            offset += to - from;
        }
        Pieces { n, at }
    }

    /// Per piece, in block order: its offset in the block's space, its
    /// offset in the block, its length.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        let mut from = 0;
        self.at[..self.n].iter().map(move |&(at, len)| {
            let r = (at, from, len);
            from += len;
            r
        })
    }
}

/// A WRITE with immediate data: what it writes where, and what became of
/// it (its notice taken at the target, its completion).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Imm {
    pub(crate) op: OpId,
    /// The region it was sent to: the target's data region, or one the
    /// target never advertised.
    pub(crate) region: relink::RegionId,
    /// Its landing slot; `None` for one sent to a token the target never
    /// advertised (it must fail `Remote(REM_ACCESS_ERR)`, never noticed).
    pub(crate) slot: Option<u64>,
    /// Where it was sent in the target's data region (or beyond).
    pub(crate) offset: u64,
    pub(crate) len: u32,
    pub(crate) noticed: bool,
    pub(crate) outcome: Option<Outcome>,
    /// Its landing slot went back to the pool.
    pub(crate) released: bool,
}
