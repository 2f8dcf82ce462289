//! The measurement loop of the client: keep `--depth` requests posted,
//! reap completions, watch for the connection's end, and stop when the
//! amount is done, a request failed, or completions stalled.

use anyhow::Context as _;
use relink_fabric::{
    AsyncEvent, CmEvent, CmEventKind, ErrorClass, Event, Provider, RemoteAddr, SendOp, SendWr,
};

use super::args::{ClientArgs, Op};
use super::client::ClientConn;
use super::output::{cm_event_name, Lines};
use super::report::{report_failure, report_stall, report_success};
use super::tally::Tally;
use super::{EXIT_STALLED, EXIT_TRAFFIC_ERROR, POLL_BATCH, STALL_TIMEOUT, TICK};

pub(super) fn traffic(
    p: &dyn Provider,
    a: &ClientArgs,
    conn: &ClientConn,
    out: &mut Lines<'_>,
) -> anyhow::Result<i32> {
    let qp = conn.res.qp;
    let slots = u64::from((conn.remote.len / a.size).max(1));
    let make_wr = |n: u64| {
        let op = match a.op {
            Op::Send => SendOp::Send,
            Op::Write => SendOp::Write {
                remote: RemoteAddr {
                    addr: conn.remote.addr + (n % slots) * u64::from(a.size),
                    rkey: conn.remote.rkey,
                },
            },
        };
        SendWr::new(n, op, conn.res.sge(a.size))
    };
    let depth = u64::from(a.depth);
    let start = p.now();
    let end_posting = a.amount.duration.map(|d| start + d);
    let mut t = Tally::default();
    let mut running = false;
    let mut last_progress = start;
    let mut finished_at = start;
    let mut wcs = Vec::with_capacity(POLL_BATCH);
    let mut batch = Vec::with_capacity(a.depth as usize);
    loop {
        let now = p.now();
        // Post up to the depth while there is more to do.
        let posting = !t.failed() && end_posting.is_none_or(|e| now < e);
        if posting {
            let room = depth - t.outstanding();
            let left = a.amount.iters.map_or(u64::MAX, |n| n - t.posted);
            let n = room.min(left);
            if n > 0 {
                batch.clear();
                batch.extend((t.posted..t.posted + n).map(make_wr));
                let (accepted, err) = match p.post_send(qp, &batch) {
                    Ok(()) => (n, None),
                    Err(e) => (e.posted() as u64, Some(e)),
                };
                if accepted > 0 && t.outstanding() == 0 {
                    last_progress = now;
                }
                t.posted += accepted;
                if let Some(e) = err {
                    if e.class() != ErrorClass::Retryable {
                        t.post_error = Some(e.to_string());
                    }
                }
            }
        }
        // Reap completions.
        let mut reaped = false;
        loop {
            wcs.clear();
            let n = p
                .poll_cq(conn.res.cq, POLL_BATCH, &mut wcs)
                .context("cannot poll the CQ")?;
            if n == 0 {
                break;
            }
            last_progress = p.now();
            reaped = true;
            for wc in &wcs {
                t.complete(wc);
                if wc.status.is_ok() {
                    finished_at = last_progress;
                }
            }
            if !running && t.ok > 0 {
                running = true;
                out.raw("running")?;
            }
        }
        // Connection events.
        while let Some(ev) = p.poll_event() {
            let ended = match &ev {
                Event::Cm(CmEvent { id, kind }) if *id == conn.id => match kind {
                    CmEventKind::Disconnected | CmEventKind::DeviceRemoval => {
                        Some(cm_event_name(kind))
                    }
                    _ => None,
                },
                Event::Async {
                    event: AsyncEvent::CqErr(_),
                    ..
                } => Some("CQ_ERR"),
                Event::Async {
                    event: AsyncEvent::DeviceFatal,
                    ..
                } => Some("DEVICE_FATAL"),
                _ => None,
            };
            if let Some(name) = ended {
                t.ended_by.get_or_insert(name);
            }
        }
        let now = p.now();
        if t.failed() {
            if t.outstanding() == 0 {
                report_failure(a, &t, conn, out)?;
                return Ok(EXIT_TRAFFIC_ERROR);
            }
        } else {
            let done = match (a.amount.iters, end_posting) {
                (Some(n), _) => t.completed == n,
                (None, Some(e)) => now >= e && t.outstanding() == 0,
                (None, None) => unreachable!("clap requires --iters or --duration"),
            };
            if done {
                report_success(a, &t, finished_at.saturating_since(start), conn, out)?;
                return Ok(0);
            }
        }
        if t.outstanding() > 0 && now.saturating_since(last_progress) >= STALL_TIMEOUT {
            report_stall(a, &t, out)?;
            return Ok(EXIT_STALLED);
        }
        if reaped {
            // Slots freed: post again before sleeping (the wake-up these
            // completions caused may already have been used).
            continue;
        }
        let mut deadline = now + TICK;
        if let Some(e) = end_posting.filter(|e| *e > now) {
            deadline = deadline.min(e);
        }
        if t.outstanding() > 0 {
            deadline = deadline.min(last_progress + STALL_TIMEOUT);
        }
        p.wait(Some(deadline));
    }
}
