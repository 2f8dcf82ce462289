//! What a client run counted, by completion status, and where its failure
//! is placed.

use std::collections::BTreeMap;

use relink_fabric::{WcStatus, WorkCompletion};

use super::output::status_name;

/// Counts of a client run, and what made it stop early.
///
/// The moment of a failure is taken in completion order: an RC QP reports
/// its requests in order, and after the first error everything still
/// outstanding flushes. So the requests outstanding when the failure
/// happened are those posted minus those that succeeded before the first
/// error completion, wherever the failure was first noticed (a CM event or
/// a failed post may be seen before the completions are polled).
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Requests the QP accepted.
    pub(super) posted: u64,
    /// Completions reaped, whatever their status.
    pub(super) completed: u64,
    /// Completions with a success status.
    pub(super) ok: u64,
    /// Completions by status name (`SUCCESS`, `WR_FLUSH_ERR`, ...).
    pub(super) by_status: BTreeMap<&'static str, u64>,
    /// The first completion with an error status: status and wr_id.
    pub(super) first_error: Option<(WcStatus, u64)>,
    /// Successful completions before the first error completion.
    ok_before_error: Option<u64>,
    /// The event that ended the connection (a CM event, `CQ_ERR`,
    /// `DEVICE_FATAL`), if one did.
    pub(super) ended_by: Option<&'static str>,
    /// A post that failed for good, if one did.
    pub(super) post_error: Option<String>,
}

impl Tally {
    /// Requests posted and not yet completed.
    pub(super) fn outstanding(&self) -> u64 {
        self.posted - self.completed
    }

    /// Whether the run must stop posting and report a failure.
    pub(super) fn failed(&self) -> bool {
        self.first_error.is_some() || self.ended_by.is_some() || self.post_error.is_some()
    }

    pub(super) fn complete(&mut self, wc: &WorkCompletion) {
        self.completed += 1;
        *self.by_status.entry(status_name(wc.status)).or_default() += 1;
        if wc.status.is_ok() {
            self.ok += 1;
        } else if self.first_error.is_none() {
            self.first_error = Some((wc.status, wc.wr_id));
            self.ok_before_error = Some(self.ok);
        }
    }

    /// Successful completions before the failure (see [`Tally`]).
    fn ok_before_failure(&self) -> u64 {
        self.ok_before_error.unwrap_or(self.ok)
    }

    /// Requests outstanding when the failure happened.
    pub(super) fn outstanding_at_failure(&self) -> u64 {
        self.posted - self.ok_before_failure()
    }

    /// Completions since the failure, by status.
    pub(super) fn since_failure(&self) -> BTreeMap<&'static str, u64> {
        let mut m = self.by_status.clone();
        let before = self.ok_before_failure();
        if let Some(ok) = m.get_mut(status_name(WcStatus::Success)) {
            *ok -= before;
            if *ok == 0 {
                m.remove(status_name(WcStatus::Success));
            }
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use relink_fabric::QpId;

    use super::*;

    fn wc(wr_id: u64, status: WcStatus) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode: relink_fabric::WcOpcode::RdmaWrite,
            qp: QpId(1),
            byte_len: 0,
            imm: None,
            invalidated_rkey: None,
        }
    }

    #[test]
    fn failure_is_placed_at_the_first_error_completion() {
        let mut t = Tally {
            posted: 40,
            ..Tally::default()
        };
        for i in 0..8 {
            t.complete(&wc(i, WcStatus::Success));
        }
        // The connection end is noticed before the completions that
        // preceded it are polled: they still count as before the failure.
        t.ended_by = Some("DISCONNECTED");
        assert!(t.failed());
        for i in 8..10 {
            t.complete(&wc(i, WcStatus::Success));
        }
        for i in 10..40 {
            t.complete(&wc(i, WcStatus::WrFlushErr));
        }
        assert_eq!(t.first_error, Some((WcStatus::WrFlushErr, 10)));
        assert_eq!(t.outstanding(), 0);
        assert_eq!(t.outstanding_at_failure(), 30);
        assert_eq!(t.since_failure(), BTreeMap::from([("WR_FLUSH_ERR", 30)]));
        assert_eq!(
            t.by_status,
            BTreeMap::from([("SUCCESS", 10), ("WR_FLUSH_ERR", 30)])
        );
    }

    #[test]
    fn connection_end_without_error_completions() {
        let mut t = Tally {
            posted: 3,
            ..Tally::default()
        };
        for i in 0..3 {
            t.complete(&wc(i, WcStatus::Success));
        }
        t.ended_by = Some("DISCONNECTED");
        assert_eq!(t.outstanding_at_failure(), 0);
        assert!(t.since_failure().is_empty());
    }
}
