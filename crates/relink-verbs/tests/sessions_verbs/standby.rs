//! Unplanned failover on real verbs with and without a hot standby
//! (`Policy::standby`), in one run: one session with two paths (the two
//! device pairs) and the checked workload; the initiator's device the
//! session runs on is deleted under traffic (`rdma link delete`), the
//! session goes on over the other pair, the device is added back; first
//! with the standby off (the session reconnects on the other pair), then,
//! the same session, with it on (the standby, up on the other pair before
//! each delete, is promoted: no connection setup in the stall).
//!
//! What must hold on any machine, however busy, is checked: every
//! operation completed once, every message delivered once and in order,
//! each loss ending with the session established on the other pair, no
//! failover and no standby with the knob off, a standby built before each
//! delete with it on, keepalives answered on the standby. How many losses
//! the standby took over is a figure, not a check: a standby whose
//! keepalives (every 250 ms) were not heard for two periods — its peer's
//! half not run in time on a loaded machine is enough — is dropped
//! (`StandbyLost { cause: Silent }`), and a loss before the next one is up
//! is a reconnection (connection attempts), as without a standby. The
//! `RESULT` and `RELINK_VM_NOTE` lines say how many were promotions and
//! how many standbys went silent.
//!
//! Each move is measured as the planned outages' are (`planned.rs`): the
//! stall is the longest gap between consecutive successful completions
//! from the start of the delete until the session has run on the new
//! device for 300 ms; up is the time from the delete to the `Resumed`.
//! The stall holds the kernel's delay in reporting the removal (rxe
//! reports it only once `rdma link delete` is under way); the switch is
//! the part after it: from the initiator's `DeviceLost` to the next
//! successful completion. Next to them, the longest gap between
//! successful completions in the 300 ms of plain traffic before each
//! delete: the workload's steady state on this machine, with 16
//! operations in flight.

use relink::{Policy, RecoveryTimeline, StandbyLoss};
use relink_fabric::Timestamp;

use super::planned::{need_second_pair, two_pairs, Moved};
use super::*;

/// The keepalive period with the standby on.
const KEEPALIVE: Duration = Duration::from_millis(250);

/// The nearest-rank percentile `p` of `v`, in ms (0 for none).
pub(super) fn pct_ms(v: &[Duration], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort();
    if v.is_empty() {
        return 0.0;
    }
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i].as_secs_f64() * 1e3
}

/// The names of a promotion's phases, in order (see [`promotion`]).
const PROMOTION: [&str; 4] = ["promote", "resync", "first_completion", "release"];

/// The phases of a switch to the standby on one end, from its
/// `last_recovery`: from the loss until the standby was promoted, the
/// resync (the peer's `Promote` and advertisements), the first completion
/// after it (`ZERO` at an end that completed nothing since: the target of
/// this workload); and, off that path, from the loss until the lost
/// connection's resources were destroyed (at the end of the poll round
/// that promoted the standby); `None` if the outage was no promotion or a
/// phase is missing.
fn promotion(tl: &RecoveryTimeline) -> Option<[Duration; 4]> {
    let (promoted, resynced) = (tl.promoted?, tl.resynced?);
    let first = tl.first_completion.unwrap_or(resynced);
    Some([
        promoted.saturating_since(tl.lost),
        resynced.saturating_since(promoted),
        first.saturating_since(resynced),
        tl.released?.saturating_since(tl.lost),
    ])
}

/// `initiator p50 ms (n): promote a, resync b, ..., total t`: the phases
/// `shown` and the sum of the first three (from the loss to the first
/// completion).
fn promotion_note(who: &str, samples: &[[Duration; 4]], shown: &[usize]) -> String {
    if samples.is_empty() {
        return format!("{who}: none");
    }
    let mut parts: Vec<String> = shown
        .iter()
        .map(|&i| {
            let v: Vec<Duration> = samples.iter().map(|s| s[i]).collect();
            format!("{} {:.2}", PROMOTION[i], pct_ms(&v, 0.5))
        })
        .collect();
    let totals: Vec<Duration> = samples.iter().map(|s| s[..3].iter().sum()).collect();
    parts.push(format!("total {:.2}", pct_ms(&totals, 0.5)));
    format!("{who} p50 ms ({}): {}", samples.len(), parts.join(", "))
}

/// The `StandbyUp` events of the initiator so far.
fn standbys_up(d: &Duo) -> usize {
    d.events
        .iter()
        .filter(|e| matches!(e, SessionEvent::StandbyUp { .. }))
        .count()
}

