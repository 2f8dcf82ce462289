//! The scale run across two processes on the TCP soft fabric: [`run`] in
//! the initiator's process, [`serve`] in the target's.
//!
//! Both processes use one [`TcpHosts`] layout: the initiator's runtime
//! directory and the target's, each with a `soft0` (127.0.0.1 and
//! 127.0.0.2). [`run`] makes it, starts the target's process with
//! [`SERVE_ARG`] and the target's directory, reads its `listening` line,
//! connects `n` sessions, resets its own `soft0` through the registry (as
//! `relink soft-device --dir ... reset soft0` does; both processes' hosts
//! see it at their next scan, every 20 ms) and times until every session
//! resumed, then until one message on each was delivered and confirmed.
//! The target's process accepts, checks every message it is delivered and
//! ends when its standard input closes.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path as FsPath, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use relink::{Node, Output, Path, SessionHandle, State};
use relink_sim::{TcpHosts, INITIATOR, TARGET};
use relink_soft::{Registry, TcpHost};

use super::{scale_options, secs, ScaleRun, Tally, MESSAGE_LEN};
use crate::loops::process_cpu_time;
use crate::session::{has_stamp, stamp_bytes, PORT};

/// The argument that makes a bench binary the target's side:
/// `<binary> --scale-serve <runtime directory>` runs [`serve`].
pub const SERVE_ARG: &str = "--scale-serve";
/// Wall-clock time any phase may take at most (a hang is an error, not a
/// figure).
const LIMIT: Duration = Duration::from_secs(120);
/// Sessions connected at a time during the setup.
const BATCH: usize = 64;
/// The longest a node's `wait` sleeps before the loop looks again.
const TICK: Duration = Duration::from_millis(50);

/// The target's side, in its own process: a node on the TCP host of
/// runtime directory `dir` listening on the target's address, accepting
/// every session and checking every message delivered (64 bytes, stamp
/// 0), until `stdin` closes. Prints `listening` once it listens, and
/// `delivered <count>` at the end.
///
/// # Panics
/// If the host cannot open `dir`, the node cannot listen, or a message is
/// damaged.
pub fn serve(dir: &FsPath, stdin: impl Read + Send + 'static) {
    let host = Arc::new(TcpHost::open(dir).expect("open the target's host"));
    let mut node = Node::new(host);
    let addr = SocketAddr::new(
        relink_sim::tcp::ADDRS[TARGET]
            .parse::<relink_fabric::IpNet>()
            .expect("constant")
            .addr,
        PORT,
    );
    node.listen(addr, scale_options()).expect("listen");
    println!("listening");
    let closed = Arc::new(AtomicBool::new(false));
    let c = closed.clone();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = BufReader::new(stdin).read_to_end(&mut sink);
        c.store(true, Ordering::Relaxed);
    });
    let mut delivered = 0u64;
    while !closed.load(Ordering::Relaxed) {
        let _ = node.wait_for(TICK);
        while let Some(out) = node.poll_output() {
            if let Output::Delivery { payload, .. } = out {
                assert!(
                    payload.len() == MESSAGE_LEN && has_stamp(&payload, 0),
                    "a damaged message"
                );
                delivered += 1;
            }
        }
    }
    println!("delivered {delivered}");
}

/// The target's process; killed on drop unless it ended.
pub(crate) struct Target {
    child: Child,
}

