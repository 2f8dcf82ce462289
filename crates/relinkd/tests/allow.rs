//! An export's `allow` list: an initiator from an address it leaves out
//! is closed at once (the initiator daemon reports that its volume could
//! not be identified and exits with an error), while one it names is
//! served.

mod common;

use common::config::ConfigFile;
use common::images::empty_volume;
use common::{free_port, Daemon, Root, SoftHosts};

/// A target with exports `open` (allow 127.0.0.1/32) and `closed`
/// (allow 127.0.0.5 and 10.0.0.0/8), and an initiator at 127.0.0.1
/// connecting to `name`.
fn run(name: &str) -> (Daemon, Daemon, Root) {
    let root = Root::new(&format!("allow-{name}"));
    let soft = SoftHosts::create(&root.0);
    let volume = root.0.join("volume.img");
    empty_volume(&volume, 1 << 20);
    let (p_open, p_closed) = (free_port("127.0.0.2"), free_port("127.0.0.2"));
    let target_conf = root.0.join("target.toml");
    ConfigFile::new()
        .backend(&soft.dir_b)
        .control(&root.0.join("b.ctl"))
        .export("open", &format!("127.0.0.2:{p_open}"), &volume)
        .set("allow", r#"["127.0.0.1/32"]"#)
        .export("closed", &format!("127.0.0.2:{p_closed}"), &volume)
        .set("allow", r#"["127.0.0.5", "10.0.0.0/8"]"#)
        .write(&target_conf);
    let port = if name == "open" { p_open } else { p_closed };
    let init_conf = root.0.join("initiator.toml");
    ConfigFile::new()
        .backend(&soft.dir_a)
        .control(&root.0.join("a.ctl"))
        .connect(name, &format!("127.0.0.2:{port}"), &root.0.join("nbd.sock"))
        .write(&init_conf);
    let target = Daemon::start_target(&target_conf, "closed");
    let init = Daemon::start("initiator", &init_conf);
    (target, init, root)
}

#[test]
fn an_initiator_the_allow_list_names_is_served() {
    let (mut target, mut init, _root) = run("open");
    init.expect_line("connect open serving nbd");
    assert!(init.terminate().success(), "{}", init.transcript());
    assert!(target.terminate().success(), "{}", target.transcript());
}

#[test]
fn an_initiator_the_allow_list_leaves_out_is_closed() {
    let (mut target, mut init, _root) = run("closed");
    let status = init.wait_exit(&[&target]);
    assert!(!status.success(), "{}", init.transcript());
    let t = init.transcript();
    assert!(
        t.contains("connect closed") && t.contains("IDENTIFY"),
        "{t}"
    );
    assert!(
        target.stderr_has("allow list leaves out"),
        "{}",
        target.transcript()
    );
    assert!(target.terminate().success(), "{}", target.transcript());
}
