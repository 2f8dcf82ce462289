//! relinkd next to `nbdkit file` and the local file, measured in one run
//! on this machine: two relinkd processes (a target serving a file from
//! soft host `b`, 127.0.0.2, and an initiator offering it on an NBD Unix
//! socket from soft host `a`, 127.0.0.1, on the soft TCP fabric).
//!
//! ```text
//! cargo bench -p relinkd --bench nbd                          # full run
//! RELINK_BENCH_QUICK=1 cargo bench -p relinkd --bench nbd     # quick run
//! ```
//!
//! 1. **Throughput**: `qemu-img bench` with 1 MiB sequential writes and
//!    4 KiB reads at a pseudo-random stride (a step of 7919 blocks modulo
//!    the image: every read lands on a different, far-away block), both at
//!    queue depth 16, against the relinkd socket, `nbdkit file` on a Unix
//!    socket (skipped when nbdkit is missing) and the local file. Ratios
//!    are relinkd / nbdkit and relinkd / file.
//! 2. **Copies**: the whole volume copied with the clients operators
//!    run — `qemu-img convert` and `nbdcopy` of a file of non-zero bytes
//!    onto the export, `nbdcopy` of the export to `null:` — through
//!    relinkd and through nbdkit, alternated, the median of 3 runs each
//!    (1 in a quick run); ratios as rates, nbdkit's time over relinkd's
//!    (without nbdcopy its rows are reported skipped).
//! 3. **Stall**: a writer on the relinkd socket (one 4 KiB write at a
//!    time, each timed) while the target's soft device is reset, then the
//!    initiator's device is replaced, then (a second device added to host
//!    `a`, 127.0.0.3) the device the session is on is drained through the
//!    initiator's control socket; the longest request after each event is
//!    the longest stall a client sees.
//! 4. **Idle CPU**: a third relinkd with 100 `[[connect]]` entries to the
//!    one export (queue depth 4 each), idle; CPU time (user + system) of
//!    the initiator and the target from `/proc/<pid>/stat`.
//!
//! `RELINK_BENCH_NBD_MAX_IO=<bytes>` sets `max_io` of both daemons (default
//! relink-block's, 128 KiB), for a look at how the split size matters.
//!
//! Prints a table and `RESULT nbd ...` lines. Needs `qemu-img` (qemu-utils);
//! without it, and for the nbdkit baseline without `nbdkit`, it reports the
//! skip through relink-skip (a `SKIPPED (part):` line on stderr, counted
//! as skipped by `scripts/test.sh`, a failure under `CI=true`, whose
//! install step provides both) and goes on without that part. Run without
//! `--bench` (as `cargo test --benches` does) it makes a quick run.

/// The integration tests' helpers: the soft hosts and the configuration
/// files are set up as theirs are.
#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::config::ConfigFile;
use common::{free_addr, SoftHosts};
use relink_nbd::consts::*;
use relink_nbd::handshake::OptionHeader;
use relink_nbd::reply::{OptionReply, SimpleReply};
use relink_nbd::request::RequestHeader;
use relink_proctest::Proc;
use relinkd::control::protocol::{self, ConnectionStatus, DrainResult, Response, StatusResult};

/// How long any one setup step may take.
const STEP: Duration = Duration::from_secs(120);
/// Idle connections of the CPU phase.
const IDLE_CONNECTIONS: usize = 100;

struct Plan {
    size: u64,
    write_count: u32,
    read_count: u32,
    idle: Duration,
}

fn plan(quick: bool) -> Plan {
    if quick {
        Plan {
            size: 64 << 20,
            write_count: 64,
            read_count: 4000,
            idle: Duration::from_secs(2),
        }
    } else {
        Plan {
            size: 512 << 20,
            write_count: 1024,
            read_count: 100_000,
            idle: Duration::from_secs(10),
        }
    }
}

/// A child process (relinkd, nbdkit) with its output lines collected;
/// asked to stop with SIGTERM on drop, killed if it does not within 10 s.
struct Daemon(Proc);

impl Daemon {
    fn start(what: &str, cmd: &mut Command) -> Daemon {
        Daemon(Proc::spawn(what, cmd))
    }

    fn relinkd(what: &str, config: &Path) -> Daemon {
        Daemon::start(
            what,
            Command::new(env!("CARGO_BIN_EXE_relinkd")).arg(config),
        )
    }