impl Target {
    /// Start `exe SERVE_ARG dir` and wait for its `listening` line.
    pub(crate) fn start(exe: &FsPath, dir: &FsPath) -> Target {
        let mut child = Command::new(exe)
            .arg(SERVE_ARG)
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start the target's process {}: {e}", exe.display()));
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.as_mut().expect("piped"));
        out.read_line(&mut line).expect("the target's output");
        assert_eq!(line.trim(), "listening", "the target did not start");
        Target { child }
    }

    /// Close its standard input and wait for it to end: how many messages
    /// it was delivered.
    pub(crate) fn finish(mut self) -> u64 {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        if let Some(out) = self.child.stdout.as_mut() {
            let _ = out.read_to_string(&mut rest);
        }
        let status = self.child.wait().expect("wait for the target");
        assert!(status.success(), "the target's process failed: {status}");
        rest.lines()
            .find_map(|l| l.strip_prefix("delivered "))
            .and_then(|n| n.trim().parse().ok())
            .expect("the target's count of deliveries")
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Wait on `node` until `done` holds (checked after every output and
/// every wake-up), handing each output to `each`.
fn run_until(
    node: &mut Node,
    what: &str,
    mut each: impl FnMut(Output),
    mut done: impl FnMut(&mut Node) -> bool,
) {
    let until = Instant::now() + LIMIT;
    while !done(node) {
        assert!(Instant::now() < until, "{what}: not within {LIMIT:?}");
        let _ = node.wait_for(TICK);
        while let Some(out) = node.poll_output() {
            each(out);
        }
    }
}

/// `n` sessions from a node of this process to the target's node in a
/// process of its own (`exe` [`SERVE_ARG`]: a bench binary that calls
/// [`serve`] when given it), one reset of this side's `soft0`, timed until
/// every session resumed, then until one message on each was delivered
/// and confirmed; the target's count of deliveries is checked at the end.
///
/// # Panics
/// If the target cannot be started, the sessions cannot be set up, one
/// ends, a message fails, or a phase takes more than two minutes.
pub fn run(exe: &FsPath, n: usize) -> ScaleRun {
    let hosts = TcpHosts::new("scale");
    let target = Target::start(exe, &hosts.dir(TARGET));
    let mut node = Node::new(hosts.host(INITIATOR));
    let peer = SocketAddr::new(hosts.addr(TARGET), PORT);
    let t_setup = Instant::now();
    let mut sessions: Vec<SessionHandle> = Vec::with_capacity(n);
    while sessions.len() < n {
        let batch: Vec<SessionHandle> = (0..BATCH.min(n - sessions.len()))
            .map(|_| {
                node.connect(vec![Path { local: None, peer }], scale_options())
                    .expect("connect")
            })
            .collect();
        run_until(
            &mut node,
            "connect",
            |_| {},
            |node| {
                batch
                    .iter()
                    .all(|s| node.state(*s) == Some(State::Established))
            },
        );
        sessions.extend(batch);
    }
    let setup_s = secs(t_setup.elapsed());
    while node.poll_output().is_some() {}
    let attempts = |node: &Node| -> u64 {
        sessions
            .iter()
            .map(|s| node.counters(*s).expect("session").attempts)
            .sum()
    };
    let attempts0 = attempts(&node);

    let registry = Registry::open(hosts.dir(INITIATOR)).expect("the initiator's registry");
    let (cpu0, t0) = (process_cpu_time(), Instant::now());
    registry.reset("soft0").expect("reset soft0");
    let mut tally = Tally::default();
    let mut resumed_at: Vec<Instant> = Vec::with_capacity(n);
    let mut count = |tally: &mut Tally, out: Output| match out {
        Output::Event { event, .. } => {
            let before = tally.resumed;
            tally.event(&event);
            if tally.resumed > before {
                resumed_at.push(Instant::now());
            }
        }
        Output::Completion { completion, .. } => {
            assert!(
                completion.outcome.is_success(),
                "a message failed: {completion:?}"
            );
            tally.completed += 1;
        }
        other => panic!("unexpected output of the initiator: {other:?}"),
    };
    {
        let tally = &mut tally;
        let resumed = std::cell::Cell::new(0usize);
        run_until(
            &mut node,
            "resume",
            |out| {
                count(tally, out);
                resumed.set(tally.resumed);
            },
            |_| resumed.get() >= n,
        );
    }
    let resumed = t0.elapsed();
    let cpu = process_cpu_time();
    let mut payload = [0u8; MESSAGE_LEN];
    stamp_bytes(&mut payload, 0);
    for s in &sessions {
        node.send(*s, &payload).expect("send");
    }
    {
        let tally = &mut tally;
        let completed = std::cell::Cell::new(0usize);
        run_until(
            &mut node,
            "messages",
            |out| {
                count(tally, out);
                completed.set(tally.completed);
            },
            |_| completed.get() >= n,
        );
    }
    let messages = t0.elapsed();
    assert_eq!(tally.resumed, n, "each session resumed once");
    let attempts = attempts(&node) - attempts0;
    drop(node);
    let delivered = target.finish();
    assert_eq!(delivered, n as u64, "each message delivered once");
    drop(hosts);
    ScaleRun {
        fabric: "tcp".into(),
        sessions: n,
        driver: "Node::wait, one process each side".into(),
        setup_s,
        resumed_s: secs(resumed),
        half_resumed_s: secs(resumed_at[(n - 1) / 2].duration_since(t0)),
        messages_s: secs(messages),
        sessions_per_s: n as f64 / secs(resumed),
        resumed_cpu_s: cpu0.zip(cpu).map(|(a, b)| secs(b.saturating_sub(a))),
        resumed_virt_ms: None,
        attempts,
        heap: None,
    }
}

/// The path of the running executable, for [`run`]'s `exe`.
///
/// # Panics
/// If the platform cannot tell.
pub fn this_exe() -> PathBuf {
    std::env::current_exe().expect("the running executable's path")
}
