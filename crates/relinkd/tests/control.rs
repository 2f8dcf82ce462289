//! The control socket of relinkd, end to end: two relinkd processes on
//! the soft TCP fabric (a target on soft host `b`, 127.0.0.2, and an
//! initiator on soft host `a`, 127.0.0.1), each with a control socket in
//! a temporary directory, driven with the control protocol (and the
//! `relink` CLI where a second user is needed) while `qemu-io` reads and
//! writes through the initiator's NBD socket.
//!
//! Needs `qemu-io` (qemu-utils) for the I/O tests; without it they report
//! the skip through relink-skip and return. The check of another user's
//! client needs root, `setpriv` (util-linux) and the `relink` CLI built
//! next to relinkd; without them that part alone is skipped. A skip shows
//! as a `SKIPPED:` line on stderr, counts as skipped in `scripts/test.sh`,
//! and fails under `CI=true` when what is missing is something CI's
//! install step provides (qemu-utils, util-linux, the relink CLI).

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::thread;
use std::time::{Duration, Instant};

use common::config::ConfigFile;
use common::images::empty_volume;
use common::{
    call, free_addr, qemu_io, raw, status, tool, wait_for, Daemon, Root, SoftHosts, STEP,
};
use relink_skip::{skip_part, skip_test, Skip};
use relink_soft::Registry;
use relinkd::control::protocol::{
    self, AckResult, Command as Ctl, DrainResult, ErrorKind, Limit, MetricsResult, Never,
    PolicyResult, ReloadResult, Response,
};

const SIZE: u64 = 8 << 20;

struct Hosts {
    /// The initiator's HTTP metrics address.
    metrics: String,
    root: Root,
    _reg_a: Registry,
    reg_b: Registry,
    addr: String,
    target: Daemon,
    init: Daemon,
    /// The initiator's control socket.
    ctl: PathBuf,
    /// The initiator's NBD socket of connection `disk`.
    nbd: PathBuf,
}

/// Both daemons, the initiator's connection `disk` ready; `a_devices`
/// soft devices on host `a` (127.0.0.1, 127.0.0.3, ...).
fn hosts(name: &str, give_up_secs: u64, a_devices: usize) -> Hosts {
    hosts_with(name, give_up_secs, a_devices, "")
}

/// [`hosts`], with `extra` lines in the connection's table.
fn hosts_with(name: &str, give_up_secs: u64, a_devices: usize, extra: &str) -> Hosts {
    let root = Root::new(&format!("control-{name}"));
    let soft = SoftHosts::create(&root.0);
    for i in 1..a_devices {
        soft.reg_a
            .add(
                &format!("soft{i}"),
                vec![format!("127.0.0.{}/8", 1 + 2 * i).parse().unwrap()],
                None,
                None,
            )
            .unwrap();
    }
    let volume = root.0.join("volume.img");
    empty_volume(&volume, SIZE);
    let addr = free_addr("127.0.0.2");
    let target_conf = root.0.join("target.toml");
    ConfigFile::new()
        .backend(&soft.dir_b)
        .control(&root.0.join("b.ctl"))
        .export("disk", &addr, &volume)
        .write(&target_conf);
    let nbd = root.0.join("nbd.sock");
    let ctl = root.0.join("ctl").join("a.ctl");
    let metrics = free_addr("127.0.0.1");
    let init_conf = root.0.join("initiator.toml");
    std::fs::create_dir(root.0.join("conf.d")).unwrap();
    ConfigFile::new()
        .set("conf_dir", "\"conf.d\"")
        .backend(&soft.dir_a)
        .control(&ctl)
        .set("metrics_listen", format!("\"{metrics}\""))
        .connect("disk", &addr, &nbd)
        .set("give_up_secs", give_up_secs)
        .push(extra)
        .write(&init_conf);
    let target = Daemon::start_target(&target_conf, "disk");
    let init = Daemon::start_initiator(&init_conf, "disk");
    Hosts {
        metrics,
        root,
        _reg_a: soft.reg_a,
        reg_b: soft.reg_b,
        addr,
        target,
        init,
        ctl,
        nbd,
    }
}

impl Hosts {
    fn transcripts(&self) -> String {
        format!("{}\n{}", self.target.transcript(), self.init.transcript())
    }

