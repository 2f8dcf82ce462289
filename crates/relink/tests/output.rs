//! The node-wide outputs: `Node::poll_output` hands out every completion,
//! delivery and event of every session exactly once with its session, the
//! sessions taking turns, and a session drained through it is reaped;
//! `Node::accept` says which listener, from where, and the initiator's
//! connect data.

use std::collections::BTreeMap;
use std::time::Duration;

use relink::{
    Accepted, Completion, ConnectError, ListenerHandle, OptionsError, Output, Path, SessionEvent,
    SessionHandle, SessionOptions, State, MAX_CONNECT_DATA,
};
use relink_sim::{Sim, INITIATOR, TARGET};
use relink_soft::Fault;

/// Everything a node handed out for one session, kind by kind, in order.
#[derive(Debug, Default, PartialEq)]
struct Log {
    completions: Vec<Completion>,
    deliveries: Vec<(u64, Vec<u8>)>,
    events: Vec<SessionEvent>,
}

/// What the application took from both nodes: each session's log, and
/// the target's accepted sessions in order.
#[derive(Debug, Default, PartialEq)]
struct Taken {
    logs: BTreeMap<(usize, SessionHandle), Log>,
    accepted: Vec<Accepted>,
}

impl Taken {
    fn log(&mut self, node: usize, s: SessionHandle) -> &mut Log {
        self.logs.entry((node, s)).or_default()
    }

    /// Take everything, session by session (`accept` and the per-session
    /// `poll_*` calls). `initiated` are the initiator's sessions.
    fn per_session(&mut self, sim: &mut Sim, initiated: &[SessionHandle]) {
        while let Some(a) = sim.node(TARGET).accept() {
            self.accepted.push(a);
        }
        let targets: Vec<SessionHandle> = self.accepted.iter().map(|a| a.session).collect();
        for (node, sessions) in [(INITIATOR, initiated), (TARGET, &targets[..])] {
            for &s in sessions {
                while let Some(c) = sim.node(node).poll_completion(s) {
                    self.log(node, s).completions.push(c);
                }
                while let Some((seq, m)) = sim.node(node).poll_delivery(s) {
                    self.log(node, s).deliveries.push((seq.0, m));
                }
                while let Some(e) = sim.node(node).poll_event(s) {
                    self.log(node, s).events.push(e);
                }
            }
        }
    }

    /// Take everything with `poll_output`; returns each node's outputs in
    /// the order they came.
    fn node_wide(&mut self, sim: &mut Sim) -> [Vec<Output>; 2] {
        let mut trace = [Vec::new(), Vec::new()];
        for node in [INITIATOR, TARGET] {
            while let Some(out) = sim.node(node).poll_output() {
                trace[node].push(out.clone());
                let s = out.session();
                match out {
                    Output::Accepted(a) => {
                        assert_eq!(node, TARGET, "only the target accepts");
                        self.accepted.push(a);
                    }
                    Output::Completion { completion, .. } => {
                        self.log(node, s).completions.push(completion)
                    }
                    Output::Delivery { seq, payload, .. } => {
                        self.log(node, s).deliveries.push((seq.0, payload))
                    }
                    Output::Event { event, .. } => self.log(node, s).events.push(event),
                    other => panic!("an output this test does not know: {other:?}"),
                }
            }
        }
        trace
    }
}

