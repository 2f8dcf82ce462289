//! The `kv_server` and `kv_client` examples as two processes on the soft
//! TCP fabric — two soft "hosts" (registry directories `a`, client, soft0
//! at 127.0.0.1/8, and `b`, server, soft0 at 127.0.0.2/8) — with device
//! faults on both sides while the client runs: a reset of the client's
//! device, a reset of the server's, and the server's device removed and
//! added back. From the `RESULT` lines: every request answered exactly
//! once and correctly, every operation completed once and successfully,
//! the client saw every loss and resumed after each, and the server served
//! exactly the requests the client sent.
//!
//! The example binaries are those `cargo test` built next to this test
//! (`target/<profile>/examples/`); `cargo test --test examples_two_process`
//! alone does not build them (`cargo build -p relink --examples` does).

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use relink_soft::Registry;

/// How long any one step may take: start-up, a recovery, the final drain.
/// Generous: build machines are slow and shared. Nothing here measures
/// time; these only keep a hang from lasting forever.
const STEP: Duration = Duration::from_secs(90);
/// How long the client may take to drain, close and exit.
const EXIT: Duration = Duration::from_secs(180);

/// `target/<profile>/examples/<name>`, next to `target/<profile>/deps/`
/// where this test runs from.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let path = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "{} is missing: `cargo test` builds the examples, `cargo test --test ...` \
         does not; run `cargo build -p relink --examples` (with the same profile) first",
        path.display()
    );
    path
}

static ROOTS: AtomicU32 = AtomicU32::new(0);

/// The two soft hosts: directories `a` and `b` under a fresh temporary
/// directory (removed on drop), each with its soft0.
struct Hosts(PathBuf);

