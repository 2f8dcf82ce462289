//! relink sessions with traffic on real verbs (rdma-core) across real device
//! loss: `rdma link delete` / `rdma link add` of the initiator's device, of
//! the target's, of both; a replacement device on another netdev that takes
//! over the address (a new GUID); failover to a second device pair while the
//! first is deleted; netdev down/up; 20 unplug/replug cycles in a row; the
//! same across unplug/replug with both sides receiving through a shared
//! receive queue and the target's region exposed through a type 2 memory
//! window — and how a session ends: an admin close on either side, with traffic in
//! flight, makes the peer close at once (its goodbye leaves before the
//! disconnect, which on rxe would flush it) — and planned outages: a drain
//! of either side's device before `rdma link delete`, next to an unplanned
//! failover in the same run, and a suspend across a delete/add — and an
//! unplanned failover with and without a hot standby, in one run. Next to
//! them, two programs with no relink measure the floors relink is compared
//! with: a reconnection from nothing once the device is back (`floor.rs`)
//! and a switch to a spare connection under traffic (`switch_floor.rs`).
//!
//! Every scenario runs the checked workload of the simulation suite
//! ([`relink_sim::workload`]: messages, writes, reads, fetch-and-adds,
//! at most 16 in flight) through the faults and asserts what a user relies
//! on: every operation completed exactly once, every message delivered
//! exactly once, in order and intact, every written block holding its last
//! write, the counter within the adds that may have happened, the same
//! session (one on the target) — and every `rdma link delete` returning
//! while both nodes keep running, which proves relink released the device
//! (on rxe, one open context keeps it blocked: a delete that has not
//! returned after [`DELETE_LIMIT`], 20 s, is relink holding the device).
//! What must hold on a busy machine is asserted; how fast it went is a
//! figure: each scenario prints a `RESULT` line with its figures (the
//! longest delete among them); recovery latency is measured from the
//! moment `rdma link add` (or `ip link set up`) is started to the first
//! successful completion after it. The waits that keep a hang from lasting
//! forever (a session that never resumes, a command that never returns)
//! are bounded generously, tens of seconds for what takes milliseconds.
//!
//! Settings (environment; `DEV@ADDR[@NETDEV]`):
//!
//! ```text
//! RELINK_VERBS_INITIATOR=rxe0@10.10.0.1@veth0   the initiator's device
//! RELINK_VERBS_TARGET=rxe1@10.10.0.2@veth1      the target's device
//! RELINK_VERBS_SPARE=rxe2@veth2                 replacement: a device name and a spare netdev
//! RELINK_VERBS_SECOND_INITIATOR=rxe3@10.10.1.1@veth3   failover: a second pair,
//! RELINK_VERBS_SECOND_TARGET=rxe4@10.10.1.2@veth4      already added
//! RELINK_VERBS_ROUTE_TABLES=102,101             policy-routing tables holding each side's
//!                                               route to the other (re-pointed when an
//!                                               address moves or a netdev comes back up)
//! RELINK_VERBS_PREFIX=24                        prefix length of the addresses
//! RELINK_VERBS_CYCLES=20                        unplug/replug cycles
//! RELINK_VERBS_DRAIN_CYCLES=5                   drain-then-delete / failover cycles
//! RELINK_VERBS_STANDBY_CYCLES=8                 failovers without, then with, a standby
//! RELINK_LOG=relink=debug,relink_verbs=debug    tracing filter (default: warn)
//! ```
//!
//! The VM tier (`tests/vm/run.sh`, group `sessions`) sets all of them and
//! runs one scenario per step. The test is built only with the `rdma`
//! feature; without the devices or settings, a scenario reports `SKIPPED:
//! <scenario> on verbs: <why>` through relink-skip and returns — never a
//! silent pass.

use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use relink::{Node, Path, Policy, PollMode, SessionEvent, SessionHandle, State};
use relink_fabric::{Guid, Provider};
use relink_sim::sim::{INITIATOR, TARGET};
use relink_sim::workload::check_completions;
use relink_sim::workload::{options, Workload, WINDOW_A};
use relink_testkit::verbs_rig::Topology;
use relink_verbs::{VerbsConfig, VerbsProvider};

