//! Bookkeeping that makes real verbs keep the provider contract, kept free
//! of FFI so it is unit-tested here:
//!
//! - [`SendQueue`] / [`RecvQueue`]: every work request posted and not yet
//!   completed, so that a device loss completes each one exactly once with
//!   `WrFlushErr` (on rxe a removed device never flushes by itself: traffic
//!   keeps flowing until the context is closed, and then nothing completes),
//!   and so that an error completion, whose opcode verbs leaves undefined,
//!   reports the opcode of the request it belongs to.
//! - [`Notify`]: one CQ's notification state. The provider arms CQs itself
//!   so that `wait` wakes on completions; once the caller arms a CQ with
//!   `req_notify_cq`, the hardware arming is the caller's and every
//!   notification becomes an `Event::CqReady`.

#![forbid(unsafe_code)]

use std::collections::VecDeque;

use relink_fabric::WcOpcode;

/// One send-queue request not yet known to be complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqEntry {
    /// The caller's cookie.
    pub wr_id: u64,
    /// The completion opcode it reports.
    pub opcode: WcOpcode,
    /// Whether it completes on success.
    pub signaled: bool,
}

/// The outstanding requests of a send queue, oldest first.
#[derive(Debug, Default)]
pub struct SendQueue {
    q: VecDeque<SqEntry>,
}

impl SendQueue {
    /// Record a posted request.
    pub fn push(&mut self, e: SqEntry) {
        self.q.push_back(e);
    }

    /// Requests outstanding.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.q.len()
    }

    /// Whether nothing is outstanding.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Whether `wr_id` is the next request to complete (an error completion
    /// of this queue would be for it).
    pub fn front_is(&self, wr_id: u64) -> bool {
        self.q.front().is_some_and(|e| e.wr_id == wr_id)
    }

    /// A completion for `wr_id` arrived. RC completes a send queue in
    /// order: a success retires every unsignaled request before the first
    /// signaled one with that `wr_id`; an error completes the oldest
    /// request. Returns the retired request's opcode, or `None` if nothing
    /// matched (the completion is then taken as is).
    pub fn complete(&mut self, wr_id: u64, ok: bool) -> Option<WcOpcode> {
        if !ok {
            let front = self.q.front()?;
            if front.wr_id != wr_id {
                return None;
            }
            return self.q.pop_front().map(|e| e.opcode);
        }
        let pos = self.q.iter().position(|e| e.signaled && e.wr_id == wr_id)?;
        let e = self.q[pos];
        self.q.drain(..=pos);
        Some(e.opcode)
    }

    /// Everything still outstanding, oldest first, leaving the queue empty.
    pub fn drain(&mut self) -> Vec<SqEntry> {
        self.q.drain(..).collect()
    }
}

/// The outstanding receives of a QP's receive queue, oldest first.
#[derive(Debug, Default)]
pub struct RecvQueue {
    q: VecDeque<u64>,
}

impl RecvQueue {
    /// Record a posted receive.
    pub fn push(&mut self, wr_id: u64) {
        self.q.push_back(wr_id);
    }

    /// Whether `wr_id` is outstanding.
    pub fn contains(&self, wr_id: u64) -> bool {
        self.q.contains(&wr_id)
    }

    /// A receive completed (in order, so normally the oldest).
    pub fn complete(&mut self, wr_id: u64) -> bool {
        match self.q.iter().position(|w| *w == wr_id) {
            Some(i) => {
                self.q.remove(i);
                true
            }
            None => false,
        }
    }

    /// Everything still outstanding, oldest first.
    pub fn drain(&mut self) -> Vec<u64> {
        self.q.drain(..).collect()
    }
}

/// What to do with a CQ's notification from the hardware.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnEvent {
    /// Only wake waiters.
    Activity,
    /// Report `Event::CqReady` (and wake waiters).
    Ready,
    /// The notification may have been the provider's own "any completion"
    /// arming while the caller asked for solicited ones only: re-arm the
    /// hardware for solicited completions, poll what is there, and call
    /// [`Notify::resolve`] with it.
    Resolve,
}

