//! Golden tests: fixed datagrams in `tests/golden/*` decoded to text and
//! compared with the `.golden` files beside them. `UPDATE_GOLDEN=1` rewrites
//! the expected files.

use std::fs;
use std::path::PathBuf;

use relink_devwatch::netlink::parse_datagram;
use relink_devwatch::netlink::RdmaMessage;
use relink_devwatch::uevent::parse_rdma_uevent;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn check(name: &str, actual: &str) {
    let path = golden_dir().join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        fs::write(&path, actual).unwrap();
        return;
    }
    let expected = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    assert_eq!(
        actual,
        expected,
        "{} differs (UPDATE_GOLDEN=1 rewrites it)",
        path.display()
    );
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The fixtures are little-endian, as the kernel writes on x86_64.
#[cfg(target_endian = "little")]
#[test]
fn monitor_datagrams() {
    let text = fs::read_to_string(golden_dir().join("monitor.hex")).unwrap();
    let mut out = String::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        for m in parse_datagram(&unhex(line)) {
            match m {
                Ok((_, RdmaMessage::Monitor(ev))) => out.push_str(&format!("{ev}\n")),
                Ok((_, other)) => out.push_str(&format!("other: {other:?}\n")),
                Err(e) => out.push_str(&format!("error: {e}\n")),
            }
        }
    }
    check("monitor.golden", &out);
}

#[test]
fn uevent_datagrams() {
    let text = fs::read_to_string(golden_dir().join("uevent.txt")).unwrap();
    let mut out = String::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let bytes = line.replace("\\0", "\0").into_bytes();
        match parse_rdma_uevent(&bytes) {
            Ok(Some(ev)) => out.push_str(&format!("{ev}\n")),
            Ok(None) => out.push_str("not rdma\n"),
            Err(e) => out.push_str(&format!("error: {e}\n")),
        }
    }
    check("uevent.golden", &out);
}
