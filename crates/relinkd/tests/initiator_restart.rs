//! An initiator relinkd killed and started again: the target closes the
//! old initiator's session (recovering, it could only wait for its
//! give-up deadline) as soon as the new one connects from the same
//! address, and serves the new one. relinkd processes on the soft TCP
//! fabric: the target on soft host `b` (127.0.0.2), the initiator on `a`.

mod common;

use common::config::ConfigFile;
use common::images::empty_volume;
use common::{free_addr, status, wait_for, Daemon, Root, SoftHosts};

#[test]
fn the_target_closes_a_restarted_initiators_old_session() {
    let root = Root::new("init-restart");
    let soft = SoftHosts::create(&root.0);
    let volume = root.0.join("volume.img");
    empty_volume(&volume, 8 << 20);
    let addr = free_addr("127.0.0.2");
    let (t_conf, i_conf) = (root.0.join("target.toml"), root.0.join("init.toml"));
    let t_ctl = root.0.join("target.ctl");
    ConfigFile::new()
        .backend(&soft.dir_b)
        .control(&t_ctl)
        .export("disk", &addr, &volume)
        .write(&t_conf);
    ConfigFile::new()
        .backend(&soft.dir_a)
        .connect("disk", &addr, &root.0.join("nbd.sock"))
        .set("give_up_secs", 300)
        .write(&i_conf);
    let mut target = Daemon::start_target(&t_conf, "disk");
    let mut init = Daemon::start_initiator(&i_conf, "disk");
    let first = status(&t_ctl).exports[0].sessions.clone();
    assert_eq!(first.len(), 1, "{first:?}");

    let s = init.kill9();
    assert!(!s.success(), "SIGKILL: {s}");
    // The target notices the loss (its session recovers, and would wait
    // out its give-up deadline of 600 s).
    wait_for("the target's session to recover", &[&target], || {
        status(&t_ctl).exports[0]
            .sessions
            .iter()
            .any(|s| s.state != "Established")
    });
    let init = Daemon::start_initiator(&i_conf, "disk");
    target.expect_count("the initiator restarted", 1, &[&init]);
    wait_for(
        "one established session at the target",
        &[&target, &init],
        || {
            let s = status(&t_ctl).exports[0].sessions.clone();
            s.len() == 1 && s[0].state == "Established"
        },
    );
    drop(init);
}
