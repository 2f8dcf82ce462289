//! What the planned drain did, as the report keeps it: what `drain`
//! answered (moving, blocked), when the device carried only what cannot
//! move, and for each session that moved what its drain window held
//! (quiesce, resume, stall, replays, `Indeterminate` outcomes, losses,
//! planned outages, holds); the checks made of it; its section in the text
//! report.
//!
//! The checks read only this log, so each can be shown to fail on a log
//! that breaks it (see the tests below).

use std::io::{self, Write};

use relink_sim::workload::Check;
use serde::Serialize;

use super::report::{count, ms, stall};

/// The planned drain in the report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DrainLog {
    /// Virtual seconds (from the start of the workload) of the `drain`
    /// call.
    pub at_s: f64,
    /// The drained device (`initiator soft0`).
    pub device: String,
    /// The sessions `drain` reported moving, by name.
    pub moving: Vec<&'static str>,
    /// The sessions it reported blocked (no other present path).
    pub blocked: Vec<&'static str>,
    /// The sessions the device carried at the call that have another path:
    /// those the drain must move.
    pub movable: Vec<&'static str>,
    /// The sessions the device carried at the call with one path only:
    /// those a drain cannot move.
    pub one_path: Vec<&'static str>,
    /// Milliseconds from the call until the device carried only the
    /// blocked sessions (`Node::sessions_on`); `None`: it never did.
    pub drained_ms: Option<f64>,
    /// The device was unplugged for its maintenance.
    pub unplugged: bool,
    /// How the device left the drain list: `removal` (a removed device
    /// leaves it by itself) or `undrain`; `None`: it did not.
    pub left_drain_list: Option<String>,
    /// Each session the drain must move, over the drain's window (from the
    /// call to the next fault).
    pub sessions: Vec<Drained>,
}

/// One session moved by the drain, over the drain's window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Drained {
    /// "A" or "C".
    pub session: &'static str,
    /// `Quiescing { plan: Drain }` events of its initiator.
    pub quiescing: u64,
    /// `Resumed` events of its initiator.
    pub resumes: u64,
    /// The initiator's device at the call.
    pub device_before: Option<String>,
    /// The initiator's device when the window closed.
    pub device_after: Option<String>,
    /// The longest gap between the session's successful completions from
    /// the call to its first completion after its resume, ms (A only).
    pub stall_ms: Option<f64>,
    /// Operations replayed (the initiator's counter, over the window).
    pub replayed: u64,
    /// Operations that completed `Indeterminate` in the window.
    pub indeterminate: u64,
    /// Transport losses (the initiator's counter, over the window).
    pub losses: u64,
    /// Planned outages (the initiator's counter, over the window).
    pub planned: u64,
    /// Times the session was held for its application's decision in the
    /// window (manual recovery, C).
    pub holds: u64,
}

impl Drained {
    fn moved(&self) -> bool {
        self.quiescing > 0
            && self.resumes > 0
            && self.device_after.is_some()
            && self.device_after != self.device_before
    }

    fn path(&self) -> String {
        let d = |d: &Option<String>| d.clone().unwrap_or_else(|| "none".into());
        format!("{} -> {}", d(&self.device_before), d(&self.device_after))
    }
}

fn check(name: &str, ok: bool, detail: String) -> Check {
    Check {
        name: name.to_string(),
        ok,
        detail,
    }
}

