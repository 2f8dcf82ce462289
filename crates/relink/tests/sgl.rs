//! Scatter/gather lists on one-sided operations, as an application relies
//! on them: a WRITE gathers its ranges in order into the peer's memory, a
//! READ scatters the peer's bytes over its ranges in order — also when a
//! device reset replays them.

use std::time::Duration;

use relink::{
    Access, BufferToken, LocalRange, LocalSgl, RegionId, RegionOptions, SessionHandle,
    SessionOptions,
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

fn r(offset: u64, len: u32) -> LocalRange {
    LocalRange {
        region: REGION,
        offset,
        len,
    }
}

fn pattern(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ tag).collect()
}

fn all_succeed(sim: &mut Sim, s: SessionHandle, n: usize) {
    let mut done = Vec::new();
    assert!(sim.run_until_cond(Duration::from_secs(20), |sim| {
        while let Some(c) = sim.node(INITIATOR).poll_completion(s) {
            done.push(c);
        }
        done.len() >= n
    }));
    for c in &done {
        assert!(c.outcome.is_success(), "{c:?}");
    }
}

#[test]
fn writes_gather_and_reads_scatter_in_order_across_resets() {
    for (seed, reset) in [(81, None), (82, Some(TARGET)), (83, Some(INITIATOR))] {
        let (mut sim, s, t) = Sim::with_session_options(seed, opts(), opts());
        let mine = sim.node(INITIATOR).region(s, REGION).expect("region");
        let theirs = sim.node(TARGET).region(t, REGION).expect("region");
        let (a, b, c) = (pattern(1, 100), pattern(2, 3000), pattern(3, 1));
        mine.write(0, &a).expect("in bounds");
        mine.write(10_000, &b).expect("in bounds");
        mine.write(20_000, &c).expect("in bounds");
        let gather = LocalSgl::new([r(10_000, 3000), r(0, 100), r(20_000, 1)]).expect("sgl");
        let token = BufferToken {
            region: REGION,
            offset: 40_000,
        };
        sim.node(INITIATOR).write(s, gather, token).expect("write");
        // Read it back, scattered over two ranges.
        let scatter = LocalSgl::new([r(30_000, 1000), r(50_000, 2101)]).expect("sgl");
        sim.node(INITIATOR).read(s, scatter, token).expect("read");
        if let Some(host) = reset {
            sim.run_for(Duration::from_micros(5));
            let index = sim.host(host).index();
            sim.fabric().inject(Fault::Reset(index, "soft0".into()));
        }
        all_succeed(&mut sim, s, 2);
        let whole = [b.as_slice(), &a, &c].concat();
        assert_eq!(
            theirs.read_vec(40_000, whole.len()).expect("in bounds"),
            whole,
            "seed {seed}: the WRITE gathered its ranges in order"
        );
        let mut back = mine.read_vec(30_000, 1000).expect("in bounds");
        back.extend(mine.read_vec(50_000, 2101).expect("in bounds"));
        assert_eq!(back, whole, "seed {seed}: the READ scattered in order");
        if reset.is_some() {
            sim.run_for(Duration::from_millis(50));
            let counters = sim.node(INITIATOR).counters(s).expect("session");
            assert!(counters.losses > 0, "seed {seed}: {counters:?}");
        }
    }
}
