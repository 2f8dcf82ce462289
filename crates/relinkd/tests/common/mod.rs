//! Helpers of the relinkd end-to-end tests: relinkd processes with their
//! output collected, soft hosts, temporary directories, configuration
//! files ([`config`]), disk images ([`images`]), bounded runs of client
//! programs, the control socket's client side.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use relink_proctest::Proc;
use relink_skip::Skip;
use relink_soft::Registry;
use relinkd::control::protocol::{self, Response, StatusResult};

pub mod config;
pub mod images;

/// How long any one step may take. Nothing here measures time: these
/// only keep a hang from lasting forever on a slow, shared machine.
pub const STEP: Duration = Duration::from_secs(120);

/// A running relinkd with its stdout and stderr lines collected; killed on
/// drop unless it exited. The waits panic with its transcript (and those
/// of the other daemons given) when what they wait for does not come.
pub struct Daemon {
    /// What it is, for messages.
    pub what: &'static str,
    proc: Proc,
}

impl Daemon {
    /// Starts `relinkd CONFIG`.
    pub fn start(what: &'static str, config: &Path) -> Daemon {
        Daemon::spawn(
            what,
            Command::new(env!("CARGO_BIN_EXE_relinkd")).arg(config),
        )
    }

    /// Starts the target `relinkd CONFIG` ("target" in messages) and waits
    /// until its export `export` listens.
    #[track_caller]
    pub fn start_target(config: &Path, export: &str) -> Daemon {
        let mut d = Daemon::start("target", config);
        d.expect_line(&format!("export {export} listening"));
        d
    }

    /// Starts the initiator `relinkd CONFIG` ("initiator" in messages) and
    /// waits until its connection `connect` serves NBD.
    #[track_caller]
    pub fn start_initiator(config: &Path, connect: &str) -> Daemon {
        let mut d = Daemon::start("initiator", config);
        d.expect_line(&format!("connect {connect} serving nbd"));
        d
    }

    /// Starts `command` (relinkd itself, or a program that execs it, as
    /// `ip netns exec` does) with its output collected.
    pub fn spawn(what: &'static str, command: &mut Command) -> Daemon {
        Daemon {
            what,
            proc: Proc::spawn(what, command),
        }
    }

    /// Its output so far.
    pub fn transcript(&self) -> String {
        self.proc.transcript()
    }

    /// Whether a line of its stderr contains `needle`.
    pub fn stderr_has(&self, needle: &str) -> bool {
        self.stderr_count(needle) > 0
    }

    /// How many stderr lines (logs, the library's events among them)
    /// contain `needle`.
    pub fn stderr_count(&self, needle: &str) -> usize {
        self.proc.stderr_count(needle)
    }

    /// How many stdout or stderr lines contain `needle`.
    pub fn count(&self, needle: &str) -> usize {
        self.proc.count(needle)
    }

    /// Its stderr lines so far (the logs).
    pub fn stderr_lines(&self) -> Vec<String> {
        self.proc.stderr()
    }

