//! The client's one result, as text or one JSON object: the rates of a
//! successful run, the accounting of a failed one, or a stall.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use super::args::ClientArgs;
use super::client::ClientConn;
use super::output::{status_name, Lines};
use super::tally::Tally;
use super::STALL_TIMEOUT;

fn counts_text(m: &BTreeMap<&'static str, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn report_success(
    a: &ClientArgs,
    t: &Tally,
    elapsed: Duration,
    conn: &ClientConn,
    out: &mut Lines<'_>,
) -> std::io::Result<()> {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let bytes = t.ok * u64::from(a.size);
    let msgs_per_sec = t.ok as f64 / secs;
    let gb_per_sec = bytes as f64 / secs / 1e9;
    out.event(
        &format!(
            "{} {} messages of {} bytes (depth {}) to {} on {} in {secs:.3} s: \
             {msgs_per_sec:.0} msg/s, {gb_per_sec:.3} GB/s",
            a.op.name(),
            t.ok,
            a.size,
            a.depth,
            a.connect,
            conn.device
        ),
        json!({
            "result": "ok",
            "op": a.op.name(),
            "size": a.size,
            "depth": a.depth,
            "server": a.connect.to_string(),
            "device": conn.device.to_string(),
            "messages": t.ok,
            "bytes": bytes,
            "seconds": secs,
            "msgs_per_sec": msgs_per_sec,
            "gb_per_sec": gb_per_sec,
        }),
    )
}

pub(super) fn report_failure(
    a: &ClientArgs,
    t: &Tally,
    conn: &ClientConn,
    out: &mut Lines<'_>,
) -> std::io::Result<()> {
    let first = t.first_error.map(|(s, _)| status_name(s));
    let outstanding = t.outstanding_at_failure();
    let after = t.since_failure();
    let completed_after: u64 = after.values().sum();
    let lost = outstanding.saturating_sub(completed_after);
    let mut text = match t.first_error {
        Some((s, wr_id)) => format!(
            "error: first error status {} ({}) on request {wr_id}",
            status_name(s),
            s.name()
        ),
        None => "error: no request failed".to_string(),
    };
    if let Some(ev) = t.ended_by {
        text.push_str(&format!("; connection ended: {ev}"));
    }
    if let Some(e) = &t.post_error {
        text.push_str(&format!("; post failed: {e}"));
    }
    text.push_str(&format!(
        "\noutstanding when it failed: {}; completed since: {} ({}); {lost} lost\n\
         all completions: {} ({} posted, {} completed, {} successful {} bytes each)",
        outstanding,
        completed_after,
        counts_text(&after),
        counts_text(&t.by_status),
        t.posted,
        t.completed,
        t.ok,
        a.size
    ));
    out.event(
        &text,
        json!({
            "result": "error",
            "op": a.op.name(),
            "size": a.size,
            "depth": a.depth,
            "device": conn.device.to_string(),
            "first_error": first,
            "ended_by": t.ended_by,
            "post_error": t.post_error,
            "outstanding": outstanding,
            "completed_after": completed_after,
            "after_by_status": after,
            "lost": lost,
            "posted": t.posted,
            "completed": t.completed,
            "by_status": t.by_status,
        }),
    )
}

pub(super) fn report_stall(a: &ClientArgs, t: &Tally, out: &mut Lines<'_>) -> std::io::Result<()> {
    let secs = STALL_TIMEOUT.as_secs();
    let first = t.first_error.map(|(s, _)| status_name(s));
    out.event(
        &format!(
            "error: no completion for {secs} s with {} requests outstanding; giving up\n\
             first error status: {}; all completions: {} ({} posted, {} completed)",
            t.outstanding(),
            first.unwrap_or("none"),
            counts_text(&t.by_status),
            t.posted,
            t.completed
        ),
        json!({
            "result": "stalled",
            "op": a.op.name(),
            "stall_seconds": secs,
            "outstanding": t.outstanding(),
            "first_error": first,
            "posted": t.posted,
            "completed": t.completed,
            "by_status": t.by_status,
        }),
    )
}
