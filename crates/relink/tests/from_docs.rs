//! Written from the rendered API docs alone: a server and a client on the
//! in-process soft fabric, messages and RDMA WRITEs through a buffer token,
//! a device reset on the server and a device replacement on the client in
//! the middle, nothing retried by the program; then the client's goodbye and
//! a few typed errors.

use std::collections::HashMap;
use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use relink::{
    Access, BufferToken, ConnectError, LocalRange, Node, OpId, OptionsError, Outcome, Output, Path,
    Policy, PolicyError, RegionId, RegionOptions, SessionEvent, SessionHandle, SessionOptions,
    State, SubmitError,
};
use relink_soft::SoftFabric;

const SERVER_REGION: RegionId = RegionId(1);
const CLIENT_REGION: RegionId = RegionId(2);
const REGION_LEN: u64 = 8192;
const CHUNK: usize = 64;
const CONNECT_DATA: &[u8] = b"client #1, protocol v3";

/// What the server saw, taken node-wide with `poll_output`.
#[derive(Default)]
struct ServerSide {
    accepted: Option<SessionHandle>,
    connect_data: Vec<u8>,
    deliveries: Vec<(u64, Vec<u8>)>,
    events: Vec<SessionEvent>,
}

/// What the client saw, taken session by session.
#[derive(Default)]
struct ClientSide {
    completions: HashMap<OpId, Vec<Outcome>>,
    events: Vec<SessionEvent>,
}

struct World {
    fabric: SoftFabric,
    a: relink_soft::SoftHost,
    b: relink_soft::SoftHost,
    server: Node,
    client: Node,
    s: SessionHandle,
    srv: ServerSide,
    cli: ClientSide,
}

impl World {
    /// One turn of each node's loop (at most 1 ms of virtual time each),
    /// taking everything produced.
    fn turn(&mut self) {
        if self.server.wait_for(Duration::from_millis(1)) {
            while let Some(out) = self.server.poll_output() {
                match out {
                    Output::Accepted(a) => {
                        assert!(self.srv.accepted.is_none(), "one session only");
                        self.srv.accepted = Some(a.session);
                        self.srv.connect_data = a.connect_data;
                    }
                    Output::Delivery {
                        session,
                        seq,
                        payload,
                    } => {
                        assert_eq!(Some(session), self.srv.accepted);
                        self.srv.deliveries.push((seq.0, payload));
                    }
                    Output::Event { session, event } => {
                        assert_eq!(Some(session), self.srv.accepted);
                        self.srv.events.push(event);
                    }
                    Output::Completion { completion, .. } => {
                        panic!("the server submitted nothing: {completion:?}")
                    }
                    _ => {}
                }
            }
        }
        if self.client.wait_for(Duration::from_millis(1)) {
            while let Some(c) = self.client.poll_completion(self.s) {
                self.cli
                    .completions
                    .entry(c.op)
                    .or_default()
                    .push(c.outcome);
            }
            while let Some(e) = self.client.poll_event(self.s) {
                self.cli.events.push(e);
            }
            // The client expects no messages from the server.
            assert!(self.client.poll_delivery(self.s).is_none());
        }
    }

    /// Drive both nodes until `done` holds (or fail after `limit` of virtual time).
    fn run_until(&mut self, limit: Duration, what: &str, done: impl Fn(&World) -> bool) {
        let give_up = self.server.now() + limit;
        while !done(self) {
            assert!(self.server.now() < give_up, "timed out waiting for: {what}");
            self.turn();
        }
    }

    fn message(i: u32) -> Vec<u8> {
        let mut m = format!("message {i:05} ").into_bytes();
        m.resize(100 + (i as usize % 50), b'a' + (i % 26) as u8);
        m
    }

    fn chunk(i: u32) -> Vec<u8> {
        (0..CHUNK)
            .map(|k| (i as usize * 31 + k * 7) as u8 ^ 0x5a)
            .collect()
    }

    /// Submit messages `msgs` and WRITEs `writes`, interleaved. Each WRITE has
    /// its own local range (a replay re-reads it) and its own remote range.
    fn submit(&mut self, msgs: std::ops::Range<u32>, writes: std::ops::Range<u32>) -> Vec<OpId> {
        let mut ops = Vec::new();
        let mem = self.client.region(self.s, CLIENT_REGION).unwrap();
        let mut w = writes.clone();
        for i in msgs {
            ops.push(self.client.send(self.s, &Self::message(i)).unwrap());
            if let Some(j) = w.next() {
                let off = j as usize * CHUNK;
                mem.write(off, &Self::chunk(j)).unwrap();
                let local = LocalRange {
                    region: CLIENT_REGION,
                    offset: off as u64,
                    len: CHUNK as u32,
                };
                let remote = BufferToken {
                    region: SERVER_REGION,
                    offset: off as u64,
                };
                ops.push(self.client.write(self.s, local, remote).unwrap());
            }
        }
        for j in w {
            let off = j as usize * CHUNK;
            mem.write(off, &Self::chunk(j)).unwrap();
            let local = LocalRange {
                region: CLIENT_REGION,
                offset: off as u64,
                len: CHUNK as u32,
            };
            let remote = BufferToken {
                region: SERVER_REGION,
                offset: off as u64,
            };
            ops.push(self.client.write(self.s, local, remote).unwrap());
        }
        ops
    }