/// How long `rdma link delete` may take, with both nodes running, before
/// the scenario fails: the kernel's delete waits until every user closed
/// the device (on rxe one open context keeps it blocked), so one that
/// never returns is relink holding the device — a bug. A slow one is not:
/// the delete takes milliseconds to a second, longer on a loaded machine,
/// and relink releases a lost device within a poll round or two (its
/// longest is the `RESULT` line's "longest delete" figure). 20 s is the
/// bound of a hang, not of speed; the guest's hung-task watchdog (20 s)
/// reports a delete blocked that long too.
const DELETE_LIMIT: Duration = Duration::from_secs(20);
/// How long a device command may take before the scenario gives up (a
/// hang's bound).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a session may take to come up, or to resume after its device
/// is back (a hang's bound: it takes milliseconds to a second).
const RESUME_TIMEOUT: Duration = Duration::from_secs(30);
/// Operations in flight at most.
const WINDOW: usize = 16;
/// A node's poll round this long is reported on stderr (with its time).
const SLOW_POLL: Duration = Duration::from_millis(2);

/// One scenario at a time: they act on the host's devices.
static LOCK: Mutex<()> = Mutex::new(());
static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// Report the running scenario as skipped.
fn skip(why: &str) {
    let name = std::thread::current()
        .name()
        .map(|n| n.rsplit("::").next().unwrap_or(n).to_string())
        .unwrap_or_else(|| "a scenario".to_string());
    relink_skip::skip_test(&format!("{name} on verbs"), &relink_skip::Skip::new(why));
}

/// The settings, or a loud skip of the calling scenario.
macro_rules! env_or_skip {
    ($need:expr) => {
        match Topology::from_env().and_then(|e| {
            let need: fn(&Topology) -> Result<(), String> = $need;
            need(&e).map(|()| e)
        }) {
            Ok(e) => e,
            Err(why) => {
                skip(&why);
                return;
            }
        }
    };
}

fn need_nothing(_: &Topology) -> Result<(), String> {
    Ok(())
}

/// Two nodes, each on its own [`VerbsProvider`] (two hosts sharing this
/// kernel), one session between them, and the checked workload.
struct Duo {
    env: Topology,
    pa: Arc<VerbsProvider>,
    a: Node,
    b: Node,
    w: Workload,
    s: SessionHandle,
    traffic: bool,
    kind: u64,
    /// The initiator's session events.
    events: Vec<SessionEvent>,
    /// The target's session events.
    target_events: Vec<SessionEvent>,
    /// `Resumed` events among them.
    resumed: usize,
    deletes: Vec<(String, Duration)>,
    resumes: Vec<(String, Duration)>,
    problems: Vec<String>,
    /// Set by [`Duo::mark`]: when a device came back, and the resumes seen
    /// before.
    mark: Option<(Instant, usize)>,
    /// What the application sees around a planned or unplanned move
    /// ([`planned::Stall`]), while one is watched.
    stall: Option<planned::Stall>,
    /// Figures a scenario adds to its `RESULT` and note lines.
    notes: Vec<String>,
    started: Instant,
    /// Poll rounds of each node so far, and those of [`SLOW_POLL`] or
    /// more: how many, and their time.
    rounds: u64,
    slow_rounds: [(u64, Duration); 2],
    _lock: MutexGuard<'static, ()>,
}

fn provider(source: IpAddr) -> Result<Arc<VerbsProvider>, String> {
    VerbsProvider::with_config(VerbsConfig {
        default_source: Some(source),
        ..VerbsConfig::default()
    })
    .map(Arc::new)
    .map_err(|e| e.to_string())
}

impl Duo {
    /// The target listens on `listen`; the initiator connects over
    /// `paths`; traffic starts.
    fn start(env: Topology, listen: SocketAddr, paths: Vec<Path>) -> Duo {
        Duo::start_with(
            env,
            listen,
            paths,
            |_| options(INITIATOR, Policy::default()),
            |_| options(TARGET, Policy::default()),
        )
    }

