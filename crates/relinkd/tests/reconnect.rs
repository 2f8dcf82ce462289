//! The initiator's reconnections when a target answers every new
//! session badly: relinkd processes on the soft TCP fabric, a target on
//! soft host `b` (127.0.0.2) and the initiator under test on soft host
//! `a` (127.0.0.1).
//!
//! - An export whose allow list is reloaded to leave the initiator out
//!   closes every new session at once: the initiator makes a few sessions
//!   in 2 s, not one per millisecond, says once (at WARN) that the target
//!   closes them, and serves again once the allow list names it.
//! - A target that shuts down while another initiator's session is still
//!   open (a relinkd on soft host `c`, 127.0.0.3, stopped with SIGSTOP,
//!   which draws the shutdown out) refuses every new session
//!   (`ShuttingDown`): a few sessions meanwhile, the refusal said once at
//!   WARN with its reason, no ERROR.
//! - A target restarted with another volume (another size) is named once
//!   at ERROR with both sizes, retried a few times a second at most, and
//!   served again once the right volume is back.
//!
//! The shutdown test needs `qemu-io` (qemu-utils) for the other
//! initiator's writes; without it that test reports the skip through
//! relink-skip and returns. If the target's shutdown did not last (the
//! stopped initiator held nothing at the target), its refusal checks are
//! skipped, as a part.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::config::ConfigFile;
use common::images::empty_volume;
use common::{free_addr, qemu_io, soft_host, tool, wait_for, Daemon, Root, SoftHosts};
use relink_skip::{skip_part, skip_test, Skip};
use relink_soft::Registry;

const SIZE: u64 = 8 << 20;

/// What the initiator says of a target serving 4 MiB in place of 8.
const OTHER: &str =
    "the target serves another volume: 4194304 bytes where 8388608 bytes were served";

/// Soft hosts `a`, `b` and `c`, an 8 MiB volume, and the configuration
/// files of the target (`b`), the initiator under test (`a`) and the
/// other initiator (`c`).
struct Rig {
    root: Root,
    soft: SoftHosts,
    _c: Registry,
    addr: String,
    volume: PathBuf,
    target_conf: PathBuf,
    init_conf: PathBuf,
    holder_conf: PathBuf,
}

fn rig(name: &str) -> Rig {
    let root = Root::new(&format!("reconnect-{name}"));
    let soft = SoftHosts::create(&root.0);
    let c = soft_host(&root.0.join("c"), "127.0.0.3");
    let volume = root.0.join("volume.img");
    empty_volume(&volume, SIZE);
    let addr = free_addr("127.0.0.2");
    let target_conf = root.0.join("target.toml");
    write_target(&target_conf, &soft.dir_b, &addr, &volume);
    let initiator = |host: &str| {
        let conf = root.0.join(format!("{host}.toml"));
        ConfigFile::new()
            .backend(&root.0.join(host))
            .control(&root.0.join(format!("{host}.ctl")))
            .connect("disk", &addr, &root.0.join(format!("{host}.sock")))
            .set("give_up_secs", 300)
            .write(&conf);
        conf
    };
    Rig {
        init_conf: initiator("a"),
        holder_conf: initiator("c"),
        soft,
        _c: c,
        addr,
        volume,
        target_conf,
        root,
    }
}

fn write_target(conf: &Path, dir_b: &Path, addr: &str, volume: &Path) {
    write_target_allowing(conf, dir_b, addr, volume, "127.0.0.0/8");
}

/// The target's configuration, its export allowing `allow`.
fn write_target_allowing(conf: &Path, dir_b: &Path, addr: &str, volume: &Path, allow: &str) {
    ConfigFile::new()
        .backend(dir_b)
        .control(&dir_b.with_extension("ctl"))
        .export("disk", addr, volume)
        .set("allow", format!("[\"{allow}\"]"))
        .write(conf);
}

/// The initiator under test, its own debug lines logged: each session's
/// events (those of new sessions that do not serve are at debug); once
/// its connection `disk` serves NBD.
fn initiator(conf: &Path) -> Daemon {
    let mut init = Daemon::spawn(
        "initiator",
        Command::new(env!("CARGO_BIN_EXE_relinkd"))
            .arg(conf)
            .env("RELINKD_LOG", "info,relinkd=debug"),
    );
    init.expect_line("connect disk serving nbd");
    init
}

