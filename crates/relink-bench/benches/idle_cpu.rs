//! CPU time of idle relink nodes over the TCP soft fabric: two nodes of
//! this process (two `TcpHost`s, each with a runtime directory of its
//! own), each on a thread of its own looping on `Node::wait`, with 100
//! established sessions between them and no traffic — next to two
//! baselines measured in the same run: the process sleeping with no node,
//! and the same two hosts and node threads with no session.
//!
//! ```text
//! cargo bench -p relink-bench --bench idle_cpu            # 10 s per phase
//! RELINK_BENCH_QUICK=1 cargo bench -p relink-bench --bench idle_cpu   # 1 s per phase
//! ```
//!
//! Each phase measures the process's CPU time (user + system, all threads,
//! from `/proc/self/stat`, 10 ms ticks) over the same wall-clock time and
//! reports CPU-seconds per wall-second; the ratio is sessions / hosts (the
//! sleeping process costs nothing to divide by). An idle session is not
//! silent: each side sends a keepalive every 5 s (the default policy) and
//! answers the peer's, so 100 sessions make ~40 probes and ~40 replies a
//! second, each a message, a completion and an acknowledgement. The node
//! threads also wake every 200 ms to look at their stop flag.
//!
//! Prints a table, the CPU time per thread (by name) of each phase, and
//! `RESULT idle_cpu ...`; writes `target/relink-bench/idle_cpu.json`. Run
//! without `--bench` (as `cargo test --benches` does) it makes a quick run.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use relink::{Node, Path, SessionOptions, State};
use relink_bench::loops::{process_cpu_time, thread_cpu_times, ThreadCpu};
use relink_bench::quick_from_env;
use relink_bench::report::{text_table, write_report_or_exit, Machine};
use relink_sim::{TcpHosts, INITIATOR, TARGET};
use serde::Serialize;

/// Idle sessions between the two nodes.
const SESSIONS: usize = 100;
/// How often a node's thread looks at its stop flag (the deadline of each
/// `wait`).
const STOP_CHECK: Duration = Duration::from_millis(200);
/// How long connection setup may take.
const SETUP_LIMIT: Duration = Duration::from_secs(60);

/// One measured phase.
#[derive(Debug, Clone, Serialize)]
struct Phase {
    /// `sleep`, `hosts`, `sessions`.
    name: &'static str,
    /// What ran.
    what: String,
    /// Wall-clock seconds measured.
    wall_s: f64,
    /// CPU seconds (user + system, whole process) meanwhile.
    cpu_s: f64,
    /// `cpu_s / wall_s`.
    cpu_per_wall: f64,
    /// `wait` returns that did something, per second, both nodes.
    wakeups_per_s: f64,
    /// CPU seconds per kind of thread (per-connection threads summed),
    /// largest first; live threads only.
    threads: Vec<(String, f64)>,
}

/// The JSON report.
#[derive(Debug, Serialize)]
struct IdleReport {
    bench: &'static str,
    quick: bool,
    machine: Machine,
    sessions: usize,
    phases: Vec<Phase>,
    /// sessions / hosts.
    ratio: Option<f64>,
}

/// A node looping on `wait` on a thread of its own until stopped.
struct Looper {
    handle: JoinHandle<Node>,
    stop: Arc<AtomicBool>,
}

impl Looper {
    fn start(mut node: Node, name: &str, wakeups: Arc<AtomicU64>) -> Looper {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    if node.wait_for(STOP_CHECK) {
                        wakeups.fetch_add(1, Ordering::Relaxed);
                    }
                    // Idle sessions produce nothing to take.
                    while node.accept().is_some() {}
                }
                node
            })
            .expect("spawn a node's thread");
        Looper { handle, stop }
    }

    fn stop(self) -> Node {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().expect("a node's thread panicked")
    }
}