    /// [`start`](Duo::start) with the sessions' options of each side made
    /// by `initiator` and `target` on that side's node.
    fn start_with(
        env: Topology,
        listen: SocketAddr,
        paths: Vec<Path>,
        initiator: impl FnOnce(&mut Node) -> relink::SessionOptions,
        target: impl FnOnce(&mut Node) -> relink::SessionOptions,
    ) -> Duo {
        let lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("RELINK_LOG")
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_writer(std::io::stderr)
            .with_timer(tracing_subscriber::fmt::time::uptime())
            .try_init();
        env.restore().expect("restoring the host's devices");
        let pa = provider(env.init.addr).expect("initiator provider");
        let pb = provider(env.target.addr).expect("target provider");
        eprintln!(
            "device watchers: initiator {:?}, target {:?}",
            pa.watch_backend(),
            pb.watch_backend()
        );
        let mut a = Node::new(pa.clone());
        let mut b = Node::new(pb);
        let target_opts = target(&mut b);
        b.listen(listen, target_opts).expect("listen");
        let initiator_opts = initiator(&mut a);
        let s = a.connect(paths, initiator_opts).expect("connect");
        let mut w = Workload::new("A", 1, WINDOW_A, &a, s, None);
        if env.init.device.starts_with("rxe") && env.target.device.starts_with("rxe") {
            w.excuse_unwritten_atomic_results(
                "Soft-RoCE completes a FETCH_ADD whose response it replayed after a lost \
                 packet without writing the result: conformance case atomics_in_flight, \
                 relink_testkit::Quirk::AtomicResultLostOnReplay",
            );
        }
        let mut duo = Duo {
            env,
            pa,
            a,
            b,
            w,
            s,
            traffic: false,
            kind: 0,
            events: Vec::new(),
            target_events: Vec::new(),
            resumed: 0,
            deletes: Vec::new(),
            resumes: Vec::new(),
            problems: Vec::new(),
            mark: None,
            stall: None,
            notes: Vec::new(),
            started: Instant::now(),
            rounds: 0,
            slow_rounds: [(0, Duration::ZERO); 2],
            _lock: lock,
        };
        let up = duo.pump_until(RESUME_TIMEOUT, |d| {
            d.a.state(d.s) == Some(State::Established) && d.w.target.is_some()
        });
        assert!(
            up,
            "session not established after {RESUME_TIMEOUT:?}: {:?}",
            duo.a.state(duo.s)
        );
        duo.traffic = true;
        duo
    }

    /// One round: submit within the window, poll both nodes, collect,
    /// wait a little when idle.
    fn step(&mut self) {
        if self.traffic {
            let mut n = 0;
            while self.w.submitted() - self.w.completed() < WINDOW && n < 4 {
                let k = self.kind;
                let r = match k % 8 {
                    0 => self.w.write(&mut self.a),
                    1 => self.w.fetch_add(&mut self.a),
                    2 => self.w.read(&mut self.a),
                    _ => self.w.send(&mut self.a),
                };
                self.kind += 1;
                if r.is_none() {
                    break;
                }
                n += 1;
            }
        }
        let t0 = Instant::now();
        let mut busy = self.a.poll();
        let t1 = Instant::now();
        busy |= self.b.poll();
        let t2 = Instant::now();
        self.rounds += 1;
        for (i, (who, took)) in [("initiator", t1 - t0), ("target", t2 - t1)]
            .into_iter()
            .enumerate()
        {
            if took >= SLOW_POLL {
                self.slow_rounds[i].0 += 1;
                self.slow_rounds[i].1 += took;
                eprintln!(
                    "  [{:>8.3}s] {who}: a poll round took {took:.2?}",
                    self.secs()
                );
            }
        }
        self.w.collect_from(&mut self.a, &mut self.b);
        while let Some(ev) = self.a.poll_event(self.s) {
            eprintln!("  [{:>8.3}s] initiator: {ev:?}", self.secs());
            if let (SessionEvent::DeviceLost { .. }, Some(st)) = (&ev, &mut self.stall) {
                st.on_lost(self.w.succeeded());
            }
            if let SessionEvent::Resumed {
                replayed, device, ..
            } = &ev
            {
                self.resumed += 1;
                if let Some(st) = &mut self.stall {
                    st.on_resumed(*replayed, device.as_ref());
                }
            }
            self.events.push(ev);
        }
        if let Some(t) = self.w.target {
            while let Some(ev) = self.b.poll_event(t) {
                eprintln!("  [{:>8.3}s] target:    {ev:?}", self.secs());
                self.target_events.push(ev);
            }
        }
        if let Some(st) = &mut self.stall {
            st.observe(self.w.succeeded());
        }
        // A busy-polling pair arms its CQs before it sleeps (both: `&`).
        let ready = self.a.poll_mode() == PollMode::Events
            || (self.a.prepare_to_sleep() & self.b.prepare_to_sleep());
        if !busy && ready {
            // The target's provider is polled again within 1 ms.
            let now = self.pa.now();
            let mut until = now + Duration::from_millis(1);
            if let Some(d) = self.a.next_deadline() {
                until = until.min(d);
            }
            self.pa.wait(Some(until.max(now)));
        }
    }

