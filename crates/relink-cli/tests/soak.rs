//! `relink soak`, short: 24 s of the checked workload through a fault
//! every 1.5 s on average (every kind, both hosts) on the soft TCP
//! fabric. What must hold on any machine, loaded or not: exit 0, no
//! exactly-once violation, faults injected and every loss recovered,
//! operations completed and checked in several epochs, and the report
//! carrying its figures (RSS, live heap, fds, threads with their slopes
//! and bounds,
//! every session's journal and timers, log lines per hour, the samples).
//! No figure is compared with a bound here: the slopes are the long
//! run's (the test command's soak tier, docs/benchmarks/soak.md).
//! A second run, `--no-faults`, passes with nothing to recover.

use std::process::Command;

use serde_json::Value;

fn soak(args: &[&str], json: &std::path::Path) -> (std::process::Output, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_relink"))
        .arg("soak")
        .args(args)
        .arg("--json-out")
        .arg(json)
        .output()
        .expect("run relink soak");
    let text = std::fs::read_to_string(json).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}); stdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (
        out,
        serde_json::from_str(&text).expect("the report is JSON"),
    )
}

fn u(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_u64()
        .unwrap_or_else(|| panic!("{path:?} is not a number: {x}"))
}

#[test]
fn a_short_soak_holds_exactly_once_through_faults_on_both_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("soak.json");
    let (out, r) = soak(
        &[
            "--duration",
            "24s",
            "--epoch",
            "4s",
            "--interval",
            "8s",
            "--fault-every",
            "1500ms",
            "--seed",
            "3",
        ],
        &json,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}; stdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("soak passed"), "{stdout}");
    assert_eq!(r["passed"], true);
    assert_eq!(u(&r, &["violations"]), 0, "{stdout}");
    for c in r["checks"].as_array().unwrap() {
        assert_eq!(c["ok"], true, "{c}");
    }
    assert!(u(&r, &["faults", "injected"]) >= 4, "{stdout}");
    assert!(u(&r, &["recoveries", "resumes"]) >= 1, "{stdout}");
    assert_eq!(
        u(&r, &["recoveries", "losses"]),
        u(&r, &["recoveries", "resumes"])
    );
    assert!(u(&r, &["epochs"]) >= 3, "{stdout}");
    assert!(u(&r, &["ops", "completed"]) > 0);
    assert!(u(&r, &["ops", "messages_delivered"]) > 0);
    assert!(u(&r, &["ops", "reads_verified"]) > 0);
    for kind in ["message", "write", "read", "fetch-add"] {
        assert!(
            u(&r, &["ops", "by_kind", kind, "success"]) > 0,
            "no {kind} succeeded: {}",
            r["ops"]
        );
    }
    for trend in ["rss_kib", "heap_kib", "fds", "threads"] {
        assert!(u(&r, &[trend, "end"]) > 0, "{trend}: {}", r[trend]);
        assert!(r[trend]["bound_per_hour"].as_f64().is_some());
        assert!(r[trend]["verdict"].is_string());
        assert!(r[trend].get("slope_per_hour").is_some());
    }
    let sessions = r["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 4, "two sessions, two halves each");
    for s in sessions {
        assert_eq!(s["state"], "established", "{s}");
        assert_eq!(u(s, &["journal_ops_end"]), 0, "{s}");
        assert!(u(s, &["timers_max"]) <= 11, "{s}");
    }
    assert!(r["log"]["info_per_hour"].as_f64().is_some());
    assert!(r["samples"].as_array().unwrap().len() >= 4);
    // A line per interval, and the faults as they happen.
    assert!(stdout.contains("rss "), "{stdout}");
    assert!(stdout.contains("fault 1: "), "{stdout}");
}

#[test]
fn a_soak_without_faults_passes_with_nothing_to_recover() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("soak.json");
    let (out, r) = soak(&["--duration", "6s", "--epoch", "2s", "--no-faults"], &json);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(u(&r, &["faults", "injected"]), 0);
    assert_eq!(u(&r, &["recoveries", "losses"]), 0);
    assert_eq!(u(&r, &["violations"]), 0);
    assert!(u(&r, &["ops", "completed"]) > 0);
}
