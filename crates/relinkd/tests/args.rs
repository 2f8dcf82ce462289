//! relinkd's command line: `--help` and `--version` answer on stdout with
//! exit 0, as a packager's and an operator's first commands expect; a
//! missing configuration is a usage error (exit 2).

use std::process::Command;

fn relinkd(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_relinkd"))
        .args(args)
        .output()
        .expect("run relinkd");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_and_version_exit_0_and_a_missing_config_is_a_usage_error() {
    let (rc, out, _) = relinkd(&["--help"]);
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("Usage: relinkd <CONFIG>"), "{out}");
    let (rc, out, _) = relinkd(&["--version"]);
    assert_eq!(rc, 0);
    assert_eq!(out.trim(), format!("relinkd {}", env!("CARGO_PKG_VERSION")));
    let (rc, _, err) = relinkd(&[]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("<CONFIG>"), "{err}");
    let (rc, _, err) = relinkd(&["/nonexistent/relinkd.toml"]);
    assert_eq!(rc, 2, "{err}");
    assert!(err.contains("/nonexistent/relinkd.toml"), "{err}");
}