    /// The connection `name`'s status, if it is there.
    fn conn(&self, name: &str) -> Option<protocol::ConnectionStatus> {
        status(&self.ctl)
            .connections
            .into_iter()
            .find(|c| c.name == name)
    }

    fn wait(&self, what: &str, f: impl FnMut() -> bool) {
        wait_for(what, &[&self.target, &self.init], f);
    }

    fn ok<T: serde::de::DeserializeOwned>(&self, c: Ctl) -> T {
        let what = format!("{c:?}");
        call(&self.ctl, c)
            .into_result()
            .unwrap_or_else(|e| panic!("{what}: {e}\n{}", self.transcripts()))
    }

    fn stop(mut self) {
        self.init.terminate_ok();
        assert!(!self.ctl.exists(), "the control socket is removed at exit");
        self.target.terminate_ok();
    }
}

/// Waits for `child` to exit (bounded by [`STEP`]), then its output.
fn finish(child: Child, h: &Hosts) -> Output {
    let mut child = child;
    let deadline = Instant::now() + STEP;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("qemu-io did not finish\n{}", h.transcripts());
        }
        thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether qemu-io's commands all succeeded (it reports failures in its
/// output, with exit status 0 for some of them).
fn io_ok(o: &Output) -> bool {
    let t = text(o);
    o.status.success() && !t.contains("failed") && !t.contains("error")
}

#[track_caller]
fn run_io(h: &Hosts, socket: &Path, name: &str, commands: &[&str]) {
    let o = qemu_io(socket, name, commands)
        .output()
        .expect("run qemu-io");
    assert!(
        io_ok(&o),
        "qemu-io {commands:?}: {}\n{}",
        text(&o),
        h.transcripts()
    );
}

