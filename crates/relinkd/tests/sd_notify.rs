//! The service manager's readiness protocol: a target relinkd and an
//! initiator relinkd, each started with `NOTIFY_SOCKET` naming a Unix
//! datagram socket the test holds. Each sends `READY=1` once it serves
//! (the target's export listens; the initiator's NBD socket exists by
//! then) and `STOPPING=1` on SIGTERM.

use std::net::TcpListener;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use relink_soft::Registry;

/// How long a datagram may take to come. Nothing here measures time:
/// this only keeps a hang from lasting forever on a slow machine.
const STEP: Duration = Duration::from_secs(120);

struct Root(PathBuf);

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

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
    let root = std::env::temp_dir().join(format!("relinkd-notify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let root = Root(root);
    let (dir_a, dir_b) = (root.0.join("a"), root.0.join("b"));
    Registry::open(&dir_a)
        .unwrap()
        .add("soft0", vec!["127.0.0.1/8".parse().unwrap()], None, None)
        .unwrap();
    Registry::open(&dir_b)
        .unwrap()
        .add("soft0", vec!["127.0.0.2/8".parse().unwrap()], None, None)
        .unwrap();
    let volume = root.0.join("volume.img");
    std::fs::File::create(&volume)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let port = TcpListener::bind("127.0.0.2:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let t_conf = root.0.join("target.toml");
    std::fs::write(
        &t_conf,
        format!(
            "[backend]\nsoft_dir = {dir_b:?}\n\n[[export]]\nname = \"disk\"\nlisten = \"127.0.0.2:{port}\"\nfile = {volume:?}\n"
        ),
    )
    .unwrap();
    let socket = root.0.join("nbd.sock");
    let i_conf = root.0.join("initiator.toml");
    std::fs::write(
        &i_conf,
        format!(
            "[backend]\nsoft_dir = {dir_a:?}\n\n[[connect]]\nname = \"disk\"\ntargets = [\"127.0.0.2:{port}\"]\nnbd_socket = {socket:?}\n"
        ),
    )
    .unwrap();
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
