//! The soak's faults: a seeded schedule of device faults on both hosts,
//! applied through each host's soft device registry (what `relink
//! soft-device reset|remove|add|replace|port` does), one after another.
//!
//! The gap before each fault is drawn between half and one and a half
//! times `--fault-every`; the kind (among `--faults`) and the host are
//! drawn too, all from `--seed`. A fault with two steps (a device
//! unplugged and plugged back, a port down and up) holds its device for
//! a drawn 0.5–2 s between them; the next fault's gap starts after its
//! last step. The same seed gives the same schedule; when each step lands
//! in the workload depends on the machine (real time).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use relink_fabric::{IpNet, PortState};
use relink_sim::workload::mix;
use relink_sim::{INITIATOR, TARGET};
use relink_soft::Registry;
use serde::Serialize;

/// The device every soak host has (see [`relink_sim::TcpHosts`]).
pub(super) const DEVICE: &str = "soft0";

/// A kind of device fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum FaultKind {
    /// A device reset: the same device, a new generation (fatal, removed,
    /// added).
    Reset,
    /// The device unplugged, and plugged back (the same GUID and address)
    /// after 0.5–2 s.
    Unplug,
    /// The device replaced by a new one (a new GUID, the same address).
    Replace,
    /// The device's port down, and up again after 0.5–2 s.
    Port,
}

impl FaultKind {
    /// Every kind.
    pub(super) const ALL: [FaultKind; 4] = [
        FaultKind::Reset,
        FaultKind::Unplug,
        FaultKind::Replace,
        FaultKind::Port,
    ];

    pub(super) fn name(self) -> &'static str {
        match self {
            FaultKind::Reset => "reset",
            FaultKind::Unplug => "unplug",
            FaultKind::Replace => "replace",
            FaultKind::Port => "port",
        }
    }
}

/// The host's name in reports.
pub(super) fn side_name(side: usize) -> &'static str {
    if side == TARGET {
        "target"
    } else {
        "initiator"
    }
}

/// Where the schedule is.
enum Phase {
    /// The next fault starts at this time.
    Next(Instant),
    /// A two-step fault's first step is done; the second comes at `until`.
    Held {
        kind: FaultKind,
        side: usize,
        until: Instant,
    },
}

/// Faults injected, by kind and host.
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct FaultFigures {
    /// Faults started.
    pub(super) injected: u64,
    /// By kind.
    pub(super) by_kind: BTreeMap<&'static str, u64>,
    /// By host.
    pub(super) by_host: BTreeMap<&'static str, u64>,
    /// Steps the registry refused (each a failed check).
    pub(super) errors: Vec<String>,
}

/// The seeded schedule, played in real time by [`Faults::step`].
pub(super) struct Faults {
    kinds: Vec<FaultKind>,
    every: Duration,
    rng: u64,
    phase: Phase,
    registries: [Registry; 2],
    /// The address each host's device owns, for plugging it back.
    addrs: [IpNet; 2],
    pub(super) figures: FaultFigures,
}

impl Faults {
    /// A schedule of `kinds` (none: no faults), a fault every `every` on
    /// average, drawn from `seed`, on the two hosts' `registries` whose
    /// devices own `addrs`; the first fault comes one gap after `start`.
    pub(super) fn new(
        kinds: &[FaultKind],
        every: Duration,
        seed: u64,
        registries: [Registry; 2],
        addrs: [IpNet; 2],
        start: Instant,
    ) -> Faults {
        let mut kinds = kinds.to_vec();
        kinds.sort();
        kinds.dedup();
        let mut f = Faults {
            kinds,
            every,
            rng: mix(seed ^ 0x50a4_fa17),
            phase: Phase::Next(start),
            registries,
            addrs,
            figures: FaultFigures::default(),
        };
        let gap = f.gap();
        f.phase = Phase::Next(start + gap);
        f
    }

