//! # relink-skip — how a test says it could not run
//!
//! A test that cannot do what it exists for on this machine (a client
//! program that is not installed, no root for network namespaces, a
//! kernel without RDMA) must not read as passed, and libtest prints `ok`
//! for every test that returns. So such a test builds a [`Skip`] and calls
//! [`skip_test`] before it returns ([`skip_part`] when only a part of it
//! cannot run and the rest does). That:
//!
//! 1. writes `SKIPPED: <label>: <reason>` straight to the process's stderr,
//!    past libtest's capture (which takes only `print!` and `eprint!`), so
//!    `cargo test` shows it whether the test passes or not;
//! 2. appends a record to the file that `RELINK_SKIP_LOG` names, when it is
//!    set: `scripts/test.sh` sets it, counts each record as skipped rather
//!    than passed, and ends with a table of them ([`Record`] is the format);
//! 3. fails instead (panics, so the test fails and says why):
//!    - under `CI=true`, when the skip is for something the project's
//!      install step provides ([`Skip::missing`], [`find_program`]): CI
//!      runs that step, so such a skip there is a missing install step, not
//!      a property of the machine;
//!    - for every skip under `RELINK_FAIL_ON_SKIP=1`, for a run that must
//!      run everything.
//!
//! A skip of the machine's own kind ([`Skip::new`]: not root, no uevents in
//! this network namespace) is reported and counted the same way, and is
//! allowed under CI.
//!
//! ```no_run
//! # fn test_body(_: std::path::PathBuf) {}
//! let nbdcopy = match relink_skip::find_program("nbdcopy", "libnbd-bin") {
//!     Ok(path) => path,
//!     Err(skip) => return relink_skip::skip_test("nbdcopy_copies", &skip),
//! };
//! test_body(nbdcopy);
//! ```
//!
//! docs/TESTING.md lists the tiers, what each needs and how its skips show.

use std::ffi::OsStr;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The variable naming the file skips are appended to (set by
/// `scripts/test.sh`).
pub const LOG_ENV: &str = "RELINK_SKIP_LOG";

/// The variable that turns every skip into a failure (`1`).
pub const FAIL_ON_SKIP_ENV: &str = "RELINK_FAIL_ON_SKIP";

/// Why a test, or a part of one, cannot run here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    reason: String,
    /// What the install step provides and this machine lacks, for a skip
    /// that must not happen under CI.
    missing: Option<String>,
}

impl Skip {
    /// A skip for a property of the machine that no install step changes
    /// (not root, a kernel without RDMA, no uevents in this namespace).
    /// Allowed under CI.
    pub fn new(reason: impl Into<String>) -> Skip {
        Skip {
            reason: reason.into(),
            missing: None,
        }
    }

    /// A skip for want of `what`, which the project's install step
    /// (`scripts/deps.sh`) or build provides: `reason` says why the test
    /// needs it and how to get it. A failure under `CI=true`.
    pub fn missing(what: impl Into<String>, reason: impl Into<String>) -> Skip {
        Skip {
            reason: reason.into(),
            missing: Some(what.into()),
        }
    }

    /// Why the test cannot run.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// What the install step should have provided, if this skip is for
    /// want of it.
    pub fn missing_what(&self) -> Option<&str> {
        self.missing.as_deref()
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for Skip {}

/// The path of `program` on `PATH`, or a [`Skip::missing`] that names it
/// and the Debian package that installs it.
pub fn find_program(program: &str, package: &str) -> Result<PathBuf, Skip> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    find_program_in(&path, program, package)
}

/// [`find_program`] on a given `PATH` value.
pub fn find_program_in(path: &OsStr, program: &str, package: &str) -> Result<PathBuf, Skip> {
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
        .ok_or_else(|| {
            Skip::missing(
                format!("{program} (package {package})"),
                format!("`{program}` is not installed (apt-get install {package})"),
            )
        })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether a skip covers its whole test or a part of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The test returned without doing what it exists for: libtest counts
    /// it as passed, the test script counts it as skipped instead.
    Test,
    /// A part of a test (or of a bench run) did not run; the rest did and
    /// counts as it ended. The test script counts the part as one more
    /// skipped item.
    Part,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::Test => "test",
            Scope::Part => "part",
        }
    }
}

