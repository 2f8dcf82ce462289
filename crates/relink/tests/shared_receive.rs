//! Sessions of a node on one shared receive queue: messages arrive exactly
//! once and in order through it, across a device reset, a replacement and
//! a failover to a second device; the queue is built on each device the
//! sessions use and destroyed on the one they leave; the credit rule
//! refuses a session that would overfill it; bad options get typed errors.

use std::collections::BTreeMap;
use std::time::Duration;

use relink::{
    ConnectError, ListenError, Path, SessionHandle, SessionOptions, SharedReceiveError,
    SharedReceiveHandle, SharedReceiveOptions, State,
};
use relink_fabric::Provider;
use relink_sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

const PORT: u16 = 7471;
/// Sessions on each node's shared receive queue.
const SESSIONS: usize = 3;
/// Each session's receive slots: its reservation out of the queue.
const SLOTS: u32 = 16;

/// The message `n` of sender `i` of `side`.
fn message(side: usize, i: usize, n: u32) -> Vec<u8> {
    format!("side {side} session {i} message {n:05}").into_bytes()
}

fn session_opts(queue: SharedReceiveHandle) -> SessionOptions {
    SessionOptions::builder()
        .recv_slots(SLOTS)
        .max_message(256)
        .shared_receive(queue)
        .build()
        .expect("valid options")
}

fn queue_opts() -> SharedReceiveOptions {
    SharedReceiveOptions::builder()
        .depth(SLOTS * SESSIONS as u32)
        .max_message(512)
        .build()
        .expect("valid options")
}

/// Both sides' sessions, each side's queue, and what each has sent and
/// received so far.
struct World {
    sim: Sim,
    /// Per side: its queue, its sessions.
    queue: [SharedReceiveHandle; 2],
    sessions: [Vec<SessionHandle>; 2],
    sent: [Vec<u32>; 2],
    /// Per side and session: every delivery, in order.
    got: [BTreeMap<usize, Vec<Vec<u8>>>; 2],
}

impl World {
    /// Two hosts with two devices each (`soft0` on 10.0.0.x, `soft1` on
    /// 10.0.1.x); the target listens on every address; the initiator
    /// connects `SESSIONS` sessions over both paths; every session on
    /// either side receives through its node's shared receive queue.
    fn new(seed: u64) -> World {
        let mut sim = Sim::new(seed);
        for (h, addr) in [(INITIATOR, "10.0.1.1/24"), (TARGET, "10.0.1.2/24")] {
            let idx = sim.host(h).index();
            sim.fabric()
                .add_device_with(idx, "soft1", vec![addr.parse().unwrap()], None);
        }
        let qi = sim
            .node(INITIATOR)
            .create_shared_receive(queue_opts())
            .unwrap();
        let qt = sim
            .node(TARGET)
            .create_shared_receive(queue_opts())
            .unwrap();
        sim.node(TARGET)
            .listen(format!("0.0.0.0:{PORT}").parse().unwrap(), session_opts(qt))
            .unwrap();
        let paths = vec![
            Path {
                local: None,
                peer: sim.target_addr(PORT),
            },
            Path {
                local: None,
                peer: format!("10.0.1.2:{PORT}").parse().unwrap(),
            },
        ];
        let mine: Vec<SessionHandle> = (0..SESSIONS)
            .map(|_| {
                sim.node(INITIATOR)
                    .connect(paths.clone(), session_opts(qi))
                    .unwrap()
            })
            .collect();
        let mut w = World {
            sim,
            queue: [qi, qt],
            sessions: [mine, Vec::new()],
            sent: [vec![0; SESSIONS], vec![0; SESSIONS]],
            got: [BTreeMap::new(), BTreeMap::new()],
        };
        let up = w.sim.run_until_cond(Duration::from_secs(5), |sim| {
            while let Some(a) = sim.node(TARGET).accept() {
                w.sessions[TARGET].push(a.session);
            }
            w.sessions[TARGET].len() == SESSIONS
                && w.sessions[INITIATOR]
                    .iter()
                    .all(|s| sim.node(INITIATOR).state(*s) == Some(State::Established))
        });
        assert!(up, "the sessions are not established");
        w
    }

    /// Each session on each side sends `n` more messages (more than the
    /// credits of a session, so the queue's slots are reused).
    fn send(&mut self, n: u32) {
        for side in [INITIATOR, TARGET] {
            for i in 0..SESSIONS {
                let s = self.sessions[side][i];
                for _ in 0..n {
                    let m = message(side, i, self.sent[side][i]);
                    self.sim.node(side).send(s, &m).unwrap();
                    self.sent[side][i] += 1;
                }
            }
        }
    }

