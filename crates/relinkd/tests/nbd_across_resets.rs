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

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::images::{compare, convert, empty_volume, finish, random_image, same_prefix};
use common::{free_port, tool, wait_for, Daemon, Root, STEP};
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
    let (dir_a, dir_b) = (root.0.join("a"), root.0.join("b"));
    let (reg_a, reg_b) = (
        Registry::open(&dir_a).unwrap(),
        Registry::open(&dir_b).unwrap(),
    );
    reg_a
        .add("soft0", vec!["127.0.0.1/8".parse().unwrap()], None, None)
        .unwrap();
    reg_b
        .add("soft0", vec!["127.0.0.2/8".parse().unwrap()], None, None)
        .unwrap();

    // The image to write, and the target's volume.
    let source = root.0.join("source.img");
    random_image(&source, size, 12);
    let volume = root.0.join("volume.img");
    empty_volume(&volume, size);

    let addr = format!("127.0.0.2:{}", free_port("127.0.0.2"));
    let target_conf = root.0.join("target.toml");
    let mut f = std::fs::File::create(&target_conf).unwrap();
    write!(
        f,
        "[backend]\nsoft_dir = {:?}\n\n[[export]]\nname = \"disk\"\nlisten = \"{addr}\"\nfile = {:?}\n",
        dir_b, volume
    )
    .unwrap();
    let socket = root.0.join("nbd.sock");
    let init_conf = root.0.join("initiator.toml");
    let mut f = std::fs::File::create(&init_conf).unwrap();
    write!(
        f,
        "[backend]\nsoft_dir = {:?}\n\n[[connect]]\nname = \"disk\"\ntargets = [\"{addr}\"]\nnbd_socket = {:?}\ngive_up_secs = 300\n",
        dir_a, socket
    )
    .unwrap();

    Setup {
        root,
        reg_a,
        reg_b,
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
    let mut target = Daemon::start("target", &target_conf);
    target.expect_line("export disk listening");
    let mut init = Daemon::start("initiator", &init_conf);
    init.expect_line("connect disk ready: 67108864 bytes");
    init.expect_line("connect disk serving nbd");

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
        || init.stderr_has("Resumed"),
    );
    running.push(convert.try_wait().unwrap().is_none());
    reg_a.reset("soft0").expect("reset a/soft0");
    wait_for("the initiator's second resume", &[&target, &init], || {
        init.stderr_count("Resumed") >= 2
    });

    finish(convert, "qemu-img convert", STEP * 2, &[&target, &init]);
    let losses = init.stderr_count("DeviceLost");
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
    let s = init.terminate();
    assert!(s.success(), "initiator exit: {s}\n{}", init.transcript());
    assert!(!socket.exists(), "the NBD socket is removed at exit");
    let s = target.terminate();
    assert!(s.success(), "target exit: {s}\n{}", target.transcript());

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
    let mut target = Daemon::start("target", &s.target_conf);
    target.expect_line("export disk listening");
    let mut init = Daemon::start("initiator", &s.init_conf);
    init.expect_line("connect disk serving nbd");
    convert(&s.source, &url, &[&target, &init]);

    // The target stops (its goodbye ends the session) and comes back.
    let st = target.terminate();
    assert!(st.success(), "target exit: {st}\n{}", target.transcript());
    let mut target = Daemon::start("target", &s.target_conf);
    target.expect_line("export disk listening");
    init.expect_line("connect disk reconnected");

    let second = s.root.0.join("second.img");
    random_image(&second, SMALL, 13);
    convert(&second, &url, &[&target, &init]);
    compare(&second, &url, &[&target, &init]);
    let st = init.terminate();
    assert!(st.success(), "initiator exit: {st}\n{}", init.transcript());
    let st = target.terminate();
    assert!(st.success(), "target exit: {st}\n{}", target.transcript());
    compare(&second, &s.volume.to_string_lossy(), &[]);
}
