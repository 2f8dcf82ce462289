//! A peer-side outage on the sans-IO pair (virtual clock): the target's
//! device is removed and added back `D` later. A request that meets no
//! device gets no answer, only its timeout, and the initiator cannot see
//! the device return; its probes (`probe_interval`, `probe_timeout`) find
//! it within one probe period whatever `D` is, with few requests while it
//! is away. Without probes (the exponential schedule alone) the initiator
//! waits out ever longer attempts.

mod pair;

use std::time::Duration;

use pair::{Pair, Setup, Who};
use relink_core::policy::Policy;
use relink_core::state::State;

/// The target's device away for `away`: how many requests the initiator
/// sent meanwhile, and how long after the device's return the initiator
/// was established again.
fn outage(policy: Policy, away: Duration, unreachable: bool) -> (usize, Duration) {
    let mut p = Pair::connected(Setup::with_policy(policy));
    p.absent_unreachable = unreachable;
    p.remove_device(Who::Tgt);
    let before = p.requests_seen.len();
    p.advance(away);
    let requests = p.requests_seen.len() - before;
    p.add_device(Who::Tgt);
    let back = p.now;
    while p.state(Who::Ini) != State::Established {
        assert!(p.now - back < Duration::from_secs(30), "never resumed");
        p.advance(Duration::from_millis(1));
    }
    (requests, p.now - back)
}

#[test]
fn a_peer_whose_device_returns_is_found_within_a_probe_period() {
    let policy = Policy::default();
    let interval = policy.probe_interval.expect("probes are on by default");
    // A probe that met no device: its timeout, then at most one interval.
    let bound = policy.probe_timeout + interval + Duration::from_millis(1);
    // Each probe takes its timeout and at least half an interval.
    let cycle = policy.probe_timeout + interval / 2;
    for ms in [100, 500, 2_000, 20_000] {
        let away = Duration::from_millis(ms);
        let (requests, past) = outage(policy.clone(), away, false);
        assert!(
            past <= bound,
            "away {away:?}: established {past:?} after the device's return (bound {bound:?})"
        );
        let most = (away.as_nanos() / cycle.as_nanos()) as usize + 1;
        assert!(
            requests >= 1 && requests <= most,
            "away {away:?}: {requests} requests (at most {most})"
        );
    }
}

#[test]
fn a_peer_whose_host_refuses_at_once_is_probed_at_the_interval() {
    // The TCP soft fabric: the absent device's host refuses the request
    // (`Unreachable`) at once. Probes come every half to one interval,
    // not after the growing backoff.
    let policy = Policy::default();
    let interval = policy.probe_interval.expect("probes are on by default");
    for ms in [100, 2_000] {
        let away = Duration::from_millis(ms);
        let (requests, past) = outage(policy.clone(), away, true);
        assert!(
            past <= interval + Duration::from_millis(1),
            "away {away:?}: established {past:?} after the device's return"
        );
        let most = (away.as_nanos() / (interval / 2).as_nanos()) as usize + 1;
        let least = (away.as_nanos() / interval.as_nanos()) as usize;
        assert!(
            (least..=most).contains(&requests),
            "away {away:?}: {requests} requests (between {least} and {most})"
        );
    }
    // Without probes the backoff doubles: few requests, a long wait.
    let off = Policy::builder()
        .probe_interval(None)
        .build()
        .expect("valid policy");
    let (requests, past) = outage(off, Duration::from_secs(2), true);
    assert!(requests <= 8, "{requests} requests");
    assert!(past > interval, "established {past:?} after the return");
}

#[test]
fn without_probes_the_initiator_waits_out_growing_attempts() {
    let policy = Policy::builder()
        .probe_interval(None)
        .build()
        .expect("valid policy");
    // Away 0.6 s: the second attempt (1 s) went out while the device was
    // still away, and nothing answers it.
    let (requests, past) = outage(policy.clone(), Duration::from_millis(600), false);
    assert_eq!(requests, 2, "attempts of 500 ms, then 1 s");
    assert!(
        past > policy.initial_connect_timeout,
        "established only {past:?} after the return"
    );
}

#[test]
fn a_session_never_established_does_not_probe() {
    // Its peer's time to answer is unknown: the first connection keeps the
    // growing attempt timeouts (500 ms, 1 s, 2 s, 3 s, ...).
    let mut p = Pair::new(Setup::default());
    p.end_mut(Who::Tgt).device_present = false;
    p.connect();
    p.advance(Duration::from_secs(10));
    let n = p.requests_seen.len();
    assert!((4..=6).contains(&n), "{n} requests in 10 s");
    p.end_mut(Who::Tgt).device_present = true;
    p.advance(Duration::from_secs(30));
    assert_eq!(p.state(Who::Ini), State::Established);
}
