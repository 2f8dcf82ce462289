//! Two hosts in network namespaces joined by a veth pair, each with its
//! own soft device registry (devices added, reset, removed and replaced
//! with the `relink soft-device` CLI inside the namespace): the target
//! relinkd runs in one, the initiator relinkd in the other, and qemu
//! clients in the root namespace use the initiator's NBD Unix socket.
//!
//! - `qemu-img convert` writes a 256 MiB random image while the soft
//!   device of either host is reset, unplugged and replugged, and
//!   replaced: qemu-img sees no error and the volume matches the image
//!   byte for byte, through NBD and as the target's file; then what an
//!   operator sees on the control sockets: the initiator's `status` and
//!   Prometheus `metrics` count a loss and a recovery for every fault,
//!   the target's `status` shows the one export session, established;
//! - an outage longer than a connection's give-up deadline fails its
//!   I/O (never hangs) while a second volume keeps being served;
//! - the target killed with SIGKILL and restarted: the initiator
//!   connects a new session (not a resume) and flushed writes are intact;
//! - `qemu-img convert` (rate-limited, to last) while the target is
//!   killed with SIGKILL and restarted, then stopped with SIGTERM and
//!   restarted: qemu-img exits 0 and the volume equals the image (the
//!   initiator holds the I/O and sends the commands under way again on
//!   the new session).
//!
//! Needs root, `ip` (iproute2), qemu-img and qemu-io (qemu-utils) and the
//! `relink` CLI built next to relinkd; without them each test reports the
//! skip through relink-skip and returns: a `SKIPPED:` line on stderr,
//! counted as skipped by `scripts/test.sh`, and a failure under `CI=true`
//! when what is missing is something CI's install step provides (all of
//! them but root).

mod common;
mod netns_hosts;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::images::{
    compare, empty_volume, finish, source_and_volume, start_convert, transcripts,
};
use common::{run_bounded, Daemon, STEP};
use netns_hosts::{control, two_hosts, Host, TwoHosts, I_GUID, PORT, T_GUID};
use relink_skip::skip_test;
use relinkd::control::protocol::{Command as Ctl, MetricsResult, StatusResult};

/// The two hosts, or `None` after reporting `test` skipped.
fn hosts_or_skip(tag: &str, test: &str) -> Option<TwoHosts> {
    two_hosts(tag).map_err(|skip| skip_test(test, &skip)).ok()
}

/// Writes a relinkd configuration file.
fn config(path: &Path, soft_dir: &Path, body: &str) {
    let mut f = std::fs::File::create(path).unwrap();
    write!(f, "[backend]\nsoft_dir = {soft_dir:?}\n\n{body}").unwrap();
}

/// A `[control]` table with its socket at `socket`.
fn control_socket(socket: &Path) -> String {
    format!("[control]\nsocket = {socket:?}\n\n")
}

/// The value of the Prometheus sample `name` (with its labels) in `text`.
#[track_caller]
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in\n{text}"))
}

fn export(name: &str, addr: &str, file: &Path) -> String {
    format!("[[export]]\nname = \"{name}\"\nlisten = \"{addr}:{PORT}\"\nfile = {file:?}\n\n")
}

fn connect(name: &str, addr: &str, socket: &Path, give_up_secs: u64) -> String {
    format!(
        "[[connect]]\nname = \"{name}\"\ntargets = [\"{addr}:{PORT}\"]\nnbd_socket = {socket:?}\ngive_up_secs = {give_up_secs}\n\n"
    )
}

fn url(name: &str, socket: &Path) -> String {
    format!("nbd+unix:///{name}?socket={}", socket.display())
}

/// `qemu-io -f raw URL -c ...`: whether it succeeded, and its output.
#[track_caller]
fn qemu_io(url: &str, commands: &[&str], daemons: &[&Daemon]) -> (bool, String) {
    let mut c = Command::new("qemu-io");
    c.args(["-f", "raw"]);
    for cmd in commands {
        c.args(["-c", cmd]);
    }
    let out = run_bounded(c.arg(url)).unwrap_or_else(|| {
        panic!(
            "qemu-io {commands:?} hung (no answer within {STEP:?})\n{}",
            transcripts(daemons)
        )
    });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // qemu-io reports a failed command as "... failed: <error>".
    let ok = out.status.success() && !text.contains("failed");
    (ok, text)
}

/// One disturbance of a host's soft device.
#[derive(Debug, Clone, Copy)]
enum Disturb {
    Reset,
    Replug,
    Replace,
}