/// One run of the scenario: four sessions, traffic both ways of a
/// different amount per session, a reset of each side's device, then half
/// the sessions closed. The application takes what the nodes produced
/// after every step, session by session or node-wide.
fn scenario(node_wide: bool) -> (Taken, [relink::Footprint; 2]) {
    let mut sim = Sim::new(21);
    let addr = sim.target_addr(7471);
    sim.node(TARGET)
        .listen(addr, SessionOptions::default())
        .unwrap();
    let path = || {
        vec![Path {
            local: None,
            peer: addr,
        }]
    };
    let sessions: Vec<SessionHandle> = (0..4u8)
        .map(|i| {
            let opts = SessionOptions::builder()
                .connect_data(vec![i; usize::from(i) * 5])
                .build()
                .expect("valid options");
            sim.node(INITIATOR).connect(path(), opts).unwrap()
        })
        .collect();
    let mut taken = Taken::default();
    let take = |sim: &mut Sim, taken: &mut Taken| {
        if node_wide {
            taken.node_wide(sim);
        } else {
            taken.per_session(sim, &sessions);
        }
    };
    for step in 0..40u32 {
        for (i, &s) in sessions.iter().enumerate() {
            // Session i sends i + 1 messages a step.
            for k in 0..=i as u32 {
                let _ = sim
                    .node(INITIATOR)
                    .send(s, &[&step.to_be_bytes()[..], &k.to_be_bytes()].concat());
            }
        }
        // The target answers on every session it has, once a step.
        let targets: Vec<SessionHandle> = taken.accepted.iter().map(|a| a.session).collect();
        for t in targets {
            let _ = sim.node(TARGET).send(t, &step.to_be_bytes());
        }
        if step == 10 {
            sim.fabric()
                .inject(Fault::Reset(sim.host(TARGET).index(), "soft0".into()));
        }
        if step == 25 {
            sim.fabric()
                .inject(Fault::Reset(sim.host(INITIATOR).index(), "soft0".into()));
        }
        if step == 35 {
            for &s in &sessions[..2] {
                sim.node(INITIATOR).close(s).unwrap();
            }
        }
        sim.run_for(Duration::from_millis(2));
        take(&mut sim, &mut taken);
    }
    sim.run_for(Duration::from_secs(1));
    take(&mut sim, &mut taken);
    // Reaping happens in a poll round after the last outputs were taken.
    sim.run_for(Duration::from_millis(1));
    take(&mut sim, &mut taken);
    let footprints = [
        sim.node(INITIATOR).footprint(),
        sim.node(TARGET).footprint(),
    ];
    (taken, footprints)
}

/// A node's sessions in the log, in handle order.
fn sessions_of(taken: &Taken, node: usize) -> Vec<SessionHandle> {
    taken
        .logs
        .keys()
        .filter(|(n, _)| *n == node)
        .map(|(_, s)| *s)
        .collect()
}

#[test]
fn poll_output_hands_out_every_output_once_with_its_session() {
    // The same seeded run twice: the outputs taken session by session are
    // the reference, `poll_output` must give exactly those, each with its
    // session, each kind in its order.
    let (reference, ref_footprints) = scenario(false);
    let (node_wide, footprints) = scenario(true);
    assert_eq!(reference.accepted.len(), 4);
    assert_eq!(node_wide.accepted, reference.accepted);
    for (session, log) in &reference.logs {
        assert_eq!(
            node_wide.logs.get(session),
            Some(log),
            "session {session:?}"
        );
    }
    assert_eq!(node_wide.logs.len(), reference.logs.len());

    // Not a vacuous comparison: messages and completions on every
    // session, both ways, and the resets seen.
    for (&(node, s), log) in &reference.logs {
        assert!(!log.deliveries.is_empty(), "{node} {s:?} got messages");
        assert!(!log.completions.is_empty(), "{node} {s:?} got completions");
        assert!(
            log.events
                .iter()
                .any(|e| matches!(e, SessionEvent::Resumed { .. })),
            "{node} {s:?} resumed"
        );
    }
    // Each initiator session found its target session by its connect data
    // (session i sent i * 5 bytes of i): every message confirmed on one
    // side was delivered on the other, and the sessions left open carried
    // all they were given.
    for (i, &s) in sessions_of(&reference, INITIATOR).iter().enumerate() {
        let t = reference
            .accepted
            .iter()
            .find(|a| a.connect_data == vec![i as u8; i * 5])
            .expect("accepted")
            .session;
        for (from, to) in [((INITIATOR, s), (TARGET, t)), ((TARGET, t), (INITIATOR, s))] {
            let confirmed = reference.logs[&from]
                .completions
                .iter()
                .filter(|c| c.outcome.is_success())
                .count();
            let delivered = reference.logs[&to].deliveries.len();
            assert!(delivered >= confirmed, "{from:?} → {to:?}");
            if i >= 2 {
                assert_eq!(confirmed, delivered, "{from:?} → {to:?}");
            }
        }
        if i >= 2 {
            assert_eq!(reference.logs[&(TARGET, t)].deliveries.len(), 40 * (i + 1));
        }
    }

    // The closed sessions, drained through poll_output, are reaped on both
    // sides, as when drained session by session; nothing is left queued.
    assert_eq!(footprints, ref_footprints);
    for f in footprints {
        assert_eq!((f.sessions, f.ended, f.ready), (2, 0, 0), "{f:?}");
    }
}

