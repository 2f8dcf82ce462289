//! The C examples (`examples/c/`) and the C test programs (`tests/c/`),
//! built as a C user builds them — librelink installed into a prefix by
//! `scripts/install-c.sh`, then `cc ... $(pkg-config --cflags --libs
//! relink)` with the system C compiler — and run with device faults.
//!
//! `examples/c/ping_pong.c` runs:
//!
//! - in one process on the in-process soft fabric (the server's device
//!   reset, the client's replaced);
//! - as two processes on the TCP soft fabric, each host its own soft device
//!   directory, each process resetting its own device while pings flow.
//!
//! The program checks every pong (exactly once, in order, with the value
//! the last RDMA WRITE put into the server's region) and every completion
//! itself; this test checks its exit status and its `RESULT` line.
//! `examples/c/zero_copy.c` (everything sent from and received into
//! registered memory) runs in one process, a device reset in the middle,
//! and as two processes on the TCP soft fabric, each resetting its own
//! device; its `RESULT` lines say every message and reply arrived once and
//! nothing was copied to be sent. Each test program checks itself and says
//! `<name>: ok`.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use relink_soft::Registry;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The cargo target directory this test was built in:
/// `<target>/<profile>/deps/<test>`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    exe.ancestors()
        .nth(3)
        .expect("<target>/<profile>/deps/<test>")
        .to_path_buf()
}

/// A command's output, or a panic that shows it.
fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{text}",
        out.status
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// librelink installed into a prefix (once per test binary): the prefix.
fn installed() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        // One place per target directory, emptied first: runs do not pile
        // up installs (a few hundred MB each) in the temporary directory.
        let root = target_dir().join("relink-c-test");
        let _ = std::fs::remove_dir_all(&root);
        let prefix = root.join("prefix");
        run(
            Command::new(repo().join("scripts/install-c.sh"))
                .arg(&prefix)
                .env("CARGO_TARGET_DIR", target_dir()),
            "scripts/install-c.sh",
        );
        prefix
    })
}

/// The C program `source` built against the installed librelink through
/// pkg-config, with warnings as errors.
fn build(source: &Path, name: &str) -> PathBuf {
    {
        let prefix = installed();
        let pc = prefix.join("lib/pkgconfig");
        let flags = run(
            Command::new("pkg-config")
                .args(["--static", "--cflags", "--libs", "relink"])
                .env("PKG_CONFIG_PATH", &pc),
            "pkg-config --static --cflags --libs relink",
        );
        let exe = prefix.parent().expect("the test's root").join(name);
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        // Static, so the program needs no LD_LIBRARY_PATH: `--static`
        // flags, and the archive named before the shared object is found.
        let mut cmd = Command::new(&cc);
        cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-o"])
            .arg(&exe)
            .arg(source)
            // The test programs' shared harness.h, next to them.
            .arg("-I")
            .arg(source.parent().expect("a source file's directory"));
        for f in flags.split_whitespace() {
            if f == "-lrelink" {
                cmd.arg(prefix.join("lib/librelink.a"));
            } else {
                cmd.arg(f);
            }
        }
        run(&mut cmd, &format!("cc {}", source.display()));
        exe
    }
}

/// `tests/c/<name>.c`, built.
fn test_program(name: &str) -> PathBuf {
    build(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c")),
        name,
    )
}

/// Build and run `tests/c/<name>.c`, which says `<name>: ok` on success,
/// and check that librelink printed nothing (stderr empty): its stdout.
fn run_quiet(name: &str) -> String {
    let out = Command::new(test_program(name))
        .output()
        .unwrap_or_else(|e| panic!("run {name}: {e}"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains(&format!("{name}: ok")),
        "{name}: {}:\n{stdout}{stderr}",
        out.status
    );
    assert!(stderr.is_empty(), "librelink printed:\n{stderr}");
    stdout.into_owned()
}

/// `examples/c/ping_pong.c`, built once.
fn ping_pong() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build(&repo().join("examples/c/ping_pong.c"), "ping_pong"))
}