/// Disturbs `host`'s `soft0`; for a replug, waits until `daemon` (the
/// host's relinkd) saw its device go before plugging it back with the
/// same GUID.
fn disturb(host: &Host, what: Disturb, daemon: &mut Daemon, guid: &str, others: &[&Daemon]) {
    match what {
        Disturb::Reset => {
            host.soft_device(&["reset", "soft0"]);
        }
        Disturb::Replug => {
            let lost = daemon.count("event_type=\"device_lost\"");
            host.soft_device(&["remove", "soft0"]);
            daemon.expect_count("event_type=\"device_lost\"", lost + 1, others);
            let addr = format!("{}/24", host.addr);
            host.soft_device(&["add", "soft0", "--addr", &addr, "--guid", guid]);
        }
        Disturb::Replace => {
            host.soft_device(&["replace", "soft0"]);
        }
    }
}

#[test]
fn qemu_img_copies_256_mib_while_either_hosts_device_is_reset_replugged_and_replaced() {
    let started = Instant::now();
    const SIZE: u64 = 256 << 20;
    let Some(TwoHosts { root, t, i }) = hosts_or_skip(
        "copy",
        "qemu_img_copies_256_mib_while_either_hosts_device_is_reset_replugged_and_replaced",
    ) else {
        return;
    };
    let (source, volume) = source_and_volume(&root.0, SIZE, 2026);
    let socket = root.0.join("nbd.sock");
    let (t_conf, i_conf) = (root.0.join("target.toml"), root.0.join("init.toml"));
    let (t_ctl, i_ctl) = (root.0.join("target.ctl"), root.0.join("init.ctl"));
    config(
        &t_conf,
        &t.soft_dir,
        &(control_socket(&t_ctl) + &export("disk", &t.addr, &volume)),
    );
    config(
        &i_conf,
        &i.soft_dir,
        &(control_socket(&i_ctl) + &connect("disk", &t.addr, &socket, 300)),
    );

    let mut target = t.relinkd("target", &t_conf);
    target.expect_line("export disk listening");
    target.expect_line("control socket");
    let mut init = i.relinkd("initiator", &i_conf);
    init.expect_line("control socket");
    init.expect_line("connect disk ready: 268435456 bytes");
    init.expect_line("connect disk serving nbd");

    let url = url("disk", &socket);
    let mut convert = start_convert(&source, &url, &volume, &[], &[&target, &init]);

    // One after the other; each waits for the initiator's resume.
    let steps = [
        ("T", Disturb::Reset),
        ("I", Disturb::Reset),
        ("T", Disturb::Replug),
        ("I", Disturb::Replug),
        ("T", Disturb::Replace),
        ("I", Disturb::Replace),
    ];
    let mut during_copy = Vec::new();
    for (n, (side, what)) in steps.into_iter().enumerate() {
        during_copy.push(convert.try_wait().unwrap().is_none());
        if side == "T" {
            disturb(&t, what, &mut target, T_GUID, &[&init]);
        } else {
            disturb(&i, what, &mut init, I_GUID, &[&target]);
        }
        init.expect_count("event_type=\"resumed\"", n + 1, &[&target]);
        println!(
            "host {side} {what:?}: resumed (qemu-img still copying: {})",
            during_copy[n]
        );
    }

    finish(convert, "qemu-img convert", STEP * 3, &[&target, &init]);
    let copy_time = started.elapsed();
    compare(&source, &url, &[&target, &init]);

    // The recoveries, as the daemons logged them.
    let (lost_t, lost_i) = (
        target.count("event_type=\"device_lost\""),
        init.count("event_type=\"device_lost\""),
    );
    let resumed = init.count("event_type=\"resumed\"");
    assert!(resumed >= 6, "{}", transcripts(&[&target, &init]));
    assert_eq!(
        init.count("the session ended:"),
        0,
        "a session ended\n{}",
        init.transcript()
    );
    println!(
        "recoveries: initiator resumed {resumed} times; device losses seen by the target {lost_t}, by the initiator {lost_i}; qemu-img copying at each step: {during_copy:?}"
    );

    // What an operator sees. Every fault, on either host, takes the
    // initiator's transport: its session counts a loss (`losses`, one
    // per `DeviceLost` event it logged) and, once resumed, a recovery
    // (`recoveries`, one per `Resumed`); a loss that comes while the
    // session is already recovering is not counted again, so there are
    // at least six of each, and the counters match the events logged.
    let all = [&target, &init];
    let st: StatusResult = control(&i_ctl, Ctl::Status {});
    assert_eq!(st.connections.len(), 1, "{st:?}");
    let c = &st.connections[0];
    let why = || format!("{c:?}\n{}", transcripts(&all));
    assert_eq!(c.name, "disk", "{}", why());
    assert_eq!(c.state, "ready", "{}", why());
    assert_eq!(c.session.state, "Established", "{}", why());
    assert_eq!(c.session.recoveries, resumed as u64, "{}", why());
    assert_eq!(c.session.losses, lost_i as u64, "{}", why());
    assert!(c.session.recoveries >= 6, "{}", why());
    assert!(c.session.losses >= c.session.recoveries, "{}", why());
    assert!(c.session.downtime_secs > 0.0, "{}", why());
    assert!(c.bytes_written >= SIZE, "{}", why());
    assert!(!c.last_outages_secs.is_empty(), "{}", why());
    // Where the last outage's time went: every phase up to the first
    // completion after it (the initiator resolves; the last fault is its
    // own device's replacement, so a device came).
    let p = c.session.last_recovery.as_ref().expect("the last recovery");
    assert!(
        p.device_ms.is_some() && p.addr_ms.is_some() && p.first_completion_ms.is_some(),
        "{p:?}\n{}",
        why()
    );
    println!("last recovery of the initiator: {p:?}");
    let m: MetricsResult = control(&i_ctl, Ctl::Metrics {});
    let conn = |family: &str| {
        sample(
            &m.text,
            &format!("relinkd_connection_{family}{{connection=\"disk\"}}"),
        )
    };
    assert_eq!(conn("established"), 1.0, "{}", m.text);
    assert_eq!(conn("ready"), 1.0, "{}", m.text);
    assert_eq!(
        conn("recoveries_total"),
        c.session.recoveries as f64,
        "{}",
        m.text
    );
    assert_eq!(conn("losses_total"), c.session.losses as f64, "{}", m.text);
    assert_eq!(
        conn("attempts_total"),
        c.session.attempts as f64,
        "{}",
        m.text
    );
    assert!(conn("bytes_written_total") >= SIZE as f64, "{}", m.text);
    assert!(conn("downtime_seconds_total") > 0.0, "{}", m.text);
    // The target's side: the export with the initiator's one session
    // (resumed every time, never a second one), established.
    let ts: StatusResult = control(&t_ctl, Ctl::Status {});
    assert_eq!(ts.exports.len(), 1, "{ts:?}");
    let e = &ts.exports[0];
    assert_eq!(e.name, "disk", "{ts:?}");
    assert_eq!(e.sessions.len(), 1, "{ts:?}\n{}", transcripts(&all));
    assert_eq!(e.sessions[0].state, "Established", "{ts:?}");
    // Each of the initiator's resumes is one the target's half accepted.
    assert_eq!(
        e.sessions[0].recoveries,
        c.session.recoveries,
        "{ts:?}\n{}",
        transcripts(&all)
    );
    let tm: MetricsResult = control(&t_ctl, Ctl::Metrics {});
    assert_eq!(
        sample(
            &tm.text,
            "relinkd_export_session_established{export=\"disk\",session=\"0\"}"
        ),
        1.0,
        "{}",
        tm.text
    );
    println!(
        "initiator status: session {} epoch {}, {} attempts, {} losses, {} recoveries, {:.3} s down, {} replayed; last outages {:?} s",
        c.session.state,
        c.session.epoch,
        c.session.attempts,
        c.session.losses,
        c.session.recoveries,
        c.session.downtime_secs,
        c.session.replayed,
        c.last_outages_secs
    );
    println!("target status: export session {:?}", e.sessions[0]);

    let s = init.terminate();
    assert!(s.success(), "initiator exit: {s}\n{}", init.transcript());
    assert!(!socket.exists(), "the NBD socket is removed at exit");
    assert!(!i_ctl.exists(), "the control socket is removed at exit");
    let s = target.terminate();
    assert!(s.success(), "target exit: {s}\n{}", target.transcript());
    compare(&source, volume.to_str().unwrap(), &[]);
    println!(
        "netns copy test: 256 MiB copied in {copy_time:?}, whole test {:?}",
        started.elapsed()
    );
}

