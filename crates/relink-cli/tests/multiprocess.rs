//! Multi-process tests of `relink perf`: a server process and a client
//! process, each on its own soft "host" (a registry directory of its own,
//! soft0 at 127.0.0.2 and 127.0.0.1), talking over the soft TCP fabric;
//! and a device removed under running traffic, on either side.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use serde_json::Value;

/// How long a process may take to start up (build machines are slow and
/// shared).
const STARTUP: Duration = Duration::from_secs(30);
/// How long the client may take to exit after a device is removed.
const EXIT_AFTER_REMOVAL: Duration = Duration::from_secs(10);

/// The two soft hosts of a test: registry directories `a` (client, soft0
/// at 127.0.0.1/8) and `b` (server, soft0 at 127.0.0.2/8) in a fresh
/// temporary directory, removed when the test ends.
struct Hosts {
    tmp: tempfile::TempDir,
}

impl Hosts {
    fn new() -> Hosts {
        let tmp = tempfile::Builder::new()
            .prefix("relink-perf-test-")
            .tempdir_in(std::env::temp_dir())
            .expect("create a temporary directory");
        let h = Hosts { tmp };
        soft_device(&h.a(), &["add", "soft0", "--addr", "127.0.0.1/8"]);
        soft_device(&h.b(), &["add", "soft0", "--addr", "127.0.0.2/8"]);
        h
    }

    fn a(&self) -> PathBuf {
        self.tmp.path().join("a")
    }

    fn b(&self) -> PathBuf {
        self.tmp.path().join("b")
    }
}

/// Runs `relink soft-device --dir DIR ARGS...` and asserts it succeeds.
fn soft_device(dir: &Path, args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_relink"))
        .arg("soft-device")
        .arg("--dir")
        .arg(dir)
        .args(args)
        .env_remove("RELINK_SOFT_DIR")
        .output()
        .expect("run relink soft-device");
    assert!(
        out.status.success(),
        "relink soft-device --dir {} {args:?} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A port of 127.0.0.2 that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.2:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port on 127.0.0.2")
        .port()
}

/// A running `relink` process ([`relink_proctest::Proc`]: output
/// collected, killed on drop) with the waits these tests make on its
/// stdout lines.
struct Proc(relink_proctest::Proc);

impl Proc {
    fn spawn(what: &str, args: &[OsString]) -> Proc {
        Proc(relink_proctest::Proc::spawn(
            what,
            Command::new(env!("CARGO_BIN_EXE_relink"))
                .args(args)
                .env_remove("RELINK_SOFT_DIR"),
        ))
    }

    /// Its stdout lines so far.
    fn lines(&self) -> Vec<String> {
        self.0.stdout()
    }

    /// Everything seen so far, for failure messages.
    fn transcript(&self) -> String {
        self.0.transcript()
    }

    /// Waits until `done(stdout lines so far)` holds; false if `timeout`
    /// passes or the process ends first.
    fn wait_until(&mut self, timeout: Duration, done: impl Fn(&[String]) -> bool) -> bool {
        self.0.wait_until(timeout, |p| done(&p.stdout()))
    }

    /// Waits for a line for which `pred` holds; panics with the transcript
    /// if none comes within `timeout`.
    #[track_caller]
    fn expect_line(&mut self, timeout: Duration, what: &str, pred: impl Fn(&str) -> bool) {
        if !self.wait_until(timeout, |lines| lines.iter().any(|l| pred(l))) {
            panic!(
                "no {what} line from the {} within {timeout:?}\n{}",
                self.0.what(),
                self.transcript()
            );
        }
    }

    /// Waits for the process to exit; `None` if it is still running after
    /// `timeout`. Once it exited, all its output is collected.
    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.0.wait_exit(timeout)
    }

    /// Waits for the exit and asserts its status code.
    #[track_caller]
    fn expect_exit(&mut self, timeout: Duration, code: i32) {
        match self.wait_exit(timeout) {
            None => panic!(
                "the {} did not exit within {timeout:?}\n{}",
                self.0.what(),
                self.transcript()
            ),
            Some(s) => assert_eq!(
                s.code(),
                Some(code),
                "the {} exited with {s}, not {code}\n{}",
                self.0.what(),
                self.transcript()
            ),
        }
    }

    /// The last stdout line parsed as JSON.
    #[track_caller]
    fn last_json(&self) -> Value {
        let lines = self.lines();
        let last = lines.last().unwrap_or_else(|| {
            panic!(
                "the {} printed nothing\n{}",
                self.0.what(),
                self.transcript()
            )
        });
        serde_json::from_str(last).unwrap_or_else(|e| {
            panic!(
                "the {}'s last line is not JSON ({e}): {last:?}\n{}",
                self.0.what(),
                self.transcript()
            )
        })
    }
}

