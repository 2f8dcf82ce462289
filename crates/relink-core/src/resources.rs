//! Resource specs and the recreate plan.
//!
//! relink rebuilds from declarative specs, not by logging and intercepting
//! verbs calls: a session records *what* it needs —
//! CQ depth, receive slots, QP capacities, every region with its access
//! rights — and [`build_plan`] turns that into the ordered steps a driver
//! runs on whichever device carries the session now. The plan is data, so
//! tests check it without hardware: dependency order, the same addresses
//! and the same access (never wider).

use relink_fabric::{Access, QpCaps};

use crate::ids::RegionId;

/// A memory region the session registers on every device it uses. The
/// memory itself is host memory owned by the driver: its address never
/// changes, so re-registration lands at the same address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionSpec {
    /// The region's id: the same on every device; tokens and local ranges
    /// name the region by it.
    pub id: RegionId,
    /// Length in bytes.
    pub len: u64,
    /// Rights, exactly as first registered.
    pub access: Access,
    /// Advertise it to the peer (one-sided access).
    pub advertise: bool,
}

/// What a session needs on a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSpec {
    /// Receive slots kept posted (also the peer's send credits).
    pub recv_slots: u32,
    /// Bytes per receive slot (header + largest message).
    pub slot_size: u32,
    /// Send slots (messages in flight).
    pub send_slots: u32,
    /// Most one-sided operations posted and not yet completed; more wait,
    /// in order, in the journal.
    pub max_one_sided: u32,
    /// The application's regions, registered on every device in this
    /// order.
    pub regions: Vec<RegionSpec>,
}

impl SessionSpec {
    /// QP capacities the spec needs.
    pub fn qp_caps(&self) -> QpCaps {
        QpCaps {
            max_send_wr: self.send_slots + self.max_one_sided + 8,
            max_recv_wr: self.recv_slots,
            max_send_sge: 1,
            max_recv_sge: 1,
        }
    }

    /// CQ depth that can never overflow: every send and receive WR.
    pub fn cq_depth(&self) -> u32 {
        let c = self.qp_caps();
        c.max_send_wr + c.max_recv_wr
    }
}

/// One step of building a session's resources on a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Open the device the CM id resolved to.
    OpenDevice,
    /// Allocate the protection domain.
    AllocPd,
    /// Create the completion queue.
    CreateCq {
        /// Entries: room for every send and receive work request
        /// ([`SessionSpec::cq_depth`]).
        depth: u32,
    },
    /// Register the library's send slots (local write).
    RegisterSendSlots {
        /// Bytes: `send_slots × slot_size`.
        len: u64,
    },
    /// Register the library's receive slots (local write).
    RegisterRecvSlots {
        /// Bytes: `recv_slots × slot_size`.
        len: u64,
    },
    /// Register an application region, at its fixed address, with exactly
    /// these rights.
    RegisterRegion(RegionSpec),
    /// Create the RC QP.
    CreateQp {
        /// Work-request and scatter/gather limits
        /// ([`SessionSpec::qp_caps`]).
        caps: QpCaps,
    },
    /// Post every receive slot.
    PostReceives {
        /// Receives to post: one per receive slot.
        count: u32,
    },
}

/// The steps that build `spec` on a device, in dependency order: device,
/// PD, CQ, memory registrations, QP, receives.
pub fn build_plan(spec: &SessionSpec) -> Vec<Step> {
    let mut plan = vec![
        Step::OpenDevice,
        Step::AllocPd,
        Step::CreateCq {
            depth: spec.cq_depth(),
        },
        Step::RegisterSendSlots {
            len: u64::from(spec.send_slots) * u64::from(spec.slot_size),
        },
        Step::RegisterRecvSlots {
            len: u64::from(spec.recv_slots) * u64::from(spec.slot_size),
        },
    ];
    plan.extend(spec.regions.iter().map(|r| Step::RegisterRegion(*r)));
    plan.push(Step::CreateQp {
        caps: spec.qp_caps(),
    });
    plan.push(Step::PostReceives {
        count: spec.recv_slots,
    });
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SessionSpec {
        SessionSpec {
            recv_slots: 64,
            slot_size: 4096,
            send_slots: 64,
            max_one_sided: 32,
            regions: vec![
                RegionSpec {
                    id: RegionId(1),
                    len: 1 << 20,
                    access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                    advertise: true,
                },
                RegionSpec {
                    id: RegionId(2),
                    len: 4096,
                    access: Access::LOCAL_WRITE,
                    advertise: false,
                },
            ],
        }
    }

    fn position(plan: &[Step], f: impl Fn(&Step) -> bool) -> usize {
        plan.iter().position(f).expect("step present")
    }

    #[test]
    fn plan_is_in_dependency_order() {
        let p = build_plan(&spec());
        let dev = position(&p, |s| *s == Step::OpenDevice);
        let pd = position(&p, |s| *s == Step::AllocPd);
        let cq = position(&p, |s| matches!(s, Step::CreateCq { .. }));
        let qp = position(&p, |s| matches!(s, Step::CreateQp { .. }));
        let recv = position(&p, |s| matches!(s, Step::PostReceives { .. }));
        let last_mr = p
            .iter()
            .rposition(|s| matches!(s, Step::RegisterRegion(_) | Step::RegisterRecvSlots { .. }))
            .unwrap();
        assert!(dev < pd && pd < cq && cq < qp && last_mr < qp && qp < recv);
    }

    #[test]
    fn regions_keep_exactly_their_rights() {
        let s = spec();
        let p = build_plan(&s);
        let regs: Vec<RegionSpec> = p
            .iter()
            .filter_map(|st| match st {
                Step::RegisterRegion(r) => Some(*r),
                _ => None,
            })
            .collect();
        assert_eq!(regs, s.regions, "every region, same rights, never wider");
    }

    #[test]
    fn cq_cannot_overflow() {
        let s = spec();
        let c = s.qp_caps();
        assert!(s.cq_depth() >= c.max_send_wr + c.max_recv_wr);
    }
}
