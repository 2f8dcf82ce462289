//! Resource specs and the recreate plan.
//!
//! relink rebuilds from declarative specs, not by logging and intercepting
//! verbs calls: a session records *what* it needs —
//! CQ depth, receive slots, QP capacities, every region with its access
//! rights — and [`build_plan`] turns that into the ordered steps a driver
//! runs on whichever device carries the session now. The plan is data, so
//! tests check it without hardware: dependency order, the same addresses
//! and the same access (never wider).
//!
//! Two options change the plan. A session on a **shared receive queue**
//! ([`SessionSpec::shared_receive`]) takes its device context, protection
//! domain and receives from the SRQ the driver keeps per device context
//! ([`Step::AttachSharedReceive`]) instead of opening, allocating and
//! posting its own. A region exposed through a **type 2 memory window**
//! ([`RegionSpec::window`]) is registered for binding only
//! ([`RegionSpec::mr_access`]) and gets a window ([`Step::AllocWindow`])
//! that the driver binds on the QP once the connection is up, before the
//! advertisement.

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
    /// Expose it through a type 2 memory window bound on the session's QP
    /// (the advertisement carries the window's rkey; the MR itself grants
    /// no remote right).
    pub window: bool,
}

impl RegionSpec {
    /// The rights the region's MR is registered with: `access` itself, or,
    /// for a region exposed through a window, its local write (if any) and
    /// `MW_BIND` only: the remote rights are the window's
    /// ([`window_access`](Self::window_access)).
    pub fn mr_access(&self) -> Access {
        if self.window {
            (self.access & Access::LOCAL_WRITE) | Access::MW_BIND
        } else {
            self.access
        }
    }

    /// The remote rights a window over the region grants: the remote rights
    /// of `access`.
    pub fn window_access(&self) -> Access {
        self.access & (Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
    }
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
    /// Most operations outstanding (submitted, their completion not yet
    /// taken by the application); past it a submit is refused
    /// ([`SessionError::Full`](crate::SessionError::Full)).
    pub max_outstanding: u32,
    /// The application's regions, registered on every device in this
    /// order.
    pub regions: Vec<RegionSpec>,
    /// Receives come from a shared receive queue the driver keeps per
    /// device context (with the context and PD of every session on it);
    /// `recv_slots` is then the session's share of that queue and still
    /// the peer's credits.
    pub shared_receive: bool,
    /// Messages from the peer's registered memory of at least this many
    /// bytes are read by this side, straight into a posted receive (a
    /// rendezvous: [`wire::MsgKind::Fetch`](crate::wire::MsgKind::Fetch));
    /// 0: none, every message comes in its SEND.
    pub rendezvous_min: u32,
}

impl SessionSpec {
    /// QP capacities the spec needs.
    pub fn qp_caps(&self) -> QpCaps {
        QpCaps {
            // The 1: the READ of a message the peer left to read.
            max_send_wr: self.send_slots + self.max_one_sided + 8 + 1 + 2 * self.windows(),
            max_recv_wr: if self.shared_receive {
                0
            } else {
                self.recv_slots
            },
            // A message's header, then up to `LocalSgl::MAX` ranges of
            // registered memory (`OpKind::MessageFrom`).
            max_send_sge: 1 + crate::op::LocalSgl::MAX as u32,
            max_recv_sge: 1,
        }
    }

    /// CQ depth that can never overflow: every send WR and a receive per
    /// receive slot (with a shared receive queue, the session's share).
    pub fn cq_depth(&self) -> u32 {
        self.qp_caps().max_send_wr + self.recv_slots
    }

    /// Regions exposed through a window: each takes a bind and an
    /// invalidation on the send queue.
    pub fn windows(&self) -> u32 {
        self.regions.iter().filter(|r| r.window).count() as u32
    }
}

/// One step of building a session's resources on a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Open the device the CM id resolved to.
    OpenDevice,
    /// Take the device context, PD and shared receive queue the driver
    /// keeps for the device (building them for the first session on it);
    /// instead of `OpenDevice`, `AllocPd`, `RegisterRecvSlots` and
    /// `PostReceives`.
    AttachSharedReceive,
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
    /// the rights of [`RegionSpec::mr_access`].
    RegisterRegion(RegionSpec),
    /// Allocate the type 2 window of a region with [`RegionSpec::window`]
    /// (bound on the QP once the connection is up).
    AllocWindow(RegionSpec),
    /// Create the RC QP (attached to the shared receive queue, if any).
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
/// PD, CQ, memory registrations, windows, QP, receives (with a shared
/// receive queue: the shared context, CQ, registrations, windows, QP).
pub fn build_plan(spec: &SessionSpec) -> Vec<Step> {
    let mut plan = if spec.shared_receive {
        vec![Step::AttachSharedReceive]
    } else {
        vec![Step::OpenDevice, Step::AllocPd]
    };
    plan.push(Step::CreateCq {
        depth: spec.cq_depth(),
    });
    plan.push(Step::RegisterSendSlots {
        len: u64::from(spec.send_slots) * u64::from(spec.slot_size),
    });
    if !spec.shared_receive {
        plan.push(Step::RegisterRecvSlots {
            len: u64::from(spec.recv_slots) * u64::from(spec.slot_size),
        });
    }
    plan.extend(spec.regions.iter().map(|r| Step::RegisterRegion(*r)));
    plan.extend(
        spec.regions
            .iter()
            .filter(|r| r.window)
            .map(|r| Step::AllocWindow(*r)),
    );
    plan.push(Step::CreateQp {
        caps: spec.qp_caps(),
    });
    if !spec.shared_receive {
        plan.push(Step::PostReceives {
            count: spec.recv_slots,
        });
    }
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
            max_outstanding: 1 << 20,
            regions: vec![
                RegionSpec {
                    id: RegionId(1),
                    len: 1 << 20,
                    access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                    advertise: true,
                    window: false,
                },
                RegionSpec {
                    id: RegionId(2),
                    len: 4096,
                    access: Access::LOCAL_WRITE,
                    advertise: false,
                    window: false,
                },
            ],
            shared_receive: false,
            rendezvous_min: 0,
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
    fn a_shared_receive_plan_posts_no_receives_of_its_own() {
        let mut s = spec();
        s.shared_receive = true;
        s.regions[0].window = true;
        let p = build_plan(&s);
        assert_eq!(p[0], Step::AttachSharedReceive);
        assert!(!p.iter().any(|st| matches!(
            st,
            Step::OpenDevice
                | Step::AllocPd
                | Step::RegisterRecvSlots { .. }
                | Step::PostReceives { .. }
        )));
        let win = position(
            &p,
            |st| matches!(st, Step::AllocWindow(r) if r.id == RegionId(1)),
        );
        let mr = position(
            &p,
            |st| matches!(st, Step::RegisterRegion(r) if r.id == RegionId(1)),
        );
        let qp = position(&p, |st| matches!(st, Step::CreateQp { .. }));
        assert!(mr < win && win < qp);
        assert_eq!(s.qp_caps().max_recv_wr, 0);
        assert!(s.cq_depth() >= s.qp_caps().max_send_wr + s.recv_slots);
        // The window grants the remote rights; its MR only local ones.
        let r = s.regions[0];
        assert_eq!(r.mr_access(), Access::LOCAL_WRITE | Access::MW_BIND);
        assert_eq!(r.window_access(), Access::REMOTE_WRITE);
    }

    #[test]
    fn cq_cannot_overflow() {
        let s = spec();
        let c = s.qp_caps();
        assert!(s.cq_depth() >= c.max_send_wr + c.max_recv_wr);
    }
}
