//! Disk images for the NBD tests: random images, empty volumes, and
//! `qemu-img` runs checked with the daemons' transcripts on failure.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::thread;
use std::time::{Duration, Instant};

use rand::{RngCore, SeedableRng};

use super::{run_bounded, Daemon};

/// Writes `size` random bytes (from `seed`) to `path`.
pub fn random_image(path: &Path, size: u64, seed: u64) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut data = vec![0u8; size as usize];
    rng.fill_bytes(&mut data);
    std::fs::write(path, &data).unwrap();
}

/// Creates `path` as a file of `size` zero bytes.
pub fn empty_volume(path: &Path, size: u64) {
    std::fs::File::create(path).unwrap().set_len(size).unwrap();
}

/// In `dir`: `source.img`, `size` random bytes from `seed`, and
/// `volume.img`, `size` zero bytes (a target's volume to copy it into).
pub fn source_and_volume(dir: &Path, size: u64, seed: u64) -> (PathBuf, PathBuf) {
    let source = dir.join("source.img");
    random_image(&source, size, seed);
    let volume = dir.join("volume.img");
    empty_volume(&volume, size);
    (source, volume)
}

/// Whether the first `len` bytes of `a` and `b` are equal.
pub fn same_prefix(a: &Path, b: &Path, len: usize) -> bool {
    let read = |p: &Path| {
        let mut buf = vec![0; len];
        std::fs::File::open(p)
            .and_then(|mut f| f.read_exact(&mut buf))
            .map(|()| buf)
    };
    matches!((read(a), read(b)), (Ok(x), Ok(y)) if x == y)
}

/// The transcripts of `daemons`, one after the other.
pub fn transcripts(daemons: &[&Daemon]) -> String {
    daemons
        .iter()
        .map(|d| d.transcript())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `qemu-img compare` of the image with `other` (a file or an NBD URL);
/// panics with the daemons' transcripts if they differ or it hangs.
#[track_caller]
pub fn compare(image: &Path, other: &str, daemons: &[&Daemon]) {
    let out = run_bounded(
        Command::new("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(image)
            .arg(other),
    )
    .unwrap_or_else(|| panic!("qemu-img compare hung\n{}", transcripts(daemons)));
    assert!(
        out.status.success(),
        "{other} differs from the image: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        transcripts(daemons)
    );
}

/// `qemu-img convert` of `image` into the NBD export at `url`, run to its
/// end; panics with the daemons' transcripts if it fails or hangs.
#[track_caller]
pub fn convert(image: &Path, url: &str, daemons: &[&Daemon]) {
    let out = run_bounded(
        Command::new("qemu-img")
            .args(["convert", "-n", "-f", "raw", "-O", "raw"])
            .arg(image)
            .arg(url),
    )
    .unwrap_or_else(|| panic!("qemu-img convert hung\n{}", transcripts(daemons)));
    assert!(
        out.status.success(),
        "qemu-img convert failed: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        transcripts(daemons)
    );
}

/// Waits up to `bound` for `child` (a `qemu-img` started in the
/// background) to end and checks it succeeded; kills it and panics with
/// the daemons' transcripts otherwise.
#[track_caller]
pub fn finish(mut child: Child, what: &str, bound: Duration, daemons: &[&Daemon]) -> Output {
    let deadline = Instant::now() + bound;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("{what} did not finish\n{}", transcripts(daemons));
        }
        thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        transcripts(daemons)
    );
    out
}

/// Starts `qemu-img convert -n ARGS -f raw -O raw IMAGE URL` in the
/// background (`args`: `-r 6M` to make it last, say) and waits until the
/// first MiB of `volume` (the target's file) equals the image's: the copy
/// is under way. Panics with the daemons' transcripts if it never gets
/// there.
#[track_caller]
pub fn start_convert(
    image: &Path,
    url: &str,
    volume: &Path,
    args: &[&str],
    daemons: &[&Daemon],
) -> Child {
    let child = Command::new("qemu-img")
        .args(["convert", "-n"])
        .args(args)
        .args(["-f", "raw", "-O", "raw"])
        .arg(image)
        .arg(url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn qemu-img convert");
    let deadline = Instant::now() + super::STEP;
    while !same_prefix(image, volume, 1 << 20) {
        assert!(
            Instant::now() < deadline,
            "the first MiB never arrived\n{}",
            transcripts(daemons)
        );
        thread::sleep(Duration::from_millis(20));
    }
    child
}
