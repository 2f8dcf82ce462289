//! An export whose listen address no device owns yet: relinkd says it
//! waits for a device (not "listening"), `status` shows it not listening,
//! and once a soft device with the address is added the export listens
//! and says so.

mod common;

use common::config::ConfigFile;
use common::images::empty_volume;
use common::{call, free_port, Daemon, Root, SoftHosts};
use relinkd::control::protocol::{Command as Ctl, StatusResult};

#[test]
fn an_export_waits_for_a_device_that_owns_its_address_and_then_listens() {
    let root = Root::new("listen");
    let soft = SoftHosts::create(&root.0);
    let volume = root.0.join("volume.img");
    empty_volume(&volume, 1 << 20);
    let addr = format!("127.0.0.9:{}", free_port("127.0.0.1"));
    let conf = root.0.join("target.toml");
    let ctl = root.0.join("target.ctl");
    ConfigFile::new()
        .backend(&soft.dir_b)
        .control(&ctl)
        .export("disk", &addr, &volume)
        .write(&conf);
    let mut target = Daemon::start("target", &conf);
    target.expect_line("export disk waiting for a device that owns 127.0.0.9");
    target.expect_line("control socket");
    let st: StatusResult = call(&ctl, Ctl::Status {}).into_result().unwrap();
    assert!(!st.exports[0].listening, "{st:?}");
    assert_eq!(target.count("export disk listening"), 0);

    soft.reg_b
        .add("soft1", vec!["127.0.0.9/8".parse().unwrap()], None, None)
        .unwrap();
    target.expect_line("export disk listening on");
    let st: StatusResult = call(&ctl, Ctl::Status {}).into_result().unwrap();
    assert!(st.exports[0].listening, "{st:?}");
    target.terminate_ok();
}
