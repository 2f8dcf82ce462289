//! Indexes that keep teardown and the connection manager's lookups
//! independent of how many objects a host holds: how many objects use each
//! object (what makes a destroy `Busy`), the CM id of each connection, the
//! CM id of each connected QP and the CM ids bound to an address.

use std::collections::{BTreeMap, BTreeSet};

/// See the module docs. Every entry follows the objects it indexes: the
/// calls that create and destroy them keep it up to date.
#[derive(Debug, Default)]
pub(super) struct Index {
    /// By handle, how many objects were created on the object and not yet
    /// destroyed: PDs and CQs on a context; QPs, SRQs, MRs and MWs on a
    /// PD; QPs on each of their two CQs (a QP whose two CQs are one counts
    /// twice) and on their SRQ. Absent: none.
    users: BTreeMap<u64, u32>,
    /// The CM id of each connection, by connection id and side (a
    /// connection of a host to itself has an id on each side).
    conns: BTreeMap<(u64, bool), u64>,
    /// The CM id a QP was connected through (`cm_connect`, `cm_accept`).
    qp_cm: BTreeMap<u64, u64>,
    /// CM ids bound to a local address (`cm_bind`), in handle order:
    /// every listener is one.
    bound: BTreeSet<u64>,
}

impl Index {
    /// Object `h` gets one more user.
    pub fn use_object(&mut self, h: u64) {
        *self.users.entry(h).or_insert(0) += 1;
    }

    /// Object `h` loses one user.
    pub fn release_object(&mut self, h: u64) {
        if let Some(n) = self.users.get_mut(&h) {
            *n -= 1;
            if *n == 0 {
                self.users.remove(&h);
            }
        }
    }

    /// Whether object `h` has users.
    pub fn in_use(&self, h: u64) -> bool {
        self.users.contains_key(&h)
    }

    /// CM id `id` holds connection `conn` on side `initiator` (the first
    /// id to hold it keeps it).
    pub fn add_conn(&mut self, conn: u64, initiator: bool, id: u64) {
        self.conns.entry((conn, initiator)).or_insert(id);
    }

    /// The CM id of connection `conn` on side `initiator`.
    pub fn conn(&self, conn: u64, initiator: bool) -> Option<u64> {
        self.conns.get(&(conn, initiator)).copied()
    }

    /// QP `qp` was connected through CM id `id`.
    pub fn set_qp_cm(&mut self, qp: u64, id: u64) {
        self.qp_cm.insert(qp, id);
    }

    /// QP `qp` is gone: the CM id it was connected through, if any.
    pub fn take_qp_cm(&mut self, qp: u64) -> Option<u64> {
        self.qp_cm.remove(&qp)
    }

    /// CM id `id` is bound to a local address.
    pub fn bind(&mut self, id: u64) {
        self.bound.insert(id);
    }

    /// The bound CM ids, in handle order.
    pub fn bound(&self) -> impl Iterator<Item = u64> + '_ {
        self.bound.iter().copied()
    }

    /// CM id `id`, holding connection `conn` on side `initiator` (0 for
    /// none), is destroyed.
    pub fn forget_cm(&mut self, id: u64, conn: u64, initiator: bool) {
        self.bound.remove(&id);
        if conn != 0 && self.conns.get(&(conn, initiator)) == Some(&id) {
            self.conns.remove(&(conn, initiator));
        }
    }
}
