//! The staging areas of messages sent from registered memory
//! ([`OpKind::MessageFrom`](relink::OpKind::MessageFrom)): the workload
//! writes such a message's payload, cut into 1 to [`LocalSgl::MAX`]
//! pieces, into space of its own in the initiator's staging regions
//! ([`STAGING`](super::STAGING)) and names the pieces' ranges in order.
//!
//! The contract is the library's: the bytes stay unchanged until the
//! operation's completion; after it the application may change them. So
//! each message in flight holds its own space until its completion, and at
//! the completion the workload checks that its bytes are still what it
//! wrote and then OVERWRITES them with poison ([`POISON`], distinct per
//! message) before the space goes back to the pool: a replay that reads the
//! memory after the completion delivers poison (or the bytes of a later
//! message), and the content check of the delivery catches it. Space is
//! handed out next-fit (the search goes on from where the last one ended),
//! so freed space is reused as late as possible and the poison stays in
//! place as long as it can.

use std::collections::BTreeMap;

use relink::{LocalRange, LocalSgl, RegionId};
use relink_fabric::Memory;

use super::payload::mix;

/// The first four bytes of every 8-byte word of poison (the last four are
/// the poisoned message's index): a delivery holding them was read from
/// staging memory after its message completed.
pub const POISON: [u8; 4] = [0xde, 0xad, 0xbe, 0xef];

/// Most bytes of padding in front of a piece (poisoned too, so that a
/// gather off by a few bytes reads garbage).
const MAX_PAD: u64 = 7;

/// Free space of one staging region: extents by start, handed out next-fit
/// from `cursor`.
#[derive(Debug, Clone)]
struct Arena {
    free: BTreeMap<u64, u64>,
    cursor: u64,
}

impl Arena {
    fn new(len: u64) -> Arena {
        Arena {
            free: BTreeMap::from([(0, len)]),
            cursor: 0,
        }
    }

    /// `n` bytes from the first free extent at or after the cursor that
    /// holds them (wrapping around); their offset.
    fn alloc(&mut self, n: u64) -> Option<u64> {
        let (start, len) = self
            .free
            .range(self.cursor..)
            .chain(self.free.range(..self.cursor))
            .find(|(_, len)| **len >= n)
            .map(|(s, l)| (*s, *l))?;
        self.free.remove(&start);
        if len > n {
            self.free.insert(start + n, len - n);
        }
        self.cursor = start + n;
        Some(start)
    }

