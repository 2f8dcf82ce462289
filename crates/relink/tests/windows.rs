//! A region exposed through a type 2 memory window: the peer's WRITEs and
//! READs reach it by the same tokens as through an MR, before and after a
//! device reset and a replacement; every transport has its own window,
//! the old ones are freed; bad window options get typed errors.

use std::time::Duration;

use relink::{
    Access, BufferToken, ConnectError, LocalRange, OpId, OptionsError, Path, RegionId,
    RegionOptions, SessionHandle, SessionOptions, State,
};
use relink_fabric::Provider;
use relink_sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

/// The target's region, exposed through a window.
const EXPOSED: RegionId = RegionId(7);
/// The initiator's source and landing region.
const LOCAL: RegionId = RegionId(1);

fn exposed() -> RegionOptions {
    RegionOptions::new(
        EXPOSED,
        8192,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    )
    .advertise(true)
    .window(true)
}

fn with_region(region: RegionOptions) -> SessionOptions {
    SessionOptions::builder().region(region).build().unwrap()
}

fn token(offset: u64) -> BufferToken {
    BufferToken {
        region: EXPOSED,
        offset,
    }
}

fn local(offset: u64, len: u32) -> LocalRange {
    LocalRange {
        region: LOCAL,
        offset,
        len,
    }
}

/// Run until every operation in `ops` of session `s` completed
/// successfully.
fn complete(sim: &mut Sim, s: SessionHandle, ops: &[OpId]) {
    let mut done = Vec::new();
    let ok = sim.run_until_cond(Duration::from_secs(10), |sim| {
        while let Some(c) = sim.node(INITIATOR).poll_completion(s) {
            assert!(c.outcome.is_success(), "{c:?}");
            done.push(c.op);
        }
        while sim.node(INITIATOR).poll_event(s).is_some() {}
        done.len() == ops.len()
    });
    assert!(ok, "operations not complete: {done:?} of {ops:?}");
}

/// WRITE `record` at `at` of the window through its token and READ it
/// back; the target's memory holds it.
fn write_and_read(sim: &mut Sim, s: SessionHandle, t: SessionHandle, at: u64, record: &[u8]) {
    let len = record.len() as u32;
    let mine = sim.node(INITIATOR).region(s, LOCAL).unwrap();
    mine.write(0, record).unwrap();
    let w = sim
        .node(INITIATOR)
        .write(s, local(0, len), token(at))
        .unwrap();
    let r = sim
        .node(INITIATOR)
        .read(s, local(4096, len), token(at))
        .unwrap();
    complete(sim, s, &[w, r]);
    let theirs = sim.node(TARGET).region(t, EXPOSED).unwrap();
    assert_eq!(theirs.read_vec(at as usize, record.len()).unwrap(), record);
    assert_eq!(mine.read_vec(4096, record.len()).unwrap(), record);
}

/// Windows alive on host `h` (on every device, live or gone).
fn windows(sim: &Sim, h: usize) -> usize {
    sim.host(h).object_counts().mws
}

