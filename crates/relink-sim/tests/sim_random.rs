//! Randomized fault schedules on the in-process soft fabric: thousands of
//! seeds, each a different sequence of resets, unplugs, replacements, port
//! flaps, partitions and packet loss during mixed traffic (half of the
//! messages from registered memory, poisoned at their completion). A
//! quarter of the seeds fail queued operations fast (`fast_io_fail_tmo`):
//! their messages posted before a loss complete `Indeterminate` and are
//! replayed (as skips, those from registered memory and the WRITEs with
//! immediate data). After every run: at-most-once in-order delivery
//! (exactly once for every confirmed message), no corrupted byte, one
//! completion per operation, no leaked provider object, bounded journal
//! memory.
//!
//! The workload has every kind of operation: messages (half from
//! registered memory), WRITEs and READs (about half gathering or
//! scattering 2-4 ranges), FETCH_ADDs, WRITEs with immediate data (their
//! notices checked against their landing slots when taken) and flushes
//! (checked in their place in the completions); for 2 seeds in 5 the
//! target takes its deliveries through posted receives. Half the seeds run
//! their nodes in `PollMode::Busy`.
//!
//! `RELINK_SIM_SEEDS=N` sets the number of seeds (default 2000),
//! `RELINK_SIM_SEED=S` replays one seed, `RELINK_SIM_FAULT=K` makes every
//! fault of the schedules kind `K` (0 reset, 1 unplug and replug, 2
//! replacement, 3 port flap, 4 partition, 5 silent removal, 6 both ends
//! reset, 7 a reset later). A failure prints its seed; the same seed
//! replays the same run.

use std::sync::Mutex;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use relink::{Policy, PollMode, State};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_sim::workload::{options, Coverage, Workload, MAX_MESSAGE, WINDOW_A};
use relink_soft::{Fault, LinkConfig};

fn run_seed(seed: u64) -> Result<(), String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    // Fast failure from a generator of its own (the fault schedule of a
    // seed does not depend on it).
    let fast_fail = {
        let mut r = ChaCha8Rng::seed_from_u64(seed ^ 0xfa57_fa11);
        r.gen_bool(0.25)
            .then(|| Duration::from_micros(r.gen_range(100..3000)))
    };
    let policy = Policy::builder()
        .keepalive(Some(Duration::from_millis(20)))
        .fast_io_fail_tmo(fast_fail)
        .build()
        .expect("valid policy");
    let (posting, rendezvous) = relink_sim::workload::receive_plan(seed);
    let (mut sim, mut w) =
        relink_sim::workload::start_with_rendezvous(seed, policy, 7471, rendezvous)?;
    // Half the seeds busy-poll (from a generator of its own too): the
    // nodes arm their CQs only before virtual time moves.
    if ChaCha8Rng::seed_from_u64(seed ^ 0xb05e).gen_bool(0.5) {
        sim.set_poll_mode(PollMode::Busy);
    }
    if fast_fail.is_some() {
        w.allow_fast_fail();
    }
    every_kind(posting, &mut sim, &mut w);
    let s = w.session;
    let hosts = [sim.host(INITIATOR).index(), sim.host(TARGET).index()];
    if rng.gen_bool(0.3) {
        sim.fabric().inject(Fault::SetLink(LinkConfig {
            latency: Duration::from_micros(rng.gen_range(1..20)),
            jitter: Duration::from_micros(rng.gen_range(0..20)),
            drop_rate: rng.gen_range(0.0..0.05),
        }));
    }
    let mut max_journal = 0usize;
    let rounds = rng.gen_range(6..12);
    for _ in 0..rounds {
        for i in 0..rng.gen_range(5..25) {
            let node = sim.node(INITIATOR);
            w.send(node);
            if i % 3 == 0 {
                w.write(node);
            }
            if i % 5 == 0 {
                w.fetch_add(node);
            }
            if i % 9 == 0 {
                w.read(node);
            }
            if i % 4 == 2 {
                w.write_imm(node);
            }
            if i % 8 == 7 {
                w.flush(node);
            }
        }
        if rng.gen_bool(0.5) {
            let h = hosts[rng.gen_range(0..2)];
            let later = sim.now() + Duration::from_micros(rng.gen_range(50..5000));
            let f = sim.fabric();
            match forced_fault().unwrap_or(rng.gen_range(0..8)) {
                0 => f.inject(Fault::Reset(h, "soft0".into())),
                1 => {
                    f.inject(Fault::Remove(h, "soft0".into()));
                    f.schedule(later, Fault::Readd(h, "soft0".into()));
                }
                2 => f.inject(Fault::Replace(h, "soft0".into(), None)),
                3 => {
                    f.inject(Fault::PortDown(h, "soft0".into()));
                    f.schedule(later, Fault::PortUp(h, "soft0".into()));
                }
                4 => {
                    f.inject(Fault::Partition(hosts[0], hosts[1]));
                    f.schedule(later, Fault::Heal(hosts[0], hosts[1]));
                }
                5 => {
                    f.inject(Fault::SilentRemove(h, "soft0".into()));
                    f.schedule(later, Fault::Readd(h, "soft0".into()));
                }
                6 => {
                    f.inject(Fault::Reset(hosts[0], "soft0".into()));
                    f.inject(Fault::Reset(hosts[1], "soft0".into()));
                }
                _ => {
                    f.schedule(later, Fault::Reset(h, "soft0".into()));
                }
            }
        }
        sim.run_for(Duration::from_micros(rng.gen_range(50..2000)));
        w.collect(&mut sim);
        let j = sim
            .node(INITIATOR)
            .session_info(s)
            .map_or(0, |c| c.journal_bytes);
        max_journal = max_journal.max(j);
    }
    // Everything comes back; the session must finish all of its work.
    sim.run_for(Duration::from_millis(10));
    for h in hosts {
        sim.fabric().inject(Fault::Readd(h, "soft0".into()));
        sim.fabric().inject(Fault::PortUp(h, "soft0".into()));
    }
    sim.fabric().inject(Fault::Heal(hosts[0], hosts[1]));
    sim.fabric().inject(Fault::SetLink(LinkConfig::default()));
    let total = w.submitted();
    sim.run_until_cond(Duration::from_secs(120), |sim| {
        w.collect(sim);
        w.completed() >= total
    });
    // A fast failure completed its posted messages `Indeterminate`; they
    // stay in the journal (orphans, replayed) until the peer
    // confirms their numbers, which takes a transport that carries data
    // again: completing everything did not wait for one.
    sim.run_until_cond(Duration::from_secs(10), |sim| {
        sim.node(INITIATOR)
            .session_info(s)
            .is_some_and(|c| c.pending_ops == 0)
    });
    // A transport may still be mid-resync (a lost packet waits for the RC
    // retransmission timer); the session must get back to Established.
    sim.run_until_cond(Duration::from_secs(10), |sim| {
        sim.node(INITIATOR).state(s) == Some(State::Established)
    });
    sim.run_for(Duration::from_millis(5));
    w.collect(&mut sim);
    w.trace_ends(&mut sim);
    let mut v = w.check_survived(&mut sim);
    // Memory bounded: the journal's payloads never exceed the messages a
    // round can submit (fewer than 25, each at most MAX_MESSAGE bytes)
    // times the rounds.
    if max_journal > 25 * MAX_MESSAGE as usize * rounds {
        v.push(format!("journal grew to {max_journal} bytes"));
    }
    if sim
        .node(INITIATOR)
        .session_info(s)
        .is_some_and(|c| c.pending_ops != 0)
    {
        v.push("journal not empty at the end".into());
    }
    let read = w
        .target
        .and_then(|t| sim.node(TARGET).counters(t))
        .map_or((0, 0), |c| (c.fetched, c.fetches_rewound));
    let r = w.close_and_check(&mut sim, v);
    let mut cov = w.coverage();
    (cov.fetched, cov.fetches_rewound) = read;
    let mut c = COVERAGE.lock().expect("coverage");
    *c.get_or_insert_with(Coverage::default) += cov;
    r
}