/// A session whose outputs were all taken ends up back in the queue only
/// when it has output again: a trace of one drain shows the sessions
/// taking turns, each session's completions and deliveries before its
/// events.
#[test]
fn sessions_take_turns_in_poll_output() {
    let mut sim = Sim::new(22);
    let addr = sim.target_addr(7471);
    sim.node(TARGET)
        .listen(addr, SessionOptions::default())
        .unwrap();
    let sessions: Vec<SessionHandle> = (0..3)
        .map(|_| {
            sim.node(INITIATOR)
                .connect(
                    vec![Path {
                        local: None,
                        peer: addr,
                    }],
                    SessionOptions::default(),
                )
                .unwrap()
        })
        .collect();
    // One busy session (60 messages) and two quiet ones (3 each), all
    // delivered before the target's application takes anything.
    for (i, &s) in sessions.iter().enumerate() {
        for k in 0..if i == 0 { 60u32 } else { 3 } {
            sim.node(INITIATOR).send(s, &k.to_be_bytes()).unwrap();
        }
    }
    sim.run_for(Duration::from_millis(50));
    let mut trace = Vec::new();
    while let Some(out) = sim.node(TARGET).poll_output() {
        trace.push(out);
    }
    assert!(sim.node(TARGET).poll_output().is_none(), "drained");

    // The three accepted sessions first.
    let accepted: Vec<SessionHandle> = trace[..3]
        .iter()
        .map(|o| match o {
            Output::Accepted(a) => a.session,
            other => panic!("not an accept: {other:?}"),
        })
        .collect();
    let rest = &trace[3..];
    let count = |s: SessionHandle| rest.iter().filter(|o| o.session() == s).count();
    assert_eq!(
        accepted.iter().map(|&t| count(t)).sum::<usize>(),
        rest.len()
    );
    // Turns: a session gives two outputs in a row only once every other
    // session has given all of its own.
    for i in 0..rest.len() - 1 {
        let s = rest[i].session();
        if rest[i + 1].session() == s {
            assert!(
                rest[i + 1..].iter().all(|o| o.session() == s),
                "session {s:?} went twice at {i} while others waited"
            );
        }
    }
    // The quiet sessions are done within the first rounds, long before the
    // busy one.
    let busy = *accepted
        .iter()
        .max_by_key(|&&t| count(t))
        .expect("three sessions");
    let last_quiet = rest
        .iter()
        .rposition(|o| o.session() != busy)
        .expect("quiet outputs");
    let quiet_outputs = rest.len() - count(busy);
    assert!(
        last_quiet < 2 * quiet_outputs,
        "the quiet sessions' last output at {last_quiet}, of {quiet_outputs}"
    );
    // Within a session: the deliveries (in order), then the events.
    for &t in &accepted {
        let mine: Vec<&Output> = rest.iter().filter(|o| o.session() == t).collect();
        let first_event = mine
            .iter()
            .position(|o| matches!(o, Output::Event { .. }))
            .expect("events");
        assert!(mine[first_event..]
            .iter()
            .all(|o| matches!(o, Output::Event { .. })));
        let seqs: Vec<u64> = mine[..first_event]
            .iter()
            .map(|o| match o {
                Output::Delivery { seq, .. } => seq.0,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    }
    assert_eq!(sim.node(TARGET).footprint().ready, 0);
}

#[test]
fn accept_says_which_listener_from_where_and_the_connect_data() {
    let mut sim = Sim::new(23);
    let (a1, a2) = (sim.target_addr(7471), sim.target_addr(7472));
    let l1 = sim
        .node(TARGET)
        .listen(a1, SessionOptions::default())
        .unwrap();
    let l2 = sim
        .node(TARGET)
        .listen(a2, SessionOptions::default())
        .unwrap();
    let full: Vec<u8> = (0..MAX_CONNECT_DATA as u8).collect();
    let connect = |sim: &mut Sim, peer, data: &[u8]| {
        // Not through the builder, which would refuse too long a one
        // itself: `connect` checks what it is given.
        let mut opts = SessionOptions::default();
        opts.connect_data = data.to_vec();
        sim.node(INITIATOR)
            .connect(vec![Path { local: None, peer }], opts)
    };
    let s1 = connect(&mut sim, a1, b"").unwrap();
    sim.run_for(Duration::from_millis(5));
    let s2 = connect(&mut sim, a2, &full).unwrap();
    sim.run_for(Duration::from_millis(5));

    let got: Vec<Accepted> = std::iter::from_fn(|| sim.node(TARGET).accept()).collect();
    assert_eq!(got.len(), 2);
    let check = |a: &Accepted, listener: ListenerHandle, local, data: &[u8]| {
        assert_eq!(a.listener, listener);
        assert_eq!(a.local, local);
        assert_eq!(a.peer.ip(), sim.addr(INITIATOR));
        assert_eq!(a.connect_data, data);
    };
    check(&got[0], l1, a1, b"");
    check(&got[1], l2, a2, &full);
    let (t1, t2) = (got[0].session, got[1].session);
    assert_eq!(sim.node(TARGET).connect_data(t2), Some(&full[..]));
    assert_eq!(sim.node(INITIATOR).connect_data(s2), Some(&full[..]));
    assert_eq!(sim.node(INITIATOR).connect_data(s1), Some(&b""[..]));

    // The session outlives its first connection; its connect data stays.
    sim.fabric()
        .inject(Fault::Reset(sim.host(TARGET).index(), "soft0".into()));
    sim.run_for(Duration::from_secs(2));
    for t in [t1, t2] {
        assert_eq!(sim.node(TARGET).state(t), Some(State::Established));
        assert!(sim.node(TARGET).counters(t).unwrap().resumes >= 1);
    }
    assert_eq!(sim.node(TARGET).connect_data(t2), Some(&full[..]));
    assert!(
        sim.node(TARGET).accept().is_none(),
        "a resume is no new session"
    );

    // One byte too many is refused at connect, and nothing is made.
    let before = sim.node(INITIATOR).footprint();
    let long = vec![1u8; MAX_CONNECT_DATA + 1];
    match connect(&mut sim, a1, &long) {
        Err(ConnectError::Options(OptionsError::ConnectDataTooLong { len, max })) => {
            assert_eq!((len, max), (MAX_CONNECT_DATA + 1, MAX_CONNECT_DATA));
        }
        other => panic!("not refused: {other:?}"),
    }
    assert_eq!(sim.node(INITIATOR).footprint(), before);
}

/// `accept` and `poll_output` share one queue, as the per-session calls
/// and `poll_output` do: whichever the application calls takes.
#[test]
fn accept_and_poll_output_take_from_one_queue() {
    let mut sim = Sim::new(24);
    let addr = sim.target_addr(7471);
    sim.node(TARGET)
        .listen(addr, SessionOptions::default())
        .unwrap();
    for _ in 0..2 {
        sim.node(INITIATOR)
            .connect(
                vec![Path {
                    local: None,
                    peer: addr,
                }],
                SessionOptions::default(),
            )
            .unwrap();
    }
    sim.run_for(Duration::from_millis(10));
    let first = sim.node(TARGET).accept().expect("first").session;
    let outputs: Vec<Output> = std::iter::from_fn(|| sim.node(TARGET).poll_output()).collect();
    let accepted: Vec<SessionHandle> = outputs
        .iter()
        .filter_map(|o| match o {
            Output::Accepted(a) => Some(a.session),
            _ => None,
        })
        .collect();
    assert_eq!(accepted.len(), 1, "the second only");
    assert_ne!(accepted[0], first);
    assert!(outputs.iter().any(|o| o.session() == first), "its events");
    // Events taken per session are not handed out again.
    sim.node(TARGET).send(first, b"x").unwrap();
    sim.run_for(Duration::from_millis(10));
    while sim.node(TARGET).poll_completion(first).is_some() {}
    assert!(std::iter::from_fn(|| sim.node(TARGET).poll_output())
        .all(|o| !matches!(o, Output::Completion { .. })));
}
