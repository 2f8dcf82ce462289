//! What the provider's end-to-end tests share: the provider directory
//! libfabric loads `librelink-fi.so` from, two soft hosts, libfabric's
//! programs.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use relink_skip::Skip;
use relink_soft::Registry;

/// A temporary directory, removed on drop.
pub struct Root(pub PathBuf);

impl Root {
    /// `relink-ofi-NAME-PID` in the temporary directory, created empty.
    pub fn new(name: &str) -> Root {
        let root = std::env::temp_dir().join(format!("relink-ofi-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        Root(root)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The provider this test build made (`librelink_fi.so` next to the test
/// binary, in `target/<profile>/deps`: `cargo test` builds it there with
/// the crate's tests), linked as `DIR/librelink-fi.so`: the directory to
/// give libfabric as `FI_PROVIDER_PATH`.
pub fn provider_dir(root: &Path) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().join("librelink_fi.so");
    assert!(
        lib.exists(),
        "the provider was not built at {}",
        lib.display()
    );
    let dir = root.join("prov");
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("librelink-fi.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&lib, &link).unwrap();
    dir
}

/// Soft hosts `a` (device `soft0` at 127.0.0.1/8) and `b` (`soft0` at
/// 127.0.0.2/8): their registry directories.
pub struct Hosts {
    pub a: PathBuf,
    pub b: PathBuf,
}

impl Hosts {
    pub fn create(root: &Path) -> Hosts {
        let (a, b) = (root.join("a"), root.join("b"));
        for (dir, ip) in [(&a, "127.0.0.1"), (&b, "127.0.0.2")] {
            Registry::open(dir)
                .unwrap()
                .add(
                    "soft0",
                    vec![format!("{ip}/8").parse().unwrap()],
                    None,
                    None,
                )
                .unwrap();
        }
        Hosts { a, b }
    }

    /// Reset `soft0` of the host at `dir` (as `relink soft-device reset`).
    pub fn reset(dir: &Path) {
        Registry::open(dir).unwrap().reset("soft0").unwrap();
    }
}

/// The path of libfabric's program `name` (libfabric-bin), or the skip.
pub fn fabric_tool(name: &str) -> Result<PathBuf, Skip> {
    relink_skip::find_program(name, "libfabric-bin")
}

/// `program` with libfabric pointed at the provider and at the soft host
/// `host`, and nothing else of the caller's libfabric settings.
pub fn command(program: &Path, prov: &Path, host: &Path) -> Command {
    let mut c = Command::new(program);
    for (k, _) in std::env::vars() {
        if k.starts_with("FI_") {
            c.env_remove(k);
        }
    }
    c.env("FI_PROVIDER_PATH", prov)
        .env("FI_RELINK_SOFT_DIR", host)
        .env("FI_RELINK_LOG", "relink_core::session::recovery=info");
    c
}

/// A TCP port free now on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
