//! Regions of the application's own memory: the peer's RDMA WRITEs land in
//! it and its READs read it, the application reading and writing the
//! bytes directly; one memory shared by two sessions takes writes through
//! both, across device resets, with the same tokens.

use std::time::Duration;

use relink::{
    Access, BufferToken, ConnectError, ListenError, LocalRange, Memory, OpId, OptionsError,
    RegionId, RegionOptions, SessionEvent, SessionHandle, SessionOptions, State,
};
use relink_sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

/// The target's region, open to the peer's WRITEs and READs.
const SHARED: RegionId = RegionId(7);
/// The initiator's source and landing region.
const LOCAL: RegionId = RegionId(1);

fn remote_rw() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ
}

/// Options with one region, not checked (`connect` and `listen` check).
fn opts(region: RegionOptions) -> SessionOptions {
    let mut o = SessionOptions::default();
    o.regions = vec![region];
    o
}

fn token(offset: u64) -> BufferToken {
    BufferToken {
        region: SHARED,
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

/// Run until every operation in `ops` of session `s` completed; each must
/// succeed.
fn complete(sim: &mut Sim, s: SessionHandle, ops: &[OpId]) {
    let mut done = Vec::new();
    let ok = sim.run_until_cond(Duration::from_secs(5), |sim| {
        while let Some(c) = sim.node(INITIATOR).poll_completion(s) {
            assert!(c.outcome.is_success(), "{c:?}");
            done.push(c.op);
        }
        done.len() == ops.len()
    });
    assert!(ok, "operations of {s:?} not complete: {done:?} of {ops:?}");
    done.sort();
    let mut want = ops.to_vec();
    want.sort();
    assert_eq!(done, want);
}

#[test]
fn the_peer_writes_and_reads_application_memory() {
    let mut sim = Sim::new(31);
    // Both applications own their region's memory.
    let theirs = sim.node(TARGET).alloc_memory(4096).unwrap();
    let mine = sim.node(INITIATOR).alloc_memory(4096).unwrap();
    theirs.write(2000, b"the target's own bytes").unwrap();
    mine.write(0, b"written by the initiator").unwrap();
    let s = sim
        .open_session(
            7471,
            opts(RegionOptions::with_memory(
                LOCAL,
                mine.clone(),
                Access::LOCAL_WRITE,
            )),
            opts(RegionOptions::with_memory(SHARED, theirs.clone(), remote_rw()).advertise(true)),
        )
        .unwrap();
    sim.run_for(Duration::from_millis(5));
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Established));
    let t = sim.node(TARGET).accept().expect("accepted").session;
    // The node hands back the application's own handle.
    assert!(sim.node(TARGET).region(t, SHARED).unwrap().same(&theirs));
    assert!(sim.node(INITIATOR).region(s, LOCAL).unwrap().same(&mine));

    let w = sim
        .node(INITIATOR)
        .write(s, local(0, 24), token(100))
        .unwrap();
    let r = sim
        .node(INITIATOR)
        .read(s, local(1000, 22), token(2000))
        .unwrap();
    complete(&mut sim, s, &[w, r]);
    assert_eq!(
        theirs.read_vec(100, 24).unwrap(),
        b"written by the initiator"
    );
    assert_eq!(mine.read_vec(1000, 22).unwrap(), b"the target's own bytes");
}