fn args(parts: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<OsString> {
    parts.iter().map(|p| p.as_ref().to_os_string()).collect()
}

/// Starts `relink perf server` on host b at 127.0.0.2:<free port> and waits
/// until it listens. A port taken between choosing and binding it is
/// retried with another.
fn start_server(h: &Hosts, extra: &[&str]) -> (Proc, SocketAddr) {
    let dir = h.b();
    for _ in 0..5 {
        let addr = SocketAddr::from(([127, 0, 0, 2], free_port()));
        let mut a = args(&[
            &"perf",
            &"server",
            &"--dir",
            &dir,
            &"--bind",
            &addr.to_string(),
        ]);
        a.extend(extra.iter().map(OsString::from));
        let mut server = Proc::spawn("server", &a);
        if server.wait_until(STARTUP, |l| l.iter().any(|l| is_listening(l))) {
            return (server, addr);
        }
        let in_use = server.wait_exit(Duration::from_secs(1)).is_some()
            && server.0.stderr_count("in use") > 0;
        if !in_use {
            panic!(
                "the server did not start listening on {addr}\n{}",
                server.transcript()
            );
        }
    }
    panic!("no free port found for the server");
}

/// Whether a server line (text or JSON) says it listens.
fn is_listening(line: &str) -> bool {
    line.starts_with("listening on") || line.contains(r#""event":"listening""#)
}

/// Starts `relink perf client` on host a against `server`.
fn client(h: &Hosts, server: SocketAddr, extra: &[&str]) -> Proc {
    let mut a = args(&[
        &"perf",
        &"client",
        &"--dir",
        &h.a(),
        &"--connect",
        &server.to_string(),
    ]);
    a.extend(extra.iter().map(OsString::from));
    Proc::spawn("client", &a)
}

/// The `write 64 KiB x 32 for 60 s` client of the removal tests, once its
/// traffic flows.
fn running_writer(h: &Hosts, server: SocketAddr, json: bool) -> Proc {
    let mut extra = vec![
        "--op",
        "write",
        "--size",
        "65536",
        "--depth",
        "32",
        "--duration",
        "60",
    ];
    if json {
        extra.push("--json");
    }
    let mut c = client(h, server, &extra);
    c.expect_line(STARTUP, "`running`", |l| l == "running");
    c
}

/// Whose device a removal test takes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Victim {
    /// The server's host (b, 127.0.0.2).
    Server,
    /// The client's host (a, 127.0.0.1).
    Client,
}

/// How many times a removal test may repeat its scenario (see
/// [`remove_under_traffic`]).
const REMOVAL_ATTEMPTS: usize = 5;

/// Runs the write client, removes the victim's device once traffic flows,
/// and returns the client after it exited with status 3.
///
/// A removal that falls in the instant between the client reaping its last
/// outstanding completion and posting the next batch finds nothing in
/// flight: the client still exits with 3 and loses nothing, but there is
/// nothing flushed to check. Then the device is added back and the scenario
/// repeated (at most [`REMOVAL_ATTEMPTS`] times).
fn remove_under_traffic(
    h: &Hosts,
    server: &mut Proc,
    addr: SocketAddr,
    victim: Victim,
    json: bool,
) -> Proc {
    let (dir, net) = match victim {
        Victim::Server => (h.b(), "127.0.0.2/8"),
        Victim::Client => (h.a(), "127.0.0.1/8"),
    };
    for attempt in 1..=REMOVAL_ATTEMPTS {
        let mut writer = running_writer(h, addr, json);
        soft_device(&dir, &["remove", "soft0"]);
        writer.expect_exit(EXIT_AFTER_REMOVAL, 3);
        eprintln!("attempt {attempt}: {}", writer.transcript());
        let outstanding = if json {
            writer.last_json()["outstanding"]
                .as_u64()
                .unwrap_or_else(|| panic!("no outstanding count\n{}", writer.transcript()))
        } else {
            number_after(&writer.lines().join("\n"), "outstanding when it failed: ")
        };
        if outstanding > 0 || attempt == REMOVAL_ATTEMPTS {
            return writer;
        }
        // Nothing was in flight: put the device back and go again.
        let listening = server.lines().iter().filter(|l| is_listening(l)).count();
        soft_device(&dir, &["add", "soft0", "--addr", net]);
        if victim == Victim::Server {
            let back = server.wait_until(STARTUP, |lines| {
                lines.iter().filter(|l| is_listening(l)).count() > listening
            });
            assert!(
                back,
                "the server did not listen again\n{}",
                server.transcript()
            );
        }
    }
    unreachable!("the last attempt returns");
}

/// The number after `key` in `text` (e.g. `"lost: "`), up to a non-digit.
#[track_caller]
fn number_after(text: &str, key: &str) -> u64 {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("no {key:?} in {text:?}"))
        + key.len();
    let digits: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after {key:?} in {text:?}"))
}