/// One CQ's notification state (see the module docs).
#[derive(Debug, Default, Clone)]
pub struct Notify {
    /// The caller has armed this CQ at least once.
    user_mode: bool,
    /// The caller's pending arming: `Some(solicited_only)`.
    user_arm: Option<bool>,
    /// The hardware is armed.
    hw_armed: bool,
    /// The hardware arming may be the provider's "any completion" one
    /// while the caller wants solicited completions only.
    ambiguous: bool,
}

impl Notify {
    /// `wait` is about to sleep: whether to arm the hardware for any
    /// completion (only CQs the caller never armed, and only if not armed).
    pub fn arm_for_activity(&mut self) -> bool {
        if self.user_mode || self.hw_armed {
            return false;
        }
        self.hw_armed = true;
        true
    }

    /// The caller armed the CQ; the hardware must be armed with
    /// `solicited_only` right after.
    pub fn user_arm(&mut self, solicited_only: bool) {
        if !self.user_mode {
            self.user_mode = true;
            // The provider's own arming cannot be taken back: its next
            // notification cannot tell a solicited completion from another.
            self.ambiguous = self.hw_armed && solicited_only;
        }
        self.user_arm = Some(solicited_only);
        self.hw_armed = true;
    }

    /// Whether the caller has an arming pending.
    pub fn user_armed(&self) -> bool {
        self.user_arm.is_some()
    }

    /// Whether the caller's pending arming is for solicited completions
    /// only.
    pub fn armed_solicited_only(&self) -> bool {
        self.user_arm == Some(true)
    }

    /// The provider found an unsuccessful completion on this CQ. Errors
    /// notify a `solicited_only` arming (`ibv_req_notify_cq(3)`), but some
    /// devices do not (rxe signals solicited arming only for receives with
    /// the solicited bit): returns true, consuming the arming, if the caller
    /// is owed a notification for it.
    pub fn error_completion(&mut self) -> bool {
        if self.user_arm == Some(true) {
            self.user_arm = None;
            return true;
        }
        false
    }

    /// The hardware notified.
    pub fn on_event(&mut self) -> OnEvent {
        self.hw_armed = false;
        if !self.user_mode {
            return OnEvent::Activity;
        }
        if std::mem::take(&mut self.ambiguous) {
            return match self.user_arm {
                Some(true) => {
                    self.hw_armed = true;
                    OnEvent::Resolve
                }
                Some(false) => {
                    self.user_arm = None;
                    OnEvent::Ready
                }
                None => OnEvent::Activity,
            };
        }
        if self.user_arm.take().is_some() {
            OnEvent::Ready
        } else {
            OnEvent::Activity
        }
    }