#[test]
fn the_control_socket_answers_refuses_clearly_and_shows_a_recovery() {
    let h = hosts("socket", 300, 1);
    let mode = std::fs::metadata(&h.ctl).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the control socket's mode");

    // Bad requests get clear errors, on the same connection, and the
    // daemon keeps serving.
    let got = raw(
        &h.ctl,
        &[
            r#"{"version":1,"command":"reboot"}"#,
            r#"{"version":7,"command":"status"}"#,
            r#"{"version":1,"command":"status","bogus":1}"#,
            r#"{"version":1,"command":"status"}"#,
        ],
    );
    let r: Vec<Response> = got
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let e = r[0].error.as_ref().unwrap();
    assert_eq!(e.kind, ErrorKind::UnknownCommand);
    assert!(e.message.contains("\"reboot\""), "{}", e.message);
    let e = r[1].error.as_ref().unwrap();
    assert_eq!(e.kind, ErrorKind::UnsupportedVersion);
    assert!(e.message.contains("version 1"), "{}", e.message);
    assert_eq!(r[2].error.as_ref().unwrap().kind, ErrorKind::BadRequest);
    assert!(r[3].ok, "{}", got[3]);
    let e = call(
        &h.ctl,
        Ctl::Disconnect {
            name: "nope".into(),
        },
    )
    .into_result::<AckResult>()
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);

    // Another user.
    match other_user_client() {
        Ok((relink, setpriv)) => {
            let other = |h: &Hosts| {
                Command::new(&setpriv)
                    .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
                    .arg(&relink)
                    .arg("status")
                    .arg("--socket")
                    .arg(&h.ctl)
                    .output()
                    .expect("run setpriv")
            };
            // The socket's mode keeps it out.
            let o = other(&h);
            assert!(!o.status.success(), "{}", text(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.starts_with("relink: error: cannot reach relinkd at ")
                    && err.contains("ermission denied"),
                "{err}"
            );
            // With the mode opened, the daemon's uid check does.
            std::fs::set_permissions(&h.ctl, std::fs::Permissions::from_mode(0o666)).unwrap();
            let dir = h.ctl.parent().unwrap();
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
            let o = other(&h);
            assert!(!o.status.success(), "{}", text(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.starts_with("relink: error: permission denied: uid 65534"),
                "{err}"
            );
            std::fs::set_permissions(&h.ctl, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        Err(skip) => skip_part(
            "the_control_socket_answers_refuses_clearly_and_shows_a_recovery: \
             another user's client",
            &skip,
        ),
    }

    // A reset of the target's device: status and metrics show the
    // recovery.
    assert!(h.conn("disk").unwrap().session.recoveries == 0);
    h.reg_b.reset("soft0").expect("reset b/soft0");
    h.wait("a recovery in status", || {
        h.conn("disk")
            .is_some_and(|c| c.session.recoveries >= 1 && c.session.state == "Established")
    });
    let c = h.conn("disk").unwrap();
    assert!(c.session.losses >= 1, "{c:?}");
    assert_eq!(
        c.last_outages_secs.len() as u64,
        c.session.recoveries,
        "{c:?}"
    );
    assert!(c.session.epoch >= 2, "{c:?}");
    let m: MetricsResult = h.ok(Ctl::Metrics {});
    let line = m
        .text
        .lines()
        .find(|l| l.starts_with("relinkd_connection_recoveries_total{connection=\"disk\"}"))
        .unwrap_or_else(|| panic!("{}", m.text));
    let n: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n >= 1, "{line}");
    assert!(m
        .text
        .contains("# TYPE relinkd_connection_recoveries_total counter"));
    // The same over HTTP.
    let mut http = std::net::TcpStream::connect(&h.metrics).expect("connect to metrics_listen");
    http.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut page = String::new();
    http.read_to_string(&mut page).unwrap();
    assert!(page.starts_with("HTTP/1.0 200 OK\r\n"), "{page}");
    assert!(
        page.contains("relinkd_connection_recoveries_total{connection=\"disk\"}"),
        "{page}"
    );
    // The target's side shows its export's session.
    let t = status(&h.root.0.join("b.ctl"));
    assert_eq!(t.exports.len(), 1);
    assert_eq!(t.exports[0].sessions.len(), 1, "{t:?}");
    h.stop();
}

/// The `relink` CLI and `setpriv` for a client run as another user, or
/// why that cannot be done here.
fn other_user_client() -> Result<(PathBuf, PathBuf), Skip> {
    let relink = common::relink_bin()?;
    let setpriv = relink_skip::find_program("setpriv", "util-linux")?;
    if !rustix_uid_is_root() {
        return Err(Skip::new("not running as root (setpriv --reuid needs it)"));
    }
    Ok((relink, setpriv))
}

fn rustix_uid_is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

#[test]
fn disconnect_fails_io_waiting_in_recovery_at_once() {
    if let Err(skip) = tool("qemu-io") {
        return skip_test("disconnect_fails_io_waiting_in_recovery_at_once", &skip);
    }
    let h = hosts("disconnect", 300, 1);
    run_io(&h, &h.nbd, "disk", &["write -P 0x33 0 64k"]);
    h.reg_b.remove("soft0").expect("remove b/soft0");
    h.wait("the loss", || {
        h.conn("disk").is_some_and(|c| c.session.losses >= 1)
    });
    let read = qemu_io(&h.nbd, "disk", &["read -P 0x33 0 64k"])
        .spawn()
        .unwrap();
    h.wait("the read in flight", || {
        h.conn("disk").is_some_and(|c| c.in_flight >= 1)
    });
    let ack: AckResult = h.ok(Ctl::Disconnect {
        name: "disk".into(),
    });
    assert!(ack.message.contains("disconnected"), "{}", ack.message);
    // The read fails now, not at the give-up deadline (300 s, longer
    // than any wait here).
    let o = finish(read, &h);
    assert!(!io_ok(&o), "the read did not fail: {}", text(&o));
    assert!(h.conn("disk").is_none());
    assert!(!h.nbd.exists(), "the NBD socket is removed");
    h.stop();
}

#[test]
fn hold_keeps_io_waiting_until_resume() {
    if let Err(skip) = tool("qemu-io") {
        return skip_test("hold_keeps_io_waiting_until_resume", &skip);
    }
    let h = hosts("hold", 300, 1);
    run_io(&h, &h.nbd, "disk", &["write -P 0x5a 0 256k"]);
    let _: AckResult = h.ok(Ctl::Hold {
        name: "disk".into(),
    });
    let p: PolicyResult = h.ok(Ctl::PolicyGet {
        name: "disk".into(),
    });
    assert_eq!(p.mode, protocol::Mode::Manual);
    h.reg_b.reset("soft0").expect("reset b/soft0");
    h.wait("the session held", || {
        h.conn("disk").is_some_and(|c| c.session.state == "Held")
    });
    let read = qemu_io(&h.nbd, "disk", &["read -P 0x5a 0 256k"])
        .spawn()
        .unwrap();
    h.wait("the read in flight", || {
        h.conn("disk").is_some_and(|c| c.in_flight >= 1)
    });
    let mut read = read;
    assert!(read.try_wait().unwrap().is_none(), "the read waits");
    assert_eq!(h.conn("disk").unwrap().session.state, "Held");
    let _: AckResult = h.ok(Ctl::Resume {
        name: "disk".into(),
        path: None,
    });
    let o = finish(read, &h);
    assert!(
        io_ok(&o),
        "the read after resume: {}\n{}",
        text(&o),
        h.transcripts()
    );
    h.stop();
}

#[test]
fn give_up_none_during_an_outage_keeps_the_session() {
    if let Err(skip) = tool("qemu-io") {
        return skip_test("give_up_none_during_an_outage_keeps_the_session", &skip);
    }
    // The policy change must land before the configured deadline runs
    // out: 15 s leaves a loaded machine room for it.
    let h = hosts("giveup", 15, 1);
    run_io(&h, &h.nbd, "disk", &["write -P 0x77 0 64k"]);
    h.reg_b.remove("soft0").expect("remove b/soft0");
    h.wait("the loss", || {
        h.conn("disk").is_some_and(|c| c.session.losses >= 1)
    });
    let p: PolicyResult = h.ok(Ctl::PolicySet {
        name: "disk".into(),
        give_up_secs: Some(Limit::Off(Never::None)),
        fast_fail_secs: None,
        mode: None,
    });
    assert_eq!(p.give_up_secs, None);
    // Past the configured deadline: the session still recovers.
    thread::sleep(Duration::from_secs(18));
    let c = h.conn("disk").unwrap();
    assert_eq!(c.session.state, "Recovering", "{c:?}\n{}", h.transcripts());
    h.reg_b
        .add("soft0", vec!["127.0.0.2/8".parse().unwrap()], None, None)
        .expect("add b/soft0 again");
    h.wait("the recovery", || {
        h.conn("disk").is_some_and(|c| c.session.recoveries >= 1)
    });
    run_io(&h, &h.nbd, "disk", &["read -P 0x77 0 64k"]);
    h.stop();
}

#[test]
fn fast_fail_set_live_fails_io_in_each_outage_and_frees_its_slots() {
    if let Err(skip) = tool("qemu-io") {
        return skip_test(
            "fast_fail_set_live_fails_io_in_each_outage_and_frees_its_slots",
            &skip,
        );
    }
    // A queue depth of 2: a slot kept by a fast-failed command of any
    // outage stalls every later request.
    let h = hosts_with("fastfail", 300, 1, "queue_depth = 2\n");
    run_io(&h, &h.nbd, "disk", &["write -P 0x3c 0 64k"]);
    let p: PolicyResult = h.ok(Ctl::PolicySet {
        name: "disk".into(),
        give_up_secs: None,
        fast_fail_secs: Some(Limit::Secs(2)),
        mode: None,
    });
    assert_eq!(p.fast_fail_secs, Some(2));
    for outage in 1..=3u64 {
        h.reg_b.remove("soft0").expect("remove b/soft0");
        h.wait("the loss", || {
            h.conn("disk").is_some_and(|c| c.session.losses >= outage)
        });
        // Submitted in the outage, failed by the fast-fail deadline (the
        // give-up deadline, 300 s, is longer than any wait here).
        let read = qemu_io(&h.nbd, "disk", &["read -P 0x3c 0 64k"])
            .spawn()
            .unwrap();
        let o = finish(read, &h);
        assert!(
            !io_ok(&o),
            "outage {outage}: the read did not fail: {}",
            text(&o)
        );
        assert!(
            text(&o).contains("Input/output error"),
            "outage {outage}: {}",
            text(&o)
        );
        h.wait("one warning per outage", || {
            h.init.stderr_count("fast-failed") >= outage as usize
        });
        h.reg_b
            .add("soft0", vec!["127.0.0.2/8".parse().unwrap()], None, None)
            .expect("add b/soft0 again");
        h.wait("the recovery", || {
            h.conn("disk")
                .is_some_and(|c| c.session.recoveries >= outage && c.session.state == "Established")
        });
        // Every slot came back: the volume is served as before.
        run_io(
            &h,
            &h.nbd,
            "disk",
            &["read -P 0x3c 0 64k", "read -P 0x3c 0 64k"],
        );
        let c = h.conn("disk").unwrap();
        assert_eq!((c.state.as_str(), c.in_flight), ("ready", 0), "{c:?}");
    }
    let warnings = h.init.stderr_count("fast-failed");
    assert_eq!(warnings, 3, "one warning per outage\n{}", h.transcripts());
    h.stop();
}

#[test]
fn fast_fail_secs_of_the_configuration_can_be_cancelled_live() {
    if let Err(skip) = tool("qemu-io") {
        return skip_test(
            "fast_fail_secs_of_the_configuration_can_be_cancelled_live",
            &skip,
        );
    }
    let h = hosts_with("nofastfail", 300, 1, "fast_fail_secs = 1\n");
    let p: PolicyResult = h.ok(Ctl::PolicyGet {
        name: "disk".into(),
    });
    assert_eq!(p.fast_fail_secs, Some(1));
    run_io(&h, &h.nbd, "disk", &["write -P 0x6e 0 64k"]);
    let p: PolicyResult = h.ok(Ctl::PolicySet {
        name: "disk".into(),
        give_up_secs: None,
        fast_fail_secs: Some(Limit::Off(Never::None)),
        mode: None,
    });
    assert_eq!(p.fast_fail_secs, None);
    h.reg_b.remove("soft0").expect("remove b/soft0");
    h.wait("the loss", || {
        h.conn("disk").is_some_and(|c| c.session.losses >= 1)
    });
    let mut read = qemu_io(&h.nbd, "disk", &["read -P 0x6e 0 64k"])
        .spawn()
        .unwrap();
    h.wait("the read in flight", || {
        h.conn("disk").is_some_and(|c| c.in_flight >= 1)
    });
    // Well past the configured second: the read waits for the session.
    thread::sleep(Duration::from_secs(3));
    assert!(
        read.try_wait().unwrap().is_none(),
        "the read ended in the outage\n{}",
        h.transcripts()
    );
    h.reg_b
        .add("soft0", vec!["127.0.0.2/8".parse().unwrap()], None, None)
        .expect("add b/soft0 again");
    let o = finish(read, &h);
    assert!(
        io_ok(&o),
        "the read after the recovery: {}\n{}",
        text(&o),
        h.transcripts()
    );
    assert_eq!(h.init.stderr_count("fast-failed"), 0, "{}", h.transcripts());
    h.stop();
}

#[test]
fn connect_at_runtime_serves_a_new_socket() {
    if let Err(skip) = tool("qemu-io") {
        return skip_test("connect_at_runtime_serves_a_new_socket", &skip);
    }
    let mut h = hosts("connect", 300, 1);
    let nbd2 = h.root.0.join("nbd2.sock");
    let _: AckResult = h.ok(Ctl::Connect {
        name: "disk2".into(),
        targets: vec![h.addr.parse().unwrap()],
        nbd_socket: nbd2.clone(),
        nbd_tcp: None,
        give_up_secs: Some(60),
        fast_fail_secs: None,
        queue_depth: Some(16),
        max_io: None,
    });
    let e = call(
        &h.ctl,
        Ctl::Connect {
            name: "disk2".into(),
            targets: vec![h.addr.parse().unwrap()],
            nbd_socket: h.root.0.join("nbd3.sock"),
            nbd_tcp: None,
            give_up_secs: None,
            fast_fail_secs: None,
            queue_depth: None,
            max_io: None,
        },
    )
    .into_result::<AckResult>()
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Exists);
    h.init.expect_line("connect disk2 serving nbd");
    run_io(&h, &nbd2, "disk2", &["write -P 0x42 0 128k"]);
    run_io(&h, &h.nbd, "disk", &["read -P 0x42 0 128k"]);
    let c = h.conn("disk2").unwrap();
    assert_eq!(c.state, "ready");
    assert!(c.bytes_written >= 128 << 10, "{c:?}");

    // `relink connect --wait`: exit 0 once it serves; a target port that
    // answers nothing: exit 1 at the timeout, with the state.
    match common::relink_bin() {
        Ok(relink) => {
            let connect = |name: &str, target: &str, timeout: &str| {
                Command::new(&relink)
                    .arg("--socket")
                    .arg(&h.ctl)
                    .args(["connect", name, "--target", target, "--nbd-socket"])
                    .arg(h.root.0.join(format!("{name}.sock")))
                    .args(["--wait", "--timeout", timeout])
                    .output()
                    .expect("run relink connect")
            };
            let o = connect("disk3", &h.addr, "60");
            assert!(o.status.success(), "{}", text(&o));
            assert!(text(&o).contains("connect disk3: ready"), "{}", text(&o));
            let nowhere = free_addr("127.0.0.2");
            let o = connect("disk4", &nowhere, "2");
            assert_eq!(o.status.code(), Some(1), "{}", text(&o));
            assert!(
                text(&o).contains("connect disk4: not ready after 2 s (state connecting"),
                "{}",
                text(&o)
            );
        }
        Err(skip) => skip_part(
            "connect_at_runtime_serves_a_new_socket: relink connect --wait",
            &skip,
        ),
    }
    h.stop();
}

#[test]
fn drain_moves_the_session_to_the_second_device_without_io_errors() {
    if let Err(skip) = tool("qemu-io") {
        return skip_test(
            "drain_moves_the_session_to_the_second_device_without_io_errors",
            &skip,
        );
    }
    let h = hosts("drain", 300, 2);
    let devices: protocol::DevicesResult = h.ok(Ctl::Devices {});
    assert_eq!(devices.devices.len(), 2, "{devices:?}");
    let first = h.conn("disk").unwrap().session.device.expect("a device");
    let draining = |h: &Hosts| -> Vec<bool> {
        let d: protocol::DevicesResult = h.ok(Ctl::Devices {});
        d.devices.iter().map(|d| d.draining).collect()
    };
    assert_eq!(draining(&h), [false, false]);
    let mut cmds = Vec::new();
    for i in 0..16 {
        cmds.push(format!("write -P {} 0 1M", 0x10 + i));
        cmds.push(format!("read -P {} 0 1M", 0x10 + i));
    }
    let cmds: Vec<&str> = cmds.iter().map(String::as_str).collect();
    let io = qemu_io(&h.nbd, "disk", &cmds).spawn().unwrap();
    h.wait("I/O under way", || {
        h.conn("disk").is_some_and(|c| c.bytes_written > 0)
    });
    let r: DrainResult = h.ok(Ctl::Drain {
        device: first.clone(),
    });
    assert_eq!(r.moving, vec!["disk".to_string()], "{r:?}");
    assert_eq!(draining(&h).iter().filter(|&&d| d).count(), 1);
    let o = finish(io, &h);
    assert!(
        io_ok(&o),
        "I/O across the drain: {}\n{}",
        text(&o),
        h.transcripts()
    );
    // The path names no local address: relink binds the attempt to the
    // device it chose, so the session settles on the other one.
    h.wait("the session on the other device", || {
        h.conn("disk").is_some_and(|c| {
            c.session.state == "Established" && c.session.device.as_ref() != Some(&first)
        })
    });
    run_io(&h, &h.nbd, "disk", &["read -P 0x1f 0 1M"]);
    let c = h.conn("disk").unwrap();
    assert_ne!(c.session.device.as_ref(), Some(&first), "{c:?}");
    assert_eq!(c.session.state, "Established", "{c:?}");
    assert!(
        c.session.planned == 1 && c.session.losses == 0 && c.session.failovers == 0,
        "the drain is one planned outage, no loss: {c:?}"
    );
    assert!(c.session.delivered >= 33, "a reply per command: {c:?}");
    let _: AckResult = h.ok(Ctl::Undrain {
        device: first.clone(),
    });
    assert_eq!(draining(&h), [false, false]);
    h.wait("the session established", || {
        h.conn("disk")
            .is_some_and(|c| c.session.state == "Established")
    });
    run_io(&h, &h.nbd, "disk", &["read -P 0x1f 0 1M"]);

    // `relink drain` of the device the session is on while the other is
    // drained: no other path, so the session stays, and the CLI says so
    // with exit 1 (maintenance must not start).
    match common::relink_bin() {
        Ok(relink) => {
            let now = h.conn("disk").unwrap().session.device.expect("a device");
            let _: DrainResult = h.ok(Ctl::Drain {
                device: first.clone(),
            });
            let o = Command::new(&relink)
                .arg("--socket")
                .arg(&h.ctl)
                .args(["drain", &now])
                .output()
                .expect("run relink drain");
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{}", text(&o));
            assert!(
                err.contains("have no other path and stay on it: disk"),
                "{err}"
            );
            for d in [first, now] {
                let _: AckResult = h.ok(Ctl::Undrain { device: d });
            }
        }
        Err(skip) => skip_part(
            "drain_moves_the_session_to_the_second_device_without_io_errors: relink drain with no other path",
            &skip,
        ),
    }
    h.stop();
}

#[test]
fn reload_and_sighup_apply_the_conf_dir() {
    if let Err(skip) = tool("qemu-io") {
        return skip_test("reload_and_sighup_apply_the_conf_dir", &skip);
    }
    let mut h = hosts("reload", 300, 1);
    let dir = h.root.0.join("conf.d");
    let nbd2 = h.root.0.join("nbd2.sock");
    std::fs::write(
        dir.join("10-disk2.toml"),
        format!(
            "[[connect]]\nname = \"disk2\"\ntargets = [\"{}\"]\nnbd_socket = {nbd2:?}\nqueue_depth = 8\n",
            h.addr
        ),
    )
    .unwrap();
    let r: ReloadResult = h.ok(Ctl::Reload {});
    assert_eq!(r.added, ["connect disk2"], "{r:?}");
    assert!(r.removed.is_empty() && r.failed.is_empty(), "{r:?}");
    h.init.expect_line("connect disk2 serving nbd");
    run_io(&h, &nbd2, "disk2", &["write -P 0x5a 0 64k", "flush"]);
    run_io(&h, &h.nbd, "disk", &["read -P 0x5a 0 64k"]);

    // A wrong file is refused with its name and key; nothing changes.
    std::fs::write(
        dir.join("20-bad.toml"),
        "[[connect]]\nname = \"bad\"\ntargets = [\"nowhere\"]\nnbd_socket = \"/x\"\n",
    )
    .unwrap();
    let e = call(&h.ctl, Ctl::Reload {})
        .into_result::<ReloadResult>()
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid);
    assert!(
        e.message.contains("20-bad.toml") && e.message.contains("connect[0].targets[0]"),
        "{}",
        e.message
    );
    assert!(h.conn("disk2").is_some());

    // Only disk2's policy changes: set on its live session, which stays
    // (not disconnected and connected anew).
    std::fs::remove_file(dir.join("20-bad.toml")).unwrap();
    std::fs::write(
        dir.join("10-disk2.toml"),
        format!(
            "[[connect]]\nname = \"disk2\"\ntargets = [\"{}\"]\nnbd_socket = {nbd2:?}\nqueue_depth = 8\ngive_up_secs = 120\nfast_fail_secs = 30\n",
            h.addr
        ),
    )
    .unwrap();
    let r: ReloadResult = h.ok(Ctl::Reload {});
    assert_eq!(r.changed, ["connect disk2"], "{r:?}");
    assert!(
        r.added.is_empty() && r.removed.is_empty() && r.failed.is_empty(),
        "{r:?}"
    );
    let p: PolicyResult = h.ok(Ctl::PolicyGet {
        name: "disk2".into(),
    });
    assert_eq!((p.give_up_secs, p.fast_fail_secs), (Some(120), Some(30)));
    assert_eq!(
        h.init.count("connect disk2 serving nbd"),
        1,
        "disk2 was connected anew\n{}",
        h.init.transcript()
    );
    run_io(&h, &nbd2, "disk2", &["read -P 0x5a 0 64k"]);

    // Both files gone, then SIGHUP: disk2 is disconnected and its socket
    // removed; disk keeps serving.
    std::fs::remove_file(dir.join("10-disk2.toml")).unwrap();
    let pid = h.init.pid().to_string();
    let s = std::process::Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap();
    assert!(s.success());
    h.wait("disk2 removed by SIGHUP", || {
        h.conn("disk2").is_none() && !nbd2.exists()
    });
    h.init.expect_line("reload: removed [connect disk2]");
    run_io(&h, &h.nbd, "disk", &["read -P 0x5a 0 64k"]);
    h.stop();
}

