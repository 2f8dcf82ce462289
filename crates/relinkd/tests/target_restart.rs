//! A target relinkd restarted under a client's I/O: relinkd processes on
//! the soft TCP fabric, the target on soft host `b` (127.0.0.2), the
//! initiator on soft host `a` (127.0.0.1), `qemu-img` in front.
//!
//! - `qemu-img convert` of a random image (rate-limited, so the copy
//!   lasts through all three) while the target is killed with SIGKILL and
//!   started again, stopped with SIGTERM and started again, and reloaded
//!   with a smaller `max_io` for its export (which closes its sessions):
//!   qemu-img exits 0 and the volume equals the image. The initiator holds
//!   the NBD requests while no session serves, sends the commands under
//!   way again on the new session (split again at the smaller `max_io`),
//!   and says so.
//! - Writes acknowledged and not flushed by a target killed with SIGKILL,
//!   then a FLUSH on the restarted one: the same boot of the host (the
//!   page cache kept the writes), so the FLUSH succeeds and the bytes are
//!   there (the other boot's answer, a failed FLUSH, is the bridge's unit
//!   test: a host cannot be rebooted here).
//!
//! Needs `qemu-img` and `qemu-io` (qemu-utils); without them each test
//! reports the skip through relink-skip and returns.

mod common;

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use common::config::ConfigFile;
use common::images::{compare, finish, source_and_volume, start_convert, transcripts};
use common::{free_addr, qemu_io, run_bounded, tool, Daemon, Root, SoftHosts, STEP};
use relink_skip::skip_test;

/// The image copied: long enough, at [`RATE`], for two restarts.
const SIZE: u64 = 48 << 20;
/// qemu-img's rate limit, bytes per second.
const RATE: &str = "6M";

/// The target and initiator configurations of one test.
struct Rig {
    root: Root,
    soft: SoftHosts,
    addr: String,
    source: PathBuf,
    volume: PathBuf,
    target_conf: PathBuf,
    init_conf: PathBuf,
    socket: PathBuf,
}

fn rig(name: &str, size: u64) -> Rig {
    let root = Root::new(&format!("restart-{name}"));
    let soft = SoftHosts::create(&root.0);
    let (source, volume) = source_and_volume(&root.0, size, 2026);
    let addr = free_addr("127.0.0.2");
    let target_conf = root.0.join("target.toml");
    write_target(&target_conf, &soft.dir_b, &addr, &volume, 131_072);
    let init_conf = root.0.join("init.toml");
    let socket = root.0.join("nbd.sock");
    ConfigFile::new()
        .backend(&soft.dir_a)
        .connect("disk", &addr, &socket)
        .set("give_up_secs", 300)
        .write(&init_conf);
    Rig {
        root,
        soft,
        addr,
        source,
        volume,
        target_conf,
        init_conf,
        socket,
    }
}

/// The target's configuration: export `disk` of `volume` on `addr`,
/// commands of at most `max_io` bytes.
fn write_target(conf: &Path, soft_dir: &Path, addr: &str, volume: &Path, max_io: u32) {
    ConfigFile::new()
        .backend(soft_dir)
        .export("disk", addr, volume)
        .set("max_io", max_io)
        .write(conf);
}

fn url(socket: &Path) -> String {
    format!("nbd+unix:///disk?socket={}", socket.display())
}

/// qemu-io's `commands` on the export, which must all succeed (a read's
/// pattern checked); panics with the transcripts otherwise.
#[track_caller]
fn io(r: &Rig, commands: &[&str], daemons: &[&Daemon]) {
    let out = run_bounded(&mut qemu_io(&r.socket, "disk", commands))
        .unwrap_or_else(|| panic!("qemu-io hung\n{}", transcripts(daemons)));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && !text.contains("failed") && !text.contains("error"),
        "qemu-io {commands:?}: {text}\n{}",
        transcripts(daemons)
    );
}