#[test]
fn an_outage_past_the_give_up_deadline_fails_io_while_another_volume_keeps_serving() {
    let started = Instant::now();
    const SIZE: u64 = 4 << 20;
    let Some(TwoHosts { root, t, i }) = hosts_or_skip(
        "giveup",
        "an_outage_past_the_give_up_deadline_fails_io_while_another_volume_keeps_serving",
    ) else {
        return;
    };
    // A second target address on host T, owned by a second device that
    // stays up.
    let addr1 = format!("{}.3", t.addr.rsplit_once('.').unwrap().0);
    t.ns.ip(&["addr", "add", &format!("{addr1}/24"), "dev", "veth0"]);
    t.soft_device(&["add", "soft1", "--addr", &format!("{addr1}/24")]);
    let (vol0, vol1) = (root.0.join("vol0.img"), root.0.join("vol1.img"));
    empty_volume(&vol0, SIZE);
    empty_volume(&vol1, SIZE);
    let (sock0, sock1): (PathBuf, PathBuf) = (root.0.join("nbd0.sock"), root.0.join("nbd1.sock"));
    let (t_conf, i_conf) = (root.0.join("target.toml"), root.0.join("init.toml"));
    config(
        &t_conf,
        &t.soft_dir,
        &(export("disk0", &t.addr, &vol0) + &export("disk1", &addr1, &vol1)),
    );
    config(
        &i_conf,
        &i.soft_dir,
        &(connect("disk0", &t.addr, &sock0, 2) + &connect("disk1", &addr1, &sock1, 300)),
    );
    let mut target = t.relinkd("target", &t_conf);
    target.expect_line("export disk0 listening");
    target.expect_line("export disk1 listening");
    let mut init = i.relinkd("initiator", &i_conf);
    init.expect_line("connect disk0 serving nbd");
    init.expect_line("connect disk1 serving nbd");
    let (url0, url1) = (url("disk0", &sock0), url("disk1", &sock1));
    let (ok, text) = qemu_io(&url0, &["write -P 0x11 0 64k", "flush"], &[&target, &init]);
    assert!(ok, "disk0 before the outage: {text}");

    // Device gone on the target for longer than disk0's 2 s deadline.
    t.soft_device(&["remove", "soft0"]);
    init.expect_count("event_type=\"device_lost\"", 1, &[&target]);
    let all = [&target, &init];
    let (ok, text) = qemu_io(&url0, &["read -P 0x11 0 64k"], &all);
    assert!(
        !ok,
        "a read past the give-up deadline succeeded: {text}\n{}",
        transcripts(&all)
    );
    println!("disk0 during the outage (qemu-io): {}", text.trim());
    init.expect_count("event_type=\"gave_up\"", 1, &[&target]);
    let all = [&target, &init];

    // disk1, on the device that stays, serves reads and writes.
    let (ok, text) = qemu_io(
        &url1,
        &["write -P 0x22 0 1M", "flush", "read -P 0x22 0 1M"],
        &all,
    );
    assert!(
        ok,
        "disk1 during disk0's outage: {text}\n{}",
        transcripts(&all)
    );

    // The device comes back: the target listens on it again and the
    // initiator's new session serves disk0 with its data.
    let addr0 = format!("{}/24", t.addr);
    t.soft_device(&["add", "soft0", "--addr", &addr0, "--guid", T_GUID]);
    init.expect_count("connect disk0 reconnected", 1, &[&target]);
    let all = [&target, &init];
    let (ok, text) = qemu_io(&url0, &["read -P 0x11 0 64k"], &all);
    assert!(
        ok,
        "disk0 after its device came back: {text}\n{}",
        transcripts(&all)
    );
    println!("{}", transcripts(&all));

    let s = init.terminate();
    assert!(s.success(), "initiator exit: {s}\n{}", init.transcript());
    let s = target.terminate();
    assert!(s.success(), "target exit: {s}\n{}", target.transcript());
    let data = std::fs::read(&vol1).unwrap();
    assert!(data[..1 << 20].iter().all(|&b| b == 0x22));
    println!("netns give-up test: {:?}", started.elapsed());
}