fn names(v: &[&str]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

fn sorted(v: &[&'static str]) -> Vec<&'static str> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

impl DrainLog {
    /// The drain's checks: the sessions with another path moved and the
    /// one-path ones were blocked; no replay, no `Indeterminate` outcome,
    /// no loss (a planned outage each instead); C moved without a hold.
    pub fn checks(&self) -> Vec<Check> {
        vec![
            self.check_moves(),
            self.check_per_session("drain no replay", "replayed", |s| s.replayed),
            self.check_per_session("drain no Indeterminate", "Indeterminate", |s| {
                s.indeterminate
            }),
            self.check_no_loss(),
            self.check_c_not_held(),
        ]
    }

    fn check_moves(&self) -> Check {
        let name = "drain moves";
        let mut bad = Vec::new();
        if sorted(&self.moving) != sorted(&self.movable) {
            bad.push(format!(
                "drain reported moving {}, the device carried {} with another path",
                names(&self.moving),
                names(&self.movable)
            ));
        }
        if sorted(&self.blocked) != sorted(&self.one_path) {
            bad.push(format!(
                "drain reported blocked {}, the device carried {} with one path",
                names(&self.blocked),
                names(&self.one_path)
            ));
        }
        for s in &self.sessions {
            if !s.moved() {
                bad.push(format!(
                    "{} did not move ({} quiescing, {} resumes, {})",
                    s.session,
                    s.quiescing,
                    s.resumes,
                    s.path()
                ));
            }
        }
        if self.sessions.len() != self.movable.len() {
            bad.push(format!(
                "{} sessions recorded for {} to move",
                self.sessions.len(),
                self.movable.len()
            ));
        }
        let drained = match self.drained_ms {
            Some(t) => t,
            None => {
                bad.push(format!(
                    "{} never carried only the blocked sessions",
                    self.device
                ));
                0.0
            }
        };
        if let Some(first) = bad.first() {
            return check(
                name,
                false,
                format!("{first} ({} problems in all)", bad.len()),
            );
        }
        let moved: Vec<String> = self
            .sessions
            .iter()
            .map(|s| format!("{} {}", s.session, s.path()))
            .collect();
        let blocked = if self.blocked.is_empty() {
            String::new()
        } else {
            format!(
                "; {} blocked (one path: a drain cannot move it)",
                self.blocked.join(", ")
            )
        };
        check(
            name,
            true,
            format!(
                "moved: {} (Quiescing, then Resumed){blocked}; {} carried only what cannot move {} after the call",
                moved.join(", "),
                self.device,
                ms(drained)
            ),
        )
    }

    fn check_per_session(&self, name: &str, what: &str, f: fn(&Drained) -> u64) -> Check {
        let each: Vec<String> = self
            .sessions
            .iter()
            .map(|s| format!("{} {}", s.session, count(f(s))))
            .collect();
        let total: u64 = self.sessions.iter().map(f).sum();
        let ok = total == 0 && !self.sessions.is_empty();
        let detail = if self.sessions.is_empty() {
            "no session moved".to_string()
        } else {
            format!("{what} during the drain: {}", each.join(", "))
        };
        check(name, ok, detail)
    }

    fn check_no_loss(&self) -> Check {
        let name = "drain no loss";
        let bad: Vec<String> = self
            .sessions
            .iter()
            .filter(|s| s.losses != 0 || s.planned != 1)
            .map(|s| {
                format!(
                    "{}: {} losses, {} planned outages",
                    s.session, s.losses, s.planned
                )
            })
            .collect();
        if self.sessions.is_empty() {
            return check(name, false, "no session moved".into());
        }
        if !bad.is_empty() {
            return check(name, false, bad.join("; "));
        }
        check(
            name,
            true,
            format!(
                "{}: no loss, one planned outage each (Counters::planned, not losses)",
                self.sessions
                    .iter()
                    .map(|s| s.session)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    }

    fn check_c_not_held(&self) -> Check {
        let name = "C moved without a hold";
        let Some(c) = self.sessions.iter().find(|s| s.session == "C") else {
            let ok = !self.movable.contains(&"C");
            return check(
                name,
                ok,
                if ok {
                    "C was not on the drained device".into()
                } else {
                    "C's move is not recorded".into()
                },
            );
        };
        if c.holds > 0 || !c.moved() {
            return check(
                name,
                false,
                format!(
                    "C {} and was held {} times in the drain",
                    if c.moved() { "moved" } else { "did not move" },
                    c.holds
                ),
            );
        }
        check(
            name,
            true,
            format!(
                "C (manual recovery) moved {} with no hold: a drain is planned, the application has nothing to decide",
                c.path()
            ),
        )
    }

    /// The text report's section on the drain.
    pub fn render(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out)?;
        writeln!(
            out,
            "Planned drain of {} at {:.3} s: moving {}; blocked {}",
            self.device,
            self.at_s,
            names(&self.moving),
            names(&self.blocked)
        )?;
        let mut rows = Vec::new();
        for s in &self.sessions {
            rows.push(vec![
                s.session.to_string(),
                s.path(),
                s.stall_ms.map_or("-".into(), stall),
                count(s.replayed),
                count(s.indeterminate),
                count(s.losses),
                count(s.planned),
                count(s.holds),
            ]);
        }
        super::report::table(
            out,
            &[
                "sess",
                "initiator device",
                "stall",
                "replayed",
                "indeterminate",
                "losses",
                "planned",
                "holds",
            ],
            &rows,
        )?;
        let drained = self
            .drained_ms
            .map_or("never".to_string(), |t| format!("{} after the call", ms(t)));
        writeln!(
            out,
            "  {} carried only {} {drained}; {}; {}",
            self.device,
            if self.blocked.is_empty() {
                "nothing".to_string()
            } else {
                format!("{} (blocked)", self.blocked.join(", "))
            },
            if self.unplugged {
                "unplugged for maintenance, then re-plugged"
            } else {
                "never unplugged"
            },
            match self.left_drain_list.as_deref() {
                Some("removal") => "it left the drain list with its removal",
                Some(_) => "undrained",
                None => "still on the drain list",
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moved(session: &'static str) -> Drained {
        Drained {
            session,
            quiescing: 1,
            resumes: 1,
            device_before: Some("soft0".into()),
            device_after: Some("soft1".into()),
            stall_ms: (session == "A").then_some(0.05),
            planned: 1,
            ..Drained::default()
        }
    }

    fn good() -> DrainLog {
        DrainLog {
            at_s: 0.5,
            device: "initiator soft0".into(),
            moving: vec!["A", "C"],
            blocked: vec!["B"],
            movable: vec!["C", "A"],
            one_path: vec!["B"],
            drained_ms: Some(0.04),
            unplugged: true,
            left_drain_list: Some("removal".into()),
            sessions: vec![moved("A"), moved("C")],
        }
    }

    fn failed(r: &DrainLog) -> Vec<String> {
        r.checks()
            .into_iter()
            .filter(|c| !c.ok)
            .map(|c| c.name)
            .collect()
    }

    #[test]
    fn a_clean_drain_passes_every_check() {
        assert!(failed(&good()).is_empty(), "{:?}", good().checks());
    }

    #[test]
    fn a_session_that_did_not_move_or_was_not_blocked_fails_drain_moves() {
        let breaks: [fn(&mut DrainLog); 7] = [
            |r| r.moving.retain(|s| *s != "C"),
            |r| r.blocked.clear(),
            |r| r.drained_ms = None,
            |r| r.sessions[0].quiescing = 0,
            |r| r.sessions[0].resumes = 0,
            |r| r.sessions[0].device_after = Some("soft0".into()),
            |r| {
                r.sessions.pop();
            },
        ];
        for (i, f) in breaks.into_iter().enumerate() {
            let mut r = good();
            f(&mut r);
            let failed = failed(&r);
            assert!(failed.contains(&"drain moves".to_string()), "break {i}");
            assert!(
                failed
                    .iter()
                    .all(|c| c == "drain moves" || c == "C moved without a hold"),
                "break {i}: {failed:?}"
            );
        }
    }

    #[test]
    fn a_replay_fails_drain_no_replay() {
        for i in 0..2 {
            let mut r = good();
            r.sessions[i].replayed = 3;
            assert_eq!(failed(&r), ["drain no replay"]);
        }
    }

    #[test]
    fn an_indeterminate_outcome_fails_drain_no_indeterminate() {
        for i in 0..2 {
            let mut r = good();
            r.sessions[i].indeterminate = 1;
            assert_eq!(failed(&r), ["drain no Indeterminate"]);
        }
    }

    #[test]
    fn a_loss_or_a_missing_planned_outage_fails_drain_no_loss() {
        let breaks: [fn(&mut Drained); 3] =
            [|s| s.losses = 1, |s| s.planned = 0, |s| s.planned = 2];
        for f in breaks {
            for i in 0..2 {
                let mut r = good();
                f(&mut r.sessions[i]);
                assert_eq!(failed(&r), ["drain no loss"]);
            }
        }
    }

    #[test]
    fn a_hold_of_c_in_the_drain_fails_c_moved_without_a_hold() {
        let mut r = good();
        r.sessions[1].holds = 1;
        assert_eq!(failed(&r), ["C moved without a hold"]);
        // C on the device but its move not recorded.
        let mut r = good();
        r.sessions.pop();
        assert!(failed(&r).contains(&"C moved without a hold".to_string()));
        // C elsewhere: nothing to check.
        let mut r = good();
        r.sessions.pop();
        r.movable.retain(|s| *s != "C");
        r.moving.retain(|s| *s != "C");
        assert!(failed(&r).is_empty(), "{:?}", r.checks());
    }

    #[test]
    fn no_session_moved_fails_every_per_session_check() {
        let mut r = good();
        r.sessions.clear();
        r.moving.clear();
        r.movable.clear();
        let f = failed(&r);
        for name in ["drain no replay", "drain no Indeterminate", "drain no loss"] {
            assert!(f.contains(&name.to_string()), "{f:?}");
        }
    }
}
