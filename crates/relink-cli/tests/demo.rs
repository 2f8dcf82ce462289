//! `relink demo`: the whole fault schedule passes every end-to-end check
//! for several seeds, a single fault runs alone, the same seed replays the
//! same run, session C (manual recovery) is shown held and resumed by its
//! application's decision, the planned drain is shown moving A and C (B
//! blocked) with A's stall next to the unplanned failover's, and a
//! corrupted byte makes the run fail naming the check.
//!
//! `library` checks two session behaviours the demo's expected outcomes
//! rest on, directly on the simulator: an admin close ends the target's
//! half too, and a second path takes over at once when the peer's device
//! is lost.

use std::path::Path as FsPath;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

fn command(args: &[&str], svg: &FsPath) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_relink"));
    c.arg("demo").args(args).arg("--svg").arg(svg);
    c
}

fn demo(args: &[&str], svg: &FsPath) -> Output {
    command(args, svg).output().expect("run relink demo")
}

fn json_report(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the report is not JSON ({e}); stdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The entry of `session` in the row of `fault`.
fn impact<'r>(report: &'r Value, fault: &str, session: &str) -> &'r Value {
    let row = report["faults"]
        .as_array()
        .expect("faults")
        .iter()
        .find(|f| f["fault"] == fault)
        .unwrap_or_else(|| panic!("no row for {fault}"));
    row["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|s| s["session"] == session)
        .unwrap_or_else(|| panic!("no session {session} in {fault}"))
}

/// The outcome of `session` in the row of `fault`.
fn outcome(report: &Value, fault: &str, session: &str) -> String {
    impact(report, fault, session)["outcome"]
        .as_str()
        .expect("outcome")
        .to_string()
}

/// The drain's record: A and C moved, B blocked, and during the drain
/// neither A nor C replayed, saw an `Indeterminate` outcome, lost its
/// transport or was held; each counted one planned outage.
fn assert_drained(report: &Value, what: &str) {
    let d = &report["drain"];
    assert_eq!(d["device"], "initiator soft0", "{what}: {d}");
    assert_eq!(d["moving"], serde_json::json!(["A", "C"]), "{what}: {d}");
    assert_eq!(d["blocked"], serde_json::json!(["B"]), "{what}: {d}");
    assert_eq!(d["unplugged"], true, "{what}: {d}");
    let sessions = d["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 2, "{what}: {d}");
    for s in sessions {
        assert_eq!(s["device_before"], "soft0", "{what}: {s}");
        assert_eq!(s["device_after"], "soft1", "{what}: {s}");
        for zero in ["replayed", "indeterminate", "losses", "holds"] {
            assert_eq!(s[zero], 0, "{what}: {zero}: {s}");
        }
        assert_eq!(s["planned"], 1, "{what}: {s}");
    }
    assert!(sessions[0]["stall_ms"].as_f64().unwrap() > 0.0, "{what}");
    assert_eq!(outcome(report, "drain", "A"), "moved", "{what}");
    // B cannot move: blocked, lost with the device, back with it.
    assert_eq!(outcome(report, "drain", "B"), "resumed", "{what}");
    let b = impact(report, "drain", "B");
    assert!(
        b["note"].as_str().unwrap().contains("drain blocked"),
        "{what}: {b}"
    );
    // C moved without a hold: a planned move, no decision.
    let moves = report["manual"]["moves"].as_array().expect("moves");
    assert_eq!(moves.len(), 1, "{what}: {moves:?}");
    assert_eq!(moves[0]["fault"], "drain", "{what}");
    assert!(
        report["manual"]["holds"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["fault"] != "drain"),
        "{what}: C held in the drain"
    );
    let checks = report["checks"].as_array().unwrap();
    for name in [
        "drain moves",
        "drain no replay",
        "drain no Indeterminate",
        "drain no loss",
        "C moved without a hold",
        "messages A",
    ] {
        assert!(
            checks.iter().any(|c| c["name"] == name && c["ok"] == true),
            "{what}: check {name} missing"
        );
    }
}

fn assert_all_passed(report: &Value, out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["passed"], true, "{what}: {report:#}");
    for c in report["checks"].as_array().expect("checks") {
        assert_eq!(c["ok"], true, "{what}: check failed: {c}");
    }
    for f in report["faults"].as_array().expect("faults") {
        assert_eq!(
            f["ok"], true,
            "{what}: fault outcome not as expected: {f:#}"
        );
        for s in f["sessions"].as_array().expect("sessions") {
            assert_eq!(s["ok"], true, "{what}: {s}");
        }
    }
    assert!(report["problems"].as_array().expect("problems").is_empty());
}

