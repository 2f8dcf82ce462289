//! An export's `allow` list: an initiator from an address it leaves out
//! is closed at once (the initiator daemon reports that its volume could
//! not be identified and exits with an error), while one it names is
//! served.

mod common;

use common::{free_port, Daemon, Root};
use relink_soft::Registry;

/// A target with exports `open` (allow 127.0.0.1/32) and `closed`
/// (allow 127.0.0.5 and 10.0.0.0/8), and an initiator at 127.0.0.1
/// connecting to `name`.
fn run(name: &str) -> (Daemon, Daemon, Root) {
    let root = Root::new(&format!("allow-{name}"));
    let (dir_a, dir_b) = (root.0.join("a"), root.0.join("b"));
    let reg_a = Registry::open(&dir_a).unwrap();
    let reg_b = Registry::open(&dir_b).unwrap();
    reg_a
        .add("soft0", vec!["127.0.0.1/8".parse().unwrap()], None, None)
        .unwrap();
    reg_b
        .add("soft0", vec!["127.0.0.2/8".parse().unwrap()], None, None)
        .unwrap();
    let volume = root.0.join("volume.img");
    std::fs::File::create(&volume)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let (p_open, p_closed) = (free_port("127.0.0.2"), free_port("127.0.0.2"));
    let target_conf = root.0.join("target.toml");
    std::fs::write(
        &target_conf,
        format!(
            "[backend]\nsoft_dir = {dir_b:?}\n[control]\nsocket = {:?}\n\
             [[export]]\nname = \"open\"\nlisten = \"127.0.0.2:{p_open}\"\nfile = {volume:?}\nallow = [\"127.0.0.1/32\"]\n\
             [[export]]\nname = \"closed\"\nlisten = \"127.0.0.2:{p_closed}\"\nfile = {volume:?}\nallow = [\"127.0.0.5\", \"10.0.0.0/8\"]\n",
            root.0.join("b.ctl")
        ),
    )
    .unwrap();
    let port = if name == "open" { p_open } else { p_closed };
    let init_conf = root.0.join("initiator.toml");
    std::fs::write(
        &init_conf,
        format!(
            "[backend]\nsoft_dir = {dir_a:?}\n[control]\nsocket = {:?}\n[[connect]]\nname = \"{name}\"\ntargets = [\"127.0.0.2:{port}\"]\nnbd_socket = {:?}\n",
            root.0.join("a.ctl"),
            root.0.join("nbd.sock")
        ),
    )
    .unwrap();
    let mut target = Daemon::start("target", &target_conf);
    target.expect_line("export closed listening");
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