    /// Run until every message sent so far was delivered and confirmed;
    /// then check that each session got each message of its peer once, in
    /// order.
    fn deliver_all(&mut self, what: &str) {
        let mut confirmed = [vec![0u32; SESSIONS], vec![0u32; SESSIONS]];
        let World {
            sim,
            sessions,
            sent,
            got,
            ..
        } = self;
        let done = sim.run_until_cond(Duration::from_secs(20), |sim| {
            for side in [INITIATOR, TARGET] {
                for (i, &s) in sessions[side].iter().enumerate() {
                    while let Some((_, m)) = sim.node(side).poll_delivery(s) {
                        got[side].entry(i).or_default().push(m);
                    }
                    while let Some(c) = sim.node(side).poll_completion(s) {
                        assert!(c.outcome.is_success(), "{what}: {c:?}");
                        confirmed[side][i] += 1;
                    }
                    while sim.node(side).poll_event(s).is_some() {}
                }
            }
            (0..2).all(|side| {
                (0..SESSIONS)
                    .all(|i| got[side].get(&i).map_or(0, Vec::len) == sent[1 - side][i] as usize)
            })
        });
        assert!(done, "{what}: not everything was delivered");
        for side in [INITIATOR, TARGET] {
            for i in 0..SESSIONS {
                let want: Vec<Vec<u8>> = (0..sent[1 - side][i])
                    .map(|n| message(1 - side, i, n))
                    .collect();
                assert_eq!(
                    got[side][&i], want,
                    "{what}: side {side} session {i}: every message once, in order"
                );
            }
        }
        // Confirmations of the last messages may trail their delivery.
        let _ = confirmed;
    }

    /// SRQs alive on host `h` (on every device, live or gone).
    fn srqs(&self, h: usize) -> usize {
        self.sim.host(h).object_counts().srqs
    }

    /// The device every session of side `h` is on now.
    fn devices(&mut self, h: usize) -> Vec<String> {
        let ss = self.sessions[h].clone();
        ss.iter()
            .map(|&s| {
                self.sim
                    .node(h)
                    .device(s)
                    .map(|d| d.name.clone())
                    .unwrap_or_default()
            })
            .collect()
    }

    /// Run until every initiator session resumed `resumes` times and
    /// every session of both sides is established again.
    fn until_resumed(&mut self, resumes: u64, what: &str) {
        let sessions = self.sessions.clone();
        let ok = self.sim.run_until_cond(Duration::from_secs(20), |sim| {
            sessions[INITIATOR]
                .iter()
                .all(|&s| sim.node(INITIATOR).counters(s).unwrap().resumes == resumes)
                && (0..2).all(|side| {
                    sessions[side]
                        .iter()
                        .all(|&s| sim.node(side).state(s) == Some(State::Established))
                })
        });
        let r: Vec<u64> = sessions[INITIATOR]
            .iter()
            .map(|&s| self.sim.node(INITIATOR).counters(s).unwrap().resumes)
            .collect();
        let st: Vec<_> = (0..2)
            .flat_map(|side| sessions[side].clone().into_iter().map(move |s| (side, s)))
            .map(|(side, s)| self.sim.node(side).state(s))
            .collect();
        assert!(ok, "{what}: the sessions did not resume: {r:?} {st:?}");
    }
}