/// How many of `lines` are logged at relinkd's default level (info).
fn logged(lines: &[String]) -> usize {
    lines.iter().filter(|l| !l.contains("DEBUG")).count()
}

/// The sessions whose events `lines` log (`session event session=N`).
fn sessions(lines: &[String]) -> BTreeSet<u64> {
    lines
        .iter()
        .filter(|l| l.contains("session event"))
        .filter_map(|l| {
            let rest = &l[l.find("session=")? + "session=".len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

#[test]
fn a_target_that_closes_every_new_session_gets_a_few_attempts_a_second() {
    let r = rig("closed");
    let mut target = Daemon::start_target(&r.target_conf, "disk");
    let mut init = initiator(&r.init_conf);

    // The export is reloaded with an allow list that leaves the initiator
    // out: its session is closed, and every new one at once.
    let first = sessions(&init.stderr_lines());
    write_target_allowing(
        &r.target_conf,
        &r.soft.dir_b,
        &r.addr,
        &r.volume,
        "127.0.0.5/32",
    );
    target.send("HUP");
    target.expect_line("reload: removed [export disk], added [export disk]");
    wait_for(
        "a new session closed by the allow list",
        &[&target, &init],
        || target.stderr_count("allow list leaves out") >= 1,
    );
    let from = init.stderr_lines().len();
    let start = Instant::now();
    thread::sleep(Duration::from_secs(2));
    let window: Vec<String> = init.stderr_lines()[from..].to_vec();
    let took = start.elapsed();
    let made = sessions(&window).difference(&first).count();
    let shown = || format!("{}\n{}", window.join("\n"), target.transcript());
    assert!(
        made <= 6,
        "{made} sessions in {took:?} while the target closes them\n{}",
        shown()
    );
    assert!(
        window.len() <= 150,
        "{} log lines in {took:?} while the target closes the sessions\n{}",
        window.len(),
        shown()
    );
    let said = init
        .stderr_lines()
        .iter()
        .filter(|l| l.contains("closes new sessions") && !l.contains("DEBUG"))
        .count();
    assert_eq!(said, 1, "said once (debug aside)\n{}", init.transcript());
    let line = init
        .stderr_lines()
        .into_iter()
        .find(|l| l.contains("closes new sessions") && !l.contains("DEBUG"))
        .unwrap();
    assert!(line.contains("WARN"), "{line}");
    assert!(
        !init.stderr_lines().iter().any(|l| l.contains("ERROR")),
        "no error: the volume was never in question\n{}",
        init.transcript()
    );

    // The allow list names the initiator again: served again.
    write_target(&r.target_conf, &r.soft.dir_b, &r.addr, &r.volume);
    target.send("HUP");
    init.expect_line("connect disk reconnected");
    init.terminate_ok();
    target.terminate_ok();
}

#[test]
fn a_target_shutting_down_refuses_new_sessions_and_gets_a_few_attempts_a_second() {
    let test = "a_target_shutting_down_refuses_new_sessions_and_gets_a_few_attempts_a_second";
    if let Err(skip) = tool("qemu-io") {
        return skip_test(test, &skip);
    }
    let r = rig("refused");
    let mut target = Daemon::start_target(&r.target_conf, "disk");
    let mut init = initiator(&r.init_conf);
    let mut holder = Daemon::start("holder", &r.holder_conf);
    holder.expect_line("connect disk serving nbd");

    // The other initiator writes, and stops (SIGSTOP) with commands at
    // the target: their transfers cannot finish, so the goodbye queued
    // behind them cannot leave and the target's shutdown lasts the goodbye
    // bound (1 s), refusing new sessions meanwhile.
    let writes = vec!["write -P 0x5a 0 4M"; 400];
    let mut writer = qemu_io(&r.root.0.join("c.sock"), "disk", &writes)
        .spawn()
        .expect("spawn qemu-io");
    wait_for(
        "the first writes on the volume",
        &[&target, &holder],
        || std::fs::read(&r.volume).is_ok_and(|v| v[..4096].iter().all(|&b| b == 0x5a)),
    );
    // Well into the writes: commands are at the target all the time.
    thread::sleep(Duration::from_millis(300));
    holder.send("STOP");
    let first = sessions(&init.stderr_lines());
    target.send("TERM");
    wait_for(
        "the initiator's session closed by the target's goodbye",
        &[&target, &init],
        || init.stderr_has("event_type=\"disconnected\""),
    );
    let from = init.stderr_lines().len();
    let start = Instant::now();
    let s = target.wait_exit(&[&init]);
    let took = start.elapsed();
    assert!(s.success(), "target exit: {s}\n{}", target.transcript());
    holder.send("CONT");
    let _ = writer.kill();
    let _ = writer.wait();
    thread::sleep(Duration::from_millis(200));
    let window: Vec<String> = init.stderr_lines()[from..].to_vec();
    let made = sessions(&window).difference(&first).count();
    let shown = || format!("{}\n{}", window.join("\n"), target.transcript());
    if took < Duration::from_millis(500) {
        // The target had nothing left to wait for: no time to refuse.
        skip_part(
            &format!("{test}: the refusals"),
            &Skip::new(format!(
                "the target's shutdown took {took:?}: the stopped initiator held nothing"
            )),
        );
    } else {
        // 100 ms, then doubling: at most 3 a second, whatever the target
        // answers.
        let most = 3 + 3 * took.as_secs() as usize;
        assert!(
            (1..=most).contains(&made),
            "{made} sessions in {took:?} while the target refuses them\n{}",
            shown()
        );
        let (all, shown_lines) = (window.len(), logged(&window));
        assert!(
            shown_lines <= 8 * most && all <= 30 * most,
            "{shown_lines} log lines at info and above ({all} with debug) in {took:?} while \
             the target refuses the sessions\n{}",
            shown()
        );
        let said: Vec<&String> = window
            .iter()
            .filter(|l| l.contains("refuses new sessions: shutting down") && !l.contains("DEBUG"))
            .collect();
        assert_eq!(said.len(), 1, "the refusal is said once\n{}", shown());
        assert!(said[0].contains("WARN"), "{}", said[0]);
    }
    assert!(
        !window.iter().any(|l| l.contains("ERROR")),
        "no error: the volume was never in question\n{}",
        shown()
    );

    // Once the target is back, the initiator serves again.
    let mut target = Daemon::start_target(&r.target_conf, "disk");
    init.expect_line("connect disk reconnected");
    init.terminate_ok();
    let _ = holder.terminate();
    target.terminate_ok();
}

#[test]
fn a_target_serving_another_volume_is_named_once_and_retried_slowly() {
    let r = rig("volume");
    let mut target = Daemon::start_target(&r.target_conf, "disk");
    let mut init = initiator(&r.init_conf);

    // The target comes back with a 4 MiB volume in place of 8 MiB.
    target.terminate_ok();
    let other = r.root.0.join("other.img");
    empty_volume(&other, SIZE / 2);
    let other_conf = r.root.0.join("other.toml");
    write_target(&other_conf, &r.soft.dir_b, &r.addr, &other);
    let mut wrong = Daemon::start("target with another volume", &other_conf);
    wrong.expect_line("export disk listening");
    let named = |d: &Daemon| {
        d.stderr_lines()
            .iter()
            .filter(|l| l.contains(OTHER) && !l.contains("DEBUG"))
            .count()
    };
    wait_for("the other volume named", &[&wrong, &init], || {
        named(&init) > 0
    });
    let from = init.stderr_lines().len();
    let start = Instant::now();
    thread::sleep(Duration::from_secs(3));
    let window: Vec<String> = init.stderr_lines()[from..].to_vec();
    let made = sessions(&window).len();
    let shown = || window.join("\n");
    assert!(
        made <= 6,
        "{made} sessions in {:?} to a target serving another volume\n{}",
        start.elapsed(),
        shown()
    );
    assert_eq!(
        named(&init),
        1,
        "the other volume is named once\n{}",
        init.transcript()
    );
    let line = init
        .stderr_lines()
        .into_iter()
        .find(|l| l.contains(OTHER) && !l.contains("DEBUG"))
        .unwrap();
    assert!(line.contains("ERROR"), "{line}");

    // The right volume is back: served again.
    let s = wrong.terminate();
    assert!(s.success(), "target exit: {s}\n{}", wrong.transcript());
    let mut target = Daemon::start_target(&r.target_conf, "disk");
    init.expect_line("connect disk reconnected");
    init.terminate_ok();
    target.terminate_ok();
}
