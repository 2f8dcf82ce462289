//! The demo's fault catalogue and its schedule in virtual time.
//!
//! Every fault is a short script of steps (inject now, restore later) that
//! the driver plays at fixed virtual times. Which device a step hits is
//! decided when the fault starts: most faults hit *the device carrying
//! session A* at that moment (so that A is always the one hurt), the
//! planned drain, the unplug and the long outage hit the initiator's
//! `soft0`, the only device session B can use.
//!
//! The planned drain is the one fault that is not a fault: maintenance of
//! the initiator's `soft0`, announced with [`relink::Node::drain`] (see
//! [`super::drain`]). Its unplug waits until the device carries only what
//! cannot move, so it is played when the drain finished, not at a fixed
//! time.

use std::fmt;
use std::time::Duration;

use clap::ValueEnum;
use serde::Serialize;

use relink_sim::workload::mix;

/// The faults, in the order the demo runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// Planned maintenance of the initiator's soft0: `drain` (A and C move
    /// to soft1, B has no other path and stays), unplug once only B is
    /// left on it, re-plug after a while.
    Drain,
    /// Reset of the initiator's device carrying A (fatal error, the same
    /// device back at once).
    ResetInitiator,
    /// Reset of the target's device carrying A.
    ResetTarget,
    /// Hot-unplug of the initiator's soft0, re-plugged after a while.
    UnplugReplug,
    /// The initiator's device carrying A is replaced by a new one (new
    /// GUID) with the same name and address.
    Replace,
    /// Loss of the initiator's device carrying A: A moves to its other
    /// path; the device comes back later.
    Failover,
    /// The device carrying A flaps: removed and re-added several times in
    /// quick succession.
    Flap,
    /// The initiator's soft0 is gone for longer than session B's give-up
    /// deadline: B gives up, A carries on.
    Outage,
    /// Admin disconnect of session A, with operations still pending.
    Close,
}

impl FaultKind {
    /// Every fault, in running order.
    pub const ALL: [FaultKind; 9] = [
        FaultKind::Drain,
        FaultKind::ResetInitiator,
        FaultKind::ResetTarget,
        FaultKind::UnplugReplug,
        FaultKind::Replace,
        FaultKind::Failover,
        FaultKind::Flap,
        FaultKind::Outage,
        FaultKind::Close,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Drain => "drain",
            FaultKind::ResetInitiator => "reset-initiator",
            FaultKind::ResetTarget => "reset-target",
            FaultKind::UnplugReplug => "unplug-replug",
            FaultKind::Replace => "replace",
            FaultKind::Failover => "failover",
            FaultKind::Flap => "flap",
            FaultKind::Outage => "outage",
            FaultKind::Close => "close",
        }
    }

    /// Which device the fault hits.
    pub fn target(self) -> DeviceSel {
        match self {
            FaultKind::ResetInitiator
            | FaultKind::Replace
            | FaultKind::Failover
            | FaultKind::Flap => DeviceSel::CarryingA(Side::Initiator),
            FaultKind::ResetTarget => DeviceSel::CarryingA(Side::Target),
            FaultKind::Drain | FaultKind::UnplugReplug | FaultKind::Outage => {
                DeviceSel::Named(Side::Initiator, PRIMARY)
            }
            FaultKind::Close => DeviceSel::None,
        }
    }

    /// The steps, as offsets from the fault's start.
    pub fn steps(self, timing: &Timing) -> Vec<(Duration, Step)> {
        match self {
            // The unplug comes when the drain finished (see `super::drain`).
            FaultKind::Drain => vec![
                (Duration::ZERO, Step::Drain),
                (timing.maintenance, Step::Return),
            ],
            FaultKind::ResetInitiator | FaultKind::ResetTarget => {
                vec![(Duration::ZERO, Step::Reset)]
            }
            FaultKind::UnplugReplug => vec![
                (Duration::ZERO, Step::Remove),
                (timing.unplugged, Step::Readd),
            ],
            FaultKind::Replace => vec![(Duration::ZERO, Step::Replace)],
            FaultKind::Failover => vec![
                (Duration::ZERO, Step::Remove),
                (timing.failover_absent, Step::Readd),
            ],
            FaultKind::Flap => (0..timing.flaps)
                .flat_map(|i| {
                    let t = timing.flap_period * (2 * i);
                    [(t, Step::Remove), (t + timing.flap_period, Step::Readd)]
                })
                .collect(),
            FaultKind::Outage => vec![(Duration::ZERO, Step::Remove), (timing.outage, Step::Readd)],
            FaultKind::Close => vec![(Duration::ZERO, Step::CloseA)],
        }
    }

    /// How long the fault's steps take (first to last).
    pub fn span(self, timing: &Timing) -> Duration {
        self.steps(timing)
            .last()
            .map(|(t, _)| *t)
            .unwrap_or_default()
    }

    /// One sentence for the reader, with the device it hit.
    pub fn describe(self, device: &str, timing: &Timing) -> String {
        let ms = |d: Duration| d.as_millis();
        match self {
            FaultKind::Drain => format!(
                "planned maintenance of {device}: drain it (its sessions move to another path, nothing in flight), unplug it once it carries only what cannot move, re-plug it {} ms after the drain",
                ms(timing.maintenance)
            ),
            FaultKind::ResetInitiator => {
                format!("reset of {device} (the device carrying A): fatal error, the device returns at once")
            }
            FaultKind::ResetTarget => {
                format!("reset of {device} (the target's device carrying A)")
            }
            FaultKind::UnplugReplug => format!(
                "hot-unplug of {device} (B's only device), re-plugged after {} ms",
                ms(timing.unplugged)
            ),
            FaultKind::Replace => format!(
                "{device} (carrying A) replaced by a new device: new GUID, same name and address"
            ),
            FaultKind::Failover => format!(
                "loss of {device} (carrying A): A moves to its other path; the device returns after {} ms",
                ms(timing.failover_absent)
            ),
            FaultKind::Flap => format!(
                "{device} (carrying A) flaps: removed and re-added {} times, {} ms apart",
                timing.flaps,
                ms(timing.flap_period)
            ),
            FaultKind::Outage => format!(
                "{device} gone for {} ms, longer than B's give-up deadline of {} ms",
                ms(timing.outage),
                ms(timing.b_give_up)
            ),
            FaultKind::Close => {
                "admin disconnect of session A while operations are pending".to_string()
            }
        }
    }

    /// What each session may do in this fault's window: `(A, B)`.
    pub fn expected(self) -> (&'static [Expect], &'static [Expect]) {
        use Expect::*;
        const EITHER: &[Expect] = &[Resumed, Unaffected];
        match self {
            // B has no other path: blocked, lost with the device, back
            // with it.
            FaultKind::Drain => (&[Moved], &[Resumed]),
            FaultKind::ResetInitiator | FaultKind::ResetTarget => (&[Resumed], EITHER),
            FaultKind::UnplugReplug => (EITHER, &[Resumed]),
            FaultKind::Replace => (&[ResumedNewGuid], EITHER),
            FaultKind::Failover => (&[FailedOver], EITHER),
            FaultKind::Flap => (EITHER, EITHER),
            FaultKind::Outage => (EITHER, &[GaveUp]),
            FaultKind::Close => (&[Closed], &[Resumed, Unaffected, Ended]),
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The device every session can use.
pub const PRIMARY: &str = "soft0";

/// One of the two hosts: the side a fault hits, the side an event came
/// from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    /// The host that connects.
    Initiator,
    /// The host that listens.
    Target,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Initiator => "initiator",
            Side::Target => "target",
        })
    }
}

