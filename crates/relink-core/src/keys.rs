//! Key tables: stable buffer tokens on one side, the peer's current
//! (address, rkey) on the other.
//!
//! An application never holds an rkey. It names remote memory by a
//! [`BufferToken`] (the peer's region + offset), and relink translates the
//! token at post time through the table of the **current epoch**. A resume
//! clears the table; operations wait until the peer has re-advertised
//! everything for the new epoch ([`PeerKeys::is_complete`]), so a stale
//! rkey is never used.

use std::collections::BTreeMap;

use relink_fabric::{Access, RemoteAddr};

use crate::ids::{BufferToken, Epoch, RegionId};

/// One region as the peer advertised it for an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteRegion {
    /// Virtual address of byte 0 on the peer.
    pub addr: u64,
    /// Length in bytes: a token's offset plus length must stay within it.
    pub len: u64,
    /// The peer's rkey for this epoch.
    pub rkey: u32,
    /// Rights the peer granted.
    pub access: Access,
}

/// Why a token cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The peer never advertised this region.
    #[error("the peer advertised no region {0}")]
    UnknownRegion(RegionId),
    /// The range lies outside the region.
    #[error("range {offset}+{len} is outside region {region} of {size} bytes")]
    OutOfBounds {
        /// The region the token names.
        region: RegionId,
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// Size of the region.
        size: u64,
    },
    /// The region does not grant the right the operation needs.
    #[error("region {region} does not grant {needed:?}")]
    NoRight {
        /// The region the token names.
        region: RegionId,
        /// The right needed.
        needed: Access,
    },
    /// The peer has not finished re-advertising for the current epoch.
    #[error("advertisements for {0} are not complete")]
    NotReady(Epoch),
}

/// The peer's advertisements for the current epoch.
#[derive(Debug, Clone, Default)]
pub struct PeerKeys {
    epoch: Epoch,
    regions: BTreeMap<RegionId, RemoteRegion>,
    complete: bool,
}

impl PeerKeys {
    /// Forget everything: a new epoch starts, nothing is usable until the
    /// peer's advertisements for it are complete.
    pub fn begin(&mut self, epoch: Epoch) {
        self.epoch = epoch;
        self.regions.clear();
        self.complete = false;
    }

    /// The epoch the table belongs to.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// Record an advertisement; one for another epoch is ignored (false).
    pub fn insert(&mut self, epoch: Epoch, region: RegionId, r: RemoteRegion) -> bool {
        if epoch != self.epoch {
            return false;
        }
        self.regions.insert(region, r);
        true
    }

    /// The peer advertised everything for `epoch`; false if another epoch.
    pub fn finish(&mut self, epoch: Epoch) -> bool {
        if epoch != self.epoch {
            return false;
        }
        self.complete = true;
        true
    }

    /// Whether the table may be used.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// Number of regions known.
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// Whether no region is known.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// Regions known, in id order.
    pub fn regions(&self) -> impl Iterator<Item = (RegionId, &RemoteRegion)> {
        self.regions.iter().map(|(k, v)| (*k, v))
    }

    /// The peer's current address and rkey for `len` bytes at `token`.
    pub fn translate(
        &self,
        token: BufferToken,
        len: u64,
        needed: Access,
    ) -> Result<RemoteAddr, KeyError> {
        if !self.complete {
            return Err(KeyError::NotReady(self.epoch));
        }
        let r = self
            .regions
            .get(&token.region)
            .ok_or(KeyError::UnknownRegion(token.region))?;
        let end = token.offset.checked_add(len);
        if end.is_none_or(|e| e > r.len) {
            return Err(KeyError::OutOfBounds {
                region: token.region,
                offset: token.offset,
                len,
                size: r.len,
            });
        }
        if !r.access.contains(needed) {
            return Err(KeyError::NoRight {
                region: token.region,
                needed,
            });
        }
        Ok(RemoteAddr {
            addr: r.addr + token.offset,
            rkey: r.rkey,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(rkey: u32) -> RemoteRegion {
        RemoteRegion {
            addr: 0x1000,
            len: 4096,
            rkey,
            access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE,
        }
    }

    #[test]
    fn tokens_translate_only_through_a_complete_current_epoch() {
        let mut k = PeerKeys::default();
        k.begin(Epoch(1));
        assert!(k.insert(Epoch(1), RegionId(7), region(0xaa)));
        let t = BufferToken {
            region: RegionId(7),
            offset: 16,
        };
        assert_eq!(
            k.translate(t, 8, Access::REMOTE_WRITE),
            Err(KeyError::NotReady(Epoch(1)))
        );
        assert!(k.finish(Epoch(1)));
        assert_eq!(
            k.translate(t, 8, Access::REMOTE_WRITE).unwrap(),
            RemoteAddr {
                addr: 0x1010,
                rkey: 0xaa
            }
        );
        // A new epoch: the old rkey is gone until re-advertised.
        k.begin(Epoch(2));
        assert!(
            !k.insert(Epoch(1), RegionId(7), region(0xaa)),
            "stale epoch ignored"
        );
        assert!(k.insert(Epoch(2), RegionId(7), region(0xbb)));
        assert!(k.finish(Epoch(2)));
        assert_eq!(k.translate(t, 8, Access::REMOTE_WRITE).unwrap().rkey, 0xbb);
    }

    #[test]
    fn bounds_and_rights() {
        let mut k = PeerKeys::default();
        k.begin(Epoch(1));
        k.insert(Epoch(1), RegionId(1), region(1));
        k.finish(Epoch(1));
        let t = |offset| BufferToken {
            region: RegionId(1),
            offset,
        };
        assert!(matches!(
            k.translate(t(4090), 8, Access::REMOTE_WRITE),
            Err(KeyError::OutOfBounds { .. })
        ));
        assert!(matches!(
            k.translate(t(u64::MAX), 8, Access::REMOTE_WRITE),
            Err(KeyError::OutOfBounds { .. })
        ));
        assert!(matches!(
            k.translate(t(0), 8, Access::REMOTE_ATOMIC),
            Err(KeyError::NoRight { .. })
        ));
        assert!(matches!(
            k.translate(
                BufferToken {
                    region: RegionId(2),
                    offset: 0
                },
                1,
                Access::REMOTE_READ
            ),
            Err(KeyError::UnknownRegion(_))
        ));
    }
}