/// `tests/c/errors.c`: bad input from C gets a status and a message naming
/// the problem in plain words, one status per mistake in every call;
/// lengths of 2^40 and `SIZE_MAX` are refused before anything is read or
/// allocated; misaligned atomics are refused at submit and cost the
/// session no transport; a poll with nothing is `RELINK_EMPTY`; a
/// too-small buffer loses nothing; `relink_version()` is relink's
/// version. librelink prints nothing on the way.
#[test]
fn errors_from_c_are_statuses_with_messages() {
    let exe = test_program("errors");
    let out = Command::new(exe).output().expect("run errors");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("0 failure(s)"),
        "errors: {}:\n{stdout}{stderr}",
        out.status
    );
    assert!(
        stdout.contains(&format!("version {}\n", env!("CARGO_PKG_VERSION"))),
        "{stdout}"
    );
    assert!(stderr.is_empty(), "librelink printed:\n{stderr}");
}

/// The `RESULT` line's `key=value` fields.
fn result(out: &str) -> Vec<(String, u64)> {
    let line = out
        .lines()
        .find(|l| l.starts_with("RESULT"))
        .unwrap_or_else(|| panic!("no RESULT line in:\n{out}"));
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

fn field(r: &[(String, u64)], key: &str) -> u64 {
    r.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no {key} in RESULT"))
}

#[test]
fn ping_pong_in_one_process_survives_a_reset_and_a_replacement() {
    let out = run(
        Command::new(ping_pong()).args(["inproc", "3000"]),
        "ping_pong inproc",
    );
    let r = result(&out);
    assert_eq!(field(&r, "rounds"), 3000, "{out}");
    assert!(field(&r, "resumes") >= 2, "two faults, two resumes:\n{out}");
}

/// `examples/c/zero_copy.c`, built once.
fn zero_copy() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| build(&repo().join("examples/c/zero_copy.c"), "zero_copy"))
}

/// The `RESULT role=ROLE` line's `key=value` fields.
fn role_result(out: &str, role: &str) -> Vec<(String, u64)> {
    let prefix = format!("RESULT role={role} ");
    let line = out
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line in:\n{}", tail(out)));
    result(line)
}

