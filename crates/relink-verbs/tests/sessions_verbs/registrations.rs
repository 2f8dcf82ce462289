//! Node-wide registrations on real verbs: memory registered with each
//! node while its sessions carry traffic is reached by the peer through
//! the registration's id, and messages are sent from it without a copy
//! (a SEND of several SGEs), across `rdma link delete/add` of the target's
//! device and then of the initiator's.

use super::*;
use relink::{Access, BufferToken, LocalRange, LocalSgl, OpKind, Outcome};

/// The target registers memory with every right and sends its id; the
/// initiator registers memory of its own and, on a second session of the
/// same two nodes (the first carries the checked workload), WRITEs from it
/// into the target's registration, READs it back and FETCH_ADDs a counter
/// in it — before any fault, after the target's device was deleted and
/// added back, and after the initiator's was. Every operation succeeds,
/// the bytes land in the target's own memory, the counter counts each
/// FETCH_ADD once, and the workload's session checks as every scenario's.
/// Each round also sends a message gathered from three ranges of the
/// initiator's registration (`OpKind::MessageFrom`): the target receives
/// their bytes in order, and relink copied none of them.
#[test]
fn registrations_across_unplug_replug() {
    let env = env_or_skip!(need_nothing);
    let (listen, paths) = main_pair(&env, port());
    let mut d = Duo::start(env.clone(), listen, paths.clone());
    let s2 =
        d.a.connect(paths, relink::SessionOptions::default())
            .expect("a second session");
    let mut t2 = None;
    let up = d.pump_until(RESUME_TIMEOUT, |d| {
        if t2.is_none() {
            t2 = d.b.accept().map(|a| a.session);
        }
        d.a.state(s2) == Some(State::Established) && t2.is_some()
    });
    assert!(up, "the second session did not come up");
    let t2 = t2.expect("accepted");
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let target_mem = d.b.alloc_memory(1 << 16).expect("target memory");
    let id = d.b.register(target_mem.clone(), all).expect("registered");
    d.b.send(t2, &id.0.to_le_bytes()).expect("the id sent");
    let mut told = None;
    let delivered = d.pump_until(RESUME_TIMEOUT, |d| {
        told = d.a.poll_delivery(s2).map(|(_, m)| m);
        told.is_some()
    });
    assert!(delivered, "the id did not arrive");
    assert_eq!(told.as_deref(), Some(&id.0.to_le_bytes()[..]));
    let local_mem = d.a.alloc_memory(1 << 16).expect("initiator memory");
    let local =
        d.a.register(local_mem.clone(), Access::LOCAL_WRITE)
            .expect("registered");
    let done = |d: &mut Duo, what: &str| {
        let mut c = None;
        let ok = d.pump_until(RESUME_TIMEOUT, |d| {
            c = d.a.poll_completion(s2);
            c.is_some()
        });
        assert!(ok, "{what}: no completion");
        let c = c.expect("checked");
        assert!(
            matches!(c.outcome, Outcome::Success { .. }),
            "{what}: {c:?}"
        );
    };
    let range = |offset, len| LocalRange {
        region: local,
        offset,
        len,
    };
    for (round, fault) in [(1u8, None), (2, Some(TARGET)), (3, Some(INITIATOR))] {
        match fault {
            Some(TARGET) => {
                d.delete(&env.target.device);
                d.pump(Duration::from_millis(300));
                d.add(&env.target.device, &env.target.netdev);
                d.wait_resumed("target device back");
            }
            Some(_) => {
                d.delete(&env.init.device);
                d.pump(Duration::from_millis(300));
                d.add(&env.init.device, &env.init.netdev);
                d.wait_resumed("initiator device back");
            }
            None => {}
        }
        let up = d.pump_until(RESUME_TIMEOUT, |d| {
            d.a.state(s2) == Some(State::Established)
        });
        assert!(up, "round {round}: the second session did not resume");
        let bytes: Vec<u8> = (0..4096u32).map(|i| (i as u8) ^ round).collect();
        local_mem.write(0, &bytes).expect("in bounds");
        let token = |offset| BufferToken { region: id, offset };
        d.a.write(s2, range(0, 4096), token(8192)).expect("write");
        done(&mut d, "write");
        assert_eq!(
            target_mem.read_vec(8192, 4096).expect("in bounds"),
            bytes,
            "round {round}: the WRITE landed in the target's own memory"
        );
        d.a.read(s2, range(16384, 4096), token(8192)).expect("read");
        done(&mut d, "read");
        assert_eq!(local_mem.read_vec(16384, 4096).expect("in bounds"), bytes);
        d.a.fetch_add(s2, range(32768, 8), token(0), 1)
            .expect("fetch-add");
        done(&mut d, "fetch-add");
        // 464 bytes: within the target's receive slots (the workload's
        // listener options, max_message 530).
        let sgl =
            LocalSgl::new([range(100, 200), range(0, 64), range(3000, 200)]).expect("three ranges");
        d.a.submit(s2, OpKind::MessageFrom { local: sgl })
            .expect("message from memory");
        done(&mut d, "message from memory");
        let mut got = None;
        let arrived = d.pump_until(RESUME_TIMEOUT, |d| {
            got = d.b.poll_delivery(t2).map(|(_, m)| m);
            got.is_some()
        });
        assert!(
            arrived,
            "round {round}: the message from memory did not arrive"
        );
        let expected = [&bytes[100..300], &bytes[..64], &bytes[3000..3200]].concat();
        assert!(
            got.as_deref() == Some(&expected[..]),
            "round {round}: the message holds the ranges' bytes, in order"
        );
    }
    let copied = d.a.counters(s2).expect("session").send_copied_bytes;
    assert_eq!(copied, 0, "no payload byte copied on the way out");
    assert_eq!(
        target_mem.read_u64(0).expect("in bounds"),
        3,
        "one FETCH_ADD per round, each once"
    );
    d.notes.push(
        "registrations reached and messages sent from them (3 SGEs, 0 bytes copied) in 3 rounds \
         (before, after target and initiator delete/add)"
            .into(),
    );
    d.a.close(s2).expect("close the second session");
    // Every output of the second session taken, it is reaped.
    let gone = d.pump_until(RESUME_TIMEOUT, |d| {
        for (node, h) in [(&mut d.a, s2), (&mut d.b, t2)] {
            while node.poll_event(h).is_some() {}
            while node.poll_completion(h).is_some() {}
            while node.poll_delivery(h).is_some() {}
        }
        d.b.sessions().len() == 1
    });
    assert!(gone, "the target kept the closed second session");
    d.finish("registrations_across_unplug_replug");
}
