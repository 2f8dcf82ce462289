//! Where each recovery's time went: the phases of the initiator's last
//! outage (`SessionInfo::last_recovery`) after each cycle, reported as
//! medians over the cycles in the scenario's `RESULT` line.

use std::time::Duration;

use relink::RecoveryTimeline;

/// The phase names, in order; each ends at the matching timestamp of
/// [`RecoveryTimeline`] and starts at the one before.
pub const NAMES: [&str; 7] = [
    "attempt",
    "addr",
    "route",
    "resources",
    "connect",
    "resync",
    "first_completion",
];

/// The phases of one recovery, from the device becoming visible to the
/// process (or the attempt, when no device came) to the first completion;
/// `None` if a phase is missing.
pub fn of(tl: &RecoveryTimeline) -> Option<[Duration; 7]> {
    let start = tl.device_visible.or(tl.attempt)?;
    let ends = [
        tl.attempt?,
        tl.addr_resolved?,
        tl.route_resolved?,
        tl.resources?,
        tl.connected?,
        tl.resynced?,
        tl.first_completion?,
    ];
    let mut out = [Duration::ZERO; 7];
    let mut from = start;
    for (o, end) in out.iter_mut().zip(ends) {
        *o = end.saturating_since(from);
        from = end;
    }
    Some(out)
}

/// `phases p50 ms: attempt a, addr b, ..., total t` over `samples`.
pub fn note(samples: &[[Duration; 7]]) -> String {
    if samples.is_empty() {
        return "phases: none recorded".into();
    }
    let median = |f: &dyn Fn(&[Duration; 7]) -> Duration| {
        let mut v: Vec<Duration> = samples.iter().map(f).collect();
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1e3
    };
    let mut parts: Vec<String> = (0..7)
        .map(|i| format!("{} {:.2}", NAMES[i], median(&|s| s[i])))
        .collect();
    parts.push(format!("total {:.2}", median(&|s| s.iter().sum())));
    format!(
        "phases p50 ms from device visible ({} cycles): {}",
        samples.len(),
        parts.join(", ")
    )
}