    fn secs(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn pump_until(&mut self, timeout: Duration, mut cond: impl FnMut(&mut Duo) -> bool) -> bool {
        let end = Instant::now() + timeout;
        loop {
            self.step();
            if cond(self) {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
        }
    }

    fn pump(&mut self, d: Duration) {
        self.pump_until(d, |_| false);
    }

    /// Run a command while both nodes keep running; its duration.
    fn command(&mut self, what: &str, cmd: &mut Command) -> Result<Duration, String> {
        self.command_within(what, cmd, COMMAND_TIMEOUT)
    }

    /// [`command`](Self::command), given up on after `limit`.
    fn command_within(
        &mut self,
        what: &str,
        cmd: &mut Command,
        limit: Duration,
    ) -> Result<Duration, String> {
        eprintln!("  [{:>8.3}s] + {what}", self.secs());
        let started = Instant::now();
        let mut child: Child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run `{what}`: {e}"))?;
        let mut status = None;
        self.pump_until(limit, |_| {
            status = child.try_wait().ok().flatten();
            status.is_some()
        });
        let took = started.elapsed();
        let Some(st) = status else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("`{what}` has not returned after {took:?}"));
        };
        eprintln!("  [{:>8.3}s]   took {took:.2?} ({st})", self.secs());
        if st.success() {
            Ok(took)
        } else {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            Err(format!("`{what}` failed ({st}): {}", err.trim()))
        }
    }

    /// `rdma link delete DEV`, timed (a figure); one that has not returned
    /// after [`DELETE_LIMIT`] while both nodes kept running is a failure:
    /// relink kept the device open.
    fn delete(&mut self, dev: &str) {
        match self.command_within(
            &format!("rdma link delete {dev}"),
            Command::new("rdma").args(["link", "delete", dev]),
            DELETE_LIMIT,
        ) {
            Ok(took) => self.deletes.push((dev.to_string(), took)),
            Err(e) => panic!("{e}: relink did not release {dev}"),
        }
    }

    /// Remember now and the successes so far (the start of a recovery
    /// latency).
    fn mark(&mut self) {
        self.mark = Some((Instant::now(), self.resumed_count()));
    }

    fn resumed_count(&self) -> usize {
        self.resumed
    }

    /// `rdma link add DEV type rxe netdev NETDEV`, marked.
    fn add(&mut self, dev: &str, netdev: &str) {
        self.mark();
        let r = self.command(
            &format!("rdma link add {dev} type rxe netdev {netdev}"),
            Command::new("rdma").args(["link", "add", dev, "type", "rxe", "netdev", netdev]),
        );
        if let Err(e) = r {
            panic!("{e}");
        }
    }

    /// Run until the session resumed after the mark and then completed an
    /// operation successfully; record the latency under `label`.
    fn wait_resumed(&mut self, label: &str) -> Duration {
        match self.try_wait_resumed(label, RESUME_TIMEOUT) {
            Some(took) => took,
            None => panic!(
                "{label}: no successful completion {RESUME_TIMEOUT:?} after the device came \
                 back (initiator state {:?})",
                self.a.state(self.s)
            ),
        }
    }