/// The target, started again after it ended.
fn restart(r: &Rig) -> Daemon {
    Daemon::start_target(&r.target_conf, "disk")
}

#[test]
fn qemu_img_copies_through_a_target_killed_stopped_and_reloaded() {
    if let Err(s) = tool("qemu-img") {
        skip_test(
            "qemu_img_copies_through_a_target_killed_stopped_and_reloaded",
            &s,
        );
        return;
    }
    let started = Instant::now();
    let r = rig("copy", SIZE);
    let mut target = restart(&r);
    let mut init = Daemon::start_initiator(&r.init_conf, "disk");
    let url = url(&r.socket);
    let mut convert = start_convert(&r.source, &url, &r.volume, &["-r", RATE], &[&target, &init]);

    // A crash: the initiator's session ends (the new process does not
    // know it) and a new one serves.
    let copying_at_kill = convert.try_wait().unwrap().is_none();
    let s = target.kill9();
    assert!(!s.success(), "SIGKILL: {s}");
    thread::sleep(Duration::from_millis(300));
    let mut target = restart(&r);
    init.expect_count("connect disk reconnected", 1, &[&target]);

    // A planned stop: the target drains and says goodbye.
    let copying_at_stop = convert.try_wait().unwrap().is_none();
    let s = target.terminate();
    assert!(s.success(), "SIGTERM: {s}\n{}", target.transcript());
    thread::sleep(Duration::from_millis(300));
    let mut target = restart(&r);
    init.expect_count("connect disk reconnected", 2, &[&target]);

    // The export reloaded with a smaller max_io: its sessions are closed
    // and the new one takes commands of half the size.
    let copying_at_reload = convert.try_wait().unwrap().is_none();
    write_target(&r.target_conf, &r.soft.dir_b, &r.addr, &r.volume, 65_536);
    target.send("HUP");
    target.expect_line("reload: removed [export disk], added [export disk]");
    init.expect_count("connect disk reconnected", 3, &[&target]);

    let out = finish(convert, "qemu-img convert", STEP * 3, &[&target, &init]);
    let copy_time = started.elapsed();
    compare(&r.source, &url, &[&target, &init]);
    let resent = init.count("goes to the new one");
    println!(
        "qemu-img convert of {} MiB at {RATE}/s: exit {}, {copy_time:.1?}; copying at the kill: \
         {copying_at_kill}, at the stop: {copying_at_stop}, at the reload: {copying_at_reload}; held \
         I/O sent again {resent} time(s)",
        SIZE >> 20,
        out.status
    );
    assert!(
        copying_at_kill && copying_at_stop && copying_at_reload,
        "the copy ended before the last disturbance: nothing was under way to hold\n{}",
        init.transcript()
    );
    assert!(
        resent >= 1,
        "no I/O was held and sent again across the restarts\n{}",
        init.transcript()
    );
    assert_eq!(
        init.count("ESHUTDOWN)"),
        0,
        "the initiator failed I/O instead of holding it\n{}",
        init.transcript()
    );
    drop(r.root);
}

#[test]
fn a_flush_after_a_crash_and_restart_on_the_same_boot_vouches_for_earlier_writes() {
    if let Err(s) = tool("qemu-io") {
        skip_test(
            "a_flush_after_a_crash_and_restart_on_the_same_boot_vouches_for_earlier_writes",
            &s,
        );
        return;
    }
    let r = rig("flush", 8 << 20);
    let mut target = restart(&r);
    let mut init = Daemon::start_initiator(&r.init_conf, "disk");
    io(
        &r,
        &["write -P 0x5a 0 1M", "write -P 0xa5 1M 1M"],
        &[&target, &init],
    );
    let s = target.kill9();
    assert!(!s.success(), "SIGKILL: {s}");
    let target = restart(&r);
    init.expect_count("connect disk reconnected", 1, &[&target]);
    io(
        &r,
        &["flush", "read -P 0x5a 0 1M", "read -P 0xa5 1M 1M"],
        &[&target, &init],
    );
}
