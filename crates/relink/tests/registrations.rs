//! Node-wide registrations, as an application relies on them:
//!
//! - memory registered after the session is up is reached by the peer
//!   through a token naming the registration's id (the id travels in a
//!   message; the advertisement travels before it), and used as local
//!   memory by the node's own operations;
//! - the id stays valid across resets of either side's device (the memory
//!   is registered and advertised again), and for sessions made later;
//! - deregistration is refused while an operation names the registration,
//!   and afterwards the peer is refused by the device, the node's own
//!   submits by the session.

use std::time::Duration;

use relink::{
    Access, BufferToken, LocalRange, OpError, Outcome, Path, RegionId, RegisterError,
    SessionOptions, State, SubmitError, WcStatus, REGISTERED_BASE,
};
use relink_sim::sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

const ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);

fn pattern(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31) ^ tag).collect()
}

/// Run until the initiator's session `s` has a completion; return it.
fn completion(sim: &mut Sim, s: relink::SessionHandle) -> relink::Completion {
    let mut got = None;
    assert!(
        sim.run_until_cond(Duration::from_secs(5), |sim| {
            got = sim.node(INITIATOR).poll_completion(s);
            got.is_some()
        }),
        "no completion"
    );
    got.expect("checked")
}

/// Reset `host`'s device and run until both sessions are established
/// again.
fn reset(sim: &mut Sim, host: usize, s: relink::SessionHandle, t: relink::SessionHandle) {
    let index = sim.host(host).index();
    sim.fabric().inject(Fault::Reset(index, "soft0".into()));
    sim.run_for(Duration::from_millis(50));
    assert!(
        sim.run_until_cond(Duration::from_secs(10), |sim| {
            sim.node(INITIATOR).state(s) == Some(State::Established)
                && sim.node(TARGET).state(t) == Some(State::Established)
        }),
        "the session did not come back"
    );
}

#[test]
fn a_registration_made_while_connected_is_reached_by_the_peer_across_resets() {
    let (mut sim, s, t) = Sim::with_session(21);
    // The target registers memory while the session is up, and tells the
    // peer its id in a message.
    let target_mem = sim.node(TARGET).alloc_memory(8192).expect("memory");
    let target_id = sim
        .node(TARGET)
        .register(target_mem.clone(), ALL)
        .expect("registered");
    assert!(target_id.0 >= REGISTERED_BASE);
    sim.node(TARGET)
        .send(t, &target_id.0.to_le_bytes())
        .expect("sent");
    let mut told = None;
    assert!(sim.run_until_cond(Duration::from_secs(1), |sim| {
        told = sim.node(INITIATOR).poll_delivery(s);
        told.is_some()
    }));
    let id = RegionId(u32::from_le_bytes(
        told.expect("delivered").1.try_into().expect("4 bytes"),
    ));
    assert_eq!(id, target_id);
    // The initiator registers its own memory for its local ranges.
    let local_mem = sim.node(INITIATOR).alloc_memory(8192).expect("memory");
    let local = sim
        .node(INITIATOR)
        .register(local_mem.clone(), Access::LOCAL_WRITE)
        .expect("registered");
    for (round, host) in [(1u8, None), (2, Some(TARGET)), (3, Some(INITIATOR))] {
        if let Some(host) = host {
            reset(&mut sim, host, s, t);
        }
        let bytes = pattern(round, 512);
        local_mem.write(0, &bytes).expect("in bounds");
        let range = |offset, len| LocalRange {
            region: local,
            offset,
            len,
        };
        let token = BufferToken {
            region: id,
            offset: 1024,
        };
        sim.node(INITIATOR)
            .write(s, range(0, 512), token)
            .expect("write submitted");
        let c = completion(&mut sim, s);
        assert!(c.outcome.is_success(), "round {round}: {c:?}");
        assert_eq!(
            target_mem.read_vec(1024, 512).expect("in bounds"),
            bytes,
            "round {round}: the WRITE landed in the target's registered memory"
        );
        sim.node(INITIATOR)
            .read(s, range(4096, 512), token)
            .expect("read submitted");
        let c = completion(&mut sim, s);
        assert!(c.outcome.is_success(), "round {round}: {c:?}");
        assert_eq!(local_mem.read_vec(4096, 512).expect("in bounds"), bytes);
        let counter = BufferToken {
            region: id,
            offset: 0,
        };
        sim.node(INITIATOR)
            .fetch_add(s, range(8, 8), counter, 1)
            .expect("fetch-add submitted");
        let c = completion(&mut sim, s);
        assert!(c.outcome.is_success(), "round {round}: {c:?}");
        assert_eq!(
            local_mem.read_u64(8).expect("in bounds"),
            u64::from(round) - 1
        );
    }
    assert_eq!(target_mem.read_u64(0).expect("in bounds"), 3);
}