    /// Lines of stderr (`err`) or stdout containing `needle`.
    fn count(&self, needle: &str, err: bool) -> usize {
        if err {
            self.0.stderr_count(needle)
        } else {
            self.0.stdout_count(needle)
        }
    }

    fn wait_lines(&mut self, needle: &str, n: usize, err: bool) {
        if !self.0.wait_until(STEP, |_| self.count(needle, err) >= n) {
            panic!("no {n} lines with {needle:?}\n{}", self.0.transcript());
        }
    }

    /// CPU seconds (user + system) from `/proc/<pid>/stat`.
    fn cpu_s(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.0.pid()))
            .expect("read /proc/<pid>/stat");
        let after = &stat[stat.rfind(')').expect("comm") + 2..];
        let f: Vec<&str> = after.split(' ').collect();
        // Fields 14 and 15 (utime, stime) are 12 and 13 after the comm.
        let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
        let hz = clk_tck();
        ticks as f64 / hz
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.0.exited().is_none() {
            let _ = self.0.signal("TERM", Duration::from_secs(10));
        }
    }
}

/// CPU seconds (user + system) of this process's children that have been
/// waited for (`/proc/self/stat` cutime + cstime): a finished client run's
/// CPU is the difference across it.
fn children_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    // Fields 16 and 17 (cutime, cstime) are 14 and 15 after the comm.
    let ticks: u64 = f[13].parse::<u64>().unwrap() + f[14].parse::<u64>().unwrap();
    ticks as f64 / clk_tck()
}