#[test]
fn one_memory_shared_by_two_sessions_takes_writes_through_both_across_resets() {
    let mut sim = Sim::new(32);
    // The target's application shares one memory among every session its
    // listener accepts; the initiator's shares its source among its two
    // sessions.
    let shared = sim.node(TARGET).alloc_memory(8192).unwrap();
    let source = sim.node(INITIATOR).alloc_memory(4096).unwrap();
    let addr = sim.target_addr(7471);
    sim.node(TARGET)
        .listen(
            addr,
            opts(RegionOptions::with_memory(SHARED, shared.clone(), remote_rw()).advertise(true)),
        )
        .unwrap();
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let o = opts(RegionOptions::with_memory(
            LOCAL,
            source.clone(),
            Access::LOCAL_WRITE,
        ));
        sessions.push(
            sim.node(INITIATOR)
                .connect(
                    vec![relink::Path {
                        local: None,
                        peer: addr,
                    }],
                    o,
                )
                .unwrap(),
        );
    }
    sim.run_for(Duration::from_millis(10));
    let targets: Vec<SessionHandle> =
        std::iter::from_fn(|| sim.node(TARGET).accept().map(|a| a.session)).collect();
    assert_eq!(targets.len(), 2);
    for &t in &targets {
        assert!(sim.node(TARGET).region(t, SHARED).unwrap().same(&shared));
    }
    // The application drops nothing it handed out: each session keeps its
    // own clone (checked below, after the application dropped its source).

    // Session i writes its record at 4096 * i of the one memory, from its
    // slot 64 * round of the one source.
    let write_all = |sim: &mut Sim, round: u64, source: &Memory| {
        for (i, &s) in sessions.iter().enumerate() {
            let record = format!("round {round} via sender {i}");
            let at = 64 * (2 * round + i as u64);
            source.write(at as usize, record.as_bytes()).unwrap();
            let len = record.len() as u32;
            let op = sim
                .node(INITIATOR)
                .write(s, local(at, len), token(4096 * i as u64 + 64 * round))
                .unwrap();
            complete(sim, s, &[op]);
        }
    };
    let check_all = |round: u64| {
        for i in 0..2u64 {
            let record = format!("round {round} via sender {i}");
            let got = shared
                .read_vec((4096 * i + 64 * round) as usize, record.len())
                .unwrap();
            assert_eq!(got, record.as_bytes(), "round {round}, session {i}");
        }
    };
    write_all(&mut sim, 0, &source);
    check_all(0);
    let adverts = |sim: &mut Sim| -> Vec<u64> {
        targets
            .iter()
            .map(|&t| sim.node(TARGET).counters(t).unwrap().adverts_sent)
            .collect()
    };
    let mut adverts0 = adverts(&mut sim);

    // Each side's device resets in turn: every session re-registers the
    // memory and advertises a new key; the same tokens still land in it.
    for (round, host) in [(1, TARGET), (2, INITIATOR)] {
        sim.fabric()
            .inject(Fault::Reset(sim.host(host).index(), "soft0".into()));
        let back = sim.run_until_cond(Duration::from_secs(5), |sim| {
            sessions
                .iter()
                .all(|&s| sim.node(INITIATOR).counters(s).unwrap().resumes == round)
                && targets
                    .iter()
                    .all(|&t| sim.node(TARGET).state(t) == Some(State::Established))
        });
        assert!(back, "round {round}: not resumed");
        let now = adverts(&mut sim);
        assert!(
            now.iter().zip(&adverts0).all(|(n, n0)| n > n0),
            "every target session advertised its registration again: {now:?} after {adverts0:?}"
        );
        adverts0 = now;
        write_all(&mut sim, round, &source);
        for r in 0..=round {
            check_all(r);
        }
    }
    for &s in &sessions {
        assert!(std::iter::from_fn(|| sim.node(INITIATOR).poll_event(s))
            .any(|e| matches!(e, SessionEvent::Resumed { .. })));
    }

    // The sessions keep the memory alive without the application's handle.
    drop(source);
    let kept = sim.node(INITIATOR).region(sessions[0], LOCAL).unwrap();
    assert_eq!(kept.read_vec(64, 20).unwrap(), b"round 0 via sender 1");
}

/// A region that cannot be registered is refused when the session is made,
/// by name, instead of failing every connection attempt.
#[test]
fn a_region_that_cannot_be_registered_is_refused_at_once() {
    let mut sim = Sim::new(33);
    let addr = sim.target_addr(7471);
    let small = sim.node(TARGET).alloc_memory(16).unwrap();
    let mut long = RegionOptions::with_memory(SHARED, small, remote_rw());
    long.len = 17;
    let mut twice = opts(RegionOptions::new(LOCAL, 64, Access::LOCAL_WRITE));
    twice
        .regions
        .push(RegionOptions::new(LOCAL, 64, Access::LOCAL_WRITE));
    let bad = [
        (opts(long), "longer than its memory"),
        (opts(RegionOptions::new(SHARED, 0, remote_rw())), "no bytes"),
        (
            opts(RegionOptions::new(SHARED, 64, Access::REMOTE_WRITE)),
            "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE",
        ),
        (twice, "two regions of this id"),
    ];
    for (o, why) in bad {
        let path = vec![relink::Path {
            local: None,
            peer: addr,
        }];
        let listened = sim.node(TARGET).listen(addr, o.clone());
        let connected = sim.node(INITIATOR).connect(path, o);
        for r in [
            listened.map(|_| ()).map_err(|e| match e {
                ListenError::Options(o) => o,
                other => panic!("{why}: {other:?}"),
            }),
            connected.map(|_| ()).map_err(|e| match e {
                ConnectError::Options(o) => o,
                other => panic!("{why}: {other:?}"),
            }),
        ] {
            match r {
                Err(OptionsError::BadRegion { reason, .. }) => assert_eq!(reason, why),
                Err(OptionsError::EmptyRegion(_)) => assert_eq!(why, "no bytes"),
                Err(OptionsError::DuplicateRegion(_)) => assert_eq!(why, "two regions of this id"),
                other => panic!("{why}: {other:?}"),
            }
        }
    }
    assert_eq!(sim.node(INITIATOR).footprint().sessions, 0);
    assert_eq!(sim.node(TARGET).footprint().listeners, 0);
}
