//! Identifiers that stay valid across device epochs.

use std::fmt;

/// A session, chosen at random by the initiator when it first connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(pub u64);

/// One life of a session on one transport: bumped on every (re)connection.
/// Remote keys and QPs belong to one epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Epoch(pub u32);

impl Epoch {
    /// The epoch after this one.
    pub fn next(self) -> Epoch {
        Epoch(self.0.wrapping_add(1))
    }
}

/// One life of a session endpoint's state: a process that restarts (and so
/// lost its journal) comes back with a new incarnation. A resume to a peer
/// whose incarnation changed must fail queued operations, never replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Incarnation(pub u64);

/// Per-direction message sequence number; the first message is 1, 0 means
/// "nothing yet".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Seq(pub u64);

impl Seq {
    /// The sequence number after this one.
    pub fn next(self) -> Seq {
        Seq(self.0 + 1)
    }
}

/// A memory region registered through relink; the same id on every device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegionId(pub u32);

/// A stable name for a byte of remote memory: the peer's region + offset.
/// Applications keep tokens; relink translates them to the peer's current
/// (address, rkey) at post time, so a stale rkey is never used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BufferToken {
    /// The peer's region.
    pub region: RegionId,
    /// Offset into it.
    pub offset: u64,
}

/// An operation the application submitted; completes exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u64);

macro_rules! display_num {
    ($($t:ident => $fmt:literal),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, $fmt, self.0)
            }
        }
    )*};
}

display_num!(SessionId => "{:016x}", Epoch => "e{}", Incarnation => "{:016x}", Seq => "#{}", RegionId => "r{}", OpId => "op{}");