#[test]
fn the_whole_schedule_passes_every_check_for_several_seeds() {
    let dir = tempfile::tempdir().unwrap();
    let seeds = ["1", "7"];
    let svg = |seed: &str| dir.path().join(format!("demo-{seed}.svg"));
    // Both runs at once.
    let children: Vec<_> = seeds
        .iter()
        .map(|seed| {
            command(&["--seed", seed, "--json"], &svg(seed))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run relink demo")
        })
        .collect();
    for (seed, child) in seeds.into_iter().zip(children) {
        let out = child.wait_with_output().expect("relink demo");
        let svg = svg(seed);
        let report = json_report(&out);
        let what = format!("seed {seed}");
        assert_all_passed(&report, &out, &what);

        let names: Vec<&str> = report["faults"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["fault"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "drain",
                "reset-initiator",
                "reset-target",
                "unplug-replug",
                "replace",
                "failover",
                "flap",
                "outage",
                "close"
            ],
            "{what}"
        );
        // The outcomes that tell the story, spelled out.
        assert_eq!(
            outcome(&report, "reset-initiator", "A"),
            "resumed",
            "{what}"
        );
        // A loss on the peer's side moves A to its other path at once.
        assert!(
            ["resumed", "failed-over"].contains(&outcome(&report, "reset-target", "A").as_str()),
            "{what}"
        );
        assert_eq!(outcome(&report, "unplug-replug", "B"), "resumed", "{what}");
        assert_eq!(
            outcome(&report, "replace", "A"),
            "resumed-new-guid",
            "{what}"
        );
        assert_eq!(outcome(&report, "failover", "A"), "failed-over", "{what}");
        assert_eq!(outcome(&report, "outage", "B"), "gave-up", "{what}");
        assert!(
            ["unaffected", "resumed", "failed-over"]
                .contains(&outcome(&report, "outage", "A").as_str()),
            "{what}: A must not suffer from B's outage"
        );
        assert_eq!(outcome(&report, "close", "A"), "closed", "{what}");
        assert_drained(&report, &what);
        // A's stall is measured at the drain and at the failover.
        for fault in ["drain", "failover"] {
            let a = impact(&report, fault, "A");
            assert!(a["stall_ms"].as_f64().unwrap() > 0.0, "{what}: {a}");
        }

        // B gave up with operations failed, A closed with operations
        // failed: both checks exist and held.
        let checks = report["checks"].as_array().unwrap();
        for name in [
            "A pending at close",
            "B pending at give-up",
            "atomics",
            "written bytes",
        ] {
            assert!(
                checks.iter().any(|c| c["name"] == name && c["ok"] == true),
                "{what}: check {name} missing"
            );
        }
        let b = &report["sessions"][1]["ops"]["message"];
        assert!(b["failed_gave_up"].as_u64().unwrap() > 0, "{what}: {b}");
        let a = &report["sessions"][0]["ops"]["message"];
        assert!(
            a["failed_disconnected"].as_u64().unwrap() > 0,
            "{what}: {a}"
        );

        // C, manual: held at least once, each hold decided after the
        // quorum and resumed after the decision, no attempt while held,
        // every message delivered; the checks that say so exist and held.
        assert_eq!(checks.len(), 22, "{what}");
        for name in [
            "C held",
            "C no attempt while held",
            "C resumed on decision",
            "messages C",
            "completions C",
        ] {
            assert!(
                checks.iter().any(|c| c["name"] == name && c["ok"] == true),
                "{what}: check {name} missing"
            );
        }
        let manual = &report["manual"];
        let holds = manual["holds"].as_array().expect("holds");
        assert!(!holds.is_empty(), "{what}: C never held");
        let quorum = manual["quorum"].as_u64().unwrap();
        for h in holds {
            assert!(h["votes"].as_u64().unwrap() >= quorum, "{what}: {h}");
            let (at, decided, resumed) = (
                h["at_s"].as_f64().unwrap(),
                h["decided_at_s"].as_f64().expect("decided"),
                h["resumed_at_s"].as_f64().expect("resumed"),
            );
            assert!(at <= decided && decided <= resumed, "{what}: {h}");
            assert_eq!(h["attempts_while_held"], 0, "{what}: {h}");
            assert_eq!(h["attempt_events_while_held"], 0, "{what}: {h}");
        }
        let c = &report["sessions"][2];
        assert_eq!(c["session"], "C", "{what}");
        assert_eq!(c["final_state"], "established", "{what}");
        let m = &c["ops"]["message"];
        assert_eq!(m["submitted"], m["success"], "{what}: {c}");

        let svg = std::fs::read_to_string(&svg).expect("svg written");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("failover") && svg.contains("B gave up"));
        assert!(svg.contains("drain: unplug initiator soft0"));
        assert!(svg.contains("session C"));
    }
}