/// One line of the skip log: tab-separated `scope`, `binary`, `label`,
/// `reason`, `missing` (empty for a skip of the machine's kind). Tabs and
/// line breaks inside a field are written as spaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The whole test, or a part.
    pub scope: Scope,
    /// The test or bench executable, without cargo's hash suffix
    /// (`clients`, `nbd`).
    pub binary: String,
    /// What was skipped, as the `SKIPPED:` line names it.
    pub label: String,
    /// The skip.
    pub skip: Skip,
}

impl Record {
    /// The record's line, with its newline.
    pub fn line(&self) -> String {
        let clean = one_line;
        format!(
            "{}\t{}\t{}\t{}\t{}\n",
            self.scope.as_str(),
            clean(&self.binary),
            clean(&self.label),
            clean(&self.skip.reason),
            clean(self.skip.missing.as_deref().unwrap_or("")),
        )
    }
}

/// The settings a skip obeys, read from the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// `CI` is `true` (or `1`).
    pub ci: bool,
    /// `RELINK_FAIL_ON_SKIP=1`.
    pub fail_on_skip: bool,
    /// `RELINK_SKIP_LOG`.
    pub log: Option<PathBuf>,
}

impl Settings {
    /// The settings of this process.
    pub fn from_env() -> Settings {
        let flag = |name: &str, yes: &[&str]| {
            std::env::var(name).is_ok_and(|v| yes.contains(&v.to_ascii_lowercase().as_str()))
        };
        Settings {
            ci: flag("CI", &["true", "1"]),
            fail_on_skip: flag(FAIL_ON_SKIP_ENV, &["1"]),
            log: std::env::var_os(LOG_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        }
    }

    /// Why this skip must fail the test instead, if it must.
    pub fn refusal(&self, skip: &Skip) -> Option<String> {
        match (&skip.missing, self.ci, self.fail_on_skip) {
            (Some(what), true, _) => Some(format!(
                "CI=true and {what} is missing: CI's install step (scripts/deps.sh) \
                 should have provided it"
            )),
            (_, _, true) => Some(format!("{FAIL_ON_SKIP_ENV}=1: every skip fails")),
            _ => None,
        }
    }

    /// Reports a skip: the `SKIPPED:` line on `out` and the record in the
    /// log, or a panic when [`refusal`](Settings::refusal) says it must
    /// fail.
    pub fn report(&self, scope: Scope, label: &str, skip: &Skip, out: &mut dyn Write) {
        if let Some(why) = self.refusal(skip) {
            panic!("{label}: would be SKIPPED ({skip}), but {why}");
        }
        let part = match scope {
            Scope::Test => "",
            Scope::Part => " (part)",
        };
        // A closed stderr must not fail the test.
        let _ = out
            .write_all(format!("SKIPPED{part}: {label}: {}\n", one_line(&skip.reason)).as_bytes());
        if let Some(log) = &self.log {
            let record = Record {
                scope,
                binary: binary_name(),
                label: label.to_string(),
                skip: skip.clone(),
            };
            // One write of one short line to a file opened for appending:
            // records of tests running in parallel do not interleave.
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .and_then(|mut f| f.write_all(record.line().as_bytes()));
            if let Err(e) = written {
                panic!(
                    "{label}: skipped ({skip}), and the skip cannot be recorded in {}: {e}",
                    log.display()
                );
            }
        }
    }
}

/// Reports that the running test cannot do what it exists for; the test
/// returns right after. Panics instead under `CI=true` for a
/// [`Skip::missing`], and under `RELINK_FAIL_ON_SKIP=1`.
pub fn skip_test(label: &str, skip: &Skip) {
    // Straight to the file descriptor: libtest captures only eprint!.
    Settings::from_env().report(Scope::Test, label, skip, &mut std::io::stderr());
}

/// Reports that a part of the running test or bench cannot run here; the
/// rest goes on. Panics like [`skip_test`].
pub fn skip_part(label: &str, skip: &Skip) {
    Settings::from_env().report(Scope::Part, label, skip, &mut std::io::stderr());
}

/// `s` with tabs and line breaks as spaces.
fn one_line(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

/// This executable's name without cargo's `-<16 hex digits>` suffix.
fn binary_name() -> String {
    let exe = std::env::current_exe().ok();
    let stem = exe
        .as_deref()
        .and_then(Path::file_stem)
        .and_then(OsStr::to_str)
        .unwrap_or("?");
    strip_hash(stem).to_string()
}

fn strip_hash(stem: &str) -> &str {
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            name
        }
        _ => stem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(ci: bool, fail_on_skip: bool, log: Option<PathBuf>) -> Settings {
        Settings {
            ci,
            fail_on_skip,
            log,
        }
    }

    #[test]
    fn a_missing_program_names_itself_and_its_package() {
        let dir = std::env::temp_dir();
        let skip = find_program_in(dir.as_os_str(), "no-such-program-xyz", "some-pkg").unwrap_err();
        assert_eq!(
            skip.reason(),
            "`no-such-program-xyz` is not installed (apt-get install some-pkg)"
        );
        assert_eq!(
            skip.missing_what(),
            Some("no-such-program-xyz (package some-pkg)")
        );
    }

    #[test]
    fn a_program_is_found_on_the_path_given_and_only_there() {
        let sh = find_program_in(OsStr::new("/nonexistent:/bin:/usr/bin"), "sh", "dash").unwrap();
        assert!(sh.ends_with("sh"), "{}", sh.display());
        assert!(find_program_in(OsStr::new("/nonexistent"), "sh", "dash").is_err());
    }

    #[test]
    fn ci_refuses_a_skip_for_want_of_what_its_install_provides() {
        let missing = Skip::missing("nbdcopy (package libnbd-bin)", "`nbdcopy` is not installed");
        let machine = Skip::new("not root");
        let ci = settings(true, false, None);
        let why = ci.refusal(&missing).expect("refused under CI");
        assert!(why.contains("nbdcopy (package libnbd-bin)"), "{why}");
        assert_eq!(ci.refusal(&machine), None);
        let local = settings(false, false, None);
        assert_eq!(local.refusal(&missing), None);
        let strict = settings(false, true, None);
        assert!(strict.refusal(&machine).is_some());
    }

    #[test]
    fn a_refused_skip_panics_with_the_missing_program() {
        let missing = Skip::missing("nbdcopy (package libnbd-bin)", "`nbdcopy` is not installed");
        let panic = std::panic::catch_unwind(|| {
            settings(true, false, None).report(
                Scope::Test,
                "nbdcopy_test",
                &missing,
                &mut Vec::new(),
            )
        })
        .expect_err("panics under CI");
        let text = panic.downcast_ref::<String>().expect("a formatted message");
        assert!(text.starts_with("nbdcopy_test: would be SKIPPED"), "{text}");
        assert!(
            text.contains("nbdcopy (package libnbd-bin) is missing"),
            "{text}"
        );
    }

    #[test]
    fn skips_are_appended_to_the_log_one_line_each() {
        let dir = std::env::temp_dir().join(format!("relink-skip-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("skips.tsv");
        let _ = std::fs::remove_file(&log);
        let s = settings(false, false, Some(log.clone()));
        let mut out = Vec::new();
        s.report(Scope::Test, "first", &Skip::new("no\troot\nhere"), &mut out);
        s.report(
            Scope::Part,
            "second",
            &Skip::missing("x (package y)", "no x"),
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "SKIPPED: first: no root here\nSKIPPED (part): second: no x\n"
        );
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
        assert_eq!(lines.len(), 2, "{text}");
        let bin = binary_name();
        assert_eq!(lines[0], ["test", &bin, "first", "no root here", ""]);
        assert_eq!(lines[1], ["part", &bin, "second", "no x", "x (package y)"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn cargo_hash_suffixes_are_stripped() {
        assert_eq!(strip_hash("clients-0123456789abcdef"), "clients");
        assert_eq!(
            strip_hash("nbd_across_resets-731e7b78ee88e411"),
            "nbd_across_resets"
        );
        assert_eq!(strip_hash("relink-skip"), "relink-skip");
        assert_eq!(strip_hash("relinkd"), "relinkd");
    }
}