/// The last lines of a long output, for a failure's message.
fn tail(out: &str) -> String {
    let lines: Vec<&str> = out.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// The numbers of the lines starting with `prefix` (`"server: message "`),
/// and the sum of their byte counts (`... (N bytes, ...`).
fn numbered(out: &str, prefix: &str) -> (Vec<u64>, u64) {
    let mut numbers = Vec::new();
    let mut bytes = 0;
    for l in out.lines().filter_map(|l| l.strip_prefix(prefix)) {
        numbers.extend(
            l.split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok()),
        );
        bytes += l
            .split_once(" (")
            .and_then(|(_, rest)| rest.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
    }
    (numbers, bytes)
}

/// What `examples/c/zero_copy.c` printed, both sides' lines in `out`,
/// checked for `messages` messages: both `RESULT` lines; every message the
/// server got and every reply the client got printed once, in order; the
/// summary's notice once; nothing copied to be sent on either side; what
/// was copied on the way in is each received message's bytes once, and at
/// most twice (a message that found no buffer posted waited in line: a
/// copy) — with `exact` (one process: the virtual clock makes every run
/// the same, and none waits) exactly once. Returns the client's and the
/// server's resumes.
fn check_zero_copy(out: &str, messages: u64, exact: bool) -> (u64, u64) {
    let client = role_result(out, "client");
    let server = role_result(out, "server");
    let shown = tail(out);
    assert_eq!(field(&client, "messages"), messages, "{shown}");
    assert_eq!(field(&client, "replies"), messages, "{shown}");
    assert_eq!(field(&client, "duplicates"), 0, "{shown}");
    assert_eq!(field(&client, "summary"), 1, "{shown}");
    assert_eq!(field(&client, "send_copied_bytes"), 0, "{shown}");
    assert_eq!(field(&server, "received"), messages, "{shown}");
    assert_eq!(field(&server, "duplicates"), 0, "{shown}");
    assert_eq!(field(&server, "replies"), messages, "{shown}");
    assert_eq!(field(&server, "notices"), 1, "{shown}");
    assert_eq!(field(&server, "send_copied_bytes"), 0, "{shown}");
    // Each message and reply printed once, in order; the notice once.
    let all: Vec<u64> = (0..messages).collect();
    let (arrived, message_bytes) = numbered(out, "server: message ");
    assert_eq!(arrived, all, "the server's messages:\n{shown}");
    let (replied, reply_bytes) = numbered(out, "client: reply ");
    assert_eq!(replied, all, "the client's replies:\n{shown}");
    assert_eq!(
        out.matches(&format!("server: notice (imm {messages},"))
            .count(),
        1,
        "{shown}"
    );
    // The client also received the server's note (where its board is).
    let note: u64 = out
        .lines()
        .filter_map(|l| l.strip_prefix("client: the server's board is registration "))
        .filter_map(|l| {
            l.split_once(" (")?
                .1
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    for (copied, bytes, who) in [
        (
            field(&server, "receive_copied_bytes"),
            message_bytes,
            "server",
        ),
        (
            field(&client, "receive_copied_bytes"),
            reply_bytes + note,
            "client",
        ),
    ] {
        if exact {
            assert_eq!(copied, bytes, "{who}:\n{shown}");
        } else {
            assert!((bytes..=2 * bytes).contains(&copied), "{who}:\n{shown}");
        }
    }
    (field(&client, "resumes"), field(&server, "resumes"))
}

/// `examples/c/zero_copy.c`, built as its head says and run in one
/// process: every message (sent from registered memory without a copy,
/// one range or two) arrives exactly once in a buffer the server posted,
/// and every reply (echoed from that buffer with a scatter/gather list) in
/// one the client posted, across a reset of the client's device; the
/// WRITE_IMM summary gathered from two ranges arrives once after them;
/// nothing was copied to be sent, and each message's bytes once on the
/// way in.
#[test]
fn zero_copy_example_delivers_every_message_once() {
    let out = Command::new(zero_copy())
        .output()
        .expect("run the zero_copy example");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "zero_copy: {}:\n{stdout}{stderr}",
        out.status
    );
    // 24 messages by default.
    let (client_resumes, _) = check_zero_copy(&stdout, 24, true);
    assert!(client_resumes >= 1, "the reset, a resume:\n{stdout}");
    assert!(stdout.contains("client: resetting my device"), "{stdout}");
    assert!(stderr.is_empty(), "{stderr}");
}

/// A port of `ip` that was free a moment ago.
fn free_port(ip: [u8; 4]) -> u16 {
    TcpListener::bind(SocketAddr::from((ip, 0)))
        .expect("bind a free port")
        .local_addr()
        .expect("its address")
        .port()
}

/// An example run as two processes on the TCP soft fabric, each host its
/// own soft device directory under `root` (`a`: soft0 127.0.0.1/8, `b`:
/// soft0 127.0.0.2/8): the server on `b`, once it said it listens, and the
/// client on `a`, run to its end. The server's output is read as it comes
/// (one printing a line per message would block on a full pipe).
struct TwoProcesses {
    root: PathBuf,
    client: std::process::ExitStatus,
    /// The client's stdout and stderr.
    out: String,
    err: String,
    server: Reaped,
    server_out: Option<std::thread::JoinHandle<String>>,
}

/// Run `exe` as `tcp <dir> server <addr> <server_count> soft0` and, once
/// it listens, as `tcp <dir> client <addr> <client_count> soft0`; the
/// soft device directories under a fresh temporary directory named after
/// `tag`.
fn run_two_processes(
    exe: &Path,
    tag: &str,
    server_count: &str,
    client_count: &str,
) -> TwoProcesses {
    let root = std::env::temp_dir().join(format!("relink-c-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (a, b) = (root.join("a"), root.join("b"));
    for (dir, net) in [(&a, "127.0.0.1/8"), (&b, "127.0.0.2/8")] {
        Registry::open(dir)
            .expect("soft device directory")
            .add("soft0", vec![net.parse().expect("net")], None, None)
            .expect("add soft0");
    }
    let addr = format!("127.0.0.2:{}", free_port([127, 0, 0, 2]));
    let mut server = Reaped(
        Command::new(exe)
            .arg("tcp")
            .arg(&b)
            .args(["server", &addr, server_count, "soft0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the server"),
    );
    let mut lines = BufReader::new(server.0.stdout.take().expect("stdout")).lines();
    let first = lines
        .next()
        .expect("the server says it listens")
        .expect("read");
    assert!(first.contains("listening"), "{first}");
    let server_out =
        std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("\n"));
    let client = Command::new(exe)
        .arg("tcp")
        .arg(&a)
        .args(["client", &addr, client_count, "soft0"])
        .output()
        .expect("run the client");
    TwoProcesses {
        root,
        client: client.status,
        out: String::from_utf8_lossy(&client.stdout).into_owned(),
        err: String::from_utf8_lossy(&client.stderr).into_owned(),
        server,
        server_out: Some(server_out),
    }
}

impl TwoProcesses {
    /// The server's exit status and output (after its "listening" line),
    /// once it exits.
    fn wait_server(&mut self) -> (std::process::ExitStatus, String) {
        let status = self.server.0.wait().expect("the server exits");
        let out = self
            .server_out
            .take()
            .expect("the server waited for once")
            .join()
            .expect("the server's output");
        (status, out)
    }
}

#[test]
fn ping_pong_across_two_processes_survives_resets_on_both_sides() {
    let mut run = run_two_processes(ping_pong(), "tcp", "500", "2000");
    let (out, err) = (&run.out, &run.err);
    assert!(run.client.success(), "client failed:\n{out}{err}");
    let r = result(out);
    assert_eq!(field(&r, "rounds"), 2000, "{out}");
    assert!(
        field(&r, "resumes") >= 2,
        "the server's reset and the client's own, two resumes:\n{out}"
    );
    // The server saw the goodbye, answered everything and exited.
    let (status, rest) = run.wait_server();
    assert!(status.success(), "server: {status}:\n{rest}");
    let sr = result(&rest);
    assert_eq!(field(&sr, "answered"), 2000);
    let _ = std::fs::remove_dir_all(&run.root);
}

/// `examples/c/zero_copy.c` as two processes on the TCP soft fabric, each
/// host its own soft device directory: the server resets its device after
/// 1,000 messages, the client its own halfway, while messages and replies
/// flow; every one of 5,000 messages and replies arrives once, in order,
/// with its bytes, the summary once after them, nothing copied to be sent
/// on either side, and each side resumed.
#[test]
fn zero_copy_across_two_processes_survives_resets_on_both_sides() {
    let mut run = run_two_processes(zero_copy(), "zc", "1000", "5000");
    let (out, err) = (run.out.clone(), run.err.clone());
    assert!(
        run.client.success(),
        "client failed ({}):\n{}\n{err}",
        run.client,
        tail(&out)
    );
    // The server saw the goodbye, checked the summary and exited.
    let (status, rest) = run.wait_server();
    assert!(status.success(), "server: {status}:\n{}", tail(&rest));
    let (client_resumes, server_resumes) = check_zero_copy(&format!("{out}\n{rest}"), 5000, false);
    // Each reset costs both sides a loss; two close together may make one.
    assert!(client_resumes >= 1, "the client resumed:\n{}", tail(&out));
    assert!(server_resumes >= 1, "the server resumed:\n{}", tail(&rest));
    assert!(
        out.contains("client: resetting my device soft0"),
        "{}",
        tail(&out)
    );
    assert!(
        rest.contains("server: resetting my device soft0"),
        "{}",
        tail(&rest)
    );
    let _ = std::fs::remove_dir_all(&run.root);
}

/// `tests/c/manual.c`: manual recovery from C — a held session keeps its
/// messages and makes no attempt until `relink_resume`, then delivers
/// each exactly once; the live recovery policy.
#[test]
fn manual_recovery_from_c_waits_for_resume() {
    let exe = test_program("manual");
    let out = run(&mut Command::new(exe), "manual");
    assert!(out.contains("manual: ok"), "{out}");
}

/// `tests/c/planned.c`: planned outages from C — a suspended session
/// outlives a reset and its give-up deadline, then resumes with every
/// message delivered once and nothing replayed; a drain of a session's only
/// device reports it blocked.
#[test]
fn planned_outages_from_c() {
    let exe = test_program("planned");
    let out = run(&mut Command::new(exe), "planned");
    assert!(out.contains("planned: ok"), "{out}");
}

/// `tests/c/shared.c`: a shared receive queue and a memory window from C —
/// two sessions on one queue and WRITEs through a windowed region, across
/// a reset; a queue too small refuses a third session.
#[test]
fn shared_receive_and_window_from_c() {
    let exe = test_program("shared");
    let out = run(&mut Command::new(exe), "shared");
    assert!(out.contains("shared: ok"), "{out}");
}

/// `tests/c/standby.c`: the standby and probe knobs from C — accepted in
/// range, refused out of it with the key named (a refused change leaves
/// the options as they were); a session made with them (one path from
/// `relink_connect`: no second device for a standby) delivers every
/// message once, in order, across a reset and an idle stretch of
/// keepalives.
#[test]
fn standby_and_probe_knobs_from_c() {
    let exe = test_program("standby");
    let out = run(&mut Command::new(exe), "standby");
    assert!(out.contains("standby: ok"), "{out}");
}

/// `tests/c/backpressure.c`: backpressure and what a completion says,
/// from C — a session nobody serves takes its `max_outstanding` (100 of
/// 1,000 sends) and refuses the rest with `RELINK_ERR_AGAIN`, every
/// submitting call alike, `relink_room` 0; on a connected pair, taking a
/// completion of a full session gives one `RELINK_EVENT_WRITABLE` and a
/// room of 1; `relink_post` of every kind carries each operation's
/// context, kind and length to its completion, and bad input to it gets
/// its documented status and costs the session nothing. librelink prints
/// nothing on the way.
#[test]
fn backpressure_and_post_from_c() {
    let stdout = run_quiet("backpressure");
    assert!(
        stdout.contains("nobody serves: 100 accepted, 900 RELINK_ERR_AGAIN"),
        "{stdout}"
    );
}

/// `tests/c/registrations.c`: a C program registers buffers of its own
/// (`relink_register`: the target a heap buffer it tells the initiator
/// the id of in a message, the initiator a stack buffer for its local
/// ranges), and the initiator's WRITE, READs and FETCH_ADD land in those
/// very buffers — checked there, with no `relink_region_read` — before
/// and after a reset of each side's device; deregistration is refused
/// while an operation uses the buffer (`RELINK_ERR_BUSY`) and for unknown
/// ids, and after it the peer's WRITE fails and leaves the buffer alone;
/// bad input gets its code. librelink prints nothing on the way.
#[test]
fn registrations_of_the_programs_own_buffers_from_c() {
    let stdout = run_quiet("registrations");
    for round in 0..3 {
        assert!(stdout.contains(&format!("round {round}: ")), "{stdout}");
    }
}

/// `tests/c/send_from.c`: messages sent from a C program's own registered
/// memory without a copy (`relink_post` with `RELINK_WR_FROM_REGION`, and
/// with `RELINK_WR_SGL` of 3 ranges over two registrations): the receiver
/// gets exactly the ranges' bytes, in order, once each, and every
/// completion its context, kind MESSAGE and total length — without a
/// fault, across a reset of the sender's device with messages in flight,
/// and for messages posted while it recovers; deregistering a buffer a
/// message not yet completed is sent from is `RELINK_ERR_BUSY`, and
/// succeeds after the completion; bad input gets its documented status;
/// `RELINK_COUNTER_SEND_COPIED_BYTES` stays 0 for all of it. librelink
/// prints nothing on the way.
#[test]
fn messages_from_registered_memory_from_c() {
    let stdout = run_quiet("send_from");
    for round in 0..3 {
        assert!(stdout.contains(&format!("round {round}: ")), "{stdout}");
    }
    assert!(stdout.contains("copied: 0 bytes to send"), "{stdout}");
}

/// `tests/c/rendezvous.c`: a C receiver that reads the sender's messages
/// itself (`relink_options_set_rendezvous`) — every message from one range
/// of the sender's registered memory fills its posted buffer in order,
/// once, with its own bytes (the sender overwrites each at its
/// completion), across resets of both devices; the long ones are read
/// (`RELINK_COUNTER_FETCHED`) with no byte copied on either side.
#[test]
fn messages_read_by_the_receiver_from_c() {
    let stdout = run_quiet("rendezvous");
    let figures = stdout.lines().find(|l| l.starts_with("read "));
    assert!(figures.is_some(), "{stdout}");
    eprintln!("rendezvous.c: {}", figures.unwrap_or_default());
}

/// `tests/c/posted_receives.c`: posted receives and WRITEs with immediate
/// data from C — a C receiver posts buffers of its own registered memory
/// and of its session's region (`relink_post_receive`): they are filled
/// in the order posted with each message's bytes, length, sequence
/// number and the buffer's context, a message longer than its buffer is
/// truncated and says so, messages sent before any buffer is posted fill
/// the buffers posted after; a WRITE with immediate data
/// (`relink_write_imm`, `relink_post` of `RELINK_OP_KIND_WRITE_IMM`)
/// takes a posted buffer as `RELINK_RECEIVE_WRITTEN`, or without one
/// comes through `relink_poll_written` in its place between messages
/// (`relink_poll_delivery` says `RELINK_EMPTY` while it is next), its
/// bytes in place first; across resets of the sender's device every
/// message and notice arrives exactly once, in order; node-wide,
/// `relink_poll_output` gives `RELINK_OUTPUT_RECEIVED` and
/// `RELINK_OUTPUT_WRITTEN` (and writes nothing past `len` for the other
/// kinds: an older program's struct ends there); a posted buffer keeps its registration in use
/// (`RELINK_ERR_BUSY`) until closing the session flushes it
/// (`RELINK_RECEIVE_FLUSHED`); bad input gets its documented status.
/// librelink prints nothing on the way.
#[test]
fn posted_receives_and_write_imm_from_c() {
    let stdout = run_quiet("posted_receives");
    for phase in [
        "alone: ",
        "late: ",
        "in order: ",
        "written: ",
        "resets: ",
        "node-wide: ",
        "first layout: ",
        "flushed: 3 buffers",
    ] {
        assert!(stdout.contains(phase), "no {phase:?} in:\n{stdout}");
    }
}

/// `tests/c/sgl_one_sided.c`: one-sided operations over scatter/gather
/// lists from C (`relink_post` with `RELINK_WR_SGL` on WRITE, READ and
/// WRITE_IMM) — WRITEs gathering 3 ranges (two registrations of the
/// program's own and its session's region) and READs scattering over 2,
/// checked byte for byte at both ends, and WRITE_IMMs from 2 ranges whose
/// notice says their total; every completion its kind, context and total
/// length; without a fault, across a reset of the initiator's device with
/// the operations in flight (replayed), and posted during a reset of the
/// target's; deregistering a buffer a list names is `RELINK_ERR_BUSY`
/// until the completion; bad input gets its documented status. librelink
/// prints nothing on the way.
#[test]
fn one_sided_scatter_gather_from_c() {
    let stdout = run_quiet("sgl_one_sided");
    for round in 0..3 {
        assert!(stdout.contains(&format!("round {round}: ")), "{stdout}");
    }
}

/// `tests/c/shared_pool.c`: a shared receive queue's pool of posted
/// buffers from C (`relink_post_shared_receive`,
/// `relink_take_shared_receives`) — two sessions on one queue take the
/// pool's buffers, oldest first, after their own (`relink_post_receive`);
/// each receive ends on the session its message came on, in order per
/// session, with its bytes and nothing past them; again across a reset of
/// the target's device, a WRITE notice taking a pool buffer; the
/// registration is `RELINK_ERR_BUSY` and the queue in use while buffers
/// are in the pool; the untaken ones are handed back in order, `cap` a
/// call, the rest staying posted (one still takes a message); then the
/// deregistration succeeds; bad input gets its documented status.
/// librelink prints nothing on the way.
#[test]
fn shared_receive_pool_from_c() {
    let stdout = run_quiet("shared_pool");
    for phase in ["idle: ", "pool: ", "reset: ", "take back: "] {
        assert!(stdout.contains(phase), "no {phase:?} in:\n{stdout}");
    }
}

/// A child process killed if the test ends before it exits.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `tests/c/standby_events.c`: a hot standby's events reach a C program —
/// `RELINK_EVENT_STANDBY_UP`, then `RELINK_EVENT_STANDBY_LOST` with
/// `RELINK_STANDBY_DOWN` when its device goes, `STANDBY_UP` again when it
/// is back, `STANDBY_LOST` with `RELINK_STANDBY_RELEASED` when the session
/// is closed. The C program is the target, on the TCP soft fabric (host
/// `b`: soft0 127.0.0.2, soft1 127.0.1.2); this test is its initiator
/// (host `a`: soft0 127.0.0.1, soft1 127.0.1.1), a relink node with a path
/// through each pair and the standby on — from C, `relink_connect` gives
/// one path, so a C initiator builds no standby.
#[test]
fn standby_events_reach_a_c_target() {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use relink_rs::{Node, Path as SessionPath, Policy, SessionEvent, SessionOptions};
    use relink_soft::TcpHost;

    let exe = test_program("standby_events");
    let root = std::env::temp_dir().join(format!("relink-c-standby-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (a, b) = (root.join("a"), root.join("b"));
    for (dir, host) in [(&a, 1), (&b, 2)] {
        let reg = Registry::open(dir).expect("soft device directory");
        for (dev, net) in [("soft0", 0), ("soft1", 1)] {
            let cidr = format!("127.0.{net}.{host}/24");
            reg.add(dev, vec![cidr.parse().expect("net")], None, None)
                .unwrap_or_else(|e| panic!("add {dev}: {e}"));
        }
    }
    let port = free_port([0, 0, 0, 0]);
    let mut target = Reaped(
        Command::new(&exe)
            .arg(&b)
            .arg(format!("0.0.0.0:{port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start standby_events"),
    );
    let mut lines = BufReader::new(target.0.stdout.take().expect("stdout")).lines();
    let first = lines
        .next()
        .expect("the target says it listens")
        .expect("read");
    assert!(first.contains("listening"), "{first}");

    let mut node = Node::new(Arc::new(TcpHost::open(&a).expect("host a")));
    let policy = Policy::builder()
        .standby(true)
        .keepalive(None)
        .build()
        .expect("policy");
    let opts = SessionOptions::builder()
        .policy(policy)
        .build()
        .expect("options");
    let paths = [0, 1]
        .map(|net| SessionPath {
            local: Some(format!("127.0.{net}.1").parse().expect("an address")),
            peer: format!("127.0.{net}.2:{port}").parse().expect("an address"),
        })
        .to_vec();
    let s = node.connect(paths, opts).expect("connect");
    // Until the target closed the session (it is reaped once its last
    // event is taken); a hang's bound, not a measurement.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut events = Vec::new();
    while node.state(s).is_some_and(|st| !st.is_terminal()) && Instant::now() < deadline {
        let _ = node.wait_for(Duration::from_millis(10));
        while let Some(e) = node.poll_event(s) {
            events.push(e);
        }
    }
    while let Some(e) = node.poll_event(s) {
        events.push(e);
    }
    let status = target.0.wait().expect("the target exits");
    let out: Vec<String> = lines.map_while(Result::ok).collect();
    let out = out.join("\n");
    assert!(
        status.success() && out.contains("standby_events: ok"),
        "the target: {status}:\n{out}\nthe initiator's events: {events:#?}"
    );
    let r = result(&out);
    assert_eq!(
        (field(&r, "ups"), field(&r, "downs"), field(&r, "released")),
        (2, 1, 1),
        "{out}"
    );
    // The initiator had a standby up (the second too, unless the target's
    // goodbye on the current connection overtook its answer on the
    // standby's), and its session ended with the target's close, not a
    // loss.
    let ups = events
        .iter()
        .filter(|e| matches!(e, SessionEvent::StandbyUp { .. }))
        .count();
    assert!((1..=2).contains(&ups), "{events:#?}");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, SessionEvent::DeviceLost { .. })),
        "{events:#?}"
    );
    let _ = std::fs::remove_dir_all(&root);
}