/// What a thread does, from its name: the soft fabric's per-connection
/// threads lose their connection number (`soft-tcp-read-1f` →
/// `soft-tcp-read`).
fn thread_kind(name: &str) -> String {
    match name.strip_prefix("soft-tcp-") {
        Some(rest) => format!("soft-tcp-{}", rest.split('-').next().unwrap_or(rest)),
        None => name.to_string(),
    }
}

/// CPU seconds per thread kind between two readings of
/// [`thread_cpu_times`] (a thread new since the first counts from zero),
/// largest first, without the calling thread.
fn thread_deltas(before: &[ThreadCpu], after: &[ThreadCpu]) -> Vec<(String, f64)> {
    // This thread, which reads the counters, is left out.
    let me: Option<u32> = std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok());
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();
    for t in after.iter().filter(|t| Some(t.tid) != me) {
        let b = before
            .iter()
            .find(|b| b.tid == t.tid)
            .map_or(Duration::ZERO, |b| b.cpu);
        *sums.entry(thread_kind(&t.name)).or_default() += t.cpu.saturating_sub(b).as_secs_f64();
    }
    let mut v: Vec<(String, f64)> = sums.into_iter().filter(|(_, s)| *s > 0.0).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}

/// Measure the process's CPU time over `wall` of sleeping on this thread
/// (whatever else runs meanwhile).
fn measure(name: &'static str, what: String, wall: Duration, wakeups: &AtomicU64) -> Phase {
    let threads0 = thread_cpu_times();
    let w0 = wakeups.load(Ordering::Relaxed);
    let cpu0 = process_cpu_time().expect("/proc/self/stat");
    let t0 = Instant::now();
    std::thread::sleep(wall);
    let cpu = process_cpu_time()
        .expect("/proc/self/stat")
        .saturating_sub(cpu0);
    let elapsed = t0.elapsed().as_secs_f64();
    let w = wakeups.load(Ordering::Relaxed) - w0;
    Phase {
        name,
        what,
        wall_s: elapsed,
        cpu_s: cpu.as_secs_f64(),
        cpu_per_wall: cpu.as_secs_f64() / elapsed,
        wakeups_per_s: w as f64 / elapsed,
        threads: thread_deltas(&threads0, &thread_cpu_times()),
    }
}