#[test]
fn sessions_on_one_shared_receive_queue_deliver_exactly_once_in_order_across_reset_replacement_and_failover(
) {
    let mut w = World::new(41);
    // One queue per node, on the one device every session is on.
    assert_eq!((w.srqs(INITIATOR), w.srqs(TARGET)), (1, 1));
    for side in [INITIATOR, TARGET] {
        let q = w.queue[side];
        let usage = w.sim.node(side).shared_receive_usage(q).unwrap();
        assert_eq!(
            (usage.depth, usage.reserved, usage.devices),
            (SLOTS * SESSIONS as u32, SLOTS * SESSIONS as u32, 1)
        );
    }
    w.send(40);
    w.deliver_all("before any fault");

    // The initiator's device resets, with messages in flight both ways
    // (a local loss: the sessions come back on the same device).
    w.send(30);
    let ih = w.sim.host(INITIATOR).index();
    w.sim.fabric().inject(Fault::Reset(ih, "soft0".into()));
    w.send(10);
    w.until_resumed(1, "after the initiator's reset");
    w.deliver_all("after the initiator's reset");
    assert!(w.devices(INITIATOR).iter().all(|d| d == "soft0"));
    assert_eq!(
        (w.srqs(INITIATOR), w.srqs(TARGET)),
        (1, 1),
        "one queue per node: the old registration's went with its last session"
    );

    // The initiator's device is replaced (a new GUID, the same name).
    w.send(30);
    w.sim
        .fabric()
        .inject(Fault::Replace(ih, "soft0".into(), None));
    w.send(10);
    w.until_resumed(2, "after the initiator's replacement");
    w.deliver_all("after the initiator's replacement");
    assert_eq!((w.srqs(INITIATOR), w.srqs(TARGET)), (1, 1));

    // The initiator's first device goes for good: every session fails
    // over to the second device pair, and both nodes' queues with them.
    w.send(30);
    w.sim.fabric().inject(Fault::Remove(ih, "soft0".into()));
    w.send(10);
    w.until_resumed(3, "after the failover");
    w.deliver_all("after the failover");
    for side in [INITIATOR, TARGET] {
        assert!(
            w.devices(side).iter().all(|d| d == "soft1"),
            "every session on the second device: {:?}",
            w.devices(side)
        );
    }
    assert_eq!(
        (w.srqs(INITIATOR), w.srqs(TARGET)),
        (1, 1),
        "one queue per node, on the device the sessions moved to; none left on the old one"
    );
    for side in [INITIATOR, TARGET] {
        let q = w.queue[side];
        assert_eq!(w.sim.node(side).shared_receive_usage(q).unwrap().devices, 1);
        let f = w.sim.node(side).footprint();
        assert_eq!((f.shared_receive_queues, f.shared_receive_srqs), (1, 1));
        assert!(f.shared_receive_memory_bytes > 0, "{f:?}");
    }

    // Closing every session frees every queue and its reservations.
    for side in [INITIATOR, TARGET] {
        for s in w.sessions[side].clone() {
            w.sim.node(side).close(s).unwrap();
        }
    }
    w.sim.run_for(Duration::from_secs(2));
    for side in [INITIATOR, TARGET] {
        for s in w.sessions[side].clone() {
            while w.sim.node(side).poll_event(s).is_some() {}
        }
    }
    w.sim.run_for(Duration::from_secs(2));
    assert_eq!((w.srqs(INITIATOR), w.srqs(TARGET)), (0, 0));
    let qi = w.queue[INITIATOR];
    let usage = w.sim.node(INITIATOR).shared_receive_usage(qi).unwrap();
    assert_eq!((usage.reserved, usage.devices), (0, 0));
    let f = w.sim.node(INITIATOR).footprint();
    assert_eq!(
        (f.shared_receive_srqs, f.shared_receive_memory_bytes),
        (0, 0),
        "{f:?}"
    );
    assert_eq!(w.sim.node(INITIATOR).remove_shared_receive(qi), Ok(()));
    assert_eq!(w.sim.node(INITIATOR).footprint().shared_receive_queues, 0);
}

#[test]
fn a_session_that_would_overfill_the_queue_is_refused() {
    let mut sim = Sim::new(42);
    let q = sim
        .node(INITIATOR)
        .create_shared_receive(
            SharedReceiveOptions::builder()
                .depth(2 * SLOTS)
                .max_message(256)
                .build()
                .unwrap(),
        )
        .unwrap();
    let paths = vec![Path {
        local: None,
        peer: sim.target_addr(PORT),
    }];
    let addr = sim.target_addr(PORT);
    sim.node(TARGET)
        .listen(addr, SessionOptions::default())
        .unwrap();
    let opts = SessionOptions::builder()
        .recv_slots(SLOTS)
        .max_message(256)
        .shared_receive(q)
        .build()
        .unwrap();
    let a = sim
        .node(INITIATOR)
        .connect(paths.clone(), opts.clone())
        .unwrap();
    let _b = sim
        .node(INITIATOR)
        .connect(paths.clone(), opts.clone())
        .unwrap();
    assert_eq!(
        sim.node(INITIATOR).connect(paths.clone(), opts.clone()),
        Err(ConnectError::SharedReceive(SharedReceiveError::Full {
            depth: 2 * SLOTS,
            reserved: 2 * SLOTS,
            wanted: SLOTS,
        }))
    );
    assert_eq!(
        sim.node(INITIATOR).remove_shared_receive(q),
        Err(SharedReceiveError::InUse)
    );
    // A session that ends and is reaped gives its share back.
    sim.run_for(Duration::from_millis(5));
    sim.node(INITIATOR).close(a).unwrap();
    sim.run_for(Duration::from_secs(2));
    while sim.node(INITIATOR).poll_event(a).is_some() {}
    sim.run_for(Duration::from_millis(5));
    assert!(sim.node(INITIATOR).connect(paths, opts).is_ok());
}