    /// Sends `sig` (a name `kill -s` takes: "STOP", "CONT", "TERM")
    /// without waiting for anything.
    #[track_caller]
    pub fn send(&self, sig: &str) {
        let ok = Command::new("kill")
            .args(["-s", sig, &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(ok.success(), "kill -s {sig} the {}", self.what);
    }

    /// Waits until a stdout line contains `needle` (the progress lines),
    /// or panics.
    #[track_caller]
    pub fn expect_line(&mut self, needle: &str) {
        self.wait_until(&format!("a stdout line with {needle:?}"), &[], |p| {
            p.stdout_count(needle) > 0
        });
    }

    /// Waits until `n` lines of stdout or stderr contain `needle` (the
    /// library's events are logged on stderr), or panics with the
    /// transcripts of this daemon and of `others`.
    #[track_caller]
    pub fn expect_count(&mut self, needle: &str, n: usize, others: &[&Daemon]) {
        self.wait_until(&format!("{n} lines with {needle:?}"), others, |p| {
            p.count(needle) >= n
        });
    }

    #[track_caller]
    fn wait_until(&mut self, what: &str, others: &[&Daemon], done: impl Fn(&Proc) -> bool) {
        if self.proc.wait_until(STEP, done) {
            return;
        }
        let t = images::transcripts(others);
        match self.proc.wait_exit(Duration::ZERO) {
            Some(s) => panic!(
                "the {} exited ({s}) before {what}\n{}\n{t}",
                self.what,
                self.transcript()
            ),
            None => panic!(
                "the {} did not print {what}\n{}\n{t}",
                self.what,
                self.transcript()
            ),
        }
    }

    /// Waits until it exits on its own, or panics with the transcripts of
    /// this daemon and of `others`.
    #[track_caller]
    pub fn wait_exit(&mut self, others: &[&Daemon]) -> ExitStatus {
        self.proc.wait_exit(STEP).unwrap_or_else(|| {
            panic!(
                "the {} kept running\n{}\n{}",
                self.what,
                self.transcript(),
                images::transcripts(others)
            )
        })
    }

    #[track_caller]
    fn signal(&mut self, sig: &str) -> ExitStatus {
        self.proc.signal(sig, STEP).unwrap_or_else(|| {
            panic!(
                "the {} did not exit on SIG{sig}\n{}",
                self.what,
                self.transcript()
            )
        })
    }

    /// SIGTERM, then the exit status.
    #[track_caller]
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal("TERM")
    }

    /// SIGTERM, and asserts that it exits with success (panics with
    /// "`what` exit: STATUS" and its transcript otherwise).
    #[track_caller]
    pub fn terminate_ok(&mut self) {
        let s = self.terminate();
        assert!(
            s.success(),
            "{} exit: {s}\n{}",
            self.what,
            self.transcript()
        );
    }

    /// SIGKILL, then the exit status.
    #[track_caller]
    pub fn kill9(&mut self) -> ExitStatus {
        self.signal("KILL")
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }
}

/// A temporary directory, removed on drop.
pub struct Root(pub PathBuf);

impl Root {
    /// `relinkd-NAME-PID` in the temporary directory, created empty.
    pub fn new(name: &str) -> Root {
        let root = std::env::temp_dir().join(format!("relinkd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        Root(root)
    }
}

/// Soft hosts `a` and `b` for a target (`b`) and an initiator (`a`) on
/// the soft TCP fabric: the registries `ROOT/a` and `ROOT/b`, each with
/// device `soft0`, `a`'s at 127.0.0.1/8 and `b`'s at 127.0.0.2/8.
pub struct SoftHosts {
    /// Host `a`'s registry directory: the initiator's `soft_dir`.
    pub dir_a: PathBuf,
    /// Host `b`'s registry directory: the target's `soft_dir`.
    pub dir_b: PathBuf,
    pub reg_a: Registry,
    pub reg_b: Registry,
}

impl SoftHosts {
    /// Creates hosts `a` and `b` below `root`.
    pub fn create(root: &Path) -> SoftHosts {
        let (dir_a, dir_b) = (root.join("a"), root.join("b"));
        SoftHosts {
            reg_a: soft_host(&dir_a, "127.0.0.1"),
            reg_b: soft_host(&dir_b, "127.0.0.2"),
            dir_a,
            dir_b,
        }
    }
}

impl SoftHosts {
    /// A target daemon on host `b` serving `volume` as export `disk`, and
    /// an initiator daemon on host `a` offering it on the NBD socket
    /// `root/nbd.sock`, each with a control socket (`root/b.ctl`,
    /// `root/a.ctl`) and default settings; both started (the initiator
    /// serves NBD). Returns them and the export's NBD URL.
    #[track_caller]
    pub fn serve_disk(&self, root: &Path, volume: &Path) -> (Daemon, Daemon, String) {
        let addr = free_addr("127.0.0.2");
        let target_conf = root.join("target.toml");
        config::ConfigFile::new()
            .backend(&self.dir_b)
            .control(&root.join("b.ctl"))
            .export("disk", &addr, volume)
            .write(&target_conf);
        let socket = root.join("nbd.sock");
        let init_conf = root.join("initiator.toml");
        config::ConfigFile::new()
            .backend(&self.dir_a)
            .control(&root.join("a.ctl"))
            .connect("disk", &addr, &socket)
            .write(&init_conf);
        let target = Daemon::start_target(&target_conf, "disk");
        let init = Daemon::start_initiator(&init_conf, "disk");
        let url = format!("nbd+unix:///disk?socket={}", socket.display());
        (target, init, url)
    }
}

/// Opens (creating it) the soft device registry `dir`, a soft host, and
/// adds device `soft0` owning `ip`/8.
pub fn soft_host(dir: &Path, ip: &str) -> Registry {
    let reg = Registry::open(dir).unwrap();
    reg.add(
        "soft0",
        vec![format!("{ip}/8").parse().unwrap()],
        None,
        None,
    )
    .unwrap();
    reg
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The path of client `program` (`qemu-img`, `qemu-io`, `nbdcopy`) on
/// `PATH`, or the [`Skip`] that names it and its package (qemu-utils,
/// libnbd-bin).
pub fn tool(program: &str) -> Result<PathBuf, Skip> {
    let package = match program {
        "qemu-img" | "qemu-io" => "qemu-utils",
        "nbdcopy" | "nbdinfo" => "libnbd-bin",
        other => panic!("no package known for the client `{other}`"),
    };
    relink_skip::find_program(program, package)
}

/// A TCP port free on `ip` when asked (bound, then let go).
pub fn free_port(ip: &str) -> u16 {
    TcpListener::bind(format!("{ip}:0"))
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

/// `IP:PORT` with a port free on `ip`: an export's `listen` address.
pub fn free_addr(ip: &str) -> String {
    format!("{ip}:{}", free_port(ip))
}

/// Waits until `f()`, or panics with `what` and the transcripts.
#[track_caller]
pub fn wait_for(what: &str, daemons: &[&Daemon], mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + STEP;
    while !f() {
        if Instant::now() >= deadline {
            let t: Vec<String> = daemons.iter().map(|d| d.transcript()).collect();
            panic!("{what} did not happen\n{}", t.join("\n"));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Send raw request lines to the control socket at `sock` on one
/// connection; the response lines.
pub fn raw(sock: &Path, lines: &[&str]) -> Vec<String> {
    let s = UnixStream::connect(sock).expect("connect to the control socket");
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut out = Vec::new();
    for l in lines {
        w.write_all(l.as_bytes()).unwrap();
        w.write_all(b"\n").unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        out.push(line.trim_end().to_string());
    }
    out
}

/// Run `command` on the control socket at `sock`: its response.
pub fn call(sock: &Path, command: protocol::Command) -> Response {
    let line = protocol::Request::new(command).to_line();
    let got = raw(sock, &[line.trim_end()]);
    serde_json::from_str(&got[0]).unwrap_or_else(|e| panic!("response {:?}: {e}", got[0]))
}

/// `status` on the control socket at `sock`.
pub fn status(sock: &Path) -> StatusResult {
    call(sock, protocol::Command::Status {})
        .into_result()
        .expect("status")
}

/// The `relink` binary next to relinkd (built by a workspace build), or
/// the [`Skip`] for want of it.
pub fn relink_bin() -> Result<PathBuf, Skip> {
    let p = Path::new(env!("CARGO_BIN_EXE_relinkd")).with_file_name("relink");
    if p.exists() {
        Ok(p)
    } else {
        Err(Skip::missing(
            "the relink CLI (cargo build -p relink-cli)",
            format!(
                "no relink CLI at {} (build it: cargo build -p relink-cli with the same profile)",
                p.display()
            ),
        ))
    }
}

/// A `qemu-io` of `commands` on the NBD export `name` at `socket`.
pub fn qemu_io(socket: &Path, name: &str, commands: &[&str]) -> Command {
    let mut c = Command::new("qemu-io");
    c.args(["-f", "raw"]);
    for cmd in commands {
        c.args(["-c", cmd]);
    }
    c.arg(format!("nbd+unix:///{name}?socket={}", socket.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs `command` to its end, killing it if it runs longer than
/// [`STEP`]: `None` then (it hung).
pub fn run_bounded(command: &mut Command) -> Option<Output> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + STEP;
    loop {
        if child.try_wait().unwrap().is_some() {
            return Some(child.wait_with_output().unwrap());
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `program` with `args` (bounded by [`STEP`]) and asserts that it
/// succeeds: its stdout and stderr, one after the other. Panics with
/// them and the transcripts of `daemons` if it fails or hangs.
#[track_caller]
pub fn run_ok(program: &Path, args: &[&str], daemons: &[&Daemon]) -> String {
    let out = run_bounded(Command::new(program).args(args)).unwrap_or_else(|| {
        panic!(
            "{} {args:?} hung\n{}",
            program.display(),
            images::transcripts(daemons)
        )
    });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{} {args:?}: {}\n{text}\n{}",
        program.display(),
        out.status,
        images::transcripts(daemons)
    );
    text
}