    /// [`wait_resumed`](Self::wait_resumed) that gives up after `limit`.
    fn try_wait_resumed(&mut self, label: &str, limit: Duration) -> Option<Duration> {
        let (t, resumes) = self.mark.take().expect("mark first");
        let mut ok_before = None;
        if !self.pump_until(limit, |d| {
            if ok_before.is_none() && d.resumed_count() > resumes {
                ok_before = Some(d.w.succeeded());
            }
            ok_before.is_some_and(|n| d.w.succeeded() > n)
        }) {
            return None;
        }
        let took = t.elapsed();
        eprintln!(
            "  [{:>8.3}s] {label}: resumed after {took:.2?}",
            self.secs()
        );
        self.resumes.push((label.to_string(), took));
        Some(took)
    }

    /// The device names the initiator's session resumed on, in order.
    fn resumed_on(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| match e {
                SessionEvent::Resumed { device, .. } => device.as_ref().map(|d| d.name.clone()),
                _ => None,
            })
            .collect()
    }

    /// Stop the traffic, drain, check everything, print the result line,
    /// fail on any problem.
    fn finish(mut self, scenario: &str) {
        self.traffic = false;
        let drained = self.pump_until(Duration::from_secs(30), |d| {
            d.w.completed() == d.w.submitted()
        });
        if !drained {
            self.problems.push(format!(
                "{} of {} operations still outstanding 30 s after the traffic stopped",
                self.w.submitted() - self.w.completed(),
                self.w.submitted()
            ));
        }
        self.problems.extend(self.w.check_survived_on(&self.b));
        let target_sessions = self.b.sessions().len();
        if target_sessions != 1 {
            self.problems.push(format!(
                "the target has {target_sessions} sessions (one session must survive)"
            ));
        }
        let (sent, delivered) = self.w.messages();
        let (ok, failed, indeterminate) = self.w.outcome_counts();
        let max_delete = self.deletes.iter().map(|d| d.1).max().unwrap_or_default();
        let notes: String = self.notes.iter().map(|n| format!("; {n}")).collect();
        let mut lat: Vec<Duration> = self.resumes.iter().map(|r| r.1).collect();
        lat.sort();
        let pct = |p: f64| -> String {
            if lat.is_empty() {
                return "-".into();
            }
            let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
            format!("{:.0} ms", lat[i].as_secs_f64() * 1e3)
        };
        println!(
            "RESULT {scenario}: {} ops ({ok} ok, {failed} failed, {indeterminate} indeterminate), \
             messages {sent} sent / {delivered} delivered, {} problems; {} deletes, longest {:.0} ms; \
             {} recoveries, p50 {} p99 {} max {}{notes}",
            self.w.submitted(),
            self.problems.len(),
            self.deletes.len(),
            max_delete.as_secs_f64() * 1e3,
            lat.len(),
            pct(0.5),
            pct(0.99),
            pct(1.0),
        );
        // A failure's first problem goes into the note too: the summary
        // table of a CI report keeps notes when it cuts the steps' output.
        let first = self.problems.first().map(|p| {
            // One line, no `|` (the VM tier's result records split on it).
            let p: String = p
                .chars()
                .take(240)
                .map(|c| if c == '|' || c.is_control() { ' ' } else { c })
                .collect();
            format!("{} problems, the first: {p}", self.problems.len())
        });
        println!(
            "RELINK_VM_NOTE: {} ops, {sent} msgs, lost/dup/corrupt {}; longest delete {:.2}s; recovery p50 {} p99 {}{notes}",
            self.w.submitted(),
            first.as_deref().unwrap_or("0/0/0"),
            max_delete.as_secs_f64(),
            pct(0.5),
            pct(0.99),
        );
        let _ = self.a.close(self.s);
        self.pump(Duration::from_millis(200));
        let problems = std::mem::take(&mut self.problems);
        let env = self.env.clone();
        drop(self);
        if let Err(e) = env.restore() {
            eprintln!("restoring the host's devices: {e}");
        }
        assert!(
            problems.is_empty(),
            "{scenario}: {} problems:\n  {}",
            problems.len(),
            problems.join("\n  ")
        );
    }
}