#[test]
fn an_incoming_session_past_the_depth_is_refused_busy_until_a_share_is_free() {
    let mut sim = Sim::new(43);
    let q = sim
        .node(TARGET)
        .create_shared_receive(
            SharedReceiveOptions::builder()
                .depth(SLOTS)
                .max_message(256)
                .build()
                .unwrap(),
        )
        .unwrap();
    let opts = |q: Option<SharedReceiveHandle>| {
        let b = SessionOptions::builder().recv_slots(SLOTS).max_message(256);
        match q {
            Some(q) => b.shared_receive(q),
            None => b,
        }
        .build()
        .unwrap()
    };
    let addr = sim.target_addr(PORT);
    sim.node(TARGET).listen(addr, opts(Some(q))).unwrap();
    let paths = vec![Path {
        local: None,
        peer: sim.target_addr(PORT),
    }];
    let first = sim
        .node(INITIATOR)
        .connect(paths.clone(), opts(None))
        .unwrap();
    sim.run_for(Duration::from_millis(5));
    assert_eq!(sim.node(INITIATOR).state(first), Some(State::Established));
    let second = sim.node(INITIATOR).connect(paths, opts(None)).unwrap();
    sim.run_for(Duration::from_millis(20));
    assert_ne!(sim.node(INITIATOR).state(second), Some(State::Established));
    let refused = std::iter::from_fn(|| sim.node(INITIATOR).poll_event(second)).any(|e| {
        matches!(
            e,
            relink::SessionEvent::Refused {
                reason: relink::RefuseReason::Busy,
                retrying: true
            }
        )
    });
    assert!(refused, "the peer retries a Busy refusal");
    // The first session closes: its share is free, the second gets in.
    sim.node(INITIATOR).close(first).unwrap();
    let t = sim
        .node(TARGET)
        .accept()
        .expect("the first session")
        .session;
    let ok = sim.run_until_cond(Duration::from_secs(10), |sim| {
        while sim.node(TARGET).poll_event(t).is_some() {}
        while sim.node(TARGET).poll_output().is_some() {}
        sim.node(INITIATOR).state(second) == Some(State::Established)
    });
    assert!(ok, "the second session got the share the first left");
}

#[test]
fn bad_shared_receive_options_get_typed_errors() {
    let invalid = |o: Result<SharedReceiveOptions, SharedReceiveError>| match o {
        Err(SharedReceiveError::Invalid { key, .. }) => key,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        invalid(SharedReceiveOptions::builder().depth(8).build()),
        "depth"
    );
    assert_eq!(
        invalid(SharedReceiveOptions::builder().max_message(7).build()),
        "max_message"
    );
    let mut sim = Sim::new(44);
    let q = sim
        .node(INITIATOR)
        .create_shared_receive(
            SharedReceiveOptions::builder()
                .depth(32)
                .max_message(128)
                .build()
                .unwrap(),
        )
        .unwrap();
    let paths = vec![Path {
        local: None,
        peer: sim.target_addr(PORT),
    }];
    let with = |max_message: u32, recv_slots: u32, q: SharedReceiveHandle| {
        SessionOptions::builder()
            .max_message(max_message)
            .recv_slots(recv_slots)
            .shared_receive(q)
            .build()
            .unwrap()
    };
    assert_eq!(
        sim.node(INITIATOR).connect(paths.clone(), with(256, 16, q)),
        Err(ConnectError::SharedReceive(
            SharedReceiveError::MessageTooLarge {
                max_message: 256,
                limit: 128
            }
        ))
    );
    assert_eq!(
        sim.node(INITIATOR)
            .listen("10.0.0.1:9000".parse().unwrap(), with(128, 64, q)),
        Err(ListenError::SharedReceive(SharedReceiveError::Full {
            depth: 32,
            reserved: 0,
            wanted: 64
        }))
    );
    let unknown = SharedReceiveHandle(9_999);
    assert_eq!(
        sim.node(INITIATOR).connect(paths, with(128, 16, unknown)),
        Err(ConnectError::SharedReceive(SharedReceiveError::Unknown(
            unknown
        )))
    );
    assert_eq!(
        sim.node(INITIATOR).remove_shared_receive(unknown),
        Err(SharedReceiveError::Unknown(unknown))
    );
    assert!(sim.node(INITIATOR).shared_receive_usage(unknown).is_none());
}