/// What the seeds exercised, summed.
static COVERAGE: Mutex<Option<Coverage>> = Mutex::new(None);

/// The fault kind `RELINK_SIM_FAULT` forces, if any.
fn forced_fault() -> Option<u32> {
    std::env::var("RELINK_SIM_FAULT")
        .ok()
        .map(|k| k.parse().expect("RELINK_SIM_FAULT must be a number"))
}

/// Scatter/gather on WRITEs and READs; and, with a `posting` key, the
/// target takes its deliveries through posted receives.
fn every_kind(posting: Option<u64>, sim: &mut Sim, w: &mut Workload) {
    w.scatter_gather();
    if let Some(key) = posting {
        w.post_receives(sim.node(TARGET), key);
    }
}

#[test]
fn random_fault_schedules() {
    relink_sim::run_seeds("RELINK_SIM_SEEDS", 2000, run_seed);
    let c = COVERAGE.lock().expect("coverage").unwrap_or_default();
    eprintln!("{c:?}");
    // Over a thousand seeds or more, every path ran.
    if forced_fault().is_none() && c.workloads >= 1000 {
        assert!(
            c.unexercised().is_empty(),
            "never exercised: {:?}",
            c.unexercised()
        );
    }
}

#[test]
fn a_seed_replays_identically() {
    let digest = |seed| {
        let mut sim = Sim::new(seed);
        let s = sim
            .open_session(
                7471,
                options(INITIATOR, Policy::default()),
                options(TARGET, Policy::default()),
            )
            .unwrap();
        let mut w = Workload::new("A", seed, WINDOW_A, sim.node(INITIATOR), s, None);
        for _ in 0..50 {
            w.send(sim.node(INITIATOR));
        }
        sim.fabric()
            .inject(Fault::Reset(sim.host(TARGET).index(), "soft0".into()));
        sim.run_for(Duration::from_millis(20));
        (sim.fabric().digest(), sim.now())
    };
    assert_eq!(digest(77), digest(77));
}