fn main_pair(env: &Topology, port: u16) -> (SocketAddr, Vec<Path>) {
    let peer = SocketAddr::new(env.target.addr, port);
    (
        peer,
        vec![Path {
            local: Some(env.init.addr),
            peer,
        }],
    )
}

/// The number in environment variable `var`, or `default` if it is unset
/// or not a number (the scenarios' cycle counts, the first port).
fn env_or<T: std::str::FromStr>(var: &str, default: T) -> T {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn port() -> u16 {
    let base: u16 = env_or("RELINK_VERBS_PORT", 19_515);
    base.wrapping_add(NEXT_PORT.fetch_add(1, Ordering::SeqCst))
}

fn guid_of(p: &VerbsProvider, dev: &str) -> Option<Guid> {
    p.devices()
        .into_iter()
        .find(|d| d.id.name == dev)
        .map(|d| d.node_guid)
}

#[test]
fn initiator_device_unplug_replug() {
    let env = env_or_skip!(need_nothing);
    let (listen, paths) = main_pair(&env, port());
    let mut d = Duo::start(env.clone(), listen, paths);
    d.pump(Duration::from_millis(500));
    d.delete(&env.init.device);
    d.pump(Duration::from_millis(300));
    d.add(&env.init.device, &env.init.netdev);
    d.wait_resumed("initiator device back");
    d.pump(Duration::from_millis(500));
    d.finish("initiator_device_unplug_replug");
}

#[test]
fn target_device_unplug_replug() {
    let env = env_or_skip!(need_nothing);
    let (listen, paths) = main_pair(&env, port());
    let mut d = Duo::start(env.clone(), listen, paths);
    d.pump(Duration::from_millis(500));
    d.delete(&env.target.device);
    d.pump(Duration::from_millis(300));
    d.add(&env.target.device, &env.target.netdev);
    d.wait_resumed("target device back");
    d.pump(Duration::from_millis(500));
    d.finish("target_device_unplug_replug");
}

#[test]
fn both_devices_unplug_replug() {
    let env = env_or_skip!(need_nothing);
    let (listen, paths) = main_pair(&env, port());
    let d = Duo::start(env.clone(), listen, paths);
    both_devices_out_and_back(d, &env, "both_devices_unplug_replug");
}

/// Traffic, both devices deleted, the target's added back and then the
/// initiator's, a resume, more traffic, the checks.
fn both_devices_out_and_back(mut d: Duo, env: &Topology, scenario: &str) {
    d.pump(Duration::from_millis(500));
    d.delete(&env.init.device);
    d.delete(&env.target.device);
    d.pump(Duration::from_millis(300));
    // The target's first (its listener must be back), then the
    // initiator's: the latency counts from the second add.
    d.add(&env.target.device, &env.target.netdev);
    d.mark = None;
    d.add(&env.init.device, &env.init.netdev);
    d.wait_resumed("both devices back");
    d.pump(Duration::from_millis(500));
    d.finish(scenario);
}

#[test]
fn replacement_device_same_address_new_guid() {
    let env = env_or_skip!(|e| match (&e.spare, &e.tables) {
        (Some(_), Some(_)) => Ok(()),
        _ => Err("needs RELINK_VERBS_SPARE=DEV@NETDEV and RELINK_VERBS_ROUTE_TABLES".into()),
    });
    let (spare, spare_nd) = env.spare.clone().expect("checked");
    let (listen, paths) = main_pair(&env, port());
    let mut d = Duo::start(env.clone(), listen, paths);
    let old_guid = guid_of(&d.pa, &env.init.device).expect("the initiator's device");
    d.pump(Duration::from_millis(500));
    d.delete(&env.init.device);
    // The address moves to the spare netdev; a new device there has a
    // new GUID (from the netdev's MAC).
    env.move_address(env.init.addr, &env.init.netdev, &spare_nd)
        .expect("moving the address");
    env.routes(&spare_nd, &env.target.netdev)
        .expect("re-pointing the routes");
    d.pump(Duration::from_millis(300));
    d.add(&spare, &spare_nd);
    d.wait_resumed("replacement device");
    let new_guid = guid_of(&d.pa, &spare).expect("the replacement device");
    if new_guid == old_guid {
        d.problems
            .push(format!("the replacement has the old GUID {old_guid}"));
    }
    if d.resumed_on().last() != Some(&spare) {
        d.problems.push(format!(
            "the session resumed on {:?}, not on the replacement {spare}",
            d.resumed_on()
        ));
    }
    d.pump(Duration::from_millis(500));
    // And back to the original device (another recovery).
    d.delete(&spare);
    env.move_address(env.init.addr, &spare_nd, &env.init.netdev)
        .expect("moving the address back");
    env.routes(&env.init.netdev, &env.target.netdev)
        .expect("re-pointing the routes");
    d.add(&env.init.device, &env.init.netdev);
    d.wait_resumed("original device again");
    d.pump(Duration::from_millis(500));
    eprintln!("GUIDs: original {old_guid}, replacement {new_guid}");
    d.finish("replacement_device_same_address_new_guid");
}

#[test]
fn failover_to_second_pair() {
    let env = env_or_skip!(|e| if e.second.is_some() {
        Ok(())
    } else {
        Err("needs RELINK_VERBS_SECOND_INITIATOR and RELINK_VERBS_SECOND_TARGET".into())
    });
    let (a2, b2) = env.second.clone().expect("checked");
    let port = port();
    let paths = vec![
        Path {
            local: Some(env.init.addr),
            peer: SocketAddr::new(env.target.addr, port),
        },
        Path {
            local: Some(a2.addr),
            peer: SocketAddr::new(b2.addr, port),
        },
    ];
    let listen: SocketAddr = match env.target.addr {
        IpAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], port)),
        IpAddr::V6(_) => SocketAddr::from(([0u16; 8], port)),
    };
    let mut d = Duo::start(env.clone(), listen, paths);
    d.pump(Duration::from_millis(500));
    // The latency of a failover counts from the start of the delete.
    d.mark();
    d.delete(&env.init.device);
    d.wait_resumed("failover to the second pair");
    if d.resumed_on().last() != Some(&a2.device) {
        d.problems.push(format!(
            "the session resumed on {:?}, not on the second pair's {}",
            d.resumed_on(),
            a2.device
        ));
    }
    d.pump(Duration::from_millis(500));
    d.add(&env.init.device, &env.init.netdev);
    d.mark = None;
    d.pump(Duration::from_millis(500));
    d.finish("failover_to_second_pair");
}