#[test]
fn a_window_takes_writes_and_reads_by_the_same_token_across_a_reset_and_a_replacement() {
    let mut sim = Sim::new(51);
    let initiator = with_region(RegionOptions::new(LOCAL, 8192, Access::LOCAL_WRITE));
    let s = sim
        .open_session(7471, initiator, with_region(exposed()))
        .unwrap();
    sim.run_for(Duration::from_millis(5));
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Established));
    let t = sim.node(TARGET).accept().expect("accepted").session;
    assert_eq!(windows(&sim, TARGET), 1, "one window for the one transport");
    assert_eq!(windows(&sim, INITIATOR), 0, "the initiator exposes nothing");

    // The region's MR grants no remote right (local write and MW_BIND
    // only): a WRITE or READ that works went through the window.
    write_and_read(&mut sim, s, t, 100, b"through the window, first");

    let th = sim.host(TARGET).index();
    let faults = [
        Fault::Reset(th, "soft0".into()),
        Fault::Replace(th, "soft0".into(), None),
    ];
    for (round, fault) in faults.into_iter().enumerate() {
        let adverts = sim.node(TARGET).counters(t).unwrap().adverts_sent;
        sim.fabric().inject(fault.clone());
        let back = sim.run_until_cond(Duration::from_secs(10), |sim| {
            while sim.node(TARGET).poll_event(t).is_some() {}
            sim.node(INITIATOR).counters(s).unwrap().resumes == round as u64 + 1
                && sim.node(TARGET).state(t) == Some(State::Established)
        });
        assert!(back, "{fault:?}: not resumed");
        assert!(
            sim.node(TARGET).counters(t).unwrap().adverts_sent > adverts,
            "{fault:?}: the new window is advertised"
        );
        assert_eq!(
            windows(&sim, TARGET),
            1,
            "{fault:?}: a new window for the new transport, the old one freed"
        );
        let record = format!("through the window, after {fault:?}");
        write_and_read(&mut sim, s, t, 200 + 512 * round as u64, record.as_bytes());
    }

    // A close invalidates and frees the window.
    sim.node(INITIATOR).close(s).unwrap();
    sim.run_for(Duration::from_secs(2));
    assert_eq!(sim.node(TARGET).state(t), Some(State::Closed));
    assert_eq!(windows(&sim, TARGET), 0);
}

#[test]
fn a_window_on_a_shared_receive_session_survives_a_reset() {
    let mut sim = Sim::new(52);
    let q = sim
        .node(TARGET)
        .create_shared_receive(relink::SharedReceiveOptions::default())
        .unwrap();
    let target = SessionOptions::builder()
        .region(exposed())
        .shared_receive(q)
        .build()
        .unwrap();
    let initiator = with_region(RegionOptions::new(LOCAL, 8192, Access::LOCAL_WRITE));
    let s = sim.open_session(7471, initiator, target).unwrap();
    sim.run_for(Duration::from_millis(5));
    let t = sim.node(TARGET).accept().expect("accepted").session;
    write_and_read(&mut sim, s, t, 0, b"before");
    let counts = sim.host(TARGET).object_counts();
    assert_eq!((counts.mws, counts.srqs), (1, 1));
    let ih = sim.host(INITIATOR).index();
    sim.fabric().inject(Fault::Reset(ih, "soft0".into()));
    let back = sim.run_until_cond(Duration::from_secs(10), |sim| {
        while sim.node(TARGET).poll_event(t).is_some() {}
        sim.node(INITIATOR).counters(s).unwrap().resumes == 1
    });
    assert!(back);
    write_and_read(&mut sim, s, t, 64, b"after the peer's reset");
    let counts = sim.host(TARGET).object_counts();
    assert_eq!((counts.mws, counts.srqs), (1, 1));
}

#[test]
fn bad_window_options_are_refused_by_name() {
    let mut sim = Sim::new(53);
    let paths = vec![Path {
        local: None,
        peer: sim.target_addr(7471),
    }];
    let bad = |region: RegionOptions| {
        let mut o = SessionOptions::default();
        o.regions = vec![region];
        o
    };
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    // A window over a region the peer is not told of.
    let hidden = RegionOptions::new(EXPOSED, 64, rw).window(true);
    match sim.node(INITIATOR).connect(paths.clone(), bad(hidden)) {
        Err(ConnectError::Options(OptionsError::BadRegion { id, reason })) => {
            assert_eq!(id, EXPOSED);
            assert!(reason.contains("advertise"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // A window that grants nothing remote.
    let local_only = RegionOptions::new(EXPOSED, 64, Access::LOCAL_WRITE)
        .advertise(true)
        .window(true);
    match sim.node(INITIATOR).connect(paths, bad(local_only)) {
        Err(ConnectError::Options(OptionsError::BadRegion { id, reason })) => {
            assert_eq!(id, EXPOSED);
            assert!(reason.contains("remote"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(SessionOptions::builder()
        .region(RegionOptions::new(EXPOSED, 64, rw).window(true))
        .build()
        .is_err());
}
