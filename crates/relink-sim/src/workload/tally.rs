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
    /// Virtual seconds.
    pub at: f64,
    /// What.
    pub what: String,
}