/// The NBD socket is the daemon's user's alone by default (mode 0600);
/// `nbd_socket_mode` and `nbd_socket_group` open it to a group, whose
/// members then connect and others still cannot.
#[test]
fn the_nbd_socket_has_the_mode_and_group_of_the_configuration() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let h = hosts("nbdmode", 300, 1);
    let m = std::fs::metadata(&h.nbd).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o600);
    h.stop();

    let h = hosts_with(
        "nbdgroup",
        300,
        1,
        "nbd_socket_mode = 0o660\nnbd_socket_group = \"65534\"\n",
    );
    let m = std::fs::metadata(&h.nbd).unwrap();
    assert_eq!(
        (m.permissions().mode() & 0o777, m.gid()),
        (0o660, 65534),
        "{m:?}"
    );
    // As a member of the group (and as a stranger), if this host can.
    match (tool("qemu-io"), other_user_client()) {
        (Ok(qemu_io_bin), Ok((_, setpriv))) => {
            std::fs::set_permissions(&h.root.0, std::fs::Permissions::from_mode(0o755)).unwrap();
            let as_user = |gid: &str| {
                Command::new(&setpriv)
                    .args(["--reuid", "65534", "--regid", gid, "--clear-groups"])
                    .arg(&qemu_io_bin)
                    .args(["-f", "raw", "-c", "read 0 4k"])
                    .arg(format!("nbd+unix:///disk?socket={}", h.nbd.display()))
                    .output()
                    .expect("run setpriv")
            };
            let o = as_user("65534");
            assert!(o.status.success(), "a member of the group: {}", text(&o));
            let o = as_user("65533");
            assert!(!o.status.success(), "outside the group: {}", text(&o));
        }
        (Err(skip), _) | (_, Err(skip)) => skip_part(
            "the_nbd_socket_has_the_mode_and_group_of_the_configuration: connecting as another user",
            &skip,
        ),
    }
    h.stop();
}

