//! Time as the provider sees it.
//!
//! A provider owns its clock: the in-process soft fabric runs on virtual time,
//! the TCP soft fabric and real verbs on the monotonic clock. Everything above
//! the provider takes time as an argument ([`Timestamp`]), never reads a clock.

use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point in time on a provider's clock: nanoseconds since the provider's epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The provider's epoch.
    pub const ZERO: Timestamp = Timestamp(0);

    /// Nanoseconds since the epoch.
    pub fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed since `earlier`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Time since the epoch as a [`Duration`].
    pub fn since_epoch(self) -> Duration {
        Duration::from_nanos(self.0)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    fn add(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(nanos(d)))
    }
}

impl AddAssign<Duration> for Timestamp {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Timestamp> for Timestamp {
    type Output = Duration;
    fn sub(self, earlier: Timestamp) -> Duration {
        self.saturating_since(earlier)
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.6}s", self.0 as f64 / 1e9)
    }
}