#[test]
fn netdev_down_up() {
    let env = env_or_skip!(need_nothing);
    let (listen, paths) = main_pair(&env, port());
    let mut d = Duo::start(env.clone(), listen, paths);
    d.pump(Duration::from_millis(500));
    let nd = env.init.netdev.clone();
    d.command(
        &format!("ip link set {nd} down"),
        Command::new("ip").args(["link", "set", &nd, "down"]),
    )
    .expect("netdev down");
    // A bounded wait (the port's event comes in milliseconds).
    let lost = d.pump_until(RESUME_TIMEOUT, |d| {
        d.a.state(d.s) != Some(State::Established)
    });
    if !lost {
        d.problems.push(format!(
            "the session did not notice {nd} going down in {RESUME_TIMEOUT:?}"
        ));
    }
    d.pump(Duration::from_millis(500));
    d.mark();
    // Up with its routes in one `ip` process (`Topology::up_with_routes`):
    // routes through a netdev are flushed when it goes down.
    let batch = std::env::temp_dir().join(format!("relink-netdev-up-{}.ip", std::process::id()));
    std::fs::write(
        &batch,
        env.up_with_routes(&nd, &env.init.netdev, &env.target.netdev),
    )
    .expect("write the ip batch");
    d.command(
        &format!("ip link set {nd} up, with its routes"),
        Command::new("ip").arg("-batch").arg(&batch),
    )
    .expect("netdev up");
    let _ = std::fs::remove_file(&batch);
    env.routes(&env.init.netdev, &env.target.netdev)
        .expect("routes");
    if d.try_wait_resumed("netdev up", RESUME_TIMEOUT).is_none() {
        // The failure this scenario was written for: a CM message sent
        // while the port is down wedges rxe's GSI QP for good (relink-verbs
        // parks such ids until the port is back); the GSI QP's state tells.
        let state = d.a.state(d.s);
        let gsi = gsi_qp_states();
        let probe = rping_probe(&env);
        drop(d);
        panic!(
            "netdev up: relink did not resume in {RESUME_TIMEOUT:?} (state {state:?}); GSI QPs: \
             {gsi}; rping {} -> {}: {probe:?}",
            env.init.addr, env.target.addr
        );
    }
    // The device must still be releasable and usable: one unplug/replug.
    d.pump(Duration::from_millis(300));
    d.delete(&env.init.device);
    d.pump(Duration::from_millis(200));
    d.add(&env.init.device, &env.init.netdev);
    d.wait_resumed("replug after netdev down/up");
    d.pump(Duration::from_millis(500));
    d.finish("netdev_down_up");
}