/// Which device a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSel {
    /// The device carrying session A on that side when the fault starts
    /// ([`PRIMARY`] if A has none at that moment).
    CarryingA(Side),
    /// A fixed device.
    Named(Side, &'static str),
    /// No device (admin actions).
    None,
}

/// One step of a fault script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `Fault::Reset`.
    Reset,
    /// `Fault::Remove` (orderly hot-unplug).
    Remove,
    /// `Fault::Readd`.
    Readd,
    /// `Fault::Replace` (same name, new GUID).
    Replace,
    /// `Node::close` of session A.
    CloseA,
    /// `Node::drain` of the device (its unplug follows once it carries
    /// only the sessions that cannot move).
    Drain,
    /// The drained device re-plugged after its maintenance, and undrained
    /// if it is still on the drain list.
    Return,
}

impl Step {
    /// Verb for progress lines.
    pub fn verb(self) -> &'static str {
        match self {
            Step::Reset => "reset",
            Step::Remove => "unplug",
            Step::Readd => "re-plug",
            Step::Replace => "replace",
            Step::CloseA => "close A",
            Step::Drain => "drain",
            Step::Return => "re-plug",
        }
    }
}

/// How a session came through a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Expect {
    /// No transport loss and no resume in the window.
    Unaffected,
    /// Lost its transport and resumed.
    Resumed,
    /// Resumed on a device with another GUID (a replacement).
    ResumedNewGuid,
    /// Resumed on another device (its other path).
    FailedOver,
    /// Moved to another device by a planned drain: no loss.
    Moved,
    /// Gave up (deadline), its operations failed.
    GaveUp,
    /// Closed by the admin.
    Closed,
    /// Already ended by an earlier fault.
    Ended,
    /// Lost its transport and had not resumed when the window ended.
    StillDown,
}

impl Expect {
    /// Text for the table.
    pub fn text(self) -> &'static str {
        match self {
            Expect::Unaffected => "unaffected",
            Expect::Resumed => "resumed",
            Expect::ResumedNewGuid => "resumed (new GUID)",
            Expect::FailedOver => "failed over",
            Expect::Moved => "moved (planned)",
            Expect::GaveUp => "gave up",
            Expect::Closed => "closed",
            Expect::Ended => "(ended before)",
            Expect::StillDown => "STILL DOWN",
        }
    }

    /// Whether an observed outcome satisfies this expectation (a fail-over
    /// or a new GUID is also a resume).
    pub fn accepts(self, observed: Expect) -> bool {
        self == observed
            || (self == Expect::Resumed
                && matches!(observed, Expect::FailedOver | Expect::ResumedNewGuid))
    }
}

