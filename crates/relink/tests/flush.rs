//! `OpKind::Flush`, as an application relies on it: it completes after
//! every operation submitted before it, and the operations submitted after
//! it complete after it (a fence) — also when a device reset falls between.

use std::time::Duration;

use relink::{
    Access, BufferToken, Completion, LocalRange, OpClass, OpKind, RegionId, RegionOptions,
    SessionHandle, SessionOptions,
};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

const REGION: RegionId = RegionId(1);

fn opts() -> SessionOptions {
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    SessionOptions::builder()
        .regions(vec![RegionOptions::new(REGION, 1 << 16, rw).advertise(true)])
        .build()
        .expect("valid options")
}

fn collect(sim: &mut Sim, s: SessionHandle, n: usize) -> Vec<Completion> {
    let mut done = Vec::new();
    assert!(
        sim.run_until_cond(Duration::from_secs(20), |sim| {
            while let Some(c) = sim.node(INITIATOR).poll_completion(s) {
                done.push(c);
            }
            done.len() >= n
        }),
        "{} of {n} completions",
        done.len()
    );
    done
}

/// Submit a burst, a flush, another burst; optionally reset a device
/// right after. Returns the completions, in the order they came.
fn run(seed: u64, reset: Option<usize>) -> (Vec<Completion>, relink::OpId) {
    let (mut sim, s, _t) = Sim::with_session_options(seed, opts(), opts());
    let local = |i: u64| LocalRange {
        region: REGION,
        offset: i * 1024,
        len: 1024,
    };
    let remote = |i: u64| BufferToken {
        region: REGION,
        offset: i * 1024,
    };
    let node = sim.node(INITIATOR);
    for i in 0..16 {
        node.write(s, local(i), remote(i)).expect("write");
        node.send(s, &[i as u8; 100]).expect("send");
    }
    let flush = node
        .submit_with(s, OpKind::Flush, 4242)
        .expect("flush submitted");
    for i in 16..32 {
        node.read(s, local(i), remote(i - 16)).expect("read");
        node.send(s, &[i as u8; 100]).expect("send");
    }
    if let Some(host) = reset {
        sim.run_for(Duration::from_micros(5));
        let index = sim.host(host).index();
        sim.fabric().inject(Fault::Reset(index, "soft0".into()));
    }
    let done = collect(&mut sim, s, 65);
    sim.run_for(Duration::from_millis(50));
    let counters = sim.node(INITIATOR).counters(s).expect("session");
    assert_eq!(
        counters.losses > 0 && counters.replayed > 0,
        reset.is_some(),
        "a loss with operations in flight exactly when a device was reset: {counters:?}"
    );
    (done, flush)
}

fn check(done: &[Completion], flush: relink::OpId) {
    assert_eq!(done.len(), 65);
    for c in done {
        assert!(c.outcome.is_success(), "{c:?}");
    }
    let at = done.iter().position(|c| c.op == flush).expect("flushed");
    let f = &done[at];
    assert_eq!((f.class, f.context, f.len), (OpClass::Flush, 4242, 0));
    assert!(
        done[..at].iter().all(|c| c.op < flush) && at == 32,
        "every operation before the flush completed before it"
    );
    assert!(
        done[at + 1..].iter().all(|c| c.op > flush),
        "every operation after the flush completed after it"
    );
}

#[test]
fn a_flush_completes_between_the_operations_before_and_after_it() {
    let (done, flush) = run(41, None);
    check(&done, flush);
}

#[test]
fn a_flush_holds_across_device_resets() {
    for (seed, host) in [(42, INITIATOR), (43, TARGET)] {
        let (done, flush) = run(seed, Some(host));
        check(&done, flush);
    }
}