#[test]
fn a_session_made_after_the_registration_has_it() {
    let (mut sim, _s, _t) = Sim::with_session(22);
    let target_mem = sim.node(TARGET).alloc_memory(4096).expect("memory");
    let id = sim
        .node(TARGET)
        .register(target_mem.clone(), ALL)
        .expect("registered");
    let local_mem = sim.node(INITIATOR).alloc_memory(4096).expect("memory");
    let local = sim
        .node(INITIATOR)
        .register(local_mem.clone(), Access::LOCAL_WRITE)
        .expect("registered");
    // A second session to the same listener, made after both.
    let addr = sim.target_addr(7471);
    let s2 = sim
        .node(INITIATOR)
        .connect(
            vec![Path {
                local: None,
                peer: addr,
            }],
            SessionOptions::default(),
        )
        .expect("connect");
    assert!(sim.run_until_cond(Duration::from_secs(1), |sim| {
        sim.node(INITIATOR).state(s2) == Some(State::Established)
    }));
    local_mem.write(0, b"second session").expect("in bounds");
    sim.node(INITIATOR)
        .write(
            s2,
            LocalRange {
                region: local,
                offset: 0,
                len: 14,
            },
            BufferToken {
                region: id,
                offset: 100,
            },
        )
        .expect("submitted");
    let c = completion(&mut sim, s2);
    assert!(c.outcome.is_success(), "{c:?}");
    assert_eq!(
        target_mem.read_vec(100, 14).expect("in bounds"),
        b"second session"
    );
}

#[test]
fn deregistration_waits_for_operations_then_the_peer_is_refused() {
    let (mut sim, s, _t) = Sim::with_session(23);
    let target_mem = sim.node(TARGET).alloc_memory(4096).expect("memory");
    let id = sim
        .node(TARGET)
        .register(target_mem, ALL)
        .expect("registered");
    let local_mem = sim.node(INITIATOR).alloc_memory(4096).expect("memory");
    let local = sim
        .node(INITIATOR)
        .register(local_mem, Access::LOCAL_WRITE)
        .expect("registered");
    sim.run_for(Duration::from_millis(5));
    let range = LocalRange {
        region: local,
        offset: 0,
        len: 64,
    };
    let token = BufferToken {
        region: id,
        offset: 0,
    };
    sim.node(INITIATOR)
        .write(s, range, token)
        .expect("submitted");
    // Not completed yet: the local registration is in use.
    assert!(matches!(
        sim.node(INITIATOR).deregister(local),
        Err(RegisterError::InUse { id, session }) if id == local && session == s
    ));
    assert!(completion(&mut sim, s).outcome.is_success());
    // The target deregisters: the peer's next WRITE is refused there.
    sim.node(TARGET).deregister(id).expect("deregistered");
    assert_eq!(
        sim.node(TARGET).deregister(id),
        Err(RegisterError::Unknown(id))
    );
    sim.node(INITIATOR)
        .write(s, range, token)
        .expect("submitted");
    let c = completion(&mut sim, s);
    assert!(
        matches!(
            c.outcome,
            Outcome::Failed(OpError::Remote(WcStatus::RemAccessErr))
        ),
        "{c:?}"
    );
    // The initiator's own: gone from its sessions.
    sim.node(INITIATOR).deregister(local).expect("deregistered");
    assert!(matches!(
        sim.node(INITIATOR).write(s, range, token),
        Err(SubmitError::BadLocal(_))
    ));
    // Bad input.
    let empty = sim.node(INITIATOR).alloc_memory(0).expect("memory");
    assert_eq!(
        sim.node(INITIATOR).register(empty, Access::LOCAL_WRITE),
        Err(RegisterError::Empty)
    );
    let m = sim.node(INITIATOR).alloc_memory(64).expect("memory");
    assert_eq!(
        sim.node(INITIATOR).register(m, Access::REMOTE_WRITE),
        Err(RegisterError::BadAccess)
    );
    assert_eq!(
        sim.node(INITIATOR).state(s),
        Some(State::Established),
        "a refused operation costs the session nothing"
    );
}

#[test]
fn a_registration_made_during_an_outage_is_reached_after_the_recovery() {
    let (mut sim, s, t) = Sim::with_session(24);
    let index = sim.host(TARGET).index();
    sim.fabric().inject(Fault::Remove(index, "soft0".into()));
    sim.run_for(Duration::from_millis(50));
    assert_ne!(sim.node(TARGET).state(t), Some(State::Established));
    let target_mem = sim.node(TARGET).alloc_memory(4096).expect("memory");
    let id = sim
        .node(TARGET)
        .register(target_mem.clone(), ALL)
        .expect("registered while the session has no transport");
    let local_mem = sim.node(INITIATOR).alloc_memory(4096).expect("memory");
    let local = sim
        .node(INITIATOR)
        .register(local_mem.clone(), Access::LOCAL_WRITE)
        .expect("registered");
    local_mem.write(0, b"after the outage").expect("in bounds");
    sim.node(INITIATOR)
        .write(
            s,
            LocalRange {
                region: local,
                offset: 0,
                len: 16,
            },
            BufferToken {
                region: id,
                offset: 8,
            },
        )
        .expect("submitted during the outage: it waits");
    sim.fabric().inject(Fault::Readd(index, "soft0".into()));
    let c = completion(&mut sim, s);
    assert!(c.outcome.is_success(), "{c:?}");
    assert_eq!(
        target_mem.read_vec(8, 16).expect("in bounds"),
        b"after the outage"
    );
}

