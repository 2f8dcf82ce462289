//! What a relink loop runs on: the [`Drive`] trait (two nodes, one
//! established session, whatever makes them progress) and the wake-up rule
//! the pairs share when idle.

use relink::{Counters, Memory, Node, RegionId, SessionHandle};
use relink_fabric::Timestamp;

use crate::loops::TICK;

/// Two relink nodes with one established session between them, and
/// whatever drives them. The measuring loops run on the initiator's side.
pub trait Drive {
    /// The provider kind (`soft-inproc`, `soft-tcp`, `verbs`).
    fn kind(&self) -> &'static str;
    /// The initiator's node.
    fn initiator(&mut self) -> &mut Node;
    /// The initiator's session.
    fn session(&self) -> SessionHandle;
    /// Make progress on everything this thread drives (the initiator's
    /// node, and in-process the target's node and its receiving
    /// application too); whether anything happened.
    ///
    /// # Panics
    /// If the receiving application saw a wrong message.
    fn poll(&mut self) -> bool;
    /// Messages the receiving application received and checked so far.
    fn received(&self) -> u64;
    /// Nothing to do: block until something may have happened (or a timer
    /// of a node is due), at most a tick. `receiver_only`: the initiator
    /// waits for nothing but the receiving application (which runs on its
    /// own thread in a [`ThreadPair`](super::ThreadPair)).
    fn wait(&mut self, receiver_only: bool);
    /// The target's host memory of `region`.
    fn target_region(&mut self, region: RegionId) -> Memory;
    /// Close the sessions and check that nothing failed.
    fn close(self)
    where
        Self: Sized,
    {
        let _ = self.close_counted();
    }
    /// [`close`](Drive::close), and hand back both ends' counters of the
    /// session, read just before it closed.
    fn close_counted(self) -> EndCounters;
}

/// Both ends' [`Counters`] of a pair's session ([`Drive::close_counted`]).
#[derive(Debug, Clone, Copy)]
pub struct EndCounters {
    /// The initiator's (the sending side of the measuring loops).
    pub initiator: Counters,
    /// The target's (the receiving application's side).
    pub target: Counters,
}

/// The earliest timer deadline of some nodes, capped at `now + TICK`.
pub(super) fn next_wakeup<'n>(
    now: Timestamp,
    nodes: impl IntoIterator<Item = &'n Node>,
) -> Timestamp {
    nodes
        .into_iter()
        .filter_map(Node::next_deadline)
        .fold(now + TICK, std::cmp::min)
        .max(now)
}
