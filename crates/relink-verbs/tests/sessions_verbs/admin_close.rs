//! How a session ends on real verbs: an admin close on either side, with
//! traffic in flight, makes the peer close at once.

use super::*;

/// How long the peer of an admin close is waited for to close its half:
/// a hang's bound, not a speed limit. It takes one round trip (4–52 ms on
/// rxe under TCG, 7 ms typically: the `RELINK_VM_NOTE`'s figure); a peer
/// that missed the goodbye never closes (it reports a loss and recovers,
/// which the scenario checks on its own).
const PEER_CLOSE_LIMIT: Duration = Duration::from_secs(20);
/// Messages submitted right before an admin close (its goodbye is posted
/// behind them).
const BURST: usize = 32;

/// An admin close on one side of a session with traffic in flight — a
/// burst of messages just submitted, so the goodbye is posted behind them
/// — makes the other side close its half (`Disconnected`, waited for up to
/// [`PEER_CLOSE_LIMIT`]; how long it took is a figure), never take the
/// disconnect for a loss (`DeviceLost`, a recovery attempt: a close that
/// was not seen as one); every operation of the initiator
/// completes exactly once; nothing is left behind (no closing transport,
/// no object of the initiator's provider). Three sessions closed by the
/// initiator, three by the target. (A disconnect right after posting the goodbye moves the QP
/// to the error state and flushes the goodbye when the device has not sent
/// it yet: the peer then recovers.)
#[test]
fn admin_close_peer_closes_at_once() {
    let env = env_or_skip!(need_nothing);
    let mut latencies: Vec<(&str, Duration)> = Vec::new();
    for closer in [
        "initiator",
        "initiator",
        "initiator",
        "target",
        "target",
        "target",
    ] {
        let (listen, paths) = main_pair(&env, port());
        let mut d = Duo::start(env.clone(), listen, paths);
        d.pump(Duration::from_millis(300));
        let t = d.w.target.expect("the target's session");
        let (before_a, before_b) = (d.events.len(), d.target_events.len());
        d.traffic = false;
        let started = Instant::now();
        if closer == "initiator" {
            d.w.burst(&mut d.a, BURST);
            d.a.close(d.s).expect("close");
        } else {
            for i in 0..BURST {
                d.b.send(t, &[i as u8; 64]).expect("send");
            }
            d.b.close(t).expect("close");
        }
        eprintln!(
            "  [{:>8.3}s] + closed by the {closer}, {BURST} messages just sent",
            d.secs()
        );
        let closed = d.pump_until(PEER_CLOSE_LIMIT, |d| {
            let peer_events = if closer == "initiator" {
                &d.target_events[before_b..]
            } else {
                &d.events[before_a..]
            };
            peer_events.contains(&SessionEvent::Disconnected)
        });
        let took = started.elapsed();
        // Whatever else the peer does shows within a moment.
        d.pump(Duration::from_millis(300));
        let peer_events: Vec<SessionEvent> = if closer == "initiator" {
            d.target_events[before_b..].to_vec()
        } else {
            d.events[before_a..].to_vec()
        };
        let mut problems = std::mem::take(&mut d.problems);
        if !closed {
            problems.push(format!(
                "closed by the {closer}: the peer did not close within {PEER_CLOSE_LIMIT:?}"
            ));
        }
        if let Some(e) = peer_events.iter().find(|e| {
            matches!(
                e,
                SessionEvent::DeviceLost { .. } | SessionEvent::Recovering { .. }
            )
        }) {
            problems.push(format!(
                "closed by the {closer}: the peer took the close for a loss ({e:?}): {peer_events:?}"
            ));
        }
        // Closed, or reaped once closed and drained.
        for (who, state) in [("initiator", d.a.state(d.s)), ("target", d.b.state(t))] {
            if !matches!(state, Some(State::Closed) | None) {
                problems.push(format!("closed by the {closer}: the {who} is {state:?}"));
            }
        }
        let c = check_completions(&d.w);
        if !c.ok {
            problems.push(format!("{}: {}", c.name, c.detail));
        }
        problems.extend(d.w.check_common());
        // Nothing leaks: no goodbye still waiting, and the initiator's
        // provider (no listener) holds no object any more.
        for (who, node) in [("initiator", &d.a), ("target", &d.b)] {
            let waiting = node.footprint().closing;
            if waiting != 0 {
                problems.push(format!("the {who} still has {waiting} closing transports"));
            }
        }
        let left = d.pa.object_counts();
        if left.total() != 0 {
            problems.push(format!("the initiator's provider still holds {left:?}"));
        }
        println!(
            "RESULT admin_close_by_{closer}: peer closed after {:.1} ms, {} problems",
            took.as_secs_f64() * 1e3,
            problems.len()
        );
        latencies.push((closer, took));
        let env2 = d.env.clone();
        drop(d);
        if let Err(e) = env2.restore() {
            eprintln!("restoring the host's devices: {e}");
        }
        assert!(
            problems.is_empty(),
            "admin_close_peer_closes_at_once: {} problems:\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
    let worst = |who: &str| {
        latencies
            .iter()
            .filter(|l| l.0 == who)
            .map(|l| l.1)
            .max()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3
    };
    println!(
        "RELINK_VM_NOTE: 6 closes, the peer closed every time, slowest {:.1} ms (initiator closing) / {:.1} ms (target closing)",
        worst("initiator"),
        worst("target")
    );
}