    fn all_completed(&self, ops: &[OpId]) -> bool {
        ops.iter().all(|op| self.cli.completions.contains_key(op))
    }
}

fn resumes(events: &[SessionEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, SessionEvent::Resumed { .. }))
        .count()
}

fn losses(events: &[SessionEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, SessionEvent::DeviceLost { .. }))
        .count()
}

#[test]
fn survives_reset_and_replacement_then_says_goodbye() -> Result<(), Box<dyn Error>> {
    // 1. Two hosts of the in-process soft fabric, a device each.
    let fabric = SoftFabric::new(2026);
    let (a, b) = (fabric.add_host("a"), fabric.add_host("b"));
    fabric.add_device(&a, "soft0", "10.0.0.1/24");
    fabric.add_device(&b, "soft0", "10.0.0.2/24");
    let mut server = Node::new(Arc::new(b.clone()));
    let client = Node::new(Arc::new(a.clone()));

    // 2. The server listens with a region advertised to the peer.
    let addr = "10.0.0.2:7471".parse()?;
    let server_opts = SessionOptions::builder()
        .region(
            RegionOptions::new(
                SERVER_REGION,
                REGION_LEN,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            )
            .advertise(true),
        )
        .build()?;
    let listener = server.listen(addr, server_opts)?;
    assert_eq!(server.listener_active(listener), Some(true));

    // The client connects with connect data and a (local) region of its own.
    let client_opts = SessionOptions::builder()
        .connect_data(CONNECT_DATA)
        .region(RegionOptions::new(
            CLIENT_REGION,
            REGION_LEN,
            Access::LOCAL_WRITE,
        ))
        .build()?;
    let mut client = client;
    let s = client.connect(
        vec![Path {
            local: None,
            peer: addr,
        }],
        client_opts,
    )?;

    let mut w = World {
        fabric,
        a,
        b,
        server,
        client,
        s,
        srv: ServerSide::default(),
        cli: ClientSide::default(),
    };

    // 3. Numbered messages and WRITEs, submitted at once (posted when up).
    let mut ops = w.submit(0..40, 0..20);
    w.run_until(Duration::from_secs(5), "first batch", |w| {
        w.all_completed(&ops)
    });
    assert_eq!(w.srv.connect_data, CONNECT_DATA);
    assert_eq!(w.client.state(s), Some(State::Established));
    let t = w.srv.accepted.expect("accepted");
    assert_eq!(w.server.connect_data(t), Some(CONNECT_DATA));

    // 4a. More in flight, and the server's device is reset under it.
    ops.extend(w.submit(40..80, 20..40));
    w.client.poll(); // post some of it
    w.server.poll();
    w.fabric.reset_device(&w.b, "soft0");
    ops.extend(w.submit(80..100, 40..50)); // submitted while it recovers
    w.run_until(Duration::from_secs(30), "after the server's reset", |w| {
        w.all_completed(&ops) && resumes(&w.cli.events) >= 1 && resumes(&w.srv.events) >= 1
    });

    // 4b. The client's device is replaced by a new one, same address.
    let before = w.client.device(s).expect("a device");
    ops.extend(w.submit(100..140, 50..70));
    w.client.poll();
    w.server.poll();
    w.fabric.replace_device(&w.a, "soft0", None);
    ops.extend(w.submit(140..160, 70..80));
    w.run_until(
        Duration::from_secs(30),
        "after the client's replacement",
        |w| w.all_completed(&ops) && resumes(&w.cli.events) >= 2 && resumes(&w.srv.events) >= 2,
    );
    let after = w.client.device(s).expect("a device");
    assert_ne!(before, after, "the session moved to the new device");
    // Let any stragglers arrive (there must be none).
    for _ in 0..50 {
        w.turn();
    }

    // Every message arrived exactly once and in order.
    assert_eq!(w.srv.deliveries.len(), 160);
    for (i, (seq, payload)) in w.srv.deliveries.iter().enumerate() {
        assert_eq!(*seq, i as u64 + 1, "sequence numbers from 1, in order");
        assert_eq!(payload, &World::message(i as u32), "message {i}");
    }
    // Every operation completed exactly once, with success.
    assert_eq!(ops.len(), 240);
    assert_eq!(w.cli.completions.len(), ops.len());
    let mut replayed = 0;
    for op in &ops {
        let outs = &w.cli.completions[op];
        assert_eq!(outs.len(), 1, "{op} completed {} times", outs.len());
        match outs[0] {
            Outcome::Success { replayed: r } => replayed += r as usize,
            other => panic!("{op}: {other:?}"),
        }
    }
    // Every WRITE landed in the server's region.
    let region = w.server.region(t, SERVER_REGION)?;
    for j in 0..80u32 {
        assert_eq!(
            region.read_vec(j as usize * CHUNK, CHUNK)?,
            World::chunk(j),
            "write {j}"
        );
    }
    // The sessions report their resumes.
    let (cc, sc) = (w.client.counters(s).unwrap(), w.server.counters(t).unwrap());
    assert!(cc.resumes >= 2 && sc.resumes >= 2, "{cc:?} {sc:?}");
    assert!(losses(&w.cli.events) >= 2 && losses(&w.srv.events) >= 2);
    assert_eq!(sc.delivered, 160);
    eprintln!(
        "client {cc:?}\nserver {sc:?}\nreplayed ops {replayed}, client events {}, server events {}",
        w.cli.events.len(),
        w.srv.events.len()
    );

    // 5. The client closes; the server sees the goodbye, not a loss.
    let server_events_before = w.srv.events.len();
    w.client.close(s)?;
    w.run_until(Duration::from_secs(5), "the goodbye", |w| {
        w.srv.events[server_events_before..]
            .iter()
            .any(|e| matches!(e, SessionEvent::Disconnected))
    });
    for _ in 0..50 {
        w.turn();
    }
    let after_close = &w.srv.events[server_events_before..];
    assert!(
        !after_close.iter().any(|e| matches!(
            e,
            SessionEvent::DeviceLost { .. }
                | SessionEvent::Recovering { .. }
                | SessionEvent::GaveUp
        )),
        "a goodbye, not a loss: {after_close:?}"
    );
    assert!(w
        .cli
        .events
        .iter()
        .any(|e| matches!(e, SessionEvent::Disconnected)));
    // Both sessions are closed (or already reaped, since everything was taken).
    assert!(matches!(w.server.state(t), None | Some(State::Closed)));
    assert!(matches!(w.client.state(s), None | Some(State::Closed)));

    // 6. Typed errors.
    // An invalid policy, named by its key.
    let bad = Policy::builder().initial_backoff(Duration::ZERO).build();
    assert!(
        matches!(
            bad,
            Err(PolicyError {
                key: "initial_backoff",
                ..
            })
        ),
        "{bad:?}"
    );
    // The same through the session options builder.
    let bad_policy = Policy::default()
        .to_builder()
        .reconnect_delay(Duration::from_millis(10))
        .initial_backoff(Duration::from_secs(1));
    match bad_policy.build() {
        Err(e) => assert_eq!(e.key, "initial_backoff"),
        Ok(p) => panic!("accepted {p:?}"),
    }
    let too_long = SessionOptions::builder()
        .connect_data(vec![0u8; 4096])
        .build();
    assert!(matches!(
        too_long,
        Err(OptionsError::ConnectDataTooLong { len: 4096, .. })
    ));
    let few_slots = SessionOptions::builder().recv_slots(4).build();
    assert!(
        matches!(
            few_slots,
            Err(OptionsError::Invalid {
                key: "recv_slots",
                ..
            })
        ),
        "{few_slots:?}"
    );
    // Sending on an unknown session.
    let unknown = SessionHandle(9_999);
    assert!(matches!(w.client.send(unknown, b"x"), Err(SubmitError::NoSession(h)) if h == unknown));
    // Connecting with no path.
    assert!(matches!(
        w.client.connect(Vec::new(), SessionOptions::default()),
        Err(ConnectError::NoPath)
    ));
    // Rights no device grants (found by trying: RegionOptions does not say
    // REMOTE_WRITE needs LOCAL_WRITE; Access::is_valid_for_mr does).
    let no_local = SessionOptions::builder()
        .region(RegionOptions::new(RegionId(5), 64, Access::REMOTE_WRITE).advertise(true))
        .build();
    assert!(
        matches!(
            no_local,
            Err(OptionsError::BadRegion {
                id: RegionId(5),
                ..
            })
        ),
        "{no_local:?}"
    );
    let _ = (&w.a, &w.b);
    Ok(())
}
