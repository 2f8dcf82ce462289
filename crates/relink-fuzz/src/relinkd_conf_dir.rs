//! Feeds relinkd's `Config::load` a main file and the files of its
//! `conf_dir`, all arbitrary: the input is cut at `0xff` bytes (never in
//! UTF-8 text) into the main file `relinkd.toml` and up to four files
//! `conf.d/a.toml` to `conf.d/d.toml`; a sixth piece becomes
//! `conf.d/e.txt`, which is not read. They are written to a temporary
//! directory of their own, so a main file with `conf_dir = "conf.d"`
//! reaches them. A `conf_dir` that leaves that directory (absolute, or
//! through `..`) is not followed: the input returns.
//!
//! Beyond "never panics", checks:
//! - an error names the main file, the directory or one of its files,
//!   and an `Invalid` one a key; an error in a `conf_dir` file comes
//!   after a main file that parses;
//! - an accepted configuration holds what `relinkd_config` checks (unique
//!   names and NBD sockets across the files, settings in range), and is
//!   the main file's entries followed by those of each `*.toml` file of
//!   the directory in name order, each as `Config::parse` reads it alone.

use std::path::{Component, Path, PathBuf};

use relinkd::{Config, ConfigError};

/// The conf.d files the pieces after the main file become.
const FILES: [&str; 5] = ["a.toml", "b.toml", "c.toml", "d.toml", "e.txt"];

/// A directory of its own for one input (removed when dropped), with an
/// empty `conf.d`.
fn case_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("relink-fuzz-conf-dir.")
        .tempdir()
        .expect("a temporary directory");
    std::fs::create_dir(dir.path().join("conf.d")).expect("the case's conf.d");
    dir
}

/// Runs the target on one input: panics only when the code under test
/// breaks what this module checks (the crate's contract).
pub fn run(data: &[u8]) {
    let mut pieces = data.split(|&b| b == 0xff);
    let main_text = pieces.next().unwrap_or_default();
    // A conf_dir outside the case directory is not followed.
    if let Ok(c) = std::str::from_utf8(main_text)
        .map_err(drop)
        .and_then(|t| Config::parse(Path::new("relinkd.toml"), t).map_err(drop))
    {
        let inside = |d: &Path| {
            d.components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        };
        if c.conf_dir.as_deref().is_some_and(|d| !inside(d)) {
            return;
        }
    }
    let case = case_dir();
    let dir = case.path();
    let main = dir.join("relinkd.toml");
    std::fs::write(&main, main_text).expect("write the main file");
    let mut written = vec![main.clone()];
    for (name, text) in FILES.iter().zip(pieces) {
        let f = dir.join("conf.d").join(name);
        std::fs::write(&f, text).expect("write a conf.d file");
        written.push(f);
    }

    match Config::load(&main) {
        Err(e) => check_error(&e, &main, dir, &written),
        Ok(c) => check_accepted(&c, &main, dir),
    }
}

/// `e` names a file of the case (or the `conf_dir` it could not read),
/// and a key when a value is wrong.
fn check_error(e: &ConfigError, main: &Path, dir: &Path, written: &[PathBuf]) {
    let file = match e {
        ConfigError::Read { file, reason } => {
            assert!(!reason.is_empty());
            // The main file, a conf.d file, or the conf_dir itself.
            assert!(
                written.contains(file) || file.starts_with(dir),
                "{e} names no file of the case"
            );
            file
        }
        ConfigError::Syntax { file, reason } => {
            assert!(!reason.is_empty());
            file
        }
        ConfigError::Invalid { file, key, reason } => {
            assert!(!key.is_empty(), "{e} names no key");
            assert!(!reason.is_empty());
            file
        }
        other => panic!("a ConfigError this target does not know: {other:?}"),
    };
    assert!(
        e.to_string().starts_with(&file.display().to_string()),
        "{e} does not start with its file"
    );
    if !matches!(e, ConfigError::Read { .. }) {
        assert!(written.contains(file), "{e} names no file of the case");
    }
    if file != main {
        // The main file was read and parsed before its conf_dir.
        let text = std::fs::read_to_string(main).expect("the main file is UTF-8");
        assert!(
            Config::parse(main, &text).is_ok(),
            "{e} after a main file that fails"
        );
    }
}

/// An accepted configuration is sound, and is the main file's entries
/// then those of each `conf_dir` file in name order.
fn check_accepted(c: &Config, main: &Path, dir: &Path) {
    crate::relinkd_config::check_accepted(c);
    assert_eq!(c.file.as_deref(), Some(main));
    let text = std::fs::read_to_string(main).expect("an accepted main file");
    let mut want = Config::parse(main, &text).expect("an accepted main file parses");
    if let Some(d) = &want.conf_dir {
        let d = dir.join(d);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&d)
            .expect("an accepted conf_dir")
            .map(|e| e.expect("an entry").path())
            .filter(|f| f.extension().is_some_and(|x| x == "toml") && f.is_file())
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).expect("an accepted file");
            match Config::parse(&f, &text) {
                Ok(part) => {
                    want.exports.extend(part.exports);
                    want.connects.extend(part.connects);
                }
                // A file with no table: nothing to do alone, nothing added.
                Err(ConfigError::Invalid { key, .. }) if key == "export, connect" => {}
                Err(e) => panic!("load accepted {}, which does not parse: {e}", f.display()),
            }
        }
    }
    want.file = Some(main.to_path_buf());
    assert_eq!(c, &want, "the merge is not the files' entries in order");
}