/// `events --follow` streams each event as a record a program can use:
/// wall-clock time (RFC 3339), the source, the session, a stable name and
/// plain words, never Rust's debug text.
#[test]
fn events_follow_gives_timed_named_events_in_words() {
    let h = hosts("events", 300, 1);
    let (tx, rx) = std::sync::mpsc::channel();
    let ctl = h.ctl.clone();
    thread::spawn(move || {
        let mut c = relinkd_control::Client::connect(&ctl).expect("connect");
        let _: AckResult = c.call(Ctl::Events { follow: true }).expect("events");
        while let Ok(Some(r)) = c.next_response() {
            let ev: protocol::EventRecord = r.into_result().expect("a record");
            if tx.send(ev).is_err() {
                return;
            }
        }
    });
    // Subscribed before the fault (the ack came), then a reset of the
    // target's device: the initiator's session is lost and resumes.
    thread::sleep(Duration::from_millis(200));
    let before = std::time::SystemTime::now();
    h.reg_b.reset("soft0").expect("reset b/soft0");
    let mut got = Vec::new();
    let deadline = Instant::now() + STEP;
    while !got
        .iter()
        .any(|e: &protocol::EventRecord| e.name == "resumed" && e.source == "connect disk")
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(ev) => got.push(ev),
            Err(_) => panic!("no resumed event: {got:?}\n{}", h.transcripts()),
        }
    }
    let lost = got
        .iter()
        .find(|e| e.name == "device_lost" && e.source == "connect disk")
        .unwrap_or_else(|| panic!("no device_lost: {got:?}"));
    assert!(lost.session.is_some() && lost.kind == "session", "{lost:?}");
    assert!(lost.event.starts_with("transport lost: "), "{lost:?}");
    for e in &got {
        let at = humantime::parse_rfc3339(&e.at).unwrap_or_else(|err| panic!("{e:?}: {err}"));
        assert!(
            at + Duration::from_secs(1) >= before,
            "{e:?}: not the wall clock"
        );
        assert!(
            !e.event.contains(" { ") && !e.event.contains("Timestamp("),
            "debug text: {e:?}"
        );
        assert!(!e.name.is_empty(), "{e:?}");
    }
    h.stop();
}