fn clk_tck() -> f64 {
    let out = Command::new("getconf").arg("CLK_TCK").output();
    out.ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// One `qemu-img bench` run: seconds, from its "Run completed in" line.
fn qemu_bench(args: &[&str], target: &str) -> f64 {
    let out = Command::new("qemu-img")
        .arg("bench")
        .args(args)
        .arg(target)
        .output()
        .expect("run qemu-img bench");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "qemu-img bench {args:?} {target}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .find_map(|l| l.strip_prefix("Run completed in "))
        .and_then(|l| l.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no time in {text}"))
}

/// MiB/s of 1 MiB sequential writes and reads/s of 4 KiB strided reads,
/// each at queue depth 16.
fn throughput(p: &Plan, target: &str, fmt_args: &[&str]) -> (f64, f64) {
    let wc = p.write_count.to_string();
    let mut a = fmt_args.to_vec();
    a.extend(["-w", "-c", &wc, "-d", "16", "-s", "1M"]);
    let write_s = qemu_bench(&a, target);
    let rc = p.read_count.to_string();
    let step = (7919u64 * 4096).to_string();
    let mut a = fmt_args.to_vec();
    a.extend(["-c", &rc, "-d", "16", "-s", "4K", "-S", &step]);
    let read_s = qemu_bench(&a, target);
    (
        f64::from(p.write_count) / write_s,
        f64::from(p.read_count) / read_s,
    )
}

/// `nbdkit file` on `file`, serving on a Unix socket in `root`: the
/// daemon and its URL.
fn start_nbdkit(program: &Path, root: &Path, file: &Path) -> (Daemon, String) {
    let ksock = root.join("nbdkit.sock");
    let mut kit = Daemon::start(
        "nbdkit",
        Command::new(program)
            .args(["-f", "-U"])
            .arg(&ksock)
            .arg("file")
            .arg(format!("file={}", file.display())),
    );
    let deadline = Instant::now() + STEP;
    while !ksock.exists() {
        assert!(Instant::now() < deadline, "nbdkit did not start");
        if let Some(s) = kit.0.exited() {
            panic!("nbdkit exited {s}\n{}", kit.0.transcript());
        }
        thread::sleep(Duration::from_millis(20));
    }
    (kit, format!("nbd+unix:///?socket={}", ksock.display()))
}

/// Seconds `program args` took; it must succeed.
fn timed(program: &str, args: &[&str]) -> f64 {
    let t = Instant::now();
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    t.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The copies of a whole volume that operators run, through relinkd
/// (`relinkd`, its URL and its two daemons) and through nbdkit (`kit`, its
/// URL and process), alternated, each the median of 3 runs (1 in a quick
/// run): `qemu-img convert` of a file of non-zero bytes onto the export,
/// `nbdcopy` of it onto the export, and `nbdcopy` of the export to
/// `null:` (reads). Prints a table and `RESULT nbd copies ...`, the ratios
/// as rates (nbdkit's time over relinkd's), then the CPU time each path
/// spent per copy (the client's and the servers') and `RESULT nbd
/// copies_cpu ...`, relinkd's total over nbdkit's. Without nbdcopy its
/// rows are skipped (relink-skip).
fn copies(
    p: &Plan,
    root: &Path,
    (relinkd, daemons): (&str, [&Daemon; 2]),
    kit: Option<(&str, &Daemon)>,
    quick: bool,
) {
    let Some((kit, kit_daemon)) = kit else {
        return;
    };
    let source = root.join("source.img");
    {
        // Non-zero, varied bytes: nothing for a copy to skip as zeros.
        let mut f = std::fs::File::create(&source).unwrap();
        let mut block = vec![0u8; 1 << 20];
        for i in 0..p.size >> 20 {
            for (j, b) in block.iter_mut().enumerate() {
                *b = (j as u64 ^ (i * 0x9e37)).wrapping_mul(31) as u8 | 1;
            }
            f.write_all(&block).unwrap();
        }
    }
    let src = source.to_str().expect("a UTF-8 path");
    let nbdcopy = match relink_skip::find_program("nbdcopy", "libnbd-bin") {
        Ok(_) => true,
        Err(skip) => {
            relink_skip::skip_part("nbd bench: nbdcopy copies", &skip);
            false
        }
    };
    type Run = Box<dyn Fn(&str) -> f64>;
    let src_owned = src.to_string();
    let mut clients: Vec<(&str, Run)> = vec![(
        "qemu-img convert (write)",
        Box::new(move |url: &str| {
            timed(
                "qemu-img",
                &["convert", "-n", "-f", "raw", "-O", "raw", &src_owned, url],
            )
        }),
    )];
    if nbdcopy {
        let src_owned = src.to_string();
        clients.push((
            "nbdcopy file -> export (write)",
            Box::new(move |url: &str| timed("nbdcopy", &[&src_owned, url])),
        ));
        clients.push((
            "nbdcopy export -> null: (read)",
            Box::new(|url: &str| timed("nbdcopy", &[url, "null:"])),
        ));
    }
    let rounds = if quick { 1 } else { 3 };
    println!(
        "\ncopies of {} MiB, median of {rounds} alternated runs (s):\n\n| client | relinkd | nbdkit | relinkd / nbdkit (rate) |\n|---|---|---|---|",
        p.size >> 20
    );
    let mut result = String::new();
    let mut cpu_rows = Vec::new();
    let mut cpu_result = String::new();
    // One run: (wall s, client CPU s, servers' CPU s).
    let measured = |run: &Run, url: &str, servers: &[&Daemon]| {
        let (c0, s0) = (
            children_cpu_s(),
            servers.iter().map(|d| d.cpu_s()).sum::<f64>(),
        );
        let wall = run(url);
        let client = children_cpu_s() - c0;
        let server = servers.iter().map(|d| d.cpu_s()).sum::<f64>() - s0;
        (wall, client, server)
    };
    for (name, run) in &clients {
        let (mut r, mut k) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            r.push(measured(run, relinkd, &daemons));
            k.push(measured(run, kit, &[kit_daemon]));
        }
        let mean = |v: &[(f64, f64, f64)], f: fn(&(f64, f64, f64)) -> f64| {
            v.iter().map(f).sum::<f64>() / v.len() as f64
        };
        let cpu = |v: &[(f64, f64, f64)]| (mean(v, |m| m.1), mean(v, |m| m.2));
        let ((rc, rs), (kc, ks)) = (cpu(&r), cpu(&k));
        let (r, k) = (
            median(r.iter().map(|m| m.0).collect()),
            median(k.iter().map(|m| m.0).collect()),
        );
        println!("| {name} | {r:.2} | {k:.2} | {:.2} |", k / r);
        let key = name.split(' ').next().unwrap_or(name).replace('-', "_");
        let dir = if name.ends_with("(read)") {
            "read"
        } else {
            "write"
        };
        result.push_str(&format!(" {key}_{dir}={:.3}", k / r));
        cpu_rows.push(format!(
            "| {name} | {rc:.2} + {rs:.2} = {:.2} | {kc:.2} + {ks:.2} = {:.2} | {:.2} |",
            rc + rs,
            kc + ks,
            (rc + rs) / (kc + ks).max(0.01)
        ));
        cpu_result.push_str(&format!(
            " {key}_{dir}={:.3}",
            (rc + rs) / (kc + ks).max(0.01)
        ));
    }
    println!("RESULT nbd copies{result}");
    println!(
        "\nCPU time per copy, mean of the runs (s): client + servers (relinkd's two daemons, or nbdkit)\n\n| client | relinkd path | nbdkit path | relinkd / nbdkit |\n|---|---|---|---|"
    );
    for row in cpu_rows {
        println!("{row}");
    }
    println!("RESULT nbd copies_cpu{cpu_result}");
}

/// A minimal NBD client: GO on `name` asking for block sizes.
fn nbd_connect(socket: &Path, name: &str) -> UnixStream {
    let mut s = UnixStream::connect(socket).expect("connect to the NBD socket");
    s.set_read_timeout(Some(STEP)).unwrap();
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).expect("greeting");
    s.write_all(&(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES).to_be_bytes())
        .unwrap();
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&1u16.to_be_bytes());
    d.extend_from_slice(&NBD_INFO_BLOCK_SIZE.to_be_bytes());
    let h = OptionHeader {
        option: NBD_OPT_GO,
        len: d.len() as u32,
    };
    s.write_all(&h.encode()).unwrap();
    s.write_all(&d).unwrap();
    loop {
        let mut head = [0u8; 20];
        s.read_exact(&mut head).expect("option reply");
        let len = u32::from_be_bytes(head[16..20].try_into().unwrap()) as usize;
        let mut all = head.to_vec();
        all.resize(20 + len, 0);
        s.read_exact(&mut all[20..]).unwrap();
        let r = OptionReply::parse(&all).expect("option reply").0;
        match r.reply_type {
            NBD_REP_ACK => return s,
            NBD_REP_INFO => {}
            other => panic!("GO answered {other:#x}"),
        }
    }
}

