//! [`KeySet`]: the session keys a poll round works through (the sessions
//! whose CQ may hold completions, those with queued work requests).

/// A set of session keys, filled between poll rounds and worked through by
/// the next round in ascending key order. Kept as a vector that holds its
/// allocation from round to round: an insert is a push (a key inserted
/// twice is found twice until the set is sorted), and the round sorts and
/// deduplicates once ([`KeySet::sort`]) before it walks the keys. So the
/// round visits the same keys in the same order as an ordered set would,
/// without a tree node made and freed per key.
#[derive(Debug)]
pub(super) struct KeySet {
    /// The keys, unsorted and possibly repeated until `sort`.
    keys: Vec<u64>,
    /// The length at which `insert` sorts and deduplicates, so the vector
    /// holds at most about twice as many entries as distinct keys.
    compact_at: usize,
}

impl Default for KeySet {
    fn default() -> KeySet {
        KeySet {
            keys: Vec::new(),
            compact_at: KeySet::MIN_COMPACT,
        }
    }
}

impl KeySet {
    /// Entries below which `insert` never sorts.
    const MIN_COMPACT: usize = 64;

    /// Add `key` (a key already in the set stays in it once).
    pub fn insert(&mut self, key: u64) {
        if self.keys.last() == Some(&key) {
            return;
        }
        if self.keys.len() >= self.compact_at {
            self.sort();
            self.compact_at = (2 * self.keys.len()).max(KeySet::MIN_COMPACT);
        }
        self.keys.push(key);
    }

    /// Take `key` out.
    pub fn remove(&mut self, key: &u64) {
        self.keys.retain(|k| k != key);
    }

    /// Put the keys in ascending order, each once.
    pub fn sort(&mut self) {
        self.keys.sort_unstable();
        self.keys.dedup();
    }

    /// The key at `i` (in ascending order after [`sort`](Self::sort)).
    pub fn get(&self, i: usize) -> Option<u64> {
        self.keys.get(i).copied()
    }

    /// Empty the set, keeping its allocation.
    pub fn clear(&mut self) {
        self.keys.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(s: &mut KeySet) -> Vec<u64> {
        s.sort();
        (0..).map_while(|i| s.get(i)).collect()
    }

    #[test]
    fn a_round_sees_each_key_once_in_ascending_order() {
        let mut s = KeySet::default();
        for k in [7, 3, 3, 9, 7, 1] {
            s.insert(k);
        }
        s.remove(&9);
        s.remove(&4); // not in the set: nothing happens
        assert_eq!(sorted(&mut s), [1, 3, 7]);
        s.clear();
        assert_eq!(sorted(&mut s), Vec::<u64>::new());
    }

    #[test]
    fn repeated_inserts_stay_bounded() {
        let mut s = KeySet::default();
        for i in 0..10_000u64 {
            s.insert(i % 10);
        }
        assert!(s.keys.len() <= KeySet::MIN_COMPACT + 1);
        assert_eq!(sorted(&mut s), (0..10).collect::<Vec<_>>());
    }
}
