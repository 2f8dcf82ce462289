//! What the workload's books record per operation: its [`Detail`] (what
//! its completion must show) and, for a successful FETCH_ADD, the old value
//! it returned ([`Fetched`]).

use relink::OpId;
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
    },
    FetchAdd {
        add: u64,
        slot: u64,
    },
}

impl Detail {
    pub(super) fn class(&self) -> Class {
        match self {
            Detail::Message => Class::Message,
            Detail::Write { .. } => Class::Write,
            Detail::Read { .. } => Class::Read,
            Detail::FetchAdd { .. } => Class::FetchAdd,
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