#[test]
fn server_device_removed_under_write_traffic() {
    let h = Hosts::new();
    let (mut server, addr) = start_server(&h, &[]);
    let writer = remove_under_traffic(&h, &mut server, addr, Victim::Server, false);

    // The report names the first error status and accounts for every
    // outstanding request.
    let text = writer.lines().join("\n");
    let status = text
        .split("first error status ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no first error status in\n{}", writer.transcript()));
    assert!(
        status.ends_with("_ERR"),
        "{status:?} is not an error status\n{}",
        writer.transcript()
    );
    assert!(
        text.contains("connection ended: DISCONNECTED"),
        "{}",
        writer.transcript()
    );
    let outstanding = number_after(&text, "outstanding when it failed: ");
    let completed = number_after(&text, "completed since: ");
    assert!(outstanding > 0, "{}", writer.transcript());
    assert_eq!(completed, outstanding, "{}", writer.transcript());
    assert!(text.contains("; 0 lost"), "{}", writer.transcript());

    // The server saw its device go, for the connection and the listener.
    server.expect_line(EXIT_AFTER_REMOVAL, "device removal", |l| {
        l.starts_with("device removal on connection")
    });
    server.expect_line(EXIT_AFTER_REMOVAL, "listener device removal", |l| {
        l.starts_with("device removal on listener")
    });

    // The device comes back: the server listens again and serves.
    let listening = server.lines().iter().filter(|l| is_listening(l)).count();
    soft_device(&h.b(), &["add", "soft0", "--addr", "127.0.0.2/8"]);
    let relistened = server.wait_until(STARTUP, |lines| {
        lines.iter().filter(|l| is_listening(l)).count() > listening
    });
    assert!(
        relistened,
        "the server did not listen again\n{}",
        server.transcript()
    );
    let mut again = client(
        &h,
        addr,
        &[
            "--op", "send", "--size", "64", "--depth", "8", "--iters", "200",
        ],
    );
    again.expect_exit(STARTUP, 0);
    eprintln!("{}", again.transcript());
    let last = again.lines().last().cloned().unwrap_or_default();
    assert!(
        last.contains("send 200 messages of 64 bytes") && last.contains(" msg/s"),
        "{}",
        again.transcript()
    );
    assert!(
        number_after(&last, "s: ") > 0,
        "no positive rate\n{}",
        again.transcript()
    );
}

#[test]
fn client_device_removed_under_write_traffic() {
    let h = Hosts::new();
    let (mut server, addr) = start_server(&h, &[]);
    let writer = remove_under_traffic(&h, &mut server, addr, Victim::Client, true);

    let r = writer.last_json();
    let t = writer.transcript();
    assert_eq!(r["result"], "error", "{t}");
    assert_eq!(r["first_error"], "WR_FLUSH_ERR", "{t}");
    assert_eq!(r["ended_by"], "DEVICE_REMOVAL", "{t}");
    let outstanding = r["outstanding"].as_u64().expect("outstanding");
    assert!(outstanding > 0, "{t}");
    // Every request outstanding at the removal was flushed, none lost.
    let after: BTreeMap<String, Value> =
        serde_json::from_value(r["after_by_status"].clone()).expect("after_by_status");
    assert_eq!(after.len(), 1, "only flushes after the removal: {t}");
    assert_eq!(after["WR_FLUSH_ERR"], outstanding, "{t}");
    assert_eq!(r["lost"], 0, "{t}");
    assert_eq!(r["posted"], r["completed"], "{t}");

    // The server saw the connection end.
    server.expect_line(EXIT_AFTER_REMOVAL, "disconnected", |l| {
        l.starts_with("disconnected")
    });
}

#[test]
fn send_iterations_complete() {
    let h = Hosts::new();
    let (mut server, addr) = start_server(&h, &["--once", "--json"]);
    let mut c = client(
        &h,
        addr,
        &["--op", "send", "--size", "64", "--iters", "2000", "--json"],
    );
    c.expect_exit(Duration::from_secs(120), 0);
    eprintln!("{}", c.transcript());
    assert!(
        c.lines().iter().any(|l| l == "running"),
        "{}",
        c.transcript()
    );
    let r = c.last_json();
    let t = c.transcript();
    assert_eq!(r["result"], "ok", "{t}");
    assert_eq!(r["op"], "send", "{t}");
    assert_eq!(r["messages"], 2000, "{t}");
    assert_eq!(r["bytes"], 2000 * 64, "{t}");
    assert!(r["msgs_per_sec"].as_f64().is_some_and(|v| v > 0.0), "{t}");
    assert!(r["gb_per_sec"].as_f64().is_some_and(|v| v > 0.0), "{t}");

    // With --once the server leaves after the connection ended, having
    // received every message.
    server.expect_exit(Duration::from_secs(10), 0);
    let events: Vec<Value> = server
        .lines()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    let find = |name: &str| {
        events
            .iter()
            .find(|e| e["event"] == name)
            .unwrap_or_else(|| panic!("no {name} event\n{}", server.transcript()))
    };
    let connected = find("connected");
    assert_eq!(connected["op"], "send");
    assert_eq!(connected["size"], 64);
    assert_eq!(find("disconnected")["messages"], 2000);
}
