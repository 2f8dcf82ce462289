//! The Prometheus text exposition of a [`StatusResult`]: one family per
//! quantity, labelled by connection (`connection="NAME"`) or by export
//! and session (`export="NAME",session="I"`).

use std::fmt::Write as _;

use super::protocol::{ConnectionStatus, SessionStatus, StatusResult};

/// The metric families: name, type, help, and how to read the value of
/// a session.
type Family = (
    &'static str,
    &'static str,
    &'static str,
    fn(&SessionStatus) -> f64,
);

/// A connection's metric families: name, type, help, value.
type ConnFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&ConnectionStatus) -> u64,
);

const SESSION_FAMILIES: &[Family] = &[
    (
        "established",
        "gauge",
        "1 while the session is established, 0 otherwise",
        |s| f64::from(u8::from(s.state == "Established")),
    ),
    (
        "epoch",
        "gauge",
        "The epoch of the session's transport",
        |s| s.epoch as f64,
    ),
    ("attempts_total", "counter", "Connection attempts", |s| {
        s.attempts as f64
    }),
    (
        "recoveries_total",
        "counter",
        "Outages that ended with the session established again",
        |s| s.recoveries as f64,
    ),
    ("losses_total", "counter", "Transport losses", |s| {
        s.losses as f64
    }),
    (
        "downtime_seconds_total",
        "counter",
        "Time without a transport, the outage under way included",
        |s| s.downtime_secs,
    ),
    (
        "replayed_ops_total",
        "counter",
        "Operations posted again after losses",
        |s| s.replayed as f64,
    ),
    (
        "planned_outages_total",
        "counter",
        "Planned outages taken (drains, suspends), not losses",
        |s| s.planned as f64,
    ),
    (
        "failovers_total",
        "counter",
        "Losses that switched to a hot standby",
        |s| s.failovers as f64,
    ),
    (
        "messages_received_total",
        "counter",
        "Messages delivered to this end",
        |s| s.delivered as f64,
    ),
    (
        "messages_packed_total",
        "counter",
        "Messages received behind another in one SEND",
        |s| s.packed as f64,
    ),
];

/// Escape a label value.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Render `status` as Prometheus text (version 0.0.4), with HELP and TYPE
/// lines.
#[must_use]
pub fn render(status: &StatusResult) -> String {
    let mut out = String::new();
    for (name, kind, help, value) in SESSION_FAMILIES {
        let _ = writeln!(out, "# HELP relinkd_connection_{name} {help}.");
        let _ = writeln!(out, "# TYPE relinkd_connection_{name} {kind}");
        for c in &status.connections {
            let _ = writeln!(
                out,
                "relinkd_connection_{name}{{connection=\"{}\"}} {}",
                label(&c.name),
                value(&c.session)
            );
        }
        let _ = writeln!(out, "# HELP relinkd_export_session_{name} {help}.");
        let _ = writeln!(out, "# TYPE relinkd_export_session_{name} {kind}");
        for e in &status.exports {
            for (i, s) in e.sessions.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "relinkd_export_session_{name}{{export=\"{}\",session=\"{i}\"}} {}",
                    label(&e.name),
                    value(s)
                );
            }
        }
    }
    let conn_families: &[ConnFamily] = &[
        (
            "bytes_read_total",
            "counter",
            "Bytes read by NBD clients",
            |c| c.bytes_read,
        ),
        (
            "bytes_written_total",
            "counter",
            "Bytes written by NBD clients",
            |c| c.bytes_written,
        ),
        (
            "in_flight_requests",
            "gauge",
            "NBD requests not answered yet",
            |c| c.in_flight,
        ),
        (
            "ready",
            "gauge",
            "1 while the connection serves NBD I/O now (its session established)",
            |c| u64::from(c.state == "ready"),
        ),
    ];
    for (name, kind, help, value) in conn_families {
        let _ = writeln!(out, "# HELP relinkd_connection_{name} {help}.");
        let _ = writeln!(out, "# TYPE relinkd_connection_{name} {kind}");
        for c in &status.connections {
            let _ = writeln!(
                out,
                "relinkd_connection_{name}{{connection=\"{}\"}} {}",
                label(&c.name),
                value(c)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_help_and_type_and_labels_are_escaped() {
        let status = StatusResult {
            exports: Vec::new(),
            connections: vec![ConnectionStatus {
                name: "d\"0".into(),
                targets: Vec::new(),
                state: "ready".into(),
                session: SessionStatus {
                    state: "Established".into(),
                    recoveries: 2,
                    ..SessionStatus::default()
                },
                last_outages_secs: Vec::new(),
                bytes_read: 7,
                bytes_written: 0,
                in_flight: 0,
                nbd_socket: "/x".into(),
            }],
        };
        let text = render(&status);
        assert!(
            text.contains("relinkd_connection_recoveries_total{connection=\"d\\\"0\"} 2"),
            "{text}"
        );
        assert!(text.contains("relinkd_connection_bytes_read_total{connection=\"d\\\"0\"} 7"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let family = line.split('{').next().unwrap();
            assert!(text.contains(&format!("# TYPE {family} ")), "{family}");
            assert!(text.contains(&format!("# HELP {family} ")), "{family}");
        }
    }
}
