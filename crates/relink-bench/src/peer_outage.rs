//! A peer-side outage across two processes on the TCP soft fabric: the
//! stall the initiator's application sees when the *target's* device is
//! removed and added back `D` later, and how many connection requests the
//! initiator sends to the absent peer meanwhile.
//!
//! [`run`] starts the target's process (a bench binary given
//! [`SERVE_ARG`](crate::scale::tcp::SERVE_ARG), which runs
//! [`scale::tcp::serve`](crate::scale::tcp::serve)), connects `n` sessions
//! with the policy under test and keeps [`WINDOW`] messages of
//! [`MESSAGE_LEN`] bytes in flight on the first (the others are idle). Each cycle lets the traffic run, removes
//! the target's `soft0` through the target's registry (as `relink
//! soft-device --dir <target> remove soft0` does; the target's host sees it
//! at its next scan, every 20 ms), waits `D`, adds the device back with the
//! same address and waits until the session resumed and carried traffic
//! again (all `n` sessions). A cycle's **stall** is the longest gap between
//! two completions of the first session's messages; the figure is the stall
//! minus `D` (the time past the device's return). The **requests** of a
//! cycle are the attempts all sessions started between the removal and the
//! re-add (each sends one connection request; `SessionEvent::Recovering`).

use std::net::SocketAddr;
use std::path::Path as FsPath;
use std::time::{Duration, Instant};

use relink::{Node, Output, Path, SessionEvent, SessionHandle, SessionOptions, State};
use relink_core::policy::Policy;
use relink_sim::{TcpHosts, INITIATOR, TARGET};
use relink_soft::Registry;
use serde::Serialize;

use crate::scale::tcp::Target;
use crate::scale::{scale_options, MESSAGE_LEN};
use crate::session::{stamp_bytes, PORT};

/// Messages in flight on the session at a time.
pub const WINDOW: usize = 8;
/// Traffic before each removal (and after each resume).
const SETTLE: Duration = Duration::from_millis(200);
/// The longest any phase may take (a hang is an error, not a figure).
const LIMIT: Duration = Duration::from_secs(60);
/// The longest a node's `wait` sleeps before the loop looks again.
const TICK: Duration = Duration::from_millis(1);

/// One cycle: the target's device away for `outage`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cycle {
    /// How long the target's device was away, seconds (measured: removal
    /// to re-add).
    pub outage_s: f64,
    /// The longest gap between two completions, seconds.
    pub stall_s: f64,
    /// `stall_s - outage_s`: the stall past the device's return.
    pub past_return_s: f64,
    /// Attempts (connection requests) the initiator's sessions started
    /// while the device was away.
    pub requests: u64,
}

/// The cycles of one (policy, outage) series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutageSeries {
    /// The policy's name in the report.
    pub policy: String,
    /// Sessions to the target (traffic on the first).
    pub sessions: usize,
    /// The outage asked for, seconds.
    pub outage_s: f64,
    /// Each cycle.
    pub cycles: Vec<Cycle>,
}

impl OutageSeries {
    /// The median of `f` over the cycles.
    pub fn median(&self, f: impl Fn(&Cycle) -> f64) -> f64 {
        let v: Vec<f64> = self.cycles.iter().map(f).collect();
        crate::quantile(&v, 0.5)
    }

    /// The largest `f` over the cycles.
    pub fn max(&self, f: impl Fn(&Cycle) -> f64) -> f64 {
        self.cycles.iter().map(f).fold(f64::MIN, f64::max)
    }

    /// Requests per second of outage, over all cycles.
    pub fn requests_per_s(&self) -> f64 {
        let requests: u64 = self.cycles.iter().map(|c| c.requests).sum();
        let away: f64 = self.cycles.iter().map(|c| c.outage_s).sum();
        requests as f64 / away.max(f64::MIN_POSITIVE)
    }
}

/// The initiator's side of one run: a node, its session, and the times of
/// the session's completions.
struct Client {
    node: Node,
    session: SessionHandle,
    payload: [u8; MESSAGE_LEN],
    in_flight: usize,
    refill: bool,
    completed: u64,
    completions: Vec<Instant>,
    attempts: Vec<Instant>,
    resumed: usize,
}

impl Client {
    /// Keep the window full, wait a tick, take the outputs.
    fn step(&mut self) {
        while self.refill && self.in_flight < WINDOW {
            self.node
                .send(self.session, &self.payload)
                .expect("send on the session");
            self.in_flight += 1;
        }
        let _ = self.node.wait_for(TICK);
        while let Some(out) = self.node.poll_output() {
            match out {
                Output::Completion {
                    session,
                    completion,
                } => {
                    assert_eq!(session, self.session, "only the first session sends");
                    assert!(
                        completion.outcome.is_success(),
                        "a message failed: {completion:?}"
                    );
                    self.in_flight -= 1;
                    self.completed += 1;
                    self.completions.push(Instant::now());
                }
                Output::Event { event, .. } => match event {
                    SessionEvent::Recovering { .. } => self.attempts.push(Instant::now()),
                    SessionEvent::Resumed { .. } => self.resumed += 1,
                    SessionEvent::GaveUp | SessionEvent::PeerLost { .. } => {
                        panic!("the session ended: {event:?}")
                    }
                    _ => {}
                },
                other => panic!("unexpected output of the initiator: {other:?}"),
            }
        }
    }