/// Timed 4 KiB writes, one at a time, until `stop`: (start offset from
/// `t0`, duration) of each.
fn writer(socket: PathBuf, stop: Arc<AtomicBool>, t0: Instant) -> Vec<(Duration, Duration)> {
    let mut s = nbd_connect(&socket, "disk");
    let data = vec![0x5au8; 4096];
    let mut times = Vec::new();
    let mut cookie = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        let h = RequestHeader {
            flags: 0,
            kind: NBD_CMD_WRITE,
            cookie,
            offset: (cookie % 4096) * 4096,
            len: 4096,
        };
        s.write_all(&h.encode()).unwrap();
        s.write_all(&data).unwrap();
        let mut b = [0u8; 16];
        s.read_exact(&mut b).expect("write reply");
        let r = SimpleReply::parse(&b).expect("simple reply");
        assert_eq!(r.error, 0, "a write failed during the stall phase");
        times.push((start - t0, start.elapsed()));
        cookie += 1;
    }
    times
}

/// Runs `command` on the control socket at `socket`: its typed result.
fn control<T: serde::de::DeserializeOwned>(socket: &Path, command: protocol::Command) -> T {
    let what = format!("{command:?}");
    let mut s = UnixStream::connect(socket).expect("connect to the control socket");
    s.set_read_timeout(Some(STEP)).unwrap();
    s.write_all(protocol::Request::new(command).to_line().as_bytes())
        .unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).expect("a response");
    let r: Response = serde_json::from_str(line.trim_end()).expect("a response line");
    r.into_result().unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// The connection `disk` of the daemon with control socket `socket`.
fn disk(socket: &Path) -> ConnectionStatus {
    let st: StatusResult = control(socket, protocol::Command::Status {});
    st.connections
        .into_iter()
        .find(|c| c.name == "disk")
        .expect("connection disk")
}

/// Waits until `f()` (bounded by [`STEP`]).
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + STEP;
    while !f() {
        assert!(Instant::now() < deadline, "{what} did not happen in time");
        thread::sleep(Duration::from_millis(5));
    }
}

