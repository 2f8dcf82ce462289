//! `nbdcopy` at its defaults (256 KiB requests, four connections, 64
//! requests in flight each) into and out of a relinkd export: two relinkd
//! processes on the soft TCP fabric, a target serving a 32 MiB file from
//! soft host `b` (127.0.0.2) and an initiator offering it on an NBD Unix
//! socket from soft host `a` (127.0.0.1). The bytes copied out are the
//! bytes copied in, and the target's file holds them.
//!
//! relinkd's engine moves at most `max_io` (128 KiB by default) per
//! command; the NBD side takes requests up to 32 MiB (nbdkit's default
//! maximum, the NBD protocol's "not a denial of service" bound) and splits
//! them. `nbdinfo` shows that maximum.
//!
//! Needs `nbdcopy` and `nbdinfo` (libnbd-bin); without them the test
//! reports the skip through relink-skip and returns (a failure under
//! `CI=true`, whose install step provides them).

mod common;

use std::path::Path;
use std::process::Command;

use common::images::{empty_volume, random_image, transcripts};
use common::{free_port, run_bounded, tool, Daemon, Root};
use relink_skip::skip_test;
use relink_soft::Registry;

const SIZE: u64 = 32 << 20;

#[track_caller]
fn run_ok(program: &Path, args: &[&str], daemons: &[&Daemon]) -> String {
    let out = run_bounded(Command::new(program).args(args)).unwrap_or_else(|| {
        panic!(
            "{} {args:?} hung\n{}",
            program.display(),
            transcripts(daemons)
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
        transcripts(daemons)
    );
    text
}

#[test]
fn nbdcopy_at_its_defaults_copies_in_and_out() {
    let test = "nbdcopy_at_its_defaults_copies_in_and_out";
    let (nbdcopy, nbdinfo) = match tool("nbdcopy").and_then(|c| tool("nbdinfo").map(|i| (c, i))) {
        Ok(t) => t,
        Err(skip) => return skip_test(test, &skip),
    };
    let root = Root::new("nbdcopy");
    let (dir_a, dir_b) = (root.0.join("a"), root.0.join("b"));
    let reg_a = Registry::open(&dir_a).unwrap();
    let reg_b = Registry::open(&dir_b).unwrap();
    reg_a
        .add("soft0", vec!["127.0.0.1/8".parse().unwrap()], None, None)
        .unwrap();
    reg_b
        .add("soft0", vec!["127.0.0.2/8".parse().unwrap()], None, None)
        .unwrap();
    let source = root.0.join("source.img");
    random_image(&source, SIZE, 26);
    let volume = root.0.join("volume.img");
    empty_volume(&volume, SIZE);
    let addr = format!("127.0.0.2:{}", free_port("127.0.0.2"));
    let target_conf = root.0.join("target.toml");
    std::fs::write(
        &target_conf,
        format!(
            "[backend]\nsoft_dir = {dir_b:?}\n[control]\nsocket = {:?}\n[[export]]\nname = \"disk\"\nlisten = \"{addr}\"\nfile = {volume:?}\n",
            root.0.join("b.ctl")
        ),
    )
    .unwrap();
    let socket = root.0.join("nbd.sock");
    let init_conf = root.0.join("initiator.toml");
    std::fs::write(
        &init_conf,
        format!(
            "[backend]\nsoft_dir = {dir_a:?}\n[control]\nsocket = {:?}\n[[connect]]\nname = \"disk\"\ntargets = [\"{addr}\"]\nnbd_socket = {socket:?}\n",
            root.0.join("a.ctl")
        ),
    )
    .unwrap();
    let mut target = Daemon::start("target", &target_conf);
    target.expect_line("export disk listening");
    let mut init = Daemon::start("initiator", &init_conf);
    init.expect_line("connect disk serving nbd");
    let url = format!("nbd+unix:///disk?socket={}", socket.display());

    // In, at nbdcopy's defaults.
    let src = source.to_str().unwrap();
    run_ok(&nbdcopy, &[src, &url], &[&target, &init]);
    // And out again.
    let back = root.0.join("back.img");
    empty_volume(&back, SIZE);
    run_ok(&nbdcopy, &[&url, back.to_str().unwrap()], &[&target, &init]);
    let a = std::fs::read(&source).unwrap();
    assert!(
        a == std::fs::read(&back).unwrap(),
        "the bytes copied out differ from those copied in\n{}",
        transcripts(&[&target, &init])
    );

    let info = run_ok(&nbdinfo, &["--json", &url], &[&target, &init]);
    assert!(
        info.contains("\"block_size_maximum\": 33554432"),
        "the NBD maximum is 32 MiB: {info}"
    );

    let s = init.terminate();
    assert!(s.success(), "initiator exit: {s}\n{}", init.transcript());
    let s = target.terminate();
    assert!(s.success(), "target exit: {s}\n{}", target.transcript());
    assert!(
        a == std::fs::read(&volume).unwrap(),
        "the target's file differs from the bytes copied in"
    );
}