    /// Give back `n` bytes at `start` (merged with free neighbours).
    fn release(&mut self, start: u64, n: u64) {
        let (mut s, mut l) = (start, n);
        if let Some((&ps, &pl)) = self.free.range(..start).next_back() {
            debug_assert!(ps + pl <= start, "staging space freed twice");
            if ps + pl == start {
                self.free.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(nl) = self.free.remove(&(start + n)) {
            l += nl;
        }
        self.free.insert(s, l);
    }

    fn free_bytes(&self) -> u64 {
        self.free.values().sum()
    }
}

/// One piece of a staged message: its allocation (padding, then the
/// range) in area `area`, and where its bytes are in the payload.
#[derive(Debug, Clone, Copy)]
struct Piece {
    area: usize,
    start: u64,
    alloc: u64,
    range: LocalRange,
    at: usize,
}

/// A message in flight from the staging areas: what it holds until its
/// completion.
#[derive(Debug, Clone)]
pub(crate) struct Staged {
    /// The message's index.
    pub(crate) index: u64,
    pieces: Vec<Piece>,
}

impl Staged {
    /// Ranges of its payload.
    pub(crate) fn ranges(&self) -> usize {
        self.pieces.len()
    }

    /// Whether its ranges lie in more than one region.
    pub(crate) fn across_regions(&self) -> bool {
        self.pieces.iter().any(|p| p.area != self.pieces[0].area)
    }
}

/// The staging regions of one session and their free space.
pub(crate) struct Staging {
    areas: Vec<(RegionId, Memory, Arena)>,
}

impl Staging {
    /// Staging in `areas` (each region's id and memory); `None` if there
    /// are none.
    pub(crate) fn new(areas: Vec<(RegionId, Memory)>) -> Option<Staging> {
        if areas.is_empty() {
            return None;
        }
        Some(Staging {
            areas: areas
                .into_iter()
                .map(|(id, m)| {
                    let len = m.len() as u64;
                    (id, m, Arena::new(len))
                })
                .collect(),
        })
    }

    /// Bytes free in every area (all of them when nothing is staged).
    pub(crate) fn free_bytes(&self) -> u64 {
        self.areas.iter().map(|a| a.2.free_bytes()).sum()
    }

    /// Bytes of the areas.
    pub(crate) fn capacity(&self) -> u64 {
        self.areas.iter().map(|a| a.1.len() as u64).sum()
    }

    /// Write `payload` (message `index`) into staging space of its own, in
    /// 1 to [`LocalSgl::MAX`] pieces as `key` chooses (their number, where
    /// the cuts are, which area each piece is in, their order in memory,
    /// the padding in front of each): the pieces and their ranges, in
    /// payload order. `None`, holding nothing, when there is no room.
    pub(crate) fn stage(
        &mut self,
        key: u64,
        index: u64,
        payload: &[u8],
    ) -> Option<(Staged, LocalSgl)> {
        let len = payload.len();
        if len < 2 {
            return None;
        }
        // 1 range in 3 of 8 messages, else 2 to 4.
        let want = match key % 8 {
            0..=2 => 1,
            3 | 4 => 2,
            5 | 6 => 3,
            _ => LocalSgl::MAX,
        };
        // Cuts near the start (inside the header), near the end (inside
        // the checksum) or anywhere.
        let mut cuts: Vec<usize> = (1..want as u64)
            .map(|j| {
                let r = mix(key ^ 0xc07 ^ mix(j));
                let near = 1 + (r >> 8) as usize % 10;
                match r % 4 {
                    0 => near,
                    1 => len.saturating_sub(near),
                    _ => 1 + (r >> 8) as usize % (len - 1),
                }
                .clamp(1, len - 1)
            })
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let bounds: Vec<(usize, usize)> = std::iter::once(0)
            .chain(cuts.iter().copied())
            .zip(cuts.iter().copied().chain(std::iter::once(len)))
            .collect();
        let mut order: Vec<usize> = (0..bounds.len()).collect();
        if (key >> 40) & 1 == 1 {
            order.reverse();
        }
        let mut pieces: Vec<Option<Piece>> = vec![None; bounds.len()];
        for i in order {
            let (from, to) = bounds[i];
            let r = mix(key ^ 0xa7ea ^ mix(i as u64));
            let area = (r % self.areas.len() as u64) as usize;
            let pad = (r >> 16) % (MAX_PAD + 1);
            let n = (to - from) as u64;
            let got = self.areas[area].2.alloc(pad + n).map(|start| (area, start));
            let Some((area, start)) = got else {
                // No room: give back what this message took.
                for p in pieces.into_iter().flatten() {
                    self.areas[p.area].2.release(p.start, p.alloc);
                }
                return None;
            };
            let (id, mem, _) = &self.areas[area];
            let range = LocalRange {
                region: *id,
                offset: start + pad,
                len: n as u32,
            };
            poison(mem, start, pad + n, index);
            let _ = mem.write((start + pad) as usize, &payload[from..to]);
            pieces[i] = Some(Piece {
                area,
                start,
                alloc: pad + n,
                range,
                at: from,
            });
        }
        let pieces: Vec<Piece> = pieces.into_iter().flatten().collect();
        let sgl = LocalSgl::new(pieces.iter().map(|p| p.range)).expect("1 to 4 ranges");
        Some((Staged { index, pieces }, sgl))
    }

    /// The completion of `staged`: whether its bytes are still `payload`
    /// (what [`stage`](Self::stage) wrote); then its space is poisoned
    /// and freed.
    pub(crate) fn release(&mut self, staged: Staged, payload: &[u8]) -> bool {
        let mut intact = true;
        for p in &staged.pieces {
            let mem = &self.areas[p.area].1;
            let want = &payload[p.at..p.at + p.range.len as usize];
            let got = mem.read_vec(p.range.offset as usize, p.range.len as usize);
            intact &= got.as_deref() == Ok(want);
            poison(mem, p.start, p.alloc, staged.index);
            self.areas[p.area].2.release(p.start, p.alloc);
        }
        intact
    }
}

/// Overwrite `n` bytes at `start` of `mem` with the poison of message
/// `index`: [`POISON`] and the index's low 32 bits, big endian, over and
/// over.
fn poison(mem: &Memory, start: u64, n: u64, index: u64) {
    let mut word = [0u8; 8];
    word[..4].copy_from_slice(&POISON);
    word[4..].copy_from_slice(&(index as u32).to_be_bytes());
    let bytes: Vec<u8> = word.iter().copied().cycle().take(n as usize).collect();
    let _ = mem.write(start as usize, &bytes);
}

/// Whether `payload` holds a word of poison's marker ([`POISON`]).
pub(crate) fn holds_poison(payload: &[u8]) -> bool {
    payload.windows(POISON.len()).any(|w| w == POISON)
}

#[cfg(test)]
mod tests {
    use super::*;
    use relink_fabric::HeapMemory;
    use std::sync::Arc;

    fn staging(len: usize) -> Staging {
        let mem = |addr| Memory::new(Arc::new(HeapMemory::new(addr, len)));
        Staging::new(vec![(RegionId(4), mem(0x1000)), (RegionId(5), mem(0x9000))]).unwrap()
    }

    #[test]
    fn stage_gathers_back_and_release_poisons_and_frees() {
        let mut s = staging(16 * 1024);
        let cap = s.free_bytes();
        let mut held = Vec::new();
        for index in 0..40u64 {
            let payload = super::super::payload::message(1, 2, index);
            let (st, sgl) = s.stage(mix(index), index, &payload).expect("room");
            assert!((1..=LocalSgl::MAX).contains(&sgl.len()));
            assert_eq!(sgl.bytes(), payload.len() as u64);
            let mut gathered = Vec::new();
            for r in sgl.iter() {
                let a = s.areas.iter().find(|a| a.0 == r.region).unwrap();
                gathered.extend(a.1.read_vec(r.offset as usize, r.len as usize).unwrap());
            }
            assert_eq!(gathered, payload);
            held.push((st, sgl, payload));
        }
        assert!(held.iter().any(|h| h.0.ranges() > 1));
        assert!(held.iter().any(|h| h.0.across_regions()));
        for (st, sgl, payload) in held {
            assert!(s.release(st, &payload));
            let mut after = Vec::new();
            for r in sgl.iter() {
                let a = s.areas.iter().find(|a| a.0 == r.region).unwrap();
                let bytes = a.1.read_vec(r.offset as usize, r.len as usize).unwrap();
                if bytes.len() >= 2 * POISON.len() + 4 {
                    assert!(holds_poison(&bytes));
                }
                after.extend(bytes);
            }
            assert_ne!(after, payload, "poisoned at the completion");
        }
        assert_eq!(s.free_bytes(), cap, "every byte given back, merged");
        assert_eq!(s.areas.iter().map(|a| a.2.free.len()).sum::<usize>(), 2);
    }

    #[test]
    fn no_room_holds_nothing() {
        let mut s = staging(64);
        let payload = super::super::payload::message(1, 2, 3);
        assert!(s.stage(5, 3, &payload).is_none());
        assert_eq!(s.free_bytes(), 128);
    }
}
