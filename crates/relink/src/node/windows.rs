//! Type 2 memory windows: a region with
//! [`RegionOptions::window`](super::RegionOptions::window) is exposed to
//! the peer through a window relink binds on the session's QP, not through
//! its MR.
//!
//! Per transport (so after every reset, replacement or failover):
//!
//! - the region's MR is registered with its local write (if any) and
//!   `MW_BIND` only ([`RegionSpec::mr_access`]): its rkey grants nothing
//!   remote;
//! - a type 2 window is allocated in the transport's PD when it is built;
//! - once the CM reports the connection up, a BIND_MW request per window
//!   ([`SendOp::BindMw`], the window's rkey with the next low byte) is
//!   posted on the QP, before anything else — the advertisements the core
//!   sends next follow it on the send queue, so the peer never holds an
//!   rkey that is not bound yet; the advertisement carries the window's
//!   rkey, and tokens (region id + offset) translate through it as through
//!   an MR's;
//! - a close posts a LOCAL_INV ([`SendOp::LocalInv`]) of each bound window
//!   after the goodbye, so the peer's access ends with the session;
//! - the teardown frees every window (`dealloc_mw`, which invalidates a
//!   bound one: after a loss the QP is in error and a LOCAL_INV would only
//!   be flushed), before the MRs they lie in.

use std::collections::{BTreeMap, VecDeque};

use relink_core::reason::{AttemptFailure, ProviderFailure, TransportObject};
use relink_core::resources::RegionSpec;
use relink_core::RegionId;
use relink_fabric::{MrInfo, MwBind, MwInfo, MwType, PdId, Provider, QpId, SendOp};

use super::destroy::log_destroy;
use super::wr::{WrBatch, TAG_LOCAL, TAG_MASK};

/// A region's window on one transport.
pub(super) struct Window {
    /// The window as allocated.
    pub mw: MwInfo,
    /// The rights it grants once bound.
    pub spec: RegionSpec,
    /// The rkey it is bound with, once its bind is posted.
    pub bound: Option<u32>,
}

/// `ibv_inc_rkey`: the same key with the next low byte, the rkey a type 2
/// window is bound with.
fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xFFFF_FF00) | (rkey.wrapping_add(1) & 0xFF)
}

/// The windows of one transport, by region.
#[derive(Default)]
pub(super) struct Windows(BTreeMap<RegionId, Window>);

impl Windows {
    /// Whether the transport has no window.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Allocate region `r`'s type 2 window in PD `pd`.
    pub fn alloc(
        &mut self,
        p: &dyn Provider,
        pd: PdId,
        r: RegionSpec,
    ) -> Result<(), AttemptFailure> {
        let mw = p
            .alloc_mw(pd, MwType::Type2)
            .map_err(|error| ProviderFailure::Create {
                object: TransportObject::Window(r.id),
                error,
            })?;
        self.0.insert(
            r.id,
            Window {
                mw,
                spec: r,
                bound: None,
            },
        );
        Ok(())
    }

    /// Post the bind of every window on `qp` (signaled, in region
    /// order) over its region's MR in `region_mrs`, before anything else is
    /// posted on the connection; the posted requests join `posted`. A bind
    /// that fails completes with `MwBindErr`, which the core takes for a
    /// loss of the transport.
    pub fn bind(
        &mut self,
        p: &dyn Provider,
        qp: QpId,
        region_mrs: &BTreeMap<RegionId, MrInfo>,
        posted: &mut VecDeque<u64>,
    ) -> Result<(), AttemptFailure> {
        let mut batch = WrBatch::default();
        for (id, w) in &self.0 {
            let Some(mr) = region_mrs.get(id) else {
                continue;
            };
            let rkey = inc_rkey(w.mw.rkey);
            let bind = MwBind {
                mr: mr.id,
                addr: mr.addr,
                length: w.spec.len,
                access: w.spec.window_access(),
            };
            batch.push_local(
                TAG_LOCAL | u64::from(id.0),
                SendOp::BindMw {
                    mw: w.mw.id,
                    rkey,
                    bind,
                },
            );
        }
        p.post_send(qp, batch.as_slice())
            .map_err(ProviderFailure::PostBind)?;
        for wr in batch.as_slice() {
            posted.push_back(wr.wr_id);
            if let SendOp::BindMw { rkey, .. } = wr.op {
                let id = RegionId((wr.wr_id & !TAG_MASK) as u32);
                if let Some(w) = self.0.get_mut(&id) {
                    w.bound = Some(rkey);
                }
            }
        }
        Ok(())
    }

    /// The rkey a region's peers use: its bound window's, if it has one.
    pub fn rkey(&self, region: RegionId) -> Option<u32> {
        self.0.get(&region).and_then(|w| w.bound)
    }

    /// The LOCAL_INV of every bound window (`wr_id` and operation), to
    /// queue behind the goodbye of a close: the peer's access ends with
    /// the session.
    pub fn invalidations(&self) -> impl Iterator<Item = (u64, SendOp)> + '_ {
        self.0.iter().filter_map(|(id, w)| {
            let rkey = w.bound?;
            Some((TAG_LOCAL | u64::from(id.0), SendOp::LocalInv { rkey }))
        })
    }

    /// Free every window (before the MRs they lie in are deregistered).
    pub fn free(&mut self, p: &dyn Provider) {
        for (_, w) in std::mem::take(&mut self.0) {
            log_destroy("MW", p.dealloc_mw(w.mw.id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_bound_with_the_next_low_byte_of_its_rkey() {
        assert_eq!(inc_rkey(0x1234_5600), 0x1234_5601);
        assert_eq!(
            inc_rkey(0x1234_56FF),
            0x1234_5600,
            "the low byte wraps alone"
        );
    }
}