/// The state of each device's GSI QP (QP1, through which the kernel's CM
/// sends), from `rdma res show qp`.
fn gsi_qp_states() -> String {
    match Command::new("rdma").args(["res", "show", "qp"]).output() {
        Ok(o) => String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains("type GSI"))
            .map(|l| l.split_whitespace().take(8).collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join("; "),
        Err(e) => format!("cannot run rdma: {e}"),
    }
}

/// One `rping` exchange between the main pair (a server on the target's
/// address, a client from the initiator's), 10 s at most.
fn rping_probe(env: &Topology) -> Result<(), String> {
    let (a, b) = (env.init.addr.to_string(), env.target.addr.to_string());
    let mut server = Command::new("rping")
        .args(["-s", "-a", &b, "-p", "7199", "-C", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run rping: {e}"))?;
    std::thread::sleep(Duration::from_millis(500));
    let client = Command::new("timeout")
        .args([
            "10", "rping", "-c", "-a", &b, "-I", &a, "-p", "7199", "-C", "1",
        ])
        .output();
    let _ = server.kill();
    let _ = server.wait();
    match client {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "rping client: {} {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run rping: {e}")),
    }
}

#[test]
fn unplug_replug_cycles() {
    let env = env_or_skip!(need_nothing);
    let cycles: usize = env_or("RELINK_VERBS_CYCLES", 20);
    let (listen, paths) = main_pair(&env, port());
    let mut d = Duo::start(env.clone(), listen, paths);
    let mut samples = Vec::new();
    for i in 0..cycles {
        d.pump(Duration::from_millis(300));
        d.delete(&env.init.device);
        d.pump(Duration::from_millis(200));
        d.add(&env.init.device, &env.init.netdev);
        d.wait_resumed(&format!("cycle {}", i + 1));
        let info = d.a.session_info(d.s).expect("the session");
        samples.extend(info.last_recovery.as_ref().and_then(phases::of));
    }
    d.notes.push(phases::note(&samples));
    d.pump(Duration::from_millis(300));
    d.finish("unplug_replug_cycles");
}

// The scenario of how a session ends, in a file of its own.
#[path = "sessions_verbs/admin_close.rs"]
mod admin_close;

// Node-wide registrations across device loss.
#[path = "sessions_verbs/registrations.rs"]
mod registrations;

// Shared receive queues and type 2 memory windows across device loss.
#[path = "sessions_verbs/shared_receive.rs"]
mod shared_receive;

// Planned outages (drain, suspend) and the stall they cost, next to an
// unplanned failover's.
#[path = "sessions_verbs/planned.rs"]
mod planned;

// Unplanned failover with and without a hot standby.
#[path = "sessions_verbs/standby.rs"]
mod standby;

// The phases of each recovery, from the library's timeline.
#[path = "sessions_verbs/phases.rs"]
mod phases;

// The same phases without relink: the raw floor.
#[path = "sessions_verbs/floor.rs"]
mod floor;

// The raw floor of a hot standby's switch: a spare connection, no relink.
#[path = "sessions_verbs/switch_floor.rs"]
mod switch_floor;

// Both devices unplugged and replugged with the nodes busy-polling.
#[path = "sessions_verbs/busy_poll.rs"]
mod busy_poll;

// Messages read by the target itself (a rendezvous) across unplug/replug.
#[path = "sessions_verbs/rendezvous.rs"]
mod rendezvous;