#[test]
fn a_target_killed_and_restarted_gets_a_new_session_and_flushed_writes_survive() {
    let started = Instant::now();
    const SIZE: u64 = 8 << 20;
    let Some(TwoHosts { root, t, i }) = hosts_or_skip(
        "kill",
        "a_target_killed_and_restarted_gets_a_new_session_and_flushed_writes_survive",
    ) else {
        return;
    };
    let volume = root.0.join("volume.img");
    empty_volume(&volume, SIZE);
    let socket = root.0.join("nbd.sock");
    let (t_conf, i_conf) = (root.0.join("target.toml"), root.0.join("init.toml"));
    config(&t_conf, &t.soft_dir, &export("disk", &t.addr, &volume));
    config(
        &i_conf,
        &i.soft_dir,
        &connect("disk", &t.addr, &socket, 300),
    );
    let mut target = t.relinkd("target", &t_conf);
    target.expect_line("export disk listening");
    let mut init = i.relinkd("initiator", &i_conf);
    init.expect_line("connect disk serving nbd");
    let url = url("disk", &socket);

    let writes = [
        "write -P 0x5a 0 1M",
        "write -P 0xa5 1M 1M",
        "write -P 0x3c 7M 64k",
        "flush",
    ];
    let (ok, text) = qemu_io(&url, &writes, &[&target, &init]);
    assert!(ok, "writes before the kill: {text}");

    let s = target.kill9();
    assert!(!s.success(), "SIGKILL: {s}");
    let mut target = t.relinkd("target (restarted)", &t_conf);
    target.expect_line("export disk listening");
    init.expect_count("connect disk reconnected", 1, &[&target]);
    // The new incarnation refuses the old session's resume: the
    // initiator connects a new session.
    assert!(
        init.count("unknown session") >= 1
            && init.count("the session ended:") >= 1
            && init.count("event_type=\"resumed\"") == 0,
        "the initiator must connect a new session, not resume\n{}",
        init.transcript()
    );

    let reads = [
        "read -P 0x5a 0 1M",
        "read -P 0xa5 1M 1M",
        "read -P 0x3c 7M 64k",
        "read -P 0 2M 5M",
    ];
    let (ok, text) = qemu_io(&url, &reads, &[&target, &init]);
    assert!(
        ok && !text.contains("verification failed"),
        "flushed writes after the restart: {text}\n{}",
        transcripts(&[&target, &init])
    );
    println!("{}", transcripts(&[&target, &init]));
    let s = init.terminate();
    assert!(s.success(), "initiator exit: {s}\n{}", init.transcript());
    let s = target.terminate();
    assert!(s.success(), "target exit: {s}\n{}", target.transcript());
    let data = std::fs::read(&volume).unwrap();
    assert!(data[..1 << 20].iter().all(|&b| b == 0x5a));
    assert!(data[1 << 20..2 << 20].iter().all(|&b| b == 0xa5));
    assert!(data[7 << 20..(7 << 20) + (64 << 10)]
        .iter()
        .all(|&b| b == 0x3c));
    println!("netns SIGKILL test: {:?}", started.elapsed());
}

