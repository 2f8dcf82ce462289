//! relinkd's logs: `tracing` events on stderr, one JSON object per line
//! with `RELINKD_LOG_FORMAT=json` (the library's events among them).

mod common;

use std::process::{Command, Stdio};

use common::config::ConfigFile;
use common::images::empty_volume;
use common::Root;

#[test]
fn json_logs_are_one_object_per_line() {
    let root = Root::new("logs");
    let soft = root.0.join("soft");
    std::fs::create_dir_all(&soft).unwrap();
    let volume = root.0.join("v.img");
    empty_volume(&volume, 1 << 20);
    let ctl = root.0.join("ctl.sock");
    let config = root.0.join("relinkd.toml");
    ConfigFile::new()
        .backend(&soft)
        .control(&ctl)
        .export("d", "127.0.0.9:7999", &volume)
        .write(&config);
    let child = Command::new(env!("CARGO_BIN_EXE_relinkd"))
        .arg(&config)
        .env("RELINKD_LOG_FORMAT", "json")
        .env("RELINKD_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn relinkd");
    let deadline = std::time::Instant::now() + common::STEP;
    while !ctl.exists() {
        assert!(std::time::Instant::now() < deadline, "no control socket");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let s = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(s.success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = err.lines().collect();
    assert!(!lines.is_empty(), "no log lines");
    for l in &lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{l}"
        );
    }
    assert!(
        lines.iter().any(|l| l.contains("\"target\":\"relink::")),
        "the library's events are logged too: {err}"
    );
}