/// Durations of the fault scripts and of the schedule.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Session B's give-up deadline (`ctrl_loss_tmo`).
    pub b_give_up: Duration,
    /// How long the unplugged device stays away.
    pub unplugged: Duration,
    /// How long the failed device stays away.
    pub failover_absent: Duration,
    /// Remove/re-add cycles of the flap.
    pub flaps: u32,
    /// Half a flap cycle.
    pub flap_period: Duration,
    /// The long outage (longer than `b_give_up`).
    pub outage: Duration,
    /// From the drain to the drained device's return (shorter than
    /// `b_give_up`: B, which cannot move, is lost with it and recovers).
    pub maintenance: Duration,
    /// Traffic before the first fault.
    pub lead_in: Duration,
    /// Least quiet time after a fault's last step.
    pub settle: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        let b_give_up = Duration::from_secs(2);
        Timing {
            b_give_up,
            unplugged: Duration::from_millis(300),
            failover_absent: Duration::from_millis(500),
            flaps: 4,
            flap_period: Duration::from_millis(30),
            outage: b_give_up + Duration::from_secs(1),
            maintenance: Duration::from_millis(400),
            lead_in: Duration::from_millis(400),
            settle: Duration::from_millis(400),
        }
    }
}

/// A fault placed in time.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The fault to play.
    pub kind: FaultKind,
    /// Start, from the beginning of the workload.
    pub at: Duration,
}

/// Place the selected faults (in catalogue order) within `duration`: the
/// admin close, if selected, at the very end; the others spread out with
/// at least [`Timing::settle`] after each, at times the seed shifts (by
/// whole 10 ms, plus a phase under 100 µs that decides what the fault
/// catches in flight). Returns the plan, or the shortest duration that
/// fits.
pub fn plan(
    selected: &[FaultKind],
    duration: Duration,
    timing: &Timing,
    seed: u64,
) -> Result<Vec<Planned>, Duration> {
    let mut kinds: Vec<FaultKind> = selected.to_vec();
    kinds.sort();
    kinds.dedup();
    let close = kinds.last() == Some(&FaultKind::Close);
    if close {
        kinds.pop();
    }
    let busy: Duration = kinds.iter().map(|k| k.span(timing) + timing.settle).sum();
    let needed = timing.lead_in + busy + if close { timing.settle } else { Duration::ZERO };
    if duration < needed {
        return Err(needed);
    }
    let gaps = u32::try_from(kinds.len()).unwrap_or(u32::MAX) + 1;
    // Spread the slack, in whole 10 ms.
    let grain = Duration::from_millis(10);
    let extra = grain
        * u32::try_from(((duration - needed) / gaps).as_nanos() / grain.as_nanos()).unwrap_or(0);
    let mut t = timing.lead_in;
    let mut out = Vec::new();
    for (i, k) in kinds.into_iter().enumerate() {
        let r = mix(seed ^ mix(i as u64 ^ 0xfa17));
        // Between half and all of the slack before this fault.
        let slots = u32::try_from(extra.as_nanos() / grain.as_nanos() / 2).unwrap_or(0);
        let shift = grain * (slots + u32::try_from(r % u64::from(slots + 1)).unwrap_or(0));
        let phase = Duration::from_nanos((r >> 32) % 100_000);
        t += shift;
        out.push(Planned {
            kind: k,
            at: t + phase,
        });
        t += extra - shift + k.span(timing) + timing.settle;
    }
    if close {
        out.push(Planned {
            kind: FaultKind::Close,
            at: duration,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_full_plan_fits_the_default_duration_in_order() {
        let t = Timing::default();
        let p = plan(&FaultKind::ALL, Duration::from_secs(10), &t, 7).unwrap();
        assert_eq!(p.len(), 9);
        assert_eq!(p[0].kind, FaultKind::Drain);
        assert!(p.windows(2).all(|w| w[0].at + w[0].kind.span(&t) < w[1].at));
        assert_eq!(p.last().unwrap().kind, FaultKind::Close);
        assert_eq!(p.last().unwrap().at, Duration::from_secs(10));
    }

    #[test]
    fn too_short_a_duration_names_the_minimum() {
        let t = Timing::default();
        let need = plan(&FaultKind::ALL, Duration::from_secs(1), &t, 7).unwrap_err();
        assert!(need > Duration::from_secs(5));
        assert!(plan(&FaultKind::ALL, need, &t, 7).is_ok());
    }

    #[test]
    fn the_outage_outlasts_b_and_the_maintenance_does_not() {
        let t = Timing::default();
        assert!(t.outage > t.b_give_up);
        assert!(t.maintenance < t.b_give_up);
    }
}
