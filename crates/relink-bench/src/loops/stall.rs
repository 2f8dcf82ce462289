//! The stall watchdog of every measuring loop: [`Stall`] panics when a loop
//! made no progress for [`STALL_LIMIT`], reading the clock rarely enough to
//! cost nothing measurable.

use std::time::{Duration, Instant};

/// How long a loop may go without any progress before it panics.
pub const STALL_LIMIT: Duration = Duration::from_secs(30);

/// Fails a loop that makes no progress. Reads the clock only once every
/// [`Stall::CLOCK_EVERY`] idle iterations, so that watching for a stall
/// costs a loop nothing measurable (an idle iteration also waits up to a
/// tick, so a stall is noticed at most about a second late).
pub(crate) struct Stall {
    /// When the clock last showed progress.
    since: Instant,
    /// Progress since the clock was last read.
    moved: bool,
    /// Idle iterations since the clock was last read.
    idle: u32,
}

impl Stall {
    /// Idle iterations between two clock readings.
    const CLOCK_EVERY: u32 = 1024;

    pub(crate) fn new() -> Stall {
        Stall {
            since: Instant::now(),
            moved: false,
            idle: 0,
        }
    }

    pub(crate) fn progress(&mut self) {
        self.moved = true;
    }

    /// An idle iteration: panics with `state` if no progress was seen for
    /// [`STALL_LIMIT`].
    #[track_caller]
    pub(crate) fn check(&mut self, state: impl FnOnce() -> String) {
        self.idle += 1;
        if self.idle < Self::CLOCK_EVERY {
            return;
        }
        self.idle = 0;
        let now = Instant::now();
        if std::mem::take(&mut self.moved) {
            self.since = now;
        } else if now.duration_since(self.since) > STALL_LIMIT {
            panic!(
                "measuring loop made no progress for {STALL_LIMIT:?}: {}",
                state()
            );
        }
    }
}