/// How a loss with the standby on was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Took {
    /// By the standby: one failover, no connection attempt.
    Promotion,
    /// By a reconnection (the standby was not up at the loss: dropped
    /// for silence, or not rebuilt yet).
    Reconnection,
    /// More than one outage: a promotion whose standby did not carry the
    /// session (its resync failed) and a reconnection, or a second loss
    /// before the session settled.
    Other,
}

/// `silent` of `Silent`, `down` of `Down`, `released` of `Released`
/// among the `StandbyLost` events in `events`.
fn standbys_lost(events: &[SessionEvent]) -> [usize; 3] {
    let mut n = [0; 3];
    for e in events {
        if let SessionEvent::StandbyLost { cause, .. } = e {
            n[match cause {
                StandbyLoss::Silent => 0,
                StandbyLoss::Down(_) => 1,
                _ => 2,
            }] += 1;
        }
    }
    n
}

/// What [`failovers`] measured.
struct Failovers {
    /// Each move.
    moves: Vec<Moved>,
    /// How each loss was taken (with the standby on).
    took: Vec<Took>,
    /// With the standby, each end's promotion phases (initiator, target).
    phases: [Vec<[Duration; 4]>; 2],
    /// With the standby, the hand-off between the ends of each failover
    /// ([`handoff_note`]).
    handoffs: Vec<[f64; 2]>,
    /// Before each delete, the longest gap between successful completions
    /// in 300 ms of plain traffic ([`Duo::quiet_gap`]).
    quiet: Vec<Duration>,
}

/// Alternately delete the initiator's device the session runs on (the
/// other pair takes over) and add it back, `cycles` times, with the
/// standby `on` or off; with it on, the standby is up on the other pair
/// before each delete.
fn failovers(d: &mut Duo, cycles: u64, on: bool) -> Failovers {
    let (a2, _) = d.env.second.clone().expect("checked");
    let first = (d.env.init.device.clone(), d.env.init.netdev.clone());
    let second = (a2.device.clone(), a2.netdev.clone());
    let label = if on { "with standby" } else { "no standby" };
    let mut moves = Vec::new();
    let mut took = Vec::new();
    let mut phases = [Vec::new(), Vec::new()];
    let mut handoffs = Vec::new();
    let mut quiet = Vec::new();
    for cycle in 1..=cycles {
        quiet.push(d.quiet_gap(Duration::from_millis(300)));
        if on {
            let up = d.pump_until(RESUME_TIMEOUT, |d| {
                d.events
                    .iter()
                    .rev()
                    .find_map(|e| match e {
                        SessionEvent::StandbyUp { .. } => Some(true),
                        SessionEvent::StandbyLost { .. } | SessionEvent::Resumed { .. } => {
                            Some(false)
                        }
                        _ => None,
                    })
                    .unwrap_or(false)
            });
            // A bounded wait: a standby is built within a connection's
            // time of the resync (again after a silent one's backoff).
            assert!(
                up,
                "{label} {cycle}: no standby up within {RESUME_TIMEOUT:?}"
            );
        }
        let dev = d.a.device(d.s).expect("the session's device").name;
        let (gone, netdev) = if dev == first.0 {
            first.clone()
        } else {
            second.clone()
        };
        let (before, _) = d.counters_of();
        d.watch();
        d.delete(&gone);
        // Returns once the session resumed (`Resumed`: established again)
        // and completed an operation after it: each loss ends with the
        // session established, or the scenario fails there (a bounded
        // wait). Its state a moment later is not checked: on a loaded
        // machine the current connection's own keepalive may lose it
        // again, which is another loss, recovered as any.
        let m = d.watched(&format!("{label} {cycle}"));
        if m.device == gone {
            d.problems.push(format!(
                "{label} {cycle}: the session resumed on the deleted {gone}"
            ));
        }
        let t = d.w.target.expect("the target's session");
        let (a_now, b_now) = (d.a.now(), d.b.now());
        let ends =
            [d.a.session_info(d.s), d.b.session_info(t)].map(|i| i.and_then(|i| i.last_recovery));
        if let [Some(ia), Some(tb)] = &ends {
            // The target's moments on the initiator's clock (the two
            // providers' clocks start apart).
            let on_a = |t: Timestamp| t.0 as f64 + a_now.0 as f64 - b_now.0 as f64;
            if let (Some(ip), Some(tp), Some(ir)) = (ia.promoted, tb.promoted, ia.resynced) {
                handoffs.push([
                    (on_a(tp) - ip.0 as f64) / 1e6,
                    (ir.0 as f64 - on_a(tp)) / 1e6,
                ]);
            }
        }
        for (v, tl) in phases.iter_mut().zip(ends) {
            v.extend(tl.as_ref().and_then(promotion));
        }
        let (after, _) = d.counters_of();
        let (failovers, attempts) = (
            after.failovers - before.failovers,
            after.attempts - before.attempts,
        );
        if on {
            // A figure: a standby dropped for silence just before the
            // delete leaves the loss to a reconnection.
            let how = match (failovers, attempts) {
                (1, 0) => Took::Promotion,
                (0, _) => Took::Reconnection,
                _ => Took::Other,
            };
            if how != Took::Promotion {
                eprintln!(
                    "  [{:>8.3}s] {label} {cycle}: {how:?} ({failovers} failovers, {attempts} connection attempts, {} standbys silent so far)",
                    d.secs(),
                    after.standbys_silent
                );
            }
            took.push(how);
        }
        if !on && failovers != 0 {
            d.problems
                .push(format!("{label} {cycle}: {failovers} failovers counted"));
        }
        d.add(&gone, &netdev);
        d.mark = None;
        moves.push(m);
    }
    Failovers {
        moves,
        took,
        phases,
        handoffs,
        quiet,
    }
}