    /// After [`OnEvent::Resolve`]: the completions found, as `(is_receive,
    /// is_success)`. Reports (returns true, consuming the caller's arming)
    /// if one could have been solicited: an error (errors always notify) or
    /// a receive (its solicited bit is not visible in a work completion; a
    /// successful send completion is never solicited). A spurious
    /// `CqReady` is possible for a receive here, a lost one is not.
    /// Nothing is reported if the arming was consumed meanwhile (an error
    /// found while polling, [`Notify::error_completion`]).
    pub fn resolve(&mut self, found: impl IntoIterator<Item = (bool, bool)>) -> bool {
        if self.user_arm.is_none() {
            return false;
        }
        let report = found.into_iter().any(|(recv, ok)| recv || !ok);
        if report {
            self.user_arm = None;
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(wr_id: u64, signaled: bool) -> SqEntry {
        SqEntry {
            wr_id,
            opcode: if wr_id % 2 == 0 {
                WcOpcode::RdmaWrite
            } else {
                WcOpcode::Send
            },
            signaled,
        }
    }

    #[test]
    fn success_retires_unsignaled_predecessors() {
        let mut q = SendQueue::default();
        for (i, s) in [(0, false), (1, false), (2, true), (3, true)] {
            q.push(e(i, s));
        }
        assert_eq!(q.complete(2, true), Some(WcOpcode::RdmaWrite));
        assert_eq!(q.len(), 1);
        assert_eq!(q.complete(9, true), None, "unknown wr_id");
        assert_eq!(q.len(), 1);
        assert_eq!(q.drain(), vec![e(3, true)]);
        assert!(q.is_empty());
    }

    #[test]
    fn errors_complete_the_oldest_and_the_rest_flush() {
        let mut q = SendQueue::default();
        for i in 0..4 {
            q.push(e(i, i == 3));
        }
        assert!(q.front_is(0));
        assert_eq!(q.complete(0, false), Some(WcOpcode::RdmaWrite));
        assert_eq!(q.complete(2, false), None, "errors come in order");
        assert_eq!(q.complete(1, false), Some(WcOpcode::Send));
        let rest: Vec<u64> = q.drain().iter().map(|e| e.wr_id).collect();
        assert_eq!(rest, vec![2, 3]);
    }

    #[test]
    fn receives() {
        let mut r = RecvQueue::default();
        for w in [10, 11, 12] {
            r.push(w);
        }
        assert!(r.complete(10));
        assert!(!r.complete(10));
        assert!(r.complete(12));
        assert_eq!(r.drain(), vec![11]);
    }

    #[test]
    fn unarmed_cqs_are_armed_for_activity_once() {
        let mut n = Notify::default();
        assert!(n.arm_for_activity());
        assert!(!n.arm_for_activity(), "still armed");
        assert_eq!(n.on_event(), OnEvent::Activity);
        assert!(n.arm_for_activity());
    }

    #[test]
    fn a_user_arming_is_one_shot() {
        let mut n = Notify::default();
        n.user_arm(false);
        assert!(!n.arm_for_activity(), "the caller owns the arming now");
        assert_eq!(n.on_event(), OnEvent::Ready);
        assert_eq!(n.on_event(), OnEvent::Activity, "consumed");
        assert!(!n.arm_for_activity());
        n.user_arm(true);
        assert_eq!(n.on_event(), OnEvent::Ready);
    }

    #[test]
    fn an_error_found_by_polling_notifies_a_solicited_arming_once() {
        let mut n = Notify::default();
        assert!(!n.error_completion(), "not armed");
        n.user_arm(false);
        assert!(
            !n.error_completion(),
            "an any-completion arming is the hardware's"
        );
        assert_eq!(n.on_event(), OnEvent::Ready);
        n.user_arm(true);
        assert!(n.armed_solicited_only());
        assert!(n.error_completion());
        assert!(!n.error_completion(), "one arming, one notification");
        assert_eq!(
            n.on_event(),
            OnEvent::Activity,
            "a late hardware event is not a second one"
        );
    }

    #[test]
    fn an_any_arming_pending_merges_with_a_user_any_arming() {
        let mut n = Notify::default();
        assert!(n.arm_for_activity());
        n.user_arm(false);
        assert_eq!(n.on_event(), OnEvent::Ready);
    }

    #[test]
    fn an_any_arming_pending_under_a_solicited_one_is_resolved() {
        // Send CQ: successful sends never notify a solicited arming.
        let mut n = Notify::default();
        assert!(n.arm_for_activity());
        n.user_arm(true);
        assert_eq!(n.on_event(), OnEvent::Resolve);
        assert!(!n.resolve([(false, true)]));
        assert!(n.user_armed(), "still armed for a solicited completion");
        // The hardware was re-armed (solicited): the next notification is it.
        assert_eq!(n.on_event(), OnEvent::Ready);
        // Receive CQ with an error: reported.
        let mut n = Notify::default();
        assert!(n.arm_for_activity());
        n.user_arm(true);
        assert_eq!(n.on_event(), OnEvent::Resolve);
        assert!(n.resolve([(true, false)]));
        assert!(!n.user_armed());
        assert_eq!(
            n.on_event(),
            OnEvent::Activity,
            "the re-arm's event is not a second report"
        );
        // The errors were already reported while polling: no second report.
        let mut n = Notify::default();
        assert!(n.arm_for_activity());
        n.user_arm(true);
        assert_eq!(n.on_event(), OnEvent::Resolve);
        assert!(n.error_completion());
        assert!(!n.resolve([(true, false)]));
    }
}
