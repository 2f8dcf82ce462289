//! Collections of session handles: [`HandleSet`], the handles a poll round works
//! through (the sessions whose CQ may hold completions, those with queued
//! work requests), and [`ReadyQueue`], the sessions that have output.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// A set of session handles, filled between poll rounds and worked through by
/// the next round in ascending handle order. Kept as a vector that holds its
/// allocation from round to round: an insert is a push (a handle inserted
/// twice is found twice until the set is sorted), and the round sorts and
/// deduplicates once ([`HandleSet::sort`]) before it walks the handles. So the
/// round visits the same handles in the same order as an ordered set would,
/// without a tree node made and freed per handle.
#[derive(Debug)]
pub(super) struct HandleSet {
    /// The handles, unsorted and possibly repeated until `sort`.
    handles: Vec<u64>,
    /// The length at which `insert` sorts and deduplicates, so the vector
    /// holds at most about twice as many entries as distinct handles.
    compact_at: usize,
}

impl Default for HandleSet {
    fn default() -> HandleSet {
        HandleSet {
            handles: Vec::new(),
            compact_at: HandleSet::MIN_COMPACT,
        }
    }
}

impl HandleSet {
    /// Entries below which `insert` never sorts.
    const MIN_COMPACT: usize = 64;

    /// Add `handle` (a handle already in the set stays in it once).
    #[inline]
    pub fn insert(&mut self, handle: u64) {
        if self.handles.last() == Some(&handle) {
            return;
        }
        if self.handles.len() >= self.compact_at {
            self.sort();
            self.compact_at = (2 * self.handles.len()).max(HandleSet::MIN_COMPACT);
        }
        self.handles.push(handle);
    }

    /// Take `handle` out.
    pub fn remove(&mut self, handle: &u64) {
        self.handles.retain(|h| h != handle);
    }

    /// Put the handles in ascending order, each once.
    #[inline]
    pub fn sort(&mut self) {
        if self.handles.len() > 1 {
            self.handles.sort_unstable();
            self.handles.dedup();
        }
    }

    /// Whether the set is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// The handle at `i` (in ascending order after [`sort`](Self::sort)).
    pub fn get(&self, i: usize) -> Option<u64> {
        self.handles.get(i).copied()
    }

    /// Empty the set, keeping its allocation.
    pub fn clear(&mut self) {
        self.handles.clear();
    }
}

/// The sessions that have output, in the order [`Node::poll_output`]
/// serves them: each at most once, so it holds at most as many sessions as
/// the node has. A session joins when it has output after an input
/// (`Node::run_actions`) and leaves when the application took its last
/// output, by either way (`Node::taken`), or when it is reaped.
///
/// A session's place is its turn, handed out in increasing order; the
/// queue is a deque of turns in that order. Taking a session out anywhere
/// forgets its turn and leaves the deque's entry behind, skipped when it
/// comes to the front and swept out once stale entries outnumber the live
/// ones: a session that joins and leaves at every message (an application
/// that takes outputs session by session) costs no tree nodes.
#[derive(Debug, Default)]
pub(super) struct ReadyQueue {
    /// (turn, session handle), turns increasing: the front is served next.
    /// Entries whose turn is not the session's in `turn_of` are stale.
    order: VecDeque<(u64, u64)>,
    /// Session handle → its turn in `order`: the queued sessions.
    turn_of: HashMap<u64, u64, BuildHasherDefault<HandleHasher>>,
    /// The next turn to hand out (the back of the queue).
    next_turn: u64,
}

impl ReadyQueue {
    /// Stale entries `order` may hold besides the live ones before `push`
    /// sweeps them out.
    const SLACK: usize = 32;

    /// Put session `handle` at the back, unless it is queued already (then it
    /// keeps its place).
    pub fn push(&mut self, handle: u64) {
        if self.turn_of.contains_key(&handle) {
            return;
        }
        if self.order.len() >= 2 * self.turn_of.len() + ReadyQueue::SLACK {
            let turn_of = &self.turn_of;
            self.order.retain(|(t, h)| turn_of.get(h) == Some(t));
        }
        let turn = self.next_turn;
        self.next_turn += 1;
        self.order.push_back((turn, handle));
        self.turn_of.insert(handle, turn);
    }

    /// Take the session at the front.
    pub fn pop(&mut self) -> Option<u64> {
        while let Some((turn, handle)) = self.order.pop_front() {
            if self.turn_of.get(&handle) == Some(&turn) {
                self.turn_of.remove(&handle);
                return Some(handle);
            }
        }
        None
    }

    /// Take session `handle` out, wherever it is.
    pub fn remove(&mut self, handle: u64) {
        self.turn_of.remove(&handle);
        if self.turn_of.is_empty() {
            self.order.clear();
        }
    }

    /// How many sessions are queued.
    pub fn len(&self) -> usize {
        self.turn_of.len()
    }
}

/// The hasher of the ready queue's session handles: handles are the node's own
/// counters, not chosen by a peer, so a multiply spreads them well enough.
#[derive(Debug, Default)]
pub(super) struct HandleHasher(u64);

impl Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(s: &mut HandleSet) -> Vec<u64> {
        s.sort();
        (0..).map_while(|i| s.get(i)).collect()
    }

    #[test]
    fn a_round_sees_each_key_once_in_ascending_order() {
        let mut s = HandleSet::default();
        for h in [7, 3, 3, 9, 7, 1] {
            s.insert(h);
        }
        s.remove(&9);
        s.remove(&4); // not in the set: nothing happens
        assert_eq!(sorted(&mut s), [1, 3, 7]);
        s.clear();
        assert_eq!(sorted(&mut s), Vec::<u64>::new());
    }

    #[test]
    fn repeated_inserts_stay_bounded() {
        let mut s = HandleSet::default();
        for i in 0..10_000u64 {
            s.insert(i % 10);
        }
        assert!(s.handles.len() <= HandleSet::MIN_COMPACT + 1);
        assert_eq!(sorted(&mut s), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn the_ready_queue_holds_each_session_once_in_turn() {
        let mut q = ReadyQueue::default();
        for handle in [3, 1, 3, 2, 1] {
            q.push(handle);
        }
        assert_eq!(q.len(), 3, "each session once");
        assert_eq!(q.pop(), Some(3));
        q.push(3); // more output: to the back
        q.remove(1);
        q.remove(9); // not queued: nothing happens
        assert_eq!(q.pop(), Some(2));
        assert_eq!(q.pop(), Some(3));
        assert_eq!(q.pop(), None);
        assert_eq!(q.len(), 0);
        q.push(1);
        assert_eq!(q.pop(), Some(1), "a removed session may come back");
    }

    #[test]
    fn a_session_joining_and_leaving_at_every_output_leaves_nothing_behind() {
        let mut q = ReadyQueue::default();
        q.push(1);
        for _ in 0..1000 {
            q.push(2);
            q.remove(2);
        }
        assert!(q.order.len() <= 2 + ReadyQueue::SLACK);
        q.push(3);
        q.push(2);
        assert_eq!(q.len(), 3);
        assert_eq!(
            [q.pop(), q.pop(), q.pop(), q.pop()],
            [Some(1), Some(3), Some(2), None]
        );
    }
}
