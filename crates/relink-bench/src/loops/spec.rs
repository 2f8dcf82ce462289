//! The shape of a loop: [`LoopSpec`] (request size, window, signaling),
//! [`Verify`] (how much of each payload is stamped and checked) and
//! [`human_size`] for describing them.

/// How much of each payload a loop writes before posting and checks where
/// it lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// The first 8 bytes carry the request's sequence number and, for
    /// payloads of 16 bytes or more, the last 8 bytes its complement. Cheap
    /// (two small copies per request on each side), so it stays on while
    /// measuring; it catches lost, duplicated, reordered, misplaced and
    /// truncated payloads.
    Stamp,
    /// Every byte: a pseudo-random pattern seeded by the sequence number.
    /// For tests; costs a pattern and a full compare per request.
    Full,
}

/// The shape of a loop: request size, window and signaling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopSpec {
    /// Bytes per request (at least 8: the sequence number).
    pub size: usize,
    /// Requests outstanding at most; a completion makes room for more.
    pub window: usize,
    /// Signal every `signal_every`-th request (and the last of each run);
    /// the others are unsignaled and counted complete when a later signaled
    /// completion arrives (RC completes in order). At most `window`.
    pub signal_every: usize,
    /// How payloads are stamped and checked.
    pub verify: Verify,
    /// Messages through a relink session: the session's `max_message`,
    /// what one receive slot holds besides relink's header (`size`, or more
    /// to leave room for frames of several messages). Raw loops receive
    /// into `size` bytes.
    pub max_message: usize,
}

impl LoopSpec {
    /// SENDs of `size` bytes, `window` outstanding, every one signaled,
    /// payloads [`Verify::Stamp`]ed.
    pub fn send(size: usize, window: usize) -> LoopSpec {
        LoopSpec {
            size,
            window,
            signal_every: 1,
            verify: Verify::Stamp,
            max_message: size,
        }
    }

    /// WRITEs of `size` bytes, `window` outstanding, every one signaled,
    /// payloads [`Verify::Stamp`]ed.
    pub fn write(size: usize, window: usize) -> LoopSpec {
        LoopSpec::send(size, window)
    }

    /// The same spec signaling every `n`-th request.
    pub fn signal_every(self, n: usize) -> LoopSpec {
        LoopSpec {
            signal_every: n,
            ..self
        }
    }

    /// The same spec with relink sessions' receive slots holding `bytes`
    /// of messages ([`LoopSpec::max_message`]; at least `size`).
    pub fn max_message(self, bytes: usize) -> LoopSpec {
        LoopSpec {
            max_message: bytes.max(self.size),
            ..self
        }
    }

    /// The same spec with another [`Verify`] level.
    pub fn verify(self, verify: Verify) -> LoopSpec {
        LoopSpec { verify, ..self }
    }

    /// A short description, e.g. `64 B, window 64, signal 1/16`.
    pub fn describe(&self) -> String {
        format!(
            "{}, window {}, signal 1/{}",
            human_size(self.size),
            self.window,
            self.signal_every
        )
    }

    #[track_caller]
    pub(crate) fn validate(&self) {
        assert!(self.size >= 8, "size {} < 8 bytes", self.size);
        assert!(
            u32::try_from(self.size).is_ok(),
            "size {} does not fit an SGE",
            self.size
        );
        assert!(self.window >= 1, "window must be at least 1");
        assert!(
            (1..=self.window).contains(&self.signal_every),
            "signal_every {} must be in 1..=window ({})",
            self.signal_every,
            self.window
        );
    }

    /// Whether request `seq` of a run ending before `end` is signaled.
    pub(super) fn signaled(&self, seq: u64, end: u64) -> bool {
        (seq + 1) % self.signal_every as u64 == 0 || seq + 1 == end
    }
}

/// `64 B`, `64 KiB`, `1 MiB`, or plain bytes if not a round binary size.
pub fn human_size(size: usize) -> String {
    const KIB: usize = 1024;
    if size >= KIB * KIB && size % (KIB * KIB) == 0 {
        format!("{} MiB", size / (KIB * KIB))
    } else if size >= KIB && size % KIB == 0 {
        format!("{} KiB", size / KIB)
    } else {
        format!("{size} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(human_size(64), "64 B");
        assert_eq!(human_size(65536), "64 KiB");
        assert_eq!(human_size(1 << 20), "1 MiB");
        assert_eq!(human_size(1000), "1000 B");
        assert_eq!(
            LoopSpec::send(64, 64).signal_every(16).describe(),
            "64 B, window 64, signal 1/16"
        );
    }
}
