//! [`in_process`]: the scale run on the in-process soft fabric.

use std::time::{Duration, Instant};

use relink::{Output, Path, SessionHandle, State};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

use super::{live, scale_options, secs, IdleHeap, ScaleRun, Tally, MESSAGE_LEN};
use crate::loops::process_cpu_time;
use crate::memory::HeapCounter;
use crate::recovery::Stepper;
use crate::session::{has_stamp, stamp_bytes, PORT};

/// Sessions connected at a time during the setup.
const BATCH: usize = 256;
/// Virtual time the run may take at most (a hang is an error, not a
/// figure).
const LIMIT: Duration = Duration::from_secs(60);

/// Take every output of both nodes: the initiator's events and
/// completions into `tally` (with the wall-clock time of each `Resumed`
/// in `resumed_at`), the target's deliveries (each checked) into
/// `delivered`.
fn drain(sim: &mut Sim, tally: &mut Tally, resumed_at: &mut Vec<Instant>, delivered: &mut usize) {
    let ini = sim.node(INITIATOR);
    while let Some(out) = ini.poll_output() {
        match out {
            Output::Event { event, .. } => {
                let before = tally.resumed;
                tally.event(&event);
                if tally.resumed > before {
                    resumed_at.push(Instant::now());
                }
            }
            Output::Completion { completion, .. } => {
                assert!(
                    completion.outcome.is_success(),
                    "a message failed: {completion:?}"
                );
                tally.completed += 1;
            }
            other => panic!("unexpected output of the initiator: {other:?}"),
        }
    }
    let tgt = sim.node(TARGET);
    while let Some(out) = tgt.poll_output() {
        if let Output::Delivery { payload, .. } = out {
            assert!(
                payload.len() == MESSAGE_LEN && has_stamp(&payload, 0),
                "a damaged message"
            );
            *delivered += 1;
        }
    }
}

/// `n` sessions between the two nodes of a fresh [`Sim`] seeded with
/// `seed`, connected 256 at a time; once all are established and
/// idle, the heap they hold (if `heap` counts it); then one reset of the
/// initiator's device (`Fault::Reset`), the world driven by a [`Stepper`]
/// of `quantum`, timed until every session sent `Resumed`; then one
/// 64-byte message on each, timed (from the reset) until every one is
/// delivered (and checked) and confirmed.
///
/// # Panics
/// If the sessions cannot be set up, one ends, a message fails or is
/// damaged, or the run takes more than 60 s of virtual time.
pub fn in_process(
    n: usize,
    seed: u64,
    quantum: Duration,
    heap: Option<&dyn HeapCounter>,
) -> ScaleRun {
    let mut sim = Sim::new(seed);
    let addr = sim.target_addr(PORT);
    sim.node(TARGET)
        .listen(addr, scale_options())
        .expect("listen");
    // Let the listener's objects settle before the heap is read.
    sim.settle();
    let heap0 = live(heap);
    let t_setup = Instant::now();
    let mut sessions: Vec<SessionHandle> = Vec::with_capacity(n);
    let mut accepted = 0;
    while sessions.len() < n {
        let batch: Vec<SessionHandle> = (0..BATCH.min(n - sessions.len()))
            .map(|_| {
                sim.node(INITIATOR)
                    .connect(
                        vec![Path {
                            local: None,
                            peer: addr,
                        }],
                        scale_options(),
                    )
                    .expect("connect")
            })
            .collect();
        let up = Stepper::new(Duration::from_micros(1)).until(&mut sim, LIMIT, |sim| {
            while sim.node(TARGET).accept().is_some() {
                accepted += 1;
            }
            let node = sim.node(INITIATOR);
            batch
                .iter()
                .all(|s| node.state(*s) == Some(State::Established))
        });
        assert!(up, "a batch of sessions did not come up");
        sessions.extend(batch);
    }
    Stepper::new(Duration::ZERO).until(&mut sim, Duration::from_millis(2), |_| false);
    while sim.node(TARGET).accept().is_some() {
        accepted += 1;
    }
    assert_eq!(accepted, n, "every session accepted once");
    let setup_s = secs(t_setup.elapsed());
    for i in [INITIATOR, TARGET] {
        while sim.node(i).poll_output().is_some() {}
    }
    let idle = heap.map(|_| {
        let registered = sim.node(INITIATOR).footprint().session_memory_bytes
            + sim.node(TARGET).footprint().session_memory_bytes;
        IdleHeap::of(n, live(heap) - heap0, registered)
    });
    let attempts = |sim: &mut Sim| -> u64 {
        let node = sim.node(INITIATOR);
        sessions
            .iter()
            .map(|s| node.counters(*s).expect("session").attempts)
            .sum()
    };
    let attempts0 = attempts(&mut sim);

    let (t0v, cpu0, t0) = (sim.now(), process_cpu_time(), Instant::now());
    let h = sim.host(INITIATOR).index();
    sim.fabric().inject(Fault::Reset(h, "soft0".into()));
    let mut tally = Tally::default();
    let mut resumed_at = Vec::with_capacity(n);
    let mut delivered = 0;
    let mut stepper = Stepper::new(quantum);
    let ok = stepper.until(&mut sim, LIMIT, |sim| {
        drain(sim, &mut tally, &mut resumed_at, &mut delivered);
        tally.resumed >= n
    });
    assert!(ok, "{} of {n} sessions did not resume", n - tally.resumed);
    let resumed = t0.elapsed();
    let cpu = process_cpu_time();
    let resumed_virt = sim.now().saturating_since(t0v);
    let mut payload = [0u8; MESSAGE_LEN];
    stamp_bytes(&mut payload, 0);
    for s in &sessions {
        sim.node(INITIATOR).send(*s, &payload).expect("send");
    }
    let ok = stepper.until(&mut sim, LIMIT, |sim| {
        drain(sim, &mut tally, &mut resumed_at, &mut delivered);
        delivered >= n && tally.completed >= n
    });
    assert!(
        ok,
        "{delivered} of {n} messages delivered, {} confirmed",
        tally.completed
    );
    let messages = t0.elapsed();
    assert_eq!(tally.resumed, n, "each session resumed once");
    assert_eq!(delivered, n, "each message delivered once");
    ScaleRun {
        fabric: "in-process".into(),
        sessions: n,
        driver: if quantum.is_zero() {
            "event".into()
        } else {
            format!("{} us", quantum.as_micros())
        },
        setup_s,
        resumed_s: secs(resumed),
        half_resumed_s: secs(resumed_at[(n - 1) / 2].duration_since(t0)),
        messages_s: secs(messages),
        sessions_per_s: n as f64 / secs(resumed),
        resumed_cpu_s: cpu0.zip(cpu).map(|(a, b)| secs(b.saturating_sub(a))),
        resumed_virt_ms: Some(secs(resumed_virt) * 1e3),
        attempts: attempts(&mut sim) - attempts0,
        heap: idle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_sessions_resume_and_carry_a_message() {
        for quantum in [Duration::ZERO, Duration::from_micros(1)] {
            let r = in_process(5, 31, quantum, None);
            assert_eq!(r.sessions, 5);
            assert!(r.attempts >= 5, "{r:?}");
            assert!(r.half_resumed_s <= r.resumed_s && r.resumed_s <= r.messages_s);
            assert!(r.heap.is_none());
        }
    }
}