fn main() {
    let quick = std::env::var("RELINK_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
        || !std::env::args().any(|a| a == "--bench");
    if let Err(skip) = relink_skip::find_program("qemu-img", "qemu-utils") {
        return relink_skip::skip_part("nbd bench", &skip);
    }
    let p = plan(quick);
    let root = std::env::temp_dir().join(format!("relinkd-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let result = std::panic::catch_unwind(|| run(&p, &root, quick));
    let _ = std::fs::remove_dir_all(&root);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

fn run(p: &Plan, root: &Path, quick: bool) {
    let SoftHosts {
        dir_a,
        dir_b,
        reg_a,
        reg_b,
    } = SoftHosts::create(root);
    let volume = root.join("volume.img");
    let baseline = root.join("baseline.img");
    for f in [&volume, &baseline] {
        std::fs::File::create(f).unwrap().set_len(p.size).unwrap();
    }
    let max_io = std::env::var("RELINK_BENCH_NBD_MAX_IO")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| format!("max_io = {v}\n"))
        .unwrap_or_default();
    let addr = free_addr("127.0.0.2");
    let target_conf = root.join("target.toml");
    ConfigFile::new()
        .backend(&dir_b)
        .export("disk", &addr, &volume)
        .push(&max_io)
        .write(&target_conf);
    let socket = root.join("relinkd.sock");
    let ctl = root.join("initiator.ctl");
    let init_conf = root.join("initiator.toml");
    ConfigFile::new()
        .backend(&dir_a)
        .control(&ctl)
        .connect("disk", &addr, &socket)
        .set("give_up_secs", 300)
        .push(&max_io)
        .write(&init_conf);
    let mut target = Daemon::relinkd("target", &target_conf);
    target.wait_lines("export disk listening", 1, false);
    let mut init = Daemon::relinkd("initiator", &init_conf);
    init.wait_lines("connect disk serving nbd", 1, false);
    let relinkd_url = format!("nbd+unix:///disk?socket={}", socket.display());

    println!(
        "nbd bench ({}): {} MiB volume, writes {} x 1 MiB, reads {} x 4 KiB, queue depth 16{}",
        if quick { "quick" } else { "full" },
        p.size >> 20,
        p.write_count,
        p.read_count,
        if max_io.is_empty() {
            String::new()
        } else {
            format!(", {}", max_io.trim())
        }
    );
    let mut rows: Vec<(String, Option<(f64, f64)>)> = Vec::new();
    let relinkd = throughput(p, &relinkd_url, &["-f", "raw"]);
    rows.push(("relinkd (soft TCP, NBD unix)".into(), Some(relinkd)));
    let nbdkit = match relink_skip::find_program("nbdkit", "nbdkit") {
        Ok(nbdkit) => Some(nbdkit),
        Err(skip) => {
            relink_skip::skip_part("nbd bench: nbdkit baseline", &skip);
            None
        }
    };
    // nbdkit stays up for the copies below.
    let kit = nbdkit.map(|nbdkit| start_nbdkit(&nbdkit, root, &baseline));
    let nbdkit = kit
        .as_ref()
        .map(|(_, url)| throughput(p, url, &["-f", "raw"]));
    rows.push(("nbdkit file (NBD unix)".into(), nbdkit));
    let file = throughput(p, baseline.to_str().unwrap(), &["-f", "raw"]);
    rows.push(("local file".into(), Some(file)));

    println!("\n| path | seq write 1 MiB, MiB/s | 4 KiB reads/s |\n|---|---|---|");
    for (name, v) in &rows {
        match v {
            Some((w, r)) => println!("| {name} | {w:.0} | {r:.0} |"),
            None => println!("| {name} | SKIPPED | SKIPPED |"),
        }
    }
    if let Some((kw, kr)) = nbdkit {
        println!(
            "relinkd / nbdkit: writes {:.2}, reads {:.2}",
            relinkd.0 / kw,
            relinkd.1 / kr
        );
        println!(
            "RESULT nbd relinkd_over_nbdkit write={:.3} read={:.3}",
            relinkd.0 / kw,
            relinkd.1 / kr
        );
    }
    println!(
        "relinkd / file: writes {:.2}, reads {:.2}",
        relinkd.0 / file.0,
        relinkd.1 / file.1
    );
    println!(
        "RESULT nbd relinkd write_mib_s={:.1} read_iops={:.0} over_file_write={:.3} over_file_read={:.3}",
        relinkd.0,
        relinkd.1,
        relinkd.0 / file.0,
        relinkd.1 / file.1
    );

    copies(
        p,
        root,
        (&relinkd_url, [&target, &init]),
        kit.as_ref().map(|(d, url)| (url.as_str(), d)),
        quick,
    );
    drop(kit);

    // The stall a client sees across a reset, a replacement and a drain.
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let w = {
        let (socket, stop) = (socket.clone(), stop.clone());
        thread::spawn(move || writer(socket, stop, t0))
    };
    let settle = Duration::from_millis(if quick { 300 } else { 1000 });
    thread::sleep(settle);
    let resumed = init.count("event_type=\"resumed\"", true);
    let reset_at = t0.elapsed();
    reg_b.reset("soft0").expect("reset b/soft0");
    init.wait_lines("event_type=\"resumed\"", resumed + 1, true);
    thread::sleep(settle);
    let replace_at = t0.elapsed();
    reg_a.replace("soft0", None).expect("replace a/soft0");
    init.wait_lines("event_type=\"resumed\"", resumed + 2, true);
    thread::sleep(settle);
    // A second device on host `a`, then a drain of the session's device:
    // the session moves to the other one.
    let added_at = t0.elapsed();
    reg_a
        .add("soft1", vec!["127.0.0.3/8".parse().unwrap()], None, None)
        .expect("add a/soft1");
    wait_until("the initiator sees two devices", || {
        let d: protocol::DevicesResult = control(&ctl, protocol::Command::Devices {});
        d.devices.len() == 2
    });
    thread::sleep(settle);
    let first = disk(&ctl).session.device.expect("the session's device");
    let drain_at = t0.elapsed();
    let r: DrainResult = control(
        &ctl,
        protocol::Command::Drain {
            device: first.clone(),
        },
    );
    assert_eq!(r.moving, ["disk"], "drain {first}: {r:?}");
    wait_until("the session established on the other device", || {
        let c = disk(&ctl);
        c.session.state == "Established" && c.session.device.is_some_and(|d| d != first)
    });
    thread::sleep(settle);
    stop.store(true, Ordering::Relaxed);
    let times = w.join().expect("writer");
    let longest = |from: Duration, to: Duration| {
        times
            .iter()
            .filter(|(at, d)| *at + *d >= from && *at < to)
            .map(|(_, d)| *d)
            .max()
            .unwrap_or_default()
    };
    let mut plain: Vec<Duration> = times
        .iter()
        .filter(|(at, _)| *at < reset_at)
        .map(|(_, d)| *d)
        .collect();
    plain.sort();
    let median = plain.get(plain.len() / 2).copied().unwrap_or_default();
    let reset_stall = longest(reset_at, replace_at);
    let replace_stall = longest(replace_at, added_at);
    let drain_stall = longest(drain_at, Duration::MAX);
    println!(
        "\nstall: {} timed 4 KiB writes; median before {:.3} ms; longest across the target's reset {:.1} ms, across the initiator's replacement {:.1} ms, across the drain of the initiator's device {:.1} ms",
        times.len(),
        median.as_secs_f64() * 1e3,
        reset_stall.as_secs_f64() * 1e3,
        replace_stall.as_secs_f64() * 1e3,
        drain_stall.as_secs_f64() * 1e3
    );
    println!(
        "RESULT nbd stall_ms reset={:.1} replace={:.1} drain={:.1} median_write_ms={:.3}",
        reset_stall.as_secs_f64() * 1e3,
        replace_stall.as_secs_f64() * 1e3,
        drain_stall.as_secs_f64() * 1e3,
        median.as_secs_f64() * 1e3
    );
    drop(init);

    // Idle CPU with 100 connections to the one export.
    let idle_conf = root.join("idle.toml");
    let mut config = ConfigFile::new().backend(&dir_a);
    for i in 0..IDLE_CONNECTIONS {
        let s = root.join(format!("idle{i}.sock"));
        config = config
            .connect(&format!("disk{i}"), &addr, &s)
            .set("queue_depth", 4);
    }
    config.write(&idle_conf);
    let mut idle = Daemon::relinkd("idle initiator", &idle_conf);
    idle.wait_lines("serving nbd", IDLE_CONNECTIONS, false);
    thread::sleep(Duration::from_secs(1));
    let (i0, t0c, w0) = (idle.cpu_s(), target.cpu_s(), Instant::now());
    thread::sleep(p.idle);
    let wall = w0.elapsed().as_secs_f64();
    let (i1, t1c) = (idle.cpu_s(), target.cpu_s());
    println!(
        "\nidle: {IDLE_CONNECTIONS} connections for {wall:.1} s: initiator {:.4} CPU-s/s, target {:.4} CPU-s/s",
        (i1 - i0) / wall,
        (t1c - t0c) / wall
    );
    println!(
        "RESULT nbd idle_cpu connections={IDLE_CONNECTIONS} initiator={:.4} target={:.4}",
        (i1 - i0) / wall,
        (t1c - t0c) / wall
    );
}
