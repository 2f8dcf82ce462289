//! The inputs the project keeps for a fuzz target, and their replay on
//! stable: the crash inputs of `fuzz/regressions/<target>/` (kept by
//! hand, see its README) and the kept corpus `fuzz/corpus/<target>/`.
//! This crate's `tests/regressions.rs` replays the parser targets; the
//! FFI crates' tests replay their boundary drivers (`c_api`, `ofi_entry`)
//! with [`replay`] too.

use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `fuzz/` of the repository.
pub fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz")
        .canonicalize()
        .expect("the repository's fuzz/")
}

/// The files of `dir` (none if it does not exist), in name order,
/// without the README of `fuzz/regressions/<target>/` if one is there.
pub fn inputs(dir: &Path) -> Vec<PathBuf> {
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

/// Replays the kept inputs of `target` through `body`, regressions first;
/// prints how many it replayed (straight to stderr: shown by a plain
/// `cargo test`) and panics naming every file whose replay panicked.
pub fn replay(target: &str, body: impl Fn(&[u8])) {
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
