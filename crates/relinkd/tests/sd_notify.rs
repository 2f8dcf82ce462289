//! The service manager's readiness protocol: a target relinkd and an
//! initiator relinkd, each started with `NOTIFY_SOCKET` naming a Unix
//! datagram socket the test holds. Each sends `READY=1` once it serves
//! (the target's export listens; the initiator's NBD socket exists by
//! then) and `STOPPING=1` on SIGTERM.

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::config::ConfigFile;
use common::images::empty_volume;
use common::{free_addr, Root, SoftHosts, STEP};

/// A relinkd, killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(config: &Path, notify: &Path) -> Killed {
    Killed(
        Command::new(env!("CARGO_BIN_EXE_relinkd"))
            .arg(config)
            .env("NOTIFY_SOCKET", notify)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn relinkd"),
    )
}

/// The next datagram on `sock`, as text.
#[track_caller]
fn next(sock: &UnixDatagram, what: &str) -> String {
    let mut buf = [0u8; 512];
    let n = sock
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no datagram from the {what}: {e}"));
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[track_caller]
fn terminate(d: &mut Killed) {
    let ok = Command::new("kill")
        .args(["-TERM", &d.0.id().to_string()])
        .status()
        .expect("run kill");
    assert!(ok.success());
}

#[test]
fn relinkd_tells_its_service_manager_ready_once_it_serves_and_stopping_on_sigterm() {
    let root = Root::new("notify");
    let soft = SoftHosts::create(&root.0);
    let volume = root.0.join("volume.img");
    empty_volume(&volume, 1 << 20);
    let addr = free_addr("127.0.0.2");
    let t_conf = root.0.join("target.toml");
    ConfigFile::new()
        .backend(&soft.dir_b)
        .export("disk", &addr, &volume)
        .write(&t_conf);
    let socket = root.0.join("nbd.sock");
    let i_conf = root.0.join("initiator.toml");
    ConfigFile::new()
        .backend(&soft.dir_a)
        .connect("disk", &addr, &socket)
        .write(&i_conf);
    let bind = |name: &str| {
        let path = root.0.join(name);
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(STEP)).unwrap();
        (path, sock)
    };
    let (t_path, t_sock) = bind("target.notify");
    let (i_path, i_sock) = bind("initiator.notify");

    let mut target = start(&t_conf, &t_path);
    assert_eq!(next(&t_sock, "target"), "READY=1");
    let mut init = start(&i_conf, &i_path);
    assert_eq!(next(&i_sock, "initiator"), "READY=1");
    assert!(
        socket.exists(),
        "READY=1 came before the NBD socket {} was bound",
        socket.display()
    );

    terminate(&mut init);
    assert_eq!(next(&i_sock, "initiator"), "STOPPING=1");
    assert!(init.0.wait().unwrap().success());
    terminate(&mut target);
    assert_eq!(next(&t_sock, "target"), "STOPPING=1");
    assert!(target.0.wait().unwrap().success());
}