    fn draw(&mut self) -> u64 {
        self.rng = mix(self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15));
        self.rng
    }

    /// A fraction in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.draw() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn gap(&mut self) -> Duration {
        self.every.mul_f64(0.5 + self.unit())
    }

    fn hold(&mut self) -> Duration {
        Duration::from_secs_f64(0.5 + 1.5 * self.unit())
    }

    /// Whether no fault holds a device now (its second step not done).
    pub(super) fn idle(&self) -> bool {
        matches!(self.phase, Phase::Next(_))
    }

    /// Apply what is due at `now`: the next fault's first step, or a held
    /// fault's second. Returns a line saying what was done, if anything.
    pub(super) fn step(&mut self, now: Instant) -> Option<String> {
        match self.phase {
            Phase::Next(at) if now >= at && !self.kinds.is_empty() => {
                let pick = self.draw() % self.kinds.len() as u64;
                let kind = self.kinds[pick as usize];
                let side = if self.draw() % 2 == 0 {
                    INITIATOR
                } else {
                    TARGET
                };
                self.figures.injected += 1;
                *self.figures.by_kind.entry(kind.name()).or_default() += 1;
                *self.figures.by_host.entry(side_name(side)).or_default() += 1;
                let r = &self.registries[side];
                let (done, held) = match kind {
                    FaultKind::Reset => (r.reset(DEVICE).map(|_| ()), false),
                    FaultKind::Replace => (r.replace(DEVICE, None).map(|_| ()), false),
                    FaultKind::Unplug => (r.remove(DEVICE).map(|_| ()), true),
                    FaultKind::Port => (r.set_port(DEVICE, PortState::Down).map(|_| ()), true),
                };
                let what = format!(
                    "fault {}: {} {} ({})",
                    self.figures.injected,
                    kind.name(),
                    side_name(side),
                    match kind {
                        FaultKind::Reset => "soft-device reset",
                        FaultKind::Replace => "soft-device replace",
                        FaultKind::Unplug => "soft-device remove",
                        FaultKind::Port => "soft-device port down",
                    }
                );
                self.phase = match (&done, held) {
                    (Ok(()), true) => {
                        let until = now + self.hold();
                        Phase::Held { kind, side, until }
                    }
                    _ => Phase::Next(now + self.gap()),
                };
                Some(self.outcome(what, done))
            }
            Phase::Held { kind, side, until } if now >= until => {
                let r = &self.registries[side];
                let (done, step) = match kind {
                    FaultKind::Unplug => (
                        r.add(DEVICE, vec![self.addrs[side]], None, None)
                            .map(|_| ()),
                        "soft-device add",
                    ),
                    _ => (
                        r.set_port(DEVICE, PortState::Active).map(|_| ()),
                        "soft-device port up",
                    ),
                };
                self.phase = Phase::Next(now + self.gap());
                let what = format!(
                    "fault {}: {} {} ({step})",
                    self.figures.injected,
                    kind.name(),
                    side_name(side)
                );
                Some(self.outcome(what, done))
            }
            _ => None,
        }
    }

    fn outcome(
        &mut self,
        what: String,
        done: Result<(), relink_soft::registry::RegistryError>,
    ) -> String {
        match done {
            Ok(()) => what,
            Err(e) => {
                let line = format!("{what}: refused: {e}");
                self.figures.errors.push(line.clone());
                line
            }
        }
    }

    /// End a held fault at once (the run is ending): the device back, the
    /// port up.
    pub(super) fn finish(&mut self) -> Option<String> {
        if let Phase::Held { until, .. } = &mut self.phase {
            let now = Instant::now();
            *until = now;
            return self.step(now);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_and_holds_are_within_their_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let reg = || Registry::open(dir.path()).unwrap();
        let addr: IpNet = "127.0.0.1/8".parse().unwrap();
        let mut f = Faults::new(
            &FaultKind::ALL,
            Duration::from_secs(4),
            7,
            [reg(), reg()],
            [addr, addr],
            Instant::now(),
        );
        for _ in 0..1000 {
            let g = f.gap();
            assert!(
                g >= Duration::from_secs(2) && g < Duration::from_secs(6),
                "{g:?}"
            );
            let h = f.hold();
            assert!(
                h >= Duration::from_millis(500) && h < Duration::from_secs(2),
                "{h:?}"
            );
        }
    }
}
