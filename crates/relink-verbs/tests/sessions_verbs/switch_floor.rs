//! The raw floor of a hot standby's switch: no relink, the provider's
//! rdma_cm and verbs calls only. Two connections, one on each device pair,
//! both up before the fault; 64 B SENDs flow on the first, 16 in flight,
//! from one thread that also drives the target (reposting each consumed
//! receive) and waits up to 1 ms on the initiator's provider when idle —
//! the loop shape of `standby::standby_failover`. The initiator's device
//! under the traffic is deleted (`rdma link delete`); on the first sign of
//! the loss (a failed completion, a device or CM event, an async event of
//! the device) the program posts on the other connection at once and only
//! then destroys the lost one's objects (the delete waits for that). The
//! device is added back and a new connection made on it, off the measured
//! window; the next cycle deletes the other pair's device.
//!
//! Measured as the standby scenario measures relink: the stall (the
//! longest gap between successful completions from the start of the
//! delete until the traffic has run 300 ms on the other connection), the
//! switch (from the loss seen to the next successful completion) and,
//! before each delete, the longest gap in 300 ms of plain traffic. It is
//! what an application with its own spare connection and nothing to
//! replay would see: the floor relink's promotion is compared with
//! ([benchmarks/rxe.md](../../../../docs/benchmarks/rxe.md)).

use relink_fabric::{
    CmEventKind, DeviceEventKind, DeviceId, Event, RecvWr, SendOp, SendWr, WcStatus, WorkCompletion,
};

use super::floor::{device_added, next_cm, next_request, rdma, End, RESOLVE};
use super::planned::{need_second_pair, two_pairs};
use super::standby::pct_ms;
use super::*;

/// Receives kept posted on each target QP (twice the window: none is
/// ever short while the loop is elsewhere).
const RECVS: usize = 2 * WINDOW;
/// How long the traffic runs on the other connection before the stall's
/// window closes (the standby scenario's `SETTLE`).
const SETTLE: Duration = Duration::from_millis(300);

/// A connection: the initiator's end (`None` once destroyed after its
/// loss), its device, and the target's end.
struct Link {
    a: Option<End>,
    dev: DeviceId,
    b: End,
}

/// Connect the initiator at `local` to the target's `listener` at `peer`,
/// with the target's receives posted.
fn connect(
    pa: &VerbsProvider,
    pb: &VerbsProvider,
    listener: relink_fabric::CmId,
    local: IpAddr,
    peer: SocketAddr,
) -> Link {
    let id = pa.cm_create_id().expect("cm_create_id");
    pa.cm_resolve_addr(id, Some(local), peer, RESOLVE)
        .expect("cm_resolve_addr");
    assert_eq!(next_cm(pa, id), CmEventKind::AddrResolved);
    pa.cm_resolve_route(id, RESOLVE).expect("cm_resolve_route");
    assert_eq!(next_cm(pa, id), CmEventKind::RouteResolved);
    let dev = pa.cm_device(id).expect("the id's device");
    let a = End::with_cq(pa, id, 4 * WINDOW as u32);
    pa.cm_connect(id, a.qp, relink_fabric::ConnParams::default(), b"switch")
        .expect("cm_connect");
    let req = next_request(pb, listener);
    let b = End::with_cq(pb, req, 4 * RECVS as u32);
    let recvs: Vec<RecvWr> = (0..RECVS as u64)
        .map(|wr_id| RecvWr {
            wr_id,
            sgl: b.sge(),
        })
        .collect();
    pb.post_recv(b.qp, &recvs).expect("post_recv");
    pb.cm_accept(req, b.qp, b"").expect("cm_accept");
    let up = next_cm(pa, id);
    assert!(
        matches!(up, CmEventKind::Established { .. }),
        "connect on {local}: {up:?}"
    );
    Link { a: Some(a), dev, b }
}

/// The loop's state: two links (the active one and the standby, `None`
/// from a loss until the device is back), the SENDs in flight and the
/// successes so far.
struct Floor {
    pa: Arc<VerbsProvider>,
    pb: Arc<VerbsProvider>,
    links: [Option<Link>; 2],
    active: usize,
    inflight: usize,
    succeeded: usize,
    wcs: Vec<WorkCompletion>,
    /// The target's receives to post again (reused each round).
    again: Vec<RecvWr>,
    /// The moment the active link's loss was first seen, with the
    /// successes by then; reset by [`Floor::watch`].
    lost: Option<(Instant, usize)>,
    /// From the loss seen to the next success.
    switch: Option<Duration>,
    /// The longest gap between successes since [`Floor::watch`].
    longest: Duration,
    last_ok: Instant,
    /// Failed initiator completions (the lost link's flushes).
    failed: usize,
    /// How long destroying each lost link's initiator objects took (on
    /// the deleted device).
    closes: Vec<Duration>,
}

