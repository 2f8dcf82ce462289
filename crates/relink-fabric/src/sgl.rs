//! [`SgeList`]: the scatter/gather list of a work request, holding up to
//! [`SgeList::INLINE`] elements without a heap allocation.
//!
//! Nearly every request names one buffer (a message's send slot, a receive
//! slot, a one-sided operation's local range) or none (a window's bind or
//! invalidation), so building, cloning and queueing such a request costs
//! no allocation; longer lists spill into a vector. Either way the list
//! reads as a `&[Sge]`.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};

use crate::verbs::Sge;

const EMPTY: Sge = Sge {
    addr: 0,
    length: 0,
    lkey: 0,
};

/// A scatter/gather list: [`Sge`]s in order, read as a slice.
///
/// Up to [`SgeList::INLINE`] elements live inside the value; a longer
/// list is kept in a vector. Build one with [`SgeList::new`] and
/// [`push`](SgeList::push), from one element ([`SgeList::one`],
/// `From<Sge>`), from an array or a slice of `Sge`s, from a `Vec<Sge>` or by
/// collecting an iterator.
#[derive(Clone)]
pub struct SgeList(Repr);

#[derive(Clone)]
enum Repr {
    /// The first `len` of `sges` are the list.
    Inline {
        len: u8,
        sges: [Sge; SgeList::INLINE],
    },
    /// A list longer than [`SgeList::INLINE`] (or one that was).
    Heap(Vec<Sge>),
}

impl SgeList {
    /// How many elements a list holds without allocating.
    pub const INLINE: usize = 2;

    /// An empty list.
    pub const fn new() -> SgeList {
        SgeList(Repr::Inline {
            len: 0,
            sges: [EMPTY; SgeList::INLINE],
        })
    }

    /// The list of the one element `sge`.
    pub const fn one(sge: Sge) -> SgeList {
        SgeList(Repr::Inline {
            len: 1,
            sges: [sge, EMPTY],
        })
    }

    /// Append `sge`; allocates only when the list grows past
    /// [`SgeList::INLINE`] elements for the first time.
    pub fn push(&mut self, sge: Sge) {
        match &mut self.0 {
            Repr::Inline { len, sges } if usize::from(*len) < SgeList::INLINE => {
                sges[usize::from(*len)] = sge;
                *len += 1;
            }
            Repr::Inline { len, sges } => {
                let mut v = Vec::with_capacity(2 * SgeList::INLINE);
                v.extend_from_slice(&sges[..usize::from(*len)]);
                v.push(sge);
                self.0 = Repr::Heap(v);
            }
            Repr::Heap(v) => v.push(sge),
        }
    }

    /// Remove every element (a spilled list keeps its vector for reuse).
    pub fn clear(&mut self) {
        match &mut self.0 {
            Repr::Inline { len, .. } => *len = 0,
            Repr::Heap(v) => v.clear(),
        }
    }

    /// The list as a slice.
    pub fn as_slice(&self) -> &[Sge] {
        match &self.0 {
            Repr::Inline { len, sges } => &sges[..usize::from(*len)],
            Repr::Heap(v) => v,
        }
    }

    /// The list as a mutable slice (to adjust an element in place).
    pub fn as_mut_slice(&mut self) -> &mut [Sge] {
        match &mut self.0 {
            Repr::Inline { len, sges } => &mut sges[..usize::from(*len)],
            Repr::Heap(v) => v,
        }
    }

    /// Whether the list lives on the heap (it grew past
    /// [`SgeList::INLINE`] elements, or came from such a `Vec`).
    pub fn spilled(&self) -> bool {
        matches!(self.0, Repr::Heap(_))
    }

    /// Total bytes of the list.
    pub fn total_len(&self) -> u64 {
        self.iter().map(|s| u64::from(s.length)).sum()
    }
}

impl Default for SgeList {
    fn default() -> SgeList {
        SgeList::new()
    }
}

impl Deref for SgeList {
    type Target = [Sge];

    fn deref(&self) -> &[Sge] {
        self.as_slice()
    }
}

impl DerefMut for SgeList {
    fn deref_mut(&mut self) -> &mut [Sge] {
        self.as_mut_slice()
    }
}

impl AsRef<[Sge]> for SgeList {
    fn as_ref(&self) -> &[Sge] {
        self.as_slice()
    }
}

impl fmt::Debug for SgeList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for SgeList {
    fn eq(&self, other: &SgeList) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for SgeList {}

impl Hash for SgeList {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl From<Sge> for SgeList {
    fn from(sge: Sge) -> SgeList {
        SgeList::one(sge)
    }
}

impl From<&[Sge]> for SgeList {
    fn from(sges: &[Sge]) -> SgeList {
        sges.iter().copied().collect()
    }
}

impl<const N: usize> From<[Sge; N]> for SgeList {
    fn from(sges: [Sge; N]) -> SgeList {
        sges.into_iter().collect()
    }
}

/// A list of at most [`SgeList::INLINE`] elements moves inline (the
/// vector is freed); a longer one keeps the vector.
impl From<Vec<Sge>> for SgeList {
    fn from(v: Vec<Sge>) -> SgeList {
        if v.len() <= SgeList::INLINE {
            v.into_iter().collect()
        } else {
            SgeList(Repr::Heap(v))
        }
    }
}

impl FromIterator<Sge> for SgeList {
    fn from_iter<I: IntoIterator<Item = Sge>>(iter: I) -> SgeList {
        let mut list = SgeList::new();
        list.extend(iter);
        list
    }
}

impl Extend<Sge> for SgeList {
    fn extend<I: IntoIterator<Item = Sge>>(&mut self, iter: I) {
        for sge in iter {
            self.push(sge);
        }
    }
}

impl<'a> IntoIterator for &'a SgeList {
    type Item = &'a Sge;
    type IntoIter = std::slice::Iter<'a, Sge>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge(n: u64) -> Sge {
        Sge {
            addr: 0x1000 * n,
            length: n as u32,
            lkey: 7,
        }
    }

    #[test]
    fn short_lists_stay_inline_and_read_as_slices() {
        let mut l = SgeList::new();
        assert!(l.is_empty());
        l.push(sge(1));
        l.push(sge(2));
        assert!(!l.spilled());
        assert_eq!(l.as_slice(), &[sge(1), sge(2)]);
        assert_eq!(l.total_len(), 3);
        assert_eq!(SgeList::one(sge(1)).as_slice(), &[sge(1)]);
        assert_eq!(SgeList::from(vec![sge(4)]), SgeList::from([sge(4)]));
        assert!(!SgeList::from(vec![sge(4), sge(5)]).spilled());
    }

    #[test]
    fn longer_lists_spill_and_keep_their_order() {
        let l: SgeList = (1..=5).map(sge).collect();
        assert!(l.spilled());
        assert_eq!(l.len(), 5);
        assert_eq!(l[4], sge(5));
        let mut c = l.clone();
        c.clear();
        assert!(c.is_empty());
        c.push(sge(9));
        assert_eq!(c.as_slice(), &[sge(9)]);
        assert_eq!(
            format!("{:?}", SgeList::one(sge(1))),
            format!("{:?}", [sge(1)])
        );
    }

    #[test]
    fn equality_ignores_where_the_list_lives() {
        let inline = SgeList::from([sge(1)]);
        let mut spilled: SgeList = (1..=3).map(sge).collect();
        spilled.clear();
        spilled.push(sge(1));
        assert!(spilled.spilled());
        assert_eq!(inline, spilled);
    }
}