impl Hosts {
    fn new() -> Hosts {
        let n = ROOTS.fetch_add(1, Ordering::SeqCst);
        let root = std::env::temp_dir().join(format!("relink-kv-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let h = Hosts(root);
        h.add(&h.a(), "127.0.0.1/8");
        h.add(&h.b(), "127.0.0.2/8");
        h
    }

    fn a(&self) -> PathBuf {
        self.0.join("a")
    }

    fn b(&self) -> PathBuf {
        self.0.join("b")
    }

    fn registry(&self, dir: &Path) -> Registry {
        Registry::open(dir).expect("open the registry")
    }

    fn add(&self, dir: &Path, addr: &str) {
        self.registry(dir)
            .add("soft0", vec![addr.parse().expect("address")], None, None)
            .expect("add soft0");
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An example's process ([`relink_proctest::Proc`]: output collected,
/// standard input piped, killed on drop) with the waits this test makes
/// on its stdout lines.
struct Proc(relink_proctest::Proc);

impl Proc {
    fn spawn(what: &str, exe: &Path, args: &[String]) -> Proc {
        Proc(relink_proctest::Proc::spawn_with_stdin(
            what,
            Command::new(exe).args(args).env_remove("RELINK_SOFT_DIR"),
        ))
    }

    /// The stdout lines so far.
    fn lines(&self) -> Vec<String> {
        self.0.stdout()
    }

    fn transcript(&self) -> String {
        self.0.transcript()
    }

    /// Waits until `done(stdout lines)`; false if `timeout` passes or the
    /// process ends first.
    fn wait_until(&mut self, timeout: Duration, done: impl Fn(&[String]) -> bool) -> bool {
        self.0.wait_until(timeout, |p| done(&p.stdout()))
    }

    /// Waits until `done(lines)`, or panics with both transcripts.
    #[track_caller]
    fn expect(&mut self, other: &Proc, what: &str, done: impl Fn(&[String]) -> bool) {
        if !self.wait_until(STEP, done) {
            panic!(
                "the {} did not show {what} within {STEP:?}\n{}\n{}",
                self.0.what(),
                self.transcript(),
                other.transcript()
            );
        }
    }

    /// Waits for the exit (then all of stdout is read); `None` on timeout.
    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.0.wait_exit(timeout)
    }

    /// The `RESULT` line's `key=value` pairs.
    #[track_caller]
    fn result(&self, other: &Proc) -> BTreeMap<String, String> {
        let lines = self.lines();
        let line = lines
            .iter()
            .rev()
            .find(|l| l.starts_with("RESULT "))
            .unwrap_or_else(|| {
                panic!(
                    "no RESULT line from the {}\n{}\n{}",
                    self.0.what(),
                    self.transcript(),
                    other.transcript()
                )
            });
        line.split_whitespace()
            .skip(1)
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// Lines starting with `prefix`.
fn count(lines: &[String], prefix: &str) -> usize {
    lines.iter().filter(|l| l.starts_with(prefix)).count()
}

/// The `answered=` of the client's last progress line (0 if none yet).
fn answered(lines: &[String]) -> u64 {
    lines
        .iter()
        .rev()
        .filter(|l| l.starts_with("progress:"))
        .find_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("answered="))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// A port of 127.0.0.2 that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.2:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port on 127.0.0.2")
        .port()
}

/// Starts kv_server on host b and waits until it listens (another port if
/// the chosen one was taken meanwhile).
fn start_server(h: &Hosts) -> (Proc, SocketAddr) {
    let exe = example("kv_server");
    for _ in 0..5 {
        let addr = SocketAddr::from(([127, 0, 0, 2], free_port()));
        let args = [
            "--dir".to_string(),
            h.b().display().to_string(),
            "--listen".to_string(),
            addr.to_string(),
            "--once".to_string(),
        ];
        let mut server = Proc::spawn("server", &exe, &args);
        if server.wait_until(STEP, |l| l.iter().any(|l| l.starts_with("listening on"))) {
            return (server, addr);
        }
        let exited = server.wait_exit(Duration::from_secs(2)).is_some();
        if !exited || !server.transcript().contains("cannot listen") {
            panic!(
                "the server did not listen on {addr}\n{}",
                server.transcript()
            );
        }
    }
    panic!("no free port for the server");
}

/// Injects a fault and waits for the client to lose the session (if
/// `loses`) and resume it, then for requests to be answered again.
#[track_caller]
fn fault(client: &mut Proc, server: &Proc, what: &str, loses: bool, inject: impl FnOnce()) {
    let lost = count(&client.lines(), "event: device lost");
    let resumed = count(&client.lines(), "event: resumed");
    inject();
    eprintln!("fault: {what}");
    if loses {
        client.expect(server, &format!("a loss after {what}"), |l| {
            count(l, "event: device lost") > lost
        });
    }
    client.expect(server, &format!("a resume after {what}"), |l| {
        count(l, "event: resumed") > resumed
    });
    let before = answered(&client.lines());
    client.expect(server, &format!("answers after the resume ({what})"), |l| {
        answered(l) > before
    });
}

#[track_caller]
fn num(r: &BTreeMap<String, String>, key: &str, t: &str) -> u64 {
    r.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {key} in the RESULT\n{t}"))
}

#[test]
fn kv_examples_answer_every_request_once_across_faults_on_both_sides() {
    let h = Hosts::new();
    let (mut server, addr) = start_server(&h);

    // No --requests or --seconds: the client sends until its standard
    // input closes.
    let client_args = [
        "--dir".to_string(),
        h.a().display().to_string(),
        "--connect".to_string(),
        addr.to_string(),
    ];
    let mut client = Proc::spawn("client", &example("kv_client"), &client_args);
    client.expect(&server, "the connection", |l| {
        l.iter().any(|l| l == "event: connected")
    });
    client.expect(&server, "answered requests", |l| answered(l) > 0);

    let (a, b) = (h.registry(&h.a()), h.registry(&h.b()));
    fault(
        &mut client,
        &server,
        "a reset of the client's device",
        true,
        || {
            a.reset("soft0").expect("reset a/soft0");
        },
    );
    fault(
        &mut client,
        &server,
        "a reset of the server's device",
        true,
        || {
            b.reset("soft0").expect("reset b/soft0");
        },
    );
    // The server's device goes away: the client loses the session and
    // cannot get it back until the device returns.
    let lost = count(&client.lines(), "event: device lost");
    b.remove("soft0").expect("remove b/soft0");
    eprintln!("fault: the server's device removed");
    client.expect(&server, "a loss after the server's removal", |l| {
        count(l, "event: device lost") > lost
    });
    fault(
        &mut client,
        &server,
        "the server's device added back",
        false,
        || h.add(&h.b(), "127.0.0.2/8"),
    );

    // Stop the client: it waits for the last answers, closes the session
    // (the server, run with --once, then exits) and reports.
    client.0.close_stdin();
    let status = client.wait_exit(EXIT);
    let t = format!("{}\n{}", client.transcript(), server.transcript());
    let status = status.unwrap_or_else(|| panic!("the client did not exit within {EXIT:?}\n{t}"));
    let server_status = server.wait_exit(STEP);
    let t = format!("{}\n{}", client.transcript(), server.transcript());
    eprintln!("{t}");
    assert_eq!(status.code(), Some(0), "client exit status\n{t}");
    assert_eq!(
        server_status.and_then(|s| s.code()),
        Some(0),
        "server exit status\n{t}"
    );

    let c = client.result(&server);
    let s = server.result(&client);
    // Every request answered exactly once, and correctly.
    let requests = num(&c, "requests", &t);
    assert!(requests > 0, "{t}");
    assert_eq!(num(&c, "answered_once", &t), requests, "{t}");
    for key in ["duplicates", "unanswered", "wrong", "unexpected"] {
        assert_eq!(num(&c, key, &t), 0, "client {key}\n{t}");
    }
    // Every operation (messages and RDMA WRITEs) completed once, successfully.
    for key in ["ops_failed", "ops_indeterminate", "ops_unfinished"] {
        assert_eq!(num(&c, key, &t), 0, "client {key}\n{t}");
    }
    assert!(num(&c, "writes", &t) > 0, "no RDMA WRITE completed\n{t}");
    assert_eq!(c["gave_up"], "false", "{t}");
    assert_eq!(c["ok"], "true", "{t}");
    // The client saw the three losses and resumed after each.
    assert!(num(&c, "losses", &t) >= 3, "client losses\n{t}");
    assert!(num(&c, "resumes", &t) >= 3, "client resumes\n{t}");

    // The server received exactly what the client sent, in order, each once,
    // and committed every value the client wrote into its region.
    assert_eq!(s["end"], "closed", "{t}");
    assert_eq!(num(&s, "requests", &t), requests, "{t}");
    assert_eq!(num(&s, "out_of_order", &t), 0, "{t}");
    assert_eq!(num(&s, "errors", &t), 0, "{t}");
    assert_eq!(num(&s, "putats", &t), num(&c, "writes", &t), "{t}");
    assert_eq!(num(&s, "answers_failed", &t), 0, "{t}");
    assert_eq!(s["ok"], "true", "{t}");
    assert!(num(&s, "losses", &t) >= 3, "server losses\n{t}");
    assert!(num(&s, "resumes", &t) >= 3, "server resumes\n{t}");
}