impl Floor {
    /// Start watching: gaps count from now.
    fn watch(&mut self) {
        self.lost = None;
        self.switch = None;
        self.longest = Duration::ZERO;
        self.last_ok = Instant::now();
    }

    /// The loss of the active link: post on the other one at once, then
    /// destroy the lost one's initiator objects (the target's stay until
    /// the device is back: its device is not the one deleted).
    fn switch_over(&mut self) {
        if self.lost.is_none() {
            self.lost = Some((Instant::now(), self.succeeded));
        }
        let lost = self.active;
        self.active = 1 - lost;
        self.inflight = 0;
        self.post();
        if let Some(a) = self.links[lost].as_mut().and_then(|l| l.a.take()) {
            let t = Instant::now();
            a.close(&self.pa);
            self.closes.push(t.elapsed());
        }
    }

    /// Keep the window full on the active link.
    fn post(&mut self) {
        let Some(a) = self.links[self.active].as_ref().and_then(|l| l.a.as_ref()) else {
            return;
        };
        while self.inflight < WINDOW {
            let wr = SendWr {
                wr_id: self.succeeded as u64 + self.inflight as u64,
                op: SendOp::Send,
                sgl: a.sge(),
                signaled: true,
                solicited: false,
                fence: false,
            };
            if self.pa.post_send(a.qp, &[wr]).is_err() {
                return;
            }
            self.inflight += 1;
        }
    }

    /// One round: post, poll the initiator's active CQ, repost the
    /// target's consumed receives, read both providers' events, wait up to
    /// 1 ms when nothing happened.
    fn step(&mut self) {
        self.post();
        let mut busy = false;
        let mut lost = false;
        let active = self.links[self.active].as_ref();
        if let Some((a, dev)) = active.and_then(|l| Some((l.a.as_ref()?, &l.dev))) {
            self.wcs.clear();
            if let Ok(n) = self.pa.poll_cq(a.cq, 4 * WINDOW, &mut self.wcs) {
                busy |= n > 0;
            }
            let (id, ctx) = (a.id, a.ctx);
            for wc in &self.wcs {
                if wc.status == WcStatus::Success {
                    self.inflight = self.inflight.saturating_sub(1);
                    self.succeeded += 1;
                    let now = Instant::now();
                    self.longest = self.longest.max(now - self.last_ok);
                    self.last_ok = now;
                    if let (Some((at, _)), None) = (self.lost, self.switch) {
                        self.switch = Some(at.elapsed());
                    }
                } else {
                    self.failed += 1;
                    lost = true;
                }
            }
            while let Some(ev) = self.pa.poll_event() {
                busy = true;
                lost |= match ev {
                    Event::Device(d) => {
                        matches!(
                            d.kind,
                            DeviceEventKind::Removed
                                | DeviceEventKind::Fatal
                                | DeviceEventKind::PortDown
                        ) && *dev == d.device.id
                    }
                    Event::Cm(c) => {
                        c.id == id
                            && matches!(
                                c.kind,
                                CmEventKind::DeviceRemoval | CmEventKind::Disconnected
                            )
                    }
                    Event::Async { ctx: c, .. } => c == ctx,
                    Event::CqReady(_) => false,
                };
            }
        }
        for l in self.links.iter().flatten() {
            self.wcs.clear();
            if self.pb.poll_cq(l.b.cq, 4 * RECVS, &mut self.wcs).is_ok() {
                self.again.clear();
                self.again.extend(
                    self.wcs
                        .iter()
                        .filter(|wc| wc.status == WcStatus::Success)
                        .map(|wc| RecvWr {
                            wr_id: wc.wr_id,
                            sgl: l.b.sge(),
                        }),
                );
                busy |= !self.wcs.is_empty();
                if !self.again.is_empty() {
                    self.pb
                        .post_recv(l.b.qp, &self.again)
                        .expect("repost receives");
                }
            }
        }
        while self.pb.poll_event().is_some() {}
        if lost && self.lost.is_none() {
            self.switch_over();
            busy = true;
        }
        if !busy {
            self.pa.wait(Some(self.pa.now() + Duration::from_millis(1)));
        }
    }

    /// Run rounds for `d`.
    fn pump(&mut self, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.step();
        }
    }
}

