//! Workloads one after another on the same session
//! ([`Workload::continuing`]), as `relink soak` runs them: each checked
//! whole once everything it submitted completed, then dropped, the
//! target's data region zeroed for the next. A workload that does not
//! say where the session's sequence is finds every delivery numbered
//! after the earlier workloads' and reports it.

use std::time::Duration;

use relink::Policy;
use relink_sim::workload::{self, Workload, WINDOW_A};
use relink_sim::{INITIATOR, TARGET};

/// Run `w` for a while, stop it and let everything complete.
fn run(sim: &mut relink_sim::Sim, w: &mut Workload) {
    for _ in 0..20 {
        w.top_up(sim.node(INITIATOR));
        sim.run_for(Duration::from_micros(200));
        w.collect(sim);
    }
    w.stopped = true;
    sim.run_for(Duration::from_millis(5));
    w.collect(sim);
    assert_eq!(w.pending(), 0);
}

/// Zero the target's data region (what a fresh workload expects).
fn zero(sim: &mut relink_sim::Sim, w: &Workload) {
    let m = sim
        .node(TARGET)
        .region(w.target_session(), workload::TARGET_DATA)
        .unwrap();
    m.write(0, &vec![0; m.len()]).unwrap();
}

#[test]
fn workloads_continuing_a_session_check_clean() {
    let (mut sim, mut w) = workload::start(11, Policy::default(), 7471).unwrap();
    let (s, t) = (w.session, w.target_session());
    for epoch in 0..4u64 {
        run(&mut sim, &mut w);
        assert!(w.succeeded() > 0);
        let v = w.check_survived(&mut sim);
        assert!(v.is_empty(), "epoch {epoch}: {v:?}");
        zero(&mut sim, &w);
        let delivered = sim.node(TARGET).session_info(t).unwrap().last_delivered;
        w = Workload::new("A", 100 + epoch, WINDOW_A, sim.node(INITIATOR), s, Some(t))
            .continuing(delivered);
    }
}

#[test]
fn a_second_workload_not_continuing_sees_its_deliveries_misnumbered() {
    let (mut sim, mut w) = workload::start(12, Policy::default(), 7471).unwrap();
    let (s, t) = (w.session, w.target_session());
    run(&mut sim, &mut w);
    assert!(w.check_survived(&mut sim).is_empty());
    zero(&mut sim, &w);
    let mut w = Workload::new("A", 13, WINDOW_A, sim.node(INITIATOR), s, Some(t));
    run(&mut sim, &mut w);
    let v = w.check_survived(&mut sim);
    assert!(
        v.iter().any(|x| x.contains("delivered as")),
        "expected misnumbered deliveries: {v:?}"
    );
}