/// Connect `n` sessions from `a` to `b`'s listener at `addr` and drive
/// both nodes (on this thread) until all are established on both sides.
fn establish(a: &mut Node, b: &mut Node, addr: SocketAddr, n: usize) {
    let mut mine = Vec::new();
    for _ in 0..n {
        let s = a
            .connect(
                vec![Path {
                    local: None,
                    peer: addr,
                }],
                SessionOptions::default(),
            )
            .expect("connect");
        mine.push(s);
    }
    let mut theirs = Vec::new();
    let t0 = Instant::now();
    loop {
        let _ = a.wait_for(Duration::from_millis(1));
        let _ = b.wait_for(Duration::from_millis(1));
        theirs.extend(std::iter::from_fn(|| b.accept().map(|acc| acc.session)));
        let up = |node: &Node, s: &[relink::SessionHandle]| {
            s.iter()
                .filter(|s| node.state(**s) == Some(State::Established))
                .count()
        };
        if theirs.len() == n && up(a, &mine) == n && up(b, &theirs) == n {
            return;
        }
        assert!(
            t0.elapsed() < SETUP_LIMIT,
            "{} of {n} sessions established in {SETUP_LIMIT:?}",
            up(a, &mine)
        );
    }
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let quick = quick_from_env() || !benching;
    let wall = if quick {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(10)
    };
    let settle = wall / 5;
    let wakeups = Arc::new(AtomicU64::new(0));
    let mut phases = Vec::new();

    // 1. Nothing but this process, sleeping.
    phases.push(measure(
        "sleep",
        "this process sleeping, no host, no node".into(),
        wall,
        &wakeups,
    ));

    // 2. Two TCP hosts, a node on each on its own thread, one listening:
    // what the fabric and the node loops cost with no session.
    let dirs = TcpHosts::new("idle-cpu");
    let a = Node::new(dirs.host(INITIATOR));
    let mut b = Node::new(dirs.host(TARGET));
    let port = std::net::TcpListener::bind("127.0.0.2:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let addr = SocketAddr::new([127, 0, 0, 2].into(), port);
    b.listen(addr, SessionOptions::default()).expect("listen");
    let la = Looper::start(a, "idle-node-a", wakeups.clone());
    let lb = Looper::start(b, "idle-node-b", wakeups.clone());
    std::thread::sleep(settle);
    phases.push(measure(
        "hosts",
        "2 TCP hosts, 2 nodes waiting (one listening), no session".into(),
        wall,
        &wakeups,
    ));

    // 3. The same, with 100 established sessions and no traffic.
    let (mut a, mut b) = (la.stop(), lb.stop());
    let t0 = Instant::now();
    establish(&mut a, &mut b, addr, SESSIONS);
    let setup = t0.elapsed();
    let la = Looper::start(a, "idle-node-a", wakeups.clone());
    let lb = Looper::start(b, "idle-node-b", wakeups.clone());
    std::thread::sleep(settle);
    phases.push(measure(
        "sessions",
        format!("the same, {SESSIONS} established idle sessions (keepalive 5 s)"),
        wall,
        &wakeups,
    ));
    let (a, b) = (la.stop(), lb.stop());
    let failed = a
        .sessions()
        .into_iter()
        .filter(|s| a.state(*s) != Some(State::Established))
        .count();
    assert_eq!(failed, 0, "sessions not established at the end");
    drop((a, b));
    drop(dirs);

    println!(
        "idle_cpu{}: CPU time of idle relink nodes over the TCP soft fabric, {:.0} s of wall \
         clock per phase ({SESSIONS} sessions set up in {:.2} s)",
        if quick { " (QUICK: 1 s per phase)" } else { "" },
        wall.as_secs_f64(),
        setup.as_secs_f64(),
    );
    let rows: Vec<Vec<String>> = phases
        .iter()
        .map(|p| {
            vec![
                p.name.to_string(),
                format!("{:.2}", p.wall_s),
                format!("{:.2}", p.cpu_s),
                format!("{:.4}", p.cpu_per_wall),
                format!("{:.1}", p.wakeups_per_s),
                p.what.clone(),
            ]
        })
        .collect();
    print!(
        "{}",
        text_table(
            &["phase", "wall s", "cpu s", "cpu/wall", "wakeups/s", "what"],
            &rows,
            &[0, 5],
        )
    );
    for p in &phases[1..] {
        let per: Vec<String> = p
            .threads
            .iter()
            .map(|(n, s)| format!("{n} {s:.2}"))
            .collect();
        println!("  cpu s by thread ({}): {}", p.name, per.join(", "));
    }
    let (hosts, sessions) = (phases[1].cpu_per_wall, phases[2].cpu_per_wall);
    let ratio = (hosts > 0.0).then(|| sessions / hosts);
    println!(
        "cpu/wall: CPU-seconds (user + system, whole process, 10 ms ticks) per wall-second; \
         wakeups/s: `Node::wait` returns that did something, both nodes"
    );
    println!(
        "RESULT idle_cpu sessions={SESSIONS} cpu_per_wall={sessions:.4} \
         baseline_hosts={hosts:.4} baseline_sleep={:.4} ratio={} wakeups_per_s={:.1} \
         wall_s={:.0} quick={quick}",
        phases[0].cpu_per_wall,
        ratio.map_or("n/a".into(), |r| format!("{r:.2}")),
        phases[2].wakeups_per_s,
        wall.as_secs_f64(),
    );
    let report = IdleReport {
        bench: "idle_cpu",
        quick,
        machine: Machine::current(),
        sessions: SESSIONS,
        phases,
        ratio,
    };
    write_report_or_exit(report.bench, &report);
}