/// `RELINK_VERBS_STANDBY_CYCLES` switches (default 8) of a raw program
/// from a lost connection to a spare one, alternating between the pairs;
/// the `RESULT raw_floor_of_a_standby_switch` line has the stall, the
/// switch and the quiet gap (p50, p99).
#[test]
fn raw_floor_of_a_standby_switch() {
    let env = env_or_skip!(need_second_pair);
    let _lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    env.restore().expect("restoring the host's devices");
    let cycles: usize = env_or("RELINK_VERBS_STANDBY_CYCLES", 8);
    let (a2, b2) = env.second.clone().expect("checked");
    let (listen, _) = two_pairs(&env);
    let pairs = [
        (
            env.init.addr,
            SocketAddr::new(env.target.addr, listen.port()),
            env.init.device.clone(),
            env.init.netdev.clone(),
        ),
        (
            a2.addr,
            SocketAddr::new(b2.addr, listen.port()),
            a2.device.clone(),
            a2.netdev.clone(),
        ),
    ];
    let pa = provider(env.init.addr).expect("the initiator's provider");
    let pb = provider(env.target.addr).expect("the target's provider");
    let listener = pb.cm_create_id().expect("cm_create_id");
    pb.cm_bind(listener, listen).expect("cm_bind");
    pb.cm_listen(listener, 16).expect("cm_listen");
    let links = [0, 1].map(|i| Some(connect(&pa, &pb, listener, pairs[i].0, pairs[i].1)));
    let mut f = Floor {
        pa: pa.clone(),
        pb: pb.clone(),
        links,
        active: 0,
        inflight: 0,
        succeeded: 0,
        wcs: Vec::new(),
        again: Vec::new(),
        lost: None,
        switch: None,
        longest: Duration::ZERO,
        last_ok: Instant::now(),
        failed: 0,
        closes: Vec::new(),
    };
    f.pump(Duration::from_millis(500));
    assert!(f.succeeded > 0, "no SEND completed on the first pair");
    let (mut stalls, mut switches, mut quiet, mut seen) = (vec![], vec![], vec![], vec![]);
    let mut live_closes = Vec::new();
    for cycle in 1..=cycles {
        f.watch();
        f.pump(SETTLE);
        quiet.push(f.longest);
        let gone = f.active;
        let (_, _, dev, netdev) = &pairs[gone];
        f.watch();
        let started = Instant::now();
        let mut child: Child = Command::new("rdma")
            .args(["link", "delete", dev])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("run rdma link delete");
        // Until the switch, then SETTLE of traffic on the other link.
        let by = started + RESUME_TIMEOUT;
        while f.switch.is_none() {
            assert!(
                Instant::now() < by,
                "cycle {cycle}: no completion on the spare link within {RESUME_TIMEOUT:?} \
                 of deleting {dev} (loss seen: {:?})",
                f.lost.map(|(at, _)| at - started)
            );
            f.step();
        }
        f.pump(SETTLE);
        stalls.push(f.longest);
        switches.push(f.switch.expect("switched"));
        seen.push(f.lost.expect("lost").0 - started);
        let status = child.wait().expect("rdma link delete");
        assert!(status.success(), "rdma link delete {dev}: {status}");
        // The lost link's target end goes; the device comes back and a new
        // spare link is made on it (not measured).
        if let Some(l) = f.links[gone].take() {
            let t = Instant::now();
            l.b.close(&pb);
            live_closes.push(t.elapsed());
        }
        rdma(&["link", "add", dev, "type", "rxe", "netdev", netdev]);
        device_added(&pa, dev);
        f.links[gone] = Some(connect(&pa, &pb, listener, pairs[gone].0, pairs[gone].1));
    }
    let succeeded = f.succeeded;
    for l in f.links.iter_mut().filter_map(Option::take) {
        if let Some(a) = l.a {
            a.close(&pa);
        }
        l.b.close(&pb);
    }
    let _ = pb.cm_destroy_id(listener);
    let note = format!(
        "stall p50 {:.1} ms, p99 {:.1} ms (longest gap in 300 ms without a fault p50 {:.1} ms, \
         p99 {:.1} ms); switch p50 {:.2} ms, p99 {:.2} ms; delete to the loss seen p50 {:.1} ms; \
         destroying a connection's objects p50 {:.2} ms on the deleted device (in the stall), \
         {:.2} ms on the live one (the target's, after it)",
        pct_ms(&stalls, 0.5),
        pct_ms(&stalls, 0.99),
        pct_ms(&quiet, 0.5),
        pct_ms(&quiet, 0.99),
        pct_ms(&switches, 0.5),
        pct_ms(&switches, 0.99),
        pct_ms(&seen, 0.5),
        pct_ms(&f.closes, 0.5),
        pct_ms(&live_closes, 0.5),
    );
    println!(
        "RESULT raw_floor_of_a_standby_switch: {cycles} cycles, {succeeded} SENDs, {} flushed; {note}",
        f.failed
    );
    println!("RELINK_VM_NOTE: raw standby switch, {note}");
}