#[test]
fn the_manual_session_is_shown_held_then_resumed_on_the_applications_decision() {
    let dir = tempfile::tempdir().unwrap();
    let out = demo(
        &["--faults", "replace", "--duration", "2"],
        &dir.path().join("manual.svg"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    // The loss shows as the CM's DEVICE_REMOVAL, or as the device removed
    // under a post when a message left from `send` first.
    let held = stdout
        .find("C/initiator: awaiting decision: cause ")
        .unwrap_or_else(|| panic!("no hold shown:\n{stdout}"));
    assert!(
        stdout[held..].contains("candidates path"),
        "no candidates shown:\n{stdout}"
    );
    let decided = stdout
        .find("C/application decided: resume on path 0 after quorum")
        .unwrap_or_else(|| panic!("no decision shown:\n{stdout}"));
    let resumed = stdout
        .find("C/initiator: resumed on soft0")
        .unwrap_or_else(|| panic!("no resume shown:\n{stdout}"));
    assert!(held < decided && decided < resumed, "{stdout}");
    assert!(stdout.contains("not resuming yet"), "{stdout}");
    assert!(stdout.contains("Session C (manual recovery"), "{stdout}");
    assert!(
        stdout.contains("Result: PASS, all 15 checks held"),
        "{stdout}"
    );
}

#[test]
fn the_planned_drain_is_shown_with_its_stall_next_to_the_failovers() {
    let dir = tempfile::tempdir().unwrap();
    let out = demo(
        &["--faults", "drain,failover", "--duration", "3"],
        &dir.path().join("drain.svg"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let find = |s: &str| {
        stdout
            .find(s)
            .unwrap_or_else(|| panic!("{s:?} not shown:\n{stdout}"))
    };
    let drain = find("drain initiator soft0: moving A, C (each to its other path); blocked B");
    let blocked = find(
        "B blocked: it has one path only, and a drain cannot move a session with no other path",
    );
    let quiescing = find("A/initiator: quiescing for a planned drain");
    let c_quiescing = find("C/initiator: quiescing for a planned drain");
    let drained = find("initiator soft0 drained");
    let unplug = find("unplug initiator soft0");
    let stall = find("A: stall ");
    let failover = find("FAULT failover");
    let compared = find("(the planned drain's: ");
    assert!(
        drain < blocked && blocked < quiescing.max(c_quiescing),
        "{stdout}"
    );
    assert!(
        drained < unplug && stall < failover && failover < compared,
        "{stdout}"
    );
    assert!(
        stdout.contains("A's stall (the longest gap between its successful completions"),
        "{stdout}"
    );
    let line = stdout
        .lines()
        .find(|l| l.contains("A's stall ("))
        .expect("stall line");
    assert!(
        line.contains("planned drain ") && line.contains("unplanned failover "),
        "{line}"
    );
    assert!(
        stdout.contains("moved by a planned drain to soft1 with no hold"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Planned drain of initiator soft0"),
        "{stdout}"
    );
    // No hold of C in the drain: its first hold is the failover's.
    assert!(
        !stdout.contains("C/initiator: awaiting decision")
            || find("C/initiator: awaiting decision") > failover,
        "{stdout}"
    );
    assert!(
        stdout.contains("Result: PASS, all 20 checks held"),
        "{stdout}"
    );
}

#[test]
fn one_fault_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = demo(
        &["--faults", "reset-initiator", "--json"],
        &dir.path().join("one.svg"),
    );
    let report = json_report(&out);
    assert_all_passed(&report, &out, "reset-initiator only");
    let faults = report["faults"].as_array().unwrap();
    assert_eq!(faults.len(), 1);
    assert_eq!(outcome(&report, "reset-initiator", "A"), "resumed");
    // Nothing was closed or gave up: every message arrived.
    for s in report["sessions"].as_array().unwrap() {
        assert_eq!(s["final_state"], "established", "{s}");
        let m = &s["ops"]["message"];
        assert_eq!(m["submitted"], m["success"], "{s}");
    }
}

#[test]
fn the_same_seed_replays_the_same_run() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--seed",
        "11",
        "--faults",
        "drain,flap,close",
        "--duration",
        "3",
        "--json",
    ];
    let mut runs: Vec<Value> = (0..2)
        .map(|i| {
            let out = demo(&args, &dir.path().join(format!("{i}.svg")));
            let r = json_report(&out);
            assert_all_passed(&r, &out, "drain,flap,close");
            r
        })
        .collect();
    for r in &mut runs {
        r["wall_time_s"] = Value::Null;
        r["svg"] = Value::Null;
    }
    assert_eq!(runs[0], runs[1]);
}

#[test]
fn a_corrupted_byte_fails_the_run_and_names_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let out = demo(
        &["--faults", "reset-target", "--duration", "2", "--sabotage"],
        &dir.path().join("bad.svg"),
    );
    assert!(!out.status.success(), "a flipped byte must fail the run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("[FAIL] written bytes"), "{stdout}");
    assert!(stdout.contains("Result: FAIL"), "{stdout}");
    assert!(stderr.contains("written bytes"), "{stderr}");
}

#[test]
fn a_too_short_duration_is_refused_with_the_minimum() {
    let dir = tempfile::tempdir().unwrap();
    let out = demo(&["--duration", "1"], &dir.path().join("x.svg"));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("too short") && stderr.contains("at least"),
        "{stderr}"
    );
}

// ---------------------------------------------------------------------
// Session behaviours the demo relies on, on the simulator alone.
// ---------------------------------------------------------------------

mod library {
    use super::*;
    use relink::{Path, SessionEvent, SessionHandle, SessionOptions, State};
    use relink_sim::sim::{Sim, INITIATOR, TARGET};
    use relink_soft::Fault;

    fn connected(sim: &mut Sim, paths: Vec<Path>) -> (SessionHandle, SessionHandle) {
        let s = sim
            .node(INITIATOR)
            .connect(paths, SessionOptions::default())
            .unwrap();
        sim.run_for(Duration::from_millis(5));
        assert_eq!(sim.node(INITIATOR).state(s), Some(State::Established));
        let t = sim.node(TARGET).accept().expect("accepted").session;
        (s, t)
    }

    /// An admin close ends both halves (docs/DESIGN.md, "An admin close
    /// says goodbye"): after the initiator's `Node::close`, the target's
    /// half is closed (or gone) within a second, instead of taking the
    /// disconnect for a device loss and holding the session (its memory,
    /// its journal) in `Recovering` until `ctrl_loss_tmo` (600 s by
    /// default).
    #[test]
    fn target_half_of_an_admin_closed_session_ends() {
        let mut sim = Sim::new(5);
        let addr = sim.target_addr(7471);
        sim.node(TARGET)
            .listen(addr, SessionOptions::default())
            .unwrap();
        let (s, t) = connected(
            &mut sim,
            vec![Path {
                local: None,
                peer: addr,
            }],
        );
        sim.node(INITIATOR).close(s).unwrap();
        sim.run_for(Duration::from_secs(1));
        let state = sim.node(TARGET).state(t);
        assert!(
            matches!(state, None | Some(State::Closed)),
            "the target's half should end with the admin close, it is {state:?}"
        );
    }

    /// A second HCA takes over at once (docs/DESIGN.md, "Which path after
    /// a loss"): when the *target's* device of the current path is
    /// unplugged, the initiator's next attempt tries the other path first
    /// and resumes within 100 ms, instead of waiting out `connect_timeout`
    /// (3 s by default) on the dead address.
    #[test]
    fn a_second_path_takes_over_at_once_when_the_peers_device_is_lost() {
        let mut sim = Sim::new(7);
        let f = sim.fabric().clone();
        for (h, a) in [(INITIATOR, "10.0.1.1/24"), (TARGET, "10.0.1.2/24")] {
            f.add_device_with(sim.host(h).index(), "soft1", vec![a.parse().unwrap()], None);
        }
        let peers = ["10.0.0.2:7471", "10.0.1.2:7471"].map(|a| a.parse().unwrap());
        for p in peers {
            sim.node(TARGET)
                .listen(p, SessionOptions::default())
                .unwrap();
        }
        let paths = peers
            .iter()
            .map(|p| Path {
                local: None,
                peer: *p,
            })
            .collect();
        let (s, _t) = connected(&mut sim, paths);
        f.inject(Fault::Remove(sim.host(TARGET).index(), "soft0".into()));
        sim.run_for(Duration::from_secs(5));
        let mut downtime = None;
        while let Some(e) = sim.node(INITIATOR).poll_event(s) {
            if let SessionEvent::Resumed { downtime: d, .. } = e {
                downtime = Some(d);
            }
        }
        let d = downtime.expect("resumed on the second path");
        assert!(
            d < Duration::from_millis(100),
            "failover to the second path took {d:?}"
        );
    }
}