#[test]
fn qemu_img_copies_while_the_target_is_killed_and_stopped_and_restarted() {
    let started = Instant::now();
    const SIZE: u64 = 48 << 20;
    let Some(TwoHosts { root, t, i }) = hosts_or_skip(
        "restart",
        "qemu_img_copies_while_the_target_is_killed_and_stopped_and_restarted",
    ) else {
        return;
    };
    let (source, volume) = source_and_volume(&root.0, SIZE, 7);
    let socket = root.0.join("nbd.sock");
    let (t_conf, i_conf) = (root.0.join("target.toml"), root.0.join("init.toml"));
    config(&t_conf, &t.soft_dir, &export("disk", &t.addr, &volume));
    config(
        &i_conf,
        &i.soft_dir,
        &connect("disk", &t.addr, &socket, 300),
    );
    let mut target = t.relinkd("target", &t_conf);
    target.expect_line("export disk listening");
    let mut init = i.relinkd("initiator", &i_conf);
    init.expect_line("connect disk serving nbd");
    let url = url("disk", &socket);
    let mut convert = start_convert(&source, &url, &volume, &["-r", "6M"], &[&target, &init]);

    let copying_at_kill = convert.try_wait().unwrap().is_none();
    let s = target.kill9();
    assert!(!s.success(), "SIGKILL: {s}");
    thread::sleep(Duration::from_millis(300));
    let mut target = t.relinkd("target (after SIGKILL)", &t_conf);
    target.expect_line("export disk listening");
    init.expect_count("connect disk reconnected", 1, &[&target]);

    let copying_at_stop = convert.try_wait().unwrap().is_none();
    let s = target.terminate();
    assert!(s.success(), "SIGTERM: {s}\n{}", target.transcript());
    thread::sleep(Duration::from_millis(300));
    let mut target = t.relinkd("target (after SIGTERM)", &t_conf);
    target.expect_line("export disk listening");
    init.expect_count("connect disk reconnected", 2, &[&target]);

    let out = finish(convert, "qemu-img convert", STEP * 3, &[&target, &init]);
    compare(&source, &url, &[&target, &init]);
    let resent = init.count("goes to the new one");
    println!(
        "netns restart test: qemu-img exit {}, {:.1?}; copying at the kill {copying_at_kill}, at \
         the stop {copying_at_stop}; held I/O sent again {resent} time(s)",
        out.status,
        started.elapsed()
    );
    assert!(
        copying_at_kill && copying_at_stop && resent >= 1,
        "nothing was under way to hold at a restart\n{}",
        init.transcript()
    );
    let s = init.terminate();
    assert!(s.success(), "initiator exit: {s}\n{}", init.transcript());
    let s = target.terminate();
    assert!(s.success(), "target exit: {s}\n{}", target.transcript());
}
