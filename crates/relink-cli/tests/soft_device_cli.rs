//! Runs the built `relink` binary against a temporary registry directory.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn relink(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_relink"))
        .arg("soft-device")
        .arg("--dir")
        .arg(dir)
        .args(args)
        .env_remove("RELINK_SOFT_DIR")
        .output()
        .expect("run relink")
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = relink(dir, args);
    assert!(
        out.status.success(),
        "relink {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn fails(dir: &Path, args: &[&str]) -> String {
    let out = relink(dir, args);
    assert!(!out.status.success(), "relink {args:?} succeeded");
    String::from_utf8(out.stderr).expect("UTF-8 errors")
}

fn json(dir: &Path, args: &[&str]) -> Value {
    let text = ok(dir, args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON {text:?}: {e}"))
}

fn list(dir: &Path) -> Vec<Value> {
    match json(dir, &["list", "--json"]) {
        Value::Array(v) => v,
        other => panic!("list --json gave {other}"),
    }
}

#[test]
fn add_list_reset_replace_port_remove() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("registry");

    let text = ok(&dir, &["list"]);
    assert!(text.starts_with("no soft devices"), "{text}");
    assert!(list(&dir).is_empty());

    // add
    let text = ok(
        &dir,
        &[
            "add",
            "soft0",
            "--addr",
            "10.0.0.1/24",
            "--addr",
            "fd00::1/64",
            "--netdev",
            "lo",
            "--guid",
            "0x0011223344556677",
        ],
    );
    assert!(
        text.starts_with("added soft0: index 1, generation 1"),
        "{text}"
    );
    assert!(dir.join("soft0.dev").is_file());
    let devs = list(&dir);
    assert_eq!(devs.len(), 1);
    let d = &devs[0];
    assert_eq!(d["name"], "soft0");
    assert_eq!(d["index"], 1);
    assert_eq!(d["generation"], 1);
    assert_eq!(d["guid"], "0x0011223344556677");
    assert_eq!(d["addrs"], serde_json::json!(["10.0.0.1/24", "fd00::1/64"]));
    assert_eq!(d["netdev"], "lo");
    assert_eq!(d["port"], "active");

    // add with a random GUID; the table lists both
    let d1 = json(&dir, &["add", "soft1", "--addr", "10.0.1.1/24", "--json"]);
    assert_eq!(d1["index"], 2);
    assert_ne!(d1["guid"], "0x0011223344556677");
    let table = ok(&dir, &["list"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("NAME"));
    assert!(lines[1].starts_with("soft0") && lines[1].contains("0011:2233:4455:6677"));
    assert!(lines[2].starts_with("soft1"));

    // reset: same GUID, index and addresses, new generation
    let r = json(&dir, &["reset", "soft0", "--json"]);
    assert_eq!(r["guid"], d["guid"]);
    assert_eq!(r["index"], d["index"]);
    assert_eq!(r["addrs"], d["addrs"]);
    assert!(r["generation"].as_u64().unwrap() > 2);
    assert!(dir.join("soft0.fatal").is_file());

    // replace: new GUID, same addresses, new generation
    let p = json(&dir, &["replace", "soft0", "--json"]);
    assert_ne!(p["guid"], d["guid"]);
    assert_eq!(p["addrs"], d["addrs"]);
    assert_eq!(p["index"], d["index"]);
    assert!(p["generation"].as_u64().unwrap() > r["generation"].as_u64().unwrap());

    // replace under a new name
    let n = json(&dir, &["replace", "soft0", "--new-name", "soft7", "--json"]);
    assert_eq!(n["name"], "soft7");
    assert_eq!(n["addrs"], d["addrs"]);
    let names: Vec<Value> = list(&dir).iter().map(|d| d["name"].clone()).collect();
    assert_eq!(names, vec![Value::from("soft1"), Value::from("soft7")]);

    // port down / up
    let text = ok(&dir, &["port", "soft7", "down"]);
    assert!(text.contains("port down"), "{text}");
    assert_eq!(list(&dir)[1]["port"], "down");
    ok(&dir, &["port", "soft7", "up"]);
    assert_eq!(list(&dir)[1]["port"], "active");

    // remove
    let text = ok(&dir, &["remove", "soft7"]);
    assert!(text.starts_with("removed soft7"), "{text}");
    ok(&dir, &["remove", "soft1"]);
    assert!(list(&dir).is_empty());
    assert!(!dir.join("soft7.dev").exists());
}

#[test]
fn errors_name_the_offending_argument() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();

    let e = fails(dir, &["add", "soft0", "--addr", "10.0.0.1/33"]);
    assert!(e.contains("--addr") && e.contains("10.0.0.1/33"), "{e}");
    let e = fails(dir, &["add", "soft0", "--addr", "10.0.0.x/24"]);
    assert!(e.contains("--addr"), "{e}");
    let e = fails(dir, &["add", "soft0"]);
    assert!(e.contains("--addr"), "{e}");
    let e = fails(dir, &["add", "bad/name", "--addr", "10.0.0.1/24"]);
    assert!(e.contains("NAME") && e.contains("bad/name"), "{e}");
    let e = fails(
        dir,
        &["add", "s", "--addr", "10.0.0.1/24", "--guid", "0xnope"],
    );
    assert!(e.contains("--guid") && e.contains("0xnope"), "{e}");
    let e = fails(
        dir,
        &["add", "s", "--addr", "10.0.0.1/24", "--netdev", "a b"],
    );
    assert!(e.contains("--netdev"), "{e}");
    let e = fails(dir, &["port", "s", "sideways"]);
    assert!(e.contains("sideways"), "{e}");

    ok(dir, &["add", "soft0", "--addr", "10.0.0.1/24"]);
    let e = fails(dir, &["add", "soft0", "--addr", "10.0.0.2/24"]);
    assert!(e.contains("already exists"), "{e}");
    let e = fails(dir, &["add", "soft1", "--addr", "10.0.0.1/24"]);
    assert!(e.contains("10.0.0.1") && e.contains("soft0"), "{e}");
    let e = fails(dir, &["remove", "nope"]);
    assert!(
        e.starts_with("relink: error:") && e.contains("\"nope\""),
        "{e}"
    );

    // A malformed registry file is reported with its path and line.
    std::fs::write(dir.join("junk.dev"), "name=junk\nindex=x\n").unwrap();
    let e = fails(dir, &["list"]);
    assert!(
        e.contains("junk.dev: line 2") && e.contains("`index`"),
        "{e}"
    );
}

#[test]
fn directory_from_the_environment() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_relink"))
        .args(["soft-device", "add", "envdev", "--addr", "10.9.0.1/16"])
        .env("RELINK_SOFT_DIR", tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(tmp.path().join("envdev.dev").is_file());
}
