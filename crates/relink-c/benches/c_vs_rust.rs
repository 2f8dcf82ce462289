//! The cost of the C API: 64-byte messages between two nodes on the
//! in-process soft fabric, with 32 in flight, through librelink from C
//! (`benches/send_64b.c`, built with the system C compiler against the
//! installed static library) and through the `relink` crate from Rust (the
//! same loop, call for call), in one run, alternating. Each half runs in a
//! fresh process of its own (this bench runs itself with `--rust-half` for
//! the Rust one), so neither inherits the other's heap. Reports each side's
//! message rate and C / Rust per round and the median ratio.
//!
//! `cargo bench -p relink-c --bench c_vs_rust`; `RELINK_BENCH_QUICK=1` for
//! a short run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use relink_rs::{Node, Path as SessionPath, SessionOptions};
use relink_soft::SoftFabric;

const WINDOW: u64 = 32;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// librelink installed under the target directory and `send_64b` built
/// against it.
fn build_c() -> PathBuf {
    let exe = std::env::current_exe().expect("the bench's path");
    let target = exe
        .ancestors()
        .nth(3)
        .expect("<target>/<profile>/deps/<bench>");
    let root = target.join("c-bench");
    let prefix = root.join("prefix");
    run(
        Command::new(repo().join("scripts/install-c.sh"))
            .arg(&prefix)
            .env("CARGO_TARGET_DIR", target),
        "scripts/install-c.sh",
    );
    let flags = run(
        Command::new("pkg-config")
            .args(["--static", "--cflags", "--libs", "relink"])
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")),
        "pkg-config",
    );
    let out = root.join("send_64b");
    let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cc.args(["-std=c11", "-O2", "-o"])
        .arg(&out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/send_64b.c"));
    for f in flags.split_whitespace() {
        if f == "-lrelink" {
            cc.arg(prefix.join("lib/librelink.a"));
        } else {
            cc.arg(f);
        }
    }
    run(&mut cc, "cc send_64b.c");
    out
}

/// One half in its own process: its own measurement of the loop.
fn half(cmd: &mut Command, what: &str) -> Duration {
    let out = run(cmd, what);
    let secs: f64 = out
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("seconds="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no seconds= in {out}"));
    Duration::from_secs_f64(secs)
}

/// The Rust half: `send_64b.c`'s loop through the `relink` crate.
fn rust_round(messages: u64) -> Duration {
    let fabric = SoftFabric::new(1);
    // Both halves connect the same way: node randomness from the OS.
    let (a, b) = (fabric.add_host("a"), fabric.add_host("b"));
    fabric.add_device(&a, "soft0", "10.0.0.1/24");
    fabric.add_device(&b, "soft0", "10.0.0.2/24");
    let mut client = Node::new(Arc::new(a));
    let mut server = Node::new(Arc::new(b));
    let addr = "10.0.0.2:7471".parse().expect("address");
    server
        .listen(addr, SessionOptions::default())
        .expect("listen");
    let s = client
        .connect(
            vec![SessionPath {
                local: None,
                peer: addr,
            }],
            SessionOptions::default(),
        )
        .expect("connect");
    let msg = [7u8; 64];
    let mut buf = Vec::with_capacity(4096);
    let (mut sent, mut done, mut got) = (0u64, 0u64, 0u64);
    let mut t = None;
    let start = Instant::now();
    while done < messages || got < messages {
        while sent < messages && sent - done < WINDOW {
            client.send(s, &msg).expect("send");
            sent += 1;
        }
        let _ = server.wait_for(Duration::from_millis(1));
        if t.is_none() {
            t = server.accept().map(|a| a.session);
        }
        if let Some(t) = t {
            while server.poll_delivery_into(t, &mut buf).is_some() {
                got += 1;
            }
        }
        let _ = client.wait_for(Duration::from_millis(1));
        while let Some(c) = client.poll_completion(s) {
            assert!(c.outcome.is_success(), "a send failed");
            done += 1;
        }
    }
    start.elapsed()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--rust-half") {
        let n = args[i + 1].parse().expect("--rust-half MESSAGES");
        let d = rust_round(n);
        println!("RESULT messages={n} seconds={:.6}", d.as_secs_f64());
        return;
    }
    let me = std::env::current_exe().expect("the bench's path");
    let quick = std::env::var_os("RELINK_BENCH_QUICK").is_some();
    // `cargo bench` passes `--bench`; a filter argument is ignored.
    let (messages, rounds) = if quick { (20_000, 3) } else { (200_000, 7) };
    let exe = build_c();
    let mut ratios = Vec::new();
    println!("c_vs_rust: {messages} messages of 64 B per round, {WINDOW} in flight, in-process soft fabric");
    for round in 1..=rounds {
        let n = messages.to_string();
        let c_half = || half(Command::new(&exe).arg(&n), "send_64b");
        let rust_half = || half(Command::new(&me).args(["--rust-half", &n]), "--rust-half");
        let (c, r) = if round % 2 == 1 {
            let c = c_half();
            (c, rust_half())
        } else {
            let r = rust_half();
            (c_half(), r)
        };
        let rate = |d: Duration| messages as f64 / d.as_secs_f64();
        let ratio = rate(c) / rate(r);
        println!(
            "  round {round}: C {:>9.0} msg/s   Rust {:>9.0} msg/s   C/Rust {ratio:.3}",
            rate(c),
            rate(r)
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    println!("RESULT c_vs_rust_64b_ratio={median:.3} rounds={rounds} messages={messages}");
}