#[test]
fn a_registration_made_while_a_standby_is_up_is_reached_after_the_failover() {
    let mut sim = Sim::new(25);
    let paths = sim.two_paths(7471);
    let standby = relink::Policy::builder()
        .standby(true)
        .build()
        .expect("policy");
    let opts = |policy: relink::Policy| {
        SessionOptions::builder()
            .policy(policy)
            .build()
            .expect("options")
    };
    sim.node(TARGET)
        .listen(
            "0.0.0.0:7471".parse().expect("address"),
            opts(relink::Policy::default()),
        )
        .expect("listen");
    let s = sim
        .node(INITIATOR)
        .connect(paths, opts(standby))
        .expect("connect");
    let mut standby_up = false;
    assert!(sim.run_until_cond(Duration::from_secs(2), |sim| {
        while let Some(e) = sim.node(INITIATOR).poll_event(s) {
            standby_up |= matches!(e, relink::SessionEvent::StandbyUp { .. });
        }
        standby_up
    }));
    let t = sim.node(TARGET).accept().expect("accepted").session;
    let target_mem = sim.node(TARGET).alloc_memory(4096).expect("memory");
    let id = sim
        .node(TARGET)
        .register(target_mem.clone(), ALL)
        .expect("registered");
    // The id reaches the initiator behind the advertisement.
    sim.node(TARGET).send(t, &id.0.to_le_bytes()).expect("sent");
    assert!(sim.run_until_cond(Duration::from_secs(1), |sim| {
        sim.node(INITIATOR).poll_delivery(s).is_some()
    }));
    let local_mem = sim.node(INITIATOR).alloc_memory(4096).expect("memory");
    let local = sim
        .node(INITIATOR)
        .register(local_mem.clone(), Access::LOCAL_WRITE)
        .expect("registered");
    let rounds: [(u64, &[u8]); 2] = [(0, b"on the first pair"), (1, b"after the failover")];
    for (round, text) in rounds {
        if round == 1 {
            let index = sim.host(TARGET).index();
            sim.fabric().inject(Fault::Remove(index, "soft0".into()));
        }
        local_mem.write(0, text).expect("in bounds");
        sim.node(INITIATOR)
            .write(
                s,
                LocalRange {
                    region: local,
                    offset: 0,
                    len: text.len() as u32,
                },
                BufferToken {
                    region: id,
                    offset: 64 * round,
                },
            )
            .expect("submitted");
        let c = completion(&mut sim, s);
        assert!(c.outcome.is_success(), "round {round}: {c:?}");
        assert_eq!(
            target_mem
                .read_vec(64 * round as usize, text.len())
                .expect("in bounds"),
            text
        );
    }
    assert_eq!(
        sim.node(INITIATOR).counters(s).expect("session").failovers,
        1,
        "the loss was a promotion of the standby"
    );
    assert_eq!(sim.node(TARGET).state(t), Some(State::Established));
}

#[test]
fn a_session_region_may_not_take_a_registration_id() {
    let e = SessionOptions::builder()
        .region(relink::RegionOptions::new(
            RegionId(REGISTERED_BASE),
            64,
            Access::LOCAL_WRITE,
        ))
        .build()
        .unwrap_err();
    assert!(
        matches!(e, relink::OptionsError::BadRegion { id, .. } if id == RegionId(REGISTERED_BASE)),
        "{e:?}"
    );
}

/// A session whose slots cannot hold an advertisement (`max_message` 8:
/// an advert message is 34 bytes of payload) is not offered the node's
/// registrations with remote rights: it keeps carrying messages, and the
/// registration is reached through the other session.
#[test]
fn a_session_with_slots_too_small_for_an_advertisement_is_not_offered_one() {
    let tiny = SessionOptions::builder()
        .max_message(8)
        .build()
        .expect("options");
    let (mut sim, s, t) = Sim::with_session_options(25, tiny.clone(), tiny);
    let mem = sim.node(TARGET).alloc_memory(4096).expect("memory");
    sim.node(TARGET)
        .register(mem, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .expect("registered");
    sim.run_for(Duration::from_millis(5));
    for i in 0..10u64 {
        sim.node(INITIATOR).send(s, &i.to_le_bytes()).expect("sent");
    }
    sim.run_for(Duration::from_millis(5));
    for i in 0..10u64 {
        let (_, m) = sim.node(TARGET).poll_delivery(t).expect("delivered");
        assert_eq!(m, i.to_le_bytes());
    }
    assert_eq!(sim.node(INITIATOR).state(s), Some(State::Established));
    let c = sim.node(TARGET).counters(t).expect("session");
    assert_eq!((c.losses, c.adverts_sent), (0, 0), "{c:?}");
}
