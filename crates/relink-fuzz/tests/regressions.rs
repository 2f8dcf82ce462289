//! Replays, on stable, every input the project keeps for each fuzz target
//! through the target's body: the crash inputs of
//! `fuzz/regressions/<target>/` (kept by hand: see its README) and the
//! kept corpus `fuzz/corpus/<target>/`. A failure names the target and
//! the file; each target prints how many inputs it replayed.

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Instant;

use relink_fuzz::{Body, TARGETS};

/// `fuzz/` of the repository.
fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz")
        .canonicalize()
        .expect("the repository's fuzz/")
}

/// The files of `dir` (none if it does not exist), in name order,
/// without the README of `fuzz/regressions/<target>/` if one is there.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != "README.md"))
        .collect();
    files.sort();
    files
}

/// Replays the kept inputs of `target` through `body`; panics naming
/// every file whose replay panicked.
fn replay(target: &str, body: Body) {
    let fuzz = fuzz_dir();
    let regressions = inputs(&fuzz.join("regressions").join(target));
    let corpus = inputs(&fuzz.join("corpus").join(target));
    let start = Instant::now();
    let mut failed = Vec::new();
    for file in regressions.iter().chain(&corpus) {
        let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        if catch_unwind(AssertUnwindSafe(|| body(&data))).is_err() {
            failed.push(file.display().to_string());
        }
    }
    // Straight to stderr: shown by a plain `cargo test`, not captured.
    let _ = writeln!(
        std::io::stderr(),
        "{target}: replayed {} inputs ({} regressions, {} corpus) in {:.2} s",
        regressions.len() + corpus.len(),
        regressions.len(),
        corpus.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(
        failed.is_empty(),
        "{target}: {} inputs fail (the panic of each is above):\n  {}",
        failed.len(),
        failed.join("\n  ")
    );
}

macro_rules! replays {
    ($($target:ident),* $(,)?) => {
        $(
            #[test]
            fn $target() {
                replay(stringify!($target), relink_fuzz::$target::run);
            }
        )*

        /// Every target of `TARGETS` has its test above.
        #[test]
        fn every_target_is_replayed() {
            let tested = [$(stringify!($target)),*];
            for (name, _) in TARGETS {
                assert!(tested.contains(name), "{name} has no replay test");
            }
            assert_eq!(tested.len(), TARGETS.len());
        }
    };
}

replays!(
    wire_decode,
    core_handshake,
    core_message,
    registry_parse,
    netlink_parse,
    uevent_parse,
    nbd_handshake,
    nbd_request,
    nbd_structured,
    block_command,
    control_request,
    relinkd_config,
    relinkd_conf_dir,
);