/// `the target promoted a ms after the initiator, which resynced b ms
/// after that` (medians).
fn handoff_note(v: &[[f64; 2]]) -> String {
    if v.is_empty() {
        return "no hand-off measured".into();
    }
    let median = |i: usize| {
        let mut x: Vec<f64> = v.iter().map(|h| h[i]).collect();
        x.sort_by(f64::total_cmp);
        x.get(x.len() / 2).copied().unwrap_or(f64::NAN)
    };
    format!(
        "the target promoted {:.2} ms after the initiator, which resynced {:.2} ms after that (p50 of {})",
        median(0),
        median(1),
        v.len()
    )
}

/// Unplanned failover, `RELINK_VERBS_STANDBY_CYCLES` times (default 8)
/// without and then with a hot standby, in one run; every operation
/// completes once and every message is delivered once, in order; each
/// loss ends with the session established on the other pair; without the
/// standby no loss is a failover, with it a standby is up before each
/// delete and the idle standby's keepalives (every 250 ms) are answered.
/// Figures, not checks: how many losses were promotions (one failover, no
/// connection attempt) rather than reconnections, and how many standbys
/// went silent (on a busy machine a standby whose peer was not run for two
/// keepalive periods is dropped, and the loss that follows reconnects).
/// The `RESULT standby_failover` line has both stalls' p50 and p99 (with
/// the standby: of the promotions).
#[test]
fn standby_failover() {
    let env = env_or_skip!(need_second_pair);
    let cycles: u64 = env_or("RELINK_VERBS_STANDBY_CYCLES", 8);
    let (listen, paths) = two_pairs(&env);
    let mut d = Duo::start(env.clone(), listen, paths);
    let plain = failovers(&mut d, cycles, false);
    if standbys_up(&d) != 0 {
        d.problems
            .push("a standby came up with the knob off".into());
    }
    // Keepalives every 250 ms: the idle standby carries some between the
    // deletes (zero-length SENDs with immediate data on rxe).
    let on = Policy::builder()
        .standby(true)
        .keepalive(Some(KEEPALIVE))
        .build()
        .expect("a valid policy");
    d.a.set_policy(d.s, on).expect("the standby on");
    let hot = failovers(&mut d, cycles, true);
    let [ini, tgt] = &hot.phases;
    d.pump(KEEPALIVE * 3);
    let (a, b) = d.counters_of();
    // Keepalives that never arrive do not work on this provider, however
    // busy the machine (a standby is dropped after two periods of
    // silence, not before its first keepalive could come); how many
    // standbys went silent is a figure.
    if a.standby_keepalives_received == 0 {
        d.problems.push(format!(
            "standby keepalives: {} sent, {} received, {} standbys silent",
            a.standby_keepalives_sent, a.standby_keepalives_received, a.standbys_silent
        ));
    }
    let n = |t: Took| hot.took.iter().filter(|&&x| x == t).count();
    let (promoted, reconnected, other) =
        (n(Took::Promotion), n(Took::Reconnection), n(Took::Other));
    let [si, di, ri] = standbys_lost(&d.events);
    let [st, dt, rt] = standbys_lost(&d.target_events);
    let took = format!(
        "with standby {promoted} of {cycles} losses promoted, {reconnected} reconnected, \
         {other} with more than one outage; standbys silent initiator {} / target {} \
         (StandbyLost silent/down/released: initiator {si}/{di}/{ri}, target {st}/{dt}/{rt})",
        a.standbys_silent, b.standbys_silent
    );
    // The standby's figures are its promotions'; a reconnection is the
    // no-standby case's.
    let promotions = Failovers {
        moves: hot
            .moves
            .iter()
            .zip(&hot.took)
            .filter(|(_, t)| **t == Took::Promotion)
            .map(|(m, _)| m.clone())
            .collect(),
        took: Vec::new(),
        phases: [Vec::new(), Vec::new()],
        handoffs: Vec::new(),
        quiet: hot.quiet.clone(),
    };
    let figures = |f: &Failovers| {
        let (v, quiet) = (&f.moves, &f.quiet);
        if v.is_empty() {
            return "none".to_string();
        }
        let stall: Vec<Duration> = v.iter().map(|m| m.stall).collect();
        let switch: Vec<Duration> = v.iter().filter_map(|m| m.switch).collect();
        let up: Vec<Duration> = v.iter().map(|m| m.established).collect();
        format!(
            "stall p50 {:.1} ms, p99 {:.1} ms (longest gap in 300 ms without a fault \
             p50 {:.1} ms, p99 {:.1} ms); switch p50 {:.2} ms, p99 {:.2} ms ({} seen); \
             up p50 {:.1} ms, p99 {:.1} ms; {} replayed, {} indeterminate, {} failed",
            pct_ms(&stall, 0.5),
            pct_ms(&stall, 0.99),
            pct_ms(quiet, 0.5),
            pct_ms(quiet, 0.99),
            pct_ms(&switch, 0.5),
            pct_ms(&switch, 0.99),
            switch.len(),
            pct_ms(&up, 0.5),
            pct_ms(&up, 0.99),
            v.iter().map(|m| m.replayed).sum::<u64>(),
            v.iter().map(|m| m.indeterminate).sum::<usize>(),
            v.iter().map(|m| m.failed).sum::<usize>(),
        )
    };
    let (p, h) = (figures(&plain), figures(&promotions));
    let switch = format!(
        "{}; {}; {}",
        promotion_note("initiator", ini, &[0, 1, 2, 3]),
        promotion_note("target", tgt, &[0, 1, 3]),
        handoff_note(&hot.handoffs)
    );
    let [(ia, ta), (ib, tb)] = d.slow_rounds;
    let slow = format!(
        "poll rounds {} per node, of {} ms or more: initiator {ia} ({:.0} ms), target {ib} ({:.0} ms) in {:.1} s",
        d.rounds,
        SLOW_POLL.as_millis(),
        ta.as_secs_f64() * 1e3,
        tb.as_secs_f64() * 1e3,
        d.secs()
    );
    println!(
        "RESULT standby_failover: {cycles} cycles each; {took}; no standby: {p}; \
         with standby ({promoted} promotions): {h}; promotion phases, {switch}; {slow}"
    );
    // Every promotion (the cycle's one outage) records its phases: its
    // timeline is complete once the session completed on the standby,
    // which `watched` waited for.
    if ini.len() < promoted {
        d.problems.push(format!(
            "the initiator's promotion phases recorded for {} of {promoted} promotions",
            ini.len()
        ));
    }
    let p50 = |v: &[Moved], f: fn(&Moved) -> Option<Duration>| {
        pct_ms(&v.iter().filter_map(f).collect::<Vec<_>>(), 0.5)
    };
    d.notes.push(format!(
        "{cycles}+{cycles} failovers, p50 stall / switch: no standby {:.1} / {:.2} ms vs standby {:.1} / {:.2} ms ({promoted} promotions)",
        p50(&plain.moves, |m| Some(m.stall)),
        p50(&plain.moves, |m| m.switch),
        p50(&promotions.moves, |m| Some(m.stall)),
        p50(&promotions.moves, |m| m.switch),
    ));
    d.notes.push(took);
    d.notes.push(format!("promotion phases, {switch}"));
    d.notes.push(slow);
    d.notes.push(format!(
        "standby keepalives {} sent / {} received, {} silent",
        a.standby_keepalives_sent, a.standby_keepalives_received, a.standbys_silent
    ));
    d.finish("standby_failover");
}
