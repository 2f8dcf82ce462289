//! Two relinkd processes on the soft TCP fabric — a target serving a
//! 64 MiB file from soft host `b` (127.0.0.2) and an initiator offering it
//! on an NBD Unix socket from soft host `a` (127.0.0.1) — while
//! `qemu-img convert` writes a random 64 MiB image through the socket:
//! the target's soft device is reset, then the initiator's. qemu-img
//! sees no error, reading the volume back through the socket gives the
//! image, both daemons exit 0 on SIGTERM, and the target file is the
//! image byte for byte (`qemu-img compare`).
//!
//! A second test restarts the target between two copies: the initiator
//! connects a new session and serves the same volume again.
//!
//! Needs `qemu-img` (qemu-utils); without it each test reports the skip
//! through relink-skip and returns: a `SKIPPED:` line on stderr, counted
//! as skipped by `scripts/test.sh`, and a failure under `CI=true` (CI's
//! install step provides qemu-utils).

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::config::ConfigFile;
use common::images::{compare, convert, finish, random_image, same_prefix, source_and_volume};
use common::{free_addr, tool, wait_for, Daemon, Root, SoftHosts, STEP};
use relink_skip::skip_test;
use relink_soft::Registry;

const SIZE: u64 = 64 << 20;

/// The two soft hosts, a random image of `size` bytes, an empty volume
/// of that size and both daemons' configuration files.
struct Setup {
    root: Root,
    reg_a: Registry,
    reg_b: Registry,
    source: PathBuf,
    volume: PathBuf,
    socket: PathBuf,
    target_conf: PathBuf,
    init_conf: PathBuf,
}

fn setup(name: &str, size: u64) -> Setup {
    let root = Root::new(&format!("e2e-{name}"));
    let soft = SoftHosts::create(&root.0);
    // The image to write, and the target's volume.
    let (source, volume) = source_and_volume(&root.0, size, 12);

    let addr = free_addr("127.0.0.2");
    let target_conf = root.0.join("target.toml");
    ConfigFile::new()
        .backend(&soft.dir_b)
        .export("disk", &addr, &volume)
        .write(&target_conf);
    let socket = root.0.join("nbd.sock");
    let init_conf = root.0.join("initiator.toml");
    ConfigFile::new()
        .backend(&soft.dir_a)
        .connect("disk", &addr, &socket)
        .set("give_up_secs", 300)
        .write(&init_conf);

    Setup {
        root,
        reg_a: soft.reg_a,
        reg_b: soft.reg_b,
        source,
        volume,
        socket,
        target_conf,
        init_conf,
    }
}

#[test]
fn qemu_img_writes_through_relinkd_across_device_resets() {
    if let Err(skip) = tool("qemu-img") {
        return skip_test(
            "qemu_img_writes_through_relinkd_across_device_resets",
            &skip,
        );
    }
    let Setup {
        root: _root,
        reg_a,
        reg_b,
        source,
        volume,
        socket,
        target_conf,
        init_conf,
    } = setup("resets", SIZE);
    let mut target = Daemon::start_target(&target_conf, "disk");
    let mut init = Daemon::start_initiator(&init_conf, "disk");
    init.expect_line("connect disk ready: 67108864 bytes");

    let url = format!("nbd+unix:///disk?socket={}", socket.display());
    let mut convert = Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&source)
        .arg(&url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn qemu-img convert");

    // Once the first MiB arrived, reset the target's device; once the
    // initiator resumed, reset its own.
    wait_for("the first MiB on the volume", &[&target, &init], || {
        same_prefix(&source, &volume, 1 << 20)
    });
    let mut running = Vec::new();
    running.push(convert.try_wait().unwrap().is_none());
    reg_b.reset("soft0").expect("reset b/soft0");
    wait_for(
        "the initiator's resume after the target's reset",
        &[&target, &init],
        || init.stderr_has("event_type=\"resumed\""),
    );
    running.push(convert.try_wait().unwrap().is_none());
    reg_a.reset("soft0").expect("reset a/soft0");
    wait_for("the initiator's second resume", &[&target, &init], || {
        init.stderr_count("event_type=\"resumed\"") >= 2
    });

    finish(convert, "qemu-img convert", STEP * 2, &[&target, &init]);
    let losses = init.stderr_count("event_type=\"device_lost\"");
    assert!(
        losses >= 2,
        "the initiator saw {losses} losses\n{}",
        init.transcript()
    );
    println!("qemu-img convert was running at the target's and the initiator's reset: {running:?}");

    // Read it all back through relinkd: the NBD reads, split at max_io.
    compare(&source, &url, &[&target, &init]);

    // For whoever reads the test's output: what the daemons saw.
    println!("{}\n{}", target.transcript(), init.transcript());
    init.terminate_ok();
    assert!(!socket.exists(), "the NBD socket is removed at exit");
    target.terminate_ok();

    compare(&source, &volume.to_string_lossy(), &[]);
}

#[test]
fn the_initiator_reconnects_when_the_target_restarts() {
    if let Err(skip) = tool("qemu-img") {
        return skip_test("the_initiator_reconnects_when_the_target_restarts", &skip);
    }
    const SMALL: u64 = 8 << 20;
    let s = setup("restart", SMALL);
    let url = format!("nbd+unix:///disk?socket={}", s.socket.display());
    let mut target = Daemon::start_target(&s.target_conf, "disk");
    let mut init = Daemon::start_initiator(&s.init_conf, "disk");
    convert(&s.source, &url, &[&target, &init]);

    // The target stops (its goodbye ends the session) and comes back.
    target.terminate_ok();
    let mut target = Daemon::start_target(&s.target_conf, "disk");
    init.expect_line("connect disk reconnected");

    let second = s.root.0.join("second.img");
    random_image(&second, SMALL, 13);
    convert(&second, &url, &[&target, &init]);
    compare(&second, &url, &[&target, &init]);
    init.terminate_ok();
    target.terminate_ok();
    compare(&second, &s.volume.to_string_lossy(), &[]);
}
