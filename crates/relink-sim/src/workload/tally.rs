//! How the workload counts: operation classes, per-class tallies of
//! outcomes, the submission window, and the problems found on the way.

use relink::{OpError, Outcome};
use serde::Serialize;

/// How many operations of each kind a session keeps pending, and how
/// many new messages one top-up may submit.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Window {
    /// New messages per top-up (the pace).
    pub pace: usize,
    /// Messages pending at most.
    pub messages: usize,
    /// WRITEs pending at most (one per block, so [`BLOCKS`](super::BLOCKS)
    /// bounds it too).
    pub writes: usize,
    /// READs pending at most (the 8 landing slots bound it too).
    pub reads: usize,
    /// FETCH_ADDs pending at most (the 8 result slots bound it too).
    pub atomics: usize,
}

/// Session A's window: every kind of operation, messages as many as the
/// window holds at each top-up (no pace).
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
    /// RDMA WRITE with immediate data (a WRITE and a sequenced notice).
    WriteImm,
    /// A barrier ([`OpKind::Flush`](relink::OpKind::Flush)).
    Flush,
}

impl Class {
    /// Plural noun, for tables.
    pub fn plural(self) -> &'static str {
        match self {
            Class::Message => "messages",
            Class::Write => "WRITEs",
            Class::Read => "READs",
            Class::FetchAdd => "FETCH_ADDs",
            Class::WriteImm => "WRITEs with immediate data",
            Class::Flush => "flushes",
        }
    }
}

/// How completions of one kind ended.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Tally {
    /// Operations submitted; each completion counts in exactly one of the
    /// fields below (`replayed` aside: a part of `success`).
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
    pub(crate) fn count(&mut self, o: Outcome) {
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
            // An outcome this tally does not know counts as a failure.
            _ => self.failed_other += 1,
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

/// A problem found while the workload ran (reported as a failed check).
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    /// When it was found, in seconds of virtual time: on the fabric's
    /// clock for the workload's own problems, since the workload started
    /// for the demo's.
    pub at: f64,
    /// What was wrong, in a sentence (the workload's own start with its
    /// name).
    pub what: String,
}
