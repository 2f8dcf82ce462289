//! The bookkeeping both relink loops share: [`LoopStats`] (how often a loop
//! polled and waited) and the check every completion they count passes.

use std::collections::VecDeque;

use relink::{OpId, Outcome};

/// How a relink loop went, over all its runs: how often it polled and how
/// often it had to wait, per operation completed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LoopStats {
    /// Operations completed.
    pub ops: u64,
    /// Loop iterations (each polls the nodes this thread drives once).
    pub iterations: u64,
    /// Iterations without progress, which waited on the provider.
    pub waits: u64,
}

impl LoopStats {
    /// Iterations per operation.
    pub fn iterations_per_op(&self) -> f64 {
        self.iterations as f64 / self.ops.max(1) as f64
    }

    /// Waits per operation.
    pub fn waits_per_op(&self) -> f64 {
        self.waits as f64 / self.ops.max(1) as f64
    }
}

/// Checks a completion: the next outstanding operation, a first-time success.
#[track_caller]
pub(super) fn check_completion(
    outstanding: &mut VecDeque<OpId>,
    c: relink::Completion,
    what: &str,
) {
    let want = outstanding.pop_front();
    assert!(
        want == Some(c.op) && c.outcome == (Outcome::Success { replayed: false }),
        "{what}: want a first-time success of {want:?} (completions in order), got {c:?}"
    );
}
