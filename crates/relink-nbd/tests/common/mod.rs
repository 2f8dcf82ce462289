//! A running server with file exports, for the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use relink_nbd::{spawn_file_export, FileStore, Server, ServerConfig};
use relink_skip::Skip;
use tempfile::TempDir;
use tokio::runtime::Runtime;

/// One export to create: name, size, read-only.
pub struct Spec {
    pub name: &'static str,
    pub size: u64,
    pub read_only: bool,
    /// Advertise a writable export over a read-only store, so writes reach
    /// the backend and fail there (`EPERM` from the backend).
    pub backend_refuses: bool,
    /// Block sizes to advertise (minimum, preferred, maximum).
    pub block_sizes: Option<(u32, u32, u32)>,
}

impl Spec {
    pub fn rw(name: &'static str, size: u64) -> Spec {
        Spec {
            name,
            size,
            read_only: false,
            backend_refuses: false,
            block_sizes: None,
        }
    }
    /// A writable export of 512-byte sectors: 512 / 4096 / 64 KiB.
    pub fn sectors(name: &'static str, size: u64) -> Spec {
        Spec {
            block_sizes: Some((512, 4096, 64 * 1024)),
            ..Spec::rw(name, size)
        }
    }
    pub fn ro(name: &'static str, size: u64) -> Spec {
        Spec {
            name,
            size,
            read_only: true,
            backend_refuses: false,
            block_sizes: None,
        }
    }
    pub fn refusing(name: &'static str, size: u64) -> Spec {
        Spec {
            name,
            size,
            read_only: true,
            backend_refuses: true,
            block_sizes: None,
        }
    }
}

pub struct Fixture {
    pub rt: Runtime,
    pub dir: TempDir,
    pub socket: PathBuf,
    pub tcp_port: u16,
}

impl Fixture {
    /// Creates a zero-filled file per export and serves them on a Unix
    /// socket and a TCP port.
    pub fn start(specs: &[Spec], config: ServerConfig) -> Fixture {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("nbd.sock");
        let tcp_port = rt.block_on(async {
            let mut exports = Vec::new();
            for s in specs {
                let path = dir.path().join(format!("{}.img", s.name));
                let f = std::fs::File::create(&path).expect("create image");
                f.set_len(s.size).expect("size image");
                drop(f);
                let store = FileStore::open(&path, s.read_only).expect("open image");
                let mut export = spawn_file_export(s.name, store).expect("export");
                if s.backend_refuses {
                    export.info.flags = relink_nbd::ExportFlags::read_write();
                }
                if let Some((min, pref, max)) = s.block_sizes {
                    export = export.with_block_sizes(relink_nbd::BlockSizes::new(min, pref, max));
                }
                exports.push(export);
            }
            let server = Server::new(exports, config).expect("server");
            let unix = tokio::net::UnixListener::bind(&socket).expect("bind unix");
            let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind tcp");
            let port = tcp.local_addr().expect("addr").port();
            let s2 = server.clone();
            tokio::spawn(async move { s2.serve_unix(unix).await });
            tokio::spawn(async move { server.serve_tcp(tcp).await });
            port
        });
        Fixture {
            rt,
            dir,
            socket,
            tcp_port,
        }
    }

    /// The backing file of export `name`.
    pub fn image(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.img"))
    }

    /// `nbd+unix:///name?socket=...`
    pub fn unix_uri(&self, name: &str) -> String {
        format!("nbd+unix:///{name}?socket={}", self.socket.display())
    }

    /// `nbd://127.0.0.1:port/name`
    pub fn tcp_uri(&self, name: &str) -> String {
        format!("nbd://127.0.0.1:{}/{name}", self.tcp_port)
    }
}

/// The path of client `program` on `PATH`, or the [`Skip`] that names it
/// and the package the install step gets it from.
pub fn tool(program: &str) -> Result<PathBuf, Skip> {
    let package = match program {
        "qemu-img" | "qemu-io" => "qemu-utils",
        "nbdinfo" | "nbdcopy" => "libnbd-bin",
        other => panic!("no package known for the client `{other}`"),
    };
    relink_skip::find_program(program, package)
}

/// Runs a command, returning its output (never panics on a non-zero exit).
pub fn run(program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()))
}

/// Runs a command and asserts it succeeded; returns stdout.
pub fn run_ok(program: &Path, args: &[&str]) -> String {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{} {:?} failed: {}\nstdout: {}\nstderr: {}",
        program.display(),
        args,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A file of `len` random bytes in `dir`.
pub fn random_file(dir: &Path, name: &str, len: usize, seed: u64) -> PathBuf {
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut data = vec![0u8; len];
    rng.fill_bytes(&mut data);
    let path = dir.join(name);
    std::fs::write(&path, &data).expect("write source");
    path
}