    /// Step until `done` holds.
    fn until(&mut self, what: &str, mut done: impl FnMut(&Client) -> bool) {
        let limit = Instant::now() + LIMIT;
        while !done(self) {
            assert!(Instant::now() < limit, "{what}: not within {LIMIT:?}");
            self.step();
        }
    }

    /// Step for `d`.
    fn run_for(&mut self, d: Duration) {
        let end = Instant::now() + d;
        self.until("traffic", |_| Instant::now() >= end);
    }
}

/// `cycles` outages of the target's device of each length in `outages`,
/// with `n` sessions of policy `policy` (named `name` in the report) from
/// this process to a target in a process of its own (`exe`
/// [`SERVE_ARG`](crate::scale::tcp::SERVE_ARG)), traffic on the first;
/// one series per outage length. The target's count of deliveries is
/// checked at the end.
///
/// # Panics
/// If the target cannot be started, the session cannot be set up or ends,
/// a message fails, or a phase takes more than a minute.
pub fn run(
    exe: &FsPath,
    name: &str,
    policy: Policy,
    n: usize,
    outages: &[Duration],
    cycles: usize,
) -> Vec<OutageSeries> {
    assert!(n >= 1, "at least one session");
    let hosts = TcpHosts::new("peer-outage");
    let target = Target::start(exe, &hosts.dir(TARGET));
    let mut node = Node::new(hosts.host(INITIATOR));
    let peer = SocketAddr::new(hosts.addr(TARGET), PORT);
    let mut options: SessionOptions = scale_options();
    options.policy = policy;
    let all: Vec<SessionHandle> = (0..n)
        .map(|_| {
            node.connect(vec![Path { local: None, peer }], options.clone())
                .expect("connect")
        })
        .collect();
    let session = all[0];
    let mut payload = [0u8; MESSAGE_LEN];
    stamp_bytes(&mut payload, 0);
    let mut c = Client {
        node,
        session,
        payload,
        in_flight: 0,
        refill: true,
        completed: 0,
        completions: Vec::new(),
        attempts: Vec::new(),
        resumed: 0,
    };
    let limit = Instant::now() + LIMIT;
    while all
        .iter()
        .any(|s| c.node.state(*s) != Some(State::Established))
    {
        assert!(Instant::now() < limit, "connect: not within {LIMIT:?}");
        let _ = c.node.wait_for(TICK);
        while c.node.poll_output().is_some() {}
    }
    let registry = Registry::open(hosts.dir(TARGET)).expect("the target's registry");
    let addr = relink_sim::tcp::ADDRS[TARGET]
        .parse::<relink_fabric::IpNet>()
        .expect("constant");
    let mut out = Vec::new();
    for &outage in outages {
        let mut series = OutageSeries {
            policy: name.into(),
            sessions: n,
            outage_s: outage.as_secs_f64(),
            cycles: Vec::with_capacity(cycles),
        };
        for _ in 0..cycles {
            c.run_for(SETTLE);
            c.completions.clear();
            c.attempts.clear();
            let resumed = c.resumed;
            let removed = Instant::now();
            registry.remove("soft0").expect("remove the target's soft0");
            c.run_for(outage);
            let added = Instant::now();
            registry
                .add("soft0", vec![addr], None, None)
                .expect("add the target's soft0 back");
            c.until("resume", |c| c.resumed >= resumed + n);
            c.run_for(SETTLE);
            let stall = c
                .completions
                .windows(2)
                .map(|w| w[1] - w[0])
                .max()
                .unwrap_or_default()
                .max(
                    c.completions
                        .first()
                        .map_or(Duration::ZERO, |f| *f - removed),
                );
            let away = added - removed;
            series.cycles.push(Cycle {
                outage_s: away.as_secs_f64(),
                stall_s: stall.as_secs_f64(),
                past_return_s: stall.as_secs_f64() - away.as_secs_f64(),
                requests: c
                    .attempts
                    .iter()
                    .filter(|&&t| t >= removed && t < added)
                    .count() as u64,
            });
        }
        out.push(series);
    }
    c.refill = false;
    c.until("drain", |c| c.in_flight == 0);
    let completed = c.completed;
    drop(c);
    let delivered = target.finish();
    assert_eq!(delivered, completed, "each message delivered once");
    drop(hosts);
    out
}
